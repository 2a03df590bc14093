"""A small, independent reference model of Kafka partitions, for model-based tests.

This is written from Kafka's rules (``UnifiedLog``, ``ProducerStateManager`` /
``ProducerAppendInfo`` for client appends, ``LogValidator``, segment retention)
and from design.md, NOT from partlog's code: it keeps plain Python lists and
dicts, reads batches with kafka-python's record parser, and recomputes CRCs
over whole batches.  It shares only partlog's request/response record types,
so answers can be compared with ``==``.

What it models (per design.md; HWM == log end offset until replication):

* per partition: the live batches (base, last, size, object key, effective
  timestamp, ...), log start offset, log end offset, leader epoch;
* per (partition, producer id): epoch, the last 5 batches (first/last sequence,
  base offset, log append time) and the last timestamp, for expiry;
* per object key: live batches and bytes (``file_usage``).
"""

from __future__ import annotations

import itertools
import struct
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from kafka.record.default_records import DefaultRecordBatch
from kafka.record.util import calc_crc32c

from partlog.kafka.errors import Errors
from partlog.kafka.records import (
    BatchInfo,
    BatchMetadata,
    CommitBatchRequest,
    CommitBatchResponse,
    DeleteRecordsResponse,
    FileUsage,
    FindBatchRequest,
    FindBatchResponse,
    ListOffsetsResponse,
    TimestampType,
    TopicIdPartition,
)

# Kafka constants, from Kafka (not from partlog).
SEQUENCE_MODULUS = 2**31  # sequences are non-negative int32 and wrap to 0 after 2^31-1
NUM_BATCHES_TO_RETAIN = 5  # ProducerStateEntry.NUM_BATCHES_TO_RETAIN
RETENTION_MS_DEFAULT = 7 * 24 * 3600 * 1000  # retention.ms
TIMESTAMP_AFTER_MAX_MS_DEFAULT = 3600 * 1000  # message.timestamp.after.max.ms (Kafka 4.0, KIP-937)
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3

_ATTR_TIMESTAMP_TYPE = 0x08


def last_sequence(first_seq: int, last_offset_delta: int) -> int:
    return (first_seq + last_offset_delta) % SEQUENCE_MODULUS


def next_sequence(last_seq: int) -> int:
    return (last_seq + 1) % SEQUENCE_MODULUS


@dataclass
class ModelTopic:
    name: str
    num_partitions: int
    log_append_time: bool
    retention_ms: int
    retention_bytes: int


@dataclass
class ModelBatch:
    base: int
    last: int
    size: int
    key: str
    byte_offset: int
    effective_ts: int  # maxTimestamp as stored: log append time, or the batch's own max timestamp
    max_ts_sent: int
    log_append_time: int
    timestamp_type: TimestampType
    producer_id: int
    producer_epoch: int
    base_seq: int
    last_seq: int
    leader_epoch: int
    header: bytes  # the stored (patched) 61-byte header


@dataclass
class ModelPartition:
    log_start: int = 0
    log_end: int = 0
    leader_epoch: int = 0
    batches: list[ModelBatch] = field(default_factory=list)
    # Tiered segments: (start, end, size, key), never overlapping.
    segments: list[tuple[int, int, int, str]] = field(default_factory=list)

    def prune_segments(self) -> None:
        """A segment goes once it ends below the log start."""
        self.segments = [seg for seg in self.segments if seg[1] >= self.log_start]

    @property
    def hwm(self) -> int:
        return self.log_end


@dataclass(frozen=True)
class WindowBatch:
    first_seq: int
    last_seq: int
    base_offset: int
    # Kafka's BatchMetadata.timestamp: the batch's max timestamp after
    # validation (the append time on LogAppendTime topics).  A duplicate is
    # answered with it as log_append_time (UnifiedLog.append).
    timestamp: int


@dataclass
class ModelProducer:
    epoch: int
    window: deque[WindowBatch]
    last_timestamp: int


