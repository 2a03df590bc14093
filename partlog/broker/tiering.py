"""The leader's builder loop (issue 31, docs/design/tiered.md "The builder
loop"): committed batches move out of shared WAL objects into per-partition
segments.

Every ``interval_ms``, for each partition this broker leads whose topic has
``remote.storage.enable=true``:

1. plan (:func:`partlog.tiered.planner.plan_segment`) from the store's
   segment rows (the next untiered offset: the last row's end + 1, or the
   log start), its HWM and its entries;
2. for a closed range, read its batches: the store's coordinates, one
   ranged GET per WAL object, the stored headers spliced in (the fetch
   path's ``plan_reads`` and ``assemble``), fed to ``SegmentBuilder``;
3. upload with ``ObjectStoreRsm.copy_log_segment_data`` under a fresh
   segment id (in a thread);
4. if still the leader at the same epoch, ``swap_to_segment`` (in a thread:
   an exclusive write), which repoints the range's entries at the ``.log``.

A failure leaves the store as it was and the next period starts again from
it: an upload that fails is retried with a new segment id (nothing is ever
overwritten); a swap refused (retention moved: OFFSET_OUT_OF_RANGE; any
other refusal) or skipped (leadership moved) leaves the uploaded objects as
an orphan, which nothing references.  walmgr's gate for segments (not yet
built) is what will delete orphans.

Work per period is bounded: ``SEGMENTS_PER_PERIOD_MAX`` segments and
``BYTES_PER_PERIOD_MAX`` bytes, built by ``SEGMENT_BUILDS_IN_FLIGHT_MAX``
partitions at once; a segment is built in memory, so it is
at most ``SEGMENT_BYTES_BUILD_MAX`` whatever the topic's segment.bytes.

After the builder, each period, the log cleaner
(:class:`partlog.broker.cleaner.LogCleaner`) cleans the segments of
compacted topics (``cleanup.policy`` compact, which implies tiering).

The loop is started only once some topic enables tiering (at broker start,
or when :meth:`Tiering.ensure_started` is called after a config change):
a broker whose topics never enable it runs no task at all.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from partlog.broker.cleaner import LogCleaner
from partlog.broker.metrics import BrokerMetrics
from partlog.broker.tasks import Tasks
from partlog.fetch.reads import assemble, plan_reads
from partlog.kafka.batch_header import BatchHeader
from partlog.kafka.errors import Errors
from partlog.kafka.records import FindBatchRequest, TopicIdPartition
from partlog.kafka.topic_config import TopicConfig
from partlog.replication.manager import ReplicaManager
from partlog.runtime import Clock, Entropy
from partlog.store import MetadataStore, OffsetOutOfRangeError, SegmentSwap, StoreError
from partlog.tiered.planner import PLAN_ENTRIES_MAX, EntryShape, SegmentPlan, plan_segment
from partlog.tiered.remote_storage import (
    LOG_SUFFIX,
    TIERED_PREFIX_DEFAULT,
    ObjectStoreRsm,
    RemoteLogSegmentMetadata,
)
from partlog.tiered.segment import BuiltSegment, SegmentBuilder, SegmentConfig, SegmentFormatError
from partlog.wal.objectstore import ObjectStore

log = logging.getLogger(__name__)

# How often the loop looks for closed segments.
TIERING_INTERVAL_MS_DEFAULT = 1_000
# Work per period, over all partitions.
SEGMENTS_PER_PERIOD_MAX = 8
BYTES_PER_PERIOD_MAX = 256 << 20
# Partitions built at once in a period: one build is a GET per WAL object,
# three PUTs in a row and a swap, so one at a time caps a broker at about
# 1.5 segments/s (simulations/tiering.py found 10k partitions need more).
# Memory stays within BYTES_PER_PERIOD_MAX; one partition's segments are
# still built in order, each from the rows the last one left.
SEGMENT_BUILDS_IN_FLIGHT_MAX = 4
# A segment is built in memory: at most this, whatever segment.bytes says.
SEGMENT_BYTES_BUILD_MAX = 64 << 20
# read_log's byte bound when planning: entries only, no data is read, so
# only the count (PLAN_ENTRIES_MAX + 1) matters.
_PLAN_READ_BYTES = 1 << 62


@dataclass(slots=True)
class _Budget:
    """What is left of one period's work, shared by its workers."""

    segments: int
    bytes: int


