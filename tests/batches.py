"""Real Kafka v2 record batches for tests, built with kafka-python's record module."""

from __future__ import annotations

import uuid

from kafka.record.default_records import DefaultRecordBatch

from partlog.kafka.record_batch import build_record_batch
from partlog.kafka.records import CommitBatchRequest, TopicIdPartition
from partlog.wal.key import make_wal_key


def build_batch(
    records: int = 1,
    *,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    timestamp_ms: int = 1_700_000_000_000,
    value_bytes: int = 10,
    compression: int = 0,
) -> bytes:
    """A v2 batch of ``records`` records (timestamps ascending from timestamp_ms)."""
    return build_record_batch(
        [(None, b"v" * value_bytes, timestamp_ms + i) for i in range(records)],
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        compression=compression,
    )


def batch_crc_ok(batch: bytes) -> bool:
    return bool(DefaultRecordBatch(batch).validate_crc())


def request(tp: TopicIdPartition, batch: bytes, *, byte_offset: int = 1, request_id: int = 0) -> CommitBatchRequest:
    return CommitBatchRequest.from_header(request_id, tp, byte_offset, batch[:61])


def wal_key(created_ms: int, broker_id: int = 1, prefix: str = "wal") -> str:
    return str(make_wal_key(prefix, created_ms, broker_id, uuid.uuid4().hex))
