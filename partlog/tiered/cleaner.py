"""The log cleaner's core (issue 31, docs/design/compaction.md), sans-IO:
Kafka's ``Cleaner`` rules over the v2 batches of tiered segments.

Two passes over the batches of a cleanable range, as Kafka's cleaner:

1. :func:`build_offset_map` fills an :class:`OffsetMap` (key -> the
   latest offset holding it) from the range's batches, in offset order;
2. :func:`clean_batch` rewrites each batch of the log below the map's end:
   a record stays when (``Cleaner.shouldRetainRecord``) it has a key, no
   later offset holds the key, and it has a value or it is a tombstone whose
   batch's delete horizon has not passed.  The first clean that keeps a
   tombstone stamps its batch's delete horizon (``now + delete.retention.ms``,
   KIP-534: the base timestamp field, attribute bit ``0x40``, the records'
   timestamp deltas rebased so their timestamps do not change); a later
   clean past the horizon drops the batch's tombstones.

Transactional batches (given a :class:`TxnFilter`, Kafka's
``CleanedTransactionMetadata``: the aborted transactions of the range, as
Fetch lists them): a batch of an aborted transaction loses every record
and its keys never enter the map (Kafka's ``onBatchRead``); a committed
one is cleaned as any other, its header (producer id, epoch, sequence,
the transactional bit) kept, as Kafka's ``filterInto`` keeps it.  Without
a filter they are left untouched, as before the rules were built.

A rewritten batch keeps its base offset, last offset delta, partition
leader epoch, producer fields, max timestamp and compression (any of
Kafka's codecs, partlog.kafka.compression; an emptied batch is written
uncompressed), so offsets are preserved and gaps appear inside batches;
its record count, length and CRC are new.
Partlog keeps a batch all of whose records went, as an empty batch (Kafka
drops it unless the producer state needs it, ``RETAIN_EMPTY``): the store
keeps one entry per batch with no holes, and an empty v2 batch is valid to
every client; so every producer's last batch and sequence stay.

Left untouched, their keys never entering the map (so they neither drop
nor are dropped: the safe side, more records than Kafka keeps, never
fewer): control batches (transaction markers: the store keeps each as an
inline entry, which a rewrite may not change; Kafka drops one once its
transaction's data is gone and its delete horizon passed), and batches
whose attributes name no codec (5-7: Kafka refuses them at produce, so
none is stored).

Input comes back from object storage, so everything is checked (framing,
CRC, the compressed body, record framing, the record count, offset deltas
within the batch, a decompressed size bound: a bomb costs at most
:data:`DECOMPRESSED_BYTES_MAX`) and anything else raises :class:`CleanerError`:
that run fails and nothing is swapped.
"""

from __future__ import annotations

import hashlib
import heapq
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import NamedTuple

from partlog.kafka import batch_header as bh
from partlog.kafka.batch_header import BatchHeader
from partlog.kafka.compression import CODEC_NAMES, CODEC_NONE, CompressionError, compress, decompress
from partlog.kafka.control_batch import end_txn_marker
from partlog.kafka.crc32c import crc32c
from partlog.kafka.records import AbortedTxn
from partlog.tiered.segment import SegmentFormatError, check_batch

# Kafka's log.cleaner.dedupe.buffer.size is 128 MiB of 24-byte entries (a
# 16-byte hash, an 8-byte offset).  A Python dict entry costs about 6x that,
# so partlog's default accounts 16 MiB (about 700,000 keys, some 100 MiB
# of real memory).
DEDUPE_BUFFER_BYTES_DEFAULT = 16 << 20
OFFSET_MAP_ENTRY_BYTES = 24
# Kafka's load factor (log.cleaner.io.buffer.load.factor): the map is full
# at 90 % of its slots.
OFFSET_MAP_LOAD_FACTOR = 0.9
# A compressed batch is decompressed in memory: at most this much (a
# segment is built in memory and is at most 64 MiB).
DECOMPRESSED_BYTES_MAX = 64 << 20
# KIP-534's attribute bit: the base timestamp holds the delete horizon.
ATTR_DELETE_HORIZON = 0x40


class CleanerError(ValueError):
    """The batches are not what a leader stores; the message says where."""


