"""CRC-32C and the v2 header patching the leader does, against kafka-python's own CRC check.

The leader never sees a batch's records, only its first 61 bytes.  For
LogAppendTime topics it changes CRC-covered header bytes and updates the CRC
affinely (docs/design/produce-and-commit.md, "CRC-32C and LogAppendTime"); the batch a consumer gets is
the stored header spliced over the uploaded batch, so that splice must pass a
real client's CRC validation.
"""

from __future__ import annotations

import random
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch

from partlog.kafka.batch_header import (
    ATTR_TIMESTAMP_TYPE,
    CRC_START,
    HEADER_SIZE,
    BatchHeader,
    BatchHeaderError,
    increment_sequence,
    patch_header,
    restamp_producer,
)
from partlog.kafka.crc32c import crc32c, crc32c_update
from partlog.kafka.record_batch import build_record_batch
from partlog.kafka.records import TimestampType
from tests.batches import batch_crc_ok, build_batch

GZIP = 1
T0 = 1_700_000_000_000


# ----------------------------------------------------------------- crc32c


def test_crc32c_check_value() -> None:
    # The standard check value of CRC-32C (Castagnoli), RFC 3720 / iSCSI.
    assert crc32c(b"123456789") == 0xE3069283


def test_crc32c_known_vectors() -> None:
    # RFC 3720 B.4 test vectors.
    assert crc32c(b"") == 0
    assert crc32c(bytes(32)) == 0x8A9136AA
    assert crc32c(b"\xff" * 32) == 0x62A8AB43
    assert crc32c(bytes(range(32))) == 0x46DD794E
    assert crc32c(bytes(range(31, -1, -1))) == 0x113FDB5C


@st.composite
def _message_and_prefix(draw: st.DrawFn) -> tuple[bytes, bytes]:
    message = draw(st.binary(min_size=0, max_size=3000))
    n = draw(st.integers(0, len(message)))
    new_prefix = draw(st.binary(min_size=n, max_size=n))
    return message, new_prefix


@settings(max_examples=300, deadline=None)
@given(_message_and_prefix())
def test_crc32c_update_matches_recomputation(mp: tuple[bytes, bytes]) -> None:
    message, new_prefix = mp
    n = len(new_prefix)
    modified = new_prefix + message[n:]
    assert crc32c_update(crc32c(message), message[:n], new_prefix, len(message)) == crc32c(modified)


@settings(max_examples=50, deadline=None)
@given(
    st.binary(min_size=1, max_size=64),
    st.binary(min_size=1, max_size=64),
    st.integers(0, 5_000_000),
)
def test_crc32c_update_long_messages(prefix_a: bytes, prefix_b: bytes, tail_len: int) -> None:
    """Long messages exercise the O(log n) zero-shift beyond a few table steps."""
    n = min(len(prefix_a), len(prefix_b))
    old_prefix, new_prefix = prefix_a[:n], prefix_b[:n]
    tail = random.Random(tail_len).randbytes(tail_len)
    assert crc32c_update(crc32c(old_prefix + tail), old_prefix, new_prefix, n + tail_len) == crc32c(new_prefix + tail)


def test_crc32c_update_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="same length"):
        crc32c_update(0, b"ab", b"a", 10)
    with pytest.raises(ValueError, match="longer than the message"):
        crc32c_update(0, b"abc", b"abd", 2)


# ------------------------------------------------------------ batch header


def _splice(batch: bytes, header: bytes) -> bytes:
    assert len(header) == HEADER_SIZE
    return header + batch[HEADER_SIZE:]


# (records, value_bytes, compression): from one tiny record to ~100 KB batches.
_SHAPES = [
    (1, 0, 0),
    (1, 10, 0),
    (3, 100, 0),
    (50, 200, 0),
    (100, 1000, 0),
    (1, 100_000, 0),
    (2, 100, GZIP),
    (20, 500, GZIP),
    (100, 1000, GZIP),
]


