"""Dynamic BROKER and GROUP configs' rules (partlog.kafka.dynamic_config):
alterations against a small reference model, Kafka's messages, and the
values' meaning (topic defaults, group settings) and application by the
KIP-848 coordinator."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from partlog.kafka.dynamic_config import (
    DYNAMIC_RESOURCES_MAX,
    RESOURCE_BROKER,
    RESOURCE_GROUP,
    DynamicChange,
    DynamicConfigs,
    GroupSettings,
    alter,
    invalid_resource,
)
from partlog.kafka.errors import Errors
from partlog.kafka.topic_config import OP_APPEND, OP_DELETE, OP_SET, OP_SUBTRACT, ConfigOp
from partlog.kafka_front.consumer_group import ConsumerGroups, HeartbeatIn

B, G = RESOURCE_BROKER, RESOURCE_GROUP
S, H = "consumer.session.timeout.ms", "consumer.heartbeat.interval.ms"


def _set(*pairs: tuple[str, str]) -> tuple[ConfigOp, ...]:
    return tuple(ConfigOp(OP_SET, k, v) for k, v in pairs)


def test_librdkafkas_0081_alterations() -> None:
    c = DynamicConfigs()
    answers, changed = alter(c, [
        DynamicChange(B, "1", False, (ConfigOp(OP_SET, "background.threads", "9"),
                                      ConfigOp(OP_APPEND, "log.cleanup.policy", "compact"))),
        DynamicChange(B, "1", False, _set(("sasl.kerberos.min.time.before.relogin", "58000"))),
        DynamicChange(G, "my-group", False, _set((S, "50000"))),
    ])  # fmt: skip
    assert answers == [(Errors.NONE, None)] * 3
    assert changed == {
        (B, "1"): {"background.threads": "9", "log.cleanup.policy": "delete,compact",
                   "sasl.kerberos.min.time.before.relogin": "58000"},
        (G, "my-group"): {S: "50000"},
    }  # fmt: skip
    c = DynamicConfigs(changed, 1)
    answers, changed = alter(c, [
        DynamicChange(B, "1", False, (ConfigOp(OP_DELETE, "background.threads", None),
                                      ConfigOp(OP_SUBTRACT, "log.cleanup.policy", "compact"))),
        DynamicChange(G, "my-group", False, (ConfigOp(OP_DELETE, S, None),)),
    ])  # fmt: skip
    assert answers == [(Errors.NONE, None)] * 2
    # A resource with nothing left is removed (empty).
    assert changed[(G, "my-group")] == {} and changed[(B, "1")]["log.cleanup.policy"] == "delete"


def test_kafkas_refusals() -> None:
    c = DynamicConfigs()
    cases = [
        (DynamicChange(B, "1", False, _set(("broker.id", "2"))),
         (Errors.INVALID_REQUEST, "Cannot update these configs dynamically: ['broker.id']")),
        (DynamicChange(B, "", False, _set(("log.retention.ms", "soon"))),
         (Errors.INVALID_REQUEST, "Invalid value soon for configuration log.retention.ms: Not a number of type LONG")),
        (DynamicChange(B, "1", False, _set(("num.io.threads", "0"))),
         (Errors.INVALID_REQUEST, "Invalid value 0 for configuration num.io.threads: Value must be at least 1")),
        (DynamicChange(B, "1", False, (ConfigOp(OP_APPEND, "background.threads", "1"),)),
         (Errors.INVALID_REQUEST, "Config value append is not allowed for config key: background.threads")),
        (DynamicChange(B, "x", False, _set(("num.io.threads", "2"))),
         (Errors.INVALID_REQUEST, "Invalid broker name x")),
        (DynamicChange(G, "g", False, (ConfigOp(OP_APPEND, S, "1"),)),
         (Errors.INVALID_CONFIG, f"Can't APPEND to key {S} because its type is not LIST.")),
        (DynamicChange(G, "", False, _set((S, "50000"))),
         (Errors.INVALID_REQUEST, "Default group resources are not allowed.")),
        (DynamicChange(G, "g", False, _set((S, "70000"))),
         (Errors.INVALID_CONFIG, f"{S} must be less than or equal to group.consumer.max.session.timeout.ms")),
        (DynamicChange(G, "g", False, _set((H, "4000"))),
         (Errors.INVALID_CONFIG, f"{H} must be greater than or equal to group.consumer.min.heartbeat.interval.ms")),
        (DynamicChange(G, "g", False, _set(("share.session.timeout.ms", "45000"))),
         (Errors.INVALID_CONFIG, "Unknown group config name: share.session.timeout.ms")),
        (DynamicChange(G, "g", False, _set((S, "x"))),
         (Errors.INVALID_CONFIG, f"Invalid value x for configuration {S}: Not a number of type INT")),
        (DynamicChange(7, "x", False, ()), (Errors.INVALID_REQUEST, "Unknown resource type 7")),
    ]  # fmt: skip
    for change, expected in cases:
        assert alter(c, [change]) == ([expected], {}), change


def test_alter_configs_replaces_a_resource_whole() -> None:
    c = DynamicConfigs({(B, "1"): {"background.threads": "9", "log.retention.ms": "1000"}}, 3)
    answers, changed = alter(c, [DynamicChange(B, "1", True, _set(("num.io.threads", "4")))])
    assert answers == [(Errors.NONE, None)] and changed == {(B, "1"): {"num.io.threads": "4"}}


def test_the_number_of_resources_is_bounded() -> None:
    full = DynamicConfigs({(G, f"g{i}"): {S: "50000"} for i in range(DYNAMIC_RESOURCES_MAX)}, 1)
    answers, changed = alter(full, [DynamicChange(G, "new", False, _set((S, "50000"))),
                                    DynamicChange(G, "g1", False, _set((S, "46000")))])  # fmt: skip
    assert answers[0][0] == Errors.POLICY_VIOLATION and answers[1] == (Errors.NONE, None)
    assert changed == {(G, "g1"): {S: "46000"}}


def test_meaning_topic_defaults_and_group_settings() -> None:
    c = DynamicConfigs({
        (B, ""): {"log.retention.ms": "1000", "log.cleanup.policy": "compact", "background.threads": "3"},
        (B, "2"): {"log.retention.ms": "2000"},
        (G, "g"): {H: "6000"},
    })  # fmt: skip
    assert c.topic_defaults(1) == {"retention.ms": "1000", "cleanup.policy": "compact"}
    assert c.topic_defaults(2) == {"retention.ms": "2000", "cleanup.policy": "compact"}
    assert c.group("g") == GroupSettings(45_000, 6_000) and c.group("other") == GroupSettings()


# --------------------------------------------------------- reference model

NAMES = ["background.threads", "log.retention.ms", "log.cleanup.policy", "broker.id", S, H, "share.x"]
VALUES = ["0", "1", "9", "6000", "50000", "compact", "delete", "x", "", "99999999999"]
_ops = st.builds(ConfigOp, st.sampled_from([OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT]), st.sampled_from(NAMES),
                 st.sampled_from(VALUES))  # fmt: skip
_changes = st.builds(DynamicChange, st.sampled_from([B, G, 5]), st.sampled_from(["", "1", "2", "g"]), st.booleans(),
                     st.lists(_ops, max_size=4).map(tuple))  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(_changes, max_size=4), max_size=6))
def test_alterations_keep_only_valid_resources_and_refusals_change_nothing(requests: list[list[DynamicChange]]) -> None:
    c = DynamicConfigs()
    for req in requests:
        answers, changed = alter(c, req)
        assert len(answers) == len(req)
        # Reference: the accepted changes, one after the other, alone.
        model = {k: dict(v) for k, v in c.resources.items()}
        for change, (err, why) in zip(req, answers, strict=True):
            key = (change.resource_type, change.name)
            if err != Errors.NONE:
                assert why, change
                continue
            held = {} if change.replace else model.get(key, {})
            ok, _ = alter(DynamicConfigs({key: held} if held else {}), [change])
            assert ok == [(Errors.NONE, None)]
            for o in change.ops:
                if o.op == OP_SET:
                    held = {**held, o.name: o.value or ""}
                elif o.op == OP_DELETE:
                    held = {k: v for k, v in held.items() if k != o.name}
                else:  # APPEND / SUBTRACT: only log.cleanup.policy gets here
                    assert o.name == "log.cleanup.policy"
                    items = [x for x in held.get(o.name, "delete").split(",") if x]
                    if o.op == OP_APPEND and o.value not in items:
                        items.append(o.value or "")
                    if o.op == OP_SUBTRACT and o.value in items:
                        items.remove(o.value)
                    held = {**held, o.name: ",".join(items)}
            model[key] = held
        new = {**c.resources, **changed}
        assert {k: v for k, v in new.items() if v} == {k: v for k, v in model.items() if v}
        for (t, n), v in new.items():
            assert not v or invalid_resource(t, n, v) is None, (t, n, v)
        c = DynamicConfigs({k: v for k, v in new.items() if v}, c.version + 1)


# ------------------------------------------------ applied by the coordinator


def _join(group: str, member: str = "") -> HeartbeatIn:
    return HeartbeatIn(group, member, 0, None, None, 10_000, ("t",), None, None, frozenset(), "c", "h")


def test_the_coordinator_applies_a_groups_session_and_interval() -> None:
    held = DynamicConfigs({(G, "slow"): {S: "60000", H: "15000"}})
    core = ConsumerGroups(new_uuid=uuid.uuid4, settings=lambda gid: held.group(gid))
    topics = {"t": (uuid.UUID(int=1), 1)}
    slow = core.heartbeat(_join("slow", "m-slow"), topics, 0)
    fast = core.heartbeat(_join("fast", "m-fast"), topics, 0)
    assert slow.error == fast.error == Errors.NONE
    assert (slow.heartbeat_interval_ms, fast.heartbeat_interval_ms) == (15_000, 5_000)
    # After 50 s without a heartbeat the default group's member is gone, the other's not.
    core.tick(50_000)
    assert set(core.groups["slow"].members) == {slow.member_id}
    assert not core.groups["fast"].members


def test_the_sources_figures_for_the_metrics() -> None:
    from partlog.controller.dynamic_configs import LocalConfigs, source_stats

    local = LocalConfigs()
    assert source_stats(local) == {"resources": 0, "refused": 0, "failures": 0}
    local.configs = DynamicConfigs({(G, "g"): {S: "50000"}})
    assert source_stats(local)["resources"] == 1
