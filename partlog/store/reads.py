"""Reads for consumers and tools: FindBatches, ListOffsets, log bounds and
the high watermark, partition listings, and the leader's side of
replication (``read_log``).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence

import msgpack

from partlog.kafka.errors import Errors
from partlog.kafka.records import (
    BatchInfo,
    BatchMetadata,
    FindBatchRequest,
    FindBatchResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    LogRead,
    ReplicatedEntry,
    TopicIdPartition,
)
from partlog.kafka.topic_config import TopicConfig
from partlog.store.layout import (
    U32,
    U64,
    CorruptEntryError,
    Entry,
    OffsetOutOfRangeError,
    Part,
)
from partlog.store.log import LogMixin
from partlog.store.view import Txn, overlay_file

# One logger for the whole store: operators filter on partlog.store.
log = logging.getLogger("partlog.store")


class ReadsMixin(LogMixin):
    """Reads: FindBatches, ListOffsets, log bounds, ``read_log``. See the module doc."""

    def topic_config(self, topic_id: uuid.UUID) -> TopicConfig:
        with self._read() as txn:
            raw = txn.get(topic_id.bytes, db=self._db_topics)
        if raw is None:
            raise KeyError(f"unknown topic {topic_id}")
        return TopicConfig().with_configs(msgpack.unpackb(raw)[2])

    def _batch_info(self, txn: Txn, tp: TopicIdPartition, e: Entry, keys: dict[int, str]) -> BatchInfo:
        object_key = keys.get(e.file_id)
        if object_key is None:
            raw = txn.get(U64.pack(e.file_id), db=self._db_file_ids)
            if raw is not None:
                object_key = bytes(raw).decode()
            else:
                new = overlay_file(txn, e.file_id)
                if new is None:
                    raise CorruptEntryError(f"partition {tp} offset {e.base_offset}: unknown file_id {e.file_id}")
                object_key = new[0]
            keys[e.file_id] = object_key
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
            ),
        )

    def find_batches(self, requests: Sequence[FindBatchRequest], fetch_max_bytes: int) -> list[FindBatchResponse]:
        """Coordinates of the batches a fetch at each request's offset returns.

        As Kafka (KIP-74): batches up to the high watermark, within each
        request's ``max_partition_fetch_bytes`` and ``fetch_max_bytes`` overall,
        but the first batch of the first partition that has data is returned
        even if it exceeds both, so consumers always progress.  As Kafka's
        ``LocalLog.read``, an offset in [HWM, log end] gets an empty answer
        and only one past the log end is out of range: a new leader whose HWM
        still lags the old one's must not send consumers into an offset reset.
        """
        out: list[FindBatchResponse] = []
        remaining = fetch_max_bytes
        min_one = True
        keys: dict[int, str] = {}
        with self._read() as txn:
            for req in requests:
                part = self._read_part(txn, req.topic_id_partition)
                if part is None:
                    out.append(FindBatchResponse(Errors.UNKNOWN_TOPIC_OR_PARTITION, (), -1, -1))
                    continue
                lso, hwm = part.log_start_offset, part.high_watermark
                if req.offset < lso or req.offset > part.log_end_offset:
                    out.append(FindBatchResponse(Errors.OFFSET_OUT_OF_RANGE, (), lso, hwm))
                    continue
                if req.offset >= hwm:
                    out.append(FindBatchResponse(Errors.NONE, (), lso, hwm))
                    continue
                limit = min(req.max_partition_fetch_bytes, remaining)
                found: list[BatchInfo] = []
                used = 0
                try:
                    first = self._entry_containing(txn, part, req.offset)
                    if first is None:
                        raise CorruptEntryError(f"partition {part.tp}: no entry holds offset {req.offset}")
                    for _, e in self._entries(txn, part, first[1].base_offset):
                        if e.last_offset >= hwm:
                            break
                        if used + e.size > limit and not (min_one and not found):
                            break
                        found.append(self._batch_info(txn, part.tp, e, keys))
                        used += e.size
                except CorruptEntryError as e:
                    log.error("corrupt metadata entry: %s", e)
                    out.append(FindBatchResponse(Errors.CORRUPT_MESSAGE, (), lso, hwm, str(e)))
                    continue
                if found:
                    min_one = False
                remaining = max(0, remaining - used)
                out.append(FindBatchResponse(Errors.NONE, tuple(found), lso, hwm))
        return out

    def list_offsets(self, requests: Sequence[ListOffsetsRequest]) -> list[ListOffsetsResponse]:
        """Kafka ListOffsets at batch granularity (see design.md)."""
        out: list[ListOffsetsResponse] = []
        with self._read() as txn:
            for req in requests:
                tp = req.topic_id_partition
                part = self._read_part(txn, tp)
                if part is None:
                    out.append(ListOffsetsResponse(Errors.UNKNOWN_TOPIC_OR_PARTITION, tp, -1, -1))
                    continue
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
                    hit = self._entry_containing(txn, part, best_off)
                    if hit is None or hit[1].last_offset >= part.high_watermark:
                        return -1, -1
                return best_ts, max(best_off, part.log_start_offset)
            best_ts, best_off, best_last = -1, -1, -1
            for _, e in self._entries(txn, part):
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
        first = self._entry_containing(txn, part, part.log_start_offset)
        if first is None:
            return -1, -1
        # g(x) = "the first entry at or after offset x has running max >= target"
        # is monotonic in x; find the smallest such x in [first base, HWM].
        lo, hi = first[1].base_offset, part.high_watermark
        while lo < hi:
            mid = (lo + hi) // 2
            hit = next(self._entries(txn, part, mid), None)
            if hit is None or hit[1].last_offset >= part.high_watermark or hit[1].running_max_timestamp >= target:
                hi = mid
            else:
                lo = hit[1].base_offset + 1
        hit = next(self._entries(txn, part, lo), None)
        if hit is None or hit[1].last_offset >= part.high_watermark:
            return -1, -1
        e = hit[1]
        if e.effective_timestamp < target:
            # Running max was raised by batches deleted before the log start:
            # scan forward for the first batch that reaches target itself.
            for _, later in self._entries(txn, part, e.base_offset):
                if later.last_offset >= part.high_watermark:
                    return -1, -1
                if later.effective_timestamp >= target:
                    e = later
                    break
            else:
                return -1, -1
        return e.effective_timestamp, max(e.base_offset, part.log_start_offset)

    def log_end_offset(self, tp: TopicIdPartition) -> int:
        """The partition's log end offset, from memory: no transaction.  On a
        leader it includes commits sequenced but not yet durable (at most two
        groups ahead).  KeyError for an unknown partition."""
        return self._known_part(tp).log_end_offset

    def log_start_offset(self, tp: TopicIdPartition) -> int:
        """The partition's log start offset, from memory.  KeyError for an
        unknown partition."""
        return self._known_part(tp).log_start_offset

    def high_watermark(self, tp: TopicIdPartition) -> int:
        """The effective high watermark (persisted or set in memory, whichever
        is ahead, capped at the log end), from memory.  KeyError for an
        unknown partition."""
        return self._effective_hwm(self._known_part(tp))

    def read_log(
        self, tp: TopicIdPartition, from_offset: int, max_bytes: int, max_entries: int | None = None
    ) -> LogRead:
        """The leader's side of a follower fetch: entries from ``from_offset``
        (the batch holding it, if it falls inside one) in offset order, above
        the HWM too (followers replicate everything).  At least one entry if
        there is any, then as many as keep the referenced batch bytes within
        ``max_bytes`` and the count within ``max_entries`` (what a fetch
        response carries).  One read transaction, so the entries and the offsets
        returned with them are one snapshot.

        Raises :class:`OffsetOutOfRangeError` when ``from_offset`` is below
        the log start or past the log end, KeyError for an unknown partition.
        """
        with self._read() as txn:
            part = self._read_part(txn, tp)
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
                first = self._entry_containing(txn, part, from_offset)
                if first is None:
                    raise CorruptEntryError(f"partition {tp}: no entry holds offset {from_offset}")
                # file_id -> (object key, uploader, file size): entries of one
                # WAL object come in runs, so each is looked up once.
                files: dict[int, tuple[str, int, int]] = {}
                used = 0
                for _, e in self._entries(txn, part, first[1].base_offset):
                    if out and (used + e.size > max_bytes or (max_entries is not None and len(out) >= max_entries)):
                        break
                    f = files.get(e.file_id)
                    if f is None:
                        f = files[e.file_id] = self._file_of(txn, tp, e)
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
        with self._read() as txn:
            return [Part.unpack(U32.unpack(k)[0], v).tp for k, v in txn.cursor(db=self._db_parts)]

    def topics(self) -> dict[uuid.UUID, tuple[str, int]]:
        """topic_id -> (name, number of partitions) of every topic, from the
        durable state (so a ``readonly`` store in another process sees them)."""
        with self._read() as txn:
            out: dict[uuid.UUID, tuple[str, int]] = {}
            for k, v in txn.cursor(db=self._db_topics):
                name, n, _ = msgpack.unpackb(v)
                out[uuid.UUID(bytes=bytes(k))] = (str(name), int(n))
            return out

    def partition_state(self, tp: TopicIdPartition) -> dict[str, int]:
        """log_start_offset, log_end_offset, high_watermark, leader_epoch, live_batches, live_bytes."""
        with self._read() as txn:
            part = self._read_part(txn, tp)
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
