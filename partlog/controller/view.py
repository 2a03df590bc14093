r"""What both controller-fed metadata sources share: a view of cluster
metadata made of whole :class:`~partlog.controller.model.MetadataSnapshot`\ s,
served as a :class:`~partlog.controller.cluster_meta.MetadataSource`.

The embedded controller's client (:mod:`partlog.controller.client`) adopts
the snapshots it polls; the etcd one (:mod:`partlog.controller.etcd_meta`)
the snapshots of its watched :class:`~partlog.controller.etcd_layout.EtcdView`.
Routing (brokers, AZs, produce representatives) is delegated to a
:class:`~partlog.controller.cluster_meta.StaticMetadata` built from each
snapshot's alive brokers, so the rules live in one place.  Partitions are
looked up in the snapshot's topics directly: their replica lists may name
dead brokers, which ``StaticMetadata`` refuses.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import replace

from partlog.controller.cluster_meta import (
    NO_LEADER,
    BrokerInfo,
    MetadataError,
    PartitionInfo,
    StaticMetadata,
    TopicInfo,
    partition_of,
)
from partlog.controller.model import MetadataSnapshot
from partlog.kafka.records import TopicIdPartition

__all__ = ["ControllerUnavailableError", "SnapshotView"]

log = logging.getLogger(__name__)

# A failure's text kept for the next error message.
LAST_FAILURE_CHARS_MAX = 300


class ControllerUnavailableError(ConnectionError):
    """A bounded wait for the cluster's metadata ended without an answer."""


