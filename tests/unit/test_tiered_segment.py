"""partlog.tiered.segment: Kafka's segment format built from committed
batches, its roll rules, and lookups that fail closed over hostile bytes."""

from __future__ import annotations

import contextlib
import itertools
import struct
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch

import partlog.tiered.segment as segment_module
from partlog.kafka.batch_header import INT32_MAX, BatchHeader
from partlog.tiered.segment import (
    NO_TIMESTAMP,
    SEGMENT_INDEX_BYTES_MAX,
    BuiltSegment,
    RollReason,
    SegmentBuilder,
    SegmentConfig,
    SegmentExtent,
    SegmentFormatError,
    TimestampOffset,
    check_batch,
    find_offset,
    find_timestamp,
    offset_index_lookup,
    time_index_lookup,
    validate_offset_index,
    validate_time_index,
)
from tests.batches import build_batch
from tests.tiered_cases import build_segments, committed_log, stamped

T0 = 1_700_000_000_000


def _positions(segment: BuiltSegment) -> list[tuple[int, BatchHeader]]:
    """(position, header) of every batch of the segment's .log, by brute force."""
    out, pos = [], 0
    while pos < len(segment.log):
        h = BatchHeader.parse(segment.log[pos : pos + 61])
        out.append((pos, h))
        pos += h.size
    assert pos == len(segment.log)
    return out


# ------------------------------------------------------------ the layout


def test_index_layout_of_a_tiny_segment_by_hand() -> None:
    # 95, 78 and 112 bytes at offsets 100-101, 102, 103-105; max timestamps
    # 1001, 900 (smaller: no time entry), 2002.
    batches = [
        stamped(build_batch(2, timestamp_ms=1000), 100, epoch=5),
        stamped(build_batch(1, timestamp_ms=900), 102, epoch=5),
        stamped(build_batch(3, timestamp_ms=2000), 103, epoch=7),
    ]
    assert [len(b) for b in batches] == [95, 78, 112]
    # An interval of 0: every batch but the first gets an entry (more than
    # 0 bytes since the last).  Offset entries are (batch last offset - 100,
    # batch position); time entries (max timestamp so far, its batch's last
    # offset - 100).
    (seg,) = build_segments(batches, SegmentConfig(index_interval_bytes=0))
    assert seg.offset_index == bytes.fromhex("00000002 0000005f 00000005 000000ad")
    assert seg.time_index == bytes.fromhex("00000000000003e9 00000001 00000000000007d2 00000005")
    assert (seg.base_offset, seg.next_offset) == (100, 106)
    assert (seg.max_timestamp_ms, seg.offset_of_max_timestamp) == (2002, 105)
    assert seg.leader_epochs == ((5, 100), (7, 103))
    assert seg.log == b"".join(batches)
    assert (seg.log_size_bytes, seg.offset_index_size_bytes, seg.time_index_size_bytes) == (285, 16, 24)

    # An interval of 95: the second batch comes after exactly 95 bytes, not
    # more, so only the third gets entries.
    (seg,) = build_segments(batches, SegmentConfig(index_interval_bytes=95))
    assert seg.offset_index == bytes.fromhex("00000005 000000ad")
    assert seg.time_index == bytes.fromhex("00000000000007d2 00000005")

    # Kafka's default interval: no entry at all; rolling adds the time index's
    # last entry (onBecomeInactiveSegment).
    (seg,) = build_segments(batches, SegmentConfig())
    assert seg.offset_index == b""
    assert seg.time_index == bytes.fromhex("00000000000007d2 00000005")


def test_batches_without_timestamps_leave_the_time_index_empty() -> None:
    batches = committed_log([(1, 10, NO_TIMESTAMP)] * 3)
    (seg,) = build_segments(batches, SegmentConfig(index_interval_bytes=0))
    assert len(seg.offset_index) == 16 and seg.time_index == b""
    assert (seg.max_timestamp_ms, seg.offset_of_max_timestamp) == (NO_TIMESTAMP, 0)
    assert time_index_lookup(seg.time_index, seg.extent, T0) == TimestampOffset(NO_TIMESTAMP, 0)


# ------------------------------------------------------- the property


batch_shapes = st.lists(
    st.tuples(
        st.integers(1, 4),  # records
        st.integers(0, 1500),  # value bytes
        st.integers(-2_000, 10_000),  # timestamp delta: may go back
        st.integers(0, 3),  # offset gap before the batch (a compacted log has them)
        st.booleans(),  # a new leader epoch
        st.sampled_from([0, 1]),  # compression: none, gzip
    ),
    min_size=1,
    max_size=24,
)
configs = st.builds(
    SegmentConfig,
    segment_bytes=st.sampled_from([300, 2_000, 8_000, 1 << 30]),
    segment_ms=st.sampled_from([1_000, 5_000, 7 * 24 * 3600 * 1000]),
    index_interval_bytes=st.sampled_from([0, 100, 1_000, 4096]),
    segment_index_bytes=st.sampled_from([36, 96, 10 * 1024 * 1024]),
)


