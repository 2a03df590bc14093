"""The sans-IO classic group membership protocol (partlog.groups.membership)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from partlog.groups.membership import Groups, GroupState
from partlog.kafka.errors import Errors

SESSION_MS = 10_000


def _join(g: Groups, token: Any, member: str, now: int, protocols: list[tuple[str, bytes]] | None = None) -> Any:
    return g.join(
        token,
        "grp",
        member,
        client_id="c",
        client_host="h",
        session_timeout_ms=SESSION_MS,
        rebalance_timeout_ms=SESSION_MS,
        protocol_type="consumer",
        protocols=protocols or [("range", b"m-" + member.encode())],
        group_instance_id=None,
        require_known_member_id=True,
        now_ms=now,
    )


def _answers(g: Groups) -> dict[Any, dict[str, Any]]:
    return {c.token: c.body for c in g.take_completions()}


def test_two_members_join_one_leads_and_sync_hands_out_the_leaders_assignment() -> None:
    g = Groups(initial_rebalance_delay_ms=100)
    a = _join(g, 1, "", 0)
    assert a["error_code"] == Errors.MEMBER_ID_REQUIRED
    id_a = a["member_id"]
    b = _join(g, 2, "", 0)
    id_b = b["member_id"]
    assert _join(g, 3, id_a, 0) is None
    assert _join(g, 4, id_b, 10) is None
    assert _answers(g) == {}  # the initial delay holds the first rebalance
    g.tick(100)
    done = _answers(g)
    assert done[3]["error_code"] == 0 and done[4]["error_code"] == 0
    assert done[3]["generation_id"] == done[4]["generation_id"] == 1
    leader = done[3]["leader"]
    assert leader == id_a and len(done[3]["members"]) == 2 and done[4]["members"] == []
    assert g.sync(5, "grp", id_b, 1, {}, 110) is None  # the follower waits for the leader
    led = g.sync(6, "grp", id_a, 1, {id_a: b"A", id_b: b"B"}, 120)
    assert led is not None and led["assignment"] == b"A"
    assert _answers(g)[5]["assignment"] == b"B"
    group = g.group("grp")
    assert group is not None and group.state is GroupState.STABLE
    assert g.heartbeat("grp", id_b, 1, 130) == Errors.NONE
    assert g.heartbeat("grp", id_b, 0, 130) == Errors.ILLEGAL_GENERATION
    assert g.heartbeat("grp", "nobody", 1, 130) == Errors.UNKNOWN_MEMBER_ID


def test_a_member_that_stops_heartbeating_is_removed_and_the_rest_rebalance() -> None:
    g = Groups(initial_rebalance_delay_ms=100)
    ids = []
    for t in (1, 2):
        ids.append(_join(g, t, "", 0)["member_id"])
    _join(g, 10, ids[0], 0)
    _join(g, 11, ids[1], 0)
    g.tick(100)
    assert {b["generation_id"] for b in _answers(g).values()} == {1}
    g.sync(12, "grp", ids[0], 1, {ids[0]: b"x", ids[1]: b"y"}, 0)
    g.sync(13, "grp", ids[1], 1, {}, 0)
    _answers(g)
    # Only the first keeps heartbeating.
    for now in range(1000, SESSION_MS + 2000, 1000):
        g.heartbeat("grp", ids[0], 1, now)
        g.tick(now)
    assert g.heartbeat("grp", ids[0], 1, SESSION_MS + 2000) == Errors.REBALANCE_IN_PROGRESS
    assert _join(g, 20, ids[0], SESSION_MS + 2000) is None
    done = _answers(g)
    assert done[20]["error_code"] == 0 and done[20]["generation_id"] == 2
    assert [m["member_id"] for m in done[20]["members"]] == [ids[0]]


def test_leave_rebalances_and_the_last_leave_empties_the_group() -> None:
    g = Groups(initial_rebalance_delay_ms=0)
    mid = _join(g, 1, "", 0)["member_id"]
    _join(g, 2, mid, 0)
    g.tick(0)
    assert _answers(g)[2]["error_code"] == 0
    assert g.leave("grp", mid, 5) == Errors.NONE
    group = g.group("grp")
    assert group is not None and group.state is GroupState.EMPTY
    assert g.check_commit("grp", "", -1, 6) == Errors.NONE  # a simple commit to an empty group


def test_members_without_a_common_protocol_are_refused() -> None:
    g = Groups(initial_rebalance_delay_ms=0)
    mid = _join(g, 1, "", 0)["member_id"]
    _join(g, 2, mid, 0, [("range", b"")])
    other = _join(g, 3, "", 0)["member_id"]
    answer = _join(g, 4, other, 0, [("sticky", b"")])
    assert answer is not None and answer["error_code"] == Errors.INCONSISTENT_GROUP_PROTOCOL


OPS = st.lists(
    st.tuples(
        st.sampled_from(["join", "sync", "heartbeat", "leave", "tick"]),
        st.integers(0, 3),  # member slot
        st.integers(0, 4_000),  # time step
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(OPS)
def test_every_waiting_request_is_answered_exactly_once_and_the_state_stays_consistent(ops: list[Any]) -> None:
    g = Groups(initial_rebalance_delay_ms=500)
    ids: list[str | None] = [None] * 4
    now = 0
    waiting: set[int] = set()
    answered: dict[int, dict[str, Any]] = {}

    def collect() -> None:
        for c in g.take_completions():
            assert c.token in waiting, f"token {c.token} answered twice or never asked"
            waiting.discard(c.token)
            answered[c.token] = c.body

    for token, (op, slot, step) in enumerate(ops, start=1):
        now += step
        member = ids[slot] or ""
        group = g.group("grp")
        if op == "join":
            waiting.add(token)
            body = _join(g, token, member, now)
            if body is not None:
                waiting.discard(token)
                answered[token] = body
                if body["member_id"]:
                    ids[slot] = body["member_id"]
            else:
                ids[slot] = member or ids[slot]
        elif op == "sync" and group is not None:
            waiting.add(token)
            plan = {m: m.encode() for m in group.members} if member == group.leader else {}
            body = g.sync(token, "grp", member, group.generation, plan, now)
            if body is not None:
                waiting.discard(token)
                answered[token] = body
        elif op == "heartbeat" and group is not None:
            g.heartbeat("grp", member, group.generation, now)
        elif op == "leave":
            g.leave("grp", member, now)
        else:
            g.tick(now)
        collect()
        group = g.group("grp")
        members = group.members.values() if group is not None else []
        assert g.metadata_bytes == sum(
            sum(len(n) + len(meta) for n, meta in m.protocols) + len(m.assignment) for m in members
        )
        if group is not None:
            if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
                assert group.leader in group.members
                assert group.protocol is not None
            if group.state is GroupState.EMPTY:
                assert not group.members
            assert group.joined <= set(group.members)
            for m in group.members.values():
                assert m.join_token is None or m.sync_token is None
                if group.state is not GroupState.PREPARING_REBALANCE:
                    assert m.join_token is None
    # Far in the future every member has timed out: nobody waits any more.
    for later in (now + 100_000, now + 200_000):
        g.tick(later)
        collect()
    assert waiting == set()
    for body in answered.values():
        assert body["error_code"] in {int(e) for e in Errors}


def test_members_metadata_is_bounded_in_bytes(monkeypatch: Any) -> None:
    import partlog.groups.membership as membership

    monkeypatch.setattr(membership, "METADATA_BYTES_MAX", 1000)
    g = Groups(initial_rebalance_delay_ms=0)
    first = _join(g, 1, "", 0)["member_id"]
    assert _join(g, 2, first, 0, [("range", b"x" * 600)]) is None
    second = _join(g, 3, "", 0)["member_id"]
    refused = _join(g, 4, second, 0, [("range", b"y" * 600)])
    assert refused is not None and refused["error_code"] == Errors.COORDINATOR_NOT_AVAILABLE
    assert g.metadata_bytes == len("range") + 600
    g.leave("grp", first, 1)
    assert g.metadata_bytes == 0


def _state(g: Groups) -> GroupState:
    group = g.group("grp")
    assert group is not None
    return group.state


def test_commits_follow_kafkas_state_rules() -> None:
    g = Groups(initial_rebalance_delay_ms=0)
    a = _join(g, 1, "", 0)["member_id"]
    _join(g, 2, a, 0)
    g.tick(0)
    _answers(g)
    group = g.group("grp")
    assert group is not None and group.state is GroupState.COMPLETING_REBALANCE
    # While the assignment is being handed out: REBALANCE_IN_PROGRESS.
    assert g.check_commit("grp", a, 1, 1) == Errors.REBALANCE_IN_PROGRESS
    # Kafka checks the member and generation first (ClassicGroup.
    # validateOffsetCommit): an older generation's commit mid-rebalance is
    # ILLEGAL_GENERATION, a stranger's UNKNOWN_MEMBER_ID (librdkafka 0113).
    assert g.check_commit("grp", a, 0, 1) == Errors.ILLEGAL_GENERATION
    assert g.check_commit("grp", "stranger", 1, 1) == Errors.UNKNOWN_MEMBER_ID
    g.sync(3, "grp", a, 1, {a: b"x"}, 1)
    assert g.check_commit("grp", a, 1, 2) == Errors.NONE
    assert g.check_commit("grp", a, 0, 2) == Errors.ILLEGAL_GENERATION
    assert g.check_commit("grp", "stranger", 1, 2) == Errors.UNKNOWN_MEMBER_ID
    assert g.check_commit("grp", "", -1, 2) == Errors.UNKNOWN_MEMBER_ID  # simple commits need an empty group
    # A new member starts a rebalance: the old generation's member may still
    # commit what it processed (its revoke callback), as in Kafka.
    b = _join(g, 4, "", 3)["member_id"]
    assert _join(g, 5, b, 3) is None
    assert _state(g) is GroupState.PREPARING_REBALANCE
    assert g.check_commit("grp", a, 1, 4) == Errors.NONE


def test_member_ids_handed_out_and_never_used_expire_and_the_group_is_forgotten() -> None:
    g = Groups(initial_rebalance_delay_ms=0)
    answer = _join(g, 1, "", 0)
    assert answer["error_code"] == Errors.MEMBER_ID_REQUIRED
    group = g.group("grp")
    assert group is not None and answer["member_id"] in group.pending
    g.tick(SESSION_MS - 1)
    assert g.group("grp") is not None
    g.tick(SESSION_MS)
    assert g.group("grp") is None
