"""The store's on-disk layout: LMDB database names, key and value formats,
and the decoded records (partition state, topic, log entry) the modules share.

Layout (named LMDB databases; integers big-endian so keys sort numerically):

* ``meta``      counters (next partition/file/batch id) and the format version
* ``topics``    topic_id(16) -> msgpack [name, num_partitions, configs]
* ``tp``        topic_id(16) partition(4) -> part_id(4)
* ``parts``     part_id(4) -> partition state (:class:`Part`)
* ``log``       part_id(4) base_offset(8) -> chunk: 1 to :data:`CHUNK_ENTRIES_MAX`
                entries of consecutive batches (:data:`ENTRY_TAIL`, fixed
                size), keyed by the first one's base offset
* ``producers`` part_id(4) producer_id(8) -> ProducerEntry.encode()
* ``epochs``    part_id(4) leader_epoch(4) -> start_offset(8)
* ``files``     object_key -> file_id, live_batches, live_bytes, uploader, file_size
* ``file_ids``  file_id(8) -> object_key
* ``txns``      part_id(4) -> the partition's transactions (:mod:`partlog.store.txns`)
* ``aborted``   part_id(4) last_offset(8) -> the aborted-transaction index entry
* ``segments``  part_id(4) start_offset(8) -> a tiered segment holding the
                range's batches (:data:`SEGMENT_ROW`, :mod:`partlog.store.segments`)

An entry whose file_id is :data:`INLINE_FILE_ID` references no WAL object: a
transaction marker's control batch, stored inline (its byte_offset field
holds the marker, :func:`inline_marker`).
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass, field
from typing import Any, TypeVar

from partlog.kafka import batch_header as bh
from partlog.kafka.batch_header import BatchHeader
from partlog.kafka.crc32c import crc32c
from partlog.kafka.records import (
    TopicIdPartition,
)
from partlog.kafka.topic_config import TopicConfig

T = TypeVar("T")


# py-lmdb types values as bytes or memoryview; without buffers=True they are bytes.
Buf = bytes | memoryview


# 2: log values are chunks of entries.  A format-1 store (one entry per
# value) is a valid format-2 store whose chunks all hold one entry, so
# opening one for writing only rewrites the number.
FORMAT_VERSION = 2
FORMAT_VERSIONS_READABLE = (1, 2)


# Commit deadline: a leader refuses batches of WAL objects older than this,
# measured from created_ms in the key.  It bounds how long an uploaded object
# can still gain its first reference, which is what lets walmgr delete orphans.
# KIP-1163 budgets upload p99 at 200-400 ms; 30 s leaves room for retries.
COMMIT_DEADLINE_MS_DEFAULT = 30_000

# Swap deadline: a leader refuses to swap in a tiered segment whose key's
# created_ms is older than this, so a segment nothing references by then
# never will be, which is what lets walmgr delete orphans by age.  A segment
# (at most 64 MiB, built in memory) is uploaded after it is built, so the age
# at the swap is one upload of up to 64 MiB plus the swap: seconds at S3's
# per-connection rates, minutes with its retries.  Five minutes leaves room
# for slow stores; an orphan lives that long plus walmgr's skew margin.
SEGMENT_SWAP_DEADLINE_MS_DEFAULT = 300_000


# Initial LMDB map size.  It is address space, not disk; it grows by doubling
# when full (MapFullError never reaches a caller) up to MAP_SIZE_BYTES_MAX.
MAP_SIZE_BYTES_DEFAULT = 1 << 30


MAP_SIZE_BYTES_MAX = 1 << 40


MAP_SIZE_BYTES_MIN = 1 << 16


# A group commit stops taking queued writes after this many batches, so one
# transaction (and the latency of everyone in it) stays bounded.
GROUP_COMMIT_BATCHES_MAX = 8192
# A checkpoint applies the journal's durable groups to LMDB once this many
# wait, or the oldest has waited this long.  Each read walks the waiting
# groups once, and each checkpoint's two syncs are shared by its groups.
CHECKPOINT_GROUPS_MAX_DEFAULT = 64
CHECKPOINT_INTERVAL_MS_DEFAULT = 50
# The most groups that may wait for the checkpoint thread: past it the
# commit stage runs the checkpoint itself (backpressure), so a thread that
# falls behind cannot grow the overlay's memory and read cost without bound.
CHECKPOINT_BACKLOG_GROUPS_MAX_DEFAULT = 256


U32 = struct.Struct(">I")


U64 = struct.Struct(">Q")


INT32_MAX = (1 << 31) - 1


INT64_MAX = (1 << 63) - 1


PART_KEY = struct.Struct(">IQ")  # part_id, base_offset


PRODUCER_KEY = struct.Struct(">Iq")


EPOCH_KEY = struct.Struct(">Ii")


I64 = struct.Struct(">q")


# file_id, byte_offset, size, log_append_time, batch_max_timestamp (as sent),
# running max of effective timestamps, batch_id; then CRC-32C of everything.
ENTRY_TAIL = struct.Struct(">QQIqqqQ")


ENTRY_CRC = struct.Struct(">I")


# The file_id of an inline entry (a marker): no counter reaches it.
INLINE_FILE_ID = (1 << 64) - 1


def inline_marker_field(committed: bool, coordinator_epoch: int) -> int:
    """The byte_offset field of an inline marker entry: the marker's type
    above its coordinator epoch (which the control record holds)."""
    return (int(committed) << 32) | coordinator_epoch


def inline_marker(byte_offset: int) -> tuple[bool, int]:
    """(committed, coordinator epoch) of an inline entry's byte_offset field."""
    return bool(byte_offset >> 32), byte_offset & 0xFFFFFFFF