@dataclass(frozen=True, slots=True)
class _Work:
    tp: TopicIdPartition
    epoch: int
    config: SegmentConfig


def segment_config(config: TopicConfig) -> SegmentConfig:
    """The builder's settings for a topic: its segment.* configs, the
    segment's size capped at ``SEGMENT_BYTES_BUILD_MAX``."""
    return SegmentConfig(
        segment_bytes=min(config.segment_bytes, SEGMENT_BYTES_BUILD_MAX),
        segment_ms=config.segment_ms,
        index_interval_bytes=config.index_interval_bytes,
        segment_index_bytes=config.segment_index_bytes,
    )


class Tiering:
    """One broker's builder loop (module doc)."""

    def __init__(
        self,
        broker_id: int,
        store: MetadataStore,
        replicas: ReplicaManager,
        objects: ObjectStore,
        *,
        metrics: BrokerMetrics,
        tasks: Tasks,
        clock: Clock,
        entropy: Entropy,
        stopping: Callable[[], bool],
        cluster_id: Callable[[], uuid.UUID | None],
        interval_ms: int = TIERING_INTERVAL_MS_DEFAULT,
        prefix: str = TIERED_PREFIX_DEFAULT,
    ) -> None:
        if interval_ms <= 0:
            raise ValueError(f"tiering interval {interval_ms} ms: must be > 0")
        self.broker_id = broker_id
        self.store = store
        self.replicas = replicas
        self.objects = objects
        # The segment keys name the broker's cluster, known once it listens.
        self._prefix = prefix
        self._cluster_id = cluster_id
        self._rsm: ObjectStoreRsm | None = None
        # Compacted topics' cleaner, after the builder each period.
        self.cleaner = LogCleaner(
            broker_id, store, replicas, objects, lambda: self.rsm, metrics=metrics, clock=clock, entropy=entropy
        )
        self.metrics = metrics
        self.tasks = tasks
        self.clock = clock
        self.entropy = entropy
        self.interval_ms = interval_ms
        self._stopping = stopping
        self._started = False
        # Round robin over the partitions, so a budget spent early in one
        # period does not starve the same partitions every period.
        self._cursor = 0
        # tp -> (next untiered offset, when first seen): the age of a first
        # batch without a timestamp.
        self._first_seen: dict[TopicIdPartition, tuple[int, int]] = {}
        # The topics with cleanup.policy compact, as of the last store read
        # (at start, on a config change, each period): the Kafka front's
        # produce asks it for every batch, too often for a store read.
        self.compacted_topics: frozenset[uuid.UUID] = frozenset()

    @property
    def started(self) -> bool:
        return self._started

    @property
    def rsm(self) -> ObjectStoreRsm:
        """The broker's RSM, its keys naming the broker's cluster (a loop
        before the broker knows it fails that pass: no key without one)."""
        if self._rsm is None:
            cluster = self._cluster_id()
            if cluster is None:
                raise RuntimeError(f"broker {self.broker_id}: no cluster id yet, no segment key")
            self._rsm = ObjectStoreRsm(self.objects, self._prefix, cluster_id=cluster)
        return self._rsm

    def ensure_started(self) -> bool:
        """Start the loop if some topic enables tiering and it is not running
        yet (a short store read); True when it runs."""
        enabled = self._enabled_partitions()  # (refreshes compacted_topics too)
        if not self._started and not self._stopping() and enabled:
            self._started = True
            self.tasks.spawn(self._run())
            log.info("broker %d: tiering started, every %d ms", self.broker_id, self.interval_ms)
        return self._started

    def _enabled_partitions(self) -> dict[TopicIdPartition, SegmentConfig]:
        """The partitions of topics with remote.storage.enable, and their
        segment settings (this broker's leadership not checked)."""
        out: dict[TopicIdPartition, SegmentConfig] = {}
        compacted = set()
        for topic_id, (_, partitions) in self.store.topics().items():
            try:
                config = self.store.topic_config(topic_id)
            except KeyError:
                continue  # deleted meanwhile
            if config.compact:
                compacted.add(topic_id)
            if config.tiered:
                seg = segment_config(config)
                for p in range(partitions):
                    out[TopicIdPartition(topic_id, p)] = seg
        self.compacted_topics = frozenset(compacted)
        return out

    async def _run(self) -> None:
        while not self._stopping():
            await asyncio.sleep(self.interval_ms / 1000)
            try:
                await self.run_once()
            except Exception:  # the loop outlives one bad pass: the next one starts from the store again
                self.metrics.tiered_pass_errors.inc()
                log.exception("broker %d: tiering pass failed", self.broker_id)

    async def run_once(self) -> int:
        """One period: returns the segments swapped in."""
        enabled = await asyncio.to_thread(self._enabled_partitions)
        work = []
        for tp, config in enabled.items():
            epoch = self.replicas.leader_epoch(tp)
            if epoch is not None:
                work.append(_Work(tp, epoch, config))
        for tp in [tp for tp in self._first_seen if tp not in enabled]:
            del self._first_seen[tp]
        if not work:
            return 0
        self._cursor = (self._cursor + 1) % len(work)
        work = work[self._cursor :] + work[: self._cursor]
        budget = _Budget(SEGMENTS_PER_PERIOD_MAX, BYTES_PER_PERIOD_MAX)
        pending = iter(work)  # shared by the workers, in round-robin order

        async def worker() -> int:
            done = 0
            for w in pending:
                # Several segments of one partition in a row (a backlog),
                # within the period's budget.
                while budget.segments > 0 and budget.bytes > 0 and not self._stopping():
                    plan = await asyncio.to_thread(self._plan, w)
                    # Checked again: another worker may have spent the rest
                    # while this one planned (no await from here to the spend).
                    if plan is None or budget.segments <= 0 or budget.bytes <= 0:
                        break
                    budget.segments -= 1
                    budget.bytes -= plan.size_bytes
                    if not await self._tier(w, plan):
                        break
                    done += 1
            return done

        workers = min(SEGMENT_BUILDS_IN_FLIGHT_MAX, len(work))
        swapped = sum(await asyncio.gather(*(worker() for _ in range(workers))))
        await self.cleaner.run_once([(w.tp, w.epoch) for w in work])
        return swapped

    def _plan(self, w: _Work) -> SegmentPlan | None:
        """The next closed segment of ``w.tp`` (in a thread: store reads)."""
        tp = w.tp
        try:
            rows = self.store.segments(tp)
            start = max(rows[-1].end_offset + 1 if rows else 0, self.store.log_start_offset(tp))
            hwm = self.store.high_watermark(tp)
            if start >= hwm:
                return None
            read = self.store.read_log(tp, start, _PLAN_READ_BYTES, PLAN_ENTRIES_MAX + 1)
        except (KeyError, OffsetOutOfRangeError):
            return None  # deleted, or retention moved: the next period sees the new state
        now = self.clock.wall_ms()
        seen = self._first_seen.get(tp)
        if seen is None or seen[0] != start:
            seen = self._first_seen[tp] = (start, now)
        shapes = []
        for e in read.entries:
            h = BatchHeader.parse(e.header)
            shapes.append(EntryShape(e.base_offset, e.last_offset, e.size, h.max_timestamp, h.partition_leader_epoch))
        return plan_segment(start, min(hwm, read.high_watermark), shapes, w.config, now, first_seen_ms=seen[1])

    async def _tier(self, w: _Work, plan: SegmentPlan) -> bool:
        """Build, upload and swap one planned segment; False when it did
        not go in (logged and counted; the next period retries)."""
        tp = w.tp
        built = await self._build(w, plan)
        if built is None:
            return False
        # The copy attempt's time goes into its keys: the leader's swap
        # deadline and walmgr's age gate measure from it (tiered.md).
        created_ms = self.clock.wall_ms()
        metadata = RemoteLogSegmentMetadata.for_segment(self.entropy.uuid4(), tp, built, created_ms)
        key = self.rsm.segment_key(metadata, LOG_SUFFIX)
        try:
            await asyncio.to_thread(self.rsm.copy_log_segment_data, metadata, built)
        except Exception as e:  # the next period retries under a new segment id
            self.metrics.tiered_upload_errors.inc()
            log.warning("broker %d: segment upload of %s [%d, %d] failed: %s", self.broker_id, tp,
                        built.base_offset, built.next_offset - 1, e)  # fmt: skip
            return False
        self.metrics.tiered_segments.inc()
        if self.replicas.leader_epoch(tp) != w.epoch:
            self.metrics.tiered_swaps.labels(outcome="not_leader").inc()
            log.info("broker %d: no longer leads %s at epoch %d; segment %s left as an orphan", self.broker_id, tp,
                     w.epoch, key)  # fmt: skip
            return False
        swap = SegmentSwap(tp, built.base_offset, built.next_offset - 1, key, built.log_size_bytes, self.broker_id)
        try:
            result = await asyncio.to_thread(self.store.swap_to_segment, swap)
        except StoreError as e:
            self.metrics.tiered_swaps.labels(outcome="store_error").inc()
            log.warning("broker %d: swap of %s failed: %s; segment %s left as an orphan", self.broker_id, tp, e, key)
            return False
        outcome = "ok" if result.error == Errors.NONE else result.error.name.lower()
        self.metrics.tiered_swaps.labels(outcome=outcome).inc()
        if result.error != Errors.NONE:
            log.warning("broker %d: swap of %s refused (%s: %s); segment %s left as an orphan", self.broker_id, tp,
                        result.error.name, result.message, key)  # fmt: skip
            return False
        self.metrics.tiered_bytes.inc(built.log_size_bytes)
        log.info("broker %d: tiered %s [%d, %d] (%d bytes, %s) into %s", self.broker_id, tp, built.base_offset,
                 built.next_offset - 1, built.log_size_bytes, plan.reason.value, key)  # fmt: skip
        return True

    async def _build(self, w: _Work, plan: SegmentPlan) -> BuiltSegment | None:
        """The segment of ``plan``: its batches read (one GET per WAL object),
        the stored headers spliced in, fed to the builder."""
        tp = w.tp
        req = FindBatchRequest(tp, plan.start_offset, plan.size_bytes)
        [found] = await asyncio.to_thread(self.store.find_batches, [req], plan.size_bytes)
        batches = [b for b in found.batches if b.metadata.last_offset <= plan.end_offset]
        if (
            found.errors != Errors.NONE
            or not batches
            or batches[0].metadata.base_offset != plan.start_offset
            or batches[-1].metadata.last_offset != plan.end_offset
            or sum(b.metadata.byte_size for b in batches) != plan.size_bytes
        ):
            # Retention or a new leader moved the log since the plan.
            log.info("broker %d: %s changed since its plan [%d, %d] (%s); next period", self.broker_id, tp,
                     plan.start_offset, plan.end_offset, found.errors.name)  # fmt: skip
            return None
        reads = plan_reads(batches)
        got = await asyncio.gather(*(self._read(r.key, r.offset, r.length) for r in reads))
        [data] = assemble({tp: batches}, {r.key: g for r, g in zip(reads, got, strict=True)})
        if data.error != Errors.NONE or len(data.records) != plan.size_bytes:
            self.metrics.tiered_read_errors.inc()
            log.warning("broker %d: reading %s [%d, %d] for a segment failed: %s", self.broker_id, tp,
                        plan.start_offset, plan.end_offset, data.error_message or "short read")  # fmt: skip
            return None
        builder = SegmentBuilder(w.config)
        now = self.clock.wall_ms()
        position = 0
        try:
            for b in batches:
                batch = data.records[position : position + b.metadata.byte_size]
                position += b.metadata.byte_size
                reason = builder.roll_reason(batch, now)
                if reason is not None:
                    # The planner mirrors the builder's rules; were they to
                    # disagree, the builder's word holds: a shorter segment.
                    log.error("broker %d: %s: the builder rolls at %d (%s), the plan ran to %d", self.broker_id,
                              tp, b.metadata.base_offset, reason.value, plan.end_offset)  # fmt: skip
                    break
                builder.append(batch, now)
        except SegmentFormatError as e:
            self.metrics.tiered_read_errors.inc()
            log.warning("broker %d: %s [%d, %d]: not segment batches: %s", self.broker_id, tp, plan.start_offset,
                        plan.end_offset, e)  # fmt: skip
            return None
        return builder.build()

    async def _read(self, key: str, offset: int, length: int) -> tuple[int, bytes] | BaseException:
        try:
            return offset, await asyncio.to_thread(self.objects.get_range, key, offset, length)
        except Exception as e:  # assemble answers it as a failed read
            return e


__all__ = [
    "BYTES_PER_PERIOD_MAX",
    "SEGMENTS_PER_PERIOD_MAX",
    "SEGMENT_BUILDS_IN_FLIGHT_MAX",
    "SEGMENT_BYTES_BUILD_MAX",
    "TIERING_INTERVAL_MS_DEFAULT",
    "Tiering",
    "segment_config",
]
