"""Replica fetch sessions (partlog/replication/sessions.py), both sides,
against the model: whatever the follower's partitions do between fetches,
and whatever is lost on the way (a request or an answer, a leader restart,
an eviction), after every fetch the leader serves exactly the follower's
current items, in the order the follower maps the answer's rows by; a
fetch the follower could not match resets, and the next one is full."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from partlog.kafka.records import TopicIdPartition
from partlog.replication.sessions import FollowerSession, ReplicaFetchSessions
from partlog.replication.stats import ReplicationStats
from partlog.rpc.wire import ReplicaFetchPartition

TOPIC = uuid.UUID(int=7)
REPLICA = 2


def _served(
    got: tuple[list[ReplicaFetchPartition], int] | str,
) -> tuple[list[ReplicaFetchPartition], int]:
    assert not isinstance(got, str), got
    return got


def _item(partition: int, offset: int) -> ReplicaFetchPartition:
    return ReplicaFetchPartition(TopicIdPartition(TOPIC, partition), 0, offset, 0, offset, 0)


# Each step: the follower's partitions and their offsets now, and what goes
# wrong with this fetch.
_STEPS = st.lists(
    st.tuples(
        st.dictionaries(st.integers(0, 7), st.integers(0, 3), max_size=6),
        st.sampled_from(["ok"] * 6 + ["request_lost", "answer_lost", "leader_restart", "evicted", "repeat"]),
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=300)
@given(_STEPS, st.integers(0, 1 << 40))
def test_the_leader_serves_what_the_follower_holds(steps: list[tuple[dict[int, int], str]], first_id: int) -> None:
    stats = ReplicationStats()
    leader = ReplicaFetchSessions(first_id, stats)
    follower = FollowerSession()
    now = 0
    last_request: tuple[int, int, list[ReplicaFetchPartition], list[TopicIdPartition]] | None = None
    for offsets, fault in steps:
        now += 500  # a parked fetch's wait
        parts = [_item(p, o) for p, o in offsets.items()]
        items, sid, epoch, forgotten = follower.request(parts)
        if sid == 0:
            assert items == parts and epoch == 0 and forgotten == []
        if fault == "request_lost":
            follower.reset()  # the follower sees an error: no answer
            continue
        if fault == "leader_restart":
            leader = ReplicaFetchSessions(first_id + 1, stats)
        if fault == "evicted":
            # The follower was away long enough; as many others opened sessions.
            now += leader.evictable_idle_ms
            for other in range(100, 100 + leader.sessions_max):
                leader.resolve(other, 0, 0, [], [], now)
        if fault == "repeat" and last_request is not None:
            # An old request arrives again (a retry of a lost one): the
            # leader refuses it unless it is the session's next epoch.
            got = leader.resolve(REPLICA, *last_request[:2], last_request[2], last_request[3], now)
            if isinstance(got, str):
                follower.reset()
                continue
        last_request = (sid, epoch, items, forgotten)
        got = leader.resolve(REPLICA, sid, epoch, items, forgotten, now)
        if fault == "answer_lost":
            follower.reset()
            continue
        if isinstance(got, str):
            assert sid != 0, "a full request is never refused"
            follower.reset()
            continue
        served, got_sid = got
        order = follower.answered(parts, items, forgotten, got_sid, len(served))
        if order is None:
            assert fault != "ok", "nothing went wrong, yet the two copies disagree"
            continue  # reset: the next fetch is full
        assert order == served, "the rows map to the partitions the leader served"
        assert {p.topic_id_partition: p for p in served} == {p.topic_id_partition: p for p in parts}, (
            "the leader serves the follower's items"
        )
        assert leader.items == sum(len(x.items) for x in leader._by_replica.values())


def test_incremental_fetches_send_only_what_changed() -> None:
    stats = ReplicationStats()
    leader = ReplicaFetchSessions(5, stats)
    follower = FollowerSession()
    parts = [_item(p, 10) for p in range(4)]
    items, sid, epoch, forgotten = follower.request(parts)
    served, got_sid = _served(leader.resolve(REPLICA, sid, epoch, items, forgotten, 0))
    assert follower.answered(parts, items, forgotten, got_sid, len(served)) == parts
    parts = [_item(0, 10), _item(1, 11), _item(3, 10), _item(4, 0)]  # 1 moved, 2 gone, 4 new
    items, sid, epoch, forgotten = follower.request(parts)
    assert (items, sid, epoch) == ([_item(1, 11), _item(4, 0)], got_sid, 1)
    assert forgotten == [TopicIdPartition(TOPIC, 2)]
    served, _ = _served(leader.resolve(REPLICA, sid, epoch, items, forgotten, 0))
    assert follower.answered(parts, items, forgotten, got_sid, len(served)) == served
    assert (stats.replica_fetches_incremental, stats.replica_items_not_sent) == (1, 2)


@pytest.mark.parametrize(
    ("session_id", "epoch", "why"), [(0, 1, "invalid"), (12345, 1, "unknown"), ("known", 3, "epoch")]
)
def test_a_session_refused_is_gone(session_id: int | str, epoch: int, why: str) -> None:
    stats = ReplicationStats()
    leader = ReplicaFetchSessions(0, stats)
    _, sid = _served(leader.resolve(REPLICA, 0, 0, [_item(0, 1)], [], 0))
    asked = sid if isinstance(session_id, str) else session_id
    assert leader.resolve(REPLICA, asked, epoch, [], [], 0) == why
    # Refused, the session is gone: even its next epoch is unknown now.
    assert leader.resolve(REPLICA, sid, 1, [], [], 0) == "unknown"
    assert stats.replica_sessions_refused == 2 and len(leader) == leader.items == 0


def test_a_full_fetch_past_the_bounds_is_served_without_a_session() -> None:
    """Regression: a follower of more partitions than a session may hold
    had its full fetch refused, reset, and was refused again for ever."""
    stats = ReplicationStats()
    leader = ReplicaFetchSessions(0, stats, items_max=3)
    parts = [_item(p, 0) for p in range(4)]
    assert leader.resolve(REPLICA, 0, 0, parts, [], 0) == (parts, 0)
    follower = FollowerSession()
    items, sid, epoch, forgotten = follower.request(parts)
    served, got_sid = _served(leader.resolve(REPLICA, sid, epoch, items, forgotten, 0))
    assert follower.answered(parts, items, forgotten, got_sid, len(served)) == parts
    assert follower.request(parts) == (parts, 0, 0, [])  # full again, never refused
    assert stats.replica_fetches_sessionless == 2 and stats.replica_sessions_refused == 0
    # A session that grows past the bounds is refused; the follower's next
    # fetch is full, and served without a session.
    _, sid = _served(leader.resolve(REPLICA, 0, 0, parts[:3], [], 0))
    assert sid and leader.items == 3
    assert leader.resolve(REPLICA, sid, 1, [parts[3]], [], 0) == "invalid"
    assert len(leader) == leader.items == 0


def test_only_idle_sessions_make_room() -> None:
    """Past the bounds, a new session evicts the least recently used one
    only if it is idle; followers that all fetch are served, some without a
    session, instead of evicting each other in turn."""
    stats = ReplicationStats()
    leader = ReplicaFetchSessions(0, stats, sessions_max=2, items_max=10, evictable_idle_ms=1_000)
    sids = {r: _served(leader.resolve(r, 0, 0, [_item(r, 0)], [], 0))[1] for r in (3, 4)}
    assert all(sids.values()) and len(leader) == 2
    assert leader.resolve(5, 0, 0, [_item(5, 0)], [], 999) == ([_item(5, 0)], 0)  # both busy
    assert _served(leader.resolve(4, sids[4], 1, [], [], 1_500))[1] == sids[4]  # 4 fetches again
    _, sid5 = _served(leader.resolve(5, 0, 0, [_item(5, 0)], [], 1_500))
    assert sid5 and stats.replica_sessions_evicted == 1
    assert leader.resolve(3, sids[3], 1, [], [], 1_500) == "unknown"  # 3, idle, was evicted
    # Items count too: a session of 10 needs the room of both others.
    assert leader.resolve(6, 0, 0, [_item(p, 0) for p in range(10)], [], 1_600)[1] == 0
    _, sid6 = _served(leader.resolve(6, 0, 0, [_item(p, 0) for p in range(10)], [], 5_000))
    assert sid6 and len(leader) == 1 and leader.items == 10


def test_bounds_must_be_positive() -> None:
    with pytest.raises(ValueError, match="must be positive"):
        ReplicaFetchSessions(0, ReplicationStats(), items_max=0)
