"""Tiered-segment swaps reaching followers (issue 31), below the network.

* The leader's selection rule (``segments_for_follower``): which of its
  segment rows one fetch answer carries, against the follower's
  ``tiered_through``, fetch offset and log start, the leader's HWM, and
  ``SEGMENT_SWAPS_PER_FETCH_MAX``.
* The store's replicated swap on a follower whose entries of the range
  name the WAL objects, the segment already (fetched after the leader
  swapped: a replica that joined later), or some of each: the follower
  ends with the leader's rows, positions and file index.

Real LMDB, real v2 batches; every store ends with ``check() == []``.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from partlog import DeleteRecordsRequest, Errors, FindBatchRequest, MetadataStore, TopicIdPartition
from partlog.kafka.batch_header import BatchHeader
from partlog.replication.config import ReplicationConfig
from partlog.replication.fetcher import ReplicaFetchers
from partlog.replication.partition import FollowedPartition, segments_for_follower
from partlog.replication.stats import ReplicationStats
from partlog.rpc.wire import SEGMENT_SWAPS_PER_FETCH_MAX, ReplicaFetchPartition, ReplicaFetchResult, ReplicaSegment
from partlog.store import Segment, SegmentSwap
from tests.clock import Clock
from tests.unit.test_store_replication import BIG, T0, commit1, open_store, plain, replicate, topic

TP = TopicIdPartition(uuid.UUID(int=7), 0)
LEADER = 1


def fetch(offset: int, tiered_through: int = -1, log_start: int = -1) -> ReplicaFetchPartition:
    return ReplicaFetchPartition(TP, 0, offset, 0, -1, log_start, tiered_through)


def rows(*ranges: tuple[int, int]) -> list[Segment]:
    return [Segment(a, b, 100 * (b - a + 1), 1, f"tiered/{a}.log") for a, b in ranges]


def starts(got: tuple[ReplicaSegment, ...]) -> list[int]:
    return [g.start_offset for g in got]


# ----------------------------------------------------- the selection rule


def test_rows_past_tiered_through_and_below_the_fetch_offset_and_the_hwm() -> None:
    leader = rows((0, 9), (10, 19), (20, 29), (30, 39))
    assert starts(segments_for_follower(leader, fetch(40), 40)) == [0, 10, 20, 30]
    # The follower has the first two rows.
    assert starts(segments_for_follower(leader, fetch(40, tiered_through=19), 40)) == [20, 30]
    # Its log ends at 30: the row ending at 39 waits (its range is not there).
    assert starts(segments_for_follower(leader, fetch(30, tiered_through=19), 40)) == [20]
    # A row ending at the fetch offset is not wholly in the follower's log.
    assert starts(segments_for_follower(leader, fetch(29, tiered_through=19), 40)) == []
    # The leader's HWM bounds it too (a new leader whose HWM has not caught up).
    assert starts(segments_for_follower(leader, fetch(40), 25)) == [0, 10]
    # Nothing new: an empty answer, so the fetch may park.
    assert segments_for_follower(leader, fetch(40, tiered_through=39), 40) == ()
    # A row the follower's log starts inside is sent (it swaps what it
    # holds); one wholly below its log start is not (it holds none of it).
    assert starts(segments_for_follower(leader, fetch(40, log_start=5), 40)) == [0, 10, 20, 30]
    assert starts(segments_for_follower(leader, fetch(40, log_start=10), 40)) == [10, 20, 30]


def test_at_most_the_max_per_answer_ascending() -> None:
    n = SEGMENT_SWAPS_PER_FETCH_MAX * 2 + 3
    leader = rows(*[(10 * i, 10 * i + 9) for i in range(n)])
    got = segments_for_follower(leader, fetch(10 * n), 10 * n)
    assert starts(got) == [10 * i for i in range(SEGMENT_SWAPS_PER_FETCH_MAX)]
    # The follower catches up over fetches, each from where the last ended.
    through, seen = -1, list[ReplicaSegment]()
    while True:
        got = segments_for_follower(leader, fetch(10 * n, tiered_through=through), 10 * n)
        if not got:
            break
        seen.extend(got)
        through = got[-1].end_offset
    assert [g.start_offset for g in seen] == [r.start_offset for r in leader]
    assert seen[0] == ReplicaSegment(0, 9, 1000, 1, "tiered/0.log")


@given(
    st.lists(st.integers(1, 5), max_size=30),
    st.integers(-1, 120),
    st.integers(0, 130),
    st.integers(0, 130),
    st.integers(-1, 60),
)
def test_the_rule_against_its_definition(sizes: list[int], through: int, offset: int, hwm: int, lso: int) -> None:
    leader, at = [], 0
    for n in sizes:
        leader.append(Segment(at, at + n - 1, n, 1, f"tiered/{at}.log"))
        at += n + (n % 2)  # gaps now and then (a compacted log)
    want = [r for r in leader if r.start_offset > through and r.end_offset >= lso and r.end_offset < min(offset, hwm)][
        :SEGMENT_SWAPS_PER_FETCH_MAX
    ]
    got = segments_for_follower(leader, fetch(offset, through, lso), hwm)
    assert starts(got) == [r.start_offset for r in want]


# ------------------------------------------------ the follower's store swap


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[tuple[MetadataStore, MetadataStore, MetadataStore]]:
    clock = Clock(T0)
    with (
        open_store(tmp_path / "leader", clock) as leader,
        open_store(tmp_path / "early", clock, auto_high_watermark=False) as early,
        open_store(tmp_path / "late", clock, auto_high_watermark=False) as late,
    ):
        yield leader, early, late
        for s in (leader, early, late):
            assert s.check() == []


def segment_of(store: MetadataStore, tp: TopicIdPartition, start: int, end: int) -> SegmentSwap:
    """The swap of the leader's batches ``[start, end]`` to a new segment key."""
    size, last = 0, start - 1
    for e in store.read_log(tp, start, BIG).entries:
        if last >= end:
            break
        h = BatchHeader.parse(e.header)
        size, last = size + e.size, h.base_offset + h.last_offset_delta
    assert last == end
    return SegmentSwap(tp, start, end, f"tiered/{uuid.uuid4().hex}.log", size, uploader=1)