class SnapshotView:
    """The snapshot-backed half of a metadata source, and the background
    tasks and retry bookkeeping both sources share.  Subclasses set
    ``_cluster_id`` before adopting, define ``request_timeout_ms`` and the
    backoff bounds, and name where they get metadata (``_where``)."""

    request_timeout_ms: int
    retry_backoff_ms: int
    retry_backoff_max_ms: int

    def __init__(self, cluster_id: uuid.UUID | None) -> None:
        self._cluster_id = cluster_id
        self._version = -1
        self._routing: StaticMetadata | None = None
        self._topics: dict[uuid.UUID, TopicInfo] = {}
        self._deleted: frozenset[uuid.UUID] = frozenset()
        self._listeners: list[Callable[[], None]] = []
        self._view_changed = asyncio.Event()
        self.snapshots_received = 0
        self._tasks: set[asyncio.Task[None]] = set()
        # Calls that got no usable answer (unreachable, refused, malformed).
        self.failures = 0
        self.last_failure = ""

    def _where(self) -> str:
        """Where the metadata comes from, for messages."""
        raise NotImplementedError

    # ------------------------------------------------------ background work

    def _spawn(self, coro: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    @property
    def _log(self) -> logging.Logger:
        # The subclass's own logger: the CLIs quiet a source's retries by
        # its module's name (partlog.controller.client, ...etcd_meta).
        return logging.getLogger(type(self).__module__)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self._log.error("%s: metadata task failed", self._where(), exc_info=task.exception())

    @contextlib.asynccontextmanager
    async def _bounded(self, timeout_ms: int | None, what: str) -> AsyncIterator[None]:
        """Bound a retrying wait (one-shot tools); the error names the last failure."""
        try:
            async with asyncio.timeout(None if timeout_ms is None else timeout_ms / 1000):
                yield
        except TimeoutError:
            last = f" (last error: {self.last_failure})" if self.last_failure else ""
            raise ControllerUnavailableError(f"{self._where()}: no {what} within {timeout_ms} ms{last}") from None

    def _failed(self, what: str, e: BaseException) -> None:
        """Count and log a call that got no usable answer: a daemon retrying
        for ever must say so, once per attempt (the backoff bounds the rate)."""
        self.failures += 1
        self.last_failure = (str(e) or type(e).__name__)[:LAST_FAILURE_CHARS_MAX]
        self._log.warning("%s: %s failed (retrying): %s", self._where(), what, self.last_failure)

    def _backoff(self, attempt: int) -> float:
        # Capped exponent: 2**attempt must not grow without bound while retrying forever.
        return min(self.retry_backoff_ms * (1 << min(attempt, 30)), self.retry_backoff_max_ms) / 1000

    @property
    def version(self) -> int:
        """The version of the snapshot in use (-1 before the first)."""
        return self._version

    def _adopt(self, s: MetadataSnapshot) -> None:
        if s.cluster_id is not None and s.cluster_id != self._cluster_id:
            log.error("controller snapshot version %d refused: names cluster %s, not %s", s.version, s.cluster_id,
                      self._cluster_id)  # fmt: skip
            return
        try:
            assert self._cluster_id is not None  # a snapshot comes over a connection that named it
            routing = StaticMetadata(s.brokers, [], cluster_id=self._cluster_id) if s.brokers else None
        except MetadataError as e:
            log.error("controller snapshot version %d refused: %s", s.version, e)
            return
        self._routing = routing
        self._topics = {t.topic_id: t for t in s.topics}
        # Only grows: a deletion is final, and a snapshot that lacks one
        # (an older controller) must not bring a topic's references back.
        self._deleted = self._deleted | s.deleted_topics
        self._version = s.version
        self.snapshots_received += 1
        self._view_changed.set()
        self._view_changed = asyncio.Event()
        self._notify()

    def _notify(self) -> None:
        for fn in list(self._listeners):
            try:
                fn()
            except Exception:
                log.exception("metadata listener failed")

    # ------------------------------------------------------- MetadataSource

    def add_listener(self, fn: Callable[[], None]) -> None:
        self._listeners.append(fn)

    def partition(self, tp: TopicIdPartition) -> PartitionInfo | None:
        return partition_of(self._topics, tp)

    def leader_of(self, tp: TopicIdPartition) -> int | None:
        p = self.partition(tp)
        if p is None or p.leader == NO_LEADER:
            return None
        return p.leader

    def broker(self, broker_id: int) -> BrokerInfo | None:
        return None if self._routing is None else self._routing.broker(broker_id)

    def brokers(self) -> list[BrokerInfo]:
        return [] if self._routing is None else self._routing.brokers()

    def topics(self) -> list[TopicInfo]:
        return sorted(self._topics.values(), key=lambda t: t.name)

    def topic(self, name: str) -> TopicInfo | None:
        return next((t for t in self._topics.values() if t.name == name), None)

    def representative(self, leader_id: int, az: str) -> int:
        """``rep(L, z)`` over the alive brokers (``StaticMetadata``'s rule);
        the leader itself if it is not in the snapshot."""
        if self._routing is None or self._routing.broker(leader_id) is None:
            return leader_id
        return self._routing.representative(leader_id, az)

    def azs(self) -> list[str]:
        return [] if self._routing is None else self._routing.azs()

    def brokers_in(self, az: str) -> list[int]:
        return [] if self._routing is None else self._routing.brokers_in(az)

    def produce_target(self, tp: TopicIdPartition, client_az: str) -> int | None:
        leader = self.leader_of(tp)
        return None if leader is None else self.representative(leader, client_az)

    def _apply_partition(self, tp: TopicIdPartition, p: PartitionInfo) -> None:
        t = self._topics.get(tp.topic_id)
        if t is None or not 0 <= tp.partition < len(t.partitions):
            return
        if p.partition_epoch <= t.partitions[tp.partition].partition_epoch:
            return
        parts = list(t.partitions)
        parts[tp.partition] = p
        self._topics[tp.topic_id] = replace(t, partitions=tuple(parts))

    def topic_deleted(self, topic_id: uuid.UUID) -> bool:
        """True once the controller has said the topic is deleted: its
        partitions hold no references (walmgr), its logs go (brokers)."""
        return topic_id in self._deleted

    def deleted_topics(self) -> frozenset[uuid.UUID]:
        return self._deleted

    async def _view_until(self, done: Callable[[], bool]) -> None:
        """Wait until this view satisfies ``done`` (a change the controller
        made is here), at most ``request_timeout_ms``."""
        await self.wait_for(done, self.request_timeout_ms / 1000)

    async def _view_grown(self, grown: Mapping[uuid.UUID, int]) -> None:
        """Wait until this view holds topics ``{id: at least partitions}``
        (CreatePartitions; a topic deleted meanwhile counts as held), at
        most ``request_timeout_ms``."""

        def held(tid: uuid.UUID, n: int) -> bool:
            t = self._topics.get(tid)
            return t is None or t.num_partitions >= n

        await self._view_until(lambda: all(held(tid, n) for tid, n in grown.items()))

    async def wait_for(self, done: Callable[[], bool], timeout_s: float) -> bool:
        """Wait until ``done()`` holds for this view (tests, tools, the
        benchmark), at most ``timeout_s``; whether it held."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                while not done():
                    await self._view_changed.wait()
        return done()
