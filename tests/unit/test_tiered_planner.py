"""partlog.tiered.planner: the builder loop's decision agrees with
SegmentBuilder's roll rules on real batches, stays below the HWM, covers
whole batches contiguously, and closes an old tail by age."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from partlog.kafka.batch_header import BatchHeader
from partlog.tiered.planner import CloseReason, EntryShape, SegmentPlan, plan_segment
from partlog.tiered.segment import RollReason, SegmentBuilder, SegmentConfig
from tests.tiered_cases import committed_log

T0 = 1_700_000_000_000


def shape_of(batch: bytes) -> EntryShape:
    h = BatchHeader.parse(batch)
    return EntryShape(h.base_offset, h.base_offset + h.last_offset_delta, h.size, h.max_timestamp,
                      h.partition_leader_epoch)  # fmt: skip


def plan_all(
    shapes: list[EntryShape], hwm: int, config: SegmentConfig, now_ms: int, entries_max: int
) -> list[SegmentPlan]:
    """Plans from offset 0 as the loop makes them: each from the last end + 1."""
    plans: list[SegmentPlan] = []
    next_offset = 0
    for _ in range(len(shapes) + 1):
        plan = plan_segment(next_offset, hwm, shapes, config, now_ms, entries_max=entries_max)
        if plan is None:
            break
        plans.append(plan)
        next_offset = plan.end_offset + 1
    return plans


batch_shapes = st.lists(
    st.tuples(st.integers(1, 4), st.integers(0, 400), st.integers(0, 5_000), st.integers(0, 2)),
    min_size=1,
    max_size=25,
)


@settings(max_examples=150, deadline=None)
@given(
    spec=batch_shapes,
    hwm_cut=st.integers(0, 25),
    segment_bytes=st.integers(100, 4_000),
    segment_ms=st.integers(1, 8_000),
    index_interval_bytes=st.integers(0, 600),
    segment_index_bytes=st.integers(24, 80),
    entries_max=st.integers(1, 12),
    now_ms=st.integers(T0, T0 + 20_000),
)
def test_plans_match_the_builder(
    spec: list[tuple[int, int, int, int]],
    hwm_cut: int,
    segment_bytes: int,
    segment_ms: int,
    index_interval_bytes: int,
    segment_index_bytes: int,
    entries_max: int,
    now_ms: int,
) -> None:
    batches = []
    offset, epoch = 0, 0
    for records, value_bytes, ts_delta, epoch_step in spec:
        epoch += epoch_step
        [b] = committed_log([(records, value_bytes, T0 + ts_delta)], first_offset=offset, epoch=epoch)
        batches.append(b)
        offset += records
    shapes = [shape_of(b) for b in batches]
    hwm = shapes[min(hwm_cut, len(shapes) - 1)].last_offset + 1 if hwm_cut < len(shapes) else offset
    config = SegmentConfig(segment_bytes, segment_ms, index_interval_bytes, segment_index_bytes)
    plans = plan_all(shapes, hwm, config, now_ms, entries_max)
    by_base = {s.base_offset: i for i, s in enumerate(shapes)}
    expected_start = 0
    for plan in plans:
        # Contiguous, whole batches, never at or past the HWM.
        assert plan.start_offset == expected_start
        assert plan.end_offset < hwm
        first = by_base[plan.start_offset]
        members = shapes[first : first + plan.entries]
        assert members[-1].last_offset == plan.end_offset
        assert sum(s.size_bytes for s in members) == plan.size_bytes
        assert plan.entries <= entries_max
        # The builder takes every batch of the plan without a roll ...
        builder = SegmentBuilder(config)
        for b in batches[first : first + plan.entries]:
            assert builder.roll_reason(b, now_ms) is None
            builder.append(b, now_ms)
        # ... and rolls for the next one exactly when the plan says so.
        after = first + plan.entries
        if plan.reason == CloseReason.ROLL:
            assert builder.roll_reason(batches[after], now_ms) == plan.roll
        elif plan.reason == CloseReason.ENTRIES_MAX:
            assert plan.entries == entries_max
        else:
            # By age: no committed batch after it, and old enough.
            assert plan.reason == CloseReason.AGE
            assert after == len(batches) or shapes[after].last_offset >= hwm
            assert now_ms - shapes[first].max_timestamp_ms > segment_ms
        expected_start = plan.end_offset + 1
    # What is left open is committed, young, and rolls nowhere.
    rest = [s for s in shapes if s.base_offset >= expected_start and s.last_offset < hwm]
    if rest:
        assert len(rest) < entries_max
        assert now_ms - rest[0].max_timestamp_ms <= segment_ms


def test_age_closes_an_idle_tail_and_only_then() -> None:
    batches = committed_log([(2, 10, T0), (2, 10, T0 + 5)])
    shapes = [shape_of(b) for b in batches]
    config = SegmentConfig(segment_ms=1_000)
    born = shapes[0].max_timestamp_ms  # T0 + 1: the first batch's max timestamp
    assert plan_segment(0, 4, shapes, config, born + 1_000) is None  # not older than segment.ms
    plan = plan_segment(0, 4, shapes, config, born + 1_001)
    assert plan is not None and (plan.start_offset, plan.end_offset, plan.entries) == (0, 3, 2)
    assert plan.reason == CloseReason.AGE
    # The HWM bounds it: an uncommitted batch is never included.
    plan = plan_segment(0, 3, shapes, config, T0 + 10_000)
    assert plan is not None and plan.end_offset == 1
    assert plan_segment(0, 0, shapes, config, T0 + 10_000) is None


def test_a_batch_without_timestamp_ages_from_when_it_was_first_seen() -> None:
    [b] = committed_log([(1, 10, -1)])
    shapes = [shape_of(b)]
    assert shapes[0].max_timestamp_ms == -1
    config = SegmentConfig(segment_ms=100)
    assert plan_segment(0, 1, shapes, config, T0) is None  # no first-seen time: never by age
    assert plan_segment(0, 1, shapes, config, T0 + 100, first_seen_ms=T0) is None
    plan = plan_segment(0, 1, shapes, config, T0 + 101, first_seen_ms=T0)
    assert plan is not None and plan.reason == CloseReason.AGE


def test_a_log_start_inside_a_batch_starts_at_the_next_one() -> None:
    batches = committed_log([(3, 10, T0), (2, 10, T0)])
    shapes = [shape_of(b) for b in batches]
    plan = plan_segment(1, 5, shapes, SegmentConfig(segment_ms=1), T0 + 10)
    assert plan is not None and (plan.start_offset, plan.end_offset) == (3, 4)


def test_segment_bytes_roll_and_entries_bound() -> None:
    batches = committed_log([(1, 100, T0)] * 5)
    shapes = [shape_of(b) for b in batches]
    size = shapes[0].size_bytes
    plan = plan_segment(0, 5, shapes, SegmentConfig(segment_bytes=2 * size), T0)
    assert plan is not None and plan.entries == 2 and plan.roll == RollReason.SEGMENT_BYTES
    plan = plan_segment(0, 5, shapes, SegmentConfig(), T0, entries_max=3)
    assert plan is not None and plan.entries == 3 and plan.reason == CloseReason.ENTRIES_MAX
    assert plan_segment(0, 5, shapes, SegmentConfig(), T0) is None  # young, no roll: open


def test_entries_out_of_order_are_refused() -> None:
    a, b = (shape_of(x) for x in committed_log([(2, 10, T0), (2, 10, T0)]))
    with pytest.raises(ValueError, match="after"):
        plan_segment(0, 10, [b, a], SegmentConfig(), T0)
    with pytest.raises(ValueError, match="entries_max"):
        plan_segment(0, 10, [a], SegmentConfig(), T0, entries_max=0)