@settings(max_examples=100)
@given(shapes=batch_shapes, config=configs)
def test_property_segments_find_every_offset_and_timestamp(
    shapes: list[tuple[int, int, int, int, bool, int]], config: SegmentConfig
) -> None:
    batches, offset, epoch, ts = [], 5, 0, T0
    for records, value_bytes, delta, gap, bump, compression in shapes:
        offset += gap
        epoch += bump
        ts += delta
        batch = build_batch(records, value_bytes=value_bytes, timestamp_ms=ts, compression=compression)
        batches.append(stamped(batch, offset, epoch))
        offset += records
    segments = build_segments(batches, config)
    assert b"".join(s.log for s in segments) == b"".join(batches)
    for prev, nxt in itertools.pairwise(segments):
        assert prev.next_offset <= nxt.base_offset

    for seg in segments:
        extent = seg.extent
        validate_offset_index(seg.offset_index, extent)
        validate_time_index(seg.time_index, extent)
        batches_at = _positions(seg)
        assert seg.base_offset == batches_at[0][1].base_offset
        last = batches_at[-1][1]
        assert seg.next_offset == last.base_offset + last.last_offset_delta + 1
        # Each batch at its position is one kafka-python reads, CRC and all.
        for pos, h in batches_at:
            parsed = DefaultRecordBatch(seg.log[pos : pos + h.size])
            assert parsed.validate_crc() and parsed.base_offset == h.base_offset
        # The size rule: only a lone batch exceeds segment_bytes.
        assert seg.log_size_bytes <= config.segment_bytes or len(batches_at) == 1

        # Every offset, through the index then forward: the batch holding it
        # (in a gap, the next batch, as Kafka's searchForOffsetWithSize).
        for target in range(seg.base_offset - 1, seg.next_offset):
            position = offset_index_lookup(seg.offset_index, extent, target)
            want = next(p for p, h in batches_at if h.base_offset + h.last_offset_delta >= target)
            assert position <= want
            assert find_offset(seg.log, position, target) == want
        assert find_offset(seg.log, 0, seg.next_offset) is None

        # The max timestamp and the first batch that reached it.
        max_ts = max(h.max_timestamp for _, h in batches_at)
        first = next(h for _, h in batches_at if h.max_timestamp == max_ts)
        assert seg.max_timestamp_ms == max_ts
        assert seg.offset_of_max_timestamp == first.base_offset + first.last_offset_delta

        # ListOffsets by time: the first batch whose max timestamp >= target.
        stamps = sorted({h.max_timestamp for _, h in batches_at})
        for target in {t + d for t in stamps for d in (-1, 0, 1)}:
            found = time_index_lookup(seg.time_index, extent, target)
            position = offset_index_lookup(seg.offset_index, extent, max(found.offset, seg.base_offset))
            want_ts = next((p for p, h in batches_at if h.max_timestamp >= target), None)
            assert find_timestamp(seg.log, position, target) == want_ts

        # Leader epochs: the first offset of each epoch in the segment.
        epochs: dict[int, int] = {}
        for _, h in batches_at:
            epochs.setdefault(h.partition_leader_epoch, h.base_offset)
        assert seg.leader_epochs == tuple(sorted(epochs.items()))


# ---------------------------------------------------------- roll rules


def test_roll_on_segment_bytes() -> None:
    a, b, c = committed_log([(1, 10, T0)] * 3)  # 78 bytes each
    builder = SegmentBuilder(SegmentConfig(segment_bytes=156))
    assert builder.roll_reason(a, 0) is None  # an empty segment never rolls
    builder.append(a, 0)
    assert builder.roll_reason(b, 0) is None  # 156 fits exactly
    builder.append(b, 0)
    assert builder.roll_reason(c, 0) is RollReason.SEGMENT_BYTES
    with pytest.raises(ValueError, match="must roll"):
        builder.append(c, 0)
    first = builder.build()
    assert builder.empty and (first.base_offset, first.next_offset) == (0, 2)
    builder.append(c, 0)
    assert builder.build().base_offset == 2


def test_a_batch_larger_than_segment_bytes_gets_a_segment_of_its_own() -> None:
    big, small = committed_log([(1, 500, T0), (1, 10, T0)])
    segs = build_segments([big, small], SegmentConfig(segment_bytes=100))
    assert [s.log for s in segs] == [big, small]


