"""The leader's log cleaner (issue 31, docs/design/compaction.md): the
shell around :mod:`partlog.tiered.cleaner` for topics with
``cleanup.policy`` compact, run by the builder loop
(:mod:`partlog.broker.tiering`) after it built segments.

Only tiered segments are cleaned: the untiered tail (in WAL objects) is
Kafka's active segment, never cleaned; nor is anything at or past the
last stable offset (Kafka's first uncleanable offset is at most the LSO:
an open transaction's data may yet be aborted).  For each partition this
broker leads, a *pass* (Kafka's ``Cleaner.clean``):

1. the dirty rows are those at or past the partition's first dirty offset
   (Kafka's cleaner checkpoint; here in memory: a new leader starts with
   its whole tiered log dirty, which costs one more clean, nothing else)
   and wholly below the LSO;
   the pass starts when the dirty bytes are at least
   ``min.cleanable.dirty.ratio`` of the tiered bytes from the log start, or
   when the first dirty row holds a batch older than
   ``max.compaction.lag.ms``;
2. the offset map is built over the dirty rows, in order, each read whole,
   stopping before a row that holds a batch newer than
   ``min.compaction.lag.ms`` or whose keys would not fit the map;
3. the rows from the log start to the map's end are grouped (adjacent,
   their sizes adding up to at most the segment size) and each group is
   read, cleaned (its aborted transactions, as a READ_COMMITTED fetch of
   its range lists them, lose their data), built (``SegmentBuilder``),
   uploaded under a fresh id
   and swapped in (``MetadataStore.swap_to_segment(SegmentRewrite)``) if
   the broker still leads at the epoch of the pass; a group the clean does
   not shrink is left as it is;
4. once every group went in, the first dirty offset moves past the map.

A pass may span periods: it reads at most ``CLEANER_BYTES_PER_PERIOD_MAX``
per period over all partitions.  A failure (a read, a corrupt batch, an
upload, a refused swap) ends the pass, counted: nothing was swapped for
the failed group, and the next period starts a new pass from the store.
Old segments that lost their last reference are walmgr's (its gate);
an uploaded group whose swap was refused is an orphan, as the builder's.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from partlog.broker.metrics import BrokerMetrics
from partlog.kafka.errors import Errors
from partlog.kafka.records import AbortedTxn, FindBatchRequest, IsolationLevel, TopicIdPartition
from partlog.kafka.topic_config import TopicConfig
from partlog.replication.manager import ReplicaManager
from partlog.runtime import Clock, Entropy
from partlog.store import MetadataStore, Segment, StoreError
from partlog.store.compaction import SegmentRewrite
from partlog.tiered.cleaner import (
    DEDUPE_BUFFER_BYTES_DEFAULT,
    CleanerError,
    OffsetMap,
    TxnFilter,
    build_offset_map,
    clean_batch,
    keyed_records,
    split_batches,
)
from partlog.tiered.remote_storage import LOG_SUFFIX, ObjectStoreRsm, RemoteLogSegmentMetadata, RemoteStorageError
from partlog.tiered.segment import BuiltSegment, SegmentBuilder, SegmentConfig, check_batch
from partlog.wal.objectstore import ObjectStore

log = logging.getLogger(__name__)

# Bytes of segments read per period, over all partitions (each is read
# twice in a pass: for the map, then to clean it).
CLEANER_BYTES_PER_PERIOD_MAX = 256 << 20
# A cleaned segment is built in memory: groups add up to at most this.
CLEANED_SEGMENT_BYTES_MAX = 64 << 20
# A merged segment's time span is not a reason to split it (Kafka's
# groupSegmentsBySize looks at sizes only).
_SEGMENT_MS_UNBOUNDED = 2**63 - 1


@dataclass(slots=True)
class _Pass:
    epoch: int
    offset_map: OffsetMap
    map_end: int
    groups: list[list[Segment]] = field(default_factory=list)


def group_rows(rows: list[Segment], bytes_max: int) -> list[list[Segment]]:
    """Adjacent rows in groups whose sizes add up to at most ``bytes_max``
    (a row larger alone is a group alone)."""
    groups: list[list[Segment]] = []
    size = 0
    for r in rows:
        if groups and size + r.size <= bytes_max and groups[-1][-1].end_offset + 1 == r.start_offset:
            groups[-1].append(r)
            size += r.size
        else:
            groups.append([r])
            size = r.size
    return groups


def dirty_enough(dirty_bytes: int, total_bytes: int, ratio: float, forced: bool) -> bool:
    """Kafka's choice of a log to clean: dirty ratio at least
    ``min.cleanable.dirty.ratio``, or ``max.compaction.lag.ms`` passed."""
    return dirty_bytes > 0 and (forced or dirty_bytes >= ratio * total_bytes)


class LogCleaner:
    """One broker's cleaner (module doc)."""

    def __init__(
        self,
        broker_id: int,
        store: MetadataStore,
        replicas: ReplicaManager,
        objects: ObjectStore,
        rsm: Callable[[], ObjectStoreRsm],
        *,
        metrics: BrokerMetrics,
        clock: Clock,
        entropy: Entropy,
        dedupe_buffer_bytes: int = DEDUPE_BUFFER_BYTES_DEFAULT,
    ) -> None:
        self.broker_id = broker_id
        self.store = store
        self.replicas = replicas
        self.objects = objects
        # The builder's RSM, made once the broker knows its cluster id.
        self._rsm = rsm
        self.metrics = metrics
        self.clock = clock
        self.entropy = entropy
        self.dedupe_buffer_bytes = dedupe_buffer_bytes
        self._first_dirty: dict[TopicIdPartition, int] = {}
        self._passes: dict[TopicIdPartition, _Pass] = {}
        self._budget = 0

    async def run_once(self, partitions: list[tuple[TopicIdPartition, int]]) -> int:
        """One period over ``(partition, leader epoch)`` of compacted topics
        this broker leads; returns the cleaned segments swapped in."""
        self._budget = CLEANER_BYTES_PER_PERIOD_MAX
        led = {tp for tp, _ in partitions}
        for tp in [tp for tp in self._passes if tp not in led]:
            del self._passes[tp]
        swapped = 0
        for tp, epoch in partitions:
            if self._budget <= 0:
                break
            try:
                swapped += await self._clean(tp, epoch)
            except (CleanerError, RemoteStorageError, StoreError, OSError, ValueError) as e:
                # Nothing of the failed group was swapped; start again next period.
                self._passes.pop(tp, None)
                self.metrics.cleaner_errors.inc()
                log.warning("broker %d: cleaning %s failed: %s", self.broker_id, tp, e)
        return swapped

    async def _read(self, row: Segment) -> bytes:
        self._budget -= row.size
        data = await asyncio.to_thread(self.objects.get_range, row.object_key, 0, row.size)
        if len(data) != row.size:
            raise CleanerError(f"segment {row.object_key}: {len(data)} bytes, its row says {row.size}")
        self.metrics.cleaner_bytes_read.inc(row.size)
        return data

    def _aborted(self, tp: TopicIdPartition, start: int, end: int, size: int) -> list[AbortedTxn]:
        """The aborted transactions with data in ``[start, end]`` (rows of
        ``size`` bytes, below the LSO), as Fetch computes them: READ_COMMITTED
        FindBatches over the range (the store's aborted index, Kafka's
        ``collectAbortedTxns``).  An answer cut at the aborted transactions
        one fetch lists is continued from where it ended."""
        found: dict[AbortedTxn, None] = {}
        offset = start
        while offset <= end:
            [r] = self.store.find_batches([FindBatchRequest(tp, offset, size, IsolationLevel.READ_COMMITTED)], size)
            if r.errors != Errors.NONE or not r.batches:
                stable = r.last_stable_offset
                raise CleanerError(f"{tp}: no committed batch at {offset} ({r.errors.name}, LSO {stable})")
            found.update(dict.fromkeys(r.aborted))
            offset = r.batches[-1].metadata.last_offset + 1
        return list(found)

    async def _clean(self, tp: TopicIdPartition, epoch: int) -> int:
        try:
            config = self.store.topic_config(tp.topic_id)
        except KeyError:
            return 0
        if not config.compact:
            return 0
        p = self._passes.get(tp)
        if p is None or p.epoch != epoch:
            p = await self._start(tp, epoch, config)
            if p is None:
                return 0
            self._passes[tp] = p
            self.metrics.cleaner_runs.inc()
        swapped = 0
        while p.groups and self._budget > 0:
            if not await self._rewrite(tp, p, config, p.groups[0]):
                self._passes.pop(tp, None)
                return swapped
            p.groups.pop(0)
            swapped += 1
        if not p.groups:
            self._first_dirty[tp] = p.map_end + 1
            del self._passes[tp]
        return swapped

    async def _start(self, tp: TopicIdPartition, epoch: int, config: TopicConfig) -> _Pass | None:
        """A new pass: the offset map over the dirty rows (module doc)."""
        log_start = await asyncio.to_thread(self.store.log_start_offset, tp)
        stable = await asyncio.to_thread(self.store.last_stable_offset, tp)
        rows = [r for r in await asyncio.to_thread(self.store.segments, tp) if r.start_offset >= log_start]
        first_dirty = max(self._first_dirty.get(tp, 0), log_start)
        # Never at or past the LSO (Kafka's firstUncleanableDirtyOffset), nor after it.
        dirty = [r for r in rows if r.start_offset >= first_dirty]
        dirty = dirty[: next((i for i, r in enumerate(dirty) if r.end_offset >= stable), len(dirty))]
        if not dirty:
            return None
        now = self.clock.wall_ms()
        dirty_bytes, total = sum(r.size for r in dirty), sum(r.size for r in rows)
        by_ratio = dirty_enough(dirty_bytes, total, config.min_cleanable_dirty_ratio, forced=False)
        if not by_ratio and config.max_compaction_lag_ms > now:
            return None  # no batch can be older than max.compaction.lag.ms: no need to read one
        offset_map = OffsetMap(self.dedupe_buffer_bytes)
        map_end = -1
        for i, row in enumerate(dirty):
            if self._budget <= 0:
                break
            batches = list(split_batches(await self._read(row)))
            stamps = [t for t in (check_batch(b).max_timestamp for b in batches) if t >= 0]
            forced = bool(stamps) and min(stamps) <= now - config.max_compaction_lag_ms
            if i == 0 and not dirty_enough(dirty_bytes, total, config.min_cleanable_dirty_ratio, forced):
                return None
            if stamps and max(stamps) > now - config.min_compaction_lag_ms:
                break  # not cleanable yet, nor anything after it
            if keyed_records(batches) > offset_map.room():
                if i == 0:
                    raise CleanerError(f"the dedupe buffer ({self.dedupe_buffer_bytes} bytes) holds no whole segment")
                break
            txns = TxnFilter(await asyncio.to_thread(self._aborted, tp, row.start_offset, row.end_offset, row.size))
            build_offset_map(batches, offset_map, txns)
            map_end = row.end_offset
        if map_end < 0:
            return None
        cap = min(config.segment_bytes, CLEANED_SEGMENT_BYTES_MAX)
        groups = group_rows([r for r in rows if r.end_offset <= map_end], cap)
        return _Pass(epoch, offset_map, map_end, groups)

    async def _rewrite(self, tp: TopicIdPartition, p: _Pass, config: TopicConfig, group: list[Segment]) -> bool:
        """Clean, build, upload and swap one group; False when it did not go
        in (counted; the pass ends)."""
        now = self.clock.wall_ms()
        cleaned, removed = [], 0
        start, end, size = group[0].start_offset, group[-1].end_offset, sum(r.size for r in group)
        txns = TxnFilter(await asyncio.to_thread(self._aborted, tp, start, end, size))
        for row in group:
            for batch in split_batches(await self._read(row)):
                c = clean_batch(
                    batch, p.offset_map, now_ms=now, delete_retention_ms=config.delete_retention_ms, txns=txns
                )
                cleaned.append(c.data)
                removed += c.records_removed
        old_size = sum(r.size for r in group)
        if len(group) == 1 and sum(map(len, cleaned)) == old_size:
            return True  # nothing to remove here
        seg_config = SegmentConfig(
            segment_bytes=CLEANED_SEGMENT_BYTES_MAX,
            segment_ms=_SEGMENT_MS_UNBOUNDED,
            index_interval_bytes=config.index_interval_bytes,
            segment_index_bytes=config.segment_index_bytes,
        )
        builder = SegmentBuilder(seg_config)
        for batch in cleaned:
            builder.append(batch, now)  # a roll (ValueError) fails the pass
        built = builder.build()
        created_ms = self.clock.wall_ms()
        metadata = RemoteLogSegmentMetadata.for_segment(self.entropy.uuid4(), tp, built, created_ms)
        rsm = self._rsm()
        key = rsm.segment_key(metadata, LOG_SUFFIX)
        await asyncio.to_thread(rsm.copy_log_segment_data, metadata, built)
        if self.replicas.leader_epoch(tp) != p.epoch:
            log.info("broker %d: no longer leads %s; cleaned segment %s left as an orphan", self.broker_id, tp, key)
            return False
        req = _rewrite_request(tp, group, built, key, self.broker_id, cleaned)
        result = await asyncio.to_thread(self.store.swap_to_segment, req)
        if result.error != Errors.NONE:
            self.metrics.cleaner_errors.inc()
            log.warning("broker %d: cleaned swap of %s [%d, %d] refused (%s: %s); %s left as an orphan",
                        self.broker_id, tp, req.start_offset, req.end_offset, result.error.name, result.message,
                        key)  # fmt: skip
            return False
        self.metrics.cleaner_bytes_written.inc(built.log_size_bytes)
        self.metrics.cleaner_records_removed.inc(removed)
        log.info("broker %d: cleaned %s [%d, %d]: %d -> %d bytes, %d records removed, into %s", self.broker_id,
                 tp, req.start_offset, req.end_offset, old_size, built.log_size_bytes, removed, key)  # fmt: skip
        return True


def _rewrite_request(
    tp: TopicIdPartition, group: list[Segment], built: BuiltSegment, key: str, uploader: int, cleaned: list[bytes]
) -> SegmentRewrite:
    return SegmentRewrite(
        tp,
        group[0].start_offset,
        group[-1].end_offset,
        key,
        built.log_size_bytes,
        uploader,
        replaced=tuple(r.object_key for r in group),
        headers=tuple(c[:61] for c in cleaned),
    )


__all__ = [
    "CLEANED_SEGMENT_BYTES_MAX",
    "CLEANER_BYTES_PER_PERIOD_MAX",
    "LogCleaner",
    "dirty_enough",
    "group_rows",
]
