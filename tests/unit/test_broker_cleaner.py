"""The cleaner shell's pure choices (partlog/broker/cleaner.py): which rows
go into one cleaned segment, and when a log is dirty enough to clean."""

from __future__ import annotations

from partlog.broker.cleaner import dirty_enough, group_rows
from partlog.store import Segment


def _rows(*spans: tuple[int, int, int]) -> list[Segment]:
    return [Segment(s, e, size, 1, f"k{s}") for s, e, size in spans]


def test_group_rows_by_size_and_adjacency() -> None:
    rows = _rows((0, 9, 40), (10, 19, 40), (20, 29, 40), (30, 39, 200), (41, 49, 10), (50, 59, 10))
    groups = group_rows(rows, 100)
    assert [[r.start_offset for r in g] for g in groups] == [[0, 10], [20], [30], [41, 50]]
    assert group_rows([], 100) == []


def test_dirty_enough() -> None:
    assert dirty_enough(50, 100, 0.5, forced=False)
    assert not dirty_enough(49, 100, 0.5, forced=False)
    assert dirty_enough(1, 100, 0.5, forced=True)  # max.compaction.lag.ms passed
    assert not dirty_enough(0, 100, 0.0, forced=True)  # nothing dirty
