"""Kafka's on-disk log segment, built from a partition's committed batches (sans-IO).

A segment is three byte strings, as Kafka's ``LogSegment`` leaves them once
it is rolled (docs/design/tiered.md, "The segment format"):

* ``.log``: the v2 record batches concatenated as the leader stored them
  (base offset and leader epoch stamped in each header);
* ``.index``, Kafka's ``OffsetIndex``: 8-byte entries, an offset relative to
  the segment's base offset (int32) and the byte position in ``.log`` of the
  batch whose last offset it is (int32), big-endian;
* ``.timeindex``, Kafka's ``TimeIndex``: 12-byte entries, a timestamp (int64)
  and an offset relative to the base (int32), big-endian.

:class:`SegmentBuilder` follows ``LogSegment.append`` batch by batch: when more
than ``index_interval_bytes`` were appended since the last entry, the batch
gets an offset-index entry (its last offset, its position) and the time index
gets (the largest timestamp so far, the last offset of the batch that had it)
if that timestamp grew.  :meth:`SegmentBuilder.build` adds the time-index
entry Kafka adds when a segment becomes inactive (``onBecomeInactiveSegment``).
:meth:`SegmentBuilder.roll_reason` is ``LogSegment.shouldRoll`` without jitter;
the time is passed in, never read.

The lookups answer as Kafka's ``OffsetIndex.lookup`` and ``TimeIndex.lookup``,
over bytes read back from object storage, so they fail closed: each validates
the whole index against the segment's :class:`SegmentExtent` first and raises
:class:`SegmentFormatError` for anything a builder could not have written.
Their time and memory are linear in the index, which is bounded
(``SEGMENT_INDEX_BYTES_MAX``).  :func:`find_offset` and :func:`find_timestamp`
scan ``.log`` forward from a position, as ``FileRecords.searchForOffsetWithSize``
and ``searchForTimestamp`` do (to the batch).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from partlog.kafka.batch_header import CRC_START, HEADER_SIZE, INT32_MAX, LOG_OVERHEAD, MAGIC_V2, BatchHeader
from partlog.kafka.crc32c import crc32c

# Kafka's topic defaults (TopicConfig / ServerLogConfigs): segment.bytes,
# segment.ms, index.interval.bytes, segment.index.bytes.
SEGMENT_BYTES_DEFAULT = 1 << 30
SEGMENT_MS_DEFAULT = 7 * 24 * 3600 * 1000
INDEX_INTERVAL_BYTES_DEFAULT = 4096
SEGMENT_INDEX_BYTES_DEFAULT = 10 * 1024 * 1024
# Kafka allows indexes up to 2 GiB because it maps them; partlog reads an
# index whole (one GET) and validates it before every lookup, so it bounds
# them: 64 MiB is 8M offset entries, six times what the default holds.
SEGMENT_INDEX_BYTES_MAX = 64 << 20
# Leader epochs one segment may span (KIP-405's segmentLeaderEpochs travel in
# the segment's metadata, so they are bounded); a segment rolls before more.
# Kafka has no such roll rule: ten thousand elections within one segment is
# far past any real partition.
SEGMENT_LEADER_EPOCHS_MAX = 10_000
OFFSET_INDEX_ENTRY_BYTES = 8
TIME_INDEX_ENTRY_BYTES = 12
# Kafka's RecordBatch.NO_TIMESTAMP.
NO_TIMESTAMP = -1

_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")
assert _OFFSET_ENTRY.size == OFFSET_INDEX_ENTRY_BYTES and _TIME_ENTRY.size == TIME_INDEX_ENTRY_BYTES
_CRC = struct.Struct(">I")
_OFF_CRC = 17


class SegmentFormatError(ValueError):
    """Bytes are not what a segment builder writes: a batch that is not one
    whole, valid v2 batch following the segment's last, or an index that is
    truncated, not monotonic, or points outside its segment."""


class RollReason(Enum):
    """Why the open segment must roll before a batch (``LogSegment.shouldRoll``)."""

    SEGMENT_BYTES = "segment.bytes"
    SEGMENT_MS = "segment.ms"
    OFFSET_INDEX_FULL = "offset index full"
    TIME_INDEX_FULL = "time index full"
    OFFSET_OVERFLOW = "relative offset overflows int32"
    LEADER_EPOCHS = "leader epochs per segment"


@dataclass(frozen=True, slots=True)
class SegmentConfig:
    """A partition's segment settings, by Kafka's topic configs (names with
    the unit last): ``segment.bytes``, ``segment.ms``, ``index.interval.bytes``,
    ``segment.index.bytes``."""

    segment_bytes: int = SEGMENT_BYTES_DEFAULT
    segment_ms: int = SEGMENT_MS_DEFAULT
    index_interval_bytes: int = INDEX_INTERVAL_BYTES_DEFAULT
    segment_index_bytes: int = SEGMENT_INDEX_BYTES_DEFAULT

    def __post_init__(self) -> None:
        # Positions in .index are int32, so a segment stays below 2 GiB.
        if not 1 <= self.segment_bytes <= INT32_MAX:
            raise ValueError(f"segment_bytes {self.segment_bytes}: must be in [1, {INT32_MAX}]")
        if self.segment_ms < 1:
            raise ValueError(f"segment_ms {self.segment_ms}: must be >= 1")
        if not 0 <= self.index_interval_bytes <= INT32_MAX:
            raise ValueError(f"index_interval_bytes {self.index_interval_bytes}: must be in [0, {INT32_MAX}]")
        # Two time entries at least: Kafka keeps the last slot for the entry
        # added when the segment rolls (TimeIndex.isFull).
        if not 2 * TIME_INDEX_ENTRY_BYTES <= self.segment_index_bytes <= SEGMENT_INDEX_BYTES_MAX:
            raise ValueError(
                f"segment_index_bytes {self.segment_index_bytes}: "
                f"must be in [{2 * TIME_INDEX_ENTRY_BYTES}, {SEGMENT_INDEX_BYTES_MAX}]"
            )

    @property
    def offset_index_entries_max(self) -> int:
        return self.segment_index_bytes // OFFSET_INDEX_ENTRY_BYTES

    @property
    def time_index_entries_max(self) -> int:
        return self.segment_index_bytes // TIME_INDEX_ENTRY_BYTES


@dataclass(frozen=True, slots=True)
class TimestampOffset:
    """A time-index entry, or Kafka's answer to a time-index lookup."""

    timestamp_ms: int
    offset: int


