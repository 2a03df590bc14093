"""plan_local_copies: which tiered segments a replica keeps on its disk
(KIP-1163's last N bytes per partition), against its contract."""

from __future__ import annotations

import uuid

from hypothesis import given
from hypothesis import strategies as st

from partlog.fetch.local_copies import LocalCopy, plan_local_copies
from partlog.kafka.records import TopicIdPartition

TID = uuid.UUID(int=7)


def _rows(sizes: list[list[int]]) -> dict[TopicIdPartition, list[tuple[str, int]]]:
    return {TopicIdPartition(TID, p): [(f"p{p}-s{i}", n) for i, n in enumerate(ss)] for p, ss in enumerate(sizes)}


@given(
    sizes=st.lists(st.lists(st.integers(1, 100), max_size=8), max_size=5),
    held_keys=st.sets(st.tuples(st.integers(0, 6), st.integers(0, 9)), max_size=10),
    partition_max=st.integers(0, 300),
    total_max=st.integers(0, 600),
    fetch_max=st.integers(0, 300),
)
def test_the_plan_keeps_each_partitions_newest_within_both_bounds(
    sizes: list[list[int]], held_keys: set[tuple[int, int]], partition_max: int, total_max: int, fetch_max: int
) -> None:
    rows = _rows(sizes)
    held = {f"p{p}-s{i}": LocalCopy(TopicIdPartition(TID, p), f"p{p}-s{i}", 1) for p, i in held_keys}
    plan = plan_local_copies(
        rows, held, partition_bytes_max=partition_max, total_bytes_max=total_max, fetch_bytes_max=fetch_max
    )
    size_of = {k: n for segs in rows.values() for k, n in segs}
    kept = (set(held) - set(plan.delete)) | {c.key for c in plan.fetch}
    # Deleted: held keys only; fetched: keys not held, of the rows, at their sizes.
    assert set(plan.delete) <= set(held)
    assert all(c.key not in held and size_of[c.key] == c.size for c in plan.fetch)
    # Downloads per plan bounded (at least one when any is wanted).
    assert len(plan.fetch) <= 1 or sum(c.size for c in plan.fetch) <= fetch_max
    # What is kept or fetched is, per partition, within the newest segments
    # that fit its share, and all of it within the total.
    wanted = kept & set(size_of)
    assert sum(size_of[k] for k in wanted) <= total_max
    for segs in rows.values():
        fits, used = set(), 0
        for k, n in reversed(segs):
            if used + n > partition_max:
                break
            fits.add(k)
            used += n
        assert {k for k, _ in segs if k in wanted} <= fits
    # Held keys that are no rows' any more (retention, another partition) go.
    assert all(k in plan.delete for k in held if k not in size_of)


def test_ranks_share_the_total_between_partitions() -> None:
    rows = _rows([[10, 10, 10], [10, 10, 10]])
    plan = plan_local_copies(rows, {}, partition_bytes_max=30, total_bytes_max=40, fetch_bytes_max=1000)
    assert [c.key for c in plan.fetch] == ["p0-s2", "p1-s2", "p0-s1", "p1-s1"]
    # A segment larger than a partition's share is never held, nor any older one.
    plan = plan_local_copies(_rows([[5, 50, 5]]), {}, partition_bytes_max=20, total_bytes_max=100, fetch_bytes_max=100)
    assert [c.key for c in plan.fetch] == ["p0-s2"]
    # Off: everything held goes.
    held = {"p0-s2": LocalCopy(TopicIdPartition(TID, 0), "p0-s2", 5)}
    plan = plan_local_copies(_rows([[5, 50, 5]]), held, partition_bytes_max=0, total_bytes_max=0, fetch_bytes_max=100)
    assert plan.fetch == () and plan.delete == ("p0-s2",)
