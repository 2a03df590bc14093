"""Kafka's transaction markers: the COMMIT/ABORT control batch a partition
leader appends when a transaction ends, built and recognised, sans I/O.

The batch is fully determined by its header fields and the marker (Kafka's
``MemoryRecords.withEndTransactionMarker``): one control record, offset and
timestamp deltas 0, no headers, key = version 0 + type (:data:`ABORT` 0,
:data:`COMMIT` 1), value = version 0 + the coordinator epoch; attributes
CONTROL|TRANSACTIONAL, base sequence -1.  So the store keeps only the
61-byte header and the marker in its metadata log and synthesizes the same
bytes, with the same CRC, on every read (:func:`control_batch`).
"""

from __future__ import annotations

import struct

from partlog.kafka import batch_header as bh
from partlog.kafka.crc32c import crc32c

# Kafka's ControlRecordType ids.
ABORT = 0
COMMIT = 1

# Kafka's EndTransactionMarker value version (and the key's).
_VERSION = 0
# The control record: length 16 (zigzag 0x20), attributes 0, timestamp delta
# 0, offset delta 0, key length 4 (zigzag 0x08), key, value length 6 (zigzag
# 0x0c), value, no headers.
_RECORD = struct.Struct(">bbbbbhhbhib")
RECORD_SIZE = _RECORD.size
CONTROL_BATCH_SIZE = bh.HEADER_SIZE + RECORD_SIZE
CONTROL_ATTRIBUTES = bh.ATTR_CONTROL | bh.ATTR_TRANSACTIONAL
_HEADER = struct.Struct(">qiibIhiqqqhii")
_INT32_MAX = 2**31 - 1


def control_record(committed: bool, coordinator_epoch: int) -> bytes:
    """The one record of a marker's control batch (the bytes after the header)."""
    assert 0 <= coordinator_epoch <= _INT32_MAX, coordinator_epoch
    return _RECORD.pack(
        0x20, 0, 0, 0, 0x08, _VERSION, COMMIT if committed else ABORT, 0x0C, _VERSION, coordinator_epoch, 0
    )


def control_header(
    *,
    base_offset: int,
    partition_leader_epoch: int,
    producer_id: int,
    producer_epoch: int,
    timestamp: int,
    log_append_time: bool,
    committed: bool,
    coordinator_epoch: int,
) -> bytes:
    """The 61-byte header of a marker's control batch, its CRC covering
    :func:`control_record` (base offset and leader epoch lie outside it)."""
    attributes = CONTROL_ATTRIBUTES | (bh.ATTR_TIMESTAMP_TYPE if log_append_time else 0)
    fields = [
        base_offset,
        CONTROL_BATCH_SIZE - bh.LOG_OVERHEAD,
        partition_leader_epoch,
        bh.MAGIC_V2,
        0,
        attributes,
        0,
        timestamp,
        timestamp,
        producer_id,
        producer_epoch,
        bh.NO_SEQUENCE,
        1,
    ]
    covered = _HEADER.pack(*fields)[bh.CRC_START :] + control_record(committed, coordinator_epoch)
    fields[4] = crc32c(covered)
    return _HEADER.pack(*fields)


def control_batch(header: bytes, committed: bool, coordinator_epoch: int) -> bytes:
    """The whole control batch of a stored marker header."""
    return bytes(header[: bh.HEADER_SIZE]) + control_record(committed, coordinator_epoch)


def control_problem(header: bytes, committed: bool, coordinator_epoch: int) -> str | None:
    """Why ``header`` is not the header of this marker's control batch, or None."""
    if len(header) != bh.HEADER_SIZE:
        return f"control batch header of {len(header)} bytes"
    if not 0 <= coordinator_epoch <= _INT32_MAX:
        return f"coordinator epoch {coordinator_epoch}"
    h = bh.BatchHeader.parse(header)
    if h.attributes & ~bh.ATTR_TIMESTAMP_TYPE != CONTROL_ATTRIBUTES:
        return f"attributes {h.attributes:#x} of no control batch"
    if (h.size, h.last_offset_delta, h.record_count, h.base_sequence) != (CONTROL_BATCH_SIZE, 0, 1, bh.NO_SEQUENCE):
        return "control batch of more than one record, or with a sequence"
    if h.producer_id < 0 or h.producer_epoch < 0:
        return f"control batch of producer {h.producer_id} epoch {h.producer_epoch}"
    if crc32c(bytes(header[bh.CRC_START :]) + control_record(committed, coordinator_epoch)) != h.crc:
        return "control batch CRC does not match its marker"
    return None


def end_txn_marker(batch: bytes) -> tuple[bool, int] | None:
    """(committed, coordinator epoch) of a whole marker control batch, or
    None when ``batch`` is none (a data batch, another control record)."""
    if len(batch) < CONTROL_BATCH_SIZE:
        return None
    h = bh.BatchHeader.parse(batch)
    if not h.is_control or h.record_count != 1:
        return None
    try:
        length, _, _, _, klen, kver, ctype, vlen, vver, epoch, _ = _RECORD.unpack_from(batch, bh.HEADER_SIZE)
    except struct.error:
        return None
    if (length, klen, kver, vlen, vver) != (0x20, 0x08, _VERSION, 0x0C, _VERSION) or ctype not in (ABORT, COMMIT):
        return None
    return ctype == COMMIT, epoch