@dataclass(frozen=True, slots=True)
class SegmentExtent:
    """What a segment's indexes are checked against: its offsets
    ``[base_offset, next_offset)`` and the size of its ``.log``."""

    base_offset: int
    next_offset: int
    log_size_bytes: int

    def __post_init__(self) -> None:
        if not 0 <= self.base_offset < self.next_offset or self.next_offset - 1 - self.base_offset > INT32_MAX:
            raise ValueError(f"segment offsets [{self.base_offset}, {self.next_offset}): not a segment's")
        if self.log_size_bytes < HEADER_SIZE:
            raise ValueError(f"segment of {self.log_size_bytes} bytes: shorter than one batch")


@dataclass(frozen=True, slots=True)
class BuiltSegment:
    """A rolled segment: its three files and what its remote metadata needs."""

    base_offset: int
    # End exclusive: the offset after the last batch's last offset.
    next_offset: int
    # The largest batch max timestamp, and the last offset of the first batch
    # that had it (Kafka's maxTimestampSoFar / shallowOffsetOfMaxTimestampSoFar);
    # NO_TIMESTAMP and the base offset when no batch has a timestamp.
    max_timestamp_ms: int
    offset_of_max_timestamp: int
    # (leader epoch, first offset of that epoch in this segment), both
    # ascending: KIP-405's segmentLeaderEpochs.
    leader_epochs: tuple[tuple[int, int], ...]
    log: bytes
    offset_index: bytes
    time_index: bytes

    @property
    def log_size_bytes(self) -> int:
        return len(self.log)

    @property
    def offset_index_size_bytes(self) -> int:
        return len(self.offset_index)

    @property
    def time_index_size_bytes(self) -> int:
        return len(self.time_index)

    @property
    def extent(self) -> SegmentExtent:
        return SegmentExtent(self.base_offset, self.next_offset, len(self.log))