def placement(store: MetadataStore, tp: TopicIdPartition) -> list[tuple[str, int, int]]:
    [r] = store.find_batches([FindBatchRequest(tp, store.log_start_offset(tp), BIG)], BIG)
    return [(b.object_key, b.metadata.byte_offset, b.metadata.byte_size) for b in r.batches]


def test_early_late_and_mixed_followers_end_like_the_leader(
    stores: tuple[MetadataStore, MetadataStore, MetadataStore],
) -> None:
    leader, early, late = stores
    [tp] = topic([leader, early, late])
    for _ in range(6):
        commit1(leader, tp, plain(records=2))
    replicate(leader, early, tp)  # early holds 0..11, naming the WAL objects
    replicate(leader, late, tp, rounds=1, max_bytes=1)  # late holds 0..1 only (one batch)
    assert late.log_end_offset(tp) == 2
    wal = {key for key, _, _ in placement(leader, tp)[:5]}
    first_wal = placement(late, tp)[0][0]
    swap = segment_of(leader, tp, 0, 9)  # five batches: early has them all, late one
    assert leader.swap_to_segment(swap).error == Errors.NONE
    assert leader.referenced_files(wal) == set()  # the leader let go of them
    replicate(leader, late, tp)  # 2..11: the next four name the segment already
    assert early.log_end_offset(tp) == late.log_end_offset(tp) == 12
    # Until each follower swaps, it still references the WAL objects its
    # entries name (walmgr, asking the ISR, keeps them).
    assert early.referenced_files(wal) == wal
    assert late.referenced_files(wal) == {first_wal}
    assert swap.object_key in late.file_usage() and swap.object_key not in early.file_usage()
    for follower, moved in ((early, 5), (late, 1)):
        got = follower.swap_to_segment(swap, replicated=True)
        assert (got.error, got.moved) == (Errors.NONE, moved), got
        again = follower.swap_to_segment(swap, replicated=True)
        assert (again.error, again.moved) == (Errors.NONE, 0)  # a repeat
        assert follower.segments(tp) == leader.segments(tp)
        assert placement(follower, tp) == placement(leader, tp)
        assert follower.file_usage() == leader.file_usage()
        assert follower.referenced_files(wal) == set()