# A whole entry with the header spliced from pieces: base offset, header[8:12],
# leader epoch, header[16:61], then the tail, in one pack call.
ENTRY_PLAIN = struct.Struct(">q4si45sQQIqqqQ")


ENTRY_SIZE = bh.HEADER_SIZE + ENTRY_TAIL.size + ENTRY_CRC.size


# Entries per LMDB value of the log.  A checkpoint writes each partition's
# new entries as chunks of up to this many: one put per chunk instead of one
# per batch (the checkpoint's CPU, and its GIL time, is mostly puts), and a
# chunk read whole for one entry stays a few pages (64 x 121 bytes).
CHUNK_ENTRIES_MAX = 64


FILE_RECORD = struct.Struct(">QqqiQ")  # file_id, live_batches, live_bytes, uploader, file_size


PART_STATE = struct.Struct(">16siqqqiqqqqq")


LEADER_EPOCH = struct.Struct(">i")


LAST_OFFSET_DELTA = struct.Struct(">i")


HEADER_UNPACK = struct.Struct(">qiibIhiqqqhii").unpack


class StoreError(Exception):
    """An operating error of the store (I/O, a corrupt environment)."""


class CorruptEntryError(StoreError):
    """An entry failed its CRC or does not parse; the message says where."""


class StoreInconsistentError(CorruptEntryError):
    """A consistency check of the store's durable state failed (:func:`verify`):
    the state cannot be trusted, so the store fail-stops as after a failed
    commit (every later write raises :class:`StoreError` until it is
    reopened, which reloads the state from disk)."""


def verify(condition: bool, message: str, *args: object) -> None:
    """Check a condition of the store's durable state: raise
    :class:`StoreInconsistentError` unless it holds.

    Unlike ``assert``, it survives ``python -O``: a store whose durable
    state contradicts itself must stop, not write on.  ``assert`` stays for
    contracts a caller breaks.  ``message`` is %-formatted with ``args``
    only on failure, so a check on a hot path costs one test."""
    if not condition:
        raise inconsistent(message, *args)


def inconsistent(message: str, *args: object) -> StoreInconsistentError:
    """The error :func:`verify` raises, for a check written as ``if ...:
    raise inconsistent(...)`` where the type checker must see the narrowing."""
    return StoreInconsistentError(message % args if args else message)


class ReplicationError(StoreError):
    """Replicated entries a follower cannot append (not contiguous with its log,
    a leader epoch going backwards, a malformed entry); the message names the
    partition and offset.  Nothing was written."""


class OffsetOutOfRangeError(StoreError):
    """:meth:`MetadataStore.read_log` from an offset outside [log start, log end].

    Carries the leader's bounds so a follower can decide what to do (Kafka's
    follower: below the log start, restart there with ``reset_to``).
    """

    def __init__(self, message: str, *, log_start_offset: int, log_end_offset: int) -> None:
        super().__init__(message)
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


