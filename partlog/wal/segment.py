"""The WAL segment format (docs/design/wal.md, "WAL segments").

    byte 0                 format version, 0 (as KIP-1163)
    bytes 1..F             Kafka v2 record batches, contiguous per partition,
                           partitions in order of their first batch, batches in
                           arrival order
    bytes F..T             footer: msgpack map (see ``Footer.pack``)
    last 12 bytes          trailer: footer length u32, CRC-32C of the footer
                           u32 (both big-endian), magic b"PLWF"

Batch readers need only the byte ranges the leaders' logs point at; the footer
is for ``walmgr`` and for humans (``partlog wal dump``), and is read with one
suffix-range GET of ``FOOTER_READ_BYTES``.

Everything here is sans-IO except :func:`read_footer`, which takes an
:class:`~partlog.wal.objectstore.ObjectStore`.  Every format error is a
:class:`WalFormatError` naming the object and the byte offset.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import msgpack

from partlog.kafka.batch_header import CRC_START, HEADER_SIZE, LOG_OVERHEAD, MAGIC_V2
from partlog.kafka.crc32c import crc32c
from partlog.kafka.records import TopicIdPartition
from partlog.wal.objectstore import ObjectStore

FORMAT_VERSION = 0
TRAILER_MAGIC = b"PLWF"
_TRAILER = struct.Struct(">II4s")
TRAILER_BYTES = _TRAILER.size  # 12
# One suffix GET of this many bytes reads the footer of any segment with up
# to ~1500 partitions (about 40 bytes a partition); larger footers take a
# second ranged GET.  S3 charges per request, not per byte, so reading more
# than needed is cheaper than a second request.
FOOTER_READ_BYTES = 64 * 1024
# A footer larger than this is refused as corrupt: 1 MiB is ~25,000
# partitions in one segment, far above a broker's 4 MiB buffer.
FOOTER_BYTES_MAX = 1 << 20
_BATCH_LENGTH = struct.Struct(">i")
_CRC = struct.Struct(">I")


class WalFormatError(ValueError):
    """A WAL object (or part of one) is not a valid segment.

    ``key`` names the object and ``offset`` the byte where the problem is.
    """

    def __init__(self, key: str, offset: int, problem: str) -> None:
        super().__init__(f"{key} at byte {offset}: {problem}")
        self.key = key
        self.offset = offset
        self.problem = problem


@dataclass(frozen=True, slots=True)
class PartitionRange:
    """Where one partition's batches lie in a segment."""

    topic_id_partition: TopicIdPartition
    byte_offset: int
    size: int
    batch_count: int


