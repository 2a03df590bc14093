"""A follower's fetch items: an unchanged partition sends its last item
again without reading its newest epoch from LMDB, and every item equals the
one a build from scratch makes (ReplicaFetchers._fetch_request).

The reference is the same build with the kept items dropped: any write,
HWM move, epoch change or follower field the kept item does not see makes
the two differ.  Found while writing it: a truncation at the log end drops
an empty epoch the replica started as leader, and wrote no new partition
version, so a kept item would name that epoch forever (the leader answers
a divergence, the follower truncates again, nothing changes).
"""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from partlog.kafka.records import TopicIdPartition
from partlog.replication.fetcher import ReplicaFetchers
from partlog.replication.partition import FollowedPartition
from partlog.rpc.wire import ReplicaFetchPartition
from partlog.store import MetadataStore
from tests.clock import Clock
from tests.unit.test_replica_segments import fetchers_of
from tests.unit.test_store_replication import T0, commit1, open_store, plain, topic

LEADER = 1


def _fresh(
    fetchers: ReplicaFetchers, followed: dict[TopicIdPartition, FollowedPartition]
) -> list[ReplicaFetchPartition]:
    """The items a build from scratch makes (copies: the kept ones stay)."""
    return fetchers._fetch_request({tp: dataclasses.replace(f, built=None) for tp, f in followed.items()})


def _counting_epoch_reads(store: MetadataStore, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    reads: list[int] = []
    real = store.latest_leader_epochs

    def counted(tps: Any) -> list[int]:
        reads.append(len(tps))
        return real(tps)

    monkeypatch.setattr(store, "latest_leader_epochs", counted)
    return reads


def test_an_unchanged_partition_sends_its_last_item_without_reading_its_epoch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with open_store(tmp_path / "s", Clock(T0)) as store:
        a, b = topic([store], partitions=2)
        followed = {a: FollowedPartition(LEADER, 0), b: FollowedPartition(LEADER, 0)}
        fetchers = fetchers_of(store, followed)
        reads = _counting_epoch_reads(store, monkeypatch)
        first = fetchers._fetch_request(followed)
        assert reads == [2]
        again = fetchers._fetch_request(followed)
        assert reads == [2] and all(x is y for x, y in zip(first, again, strict=True))
        commit1(store, a, plain())
        moved = fetchers._fetch_request(followed)
        assert reads == [2, 1], "only the partition written is read again"
        assert moved[0].fetch_offset == 1 and moved[1] is first[1]


def test_a_truncation_at_the_log_end_that_drops_an_empty_epoch_is_seen(tmp_path: Path) -> None:
    with open_store(tmp_path / "s", Clock(T0)) as store:
        [tp] = topic([store])
        commit1(store, tp, plain())
        followed = {tp: FollowedPartition(LEADER, 0)}
        fetchers = fetchers_of(store, followed)
        store.set_leader_epoch(tp, 3)  # led once, wrote nothing
        assert fetchers._fetch_request(followed)[0].last_fetched_epoch == 3
        store.truncate_to(tp, store.log_end_offset(tp))  # the new leader's divergence answer
        [item] = fetchers._fetch_request(followed)
        assert item.last_fetched_epoch == 0 and [item] == _fresh(fetchers, followed)


_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("commit"), st.integers(0, 1), st.integers(1, 3)),
        st.tuples(st.just("hwm"), st.integers(0, 1), st.integers(0, 8)),
        st.tuples(st.just("epoch"), st.integers(0, 1), st.integers(0, 3)),
        st.tuples(st.just("truncate"), st.integers(0, 1), st.integers(0, 8)),
        st.tuples(st.just("truncate_at_end"), st.integers(0, 1), st.just(0)),
        st.tuples(st.just("leader_epoch"), st.integers(0, 1), st.integers(0, 3)),
        st.tuples(st.just("tiered"), st.integers(0, 1), st.sampled_from([None, -1, 0, 2])),
        st.tuples(st.just("build"), st.just(0), st.just(0)),
    ),
    max_size=25,
)


@settings(max_examples=60, deadline=None)
@given(ops=_OPS)
def test_every_item_is_the_one_a_build_from_scratch_makes(ops: list[tuple[str, int, Any]]) -> None:
    with (
        tempfile.TemporaryDirectory() as tmp,
        open_store(Path(tmp) / "s", Clock(T0), auto_high_watermark=False) as store,
    ):
        tps = topic([store], partitions=2)
        followed = {tp: FollowedPartition(LEADER, 0) for tp in tps}
        fetchers = fetchers_of(store, followed)
        leader_epochs = [0, 0]
        for op, i, v in ops:
            tp = tps[i]
            if op == "commit":
                for _ in range(v):
                    commit1(store, tp, plain())
            elif op == "hwm":
                store.set_high_watermark(tp, v)
            elif op == "epoch" and v >= leader_epochs[i]:
                leader_epochs[i] = v
                store.set_leader_epoch(tp, v)
            elif op == "truncate":
                leo = store.log_end_offset(tp)
                if v <= leo and v >= store.log_start_offset(tp):
                    store.truncate_to(tp, v)
            elif op == "truncate_at_end":
                store.truncate_to(tp, store.log_end_offset(tp))
            elif op == "leader_epoch":
                followed[tp].leader_epoch = v
            elif op == "tiered":
                followed[tp].tiered_through = v
            assert fetchers._fetch_request(followed) == _fresh(fetchers, followed), (op, i, v)