def test_roll_on_segment_ms_from_the_first_batch_timestamp() -> None:
    first, on_time, late = committed_log([(1, 10, T0), (1, 10, T0 + 1000), (1, 10, T0 + 1001)])
    builder = SegmentBuilder(SegmentConfig(segment_ms=1000))
    builder.append(first, now_ms=0)
    # The batches' timestamps decide, not the clock.
    assert builder.roll_reason(on_time, now_ms=10**12) is None
    builder.append(on_time, now_ms=10**12)
    assert builder.roll_reason(late, now_ms=0) is RollReason.SEGMENT_MS


def test_roll_on_segment_ms_by_the_clock_without_a_first_timestamp() -> None:
    first, second = committed_log([(1, 10, NO_TIMESTAMP), (1, 10, T0)])
    builder = SegmentBuilder(SegmentConfig(segment_ms=1000))
    builder.append(first, now_ms=5_000)
    assert builder.roll_reason(second, now_ms=6_000) is None
    assert builder.roll_reason(second, now_ms=6_001) is RollReason.SEGMENT_MS


def test_roll_on_relative_offset_overflow() -> None:
    builder = SegmentBuilder()
    builder.append(stamped(build_batch(1), 10), 0)
    fits = stamped(build_batch(2), 10 + INT32_MAX - 1)  # last offset: base + INT32_MAX
    assert builder.roll_reason(fits, 0) is None
    over = stamped(build_batch(2), 10 + INT32_MAX)
    assert builder.roll_reason(over, 0) is RollReason.OFFSET_OVERFLOW
    builder.append(fits, 0)
    seg = builder.build()
    assert seg.next_offset - 1 - seg.base_offset == INT32_MAX


def test_roll_when_an_index_is_full() -> None:
    # 48 bytes: 6 offset entries, 4 time slots of which the last is kept for
    # the entry a roll adds (TimeIndex.isFull).  With timestamps that never grow, the offset index fills first.
    flat = committed_log([(1, 10, T0)] * 8)
    builder = SegmentBuilder(SegmentConfig(index_interval_bytes=0, segment_index_bytes=48))
    for batch in flat[:7]:
        builder.append(batch, 0)
    assert builder.roll_reason(flat[7], 0) is RollReason.OFFSET_INDEX_FULL
    # Growing timestamps: the time index is full after 3 entries.
    rising = committed_log([(1, 10, T0 + i) for i in range(5)])
    builder = SegmentBuilder(SegmentConfig(index_interval_bytes=0, segment_index_bytes=48))
    for batch in rising[:4]:
        builder.append(batch, 0)
    assert builder.roll_reason(rising[4], 0) is RollReason.TIME_INDEX_FULL
    assert len(builder.build().time_index) == 36


def test_roll_on_leader_epochs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(segment_module, "SEGMENT_LEADER_EPOCHS_MAX", 2)
    builder = SegmentBuilder()
    builder.append(stamped(build_batch(1), 0, epoch=1), 0)
    builder.append(stamped(build_batch(1), 1, epoch=2), 0)
    assert builder.roll_reason(stamped(build_batch(1), 2, epoch=2), 0) is None
    assert builder.roll_reason(stamped(build_batch(1), 2, epoch=3), 0) is RollReason.LEADER_EPOCHS


# --------------------------------------------------- refused batches


def test_builder_refuses_what_a_committed_log_cannot_hold() -> None:
    builder = SegmentBuilder()
    builder.append(stamped(build_batch(3), 10, epoch=4), 0)
    with pytest.raises(SegmentFormatError, match="reaches 13"):
        builder.append(stamped(build_batch(1), 12, epoch=4), 0)
    with pytest.raises(SegmentFormatError, match="leader epoch 3 after 4"):
        builder.roll_reason(stamped(build_batch(1), 13, epoch=3), 0)
    good = stamped(build_batch(1), 13, epoch=4)
    bad_crc = good[:-1] + bytes([good[-1] ^ 1])
    for bad in (good[:60], good[:-1], good + b"\0", bad_crc, good[:16] + b"\x01" + good[17:]):
        with pytest.raises(SegmentFormatError):
            check_batch(bad)
        with pytest.raises(SegmentFormatError):
            builder.append(bad, 0)
    builder.append(good, 0)
    assert builder.build().next_offset == 14
    with pytest.raises(ValueError, match="empty segment"):
        builder.build()


def test_config_bounds() -> None:
    for bad in (
        {"segment_bytes": 0},
        {"segment_bytes": INT32_MAX + 1},
        {"segment_ms": 0},
        {"index_interval_bytes": -1},
        {"segment_index_bytes": 23},
        {"segment_index_bytes": SEGMENT_INDEX_BYTES_MAX + 1},
    ):
        with pytest.raises(ValueError):
            SegmentConfig(**bad)
    with pytest.raises(ValueError):
        SegmentExtent(5, 5, 100)
    with pytest.raises(ValueError):
        SegmentExtent(0, INT32_MAX + 2, 100)