@dataclass(frozen=True, slots=True)
class Footer:
    broker_id: int
    created_ms: int
    partitions: tuple[PartitionRange, ...]
    # The cluster whose broker wrote the segment (None: an embedder's broker
    # that has none; walmgr never deletes such an object).
    cluster_id: uuid.UUID | None = None

    def pack(self) -> bytes:
        # Short field names keep footers small; topic ids as 16 raw bytes.
        doc: dict[str, Any] = {
            "v": FORMAT_VERSION,
            "broker": self.broker_id,
            "created_ms": self.created_ms,
        }
        if self.cluster_id is not None:
            doc["cluster"] = self.cluster_id.bytes
        raw: bytes = msgpack.packb(
            {
                **doc,
                "parts": [
                    [
                        r.topic_id_partition.topic_id.bytes,
                        r.topic_id_partition.partition,
                        r.byte_offset,
                        r.size,
                        r.batch_count,
                    ]
                    for r in self.partitions
                ],
            },
            use_bin_type=True,
        )
        return raw

    @classmethod
    def unpack(cls, raw: bytes, *, key: str, offset: int) -> Footer:
        """Parse a footer found at byte ``offset`` of ``key``."""
        try:
            doc = msgpack.unpackb(raw, raw=False, strict_map_key=True)
        except Exception as e:  # msgpack raises several unrelated types
            raise WalFormatError(key, offset, f"footer is not valid msgpack: {e}") from e
        if not isinstance(doc, dict):
            raise WalFormatError(key, offset, f"footer is a {type(doc).__name__}, not a map")
        if doc.get("v") != FORMAT_VERSION:
            raise WalFormatError(key, offset, f"footer version {doc.get('v')!r}, this code reads {FORMAT_VERSION}")
        broker, created, parts = doc.get("broker"), doc.get("created_ms"), doc.get("parts")
        if not isinstance(broker, int) or not isinstance(created, int) or not isinstance(parts, list):
            raise WalFormatError(key, offset, "footer lacks broker, created_ms or parts")
        cluster = doc.get("cluster")
        if cluster is not None and (type(cluster) is not bytes or len(cluster) != 16):
            raise WalFormatError(key, offset, f"footer cluster id is not 16 bytes: {cluster!r:.60}")
        ranges = []
        for i, p in enumerate(parts):
            if (
                not isinstance(p, list)
                or len(p) != 5
                or not isinstance(p[0], bytes)
                or len(p[0]) != 16
                or not all(isinstance(x, int) for x in p[1:])
            ):
                raise WalFormatError(key, offset, f"footer partition entry {i} is malformed: {p!r:.80}")
            if p[1] < 0:
                raise WalFormatError(key, offset, f"footer partition entry {i} has partition {p[1]}")
            ranges.append(PartitionRange(TopicIdPartition(uuid.UUID(bytes=p[0]), p[1]), p[2], p[3], p[4]))
        return cls(broker, created, tuple(ranges), None if cluster is None else uuid.UUID(bytes=cluster))


@dataclass(frozen=True, slots=True)
class BatchCoordinate:
    """Where one added batch ended up; ``index`` is its position in add order."""

    index: int
    topic_id_partition: TopicIdPartition
    byte_offset: int
    size: int


@dataclass(frozen=True, slots=True)
class WalSegment:
    data: bytes
    footer: Footer
    # In add order: coordinates[i] is the i-th batch given to add().
    coordinates: tuple[BatchCoordinate, ...]


class WalSegmentBuilder:
    """Collects batches for one segment; ``build()`` lays them out.

    Sans-IO: the broker's WAL buffer owns one builder per segment and decides
    when to rotate, from ``size_bytes``.
    """

    def __init__(self, broker_id: int, created_ms: int, cluster_id: uuid.UUID | None = None) -> None:
        self.broker_id = broker_id
        self.created_ms = created_ms
        self.cluster_id = cluster_id
        self._by_tp: dict[TopicIdPartition, list[tuple[int, bytes]]] = {}
        self._count = 0
        self._batch_bytes = 0

    def add(self, tp: TopicIdPartition, batch: bytes) -> int:
        """Add one v2 batch of partition ``tp``; returns its index (add order).

        Only the batch framing is checked here (the leader validates the
        rest): a batch whose length field disagrees with its size would make
        the segment unreadable for every partition in it.
        """
        if len(batch) < HEADER_SIZE:
            raise ValueError(f"batch for {tp} is {len(batch)} bytes, shorter than a v2 header")
        (length,) = _BATCH_LENGTH.unpack_from(batch, 8)
        if length + LOG_OVERHEAD != len(batch):
            raise ValueError(f"batch for {tp}: length field says {length + LOG_OVERHEAD} bytes, got {len(batch)}")
        index = self._count
        self._by_tp.setdefault(tp, []).append((index, batch))
        self._count += 1
        self._batch_bytes += len(batch)
        return index

    @property
    def batch_count(self) -> int:
        return self._count

    @property
    def size_bytes(self) -> int:
        """Bytes of batches so far (the footer adds ~40 bytes a partition)."""
        return 1 + self._batch_bytes

    def build(self) -> WalSegment:
        chunks: list[bytes] = [bytes([FORMAT_VERSION])]
        pos = 1
        coords: list[BatchCoordinate | None] = [None] * self._count
        ranges = []
        for tp, batches in self._by_tp.items():
            start = pos
            for index, batch in batches:
                coords[index] = BatchCoordinate(index, tp, pos, len(batch))
                chunks.append(batch)
                pos += len(batch)
            ranges.append(PartitionRange(tp, start, pos - start, len(batches)))
        footer = Footer(self.broker_id, self.created_ms, tuple(ranges), self.cluster_id)
        raw = footer.pack()
        chunks.append(raw)
        chunks.append(_TRAILER.pack(len(raw), crc32c(raw), TRAILER_MAGIC))
        assert all(c is not None for c in coords)
        return WalSegment(b"".join(chunks), footer, tuple(c for c in coords if c is not None))


