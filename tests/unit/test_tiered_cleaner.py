"""The cleaner core (partlog/tiered/cleaner.py) against a reference model:
any sequence of keyed writes, tombstones and keyless records, cut into
batches (each with one of Kafka's codecs), compacted once or twice, read
from the beginning with kafka-python's decoder (an independent one, which
checks every CRC and decompresses with its own codec libraries), equals
the latest value per key; tombstones go only once their delete horizon
passed; offsets are preserved and strictly increasing.  Hostile input fails
closed."""

from __future__ import annotations

import struct
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka import codec as kc

from partlog.kafka import batch_header as bh
from partlog.kafka.compression import CODEC_NAMES, compress
from partlog.kafka.crc32c import crc32c
from partlog.kafka.record_batch import build_record_batch, parse_records
from partlog.kafka.records import TopicIdPartition
from partlog.tiered import cleaner
from partlog.tiered.cleaner import (
    ATTR_DELETE_HORIZON,
    CleanerError,
    OffsetMap,
    build_offset_map,
    clean_batch,
    keyed_records,
    keyless_indices,
    keyless_record,
    split_batches,
)
from partlog.tiered.segment import check_batch

TP = TopicIdPartition(uuid.UUID(int=1), 0)
T0 = 1_700_000_000_000
RETENTION_MS = 1000

# A write: (key or None, value or None (a tombstone)).
writes = st.lists(
    st.tuples(
        st.one_of(st.none(), st.sampled_from([b"a", b"b", b"c", b"d", b""])),
        st.one_of(st.none(), st.binary(max_size=8)),
    ),
    min_size=1,
    max_size=60,
)


# Whether kafka-python can build (and read) a batch with each codec here.
KAFKA_PYTHON_HAS = {0: True, 1: kc.has_gzip(), 2: kc.has_snappy(), 3: kc.has_lz4(), 4: kc.has_zstd()}


def _build(records: list[tuple[bytes | None, bytes | None, int]], codec: int) -> bytes:
    """A batch with ``codec``: kafka-python's builder where its codec library
    is installed, else (or where the builder kept a small batch uncompressed,
    as it does when compressing does not pay) its uncompressed batch
    recompressed with partlog's."""
    if KAFKA_PYTHON_HAS[codec]:
        built = build_record_batch(records, compression=codec)
        if check_batch(built).attributes & bh.ATTR_COMPRESSION_MASK == codec:
            return built
    plain = build_record_batch(records)
    body = compress(codec, plain[bh.HEADER_SIZE :])
    out = bytearray(plain[: bh.HEADER_SIZE]) + body
    struct.pack_into(">i", out, 8, len(out) - bh.LOG_OVERHEAD)
    struct.pack_into(">h", out, 21, struct.unpack_from(">h", out, 21)[0] | codec)
    struct.pack_into(">I", out, 17, crc32c(memoryview(out)[21:]))
    return bytes(out)


def _batches(ws: list[tuple[bytes | None, bytes | None]], cuts: list[int], codecs: list[int]) -> list[bytes]:
    """The writes as batches at consecutive offsets, cut after the given
    counts, compressed with the given codecs in turn."""
    out, offset, i, n = [], 0, 0, 0
    while i < len(ws):
        size = max(1, cuts[n % len(cuts)])
        chunk = ws[i : i + size]
        records = [(k, v, T0 + offset + j) for j, (k, v) in enumerate(chunk)]
        batch = bytearray(_build(records, codecs[n % len(codecs)]))
        struct.pack_into(">q", batch, 0, offset)  # not under the CRC, as the leader stamps it
        out.append(bytes(batch))
        offset += len(chunk)
        i += size
        n += 1
    return out


def _clean(batches: list[bytes], now_ms: int) -> list[bytes]:
    m = OffsetMap()
    assert keyed_records(batches) <= m.room()
    build_offset_map(batches, m)
    return [clean_batch(b, m, now_ms=now_ms, delete_retention_ms=RETENTION_MS).data for b in batches]


def _check_shape(before: list[bytes], after: list[bytes]) -> None:
    assert len(before) == len(after)
    for b, a in zip(before, after, strict=True):
        hb, ha = check_batch(b), check_batch(a)  # whole, valid CRC
        assert (ha.base_offset, ha.last_offset_delta, ha.max_timestamp) == (
            hb.base_offset,
            hb.last_offset_delta,
            hb.max_timestamp,
        )
        assert ha.record_count <= hb.record_count


@settings(max_examples=300, deadline=None)
@given(
    writes,
    st.lists(st.integers(1, 7), min_size=1, max_size=5),
    st.lists(st.sampled_from(sorted(CODEC_NAMES)), min_size=1, max_size=5),
)
def test_compacted_log_is_latest_per_key(
    ws: list[tuple[bytes | None, bytes | None]], cuts: list[int], codecs: list[int]
) -> None:
    before = _batches(ws, cuts, codecs)
    latest: dict[bytes, tuple[int, bytes | None]] = {}
    for offset, (k, v) in enumerate(ws):
        if k is not None:
            latest[k] = (offset, v)
    # First clean: tombstones stay (their horizon is stamped).
    once = _clean(before, T0)
    _check_shape(before, once)
    got = parse_records(TP, b"".join(once))
    offsets = [r.offset for r in got]
    assert offsets == sorted(set(offsets))
    assert {r.key: (r.offset, r.value) for r in got} == latest
    assert len(got) == len(latest)  # one record per key, none keyless
    for r in got:
        assert r.timestamp == T0 + r.offset  # timestamps unchanged
    for b in once:
        h = check_batch(b)
        tombstones = any(r.value is None for r in parse_records(TP, b))
        assert bool(h.attributes & ATTR_DELETE_HORIZON) == tombstones
    # Cleaning again before the horizon changes nothing.
    assert _clean(once, T0 + RETENTION_MS - 1) == once
    # Past the horizon the tombstones go.
    twice = _clean(once, T0 + RETENTION_MS)
    _check_shape(before, twice)
    got = parse_records(TP, b"".join(twice))
    assert {r.key: (r.offset, r.value) for r in got} == {k: ov for k, ov in latest.items() if ov[1] is not None}


