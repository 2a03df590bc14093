"""The KIP-848 consumer-group core's answers, as Kafka's: the error-code
table (codes as Kafka numbers them), each error's case, static members,
timeouts, the assignors and OffsetCommit's member-epoch check."""

from __future__ import annotations

import uuid

import pytest

from partlog.kafka.errors import Errors
from partlog.kafka_front.consumer_assignor import RANGE, UNIFORM, assign
from partlog.kafka_front.consumer_group import (
    ConsumerGroups,
    HeartbeatIn,
    HeartbeatOut,
    MemberState,
)

T = uuid.UUID(int=7)
TOPICS = {"t": (T, 6)}


def join(core: ConsumerGroups, mid: str, now: int = 0, **kw: object) -> HeartbeatOut:
    fields: dict[str, object] = {"subscribed_topic_names": ("t",), "rebalance_timeout_ms": 30_000,
                                 "owned": frozenset(), **kw}  # fmt: skip
    return core.heartbeat(HeartbeatIn("g", mid, 0, **fields), TOPICS, now)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (Errors.UNKNOWN_MEMBER_ID, 25),
        (Errors.INVALID_REQUEST, 42),
        (Errors.GROUP_ID_NOT_FOUND, 69),
        (Errors.GROUP_MAX_SIZE_REACHED, 81),
        (Errors.FENCED_INSTANCE_ID, 82),
        (Errors.FENCED_MEMBER_EPOCH, 110),
        (Errors.UNRELEASED_INSTANCE_ID, 111),
        (Errors.UNSUPPORTED_ASSIGNOR, 112),
        (Errors.STALE_MEMBER_EPOCH, 113),
        (Errors.INCONSISTENT_GROUP_PROTOCOL, 23),
    ],
)
def test_the_error_codes_are_kafkas(error: Errors, code: int) -> None:
    assert int(error) == code


def J(**kw: object) -> HeartbeatIn:
    """A valid join of member m to group g, with ``kw`` changed."""
    fields: dict[str, object] = {"group_id": "g", "member_id": "m", "member_epoch": 0, "rebalance_timeout_ms": 1,
                                 "subscribed_topic_names": ("t",), "owned": frozenset(), **kw}  # fmt: skip
    return HeartbeatIn(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("req", "error", "message"),
    [
        (J(member_id=""), Errors.INVALID_REQUEST, "MemberId can't be empty."),
        (J(group_id=""), Errors.INVALID_REQUEST, "GroupId can't be empty."),
        (J(instance_id=""), Errors.INVALID_REQUEST, "InstanceId can't be empty."),
        (J(rack_id=""), Errors.INVALID_REQUEST, "RackId can't be empty."),
        (J(rebalance_timeout_ms=-1), Errors.INVALID_REQUEST, "RebalanceTimeoutMs must be provided in first request."),
        (J(owned=None), Errors.INVALID_REQUEST, "TopicPartitions must be empty when (re-)joining."),
        (J(owned=frozenset({(T, 0)})), Errors.INVALID_REQUEST, "TopicPartitions must be empty when (re-)joining."),
        (J(subscribed_topic_names=None), Errors.INVALID_REQUEST, "SubscribedTopicNames must be set in first request."),
        (J(subscribed_topic_regex="t.*"), Errors.INVALID_REQUEST, "SubscribedTopicRegex is not supported."),
        (J(member_epoch=-3), Errors.INVALID_REQUEST, "MemberEpoch is invalid."),
        (J(member_epoch=-2), Errors.INVALID_REQUEST, "InstanceId can't be null."),
        (J(server_assignor="sticky"), Errors.UNSUPPORTED_ASSIGNOR, None),
        (J(member_epoch=3), Errors.UNKNOWN_MEMBER_ID, "Group g not found."),  # in memory only
        (J(member_epoch=-1), Errors.UNKNOWN_MEMBER_ID, "Group g not found."),
    ],
)
def test_refused_requests(req: HeartbeatIn, error: Errors, message: str | None) -> None:
    core = ConsumerGroups(new_uuid=uuid.uuid4)
    out = core.heartbeat(req, TOPICS, 0)
    assert out.error == error
    assert message is None or out.message == message
    assert core.group("g") is None


