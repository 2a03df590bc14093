"""Leader-epoch end offsets and log divergence, against a brute-force model
of two logs (each offset tagged with the epoch that wrote it)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from partlog.kafka.leader_epochs import (
    UNDEFINED_EPOCH,
    EpochEndOffset,
    diverging_epoch,
    end_offset_for_epoch,
    truncation_offset,
)

CACHE = [(1, 0), (3, 10), (4, 25)]


def test_end_offset_for_epoch_cases() -> None:
    assert end_offset_for_epoch(CACHE, 4, 40) == EpochEndOffset(4, 40)  # latest: the log end
    assert end_offset_for_epoch(CACHE, 3, 40) == EpochEndOffset(3, 25)
    assert end_offset_for_epoch(CACHE, 2, 40) == EpochEndOffset(1, 10)  # unknown: the floor epoch
    assert end_offset_for_epoch(CACHE, 0, 40) == EpochEndOffset(0, 0)  # older than the cache
    assert end_offset_for_epoch(CACHE, 9, 40) == EpochEndOffset(-1, -1)
    assert end_offset_for_epoch(CACHE, UNDEFINED_EPOCH, 40) == EpochEndOffset(-1, -1)
    assert end_offset_for_epoch([], 1, 0) == EpochEndOffset(-1, -1)


def _cache(log: list[int]) -> list[tuple[int, int]]:
    """(epoch, start offset) of a log given as the epoch of each offset."""
    out: list[tuple[int, int]] = []
    for off, e in enumerate(log):
        if not out or out[-1][0] != e:
            out.append((e, off))
    return out


@st.composite
def two_logs(draw: st.DrawFn) -> tuple[list[int], list[int]]:
    """A leader's log and a follower's that could both exist: a common prefix,
    then each its own suffix.  One epoch has one leader, so the suffixes use
    disjoint epochs above the prefix's last one (odd ones for the follower,
    even ones for the leader); at most one of them continues the prefix's last
    epoch (the other replica missed those entries); the leader's last epoch is
    the newest."""
    common = sorted(draw(st.lists(st.integers(0, 4), max_size=8)))
    top = common[-1] if common else 0
    follower_continues = draw(st.booleans())
    f_epochs = [top + 1, top + 3] + ([top] if follower_continues else [])
    l_epochs = [top + 2, top + 4] + ([] if follower_continues else [top])
    follower_tail = sorted(draw(st.lists(st.sampled_from(f_epochs), max_size=5)))
    leader_tail = sorted(draw(st.lists(st.sampled_from(l_epochs), max_size=5)))
    leader = common + leader_tail + [top + 5] * draw(st.integers(0, 3))
    follower = common + follower_tail
    return leader, follower


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


@settings(max_examples=400)
@given(logs=two_logs(), hwm_frac=st.floats(0, 1))
def test_divergence_never_keeps_a_divergent_entry(logs: tuple[list[int], list[int]], hwm_frac: float) -> None:
    """Repeating fetch / truncate, the follower ends with a prefix of the
    leader's log and never cuts below the entries both logs share in an
    epoch the follower knows (Kafka's guarantee: no acknowledged entry lost
    when the follower's committed prefix is the leader's)."""
    leader, follower = logs
    common = _common_prefix(leader, follower)
    follower_hwm = int(common * hwm_frac)  # a follower's HWM never passes what it shares with the leader
    for _ in range(10):
        last_epoch = follower[-1] if follower else UNDEFINED_EPOCH
        div = diverging_epoch(_cache(leader), len(leader), len(follower), last_epoch)
        if div is None:
            break
        offset, _final = truncation_offset(_cache(follower), len(follower), follower_hwm, div)
        assert offset >= follower_hwm or offset == len(follower), "cut below the committed prefix"
        follower = follower[:offset]
    # What remains is a prefix of the leader's log: fetching on from its end is safe.
    assert follower == leader[: len(follower)], (leader, follower)
    assert len(follower) >= min(follower_hwm, common)


@given(
    starts=st.lists(st.integers(0, 50), min_size=1, max_size=6, unique=True),
    first=st.integers(0, 5),
    data=st.data(),
)
def test_a_follower_at_the_newest_epoch_never_diverges(starts: list[int], first: int, data: st.DataObject) -> None:
    """The replica fetches' shortcut (partlog.replication.partition): a fetch
    whose last fetched epoch is the cache's newest, at or below the log end,
    never diverges, so the leader reads only that epoch, not the cache."""
    cache = [(first + i * 2, s) for i, s in enumerate(sorted(starts))]
    leo = data.draw(st.integers(cache[-1][1], 60))
    fetch_offset = data.draw(st.integers(0, leo))
    assert diverging_epoch(cache, leo, fetch_offset, cache[-1][0]) is None
