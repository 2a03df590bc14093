"""Sparse replica fetch answers (partlog/rpc/replica_rows.py).

1. What a leader leaves out changes nothing: for every answer
   ``quiet_noop`` calls quiet, the follower's real apply
   (``ReplicaFetchers._apply_fetch``, on a real store) moves neither its
   log, HWM nor log start, nor its rows-check window.
2. ``rows_of`` fails closed: any value decodes to valid indices or raises
   WireError; a sparse answer round-trips to the rows it kept.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from partlog.kafka.errors import Errors
from partlog.kafka.records import DeleteRecordsRequest, TopicIdPartition
from partlog.replication.partition import FollowedPartition, quiet_noop
from partlog.rpc.replica_rows import ROWS_OF, dec_rows_of, enc_sparse_response
from partlog.rpc.wire import NO_DIVERGENCE, ReplicaFetchResult, WireError, dec_replica_fetch_response
from partlog.store import MetadataStore
from tests.clock import Clock
from tests.unit.test_replica_segments import fetchers_of
from tests.unit.test_store_replication import T0, commit1, open_store, plain, topic

LEADER = 1


@pytest.fixture(scope="module")
def follower(tmp_path_factory: pytest.TempPathFactory) -> tuple[MetadataStore, TopicIdPartition]:
    """A follower holding 6 entries, log start 2, HWM 3 (the leader's is 6)."""
    tmp = tmp_path_factory.mktemp("sparse")
    clock = Clock(T0)
    leader = open_store(tmp / "leader", clock)
    store = open_store(tmp / "follower", clock, auto_high_watermark=False)
    [tp] = topic([leader, store])
    for _ in range(6):
        commit1(leader, tp, plain())
    read = leader.read_log(tp, 0, 1 << 20)
    store.append_replicated(tp, read.entries, leader_high_watermark=3, leader_log_start_offset=0)
    store.delete_records([DeleteRecordsRequest(tp, 2)])
    leader.close()
    return store, tp


def _state(store: MetadataStore, tp: TopicIdPartition, f: FollowedPartition) -> tuple[Any, ...]:
    s = store.partition_state(tp)
    return (s["log_start_offset"], s["log_end_offset"], store.high_watermark(tp), f.tiered_through, f.checked_through)


_OFFSETS = st.sampled_from([-1, 0, 1, 2, 3, 4, 5, 6, 7, 100])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    error=st.sampled_from([Errors.NONE, Errors.NONE, Errors.NOT_LEADER_OR_FOLLOWER, Errors.OFFSET_OUT_OF_RANGE]),
    hwm=_OFFSETS,
    lso=_OFFSETS,
    leo=_OFFSETS,
    diverging=st.sampled_from([NO_DIVERGENCE, NO_DIVERGENCE, 0, 1]),
)
def test_an_answer_left_out_changes_nothing(
    follower: tuple[MetadataStore, TopicIdPartition], error: Errors, hwm: int, lso: int, leo: int, diverging: int
) -> None:
    store, tp = follower
    f = FollowedPartition(LEADER, 0)
    fetchers = fetchers_of(store, {tp: f})
    [p] = fetchers._fetch_request({tp: f})
    # The follower's own positions half the time, so quiet answers are common.
    r = ReplicaFetchResult(
        error,
        p.high_watermark if hwm == 100 else hwm,
        p.log_start_offset if lso == 100 else lso,
        p.fetch_offset if leo == 100 else leo,
        diverging,
        3 if diverging != NO_DIVERGENCE else -1,
    )
    if not quiet_noop(p, r):
        return
    before = _state(store, tp, f)
    moved, stale = fetchers._apply_fetch([(p, r, f)])
    assert (moved, stale) == (False, False)
    assert _state(store, tp, f) == before


def test_the_follower_asks_with_its_own_positions(follower: tuple[MetadataStore, TopicIdPartition]) -> None:
    """The premise of the property above: the request names the follower's
    log end, HWM and log start, so a quiet answer equals them."""
    store, tp = follower
    f = FollowedPartition(LEADER, 0)
    [p] = fetchers_of(store, {tp: f})._fetch_request({tp: f})
    assert (p.fetch_offset, p.high_watermark, p.log_start_offset) == (6, 3, 2)
    quiet = ReplicaFetchResult(Errors.NONE, 3, 2, 6)
    assert quiet_noop(p, quiet)
    assert not quiet_noop(p, quiet._replace(high_watermark=4))
    assert not quiet_noop(p._replace(high_watermark=-1), quiet)


_RESULTS = st.lists(
    st.builds(
        lambda *fields: ReplicaFetchResult(*fields),
        st.sampled_from([Errors.NONE, Errors.NOT_LEADER_OR_FOLLOWER]),
        st.integers(-1, 1 << 40),
        st.integers(-1, 1 << 40),
        st.integers(-1, 1 << 40),
    ),
    max_size=20,
)


@given(_RESULTS, st.data())
def test_a_sparse_answer_round_trips(results: list[ReplicaFetchResult], data: st.DataObject) -> None:
    kept = sorted(data.draw(st.sets(st.integers(0, max(0, len(results) - 1)), max_size=len(results))))
    kept = [i for i in kept if i < len(results)]
    body = enc_sparse_response(results, kept)
    rows_of = dec_rows_of(body, len(results))
    assert rows_of == kept
    assert dec_replica_fetch_response(body, len(kept)) == [results[i] for i in kept]


@given(st.integers(0, 10), st.one_of(st.none(), st.integers(), st.text(max_size=3), st.lists(st.one_of(
    st.integers(-3, 12), st.booleans(), st.floats(), st.text(max_size=2)), max_size=12)))  # fmt: skip
def test_rows_of_fails_closed(n: int, value: Any) -> None:
    body: dict[str, Any] = {"keys": [], "partitions": []}
    if value is not None:
        body[ROWS_OF] = value
    valid = value is None or (
        type(value) is list
        and len(value) <= n
        and all(type(i) is int and 0 <= i < n for i in value)
        and all(a < b for a, b in itertools.pairwise(value))
    )
    try:
        got = dec_rows_of(body, n)
    except WireError:
        assert not valid
    else:
        assert valid and got == value