def test_hostile_lists_fail_that_request_only() -> None:
    core = ConsumerGroups(new_uuid=uuid.uuid4)
    out = join(core, "m", subscribed_topic_names=tuple(f"t{i}" for i in range(10_001)))
    assert out.error == Errors.INVALID_REQUEST
    assert join(core, "m").error == Errors.NONE
    many = frozenset((uuid.UUID(int=i), 0) for i in range(100_001))
    assert core.heartbeat(HeartbeatIn("g", "m", 1, owned=many), TOPICS, 0).error == Errors.INVALID_REQUEST
    # Unknown topic ids among the owned partitions are no error.
    odd = frozenset({(uuid.UUID(int=99), 0)})
    assert core.heartbeat(HeartbeatIn("g", "m", 1, owned=odd), TOPICS, 0).error == Errors.NONE


def test_epochs_fencing_and_a_retried_heartbeat() -> None:
    core = ConsumerGroups(new_uuid=uuid.uuid4)
    a = join(core, "a")
    assert (a.error, a.member_epoch, len(a.assignment or ())) == (Errors.NONE, 1, 6)
    full = a.assignment
    assert core.heartbeat(HeartbeatIn("g", "a", 2, owned=full), TOPICS, 0).error == Errors.FENCED_MEMBER_EPOCH
    assert core.heartbeat(HeartbeatIn("g", "b", 1, owned=full), TOPICS, 0).error == Errors.UNKNOWN_MEMBER_ID
    b = join(core, "b")
    assert b.member_epoch == 2 and b.assignment == frozenset()  # a must release first
    # a learns it must revoke three: it keeps epoch 1 until it has.
    a1 = core.heartbeat(HeartbeatIn("g", "a", 1, owned=full), TOPICS, 0)
    assert a1.member_epoch == 1 and a1.assignment is not None and len(a1.assignment) == 3
    g = core.group("g")
    assert g is not None and g.members["a"].state is MemberState.UNREVOKED_PARTITIONS
    assert g.members["b"].state is MemberState.UNRELEASED_PARTITIONS
    a2 = core.heartbeat(HeartbeatIn("g", "a", 1, owned=a1.assignment), TOPICS, 0)
    assert a2.member_epoch == 2
    # A retry of epoch 1 owning only what a keeps is fine; owning more is fenced.
    assert core.heartbeat(HeartbeatIn("g", "a", 1, owned=a1.assignment), TOPICS, 0).error == Errors.NONE
    assert core.heartbeat(HeartbeatIn("g", "a", 1, owned=full), TOPICS, 0).error == Errors.FENCED_MEMBER_EPOCH
    b2 = core.heartbeat(HeartbeatIn("g", "b", 2, owned=frozenset()), TOPICS, 0)
    assert b2.assignment is not None and full is not None and b2.assignment == full - a1.assignment
    assert g.state == "Stable"


def test_the_group_size_is_bounded() -> None:
    core = ConsumerGroups(members_max=2, new_uuid=uuid.uuid4)
    assert join(core, "a").error == join(core, "b").error == Errors.NONE
    assert join(core, "c").error == Errors.GROUP_MAX_SIZE_REACHED


def test_static_members_leave_and_come_back_to_their_assignment() -> None:
    core = ConsumerGroups(new_uuid=uuid.uuid4)
    a = join(core, "a", instance_id="i1")
    assert join(core, "a2", instance_id="i1").error == Errors.UNRELEASED_INSTANCE_ID
    beat = HeartbeatIn("g", "x", 1, instance_id="i1", owned=frozenset())
    assert core.heartbeat(beat, TOPICS, 0).error == Errors.FENCED_INSTANCE_ID
    beat = HeartbeatIn("g", "a", 1, instance_id="i9", owned=frozenset())
    assert core.heartbeat(beat, TOPICS, 0).error == Errors.UNKNOWN_MEMBER_ID
    left = core.heartbeat(HeartbeatIn("g", "a", -2, instance_id="i1"), TOPICS, 0)
    assert (left.error, left.member_epoch) == (Errors.NONE, -2)
    back = join(core, "a2", instance_id="i1")
    assert back.error == Errors.NONE and back.member_epoch == a.member_epoch and back.assignment == a.assignment
    g = core.group("g")
    assert g is not None and set(g.members) == {"a2"} and g.group_epoch == 1
    # Gone for good after its session timeout.
    core.heartbeat(HeartbeatIn("g", "a2", -2, instance_id="i1"), TOPICS, 0)
    core.tick(45_000)
    assert not g.members and g.state == "Empty"


