"""Kafka's record batch codecs (the batch attributes' low three bits),
bounded: :func:`decompress` and :func:`compress` for codecs 0-4 in the
formats clients put on the wire in v2 batches.

- 0 none; 1 gzip (RFC 1952, one member or several);
- 2 snappy: the xerial framing Kafka's Java client writes (``SnappyFactory``
  wraps snappy-java's ``SnappyOutputStream``: the magic ``\\x82SNAPPY\\x00``,
  two int32 versions, then int32-length-prefixed raw snappy blocks);
  without the magic the body is one raw snappy block, as snappy-java's
  ``SnappyInputStream`` and librdkafka's reader also accept;
- 3 lz4: the LZ4 frame format (KIP-57).  Kafka before 0.10 computed the
  frame header checksum over the magic too; the Java client writes the
  right one, and either is accepted here (the wrong one is repaired before
  the frame is read).  Written with independent blocks, which Kafka's
  ``KafkaLZ4BlockInputStream`` requires;
- 4 zstd: zstd frames.

:func:`decompress` never allocates more than ``max_bytes`` of output,
whatever the input: a decompression bomb (a small body that expands past
the bound) or a corrupt body raises :class:`CompressionError` (a
``ValueError``) naming the codec and the reason.  lz4 and zstd decompress
into a fixed buffer that starts small and grows fourfold up to
``max_bytes``; snappy's blocks declare their length, checked against what
is left before a block is decompressed; gzip streams with zlib's limit.
"""

from __future__ import annotations

import gzip
import struct
import zlib
from typing import Final

import cramjam

CODEC_NONE: Final = 0
CODEC_GZIP: Final = 1
CODEC_SNAPPY: Final = 2
CODEC_LZ4: Final = 3
CODEC_ZSTD: Final = 4
CODEC_NAMES: Final = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}

# snappy-java's stream header: magic, version 1, compatible version 1.
XERIAL_MAGIC: Final = b"\x82SNAPPY\x00"
XERIAL_HEADER: Final = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
# snappy-java's default block: 32 KiB of input per compressed block.
XERIAL_BLOCK_BYTES: Final = 32 << 10
LZ4_FRAME_MAGIC: Final = b"\x04\x22\x4d\x18"
# The first output buffer of a lz4 or zstd body: a few times the body (most
# batches compress 2-10x), never under 64 KiB; it grows fourfold on overflow.
GROW_FIRST_BYTES_MIN: Final = 64 << 10
GROW_FIRST_RATIO: Final = 8
GROW_FACTOR: Final = 4
# zlib's window bits for a gzip wrapper.
GZIP_WBITS: Final = 16 + zlib.MAX_WBITS


class CompressionError(ValueError):
    """A body that does not decompress within the bound: codec and reason."""

    def __init__(self, codec: int, reason: str) -> None:
        super().__init__(f"{CODEC_NAMES.get(codec, f'codec {codec}')}: {reason}")
        self.codec = codec


def decompress(codec: int, body: bytes, max_bytes: int) -> bytes:
    """``body`` decompressed with Kafka's ``codec``; CompressionError when
    it is corrupt or expands past ``max_bytes``."""
    assert max_bytes >= 0
    if codec == CODEC_NONE:
        if len(body) > max_bytes:
            raise CompressionError(codec, f"{len(body)} bytes over {max_bytes}")
        return body
    if codec == CODEC_GZIP:
        return _gunzip(body, max_bytes)
    if codec == CODEC_SNAPPY:
        return _unsnappy(body, max_bytes)
    if codec == CODEC_LZ4:
        return _grow_into(codec, cramjam.lz4.decompress_into, _lz4_fix_header(body), max_bytes)
    if codec == CODEC_ZSTD:
        return _grow_into(codec, cramjam.zstd.decompress_into, body, max_bytes)
    raise CompressionError(codec, "unknown codec")


def compress(codec: int, body: bytes) -> bytes:
    """``body`` compressed as Kafka's Java client writes ``codec``."""
    if codec == CODEC_NONE:
        return body
    if codec == CODEC_GZIP:
        # mtime 0: the bytes are a function of the input.
        return gzip.compress(body, mtime=0)
    if codec == CODEC_SNAPPY:
        out = bytearray(XERIAL_HEADER)
        # At least one block: a reader takes a bare header for raw snappy.
        for at in range(0, max(1, len(body)), XERIAL_BLOCK_BYTES):
            block = bytes(cramjam.snappy.compress_raw(body[at : at + XERIAL_BLOCK_BYTES]))
            out += struct.pack(">i", len(block)) + block
        return bytes(out)
    if codec == CODEC_LZ4:
        # Independent blocks: Kafka's Java reader refuses a linked-block frame.
        c = cramjam.lz4.Compressor(block_linked=False)
        c.compress(body)
        return bytes(c.finish())
    if codec == CODEC_ZSTD:
        return bytes(cramjam.zstd.compress(body))
    raise CompressionError(codec, "unknown codec")


def _gunzip(body: bytes, max_bytes: int) -> bytes:
    out = bytearray()
    rest = body
    # Members one after another (gzip allows it; Java's GZIPInputStream reads them).
    while True:
        d = zlib.decompressobj(GZIP_WBITS)
        try:
            out += d.decompress(rest, max_bytes - len(out))
        except zlib.error as e:
            raise CompressionError(CODEC_GZIP, str(e)) from None
        if d.unconsumed_tail:
            raise CompressionError(CODEC_GZIP, f"expands past {max_bytes} bytes")
        if not d.eof:
            raise CompressionError(CODEC_GZIP, "truncated")
        rest = d.unused_data
        if not rest:
            return bytes(out)