def check_batch(batch: bytes) -> BatchHeader:
    """The header of ``batch``, which must be exactly one whole v2 batch
    with a valid CRC-32C and offsets that fit (else :class:`SegmentFormatError`)."""
    if len(batch) < HEADER_SIZE:
        raise SegmentFormatError(f"batch of {len(batch)} bytes: shorter than a v2 header")
    h = BatchHeader.parse(batch)
    if h.magic != MAGIC_V2:
        raise SegmentFormatError(f"batch at offset {h.base_offset}: magic {h.magic}, not {MAGIC_V2}")
    if h.size != len(batch):
        raise SegmentFormatError(f"batch at offset {h.base_offset}: length field says {h.size} bytes, got {len(batch)}")
    if h.base_offset < 0 or h.last_offset_delta < 0:
        raise SegmentFormatError(f"batch offsets {h.base_offset}+{h.last_offset_delta}: negative")
    got = crc32c(memoryview(batch)[CRC_START:])
    if got != h.crc:
        raise SegmentFormatError(f"batch at offset {h.base_offset}: CRC-32C is {got:#010x}, header says {h.crc:#010x}")
    return h


class SegmentBuilder:
    """Builds one segment at a time from a partition's committed batches, in
    offset order (see the module doc).  Before each batch ask
    :meth:`roll_reason`; when it names one, :meth:`build` the open segment
    (the builder then starts the next) and append the batch to the new one.
    An empty segment never rolls: a batch larger than ``segment_bytes`` gets a
    segment of its own (Kafka refuses such batches at produce time, but a
    committed log is tiered whole)."""

    def __init__(self, config: SegmentConfig | None = None) -> None:
        self.config = config or SegmentConfig()
        self._reset()

    def _reset(self) -> None:
        self._batches: list[bytes] = []
        self._size_bytes = 0
        self._base_offset = 0
        self._next_offset = 0
        # LogSegment's rollingBasedTimestamp (the first batch's max
        # timestamp) and its creation time, for a first batch without one.
        self._first_timestamp_ms = NO_TIMESTAMP
        self._created_ms = 0
        self._max_timestamp_ms = NO_TIMESTAMP
        self._offset_of_max_timestamp = 0
        self._bytes_since_last_index_entry = 0
        self._offset_index = bytearray()
        self._time_index = bytearray()
        self._last_time_entry = TimestampOffset(NO_TIMESTAMP, 0)
        self._leader_epochs: list[tuple[int, int]] = []

    @property
    def empty(self) -> bool:
        return not self._batches

    @property
    def size_bytes(self) -> int:
        return self._size_bytes

    @property
    def next_offset(self) -> int:
        """The offset after the open segment's last (0 when empty)."""
        return self._next_offset

    def roll_reason(self, batch: bytes, now_ms: int) -> RollReason | None:
        """Why the open segment must roll before ``batch``, or None.

        Raises :class:`SegmentFormatError` when ``batch`` is not a valid batch
        that may follow the open segment's last one."""
        h = check_batch(batch)
        self._check_follows(h)
        return self._roll_reason(h, now_ms)

    def append(self, batch: bytes, now_ms: int) -> None:
        """Append one committed batch (a :meth:`roll_reason` of None is the
        caller's to check: a batch that needs a roll is a ``ValueError``)."""
        h = check_batch(batch)
        self._check_follows(h)
        reason = self._roll_reason(h, now_ms)
        if reason is not None:
            raise ValueError(f"the open segment must roll before offset {h.base_offset} ({reason.value})")
        last_offset = h.base_offset + h.last_offset_delta
        if self.empty:
            self._base_offset = h.base_offset
            self._first_timestamp_ms = h.max_timestamp
            self._created_ms = now_ms
            self._offset_of_max_timestamp = h.base_offset
            self._last_time_entry = TimestampOffset(NO_TIMESTAMP, h.base_offset)
        if h.max_timestamp > self._max_timestamp_ms:
            self._max_timestamp_ms = h.max_timestamp
            self._offset_of_max_timestamp = last_offset
        if self._bytes_since_last_index_entry > self.config.index_interval_bytes:
            self._offset_index += _OFFSET_ENTRY.pack(last_offset - self._base_offset, self._size_bytes)
            self._maybe_append_time_entry()
            self._bytes_since_last_index_entry = 0
        epoch = h.partition_leader_epoch
        # As Kafka's leader-epoch cache: batches without an epoch (-1) are
        # not assigned one.
        if epoch >= 0 and (not self._leader_epochs or epoch > self._leader_epochs[-1][0]):
            self._leader_epochs.append((epoch, h.base_offset))
        self._batches.append(batch)
        self._size_bytes += h.size
        self._bytes_since_last_index_entry += h.size
        self._next_offset = last_offset + 1

    def build(self) -> BuiltSegment:
        """The open segment, rolled; the builder starts an empty one."""
        if self.empty:
            raise ValueError("no batch appended: an empty segment is never built")
        # LogSegment.onBecomeInactiveSegment: the time index ends with the
        # segment's largest timestamp (the slot TimeIndex.isFull kept free).
        self._maybe_append_time_entry()
        built = BuiltSegment(
            base_offset=self._base_offset,
            next_offset=self._next_offset,
            max_timestamp_ms=self._max_timestamp_ms,
            offset_of_max_timestamp=self._offset_of_max_timestamp,
            leader_epochs=tuple(self._leader_epochs),
            log=b"".join(self._batches),
            offset_index=bytes(self._offset_index),
            time_index=bytes(self._time_index),
        )
        assert built.log_size_bytes == self._size_bytes
        self._reset()
        return built

    def _check_follows(self, h: BatchHeader) -> None:
        if self.empty:
            return
        if h.base_offset < self._next_offset:
            raise SegmentFormatError(f"batch at offset {h.base_offset}: the segment reaches {self._next_offset}")
        epoch = h.partition_leader_epoch
        if epoch >= 0 and self._leader_epochs and epoch < self._leader_epochs[-1][0]:
            raise SegmentFormatError(
                f"batch at offset {h.base_offset}: leader epoch {epoch} after {self._leader_epochs[-1][0]}"
            )

    def _roll_reason(self, h: BatchHeader, now_ms: int) -> RollReason | None:
        if self.empty:
            return None
        c = self.config
        # In LogSegment.shouldRoll's order.
        if self._size_bytes > c.segment_bytes - h.size:
            return RollReason.SEGMENT_BYTES
        if self._first_timestamp_ms >= 0:
            waited_ms = h.max_timestamp - self._first_timestamp_ms
        else:
            waited_ms = now_ms - self._created_ms
        if waited_ms > c.segment_ms:
            return RollReason.SEGMENT_MS
        if len(self._offset_index) // OFFSET_INDEX_ENTRY_BYTES >= c.offset_index_entries_max:
            return RollReason.OFFSET_INDEX_FULL
        if len(self._time_index) // TIME_INDEX_ENTRY_BYTES >= c.time_index_entries_max - 1:
            return RollReason.TIME_INDEX_FULL
        if h.base_offset + h.last_offset_delta - self._base_offset > INT32_MAX:
            return RollReason.OFFSET_OVERFLOW
        epoch = h.partition_leader_epoch
        if epoch > self._last_epoch() and len(self._leader_epochs) >= SEGMENT_LEADER_EPOCHS_MAX:
            return RollReason.LEADER_EPOCHS
        return None

    def _last_epoch(self) -> int:
        return self._leader_epochs[-1][0] if self._leader_epochs else -1

    def _maybe_append_time_entry(self) -> None:
        """TimeIndex.maybeAppend: an entry only when the timestamp grew."""
        if self._max_timestamp_ms > self._last_time_entry.timestamp_ms:
            entry = TimestampOffset(self._max_timestamp_ms, self._offset_of_max_timestamp)
            self._time_index += _TIME_ENTRY.pack(entry.timestamp_ms, entry.offset - self._base_offset)
            self._last_time_entry = entry


