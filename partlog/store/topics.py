"""Topics and the cluster binding: create (and add partitions), alter configs,
delete; bind the store to one cluster id.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable

import msgpack

from partlog.kafka.records import (
    CreateTopicAndPartitionsRequest,
    TopicIdPartition,
)
from partlog.kafka.topic_config import TopicConfig
from partlog.store.base import Staged
from partlog.store.layout import (
    EPOCH_KEY,
    I64,
    U32,
    Part,
    Topic,
)
from partlog.store.log import LogMixin


class TopicsMixin(LogMixin):
    """Topics: create, alter configs, delete. See the module doc."""

    def create_topic_and_partitions(self, requests: Iterable[CreateTopicAndPartitionsRequest]) -> None:
        """Create topics and their partitions; idempotent for existing ones.

        A request for an existing topic with more partitions adds the missing
        ones (Kafka's CreatePartitions).  Raises ValueError for a bad request
        (negative partition count, invalid config), before anything changes.
        """
        reqs = list(requests)
        configs: list[TopicConfig] = []
        for r in reqs:
            if r.num_partitions <= 0:
                raise ValueError(f"topic {r.topic_name!r}: num_partitions must be > 0, got {r.num_partitions}")
            configs.append(TopicConfig().with_configs(r.configs))

        def fn(s: Staged) -> None:
            for r, cfg in zip(reqs, configs, strict=True):
                topic = s.topic(r.topic_id)
                if topic is not None:
                    if r.num_partitions <= topic.num_partitions:
                        continue
                    first = topic.num_partitions
                    topic = Topic(topic.name, r.num_partitions, topic.config)
                else:
                    first = 0
                    topic = Topic(r.topic_name, r.num_partitions, cfg)
                s.topics[r.topic_id] = topic
                s.wtxn.put(
                    r.topic_id.bytes,
                    msgpack.packb([topic.name, topic.num_partitions, topic.config.to_configs()]),
                    db=self._db_topics,
                )
                for p in range(first, r.num_partitions):
                    tp = TopicIdPartition(r.topic_id, p)
                    part_id = s.next_id(b"next_part_id")
                    s.wtxn.put(r.topic_id.bytes + U32.pack(p), U32.pack(part_id), db=self._db_tp)
                    s.wtxn.put(EPOCH_KEY.pack(part_id, 0), I64.pack(0), db=self._db_epochs)
                    s.parts[tp] = Part(part_id, tp, 0, 0, 0, 0, 0, 0, -1, -1, -1)

        self._write(fn)

    def alter_topic_configs(self, topic_id: uuid.UUID, configs: dict[str, str | int]) -> None:
        """Change topic configs (Kafka names); raises KeyError for an unknown topic."""

        def fn(s: Staged) -> None:
            topic = s.topic(topic_id)
            if topic is None:
                raise KeyError(f"unknown topic {topic_id}")
            topic = Topic(topic.name, topic.num_partitions, topic.config.with_configs(configs))
            s.topics[topic_id] = topic
            s.wtxn.put(
                topic_id.bytes,
                msgpack.packb([topic.name, topic.num_partitions, topic.config.to_configs()]),
                db=self._db_topics,
            )

        self._write(fn)

    def delete_topics(self, topic_ids: Iterable[uuid.UUID]) -> None:
        """Delete topics: their logs, producer states, epochs and file references."""
        ids = set(topic_ids)

        def fn(s: Staged) -> None:
            for tid in ids:
                topic = s.topic(tid)
                if topic is None:
                    continue
                for p in range(topic.num_partitions):
                    tp = TopicIdPartition(tid, p)
                    part = s.part(tp)
                    if part is None:
                        continue
                    self._drop_entries(s, part, until_offset=None)
                    self._drop_prefix_keys(s.wtxn, self._db_producers, U32.pack(part.part_id))
                    for k in {k for k in (*self._producers, *s.producers) if k[0] == part.part_id}:
                        s.producers[k] = None
                    self._drop_prefix_keys(s.wtxn, self._db_epochs, U32.pack(part.part_id))
                    s.wtxn.delete(U32.pack(part.part_id), db=self._db_parts)
                    s.wtxn.delete(tid.bytes + U32.pack(p), db=self._db_tp)
                    s.parts[tp] = None
                s.wtxn.delete(tid.bytes, db=self._db_topics)
                s.topics[tid] = None

        self._write(fn)