@dataclass(slots=True)
class Part:
    """Mutable state of one partition; copied before a transaction changes it."""

    part_id: int
    tp: TopicIdPartition
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    leader_epoch: int
    live_bytes: int
    live_batches: int
    running_max_timestamp: int
    max_timestamp: int  # -1: none
    # base offset of the first batch holding max_timestamp; -1: none, -2: unknown (rescan)
    max_timestamp_offset: int

    def copy(self) -> Part:
        return Part(
            self.part_id,
            self.tp,
            self.log_start_offset,
            self.log_end_offset,
            self.high_watermark,
            self.leader_epoch,
            self.live_bytes,
            self.live_batches,
            self.running_max_timestamp,
            self.max_timestamp,
            self.max_timestamp_offset,
        )

    def pack(self) -> bytes:
        return PART_STATE.pack(
            self.tp.topic_id.bytes,
            self.tp.partition,
            self.log_start_offset,
            self.log_end_offset,
            self.high_watermark,
            self.leader_epoch,
            self.live_bytes,
            self.live_batches,
            self.running_max_timestamp,
            self.max_timestamp,
            self.max_timestamp_offset,
        )

    @classmethod
    def unpack(cls, part_id: int, data: Buf) -> Part:
        tid, p, lso, leo, hwm, epoch, lbytes, lbatches, rmax, mts, mto = PART_STATE.unpack(data)
        return cls(
            part_id, TopicIdPartition(uuid.UUID(bytes=tid), p), lso, leo, hwm, epoch, lbytes, lbatches, rmax, mts, mto
        )


@dataclass(slots=True)
class Topic:
    name: str
    num_partitions: int
    config: TopicConfig


@dataclass(frozen=True, slots=True)
class Entry:
    """A decoded metadata-log entry."""

    header: BatchHeader
    raw_header: bytes
    file_id: int
    byte_offset: int
    size: int
    log_append_time: int
    batch_max_timestamp: int
    running_max_timestamp: int
    batch_id: int

    @property
    def base_offset(self) -> int:
        return self.header.base_offset

    @property
    def last_offset(self) -> int:
        return self.header.base_offset + self.header.last_offset_delta

    @property
    def is_inline(self) -> bool:
        """A marker's control batch, stored in the entry (no WAL object)."""
        return self.file_id == INLINE_FILE_ID

    @property
    def effective_timestamp(self) -> int:
        """The timestamp ListOffsets and retention use (the stored maxTimestamp)."""
        return self.header.max_timestamp


def chunk_span(tp: object, key: Buf, value: Buf) -> tuple[int, int]:
    """(offset of the chunk's key, number of entries) of the chunk ``value``
    stored under ``key``; CorruptEntryError naming partition ``tp`` and the
    chunk unless it holds whole entries."""
    at = int(PART_KEY.unpack(key)[1])
    n, rest = divmod(len(value), ENTRY_SIZE)
    if rest or not n:
        raise CorruptEntryError(
            f"partition {tp} chunk at offset {at}: chunk is {len(value)} bytes,"
            f" not a whole number of {ENTRY_SIZE}-byte entries"
        )
    return at, n


def chunk_base(value: Buf, i: int) -> int:
    """Base offset of entry ``i`` of a chunk (its header's first field),
    without decoding or checking it: for positioning only."""
    return int(I64.unpack_from(value, i * ENTRY_SIZE)[0])


def chunk_entry(value: Buf, i: int, tp: object, chunk_offset: int) -> Entry:
    """Entry ``i`` of a chunk, decoded and checked; a CorruptEntryError names
    the partition ``tp``, the entry's offset and the chunk's (``chunk_offset``
    -1: entries of the journal, not yet in LMDB)."""
    body = value[i * ENTRY_SIZE : (i + 1) * ENTRY_SIZE - ENTRY_CRC.size]
    (stored,) = ENTRY_CRC.unpack_from(value, (i + 1) * ENTRY_SIZE - ENTRY_CRC.size)
    if crc32c(body) != stored:
        where = "journal" if chunk_offset < 0 else f"entry {i} of the chunk at offset {chunk_offset}"
        raise CorruptEntryError(f"partition {tp} offset {chunk_base(value, i)} ({where}): entry CRC mismatch")
    raw_header = bytes(body[: bh.HEADER_SIZE])
    return Entry(BatchHeader.parse(raw_header), raw_header, *ENTRY_TAIL.unpack_from(body, bh.HEADER_SIZE))


