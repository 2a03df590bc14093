"""Static membership (KIP-345) in the sans-IO group core, against Kafka's
classic coordinator: rejoin without a rebalance, fencing, leave, expiry;
and a hypothesis model of instance ids (duplicates included)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from partlog.groups.membership import Groups, GroupState
from partlog.kafka.errors import Errors

SESSION_MS = 10_000


def _join(
    g: Groups,
    token: Any,
    member: str,
    now: int,
    instance: str | None,
    protocols: list[tuple[str, bytes]] | None = None,
    skip: bool = False,
) -> Any:
    return g.join(
        token,
        "grp",
        member,
        client_id="c",
        client_host="h",
        session_timeout_ms=SESSION_MS,
        rebalance_timeout_ms=SESSION_MS,
        protocol_type="consumer",
        protocols=protocols or [("range", b"m")],
        group_instance_id=instance,
        require_known_member_id=True,
        now_ms=now,
        supports_skip_assignment=skip,
    )


def _answers(g: Groups) -> dict[Any, dict[str, Any]]:
    return {c.token: c.body for c in g.take_completions()}


def _stable_pair(g: Groups) -> tuple[str, str]:
    """Static members i1 (the leader) and i2, Stable at generation 1 with
    assignments b"A" and b"B"."""
    g.initial_rebalance_delay_ms = 100
    assert _join(g, 1, "", 0, "i1") is None  # a static member gets no MEMBER_ID_REQUIRED
    assert _join(g, 2, "", 0, "i2") is None
    g.tick(100)
    done = _answers(g)
    a, b = done[1]["member_id"], done[2]["member_id"]
    assert a.startswith("i1-") and done[1]["leader"] == a
    assert g.sync(3, "grp", b, 1, {}, 1, "i2") is None
    assert _sync(g, 4, a, {a: b"A", b: b"B"}, 1, "i1")["assignment"] == b"A"
    assert _answers(g)[3]["assignment"] == b"B"
    return a, b


def _sync(g: Groups, token: int, member: str, plan: dict[str, bytes], now: int, instance: str) -> Any:
    return g.sync(token, "grp", member, 1, plan, now, instance)


def _group(g: Groups) -> Any:
    group = g.group("grp")
    assert group is not None
    return group


def test_a_restarted_static_member_keeps_its_assignment_without_a_rebalance() -> None:
    g = Groups(initial_rebalance_delay_ms=0)
    a, b = _stable_pair(g)
    again = _join(g, 5, "", 100, "i2")
    assert again["error_code"] == 0 and again["generation_id"] == 1
    new_b = again["member_id"]
    assert new_b != b and again["members"] == [] and again["leader"] == a
    assert _group(g).state is GroupState.STABLE
    assert _sync(g, 6, new_b, {}, 101, "i2")["assignment"] == b"B"
    assert g.heartbeat("grp", a, 1, 102, "i1") == Errors.NONE  # the others see no rebalance
    # The old id is fenced when it names its instance, unknown when not.
    assert g.heartbeat("grp", b, 1, 103, "i2") == Errors.FENCED_INSTANCE_ID
    assert g.heartbeat("grp", b, 1, 103) == Errors.UNKNOWN_MEMBER_ID
    assert _sync(g, 7, b, {}, 103, "i2")["error_code"] == Errors.FENCED_INSTANCE_ID
    assert g.check_commit("grp", b, 1, 103, "i2") == Errors.FENCED_INSTANCE_ID
    assert _join(g, 8, b, 103, "i2")["error_code"] == Errors.FENCED_INSTANCE_ID
    assert g.leave("grp", b, 103, "i2") == Errors.FENCED_INSTANCE_ID


def test_a_restarted_leader_is_told_only_from_join_group_v9() -> None:
    g = Groups(initial_rebalance_delay_ms=0)
    a, b = _stable_pair(g)
    old = _join(g, 5, "", 100, "i1")
    assert old["leader"] == a and old["members"] == [] and not old["skip_assignment"]
    new_a = old["member_id"]
    assert _group(g).leader == new_a
    v9 = _join(g, 6, "", 200, "i1", skip=True)
    assert v9["leader"] == v9["member_id"] and v9["skip_assignment"]
    assert {m["member_id"] for m in v9["members"]} == {v9["member_id"], b}
    assert _group(g).state is GroupState.STABLE and _group(g).generation == 1


def test_a_static_rejoin_that_changes_the_groups_protocol_rebalances() -> None:
    g = Groups(initial_rebalance_delay_ms=0)
    assert _join(g, 1, "", 0, "i1", [("range", b""), ("sticky", b"")]) is None
    g.tick(0)
    a = _answers(g)[1]["member_id"]
    g.sync(2, "grp", a, 1, {a: b"A"}, 1, "i1")
    assert _group(g).protocol == "range"
    # Same protocols in another order: the vote picks sticky, so Kafka rebalances.
    assert _join(g, 3, "", 2, "i1", [("sticky", b""), ("range", b"")]) is None
    g.tick(2 + SESSION_MS)
    done = _answers(g)[3]
    assert done["generation_id"] == 2 and done["protocol_name"] == "sticky"


def test_a_static_rejoin_while_completing_rebalances_and_fences_the_old_sync() -> None:
    g = Groups(initial_rebalance_delay_ms=100)
    assert _join(g, 1, "", 0, "i1") is None
    assert _join(g, 2, "", 0, "i2") is None
    g.tick(100)
    answers = _answers(g)
    b = answers[2]["member_id"]
    assert _group(g).state is GroupState.COMPLETING_REBALANCE
    assert g.sync(3, "grp", b, 1, {}, 1, "i2") is None  # the follower waits for the leader
    assert _join(g, 4, "", 2, "i2") is None  # the leader may be assigning the old id
    assert _answers(g)[3]["error_code"] == Errors.FENCED_INSTANCE_ID
    assert _group(g).state is GroupState.PREPARING_REBALANCE


def test_static_members_that_do_not_rejoin_stay_until_their_session_times_out() -> None:
    g = Groups(initial_rebalance_delay_ms=0)
    a, b = _stable_pair(g)
    c = _join(g, 5, "", 100, None)["member_id"]
    assert _join(g, 6, c, 100, None) is None
    assert _join(g, 7, a, 100, "i1") is None  # i2 does not rejoin, but is alive
    assert g.heartbeat("grp", b, 1, 99 + SESSION_MS, "i2") == Errors.REBALANCE_IN_PROGRESS
    g.tick(100 + SESSION_MS)
    done = _answers(g)
    assert done[6]["generation_id"] == 2 and b in _group(g).members  # still a member
    g.heartbeat("grp", a, 2, 99 + 2 * SESSION_MS)
    g.heartbeat("grp", c, 2, 99 + 2 * SESSION_MS)
    g.tick(100 + 2 * SESSION_MS)  # b's session has run out
    assert b not in _group(g).members and "i2" not in _group(g).static


def test_leave_group_by_instance_id_removes_the_static_member_and_rebalances() -> None:
    g = Groups(initial_rebalance_delay_ms=0)
    a, b = _stable_pair(g)
    assert g.leave("grp", "", 10, "nobody") == Errors.UNKNOWN_MEMBER_ID
    assert g.leave("grp", "", 10, "i2") == Errors.NONE
    assert b not in _group(g).members and _group(g).state is GroupState.PREPARING_REBALANCE
    assert g.leave("grp", a, 11, "i1") == Errors.NONE
    assert _group(g).state is GroupState.EMPTY and _group(g).static == {}


def test_an_emptied_group_keeps_its_protocol_type_and_forget_refuses_a_live_group() -> None:
    g = Groups(initial_rebalance_delay_ms=0)
    a, b = _stable_pair(g)
    assert g.forget("grp") == Errors.NON_EMPTY_GROUP
    g.leave("grp", a, 10, "i1")
    g.leave("grp", b, 10, "i2")
    g.tick(20)
    assert g.group("grp") is None and g.protocol_type("grp") == "consumer"
    assert g.forget("grp") == Errors.NONE and g.protocol_type("grp") == ""


# ------------------------------------------------------------------ model

# Slots 0 and 1 share instance id "i0" (a duplicate), slot 2 is "i2", slot 3 dynamic.
INSTANCES = ["i0", "i0", "i2", None]
OPS = st.lists(
    st.tuples(
        # Syncs and restarts weighted up: a restart in a Stable group is the case of interest.
        st.sampled_from(["join", "restart", "restart", "sync", "settle", "heartbeat", "leave", "commit", "tick"]),
        st.integers(0, 3),
        st.integers(0, 2_000),
    ),
    max_size=60,
)


@settings(max_examples=400, deadline=None)
@given(OPS)
def test_instance_ids_follow_the_reference_model(ops: list[Any]) -> None:
    """The model: an instance id belongs to the member of the latest join
    naming it that was not refused, until that member leaves the group; a
    request of any other member id naming it is FENCED_INSTANCE_ID; a
    restart in Stable (same protocols) keeps the generation and the
    assignment; every waiting request is answered once."""
    g = Groups(initial_rebalance_delay_ms=300)
    ids: list[str] = [""] * 4  # the member id each slot (client) knows
    owner: dict[str, str] = {}  # the model: instance id -> its member id
    waiting: set[int] = set()
    now = 0

    def collect() -> None:
        for c in g.take_completions():
            assert c.token in waiting
            waiting.discard(c.token)
            if c.body["error_code"] == 0 and "generation_id" in c.body:
                ids[c.token % 4] = c.body["member_id"]

    for step, (op, slot, dt) in enumerate(ops):
        token = step * 4 + slot
        now += dt
        instance = INSTANCES[slot]
        group = g.group("grp")
        if op == "settle":
            # Complete the rebalance in progress and have its leader sync.
            if group is not None and group.state is GroupState.PREPARING_REBALANCE:
                now = max(now, group.rebalance_deadline_ms)
            g.tick(now)
            collect()
            group = g.group("grp")
            leads = [i for i in range(4) if group is not None and ids[i] == group.leader]
            op, slot, token = ("sync", leads[0], step * 4 + leads[0]) if leads else ("tick", slot, token)
            instance = INSTANCES[slot]
        holder = owner.get(instance) if instance is not None else None
        fenced = group is not None and holder is not None and holder in group.members and holder != ids[slot]
        if op in ("join", "restart"):
            member = "" if op == "restart" and instance is not None else ids[slot]
            before = None
            if member == "" and group is not None and holder in group.members and group.state is GroupState.STABLE:
                before = (group.generation, group.members[holder].assignment)
            waiting.add(token)
            body = _join(g, token, member, now, instance)
            if body is not None:
                waiting.discard(token)
                if member and fenced:
                    assert body["error_code"] == Errors.FENCED_INSTANCE_ID
                if body["error_code"] in (0, Errors.MEMBER_ID_REQUIRED):
                    ids[slot] = body["member_id"]
                if before is not None and body["error_code"] == 0:
                    # Kafka's static rejoin in Stable: no rebalance, old assignment.
                    after = _group(g)
                    assert after.state is GroupState.STABLE
                    assert (after.generation, after.members[body["member_id"]].assignment) == before
            if instance is not None and (body is None or body["error_code"] == 0):
                owner[instance] = body["member_id"] if body is not None else member or _group(g).static[instance]
        elif op == "sync" and group is not None:
            plan = {m: m.encode() for m in group.members} if ids[slot] == group.leader else {}
            waiting.add(token)
            body = g.sync(token, "grp", ids[slot], group.generation, plan, now, instance)
            if body is not None:
                waiting.discard(token)
                assert (body["error_code"] == Errors.FENCED_INSTANCE_ID) == fenced
        elif op == "heartbeat" and group is not None:
            error = g.heartbeat("grp", ids[slot], group.generation, now, instance)
            assert (error == Errors.FENCED_INSTANCE_ID) == fenced
        elif op == "commit" and group is not None:
            error = g.check_commit("grp", ids[slot], group.generation, now, instance)
            assert (error == Errors.FENCED_INSTANCE_ID) == fenced
        elif op == "leave" and group is not None:
            pending = ids[slot] in group.pending
            error = g.leave("grp", ids[slot], now, instance)
            assert (error == Errors.FENCED_INSTANCE_ID) == (fenced and ids[slot] != "" and not pending)
        elif op == "tick":
            g.tick(now)
        collect()
        group = g.group("grp")
        members = group.members.values() if group is not None else []
        assert g.metadata_bytes == sum(
            sum(len(n) + len(meta) for n, meta in m.protocols) + len(m.assignment) for m in members
        )
        if group is not None:
            statics = {m.group_instance_id: mid for mid, m in group.members.items() if m.group_instance_id}
            assert group.static == statics  # one member per instance id, and back
            assert group.static == {i: m for i, m in owner.items() if m in group.members}  # as the model says
            if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
                assert group.leader in group.members
            assert group.joined <= set(group.members)
    for later in (now + 100_000, now + 200_000, now + 300_000):
        g.tick(later)
        collect()
    assert waiting == set()
