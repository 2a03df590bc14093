"""The fetch path, sans-IO: from the leader's batch coordinates to the bytes a
consumer receives.

1. ``plan_reads`` groups the coordinates of one fetch by WAL object and plans
   ONE ranged GET per object, spanning its first to its last batch (S3 bills
   per request: one larger GET beats several small ones; the gaps are other
   partitions' batches of the same segment, at most a segment's size).
2. The shell performs the reads (through :class:`RangeCache`).
3. ``assemble`` cuts each batch out of its read, checks its framing and its
   CRC-32C as uploaded, and splices in the header the leader stored (base
   offset, leader epoch, and for LogAppendTime topics the append time with
   its CRC), which is what Kafka's log would hold.

A batch stored inline in the metadata log (a transaction marker's control
batch, ``BatchMetadata.inline``) comes with its bytes: no read is planned
for it and ``assemble`` serves it as it is.

A batch whose bytes fail a check is not served: the partition's answer ends
before it with ``CORRUPT_MESSAGE`` and a message naming object and offset.
So does an object that ends before a batch the log points at (truncated:
the store answers RangeNotSatisfiable): retrying cannot make it longer.
A read that fails otherwise (the object deleted under a racing walmgr, S3
down) fails only the partitions that needed it, with a retriable error.

A tiered segment's ``.log`` holds one partition's batches back to back, so
its reads are widened to aligned chunks of ``chunk_bytes``
(:func:`segment_chunks`, docs/design/tiered-reads.md): a consumer catching
up reads the next chunk from the cache, and one GET serves ``chunk_bytes``
of its history whatever its fetch size.  A WAL object's read is never
widened (the bytes around a partition's are other partitions').
"""

from __future__ import annotations

import struct
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from partlog.kafka.batch_header import CRC_START, HEADER_SIZE, LOG_OVERHEAD, MAGIC_V2
from partlog.kafka.crc32c import crc32c
from partlog.kafka.errors import Errors
from partlog.kafka.records import BatchInfo, TopicIdPartition
from partlog.wal.key import LOG_SUFFIX
from partlog.wal.objectstore import RangeNotSatisfiableError

_CRC = struct.Struct(">I")
_LENGTH = struct.Struct(">i")

# The fetch cache's default size: recent segments' bytes, shared by all
# consumers of a broker, so that N consumers of the same partitions cost one
# GET, not N.
CACHE_BYTES_MAX_DEFAULT = 256 * 1024 * 1024
# A segment read's unit: 8 MiB, so that a catch-up read costs at most one GET
# per 8 MiB of a segment (issue 31's target is one per 4 MiB, and the last
# chunk of a segment is short); the cache holds 32 of them by default.
SEGMENT_READ_CHUNK_BYTES_DEFAULT = 8 * 1024 * 1024
# Read-ahead only while the cache holds this many chunks: with fewer, a
# chunk could be evicted before its reader came back for the rest of it,
# and every fetch would GET a whole chunk.
CACHE_CHUNKS_MIN = 8


@dataclass(frozen=True, slots=True)
class ObjectRead:
    key: str
    offset: int
    length: int


@dataclass(frozen=True, slots=True)
class PartitionData:
    """What one partition's fetch answers: the records bytes (whole batches,
    headers as the leader stored them) or an error for what could not be read."""

    topic_id_partition: TopicIdPartition
    error: Errors
    records: bytes
    error_message: str | None = None


def plan_reads(batches: Sequence[BatchInfo]) -> list[ObjectRead]:
    """One read per object, covering all of that object's batches in ``batches``."""
    spans: dict[str, tuple[int, int]] = {}
    for b in batches:
        if b.metadata.inline:
            continue  # a marker's control batch: its bytes came with it
        start, end = b.metadata.byte_offset, b.metadata.byte_offset + b.metadata.byte_size
        if b.object_key in spans:
            lo, hi = spans[b.object_key]
            spans[b.object_key] = (min(lo, start), max(hi, end))
        else:
            spans[b.object_key] = (start, end)
    return [ObjectRead(key, lo, hi - lo) for key, (lo, hi) in spans.items()]


@dataclass(frozen=True, slots=True)
class ChunkRead:
    """Part of an :class:`ObjectRead`, ``[want_offset, want_offset +
    want_length)``, served from ``fill``: the aligned chunk read (and
    cached) when no cached read holds it."""

    want_offset: int
    want_length: int
    fill: ObjectRead


def is_segment_key(key: str) -> bool:
    """Whether ``key`` names a tiered segment's ``.log`` (a WAL key ends in
    ``.wal``).  Only the read's size depends on it."""
    return key.endswith(LOG_SUFFIX)


def segment_chunks(read: ObjectRead, chunk_bytes: int) -> list[ChunkRead]:
    """The aligned chunks of ``chunk_bytes`` that cover ``read``, in order,
    each with the part of ``read`` it holds.  A chunk may run past the end
    of the object: the store answers the bytes there are (HTTP ranges)."""
    if chunk_bytes <= 0 or read.length <= 0:
        raise ValueError(f"chunks of {chunk_bytes} bytes for a read of {read.length}")
    out = []
    end = read.offset + read.length
    first = read.offset - read.offset % chunk_bytes
    for start in range(first, end, chunk_bytes):
        lo, hi = max(start, read.offset), min(start + chunk_bytes, end)
        out.append(ChunkRead(lo, hi - lo, ObjectRead(read.key, start, chunk_bytes)))
    return out