def swapped_then_replicated(
    leader: MetadataStore, follower: MetadataStore, batches: int, end: int
) -> tuple[TopicIdPartition, SegmentSwap]:
    """A topic on both stores, ``batches`` one-record batches committed on the
    leader, ``[0, end]`` swapped there, then the whole log replicated."""
    [tp] = topic([leader, follower])
    for _ in range(batches):
        commit1(leader, tp, plain())
    swap = segment_of(leader, tp, 0, end)
    assert leader.swap_to_segment(swap).error == Errors.NONE
    replicate(leader, follower, tp)
    return tp, swap


def test_a_follower_whose_entries_all_name_the_segment_records_the_row(
    stores: tuple[MetadataStore, MetadataStore, MetadataStore],
) -> None:
    leader, _, late = stores
    tp, swap = swapped_then_replicated(leader, late, 3, 2)
    usage = late.file_usage()
    assert late.segments(tp) == []
    assert placement(late, tp) == placement(leader, tp)
    got = late.swap_to_segment(swap, replicated=True)
    assert (got.error, got.moved) == (Errors.NONE, 0)
    assert late.segments(tp) == leader.segments(tp)
    assert late.file_usage() == usage == leader.file_usage()


def test_a_follower_whose_log_starts_inside_the_range_swaps_what_it_holds(
    stores: tuple[MetadataStore, MetadataStore, MetadataStore],
) -> None:
    """The leader swapped [0, 3] and then its log start moved to 2 (retention),
    and so did the follower's before it got the row: it swaps batches 2 and
    3, their positions counted back from the segment's end."""
    leader, follower, _ = stores
    [tp] = topic([leader, follower])
    for _ in range(5):
        commit1(leader, tp, plain())
    replicate(leader, follower, tp)
    wal = {key for key, _, _ in placement(leader, tp)[2:4]}
    swap = segment_of(leader, tp, 0, 3)
    assert leader.swap_to_segment(swap).error == Errors.NONE
    for s in (leader, follower):
        [deleted] = s.delete_records([DeleteRecordsRequest(tp, 2)])
        assert deleted.errors == Errors.NONE
    assert follower.referenced_files(wal) == wal
    got = follower.swap_to_segment(swap, replicated=True)
    assert (got.error, got.moved) == (Errors.NONE, 2), got
    assert follower.segments(tp) == leader.segments(tp) == [Segment(0, 3, swap.size, 1, swap.object_key)]
    assert placement(follower, tp) == placement(leader, tp)
    assert follower.file_usage() == leader.file_usage()
    assert follower.referenced_files(wal) == set()
    # The sizes must still fit: the held batches cannot fill the segment.
    assert follower.delete_records([DeleteRecordsRequest(tp, 4)])[0].errors == Errors.NONE
    assert leader.delete_records([DeleteRecordsRequest(tp, 4)])[0].errors == Errors.NONE
    later = segment_of(leader, tp, 4, 4)
    for bad in (SegmentSwap(tp, 3, 4, later.object_key, later.size, 1), SegmentSwap(tp, 3, 4, "k", 7, 1)):
        assert follower.swap_to_segment(bad, replicated=True).error == Errors.INVALID_REQUEST, bad
    # Not the leader's own swap: below its log start it is out of range.
    assert leader.swap_to_segment(SegmentSwap(tp, 3, 4, "k", later.size + 1, 1)).error == Errors.OFFSET_OUT_OF_RANGE


