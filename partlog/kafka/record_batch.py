"""Kafka v2 record batches, built and parsed with kafka-python's record module.

Pure functions over bytes, no I/O: the client library builds the batches its
producer sends and parses what its consumer fetches; the Kafka front end
searches a batch's records to answer ListOffsets by timestamp, and its group
coordinator writes and reads the offsets topic with the same two functions.

* :func:`build_record_batch` returns one whole batch (offset deltas from 0;
  the leader assigns the base offset when it appends).
* :func:`parse_records` returns the records of whole batches laid end to end
  (a fetch answer), from an offset on; a truncated last batch is left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from partlog.kafka.batch_header import LOG_OVERHEAD
from partlog.kafka.records import TopicIdPartition


@dataclass(frozen=True, slots=True)
class ConsumerRecord:
    topic_id_partition: TopicIdPartition
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None


def build_record_batch(
    records: Sequence[tuple[bytes | None, bytes | None, int]],
    *,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    compression: int = 0,
    transactional: bool = False,
) -> bytes:
    """A Kafka v2 record batch of ``(key, value, timestamp ms)`` records, with
    kafka-python's record module (offset deltas from 0); ``transactional``
    sets the batch's transactional bit."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=compression,
        is_transactional=transactional,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        batch_size=1 << 30,
    )
    for i, (k, v, ts) in enumerate(records):
        builder.append(i, timestamp=ts, key=k, value=v, headers=[])
    return bytes(builder.build())


def parse_records(tp: TopicIdPartition, data: bytes, from_offset: int = 0) -> list[ConsumerRecord]:
    """The records of a fetch answer (whole v2 batches), from ``from_offset``."""
    out = []
    pos = 0
    while pos + 12 <= len(data):
        length = int.from_bytes(data[pos + 8 : pos + 12], "big", signed=True)
        end = pos + length + LOG_OVERHEAD
        if end > len(data):
            break
        batch = DefaultRecordBatch(data[pos:end])
        for r in batch:
            if r.offset >= from_offset:
                out.append(ConsumerRecord(tp, r.offset, r.timestamp, r.key, r.value))
        pos = end
    return out


def read_records(
    tp: TopicIdPartition,
    data: bytes,
    from_offset: int = 0,
    aborted: Sequence[tuple[int, int]] | None = None,
) -> tuple[list[ConsumerRecord], int]:
    """What a Kafka consumer delivers from a fetch answer, and the offset
    after its last whole batch (the next fetch's; ``from_offset`` when there
    is none), which passes batches that deliver nothing.  Control batches
    (transaction markers) are never records; with ``aborted`` (a
    READ_COMMITTED fetch's ``[(producer id, first offset), ...]``) the records
    of aborted transactions are dropped too, as Kafka's consumer does
    (``Fetcher``'s aborted-producer set): a producer's batches are skipped
    from the first offset of its aborted transaction until its ABORT marker."""
    pending = sorted((first, pid) for pid, first in aborted or ())
    next_aborted = 0
    skipping: set[int] = set()
    out = []
    pos = 0
    next_offset = from_offset
    while pos + 12 <= len(data):
        length = int.from_bytes(data[pos + 8 : pos + 12], "big", signed=True)
        end = pos + length + LOG_OVERHEAD
        if end > len(data):
            break
        batch = DefaultRecordBatch(data[pos:end])
        pos = end
        next_offset = max(next_offset, batch.base_offset + batch.last_offset_delta + 1)
        while next_aborted < len(pending) and pending[next_aborted][0] <= batch.base_offset:
            skipping.add(pending[next_aborted][1])
            next_aborted += 1
        if batch.is_control_batch:
            # An ABORT marker ends its producer's aborted transaction.
            if batch.is_transactional and _is_abort(batch):
                skipping.discard(batch.producer_id)
            continue
        if batch.is_transactional and batch.producer_id in skipping:
            continue
        for r in batch:
            if r.offset >= from_offset:
                out.append(ConsumerRecord(tp, r.offset, r.timestamp, r.key, r.value))
    return out, next_offset


def _is_abort(batch: DefaultRecordBatch) -> bool:
    """A control batch's record key is (version int16, type int16): 0 ABORT, 1 COMMIT."""
    for r in batch:
        key = r.key or b""
        return len(key) >= 4 and int.from_bytes(key[2:4], "big", signed=True) == CONTROL_TYPE_ABORT
    return False


# Kafka's ControlRecordType codes in a control record's key.
CONTROL_TYPE_ABORT = 0
CONTROL_TYPE_COMMIT = 1

__all__ = [
    "CONTROL_TYPE_ABORT",
    "CONTROL_TYPE_COMMIT",
    "ConsumerRecord",
    "build_record_batch",
    "parse_records",
    "read_records",
]