def _unsnappy(body: bytes, max_bytes: int) -> bytes:
    if not body.startswith(XERIAL_MAGIC):
        return _unsnappy_block(body, max_bytes, max_bytes)
    if len(body) < len(XERIAL_HEADER):
        raise CompressionError(CODEC_SNAPPY, "xerial header truncated")
    out = bytearray()
    pos = len(XERIAL_HEADER)
    while pos < len(body):
        if pos + 4 > len(body):
            raise CompressionError(CODEC_SNAPPY, "xerial block length truncated")
        (n,) = struct.unpack_from(">i", body, pos)
        if n < 0 or pos + 4 + n > len(body):
            raise CompressionError(CODEC_SNAPPY, f"xerial block of {n} bytes overruns the body")
        out += _unsnappy_block(body[pos + 4 : pos + 4 + n], max_bytes - len(out), max_bytes)
        pos += 4 + n
    return bytes(out)


def _unsnappy_block(block: bytes, left: int, max_bytes: int) -> bytes:
    """One raw snappy block: its varint header declares its length, checked
    against the ``left`` bytes of ``max_bytes`` before anything is allocated."""
    try:
        n = cramjam.snappy.decompress_raw_len(block)
    except cramjam.DecompressionError as e:
        raise CompressionError(CODEC_SNAPPY, str(e)) from None
    if n > left:
        raise CompressionError(CODEC_SNAPPY, f"block of {n} bytes expands past {max_bytes} bytes")
    out = bytearray(n)
    try:
        written = cramjam.snappy.decompress_raw_into(block, out)
    except cramjam.DecompressionError as e:
        raise CompressionError(CODEC_SNAPPY, str(e)) from None
    if written != n:
        raise CompressionError(CODEC_SNAPPY, f"block declares {n} bytes, holds {written}")
    return bytes(out)


def _grow_into(codec: int, into: object, body: bytes, max_bytes: int) -> bytes:
    """Decompress into a buffer of at most ``max_bytes``: cramjam's
    ``decompress_into`` fails once the buffer is full, so a bomb stops at the
    bound (total work under twice the bound's, the buffers growing fourfold)."""
    size = min(max_bytes, max(GROW_FIRST_BYTES_MIN, GROW_FIRST_RATIO * len(body)))
    while True:
        out = bytearray(size)
        try:
            n = into(body, out)  # type: ignore[operator]
        except cramjam.DecompressionError as e:
            # The only error a buffer too small gives (cramjam 2.x); any
            # other is the body's.
            if "whole buffer" not in str(e):
                raise CompressionError(codec, str(e)) from None
            if size >= max_bytes:
                raise CompressionError(codec, f"expands past {max_bytes} bytes") from None
            size = min(max_bytes, size * GROW_FACTOR)
            continue
        assert isinstance(n, int) and 0 <= n <= size
        return bytes(memoryview(out)[:n])


def _lz4_fix_header(body: bytes) -> bytes:
    """The frame with KIP-57's wrong header checksum (xxh32 over the magic
    and the descriptor, as Kafka before 0.10 wrote) replaced by the right
    one (over the descriptor); any other frame as it is."""
    if len(body) < 7 or not body.startswith(LZ4_FRAME_MAGIC):
        return body
    flg = body[4]
    end = 6 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0)  # content size, dictionary id
    if len(body) <= end:
        return body
    if body[end] == (xxh32(body[4:end]) >> 8) & 0xFF:
        return body
    if body[end] != (xxh32(body[:end]) >> 8) & 0xFF:
        return body  # a wrong checksum either way: the reader refuses it
    return body[:end] + bytes([(xxh32(body[4:end]) >> 8) & 0xFF]) + body[end + 1 :]


_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def xxh32(data: bytes, seed: int = 0) -> int:
    """XXH32, for the lz4 frame header's few bytes only (pure Python)."""
    n = len(data)
    pos = 0
    if n >= 16:
        v = [(seed + _P1 + _P2) & _M32, (seed + _P2) & _M32, seed & _M32, (seed - _P1) & _M32]
        while pos + 16 <= n:
            for i in range(4):
                (lane,) = struct.unpack_from("<I", data, pos + 4 * i)
                v[i] = (_rotl((v[i] + lane * _P2) & _M32, 13) * _P1) & _M32
            pos += 16
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & _M32
    else:
        h = (seed + _P5) & _M32
    h = (h + n) & _M32
    while pos + 4 <= n:
        (word,) = struct.unpack_from("<I", data, pos)
        h = (_rotl((h + word * _P3) & _M32, 17) * _P4) & _M32
        pos += 4
    while pos < n:
        h = (_rotl((h + data[pos] * _P5) & _M32, 11) * _P1) & _M32
        pos += 1
    h ^= h >> 15
    h = (h * _P2) & _M32
    h ^= h >> 13
    h = (h * _P3) & _M32
    h ^= h >> 16
    return h


__all__ = [
    "CODEC_GZIP",
    "CODEC_LZ4",
    "CODEC_NAMES",
    "CODEC_NONE",
    "CODEC_SNAPPY",
    "CODEC_ZSTD",
    "CompressionError",
    "compress",
    "decompress",
    "xxh32",
]