@pytest.mark.parametrize(("records", "value_bytes", "compression"), _SHAPES)
@pytest.mark.parametrize("idempotent", [False, True])
def test_patch_header_log_append_time_passes_kafka_crc(
    records: int, value_bytes: int, compression: int, idempotent: bool
) -> None:
    pid, epoch, seq = (4242, 3, 17) if idempotent else (-1, -1, -1)
    batch = build_batch(
        records,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        timestamp_ms=T0,
        value_bytes=value_bytes,
        compression=compression,
    )
    assert batch_crc_ok(batch)
    if value_bytes * records >= 100_000 and not compression:
        assert len(batch) > 100_000
    append_time = T0 + 123_456
    patched = patch_header(
        batch[:HEADER_SIZE], base_offset=987_654, partition_leader_epoch=12, log_append_time=append_time
    )
    full = _splice(batch, patched)
    kb = DefaultRecordBatch(full)
    assert kb.validate_crc()
    assert kb.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert kb.max_timestamp == append_time
    assert kb.base_offset == 987_654
    assert kb.leader_epoch == 12
    assert kb.compression_type == DefaultRecordBatch(batch).compression_type == compression
    assert (kb.producer_id, kb.producer_epoch, kb.base_sequence) == (pid, epoch, seq)
    assert kb.records_count == records
    # A consumer reading a LogAppendTime batch sees the append time on every record.
    got = list(DefaultRecordBatch(full))
    assert len(got) == records
    assert all(r.timestamp == append_time for r in got)
    assert [r.offset for r in got] == list(range(987_654, 987_654 + records))
    # Only the fields that had to change changed.
    h0, h1 = BatchHeader.parse(batch), BatchHeader.parse(patched)
    assert h1.attributes == h0.attributes | ATTR_TIMESTAMP_TYPE
    assert (h1.base_timestamp, h1.last_offset_delta, h1.record_count) == (
        h0.base_timestamp,
        h0.last_offset_delta,
        h0.record_count,
    )
    assert patched[16] == batch[16]  # magic
    assert patched[HEADER_SIZE - 18 :] == batch[HEADER_SIZE - 18 : HEADER_SIZE]  # producer fields, count


@pytest.mark.parametrize(("records", "value_bytes", "compression"), _SHAPES)
def test_patch_header_create_time_keeps_crc(records: int, value_bytes: int, compression: int) -> None:
    batch = build_batch(records, timestamp_ms=T0, value_bytes=value_bytes, compression=compression)
    patched = patch_header(batch[:HEADER_SIZE], base_offset=2**40 + 5, partition_leader_epoch=7, log_append_time=None)
    # Only base offset (0..8) and leader epoch (12..16) changed: outside the CRC.
    assert patched[8:12] == batch[8:12]
    assert patched[16:HEADER_SIZE] == batch[16:HEADER_SIZE]
    assert struct.unpack(">q", patched[:8])[0] == 2**40 + 5
    assert struct.unpack(">i", patched[12:16])[0] == 7
    kb = DefaultRecordBatch(_splice(batch, patched))
    assert kb.validate_crc()
    assert kb.crc == DefaultRecordBatch(batch).crc
    assert kb.timestamp_type == TimestampType.CREATE_TIME
    assert kb.max_timestamp == T0 + records - 1
    assert (kb.base_offset, kb.leader_epoch) == (2**40 + 5, 7)


@pytest.mark.parametrize(("records", "value_bytes", "compression"), _SHAPES[:5] + _SHAPES[6:8])
def test_patch_header_create_time_clears_producer_set_log_append_time(
    records: int, value_bytes: int, compression: int
) -> None:
    """A batch a producer sent with the LogAppendTime bit, stored on a
    CreateTime topic: the bit is cleared and the CRC still matches the batch."""
    batch = build_batch(records, timestamp_ms=T0, value_bytes=value_bytes, compression=compression)
    lat = patch_header(batch[:HEADER_SIZE], base_offset=0, partition_leader_epoch=0, log_append_time=T0 + 9)
    sent = _splice(batch, lat)
    assert DefaultRecordBatch(sent).validate_crc()
    fixed = patch_header(lat, base_offset=77, partition_leader_epoch=3, log_append_time=None, create_time=True)
    kb = DefaultRecordBatch(_splice(sent, fixed))
    assert kb.validate_crc()
    assert kb.timestamp_type == TimestampType.CREATE_TIME
    assert kb.max_timestamp == T0 + 9  # the header's maxTimestamp, as sent
    assert (kb.base_offset, kb.leader_epoch) == (77, 3)