# A ``segments`` row (part_id, start offset -> this, then the object key):
# the segment's end offset (inclusive), size and uploader.
SEGMENT_ROW = struct.Struct(">qQi")


@dataclass(frozen=True, slots=True)
class Segment:
    """A ``segments`` row: the batches of ``[start_offset, end_offset]`` live,
    concatenated in offset order, in the object ``object_key``."""

    start_offset: int
    end_offset: int
    size: int
    uploader: int
    object_key: str

    def pack(self) -> bytes:
        return SEGMENT_ROW.pack(self.end_offset, self.size, self.uploader) + self.object_key.encode()

    @classmethod
    def unpack(cls, start_offset: int, raw: Buf) -> Segment:
        end, size, uploader = SEGMENT_ROW.unpack_from(raw, 0)
        return cls(start_offset, end, size, uploader, bytes(raw[SEGMENT_ROW.size :]).decode())


_FILE_AND_POSITION = struct.Struct(">QQ")  # the tail's first two fields


def repoint_entry(chunk: bytearray, i: int, file_id: int, byte_offset: int) -> None:
    """Entry ``i`` of ``chunk`` now references ``byte_offset`` of ``file_id``
    (a reference swap), its CRC updated; nothing else of it changes."""
    start = i * ENTRY_SIZE
    crc_at = start + ENTRY_SIZE - ENTRY_CRC.size
    _FILE_AND_POSITION.pack_into(chunk, start + bh.HEADER_SIZE, file_id, byte_offset)
    ENTRY_CRC.pack_into(chunk, crc_at, crc32c(bytes(chunk[start:crc_at])))


def chunks_of(part_id: int, run: bytes) -> list[tuple[bytes, bytes]]:
    """A partition's new entries (whole entries, ascending) as (key, chunk)
    puts of at most CHUNK_ENTRIES_MAX entries, each under its first entry's
    base offset.  (A run of one chunk is put as it is: slicing all of a
    bytes object returns the object.)"""
    step = CHUNK_ENTRIES_MAX * ENTRY_SIZE
    return [
        (PART_KEY.pack(part_id, int(I64.unpack_from(run, at)[0])), run[at : at + step])
        for at in range(0, len(run), step)
    ]


@dataclass(slots=True, eq=False)
class CommitGroup:
    """A sequenced group of commit_file calls: outcomes and the bytes to write.

    Once durable it is also a journal record (``seq``) and, until a
    checkpoint applied it, part of the overlay readers see."""

    results: list[Any]
    errors: list[BaseException | None]
    # part_id -> the partition's new entries, ascending, as runs of whole
    # entries (one bytes object per commit_file call): one lookup finds a
    # partition's overlay entries, and bytes, unlike a tuple per batch, are
    # nothing for the garbage collector to scan.
    by_part: dict[int, list[bytes]]
    files: dict[str, list[int]]
    parts: dict[int, bytes]
    producers: dict[bytes, bytes]
    counters: dict[bytes, int]
    seq: int = -1  # the journal record's, once durable
    # part_id -> the partition's transactions after the group (txns.encode).
    txns: dict[int, bytes] = field(default_factory=dict)
    # part_id -> new aborted-index records, ascending (txns.ABORTED_RECORD).
    aborted: dict[int, list[bytes]] = field(default_factory=dict)


# in `meta`: the journal seq up to which groups are applied to this LMDB (u64)
KEY_JOURNAL_APPLIED = b"journal_applied_seq"
KEY_CLUSTER_ID = b"cluster_id"  # in `meta`: the cluster this store belongs to (16 bytes)


DB_NAMES = (
    b"meta",
    b"topics",
    b"tp",
    b"parts",
    b"log",
    b"producers",
    b"epochs",
    b"files",
    b"file_ids",
    b"txns",
    b"aborted",
    b"segments",
)
# Databases a store last written by an older partlog lacks until its writer
# opens it (LMDB creates them then): the transaction state, the segments.
NEWER_DB_NAMES = frozenset({b"txns", b"aborted", b"segments"})
