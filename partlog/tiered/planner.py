"""Where a leader's next tiered segment ends (sans-IO): the builder loop's
decision, from the partition's committed entries alone (no batch bytes).

Given the partition's next untiered offset, its high watermark, the entries
from there in offset order (base offset, last offset, size, max timestamp,
leader epoch: :class:`EntryShape`), its :class:`SegmentConfig` and the time,
:func:`plan_segment` answers the next segment's range (:class:`SegmentPlan`)
or None while it is still open:

* whole batches from the first entry at or after the next untiered offset
  (a log start inside a batch leaves that batch out: a swap starts on a
  batch boundary), never one whose last offset is at or above the HWM;
* the segment closes before the first committed batch that
  :class:`~partlog.tiered.segment.SegmentBuilder` would roll it for
  (``LogSegment.shouldRoll``: segment.bytes, segment.ms between batch
  timestamps, full indexes, relative offsets, leader epochs), so building
  the planned batches never rolls in the middle;
* partlog's own rule: the segment also closes when its first batch is
  older than ``segment.ms`` at ``now_ms`` even with no batch after it.
  Kafka rolls on append only, so an idle partition keeps its active segment;
  here the open tail lives in shared WAL objects, and KIP-1163 wants those
  to die young.  The age is the first batch's max timestamp; a batch
  without one (-1) counts from ``first_seen_ms``, when the caller first saw
  that batch as the next untiered one (Kafka's segment creation time);
* and when :data:`PLAN_ENTRIES_MAX` entries fit without any rule closing the
  segment, it closes there: one call considers at most that many entries
  (its time and memory are bounded), and a partition of tiny batches still
  makes progress.

The roll rules are mirrored on entry shapes here, not shared with the
builder (which needs the bytes); ``tests/unit/test_tiered_planner.py``
checks the two agree on real batches.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from partlog.kafka.batch_header import INT32_MAX
from partlog.tiered.segment import NO_TIMESTAMP, SEGMENT_LEADER_EPOCHS_MAX, RollReason, SegmentConfig

# Entries one call considers: its work and the segment's batch count are
# bounded by it (10,000 batches of a few KiB each is tens of MiB).
PLAN_ENTRIES_MAX = 10_000


class CloseReason(Enum):
    """Why a planned segment is closed."""

    ROLL = "the next batch rolls it"
    AGE = "first batch older than segment.ms"
    ENTRIES_MAX = "entries per plan"


@dataclass(frozen=True, slots=True)
class EntryShape:
    """What the planner needs of one committed entry (its stored header's
    fields and its size)."""

    base_offset: int
    last_offset: int
    size_bytes: int
    max_timestamp_ms: int
    leader_epoch: int = -1


@dataclass(frozen=True, slots=True)
class SegmentPlan:
    """The next segment: entries ``[start_offset, end_offset]`` (inclusive,
    whole batches), ``entries`` of them, ``size_bytes`` in all."""

    start_offset: int
    end_offset: int
    entries: int
    size_bytes: int
    reason: CloseReason
    # The builder's reason when ``reason`` is ROLL.
    roll: RollReason | None = None


class _Shape:
    """The open segment's counters that ``SegmentBuilder`` rolls on, kept
    as its ``append`` keeps them (index entries counted, not written)."""

    def __init__(self, config: SegmentConfig) -> None:
        self.config = config
        self.entries = 0
        self.size_bytes = 0
        self.base_offset = 0
        self.end_offset = -1
        self.first_timestamp_ms = NO_TIMESTAMP
        self.max_timestamp_ms = NO_TIMESTAMP
        self.bytes_since_last_index_entry = 0
        self.offset_entries = 0
        self.time_entries = 0
        self.last_time_entry_ms = NO_TIMESTAMP
        self.epochs = 0
        self.last_epoch = -1

    def roll_reason(self, e: EntryShape) -> RollReason | None:
        if not self.entries:
            return None
        c = self.config
        if self.size_bytes > c.segment_bytes - e.size_bytes:
            return RollReason.SEGMENT_BYTES
        # A first batch without a timestamp counts from the builder's first
        # append, which the shell makes at the same now_ms as the others:
        # no roll by time within one build.
        waited_ms = e.max_timestamp_ms - self.first_timestamp_ms if self.first_timestamp_ms >= 0 else 0
        if waited_ms > c.segment_ms:
            return RollReason.SEGMENT_MS
        if self.offset_entries >= c.offset_index_entries_max:
            return RollReason.OFFSET_INDEX_FULL
        if self.time_entries >= c.time_index_entries_max - 1:
            return RollReason.TIME_INDEX_FULL
        if e.last_offset - self.base_offset > INT32_MAX:
            return RollReason.OFFSET_OVERFLOW
        if e.leader_epoch > self.last_epoch and self.epochs >= SEGMENT_LEADER_EPOCHS_MAX:
            return RollReason.LEADER_EPOCHS
        return None

    def append(self, e: EntryShape) -> None:
        if not self.entries:
            self.base_offset = e.base_offset
            self.first_timestamp_ms = e.max_timestamp_ms
        self.max_timestamp_ms = max(self.max_timestamp_ms, e.max_timestamp_ms)
        if self.bytes_since_last_index_entry > self.config.index_interval_bytes:
            self.offset_entries += 1
            if self.max_timestamp_ms > self.last_time_entry_ms:
                self.time_entries += 1
                self.last_time_entry_ms = self.max_timestamp_ms
            self.bytes_since_last_index_entry = 0
        if e.leader_epoch >= 0 and e.leader_epoch > self.last_epoch:
            self.epochs += 1
            self.last_epoch = e.leader_epoch
        self.entries += 1
        self.size_bytes += e.size_bytes
        self.bytes_since_last_index_entry += e.size_bytes
        self.end_offset = e.last_offset

    def plan(self, reason: CloseReason, roll: RollReason | None = None) -> SegmentPlan:
        return SegmentPlan(self.base_offset, self.end_offset, self.entries, self.size_bytes, reason, roll)


def plan_segment(
    next_offset: int,
    high_watermark: int,
    entries: Sequence[EntryShape],
    config: SegmentConfig,
    now_ms: int,
    *,
    first_seen_ms: int | None = None,
    entries_max: int = PLAN_ENTRIES_MAX,
) -> SegmentPlan | None:
    """The next segment to build from ``entries`` (module doc), or None
    while it is still open.  ``entries`` must be in offset order without
    overlaps (ValueError otherwise); those before ``next_offset`` are
    skipped, at most ``entries_max`` of the rest are considered."""
    if entries_max < 1:
        raise ValueError(f"entries_max {entries_max}: must be >= 1")
    shape = _Shape(config)
    prev_last = -1
    for e in entries:
        if e.base_offset <= prev_last or e.last_offset < e.base_offset or e.size_bytes <= 0:
            raise ValueError(f"entry [{e.base_offset}, {e.last_offset}] of {e.size_bytes} bytes after {prev_last}")
        prev_last = e.last_offset
        if e.base_offset < next_offset:
            continue
        if e.last_offset >= high_watermark:
            break  # not committed: never tiered, and no roll decided by it
        if shape.entries >= entries_max:
            return shape.plan(CloseReason.ENTRIES_MAX)
        roll = shape.roll_reason(e)
        if roll is not None:
            return shape.plan(CloseReason.ROLL, roll)
        shape.append(e)
    if not shape.entries:
        return None
    if shape.entries >= entries_max:
        return shape.plan(CloseReason.ENTRIES_MAX)
    born_ms = shape.first_timestamp_ms if shape.first_timestamp_ms >= 0 else first_seen_ms
    if born_ms is not None and now_ms - born_ms > config.segment_ms:
        return shape.plan(CloseReason.AGE)
    return None


__all__ = ["PLAN_ENTRIES_MAX", "CloseReason", "EntryShape", "SegmentPlan", "plan_segment"]