def test_untouched_batches() -> None:
    # Transactional and control batches keep their bytes; their keys do not supersede.
    txn = bytearray(
        build_record_batch([(b"a", b"1", T0)], producer_id=7, producer_epoch=0, base_sequence=0, transactional=True)
    )
    plain = bytearray(build_record_batch([(b"a", b"2", T0)]))
    struct.pack_into(">q", plain, 0, 1)
    batches = [bytes(txn), bytes(plain)]
    assert _clean(batches, T0) == batches


def _corrupt(batch: bytes, at: int, value: bytes) -> bytes:
    out = bytearray(batch)
    out[at : at + len(value)] = value
    struct.pack_into(">I", out, 17, crc32c(memoryview(out)[21:]))  # a valid CRC over bad records
    return bytes(out)


@pytest.mark.parametrize(
    "mangle",
    [
        lambda b: b[:-1],  # truncated
        lambda b: b[:30] + bytes([b[30] ^ 1]) + b[31:],  # CRC mismatch
        lambda b: _corrupt(b, 57, struct.pack(">i", 5)),  # record count
        lambda b: _corrupt(b, 61, b"\x7f"),  # record length overruns
        lambda b: _corrupt(b, 23, struct.pack(">i", 0)),  # offset delta past the last
    ],
)
def test_hostile_batches_fail_closed(mangle: object) -> None:
    good = build_record_batch([(b"k", b"v", T0), (b"k", b"w", T0)])
    bad = mangle(good)  # type: ignore[operator]
    m = OffsetMap()
    with pytest.raises(CleanerError):
        build_offset_map(list(split_batches(bad)), m)
    with pytest.raises(CleanerError):
        clean_batch(bad, m, now_ms=T0, delete_retention_ms=0)


def test_hostile_gzip_fails_closed() -> None:
    good = build_record_batch([(b"k", b"v" * 100, T0)], compression=1)
    bad = _corrupt(good, 70, b"\x00\x00\x00\x00")
    with pytest.raises(CleanerError):
        clean_batch(bad, OffsetMap(), now_ms=T0, delete_retention_ms=0)


def test_offset_map_bounded() -> None:
    m = OffsetMap(24 * 10)
    assert m.slots == 9
    for i in range(9):
        m.put(bytes([i]), i)
    assert m.room() == 0
    m.put(b"\x00", 9)  # a known key still fits
    with pytest.raises(AssertionError):
        m.put(b"new", 10)


@pytest.mark.parametrize("codec", [2, 3, 4], ids=["snappy", "lz4", "zstd"])
def test_every_codec_is_cleaned_and_keeps_its_codec(codec: int) -> None:
    batches = _batches([(b"k", b"v1"), (b"j", b"x"), (b"k", b"v2")], [3], [codec])
    (cleaned,) = _clean(batches, T0)
    h = check_batch(cleaned)
    assert h.attributes & bh.ATTR_COMPRESSION_MASK == codec
    assert [(r.key, r.value) for r in parse_records(TP, cleaned)] == [(b"j", b"x"), (b"k", b"v2")]
    assert keyless_record(batches[0]) is False
    assert keyless_record(_build([(None, b"v", T0)], codec)) is True


@pytest.mark.parametrize("codec", [0, 3], ids=["none", "lz4"])
def test_keyless_indices_names_each_record_without_a_key_for_the_produce_answer(codec: int) -> None:
    batch = _build([(None, b"a", T0), (b"k", b"b", T0), (b"j", b"c", T0), (None, b"d", T0)], codec)
    assert keyless_indices(batch) == [0, 3]  # KIP-467's batch_index of each
    assert keyless_indices(_build([(b"k", b"v", T0)], codec)) == []


@pytest.mark.parametrize("codec", [1, 2, 3, 4], ids=["gzip", "snappy", "lz4", "zstd"])
def test_hostile_compressed_bodies_fail_closed(codec: int) -> None:
    good = _build([(b"k", b"v" * 100, T0)], codec)
    m = OffsetMap()
    truncated = bytearray(good[:-3])
    struct.pack_into(">i", truncated, 8, len(truncated) - bh.LOG_OVERHEAD)
    struct.pack_into(">I", truncated, 17, crc32c(memoryview(truncated)[21:]))
    for bad in (_corrupt(good, 62, b"\xde\xad\xbe\xef" * 2), bytes(truncated)):
        with pytest.raises(CleanerError, match=CODEC_NAMES[codec]):
            clean_batch(bad, m, now_ms=T0, delete_retention_ms=0)


def test_decompression_bomb_fails_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    # A batch whose zstd body expands past the bound: refused, nothing allocated past it.
    monkeypatch.setattr(cleaner, "DECOMPRESSED_BYTES_MAX", 1 << 16)
    bomb = _build([(b"k", bytes(1 << 20), T0)], 4)
    with pytest.raises(CleanerError, match="zstd: expands past 65536"):
        clean_batch(bomb, OffsetMap(), now_ms=T0, delete_retention_ms=0)
