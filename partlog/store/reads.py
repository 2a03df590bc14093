"""Reads for consumers and tools: FindBatches, ListOffsets, log bounds, the
high watermark and the last stable offset, partition listings, and the
leader's side of replication (``read_log``).

READ_COMMITTED (Kafka's fetch isolation TXN_COMMITTED) reads up to the LSO
and answers the aborted transactions of what it returns; an inline entry (a
marker) is answered with its synthesized control batch
(:attr:`BatchMetadata.inline <partlog.kafka.records.BatchMetadata.inline>`).

:class:`LogReader` owns no state: each read opens one view (LMDB plus the
journal's overlay, :mod:`partlog.store.view`) and asks the components.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence

from partlog.kafka.control_batch import control_batch
from partlog.kafka.errors import Errors
from partlog.kafka.records import (
    AbortedTxn,
    BatchInfo,
    BatchMetadata,
    FindBatchRequest,
    FindBatchResponse,
    IsolationLevel,
    ListOffsetsRequest,
    ListOffsetsResponse,
    LogRead,
    ReplicatedEntry,
    TopicIdPartition,
)
from partlog.kafka.topic_config import TopicConfig
from partlog.limits import ABORTED_TXNS_PER_FETCH_MAX
from partlog.store.catalog import Catalog
from partlog.store.epochs import EpochCache
from partlog.store.index import FileIndex
from partlog.store.layout import CorruptEntryError, Entry, OffsetOutOfRangeError, Part, inline_marker
from partlog.store.log import LogChunks
from partlog.store.txns import TxnTable, collect_aborted, last_stable_offset
from partlog.store.view import Txn, Views
from partlog.wal.key import SegmentKeyError, parse_segment_key

log = logging.getLogger(__name__)


def within_aborted_max(
    found: list[BatchInfo], aborted: list[AbortedTxn]
) -> tuple[list[BatchInfo], tuple[AbortedTxn, ...]]:
    """A READ_COMMITTED answer whose aborted transactions fit
    ``ABORTED_TXNS_PER_FETCH_MAX``: when more overlap the range, the range
    ends before the first offset of the first transaction beyond the bound,
    so every aborted transaction of what is returned is still listed.  When
    even the first batch needs more (more than the bound of producers with
    transactions open across it), it is answered alone with all of them; the
    RPC's answer schema refuses that answer (the fetch fails closed, never
    shows an aborted record)."""
    if len(aborted) <= ABORTED_TXNS_PER_FETCH_MAX:
        return found, tuple(aborted)
    cut = sorted(a.first_offset for a in aborted)[ABORTED_TXNS_PER_FETCH_MAX]
    kept = [b for b in found if b.metadata.last_offset < cut] or found[:1]
    upper = kept[-1].metadata.last_offset + 1
    return kept, tuple(a for a in aborted if a.first_offset < upper)


class LogReader:
    """The store's reads (see the module doc); a ``readonly`` store keeps
    no caches, so it answers log bounds from a view too."""

    def __init__(
        self,
        views: Views,
        *,
        catalog: Catalog,
        log: LogChunks,
        index: FileIndex,
        epochs: EpochCache,
        txns: TxnTable,
        readonly: bool,
    ) -> None:
        self._views = views
        self._txns = txns
        # For metrics: READ_COMMITTED reads whose range was cut to list at
        # most ABORTED_TXNS_PER_FETCH_MAX aborted transactions.
        self.stats = {"aborted_ranges_cut": 0}
        self._catalog = catalog
        self._log = log
        self._index = index
        self._epochs = epochs
        self._readonly = readonly

    def topic_config(self, topic_id: uuid.UUID) -> TopicConfig:
        with self._views.read() as txn:
            return self._catalog.topic_config(txn, topic_id)

    def _batch_info(self, txn: Txn, tp: TopicIdPartition, e: Entry, keys: dict[int, str]) -> BatchInfo:
        inline = b""
        if e.is_inline:
            object_key = ""
            inline = control_batch(e.raw_header, *inline_marker(e.byte_offset))
        else:
            known = keys.get(e.file_id)
            if known is None:
                known = keys[e.file_id] = self._index.object_key(txn, tp, e)
            object_key = known
        h = e.header
        return BatchInfo(
            e.batch_id,
            object_key,
            BatchMetadata(
                tp,
                e.byte_offset,
                e.size,
                e.base_offset,
                e.last_offset,
                e.log_append_time,
                e.batch_max_timestamp,
                h.timestamp_type,
                h.producer_id,
                h.producer_epoch,
                h.base_sequence,
                h.last_sequence,
                h.partition_leader_epoch,
                e.raw_header,
                inline,
            ),
        )

    def find_batches(self, requests: Sequence[FindBatchRequest], fetch_max_bytes: int) -> list[FindBatchResponse]:
        """FindBatches, as :meth:`partlog.store.MetadataStore.find_batches` documents."""
        out: list[FindBatchResponse] = []
        remaining = fetch_max_bytes
        min_one = True
        keys: dict[int, str] = {}
        with self._views.read() as txn:
            for req in requests:
                part = self._catalog.read_part(txn, req.topic_id_partition)
                if part is None:
                    out.append(FindBatchResponse(Errors.UNKNOWN_TOPIC_OR_PARTITION, (), -1, -1))
                    continue
                lso, hwm = part.log_start_offset, part.high_watermark
                stable = last_stable_offset(self._txns.read(txn, part.part_id), lso, hwm)
                if req.offset < lso or req.offset > part.log_end_offset:
                    out.append(FindBatchResponse(Errors.OFFSET_OUT_OF_RANGE, (), lso, hwm))
                    continue
                committed = req.isolation == IsolationLevel.READ_COMMITTED
                # READ_COMMITTED reads up to the LSO (Kafka's TXN_COMMITTED
                # fetch isolation), the rest up to the HWM.
                bound = stable if committed else hwm
                if req.offset >= bound:
                    out.append(FindBatchResponse(Errors.NONE, (), lso, hwm, None, stable))
                    continue
                limit = min(req.max_partition_fetch_bytes, remaining)
                found: list[BatchInfo] = []
                used = 0
                aborted: tuple[AbortedTxn, ...] = ()
                try:
                    first = self._log.entry_containing(txn, part, req.offset)
                    if first is None:
                        raise CorruptEntryError(f"partition {part.tp}: no entry holds offset {req.offset}")
                    for _, e in self._log.entries(txn, part, first[1].base_offset):
                        if e.last_offset >= bound:
                            break
                        if used + e.size > limit and not (min_one and not found):
                            break
                        found.append(self._batch_info(txn, part.tp, e, keys))
                        used += e.size
                    if committed and found:
                        # Kafka's collectAbortedTransactions(fetchOffset,
                        # upperBoundOffset): up to the end of what is returned.
                        upper = found[-1].metadata.last_offset + 1
                        records = self._txns.aborted(txn, part.part_id, req.offset)
                        listed = collect_aborted(records, req.offset, upper)
                        if len(listed) > ABORTED_TXNS_PER_FETCH_MAX:
                            self.stats["aborted_ranges_cut"] += 1
                        found, aborted = within_aborted_max(found, listed)
                        used = sum(b.metadata.byte_size for b in found)
                except CorruptEntryError as e:
                    log.error("corrupt metadata entry: %s", e)
                    out.append(FindBatchResponse(Errors.CORRUPT_MESSAGE, (), lso, hwm, str(e)))
                    continue
                if found:
                    min_one = False
                remaining = max(0, remaining - used)
                out.append(FindBatchResponse(Errors.NONE, tuple(found), lso, hwm, None, stable, aborted))
        return out

    def last_stable_offset(self, tp: TopicIdPartition) -> int:
        """The LSO, from memory (a ``readonly`` store: from a view)."""
        if self._readonly:
            with self._views.read() as txn:
                part = self._catalog.read_part(txn, tp)
                if part is None:
                    raise KeyError(f"unknown partition {tp}")
                raw = self._txns.read(txn, part.part_id)
                return last_stable_offset(raw, part.log_start_offset, part.high_watermark)
        part = self.known_part(tp)
        raw = self._txns.cache.get(part.part_id)
        if raw is None:
            with self._views.read() as txn:
                raw = bytes(self._txns.read(txn, part.part_id) or b"")
        return last_stable_offset(raw, part.log_start_offset, self._catalog.effective_hwm(part))

    def list_offsets(self, requests: Sequence[ListOffsetsRequest]) -> list[ListOffsetsResponse]:
        """ListOffsets, as :meth:`partlog.store.MetadataStore.list_offsets` documents."""
        out: list[ListOffsetsResponse] = []
        with self._views.read() as txn:
            for req in requests:
                tp = req.topic_id_partition
                part = self._catalog.read_part(txn, tp)
                if part is None:
                    out.append(ListOffsetsResponse(Errors.UNKNOWN_TOPIC_OR_PARTITION, tp, -1, -1))
                    continue
                if req.isolation == IsolationLevel.READ_COMMITTED:
                    # Kafka's lastFetchableOffset: what a read_committed
                    # consumer may read ends at the LSO, not the HWM.
                    raw = self._txns.read(txn, part.part_id)
                    part.high_watermark = last_stable_offset(raw, part.log_start_offset, part.high_watermark)
                try:
                    ts, offset = self._list_offset(txn, part, req.timestamp)
                except CorruptEntryError as e:
                    log.error("corrupt metadata entry: %s", e)
                    out.append(ListOffsetsResponse(Errors.CORRUPT_MESSAGE, tp, -1, -1))
                    continue
                out.append(ListOffsetsResponse(Errors.NONE, tp, ts, offset))
        return out

    def _list_offset(self, txn: Txn, part: Part, target: int) -> tuple[int, int]:
        if target == ListOffsetsRequest.EARLIEST_TIMESTAMP:
            return -1, part.log_start_offset
        if target == ListOffsetsRequest.LATEST_TIMESTAMP:
            return -1, part.high_watermark
        if target == ListOffsetsRequest.MAX_TIMESTAMP:
            # As Kafka's Partition.fetchOffsetForTimestamp: the batch holding
            # the log's largest timestamp, or nothing while it is not below
            # the HWM (only possible when the owner drives the HWM).
            if part.max_timestamp_offset == -1:
                return -1, -1
            if part.max_timestamp_offset >= 0:
                best_ts, best_off = part.max_timestamp, part.max_timestamp_offset
                if part.high_watermark < part.log_end_offset:
                    hit = self._log.entry_containing(txn, part, best_off)
                    if hit is None or hit[1].last_offset >= part.high_watermark:
                        return -1, -1
                return best_ts, max(best_off, part.log_start_offset)
            best_ts, best_off, best_last = -1, -1, -1
            for _, e in self._log.entries(txn, part):
                if e.effective_timestamp > best_ts:
                    best_ts, best_off, best_last = e.effective_timestamp, e.base_offset, e.last_offset
            if best_off < 0 or best_last >= part.high_watermark:
                return -1, -1
            return best_ts, max(best_off, part.log_start_offset)
        if target < 0:
            return -1, -1
        return self._offset_for_timestamp(txn, part, target)

    def _offset_for_timestamp(self, txn: Txn, part: Part, target: int) -> tuple[int, int]:
        """First batch (below the HWM) whose max timestamp >= target.

        Entries carry the running max of timestamps, which is monotonic, so a
        binary search over offsets finds the first entry whose running max
        reaches ``target``.  Only if batches before the log start pushed the
        running max up does the answer need a forward scan.
        """
        first = self._log.entry_containing(txn, part, part.log_start_offset)
        if first is None:
            return -1, -1
        # g(x) = "the first entry at or after offset x has running max >= target"
        # is monotonic in x; find the smallest such x in [first base, HWM].
        lo, hi = first[1].base_offset, part.high_watermark
        while lo < hi:
            mid = (lo + hi) // 2
            hit = next(self._log.entries(txn, part, mid), None)
            if hit is None or hit[1].last_offset >= part.high_watermark or hit[1].running_max_timestamp >= target:
                hi = mid
            else:
                lo = hit[1].base_offset + 1
        hit = next(self._log.entries(txn, part, lo), None)
        if hit is None or hit[1].last_offset >= part.high_watermark:
            return -1, -1
        e = hit[1]
        if e.effective_timestamp < target:
            # Running max was raised by batches deleted before the log start:
            # scan forward for the first batch that reaches target itself.
            for _, later in self._log.entries(txn, part, e.base_offset):
                if later.last_offset >= part.high_watermark:
                    return -1, -1
                if later.effective_timestamp >= target:
                    e = later
                    break
            else:
                return -1, -1
        return e.effective_timestamp, max(e.base_offset, part.log_start_offset)

    def segment_row_keys(self, object_keys: Sequence[str]) -> set[str]:
        """The segment keys of ``object_keys`` that a ``segments`` row of the
        partition their key names holds: a reference even where no entry
        names the object (a markers-only range has a row, no file-index
        entry).  All of the partition's rows are compared, not only the one
        at the key's start offset, so a row that moved cannot hide one."""
        by_part: dict[TopicIdPartition, list[str]] = {}
        for k in object_keys:
            try:
                parsed = parse_segment_key(k)
            except SegmentKeyError:
                continue
            by_part.setdefault(TopicIdPartition(parsed.topic_id, parsed.partition), []).append(k)
        found: set[str] = set()
        with self._views.read() as txn:
            for tp, keys in by_part.items():
                part = self._catalog.parts.get(tp)
                if part is not None:
                    rows = {row.object_key for row in self._log.segments(txn, part)}
                    found.update(k for k in keys if k in rows)
        return found

    def known_part(self, tp: TopicIdPartition) -> Part:
        """The partition's state from memory (a ``readonly`` store: from a
        view); KeyError for an unknown partition."""
        if self._readonly:
            # A read-only store keeps no caches: read what is durable.
            with self._views.read() as txn:
                part = self._catalog.read_part(txn, tp)
        else:
            part = self._catalog.parts.get(tp)
        if part is None:
            raise KeyError(f"unknown partition {tp}")
        return part

    def version_is(self, version: object) -> bool:
        """Whether ``version`` (a :class:`Part`, ``partition_version``'s token)
        is still the partition's state: a lookup by its own ``tp``, the
        catalog's key, hits by identity, where another instance of the
        partition is compared in Python (a leader asks for every quiet
        partition of every replica fetch).  A ``readonly`` store: never."""
        if not isinstance(version, Part) or self._readonly:
            return False
        return self._catalog.parts.get(version.tp) is version

    def read_log(
        self, tp: TopicIdPartition, from_offset: int, max_bytes: int, max_entries: int | None = None
    ) -> LogRead:
        """A follower fetch's entries, as :meth:`partlog.store.MetadataStore.read_log` documents."""
        with self._views.read() as txn:
            part = self._catalog.read_part(txn, tp)
            if part is None:
                raise KeyError(f"unknown partition {tp}")
            lso, leo = part.log_start_offset, part.log_end_offset
            if not lso <= from_offset <= leo:
                raise OffsetOutOfRangeError(
                    f"partition {tp}: offset {from_offset} is outside the log [{lso}, {leo}]",
                    log_start_offset=lso,
                    log_end_offset=leo,
                )
            out: list[ReplicatedEntry] = []
            if from_offset < leo:
                first = self._log.entry_containing(txn, part, from_offset)
                if first is None:
                    raise CorruptEntryError(f"partition {tp}: no entry holds offset {from_offset}")
                # file_id -> (object key, uploader, file size): entries of one
                # WAL object come in runs, so each is looked up once.
                files: dict[int, tuple[str, int, int]] = {}
                used = 0
                for _, e in self._log.entries(txn, part, first[1].base_offset):
                    if out and (used + e.size > max_bytes or (max_entries is not None and len(out) >= max_entries)):
                        break
                    f = files.get(e.file_id)
                    if f is None:
                        # An inline entry (a marker) has no WAL object: ""
                        # tells the follower, its byte_offset holds the marker.
                        f = files[e.file_id] = ("", -1, 0) if e.is_inline else self._index.file_of(txn, tp, e)
                    out.append(
                        ReplicatedEntry(
                            e.raw_header,
                            f[0],
                            e.byte_offset,
                            e.size,
                            e.log_append_time,
                            e.batch_max_timestamp,
                            f[1],
                            f[2],
                        )
                    )
                    used += e.size
            return LogRead(tuple(out), lso, leo, part.high_watermark, part.leader_epoch)

    def partitions(self) -> list[TopicIdPartition]:
        with self._views.read() as txn:
            return self._catalog.partitions(txn)

    def topics(self) -> dict[uuid.UUID, tuple[str, int]]:
        with self._views.read() as txn:
            return self._catalog.topic_names(txn)

    def leader_epoch_cache(self, tp: TopicIdPartition) -> list[tuple[int, int]]:
        with self._views.read() as txn:
            part = self._catalog.read_part(txn, tp)
            if part is None:
                raise KeyError(f"unknown partition {tp}")
            return self._epochs.entries(txn, part.part_id)

    def latest_leader_epochs(self, tps: Sequence[TopicIdPartition]) -> list[int]:
        """The newest epoch of each partition's cache (-1: empty), for the
        replica fetches of every partition: ids from memory, one view and
        one cursor step each, where :meth:`leader_epoch_cache` reads the
        state and every entry.  KeyError for an unknown partition."""
        part_ids = [self.known_part(tp).part_id for tp in tps]
        with self._views.read() as txn:
            return self._epochs.latest(txn, part_ids)

    def partition_state(self, tp: TopicIdPartition) -> dict[str, int]:
        """log_start_offset, log_end_offset, high_watermark, leader_epoch, live_batches, live_bytes."""
        with self._views.read() as txn:
            part = self._catalog.read_part(txn, tp)
        if part is None:
            raise KeyError(f"unknown partition {tp}")
        return {
            "log_start_offset": part.log_start_offset,
            "log_end_offset": part.log_end_offset,
            "high_watermark": part.high_watermark,
            "leader_epoch": part.leader_epoch,
            "live_batches": part.live_batches,
            "live_bytes": part.live_bytes,
        }