class OffsetMap:
    """Key -> latest offset, Kafka's ``SkimpyOffsetMap``: keys by a 16-byte
    hash (BLAKE2b; Kafka uses MD5), bounded by ``bytes_max`` accounted at
    :data:`OFFSET_MAP_ENTRY_BYTES` per key and the load factor."""

    def __init__(self, bytes_max: int = DEDUPE_BUFFER_BYTES_DEFAULT) -> None:
        if bytes_max < OFFSET_MAP_ENTRY_BYTES:
            raise ValueError(f"dedupe buffer of {bytes_max} bytes holds no key")
        self.slots = int(bytes_max // OFFSET_MAP_ENTRY_BYTES * OFFSET_MAP_LOAD_FACTOR)
        self._offsets: dict[bytes, int] = {}
        # The last offset put: the map covers the log up to here.
        self.latest_offset = -1

    def __len__(self) -> int:
        return len(self._offsets)

    @staticmethod
    def _hash(key: bytes) -> bytes:
        return hashlib.blake2b(key, digest_size=16).digest()

    def room(self) -> int:
        """Keys that can still be added."""
        return self.slots - len(self._offsets)

    def put(self, key: bytes, offset: int) -> None:
        h = self._hash(key)
        assert h in self._offsets or len(self._offsets) < self.slots, "offset map full"
        assert offset > self.latest_offset, (offset, self.latest_offset)
        self._offsets[h] = offset
        self.latest_offset = offset

    def get(self, key: bytes) -> int | None:
        return self._offsets.get(self._hash(key))


class Record(NamedTuple):
    """One record of a batch: the fields the cleaner reads, and ``tail``
    (key, value and headers as written).  A NamedTuple, not a frozen
    dataclass: one is built per record, and a frozen dataclass's
    ``__init__`` costs several times a tuple's."""

    offset_delta: int
    timestamp_delta: int
    attributes: int
    key: bytes | None
    has_value: bool
    tail: bytes


# ------------------------------------------------------------------ varints


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """A zigzag varint (at most 10 bytes) at ``pos``: (value, next position)."""
    # One or two bytes: most lengths and deltas.
    if pos + 1 < len(buf):
        b = buf[pos]
        if b < 0x80:
            return (b >> 1) ^ -(b & 1), pos + 1
        c = buf[pos + 1]
        if c < 0x80:
            raw = (b & 0x7F) | (c << 7)
            return (raw >> 1) ^ -(raw & 1), pos + 2
    shift = 0
    raw = 0
    for i in range(10):
        if pos + i >= len(buf):
            raise CleanerError("record truncated inside a varint")
        b = buf[pos + i]
        raw |= (b & 0x7F) << shift
        if not b & 0x80:
            return (raw >> 1) ^ -(raw & 1), pos + i + 1
        shift += 7
    raise CleanerError("varint longer than 10 bytes")


def _write_varint(value: int, out: bytearray) -> None:
    raw = (value << 1) ^ (value >> 63)
    raw &= (1 << 64) - 1
    while raw >= 0x80:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)


def _parse_records(body: bytes, count: int, last_offset_delta: int) -> list[Record]:
    out: list[Record] = []
    pos = 0
    previous = -1
    while pos < len(body):
        length, pos = _read_varint(body, pos)
        end = pos + length
        if length < 0 or end > len(body):
            raise CleanerError(f"record of {length} bytes overruns the batch")
        if pos >= end:
            raise CleanerError("empty record")
        attributes = body[pos]
        ts_delta, p = _read_varint(body, pos + 1)
        offset_delta, p = _read_varint(body, p)
        if not previous < offset_delta <= last_offset_delta:
            raise CleanerError(f"offset delta {offset_delta} after {previous}, last {last_offset_delta}")
        previous = offset_delta
        tail_at = p
        key_len, p = _read_varint(body, p)
        key: bytes | None = None
        if key_len >= 0:
            key = body[p : p + key_len]
            p += key_len
        elif key_len != -1:
            raise CleanerError(f"key length {key_len}")
        value_len, p = _read_varint(body, p)
        if value_len < -1:
            raise CleanerError(f"value length {value_len}")
        p += max(0, value_len)
        if p > end:
            raise CleanerError("key or value overruns its record")
        out.append(Record(offset_delta, ts_delta, attributes, key, value_len >= 0, body[tail_at:end]))
        pos = end
    if len(out) != count:
        raise CleanerError(f"batch holds {len(out)} records, header says {count}")
    return out


def _encode_record(r: Record, ts_delta: int, out: bytearray) -> None:
    inner = bytearray([r.attributes])
    _write_varint(ts_delta, inner)
    _write_varint(r.offset_delta, inner)
    inner += r.tail
    _write_varint(len(inner), out)
    out += inner


