"""Kafka's codecs (partlog/kafka/compression.py): round trips per codec,
kafka-python's codecs (independent implementations) read what compress
writes and decompress reads what they write, and hostile bodies (random
bytes, truncated, a bomb past the bound) fail closed with a ValueError
naming the codec, never allocating past the bound."""

from __future__ import annotations

import os
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka import codec as kc

from partlog.kafka.compression import (
    CODEC_GZIP,
    CODEC_LZ4,
    CODEC_NAMES,
    CODEC_NONE,
    CODEC_SNAPPY,
    CODEC_ZSTD,
    CompressionError,
    compress,
    decompress,
    xxh32,
)

CODECS = sorted(CODEC_NAMES)
COMPRESSED = [c for c in CODECS if c != CODEC_NONE]
# kafka-python's decoder and encoder per codec, when its libraries are installed.
KAFKA_PYTHON = {
    CODEC_GZIP: (kc.has_gzip(), kc.gzip_decode, kc.gzip_encode),
    CODEC_SNAPPY: (kc.has_snappy(), kc.snappy_decode, kc.snappy_encode),
    CODEC_LZ4: (kc.has_lz4(), kc.lz4_decode, kc.lz4_encode),
    CODEC_ZSTD: (kc.has_zstd(), kc.zstd_decode, kc.zstd_encode),
}
bodies = st.one_of(st.binary(max_size=2000), st.binary(max_size=40).map(lambda b: b * 3000))


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(CODECS), bodies)
def test_round_trip(codec: int, body: bytes) -> None:
    assert decompress(codec, compress(codec, body), len(body)) == body


@pytest.mark.parametrize("codec", COMPRESSED, ids=[CODEC_NAMES[c] for c in COMPRESSED])
@settings(max_examples=30, deadline=None)
@given(body=bodies)
def test_kafka_python_reads_and_writes(codec: int, body: bytes) -> None:
    installed, decode, encode = KAFKA_PYTHON[codec]
    if not installed:
        pytest.skip(f"kafka-python has no {CODEC_NAMES[codec]} library here")
    assert decode(compress(codec, body)) == body
    assert decompress(codec, encode(body), len(body)) == body


def test_snappy_raw_and_xerial() -> None:
    body = os.urandom(100) + b"z" * 100_000
    framed = compress(CODEC_SNAPPY, body)
    assert framed.startswith(b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01")
    if kc.has_snappy():
        # Raw snappy, as some clients write it, is read too.
        assert decompress(CODEC_SNAPPY, kc.snappy_encode(body, xerial_compatible=False), len(body)) == body


def test_lz4_independent_blocks_and_kip57_checksum() -> None:
    body = b"kafka" * 50_000
    frame = compress(CODEC_LZ4, body)
    assert frame[4] & 0x20  # block independence: Kafka's Java reader needs it
    # The header checksum over the descriptor, as lz4 itself computes it.
    assert frame[6] == (xxh32(frame[4:6]) >> 8) & 0xFF
    # Kafka < 0.10 hashed the magic too (KIP-57): accepted as well.
    broken = frame[:6] + bytes([(xxh32(frame[:6]) >> 8) & 0xFF]) + frame[7:]
    assert broken != frame
    assert decompress(CODEC_LZ4, broken, len(body)) == body
    # Any other checksum is refused.
    other = next(b for b in range(256) if b not in (frame[6], broken[6]))
    with pytest.raises(CompressionError, match="lz4"):
        decompress(CODEC_LZ4, frame[:6] + bytes([other]) + frame[7:], len(body))


def test_xxh32_vectors() -> None:
    # The reference implementation's values.
    assert xxh32(b"") == 0x02CC5D05
    assert xxh32(b"a") == 0x550D7456
    assert xxh32(b"abc") == 0x32D153FF
    assert xxh32(b"Nobody inspects the spammish repetition") == 0xE2293B2F


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(COMPRESSED), st.binary(max_size=300))
def test_random_bytes_fail_closed(codec: int, junk: bytes) -> None:
    try:
        out = decompress(codec, junk, 1 << 16)
    except CompressionError as e:
        assert str(e).startswith(CODEC_NAMES[codec])
    else:
        assert len(out) <= 1 << 16


@pytest.mark.parametrize("codec", COMPRESSED, ids=[CODEC_NAMES[c] for c in COMPRESSED])
def test_truncated_fails_closed(codec: int) -> None:
    body = os.urandom(5000) * 4
    whole = compress(codec, body)
    for cut in (1, 7, len(whole) // 2, len(whole) - 1):
        with pytest.raises(CompressionError, match=CODEC_NAMES[codec]):
            assert decompress(codec, whole[:cut], len(body)) == body


@pytest.mark.parametrize("codec", CODECS, ids=[CODEC_NAMES[c] for c in CODECS])
def test_bomb_stops_at_the_bound(codec: int) -> None:
    bound = 1 << 20
    body = compress(codec, bytes(64 << 20 if codec != CODEC_NONE else bound + 1))
    with pytest.raises(CompressionError, match=f"{CODEC_NAMES[codec]}: .*{bound}"):
        decompress(codec, body, bound)
    # Exactly the bound is fine (and a body larger than the first buffer grows it).
    assert decompress(codec, compress(codec, bytes(bound)), bound) == bytes(bound)


def test_snappy_block_declaring_a_huge_length() -> None:
    # A raw block whose varint header says 2**32-1 bytes: refused before allocating.
    huge = b"\xff\xff\xff\xff\x0f" + b"\x00" * 10
    with pytest.raises(CompressionError, match="snappy: block of 4294967295 bytes"):
        decompress(CODEC_SNAPPY, huge, 1 << 20)
    xerial = compress(CODEC_SNAPPY, b"")[:16] + struct.pack(">i", len(huge)) + huge
    with pytest.raises(CompressionError, match="snappy"):
        decompress(CODEC_SNAPPY, xerial, 1 << 20)


def test_gzip_members_and_unknown_codec() -> None:
    two = compress(CODEC_GZIP, b"ab") + compress(CODEC_GZIP, b"cd")
    assert decompress(CODEC_GZIP, two, 4) == b"abcd"
    with pytest.raises(CompressionError, match="codec 5: unknown codec"):
        decompress(5, b"", 10)
    assert issubclass(CompressionError, ValueError)