# ------------------------------------------------- hostile index bytes


def _extent(base: int, span: int, size: int) -> SegmentExtent:
    return SegmentExtent(base, base + span, size)


hostile_extents = st.builds(_extent, st.integers(0, 2**40), st.integers(1, 1 << 20), st.integers(61, 1 << 20))
offset_entries = st.lists(st.tuples(st.integers(-(2**31), 2**31 - 1), st.integers(-(2**31), 2**31 - 1)), max_size=20)
time_entries = st.lists(st.tuples(st.integers(-(2**63), 2**63 - 1), st.integers(-(2**31), 2**31 - 1)), max_size=20)


def _only_format_errors(fn: Callable[..., object], *args: object) -> None:
    with contextlib.suppress(SegmentFormatError):
        fn(*args)


@given(
    raw=st.binary(max_size=400),
    entries=offset_entries,
    times=time_entries,
    extent=hostile_extents,
    target=st.integers(-(2**63), 2**63 - 1),
)
def test_property_hostile_index_bytes_raise_only_format_errors(
    raw: bytes,
    entries: list[tuple[int, int]],
    times: list[tuple[int, int]],
    extent: SegmentExtent,
    target: int,
) -> None:
    structured = b"".join(struct.pack(">ii", *e) for e in entries)
    timed = b"".join(struct.pack(">qi", *e) for e in times)
    for index in (raw, structured, timed):
        _only_format_errors(validate_offset_index, index, extent)
        _only_format_errors(validate_time_index, index, extent)
        _only_format_errors(offset_index_lookup, index, extent, target)
        _only_format_errors(time_index_lookup, index, extent, target)
    # What passes validation answers inside the segment.
    try:
        position = offset_index_lookup(structured, extent, target)
    except SegmentFormatError:
        pass
    else:
        assert 0 <= position < extent.log_size_bytes
    try:
        found = time_index_lookup(timed, extent, target)
    except SegmentFormatError:
        pass
    else:
        assert extent.base_offset <= found.offset < extent.next_offset


@given(raw=st.binary(max_size=600), position=st.integers(-5, 700), target=st.integers(-5, 2**40))
def test_property_hostile_log_bytes_raise_only_format_errors(raw: bytes, position: int, target: int) -> None:
    _only_format_errors(find_offset, raw, position, target)
    _only_format_errors(find_timestamp, raw, position, target)


def test_validators_name_the_problem() -> None:
    extent = SegmentExtent(100, 200, 1000)
    cases = [
        (validate_offset_index, b"\0" * 7, "multiple of 8"),
        (validate_offset_index, b"\0" * (SEGMENT_INDEX_BYTES_MAX + 8), "larger than"),
        (validate_offset_index, struct.pack(">iiii", 5, 10, 5, 20), "relative offset 5 after 5"),
        (validate_offset_index, struct.pack(">ii", -1, 10), "relative offset -1"),
        (validate_offset_index, struct.pack(">ii", 100, 10), "spans 100"),
        (validate_offset_index, struct.pack(">iiii", 5, 10, 6, 10), "position 10 after 10"),
        (validate_offset_index, struct.pack(">ii", 5, 1000), "log is 1000 bytes"),
        (validate_time_index, b"\0" * 13, "multiple of 12"),
        (validate_time_index, struct.pack(">qiqi", 7, 1, 7, 2), "timestamp 7 after 7"),
        (validate_time_index, struct.pack(">qi", -1, 1), "timestamp -1"),
        (validate_time_index, struct.pack(">qiqi", 7, 3, 8, 2), "relative offset 2 after 3"),
        (validate_time_index, struct.pack(">qi", 7, 100), "spans 100"),
    ]
    for fn, index, match in cases:
        with pytest.raises(SegmentFormatError, match=match):
            fn(index, extent)


def test_lookups_below_and_above_the_entries() -> None:
    extent = SegmentExtent(100, 200, 1000)
    index = struct.pack(">iiii", 10, 300, 20, 600)
    assert offset_index_lookup(index, extent, 50) == 0
    assert offset_index_lookup(index, extent, 109) == 0
    assert offset_index_lookup(index, extent, 110) == 300
    assert offset_index_lookup(index, extent, 119) == 300
    assert offset_index_lookup(index, extent, 10**6) == 600
    times = struct.pack(">qiqi", 1000, 10, 2000, 20)
    assert time_index_lookup(times, extent, 999) == TimestampOffset(NO_TIMESTAMP, 100)
    assert time_index_lookup(times, extent, 1000) == TimestampOffset(1000, 110)
    assert time_index_lookup(times, extent, 10**15) == TimestampOffset(2000, 120)
