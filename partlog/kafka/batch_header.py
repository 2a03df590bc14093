"""Kafka's v2 record-batch header (magic 2): the 61 bytes partlog sequences.

Layout (big-endian), from Kafka's DefaultRecordBatch:

    0  baseOffset int64          35 maxTimestamp int64
    8  batchLength int32         43 producerId int64
   12  partitionLeaderEpoch int32 51 producerEpoch int16
   16  magic int8                53 baseSequence int32
   17  crc uint32                57 recordCount int32
   21  attributes int16
   23  lastOffsetDelta int32
   27  baseTimestamp int64

The CRC covers bytes [21, end of batch): the leader can stamp baseOffset and
partitionLeaderEpoch freely, but LogAppendTime (attributes, maxTimestamp)
needs a CRC update, done affinely in :mod:`partlog.kafka.crc32c`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

from partlog.kafka.crc32c import crc32c_update


class TimestampType(IntEnum):
    NO_TIMESTAMP_TYPE = -1
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


HEADER_SIZE = 61
MAGIC_V2 = 2
# The batch's own size is batchLength + the two fields before it.
LOG_OVERHEAD = 12
CRC_START = 21

_HEADER = struct.Struct(">qiibIhiqqqhii")
assert _HEADER.size == HEADER_SIZE

ATTR_COMPRESSION_MASK = 0x07
ATTR_TIMESTAMP_TYPE = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
INT32_MAX = 2**31 - 1


class BatchHeaderError(ValueError):
    """The bytes are not a v2 batch header; the message says which field."""


def increment_sequence(sequence: int, increment: int) -> int:
    """Kafka's DefaultRecordBatch.incrementSequence: wraps past 2^31-1 to 0."""
    if sequence > INT32_MAX - increment:
        return increment - (INT32_MAX - sequence) - 1
    return sequence + increment


@dataclass(frozen=True, slots=True)
class BatchHeader:
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @classmethod
    def parse(cls, data: bytes) -> BatchHeader:
        if len(data) < HEADER_SIZE:
            raise BatchHeaderError(f"batch header is {len(data)} bytes, needs {HEADER_SIZE}")
        return cls(*_HEADER.unpack_from(data, 0))

    def pack(self) -> bytes:
        return _HEADER.pack(
            self.base_offset,
            self.batch_length,
            self.partition_leader_epoch,
            self.magic,
            self.crc,
            self.attributes,
            self.last_offset_delta,
            self.base_timestamp,
            self.max_timestamp,
            self.producer_id,
            self.producer_epoch,
            self.base_sequence,
            self.record_count,
        )

    @property
    def size(self) -> int:
        """Bytes of the whole batch, header included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def timestamp_type(self) -> TimestampType:
        if self.attributes & ATTR_TIMESTAMP_TYPE:
            return TimestampType.LOG_APPEND_TIME
        return TimestampType.CREATE_TIME

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return increment_sequence(self.base_sequence, self.last_offset_delta)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)


# Byte positions inside the header, for patching without a full re-pack.
_BASE_OFFSET = struct.Struct(">q")
_LEADER_EPOCH = struct.Struct(">i")
_CRC = struct.Struct(">I")
_ATTRIBUTES = struct.Struct(">h")
_MAX_TIMESTAMP = struct.Struct(">q")
_OFF_LEADER_EPOCH = 12
_OFF_CRC = 17
_OFF_ATTRIBUTES = 21
_OFF_MAX_TIMESTAMP = 35
_BASE_SEQUENCE = struct.Struct(">i")
_OFF_BASE_SEQUENCE = 53


def transactional_batch(data: bytes) -> bool:
    """Whether the v2 batch (or header) at the start of ``data`` has the
    transactional bit, read in place (it runs for every batch produced);
    what is too short to be a header is not."""
    return len(data) >= HEADER_SIZE and bool(_ATTRIBUTES.unpack_from(data, _OFF_ATTRIBUTES)[0] & ATTR_TRANSACTIONAL)


def unsequenced_transactional(data: bytes) -> bool:
    """A transactional v2 batch with base sequence -1 (NO_SEQUENCE)."""
    return transactional_batch(data) and _BASE_SEQUENCE.unpack_from(data, _OFF_BASE_SEQUENCE)[0] == NO_SEQUENCE


def patch_header(
    header: bytes,
    *,
    base_offset: int,
    partition_leader_epoch: int,
    log_append_time: int | None,
    create_time: bool = False,
) -> bytes:
    """The header as the leader stores it: offsets and epoch stamped in.

    With ``log_append_time`` set (a LogAppendTime topic), the timestamp-type bit
    and maxTimestamp change too.  With ``create_time`` (a CreateTime topic and a
    producer that set the LogAppendTime bit), the bit is cleared, as Kafka's
    LogValidator rewrites such a batch to CreateTime.  Either way the CRC is
    updated to match the whole batch, whose records this function never sees.
    ``header`` must be a valid v2 header (validated by the caller).
    """
    out = bytearray(header[:HEADER_SIZE])
    _BASE_OFFSET.pack_into(out, 0, base_offset)
    _LEADER_EPOCH.pack_into(out, _OFF_LEADER_EPOCH, partition_leader_epoch)
    if log_append_time is not None or create_time:
        old_covered = bytes(out[CRC_START:HEADER_SIZE])
        (attributes,) = _ATTRIBUTES.unpack_from(out, _OFF_ATTRIBUTES)
        if log_append_time is not None:
            _ATTRIBUTES.pack_into(out, _OFF_ATTRIBUTES, attributes | ATTR_TIMESTAMP_TYPE)
            _MAX_TIMESTAMP.pack_into(out, _OFF_MAX_TIMESTAMP, log_append_time)
        else:
            _ATTRIBUTES.pack_into(out, _OFF_ATTRIBUTES, attributes & ~ATTR_TIMESTAMP_TYPE)
        new_covered = bytes(out[CRC_START:HEADER_SIZE])
        if new_covered != old_covered:
            (old_crc,) = _CRC.unpack_from(out, _OFF_CRC)
            (batch_length,) = struct.unpack_from(">i", out, 8)
            covered_len = batch_length + LOG_OVERHEAD - CRC_START
            _CRC.pack_into(out, _OFF_CRC, crc32c_update(old_crc, old_covered, new_covered, covered_len))
    return bytes(out)


_PRODUCER_EPOCH = struct.Struct(">h")
_OFF_PRODUCER_EPOCH = 51


def restamp_producer(data: bytes, *, producer_epoch: int, base_sequence: int) -> bytes:
    """A v2 batch with a new producer epoch and base sequence, its CRC updated.

    An idempotent producer that bumps its epoch after a failed batch (KIP-360)
    re-sequences the batches it has not had acknowledged; Kafka's producer
    does it with ``ProducerBatch.resetProducerState``.  ``data`` must be a
    whole, valid v2 batch (the producer built it).
    """
    out = bytearray(data)
    old_covered = bytes(out[CRC_START:HEADER_SIZE])
    _PRODUCER_EPOCH.pack_into(out, _OFF_PRODUCER_EPOCH, producer_epoch)
    _BASE_SEQUENCE.pack_into(out, _OFF_BASE_SEQUENCE, base_sequence)
    (old_crc,) = _CRC.unpack_from(out, _OFF_CRC)
    new_crc = crc32c_update(old_crc, old_covered, bytes(out[CRC_START:HEADER_SIZE]), len(out) - CRC_START)
    _CRC.pack_into(out, _OFF_CRC, new_crc)
    return bytes(out)
