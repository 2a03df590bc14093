"""Topics: create (and add partitions), alter configs, delete; and the
cluster id the store is bound to.

Each function runs inside an exclusive write (a
:class:`~partlog.store.staged.Staged`); deleting a topic removes its
partitions' logs (releasing their file references), producer states,
leader epochs and transactions in the same transaction; a partition this
broker no longer replicates is dropped the same way and created anew,
empty (:class:`PartitionDrops`).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from partlog import injected_bugs
from partlog.kafka.records import CreateTopicAndPartitionsRequest, TopicIdPartition
from partlog.kafka.topic_config import TopicConfig
from partlog.store.catalog import Catalog
from partlog.store.epochs import EpochCache
from partlog.store.layout import KEY_CLUSTER_ID, StoreError, Topic
from partlog.store.log import LogChunks
from partlog.store.producers import ProducerTable
from partlog.store.staged import Staged
from partlog.store.txns import TxnTable


def bind_cluster_id(s: Staged, meta_db: Any, cluster_id: uuid.UUID, path: str) -> None:
    """Record ``cluster_id`` in the store's meta database; StoreError if
    another was bound meanwhile (by another caller)."""
    raw = s.txn.get(KEY_CLUSTER_ID, db=meta_db)
    if raw is not None and bytes(raw) != cluster_id.bytes:
        raise StoreError(f"{path}: store belongs to cluster {uuid.UUID(bytes=bytes(raw))}, not to cluster {cluster_id}")
    s.txn.put(KEY_CLUSTER_ID, cluster_id.bytes, db=meta_db)


def configs_of(reqs: list[CreateTopicAndPartitionsRequest]) -> list[TopicConfig]:
    """Each request's topic config; ValueError for a bad request (a partition
    count not above zero, an invalid config), before anything changes."""
    configs: list[TopicConfig] = []
    for r in reqs:
        if r.num_partitions <= 0:
            raise ValueError(f"topic {r.topic_name!r}: num_partitions must be > 0, got {r.num_partitions}")
        configs.append(TopicConfig().with_configs(r.configs))
    return configs


def create_topics(
    s: Staged,
    catalog: Catalog,
    epochs: EpochCache,
    reqs: list[CreateTopicAndPartitionsRequest],
    configs: list[TopicConfig],
) -> None:
    """Create topics and partitions; a request for an existing topic adds
    the partitions it lacks (Kafka's CreatePartitions)."""
    for r, cfg in zip(reqs, configs, strict=True):
        topic = s.topic(r.topic_id)
        if topic is not None:
            if r.num_partitions <= topic.num_partitions or injected_bugs.on("broker_skips_added_partitions"):
                continue
            first = topic.num_partitions
            topic = Topic(topic.name, r.num_partitions, topic.config)
        else:
            first = 0
            topic = Topic(r.topic_name, r.num_partitions, cfg)
        s.topics[r.topic_id] = topic
        catalog.put_topic(s.txn, r.topic_id, topic)
        for p in range(first, r.num_partitions):
            add_partition(s, catalog, epochs, TopicIdPartition(r.topic_id, p))


def add_partition(s: Staged, catalog: Catalog, epochs: EpochCache, tp: TopicIdPartition) -> None:
    """A new, empty partition under a new id."""
    part_id = s.next_id(b"next_part_id")
    part = catalog.add_partition(s.txn, tp, part_id)
    epochs.start(s.txn, part_id)
    s.parts[tp] = part


def alter_topic(s: Staged, catalog: Catalog, topic_id: uuid.UUID, configs: dict[str, str | int]) -> None:
    """Change a topic's configs (Kafka names); KeyError for an unknown topic."""
    topic = s.topic(topic_id)
    if topic is None:
        raise KeyError(f"unknown topic {topic_id}")
    topic = Topic(topic.name, topic.num_partitions, topic.config.with_configs(configs))
    s.topics[topic_id] = topic
    catalog.put_topic(s.txn, topic_id, topic)


@dataclass(frozen=True, slots=True)
class PartitionDrops:
    """The components a partition's log lives in, to drop it whole: for a
    deleted topic, or for a partition this broker no longer replicates."""

    catalog: Catalog
    log: LogChunks
    producers: ProducerTable
    epochs: EpochCache
    txns: TxnTable

    def renew(self, s: Staged, tps: Iterable[TopicIdPartition]) -> list[TopicIdPartition]:
        """Replace each partition that holds anything (entries, or a log
        start moved) by a new, empty one, as its topic's creation made it:
        its entries' and segment rows' references are released (noted by the
        release grace, :mod:`~partlog.store.release_grace`), its producer
        states, epochs and transactions go, its HWM becomes 0.  A broker that
        is a replica again later fetches it all anew.  Returns the renewed."""
        renewed = []
        for tp in tps:
            part = s.part(tp)
            if part is None or part.log_end_offset == part.log_start_offset == 0:
                continue  # unknown, or as created: nothing to release
            self.drop(s, tp)
            add_partition(s, self.catalog, self.epochs, tp)
            s.hwms[tp] = (0, True)  # lowers the in-memory HWM of the old log
            renewed.append(tp)
        return renewed

    def drop(self, s: Staged, tp: TopicIdPartition) -> None:
        """Delete the partition: its log (releasing its file references), producer states, epochs, transactions."""
        part = s.part(tp)
        if part is None:
            return
        self.log.drop_below(s.txn, part, None)
        self.producers.drop(s.txn, part.part_id)
        for k in self.producers.keys_of(part.part_id, s.producers):
            s.producers[k] = None
        self.epochs.drop(s.txn, part.part_id)
        self.txns.drop(s.txn, part.part_id)
        s.txns[part.part_id] = b""
        self.catalog.delete_partition(s.txn, part)
        s.parts[tp] = None


def delete_topics(s: Staged, drops: PartitionDrops, ids: Iterable[uuid.UUID]) -> None:
    """Delete topics: their logs, producer states, epochs and file references."""
    for tid in ids:
        topic = s.topic(tid)
        if topic is None:
            continue
        for p in range(topic.num_partitions):
            drops.drop(s, TopicIdPartition(tid, p))
        drops.catalog.delete_topic(s.txn, tid)
        s.topics[tid] = None