def test_session_and_rebalance_timeouts_remove_members() -> None:
    core = ConsumerGroups(new_uuid=uuid.uuid4)
    a = join(core, "a")
    join(core, "b", now=1_000)
    core.tick(44_999)
    g = core.group("g")
    assert g is not None and set(g.members) == {"a", "b"}
    core.tick(45_000)  # a never heartbeated again
    assert set(g.members) == {"b"} and g.group_epoch == 3
    # A member that does not revoke within its rebalance timeout is fenced.
    core2 = ConsumerGroups(new_uuid=uuid.uuid4)
    join(core2, "a", rebalance_timeout_ms=5_000)
    join(core2, "b")
    core2.heartbeat(HeartbeatIn("g", "a", 1, owned=a.assignment), TOPICS, 100)
    core2.tick(5_100)
    g2 = core2.group("g")
    assert g2 is not None and set(g2.members) == {"b"}


def test_offset_commit_checks_the_member_epoch() -> None:
    core = ConsumerGroups(new_uuid=uuid.uuid4)
    join(core, "a")
    assert core.check_commit("g", "a", 1) == Errors.NONE
    assert core.check_commit("g", "a", 0) == Errors.STALE_MEMBER_EPOCH
    assert core.check_commit("g", "x", 1) == Errors.UNKNOWN_MEMBER_ID
    assert core.check_commit("g", "a", 1, api_version=8) == Errors.UNSUPPORTED_VERSION
    assert core.check_commit("g", "a", 1, api_version=3, transactional=True) == Errors.NONE
    assert core.check_commit("g", "", -1) == Errors.UNKNOWN_MEMBER_ID  # members: no admin commit
    core.heartbeat(HeartbeatIn("g", "a", -1), TOPICS, 0)
    assert core.check_commit("g", "", -1) == Errors.NONE  # empty: an admin's commit


def test_assignors() -> None:
    subs = {"a": frozenset({"t"}), "b": frozenset({"t"}), "c": frozenset({"t"})}
    r = assign(RANGE, subs, TOPICS, {})
    assert r == {m: frozenset((T, p) for p in ps) for m, ps in {"a": {0, 1}, "b": {2, 3}, "c": {4, 5}}.items()}
    u = assign(UNIFORM, {"a": subs["a"], "b": subs["b"]}, TOPICS, {})
    assert sorted(len(v) for v in u.values()) == [3, 3]
    # Sticky: a third member takes one from each, nobody else moves.
    u3 = assign(UNIFORM, subs, TOPICS, u)
    assert sorted(len(v) for v in u3.values()) == [2, 2, 2]
    assert u3["a"] <= u["a"] and u3["b"] <= u["b"]
    # Only subscribers get a topic's partitions.
    assert assign(UNIFORM, {"a": frozenset({"x"})}, TOPICS, {}) == {"a": frozenset()}


def test_empty_groups_make_room_for_new_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("partlog.kafka_front.consumer_group.GROUPS_MAX", 2)
    core = ConsumerGroups(new_uuid=uuid.uuid4)
    for g in ("g1", "g2"):
        assert core.heartbeat(J(group_id=g), TOPICS, 0).error == Errors.NONE
    assert core.heartbeat(J(group_id="g3"), TOPICS, 0).error == Errors.COORDINATOR_NOT_AVAILABLE
    core.heartbeat(HeartbeatIn("g1", "m", -1), TOPICS, 0)
    assert core.heartbeat(J(group_id="g3"), TOPICS, 0).error == Errors.NONE
    assert set(core.groups) == {"g2", "g3"}