# ------------------------------------------------------------------ batches


def split_batches(log: bytes) -> Iterator[bytes]:
    """The batches of a segment's ``.log``, each checked (framing, CRC)."""
    pos = 0
    while pos < len(log):
        if len(log) - pos < bh.HEADER_SIZE:
            raise CleanerError(f"{len(log) - pos} bytes at {pos}: shorter than a batch header")
        (length,) = struct.unpack_from(">i", log, pos + 8)
        size = length + bh.LOG_OVERHEAD
        if size < bh.HEADER_SIZE or pos + size > len(log):
            raise CleanerError(f"batch at {pos}: length {length} outside the segment")
        yield log[pos : pos + size]
        pos += size


def _header(batch: bytes) -> BatchHeader:
    try:
        return check_batch(batch)
    except SegmentFormatError as e:
        raise CleanerError(str(e)) from None


def _readable(h: BatchHeader) -> bool:
    """A data batch whose records the cleaner can read (a known codec)."""
    return not h.is_control and h.attributes & bh.ATTR_COMPRESSION_MASK in CODEC_NAMES


def cleanable(h: BatchHeader, transactions: bool = False) -> bool:
    """A batch whose records the cleaner reads and rewrites (module doc);
    ``transactions``: transactional ones too (a :class:`TxnFilter` says
    which are aborted)."""
    return _readable(h) and (transactions or not h.is_transactional)


class TxnFilter:
    """Kafka's ``CleanedTransactionMetadata``, the half that finds aborted
    data: fed the aborted transactions (producer id, first offset) of a
    range, then every batch of the range in offset order
    (:meth:`aborted`).  A producer's transactional batches from its aborted
    transaction's first offset to its ABORT marker are aborted data."""

    def __init__(self, aborted: Iterable[AbortedTxn] = ()) -> None:
        self._pending: list[tuple[int, int]] = []  # (first offset, producer id), a heap
        self._added: set[tuple[int, int]] = set()
        self._aborting: set[int] = set()  # producers inside an aborted transaction
        self.add(aborted)

    def add(self, aborted: Iterable[AbortedTxn]) -> None:
        """More aborted transactions (Kafka's ``addAbortedTransactions``);
        one listed again (ranges overlap) is taken once."""
        for a in aborted:
            t = (a.first_offset, a.producer_id)
            if t not in self._added:
                self._added.add(t)
                heapq.heappush(self._pending, t)

    def aborted(self, batch: bytes, h: BatchHeader) -> bool:
        """Whether ``batch`` (the next in offset order, header ``h``) holds
        aborted data (Kafka's ``onBatchRead``); an ABORT marker ends its
        producer's aborted transaction (``onControlBatchRead``)."""
        while self._pending and self._pending[0][0] <= h.base_offset + h.last_offset_delta:
            self._aborting.add(heapq.heappop(self._pending)[1])
        if h.is_control:
            marker = end_txn_marker(batch)
            if marker is not None and not marker[0]:
                self._aborting.discard(h.producer_id)
            return False
        return h.is_transactional and h.producer_id in self._aborting


def _records(batch: bytes, h: BatchHeader) -> list[Record]:
    try:
        body = decompress(h.attributes & bh.ATTR_COMPRESSION_MASK, batch[bh.HEADER_SIZE :], DECOMPRESSED_BYTES_MAX)
    except CompressionError as e:
        raise CleanerError(f"batch at offset {h.base_offset}: {e}") from None
    if h.record_count < 0:
        raise CleanerError(f"batch at offset {h.base_offset}: record count {h.record_count}")
    try:
        return _parse_records(body, h.record_count, h.last_offset_delta)
    except CleanerError as e:
        raise CleanerError(f"batch at offset {h.base_offset}: {e}") from None


def build_offset_map(batches: Iterable[bytes], offset_map: OffsetMap, txns: TxnFilter | None = None) -> int:
    """Put the keys of ``batches`` (offset order, each checked) into
    ``offset_map``, those of aborted data (``txns``) left out; returns the
    records read.  The caller leaves room for them (:func:`keyed_records`);
    CleanerError for a bad batch."""
    n = 0
    for batch in batches:
        h = _header(batch)
        aborted = txns is not None and txns.aborted(batch, h)
        if aborted or not cleanable(h, txns is not None):
            continue
        for r in _records(batch, h):
            n += 1
            if r.key is not None:
                offset_map.put(r.key, h.base_offset + r.offset_delta)
    return n