def join_chunks(
    read: ObjectRead, chunks: Sequence[ChunkRead], parts: Sequence[bytes | BaseException]
) -> tuple[int, bytes] | BaseException:
    """``read``'s bytes from the parts its ``chunks`` (:func:`segment_chunks`)
    brought, in order, up to the first that came back short (the object
    ends early: the batches past it fail their checks in :func:`assemble`).
    A part that failed fails the whole read, as one GET's failure would."""
    good: list[bytes] = []
    for chunk, part in zip(chunks, parts, strict=True):
        if isinstance(part, BaseException):
            return part
        good.append(part)
        if len(part) < chunk.want_length:
            break
    return read.offset, b"".join(good)


def batch_problem(batch: bytes, info: BatchInfo) -> str | None:
    """Why the uploaded bytes of ``info`` are not servable, or None."""
    md = info.metadata
    if len(batch) != md.byte_size:
        return f"read {len(batch)} bytes, the log says {md.byte_size}"
    if len(batch) < HEADER_SIZE:
        return f"batch of {len(batch)} bytes is shorter than a v2 header"
    (length,) = _LENGTH.unpack_from(batch, 8)
    if length + LOG_OVERHEAD != len(batch):
        return f"batch length field says {length + LOG_OVERHEAD} bytes, the log says {len(batch)}"
    if batch[16] != MAGIC_V2:
        return f"batch magic {batch[16]}"
    (want,) = _CRC.unpack_from(batch, 17)
    got = crc32c(memoryview(batch)[CRC_START:])
    if got != want:
        return f"batch CRC-32C is {got:#010x}, header says {want:#010x}"
    if md.header and md.header[8:12] != batch[8:12]:
        return "stored header's batch length differs from the uploaded batch"
    return None


def assemble(
    batches_by_partition: Mapping[TopicIdPartition, Sequence[BatchInfo]],
    reads: Mapping[str, tuple[int, bytes] | BaseException],
) -> list[PartitionData]:
    """The records of each partition, from ``reads``: object key -> (offset
    the read started at, bytes) or the exception the read raised."""
    out = []
    for tp, infos in batches_by_partition.items():
        chunks: list[bytes] = []
        error, message = Errors.NONE, None
        for info in infos:
            if info.metadata.inline:
                chunks.append(info.metadata.inline)
                continue
            got = reads.get(info.object_key)
            if isinstance(got, RangeNotSatisfiableError):
                # The object is shorter than the log says: corrupt, for good.
                error = Errors.CORRUPT_MESSAGE
                message = f"{info.object_key} at byte {info.metadata.byte_offset}: object ends before the batch ({got})"
                break
            if got is None or isinstance(got, BaseException):
                # The object may have been deleted under us (walmgr raced a
                # stale coordinate) or the store failed: retriable either way.
                error = Errors.KAFKA_STORAGE_ERROR
                message = f"{info.object_key}: read failed: {got!r}" if got is not None else "not read"
                break
            start, data = got
            lo = info.metadata.byte_offset - start
            batch = data[lo : lo + info.metadata.byte_size]
            problem = batch_problem(batch, info)
            if problem:
                error = Errors.CORRUPT_MESSAGE
                message = f"{info.object_key} at byte {info.metadata.byte_offset}: {problem}"
                break
            header = info.metadata.header or batch[:HEADER_SIZE]
            chunks.append(header + batch[HEADER_SIZE:])
        if chunks and error != Errors.NONE:
            # Serve what was good; the consumer's next fetch meets the error.
            error, message = Errors.NONE, None
        out.append(PartitionData(tp, error, b"".join(chunks), message))
    return out


class RangeCache:
    """An LRU cache of object byte ranges, bounded in bytes.

    ``get`` answers a range contained in any cached read of the same object.
    WAL objects are immutable, so a cached range is never stale; it can
    outlive the object (walmgr deleted it), which is harmless because no
    leader hands out coordinates in a deleted object.
    """

    def __init__(self, bytes_max: int = CACHE_BYTES_MAX_DEFAULT) -> None:
        if bytes_max < 0:
            raise ValueError(f"bytes_max must be >= 0, got {bytes_max}")
        self.bytes_max = bytes_max
        self._entries: OrderedDict[tuple[str, int], bytes] = OrderedDict()
        self._by_key: dict[str, set[int]] = {}
        self.bytes = 0
        self.hits = 0
        self.misses = 0
        self.evictions = 0

    def get(self, key: str, offset: int, length: int) -> bytes | None:
        for start in self._by_key.get(key, ()):
            data = self._entries[(key, start)]
            if start <= offset and offset + length <= start + len(data):
                self._entries.move_to_end((key, start))
                self.hits += 1
                return data[offset - start : offset - start + length]
        self.misses += 1
        return None

    def cached_bytes(self, key: str, offset: int) -> int:
        """How many bytes from ``offset`` one cached read of ``key`` holds
        (0: none); neither a hit nor a use."""
        best = 0
        for start in self._by_key.get(key, ()):
            data = self._entries[(key, start)]
            if start <= offset < start + len(data):
                best = max(best, start + len(data) - offset)
        return best

    def put(self, key: str, offset: int, data: bytes) -> None:
        if len(data) > self.bytes_max:
            return
        old = self._entries.pop((key, offset), None)
        if old is not None:
            self.bytes -= len(old)
        self._entries[(key, offset)] = data
        self._by_key.setdefault(key, set()).add(offset)
        self.bytes += len(data)
        while self.bytes > self.bytes_max:
            (k, start), evicted = self._entries.popitem(last=False)
            self._by_key[k].discard(start)
            if not self._by_key[k]:
                del self._by_key[k]
            self.bytes -= len(evicted)
            self.evictions += 1