# -------------------------------------------------------------- validation


def _check_index_size(index: bytes, entry_bytes: int, name: str) -> None:
    if len(index) > SEGMENT_INDEX_BYTES_MAX:
        raise SegmentFormatError(f"{name} index of {len(index)} bytes: larger than {SEGMENT_INDEX_BYTES_MAX}")
    if len(index) % entry_bytes:
        raise SegmentFormatError(f"{name} index of {len(index)} bytes: not a multiple of {entry_bytes}")


def validate_offset_index(index: bytes, extent: SegmentExtent) -> None:
    """Refuse (:class:`SegmentFormatError`) an offset index a builder of
    ``extent``'s segment could not have written: its size not a multiple of
    8 or above ``SEGMENT_INDEX_BYTES_MAX``, relative offsets not strictly
    increasing within the segment, positions not strictly increasing within
    its ``.log``."""
    _check_index_size(index, OFFSET_INDEX_ENTRY_BYTES, "offset")
    span = extent.next_offset - extent.base_offset
    prev_relative, prev_position = -1, -1
    for i, (relative, position) in enumerate(_OFFSET_ENTRY.iter_unpack(index)):
        if not prev_relative < relative < span:
            raise SegmentFormatError(
                f"offset index entry {i}: relative offset {relative} after {prev_relative}, segment spans {span}"
            )
        if not prev_position < position < extent.log_size_bytes:
            raise SegmentFormatError(
                f"offset index entry {i}: position {position} after {prev_position}, "
                f"log is {extent.log_size_bytes} bytes"
            )
        prev_relative, prev_position = relative, position