# ------------------------------------------------------------------ reading


def parse_footer(tail: bytes, object_size: int, *, key: str) -> Footer | int:
    """The footer, from the last ``len(tail)`` bytes of an object of
    ``object_size`` bytes; or, when ``tail`` is too short to hold the whole
    footer, the number of tail bytes needed (read them and call again).

    Checks version byte presence, trailer magic, footer length and CRC, and
    that the footer accounts for the whole batch area: it names at least one
    partition, and its ranges, sorted, tile ``[1, footer start)`` exactly
    (no overlap, no gap), each with at least one batch and room for a v2
    header per batch.  So every batch of the object lies in the range of a
    partition the footer names: walmgr asks exactly those partitions'
    leaders, and a footer that leaves bytes unaccounted for is refused
    rather than trusted (docs/design/cluster-identity.md, "Positive evidence").  Batches carry no
    partition id, so no read of the object could check more than this about
    which partitions it holds; :func:`check_segment` also counts the batches.
    """
    if object_size < 1 + TRAILER_BYTES:
        raise WalFormatError(key, 0, f"object is {object_size} bytes, shorter than a version byte and a trailer")
    if len(tail) < TRAILER_BYTES:
        return TRAILER_BYTES
    trailer_at = object_size - TRAILER_BYTES
    footer_len: int
    footer_crc: int
    magic: bytes
    footer_len, footer_crc, magic = _TRAILER.unpack_from(tail, len(tail) - TRAILER_BYTES)
    if magic != TRAILER_MAGIC:
        raise WalFormatError(key, trailer_at + 8, f"trailer magic is {magic!r}, expected {TRAILER_MAGIC!r}")
    if footer_len > FOOTER_BYTES_MAX or footer_len > object_size - 1 - TRAILER_BYTES:
        raise WalFormatError(
            key, trailer_at, f"footer length {footer_len} does not fit an object of {object_size} bytes"
        )
    need = footer_len + TRAILER_BYTES
    if len(tail) < need:
        return need
    footer_at = trailer_at - footer_len
    raw = tail[len(tail) - need : len(tail) - TRAILER_BYTES]
    if crc32c(raw) != footer_crc:
        raise WalFormatError(key, footer_at, f"footer CRC-32C is {crc32c(raw):#010x}, trailer says {footer_crc:#010x}")
    footer: Footer = Footer.unpack(raw, key=key, offset=footer_at)
    if not footer.partitions:
        raise WalFormatError(key, footer_at, "footer names no partitions")
    if len({r.topic_id_partition for r in footer.partitions}) != len(footer.partitions):
        raise WalFormatError(key, footer_at, "footer names a partition twice")
    end = 1
    for r in sorted(footer.partitions, key=lambda r: r.byte_offset):
        if r.byte_offset != end:
            what = "overlaps the range before it" if r.byte_offset < end else f"leaves bytes [{end}, {r.byte_offset})"
            raise WalFormatError(
                key, footer_at, f"footer range of {r.topic_id_partition} [{r.byte_offset}, +{r.size}) {what}"
            )
        if r.batch_count <= 0 or r.size < r.batch_count * HEADER_SIZE or r.byte_offset + r.size > footer_at:
            raise WalFormatError(
                key,
                footer_at,
                f"footer range of {r.topic_id_partition} [{r.byte_offset}, +{r.size}) with {r.batch_count} "
                f"batches does not fit the batch area [1, {footer_at})",
            )
        end = r.byte_offset + r.size
    if end != footer_at:
        raise WalFormatError(key, footer_at, f"footer leaves bytes [{end}, {footer_at}) to no partition")
    return footer