def keyed_records(batches: Iterable[bytes]) -> int:
    """The keyed records of ``batches``' data batches, transactional ones
    too: at least the keys a map needs room for, to decide whether a
    segment fits before adding it."""
    n = 0
    for batch in batches:
        h = _header(batch)
        if _readable(h):
            n += sum(1 for r in _records(batch, h) if r.key is not None)
    return n


def keyless_record(records: bytes) -> bool:
    """Whether a produced batch (or batches) holds a record without a key,
    which Kafka's LogValidator refuses on a compacted topic (INVALID_RECORD).
    Every codec is read (a batch naming none is taken as keyed);
    CleanerError for what does not parse."""
    return bool(keyless_indices(records))


def keyless_indices(records: bytes) -> list[int]:
    """The indices of a produced batch's records without a key (counted on
    across batches), as Kafka's LogValidator names them in a Produce
    answer's record errors (KIP-467); CleanerError for what does not parse."""
    out: list[int] = []
    index = 0
    for batch in split_batches(records):
        h = _header(batch)
        if not _readable(h):
            continue
        for r in _records(batch, h):
            if r.key is None:
                out.append(index)
            index += 1
    return out


@dataclass(frozen=True, slots=True)
class CleanedBatch:
    data: bytes
    header: BatchHeader
    records_removed: int


def retain(r: Record, offset: int, offset_map: OffsetMap, retain_deletes: bool) -> bool:
    """Kafka's ``Cleaner.shouldRetainRecord``: keyed, the latest for its
    key, and a value or a tombstone still within its delete horizon."""
    if r.key is None:
        return False  # Kafka counts it invalid and drops it
    latest = offset_map.get(r.key)
    if latest is not None and offset < latest:
        return False
    return r.has_value or retain_deletes


def clean_batch(
    batch: bytes, offset_map: OffsetMap, *, now_ms: int, delete_retention_ms: int, txns: TxnFilter | None = None
) -> CleanedBatch:
    """``batch`` with the records the map supersedes removed, all of them
    when it is aborted data (``txns``, fed every batch in offset order:
    module doc); the same bytes when nothing changes.  CleanerError for a
    bad batch."""
    h = _header(batch)
    aborted = txns is not None and txns.aborted(batch, h)
    if not cleanable(h, txns is not None):
        return CleanedBatch(batch, h, 0)
    records = _records(batch, h)
    horizon_set = bool(h.attributes & ATTR_DELETE_HORIZON)
    retain_deletes = not horizon_set or now_ms < h.base_timestamp
    kept: list[Record] = []
    if not aborted:
        kept = [r for r in records if retain(r, h.base_offset + r.offset_delta, offset_map, retain_deletes)]
    stamp = not horizon_set and any(not r.has_value for r in kept)
    if len(kept) == len(records) and not stamp:
        return CleanedBatch(batch, h, 0)
    attributes, base_ts = h.attributes, h.base_timestamp
    if stamp:
        attributes |= ATTR_DELETE_HORIZON
        base_ts = now_ms + delete_retention_ms
    body = bytearray()
    for r in kept:
        # The record's timestamp stays: base + delta before and after.
        _encode_record(r, h.base_timestamp + r.timestamp_delta - base_ts, body)
    codec = attributes & bh.ATTR_COMPRESSION_MASK
    if not kept:
        attributes &= ~bh.ATTR_COMPRESSION_MASK  # nothing to compress
    elif codec != CODEC_NONE:
        body = bytearray(compress(codec, bytes(body)))
    new = replace(
        h,
        batch_length=bh.HEADER_SIZE - bh.LOG_OVERHEAD + len(body),
        crc=0,
        attributes=attributes,
        base_timestamp=base_ts,
        record_count=len(kept),
    )
    out = bytearray(new.pack()) + body
    crc = crc32c(memoryview(out)[bh.CRC_START :])
    struct.pack_into(">I", out, 17, crc)
    return CleanedBatch(bytes(out), replace(new, crc=crc), len(records) - len(kept))


__all__ = [
    "ATTR_DELETE_HORIZON",
    "DEDUPE_BUFFER_BYTES_DEFAULT",
    "CleanedBatch",
    "CleanerError",
    "OffsetMap",
    "TxnFilter",
    "build_offset_map",
    "clean_batch",
    "cleanable",
    "keyed_records",
    "keyless_indices",
    "keyless_record",
    "retain",
    "split_batches",
]