def validate_time_index(index: bytes, extent: SegmentExtent) -> None:
    """Refuse (:class:`SegmentFormatError`) a time index a builder of
    ``extent``'s segment could not have written: its size not a multiple of
    12 or above ``SEGMENT_INDEX_BYTES_MAX``, timestamps not strictly
    increasing from 0, relative offsets decreasing or outside the segment."""
    _check_index_size(index, TIME_INDEX_ENTRY_BYTES, "time")
    span = extent.next_offset - extent.base_offset
    prev_timestamp, prev_relative = NO_TIMESTAMP, 0
    for i, (timestamp, relative) in enumerate(_TIME_ENTRY.iter_unpack(index)):
        if timestamp <= prev_timestamp:
            raise SegmentFormatError(f"time index entry {i}: timestamp {timestamp} after {prev_timestamp}")
        if not prev_relative <= relative < span:
            raise SegmentFormatError(
                f"time index entry {i}: relative offset {relative} after {prev_relative}, segment spans {span}"
            )
        prev_timestamp, prev_relative = timestamp, relative


# ------------------------------------------------------------------ lookups


def _largest_lower_bound(index: bytes, entry: struct.Struct, target: int) -> int:
    """The last slot whose key (an entry's first field) is <= ``target``, or
    -1: AbstractIndex.largestLowerBoundSlotFor over a validated index."""
    lo, hi = 0, len(index) // entry.size
    while lo < hi:
        mid = (lo + hi) // 2
        if entry.unpack_from(index, mid * entry.size)[0] <= target:
            lo = mid + 1
        else:
            hi = mid
    return lo - 1


def offset_index_lookup(index: bytes, extent: SegmentExtent, target_offset: int) -> int:
    """The ``.log`` position to scan forward from for ``target_offset``
    (Kafka's OffsetIndex.lookup): the position of the largest entry whose
    offset is <= the target, 0 when there is none."""
    validate_offset_index(index, extent)
    slot = _largest_lower_bound(index, _OFFSET_ENTRY, target_offset - extent.base_offset)
    if slot < 0:
        return 0
    position: int = _OFFSET_ENTRY.unpack_from(index, slot * OFFSET_INDEX_ENTRY_BYTES)[1]
    return position