def read_footer(store: ObjectStore, key: str) -> tuple[Footer, int]:
    """The footer of WAL object ``key`` and the object's size: one suffix GET,
    a second ranged GET only for footers above ``FOOTER_READ_BYTES``."""
    tail, size = store.get_suffix(key, FOOTER_READ_BYTES)
    got = parse_footer(tail, size, key=key)
    if isinstance(got, int):
        if got > size:
            raise WalFormatError(key, 0, f"footer needs {got} bytes, object has {size}")
        start = size - got
        tail = store.get_range(key, start, got - len(tail)) + tail
        got = parse_footer(tail, size, key=key)
        if isinstance(got, int):  # the object changed under us
            raise WalFormatError(key, start, "object changed while its footer was read")
    return got, size


def read_version(data: bytes, *, key: str) -> None:
    """Check byte 0 of an object read from its start."""
    if not data:
        raise WalFormatError(key, 0, "empty object")
    if data[0] != FORMAT_VERSION:
        raise WalFormatError(key, 0, f"format version {data[0]}, this code reads {FORMAT_VERSION}")


def iter_batches(data: bytes, *, key: str, object_offset: int) -> Iterator[tuple[int, bytes]]:
    """The v2 batches of ``data``, which was read from byte ``object_offset``
    of ``key`` and must hold whole batches back to back.  Yields
    ``(object byte offset, batch bytes)``; checks framing, magic and the
    batch CRC-32C (Kafka's: bytes 21 to the end)."""
    pos = 0
    view = memoryview(data)
    while pos < len(data):
        at = object_offset + pos
        if len(data) - pos < HEADER_SIZE:
            raise WalFormatError(key, at, f"truncated batch: {len(data) - pos} bytes left, a header has {HEADER_SIZE}")
        (length,) = _BATCH_LENGTH.unpack_from(data, pos + 8)
        size = length + LOG_OVERHEAD
        if size < HEADER_SIZE:
            raise WalFormatError(key, at, f"batch length field {length} is below the header size")
        if pos + size > len(data):
            raise WalFormatError(key, at, f"truncated batch: needs {size} bytes, {len(data) - pos} left")
        if data[pos + 16] != MAGIC_V2:
            raise WalFormatError(key, at, f"batch magic {data[pos + 16]}, expected {MAGIC_V2}")
        (want,) = _CRC.unpack_from(data, pos + 17)
        got = crc32c(view[pos + CRC_START : pos + size])
        if got != want:
            raise WalFormatError(key, at, f"batch CRC-32C is {got:#010x}, header says {want:#010x}")
        yield at, bytes(view[pos : pos + size])
        pos += size


def check_segment(data: bytes, *, key: str) -> Footer:
    """Fully verify a whole segment: version, footer (whose ranges
    :func:`parse_footer` checks tile the batch area), and every batch's
    framing and CRC, counted against the footer's batch counts."""
    read_version(data, key=key)
    got = parse_footer(data, len(data), key=key)
    assert not isinstance(got, int)  # the whole object holds the whole footer
    for r in got.partitions:
        count = sum(
            1 for _ in iter_batches(data[r.byte_offset : r.byte_offset + r.size], key=key, object_offset=r.byte_offset)
        )
        if count != r.batch_count:
            raise WalFormatError(
                key, r.byte_offset, f"{r.topic_id_partition}: footer says {r.batch_count} batches, found {count}"
            )
    return got


def footer_to_json(key: str, size: int, footer: Footer) -> dict[str, Any]:
    return {
        "key": key,
        "size": size,
        "version": FORMAT_VERSION,
        "broker_id": footer.broker_id,
        "created_ms": footer.created_ms,
        "cluster_id": None if footer.cluster_id is None else str(footer.cluster_id),
        "partitions": [
            {
                "topic_id": str(r.topic_id_partition.topic_id),
                "partition": r.topic_id_partition.partition,
                "byte_offset": r.byte_offset,
                "size": r.size,
                "batch_count": r.batch_count,
            }
            for r in footer.partitions
        ],
    }