def expected_stored_batch(batch: bytes, base: int, leader_epoch: int, log_append_time: int | None) -> bytes:
    """The whole batch as a Kafka leader would write it: offset and epoch
    stamped, and for LogAppendTime the type bit, maxTimestamp and a CRC
    recomputed over the full batch."""
    out = bytearray(batch)
    struct.pack_into(">q", out, 0, base)
    struct.pack_into(">i", out, 12, leader_epoch)
    if log_append_time is not None:
        (attrs,) = struct.unpack_from(">h", out, 21)
        struct.pack_into(">h", out, 21, attrs | _ATTR_TIMESTAMP_TYPE)
        struct.pack_into(">q", out, 35, log_append_time)
        struct.pack_into(">I", out, 17, calc_crc32c(bytes(out[21:])))
    return bytes(out)


class KafkaModel:
    def __init__(self, *, commit_deadline_ms: int, producer_id_expiration_ms: int) -> None:
        self.commit_deadline_ms = commit_deadline_ms
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.topics: dict[uuid.UUID, ModelTopic] = {}
        self.partitions: dict[TopicIdPartition, ModelPartition] = {}
        self.producers: dict[tuple[TopicIdPartition, int], ModelProducer] = {}

    # ------------------------------------------------------------ topics

    def create_topic(self, topic_id: uuid.UUID, name: str, num_partitions: int, configs: dict[str, str | int]) -> None:
        topic = self.topics.get(topic_id)
        if topic is None:
            topic = ModelTopic(
                name,
                0,
                configs.get("message.timestamp.type") == "LogAppendTime",
                int(configs.get("retention.ms", RETENTION_MS_DEFAULT)),
                int(configs.get("retention.bytes", -1)),
            )
            self.topics[topic_id] = topic
        for p in range(topic.num_partitions, num_partitions):
            self.partitions[TopicIdPartition(topic_id, p)] = ModelPartition()
        topic.num_partitions = max(topic.num_partitions, num_partitions)

    def delete_topics(self, topic_ids: list[uuid.UUID]) -> None:
        for tid in topic_ids:
            if self.topics.pop(tid, None) is None:
                continue
            for tp in [tp for tp in self.partitions if tp.topic_id == tid]:
                del self.partitions[tp]
            for k in [k for k in self.producers if k[0].topic_id == tid]:
                del self.producers[k]

    def set_leader_epoch(self, tp: TopicIdPartition, epoch: int) -> bool:
        """False if the epoch is lower than the current one (refused)."""
        part = self.partitions[tp]
        if epoch < part.leader_epoch:
            return False
        part.leader_epoch = epoch
        return True

    # ------------------------------------------------------------ producers

    def _producer(self, tp: TopicIdPartition, pid: int, now: int) -> ModelProducer | None:
        entry = self.producers.get((tp, pid))
        if entry is not None and now - entry.last_timestamp >= self.producer_id_expiration_ms:
            return None  # expired: as if never seen
        return entry

    # ------------------------------------------------------------ commit

    def commit_file(
        self,
        *,
        key: str,
        key_valid: bool,
        created_ms: int,
        file_size: int,
        items: list[tuple[CommitBatchRequest, bytes]],
        now: int,
    ) -> list[CommitBatchResponse]:
        """``items``: each request with the whole batch it describes."""

        def error(err: Errors, req: CommitBatchRequest) -> CommitBatchResponse:
            return CommitBatchResponse(err, -1, -1, -1, False, req)

        if not key_valid or file_size <= 0:
            return [error(Errors.INVALID_REQUEST, req) for req, _ in items]
        if now - created_ms > self.commit_deadline_ms:
            return [error(Errors.COMMIT_DEADLINE_EXCEEDED, req) for req, _ in items]
        out: list[CommitBatchResponse] = []
        for req, batch in items:
            out.append(self._append_one(key, file_size, req, batch, now, error))
        return out

    def _append_one(
        self,
        key: str,
        file_size: int,
        req: CommitBatchRequest,
        batch: bytes,
        now: int,
        error: Callable[[Errors, CommitBatchRequest], CommitBatchResponse],
    ) -> CommitBatchResponse:
        tp = req.topic_id_partition
        part = self.partitions.get(tp)
        if part is None:
            return error(Errors.UNKNOWN_TOPIC_OR_PARTITION, req)
        topic = self.topics[tp.topic_id]
        parsed = DefaultRecordBatch(batch)
        size = len(batch)
        if req.byte_offset < 0 or req.byte_offset + size > file_size:
            return error(Errors.INVALID_REQUEST, req)
        if not topic.log_append_time:
            # LogValidator: CreateTime must not be too far in the future
            # (message.timestamp.before.max.ms is unbounded by default).
            for ts in (parsed.first_timestamp, parsed.max_timestamp):
                if ts - now > TIMESTAMP_AFTER_MAX_MS_DEFAULT:
                    return error(Errors.INVALID_TIMESTAMP, req)
        delta = parsed.last_offset_delta
        pid = parsed.producer_id
        pepoch = parsed.producer_epoch
        first_seq = parsed.base_sequence
        last_seq = last_sequence(first_seq, delta) if pid >= 0 else -1
        entry: ModelProducer | None = None
        if pid >= 0:
            entry = self._producer(tp, pid, now)
            if entry is not None:
                # UnifiedLog.analyzeAndValidateProducerState: duplicates first.
                if pepoch == entry.epoch:
                    for w in entry.window:
                        if (w.first_seq, w.last_seq) == (first_seq, last_seq):
                            return CommitBatchResponse(
                                Errors.NONE, w.base_offset, w.timestamp, part.log_start, True, req
                            )
                # ProducerAppendInfo.checkProducerEpoch, then checkSequence.
                if pepoch < entry.epoch:
                    return error(Errors.INVALID_PRODUCER_EPOCH, req)
                if pepoch > entry.epoch:
                    if first_seq != 0:
                        return error(Errors.OUT_OF_ORDER_SEQUENCE_NUMBER, req)
                elif first_seq != next_sequence(entry.window[-1].last_seq):
                    return error(Errors.OUT_OF_ORDER_SEQUENCE_NUMBER, req)
        base = part.log_end
        append_time = now if topic.log_append_time else -1
        stored = expected_stored_batch(batch, base, part.leader_epoch, now if topic.log_append_time else None)
        part.batches.append(
            ModelBatch(
                base=base,
                last=base + delta,
                size=size,
                key=key,
                byte_offset=req.byte_offset,
                effective_ts=now if topic.log_append_time else parsed.max_timestamp,
                max_ts_sent=parsed.max_timestamp,
                log_append_time=append_time,
                timestamp_type=TimestampType.LOG_APPEND_TIME if topic.log_append_time else TimestampType.CREATE_TIME,
                producer_id=pid,
                producer_epoch=pepoch,
                base_seq=first_seq,
                last_seq=last_seq,
                leader_epoch=part.leader_epoch,
                header=stored[:61],
            )
        )
        part.log_end = base + delta + 1
        if pid >= 0:
            last_ts = now if topic.log_append_time else parsed.max_timestamp
            appended = WindowBatch(first_seq, last_seq, base, last_ts)
            if entry is not None and entry.epoch == pepoch:
                entry.window.append(appended)
                entry.last_timestamp = last_ts
            else:
                self.producers[(tp, pid)] = ModelProducer(
                    pepoch, deque([appended], maxlen=NUM_BATCHES_TO_RETAIN), last_ts
                )
        return CommitBatchResponse(Errors.NONE, base, append_time, part.log_start, False, req)

    # ------------------------------------------------------------ deletion

    def delete_records(self, requests: list[tuple[TopicIdPartition, int]]) -> list[DeleteRecordsResponse]:
        out = []
        for tp, offset in requests:
            part = self.partitions.get(tp)
            if part is None:
                out.append(DeleteRecordsResponse(Errors.UNKNOWN_TOPIC_OR_PARTITION, -1))
                continue
            if offset == -1:
                offset = part.hwm
            if offset < 0 or offset > part.hwm:
                out.append(DeleteRecordsResponse(Errors.OFFSET_OUT_OF_RANGE, -1))
                continue
            if offset > part.log_start:
                part.log_start = offset
                part.batches = [b for b in part.batches if b.last >= offset]
                part.prune_segments()
            out.append(DeleteRecordsResponse(Errors.NONE, part.log_start))
        return out

    def enforce_retention(self, now: int) -> dict[TopicIdPartition, int]:
        """Kafka 4.x UnifiedLog.deleteOldSegments at batch granularity: the
        size pass, then the time pass, each from the oldest batch and stopping
        at the first it keeps."""
        changed: dict[TopicIdPartition, int] = {}
        for tp, part in self.partitions.items():
            topic = self.topics[tp.topic_id]
            removed = 0
            if topic.retention_bytes >= 0:
                diff = sum(b.size for b in part.batches) - topic.retention_bytes
                while removed < len(part.batches) and diff - part.batches[removed].size >= 0:
                    diff -= part.batches[removed].size
                    removed += 1
            if topic.retention_ms >= 0:
                while removed < len(part.batches) and now - part.batches[removed].effective_ts > topic.retention_ms:
                    removed += 1
            if removed:
                del part.batches[:removed]
                part.log_start = part.batches[0].base if part.batches else part.log_end
                part.prune_segments()
                changed[tp] = part.log_start
        return changed

    def swap_to_segment(self, tp: TopicIdPartition, start: int, end: int, key: str, size: int) -> tuple[Errors, int]:
        """The batches of [start, end] now live in ``key``, concatenated in
        offset order (issue 31's reference swap): (error, batches moved)."""
        part = self.partitions.get(tp)
        if part is None:
            return Errors.UNKNOWN_TOPIC_OR_PARTITION, 0
        if not key or size <= 0 or start > end:
            return Errors.INVALID_REQUEST, 0
        if start < part.log_start or end >= part.hwm:
            return Errors.OFFSET_OUT_OF_RANGE, 0
        if (start, end, size, key) in part.segments:
            return Errors.NONE, 0  # a repeat
        if any(s0 <= end and e0 >= start for s0, e0, _, _ in part.segments):
            return Errors.INVALID_REQUEST, 0
        chosen = [b for b in part.batches if start <= b.base <= end]
        if not chosen or chosen[0].base != start or chosen[-1].last != end:
            return Errors.INVALID_REQUEST, 0
        if sum(b.size for b in chosen) != size:
            return Errors.INVALID_REQUEST, 0
        if any(b.key == key for p in self.partitions.values() for b in p.batches):
            return Errors.INVALID_REQUEST, 0
        at = 0
        for b in chosen:
            b.key, b.byte_offset = key, at
            at += b.size
        part.segments = sorted([*part.segments, (start, end, size, key)])
        return Errors.NONE, len(chosen)

    def rewrite_segments(
        self,
        tp: TopicIdPartition,
        start: int,
        end: int,
        key: str,
        size: int,
        replaced: tuple[str, ...],
        headers: list[bytes],
    ) -> tuple[Errors, int]:
        """The cleaner's swap (compaction.md): the rows ``replaced`` give way
        to one segment ``key`` of ``size`` bytes whose batches take
        ``headers`` (well-formed cleaned ones): (error, moved)."""
        sizes = [int.from_bytes(h[8:12], "big") + 12 for h in headers]
        part = self.partitions.get(tp)
        if part is None:
            return Errors.UNKNOWN_TOPIC_OR_PARTITION, 0
        if not key or size <= 0 or start > end or not replaced:
            return Errors.INVALID_REQUEST, 0
        if start < part.log_start or end >= part.hwm:
            return Errors.OFFSET_OUT_OF_RANGE, 0
        if (start, end, size, key) in part.segments:
            return Errors.NONE, 0  # a repeat
        rows = [seg for seg in part.segments if seg[0] <= end and seg[1] >= start]
        if (
            tuple(seg[3] for seg in rows) != replaced
            or rows[0][0] != start
            or rows[-1][1] != end
            or any(a[1] + 1 != b[0] for a, b in itertools.pairwise(rows))
        ):
            return Errors.INVALID_REQUEST, 0
        if any(b.key == key for p in self.partitions.values() for b in p.batches):
            return Errors.INVALID_REQUEST, 0
        chosen = [b for b in part.batches if start <= b.base <= end]
        if len(chosen) != len(sizes) or not chosen or chosen[0].base != start or sum(sizes) != size:
            return Errors.INVALID_REQUEST, 0
        at = 0
        for b, n, h in zip(chosen, sizes, headers, strict=True):
            b.key, b.byte_offset, b.size, b.header = key, at, n, h
            at += n
        part.segments = sorted([seg for seg in part.segments if seg not in rows] + [(start, end, size, key)])
        return Errors.NONE, len(chosen)

    # ------------------------------------------------------------ reads

    def file_usage(self) -> dict[str, FileUsage]:
        acc: dict[str, list[int]] = {}
        for part in self.partitions.values():
            for b in part.batches:
                a = acc.setdefault(b.key, [0, 0])
                a[0] += 1
                a[1] += b.size
        return {k: FileUsage(n, size) for k, (n, size) in acc.items()}

    def partition_state(self, tp: TopicIdPartition) -> dict[str, int]:
        part = self.partitions[tp]
        return {
            "log_start_offset": part.log_start,
            "log_end_offset": part.log_end,
            "high_watermark": part.hwm,
            "leader_epoch": part.leader_epoch,
            "live_batches": len(part.batches),
            "live_bytes": sum(b.size for b in part.batches),
        }

    def find_batches(self, requests: list[FindBatchRequest], fetch_max_bytes: int) -> list[FindBatchResponse]:
        """Batch ids are the store's to choose: every BatchInfo has batch_id -1."""
        out = []
        remaining = fetch_max_bytes
        min_one_message = True  # KIP-74: until some partition returned data
        for req in requests:
            part = self.partitions.get(req.topic_id_partition)
            if part is None:
                out.append(FindBatchResponse(Errors.UNKNOWN_TOPIC_OR_PARTITION, (), -1, -1))
                continue
            if not part.log_start <= req.offset <= part.hwm:
                out.append(FindBatchResponse(Errors.OFFSET_OUT_OF_RANGE, (), part.log_start, part.hwm))
                continue
            limit = min(req.max_partition_fetch_bytes, remaining)
            found: list[BatchInfo] = []
            used = 0
            for b in part.batches:
                if b.last < req.offset:
                    continue
                if used + b.size > limit and not (min_one_message and not found):
                    break
                found.append(self._batch_info(req.topic_id_partition, b))
                used += b.size
            if found:
                min_one_message = False
            remaining = max(0, remaining - used)
            # No transactions here: the last stable offset is the HWM.
            out.append(FindBatchResponse(Errors.NONE, tuple(found), part.log_start, part.hwm, None, part.hwm))
        return out

    @staticmethod
    def _batch_info(tp: TopicIdPartition, b: ModelBatch) -> BatchInfo:
        return BatchInfo(
            -1,
            b.key,
            BatchMetadata(
                tp,
                b.byte_offset,
                b.size,
                b.base,
                b.last,
                b.log_append_time,
                b.max_ts_sent,
                b.timestamp_type,
                b.producer_id,
                b.producer_epoch,
                b.base_seq,
                b.last_seq,
                b.leader_epoch,
                b.header,
            ),
        )

    def list_offset(self, tp: TopicIdPartition, target: int) -> ListOffsetsResponse:
        part = self.partitions.get(tp)
        if part is None:
            return ListOffsetsResponse(Errors.UNKNOWN_TOPIC_OR_PARTITION, tp, -1, -1)
        if target == EARLIEST_TIMESTAMP:
            return ListOffsetsResponse(Errors.NONE, tp, -1, part.log_start)
        if target == LATEST_TIMESTAMP:
            return ListOffsetsResponse(Errors.NONE, tp, -1, part.hwm)
        hit: ModelBatch | None = None
        if target == MAX_TIMESTAMP:
            for b in part.batches:
                if hit is None or b.effective_ts > hit.effective_ts:
                    hit = b
        else:
            hit = next((b for b in part.batches if b.effective_ts >= target), None)
        if hit is None:
            return ListOffsetsResponse(Errors.NONE, tp, -1, -1)
        return ListOffsetsResponse(Errors.NONE, tp, hit.effective_ts, max(hit.base, part.log_start))

    def referenced_keys(self) -> set[str]:
        return {b.key for part in self.partitions.values() for b in part.batches}