def test_patch_header_log_append_time_already_set_is_stable() -> None:
    """Patching twice (e.g. a batch re-stamped) keeps a valid CRC."""
    batch = build_batch(5, timestamp_ms=T0, value_bytes=30)
    once = patch_header(batch[:HEADER_SIZE], base_offset=1, partition_leader_epoch=0, log_append_time=T0 + 1)
    twice = patch_header(once, base_offset=2, partition_leader_epoch=1, log_append_time=T0 + 2)
    kb = DefaultRecordBatch(_splice(batch, twice))
    assert kb.validate_crc()
    assert (kb.max_timestamp, kb.base_offset, kb.leader_epoch) == (T0 + 2, 2, 1)
    # Same time again: nothing covered changes, so the CRC stays as it was.
    same = patch_header(twice, base_offset=3, partition_leader_epoch=1, log_append_time=T0 + 2)
    assert same[CRC_START:] == twice[CRC_START:] and same[17:21] == twice[17:21]


@settings(max_examples=40, deadline=None)
@given(
    records=st.integers(1, 40),
    value_bytes=st.integers(0, 3000),
    compression=st.sampled_from([0, GZIP]),
    create_ts=st.integers(0, 2**41),
    append_time=st.integers(0, 2**42),
    base_offset=st.integers(0, 2**62),
    leader_epoch=st.integers(0, 2**31 - 1),
)
def test_patch_header_property(
    records: int,
    value_bytes: int,
    compression: int,
    create_ts: int,
    append_time: int,
    base_offset: int,
    leader_epoch: int,
) -> None:
    batch = build_batch(records, timestamp_ms=create_ts, value_bytes=value_bytes, compression=compression)
    patched = patch_header(
        batch[:HEADER_SIZE], base_offset=base_offset, partition_leader_epoch=leader_epoch, log_append_time=append_time
    )
    kb = DefaultRecordBatch(_splice(batch, patched))
    assert kb.validate_crc()
    assert (kb.timestamp_type, kb.max_timestamp, kb.base_offset, kb.leader_epoch) == (
        1,
        append_time,
        base_offset,
        leader_epoch,
    )


def test_batch_header_parse_fields_match_kafka() -> None:
    batch = build_batch(7, producer_id=99, producer_epoch=4, base_sequence=2**31 - 3, timestamp_ms=T0, value_bytes=5)
    h = BatchHeader.parse(batch)
    kb = DefaultRecordBatch(batch)
    assert h.size == len(batch) == kb.size_in_bytes
    assert h.pack() == batch[:HEADER_SIZE]
    assert (h.magic, h.crc, h.last_offset_delta, h.record_count) == (2, kb.crc, 6, 7)
    assert (h.base_timestamp, h.max_timestamp) == (T0, T0 + 6)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (99, 4, 2**31 - 3)
    # 2^31-3 + 6 wraps past 2^31-1 to 3.
    assert h.last_sequence == kb.last_sequence == 3
    assert h.timestamp_type == TimestampType.CREATE_TIME
    assert not h.is_transactional and not h.is_control
    with pytest.raises(BatchHeaderError, match="60 bytes"):
        BatchHeader.parse(batch[:60])


@pytest.mark.parametrize(
    ("seq", "inc", "expected"),
    [
        (0, 0, 0),
        (0, 5, 5),
        (2**31 - 1, 1, 0),
        (2**31 - 2, 3, 1),
        (2**31 - 1, 0, 2**31 - 1),
        (10, 2**31 - 11, 2**31 - 1),
    ],
)
def test_increment_sequence_wraps_like_kafka(seq: int, inc: int, expected: int) -> None:
    assert increment_sequence(seq, inc) == expected


@settings(max_examples=100, deadline=None)
@given(
    values=st.lists(st.binary(max_size=64), min_size=1, max_size=5),
    epoch=st.integers(0, 32_767),
    seq=st.integers(0, (1 << 31) - 1),
)
def test_restamp_producer_keeps_a_valid_crc(values: list[bytes], epoch: int, seq: int) -> None:
    """The producer's epoch bump re-sequences built batches: the restamped
    batch passes kafka-python's CRC check and says the new epoch and sequence,
    its records unchanged."""
    data = build_record_batch([(None, v, T0) for v in values], producer_id=7, producer_epoch=0, base_sequence=3)
    out = restamp_producer(data, producer_epoch=epoch, base_sequence=seq)
    assert len(out) == len(data) and out[HEADER_SIZE:] == data[HEADER_SIZE:]
    batch = DefaultRecordBatch(out)
    assert batch.validate_crc()
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (7, epoch, seq)
    assert [r.value for r in batch] == values
