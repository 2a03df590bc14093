"""What the Kafka front end needs of its broker: :class:`BrokerPort`.

The front end (the listener, the APIs, the group coordinator) speaks Kafka's
protocol and maps it onto this port; it never sees the broker's store,
replica manager or config.  :class:`partlog.broker.server.Broker` implements
it, and :mod:`partlog.node` hands a broker to its listener, so this package
imports nothing from :mod:`partlog.broker` and a test can serve the front end
from a fake.

Reads of a partition's log (offsets, epochs) are of this broker's replica;
they answer for partitions it holds a replica of (``serves``) and are only
asked for those.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol

from partlog.controller.cluster_meta import MetadataSource
from partlog.controller.dynamic_configs import DynamicConfigSource
from partlog.kafka.errors import Errors
from partlog.kafka.records import FindBatchRequest, ListOffsetsRequest, TopicIdPartition, TxnMarkerRequest
from partlog.kafka.topic_config import TopicConfig
from partlog.produce.pipeline import BatchResult
from partlog.runtime import Clock, Entropy


class BrokerPort(Protocol):
    """One broker, as its Kafka listener sees it."""

    @property
    def broker_id(self) -> int: ...

    @property
    def clock(self) -> Clock:
        """The broker's clock: the front's deadlines and group timers run on it."""
        ...

    @property
    def entropy(self) -> Entropy:
        """The broker's entropy: group member ids."""
        ...

    @property
    def az(self) -> str:
        """This broker's AZ (Kafka's broker.rack)."""
        ...

    @property
    def min_insync_replicas(self) -> int: ...

    @property
    def metadata(self) -> MetadataSource:
        """The cluster metadata now (a new source when it is replaced)."""
        ...

    @property
    def dynamic_configs(self) -> DynamicConfigSource:
        """The cluster's BROKER and GROUP resources' configs (Kafka's dynamic configs)."""
        ...

    @property
    def topic_index(self) -> Mapping[str, tuple[uuid.UUID, int]]:
        """Topics by name: (topic id, partitions), rebuilt when the metadata
        changes, not per request."""
        ...

    async def produce(
        self,
        batches: Sequence[tuple[TopicIdPartition, bytes]],
        *,
        acks: int,
        timeout_ms: int,
        urgent: bool = False,
        transactional_id: str | None = None,
    ) -> list[BatchResult]:
        """Produce to any partition (through this broker's WAL buffer);
        ``urgent`` (a coordinator's record) closes the open WAL file now;
        with a ``transactional_id`` the leaders verify the transaction's
        first batches with its coordinator (KIP-890 part 1)."""
        ...

    async def fetch(
        self, reqs: list[FindBatchRequest], *, max_wait_ms: int, min_bytes: int, max_bytes: int
    ) -> dict[str, Any]:
        """Read partitions this broker holds a replica of, with long-poll:
        ``{"partitions": [[error, hwm, log start, records, message, last stable
        offset, [[producer id, first offset] of aborted transactions]], ...]}``."""
        ...

    async def fetch_routed(
        self, reqs: list[FindBatchRequest], *, max_wait_ms: int, min_bytes: int, max_bytes: int, az: str | None = None
    ) -> list[list[Any]]:
        """``fetch`` for any partition, read here or from a replica in ``az``
        (or the leader): one row per request, shaped as ``fetch``'s."""
        ...

    async def list_offsets_routed(self, reqs: list[ListOffsetsRequest]) -> list[tuple[Errors, int, int]]:
        """ListOffsets answered by each partition's leader: (error, timestamp, offset)."""
        ...

    async def on_leaders(
        self, method: str, items: list[tuple[TopicIdPartition, list[Any]]], failed: list[Any]
    ) -> list[list[Any]]:
        """Ask each partition's leader the broker RPC ``method``: one answer
        row per item, ``failed`` where the leader is unknown or unreachable."""
        ...

    async def write_txn_markers(self, markers: Sequence[TxnMarkerRequest], *, timeout_ms: int) -> list[Errors]:
        """Each marker appended by its partition's leader and replicated (acks=all);
        per marker its error (NOT_LEADER_OR_FOLLOWER etc. are retriable)."""
        ...

    def add_marker_listener(self, fn: Callable[[TopicIdPartition, int, bool, int], None]) -> None:
        """fn(tp, producer_id, committed, offset) is called on this broker
        after a marker this broker leads for ``tp`` is appended at ``offset``
        and replicated (the group coordinator applies or drops pending offsets)."""
        ...

    def set_txn_verifier(
        self,
        verify: Callable[[str, int, int, Sequence[TopicIdPartition]], Awaitable[list[Errors]]],
        locate: Callable[[str], int | None],
    ) -> None:
        """KIP-890 part 1: ``verify(transactional id, producer id, epoch,
        partitions)`` answers a leader's question for the ids this broker
        coordinates (per partition: NONE when in the open transaction);
        ``locate(transactional id)`` names the coordinator's broker."""
        ...

    def set_txn_coordinator(
        self,
        init_producer_id: Callable[[str, int, tuple[int, int] | None], Awaitable[tuple[Errors, int, int]]],
        add_partitions: Callable[[str, int, int, Sequence[TopicIdPartition]], Awaitable[list[Errors]]],
        end_txn: Callable[[str, int, int, bool], Awaitable[Errors]],
    ) -> None:
        """``partlog.client``'s transactional producer reaches this broker's
        transaction coordinator over the broker RPC: InitProducerId
        (transactional id, timeout ms, current (id, epoch) or None),
        AddPartitionsToTxn (one error per partition) and EndTxn."""
        ...

    async def init_producer_id(self) -> int | None:
        """A new producer id, or None when none can be had now (retriable)."""
        ...

    def topic_config(self, topic_id: uuid.UUID) -> TopicConfig: ...

    def compacted(self, topic_id: uuid.UUID) -> bool:
        """The topic's cleanup.policy has compact (from memory: produce asks it)."""
        ...

    def serves(self, tp: TopicIdPartition) -> bool:
        """This broker holds a replica of ``tp`` (leader or follower)."""
        ...

    def leader_epoch(self, tp: TopicIdPartition) -> int | None:
        """``tp``'s leader epoch when this broker leads it, else None."""
        ...

    def leader_epoch_cache(self, tp: TopicIdPartition) -> list[tuple[int, int]]:
        """(epoch, start offset) of this replica's log, oldest first."""
        ...

    def log_start_offset(self, tp: TopicIdPartition) -> int: ...

    def log_end_offset(self, tp: TopicIdPartition) -> int: ...

    def high_watermark(self, tp: TopicIdPartition) -> int: ...

    def new_data(self) -> asyncio.Event:
        """An event set the next time entries become visible on this broker
        (a commit landed, a high watermark moved); take it before reading
        what it guards, then wait."""
        ...


__all__ = ["BrokerPort"]