def time_index_lookup(index: bytes, extent: SegmentExtent, target_timestamp_ms: int) -> TimestampOffset:
    """Kafka's TimeIndex.lookup: the largest entry whose timestamp is <= the
    target, or (NO_TIMESTAMP, base offset) when there is none.  Every batch
    before the one holding the answer's offset has a smaller max timestamp,
    so ListOffsets by time scans from ``offset_index_lookup(answer.offset)``
    (Kafka's LogSegment.findOffsetByTimestamp)."""
    validate_time_index(index, extent)
    slot = _largest_lower_bound(index, _TIME_ENTRY, target_timestamp_ms)
    if slot < 0:
        return TimestampOffset(NO_TIMESTAMP, extent.base_offset)
    timestamp, relative = _TIME_ENTRY.unpack_from(index, slot * TIME_INDEX_ENTRY_BYTES)
    return TimestampOffset(timestamp, extent.base_offset + relative)


# ------------------------------------------------------------ log scanning


def _header_at(log: bytes, position: int) -> BatchHeader:
    """The header of the batch at ``position``, which must lie whole in ``log``."""
    if position + HEADER_SIZE > len(log):
        raise SegmentFormatError(f"log position {position}: no batch header before the end ({len(log)} bytes)")
    h = BatchHeader.parse(log[position : position + HEADER_SIZE])
    if h.magic != MAGIC_V2 or h.batch_length < HEADER_SIZE - LOG_OVERHEAD:
        raise SegmentFormatError(f"log position {position}: not a v2 batch (magic {h.magic}, length {h.size})")
    if position + h.size > len(log):
        raise SegmentFormatError(f"log position {position}: batch of {h.size} bytes runs past the end ({len(log)})")
    return h


def find_offset(log: bytes, position: int, target_offset: int) -> int | None:
    """The position of the first batch from ``position`` on whose last offset
    is >= ``target_offset`` (FileRecords.searchForOffsetWithSize), or None
    when ``log`` ends first.  ``position`` must start a batch; each batch's
    framing is checked (:class:`SegmentFormatError`), its CRC is not."""
    return _scan(log, position, lambda h: h.base_offset + h.last_offset_delta >= target_offset)


def find_timestamp(log: bytes, position: int, target_timestamp_ms: int) -> int | None:
    """The position of the first batch from ``position`` on whose max
    timestamp is >= ``target_timestamp_ms`` (FileRecords.searchForTimestamp,
    to the batch; the caller picks the record), or None."""
    return _scan(log, position, lambda h: h.max_timestamp >= target_timestamp_ms)


def _scan(log: bytes, position: int, found: Callable[[BatchHeader], bool]) -> int | None:
    if not 0 <= position <= len(log):
        raise SegmentFormatError(f"log position {position}: outside the log ({len(log)} bytes)")
    # Each step moves at least one header forward: bounded by len(log) / 61.
    while position < len(log):
        h = _header_at(log, position)
        if found(h):
            return position
        position += h.size
    return None


__all__ = [
    "INDEX_INTERVAL_BYTES_DEFAULT",
    "NO_TIMESTAMP",
    "OFFSET_INDEX_ENTRY_BYTES",
    "SEGMENT_BYTES_DEFAULT",
    "SEGMENT_INDEX_BYTES_DEFAULT",
    "SEGMENT_INDEX_BYTES_MAX",
    "SEGMENT_LEADER_EPOCHS_MAX",
    "SEGMENT_MS_DEFAULT",
    "TIME_INDEX_ENTRY_BYTES",
    "BuiltSegment",
    "RollReason",
    "SegmentBuilder",
    "SegmentConfig",
    "SegmentExtent",
    "SegmentFormatError",
    "TimestampOffset",
    "check_batch",
    "find_offset",
    "find_timestamp",
    "offset_index_lookup",
    "time_index_lookup",
    "validate_offset_index",
    "validate_time_index",
]