def test_a_key_named_elsewhere_or_at_other_positions_is_refused(
    stores: tuple[MetadataStore, MetadataStore, MetadataStore],
) -> None:
    leader, early, _ = stores
    tp, swap = swapped_then_replicated(leader, early, 4, 1)
    usage = early.file_usage()
    # The key is the segment of [0, 1]: a row naming it for [2, 3] (its
    # entries elsewhere, positions off), or with another size, changes nothing.
    other = segment_of(leader, tp, 2, 3)
    for bad in (
        SegmentSwap(tp, 2, 3, swap.object_key, other.size, 1),
        SegmentSwap(tp, 0, 1, swap.object_key, swap.size + 1, 1),
        SegmentSwap(tp, 0, 3, swap.object_key, swap.size + other.size, 1),
    ):
        got = early.swap_to_segment(bad, replicated=True)
        assert got.error == Errors.INVALID_REQUEST, (bad, got)
    # A leader's own swap never accepts a key in use.
    assert leader.swap_to_segment(SegmentSwap(tp, 2, 3, swap.object_key, other.size, 1)).error == (
        Errors.INVALID_REQUEST
    )
    assert early.file_usage() == usage and early.segments(tp) == []


# ------------------------------------------------------- the follower's apply


def fetchers_of(store: MetadataStore, following: dict[TopicIdPartition, FollowedPartition]) -> ReplicaFetchers:
    async def no_client(_broker_id: int) -> Any:
        raise AssertionError("no fetch is sent here")

    async def no_drop(_broker_id: int) -> None:
        return None

    return ReplicaFetchers(
        2,
        store,
        ReplicationConfig(),
        ReplicationStats(),
        following,
        asyncio.Lock(),
        client=no_client,
        drop_client=no_drop,
        on_data=lambda: None,
        metadata_changed=asyncio.Event,
        monotonic=time.monotonic,
    )


def test_the_follower_swaps_before_its_log_start_moves_into_the_row(
    stores: tuple[MetadataStore, MetadataStore, MetadataStore],
) -> None:
    """The answer that brings a row may also bring a log start inside the
    row's range (retention on the leader): the swap comes first, while the
    whole range is in the follower's log."""
    leader, follower, _ = stores
    [tp] = topic([leader, follower])
    for _ in range(4):
        commit1(leader, tp, plain())
    replicate(leader, follower, tp)
    swap = segment_of(leader, tp, 0, 2)
    assert leader.swap_to_segment(swap).error == Errors.NONE
    [deleted] = leader.delete_records([DeleteRecordsRequest(tp, 2)])
    assert deleted.errors == Errors.NONE
    followed = {tp: FollowedPartition(LEADER, 0)}
    fetchers = fetchers_of(follower, followed)
    [p] = fetchers._fetch_request(followed)
    assert p.tiered_through == -1 == followed[tp].tiered_through and p.fetch_offset == 4
    rows = segments_for_follower(leader.segments(tp), p, leader.high_watermark(tp))
    assert starts(rows) == [0]
    answer = ReplicaFetchResult(Errors.NONE, 4, 2, 4, segments=rows)
    assert fetchers._apply_fetch([(p, answer, followed[tp])]) == (False, False)
    assert follower.log_start_offset(tp) == 2
    assert follower.segments(tp) == leader.segments(tp)
    assert placement(follower, tp) == placement(leader, tp)
    assert followed[tp].tiered_through == 2 and fetchers.stats.segment_swaps_applied == 1
    # The same row again (a stale answer) is skipped; one the store refuses
    # is counted, and passed (asking again would bring it back at once).
    assert fetchers._apply_fetch([(p, answer, followed[tp])]) == (False, False)
    bad = ReplicaSegment(3, 3, 1, 1, swap.object_key)
    fetchers._apply_fetch([(p, ReplicaFetchResult(Errors.NONE, 4, 2, 4, segments=(bad,)), followed[tp])])
    assert fetchers.stats.segment_swaps_applied == 1 and fetchers.stats.segment_swaps_failed == 1
    assert followed[tp].tiered_through == 3
    # A truncation forgets it: the next fetch reads it from the store again.
    follower.truncate_to(tp, 3)
    fetchers._apply_fetch([(p, ReplicaFetchResult(Errors.OFFSET_OUT_OF_RANGE, -1, 2, 3), followed[tp])])
    assert followed[tp].tiered_through is None
    [p] = fetchers._fetch_request(followed)
    assert p.tiered_through == 2 == followed[tp].tiered_through
