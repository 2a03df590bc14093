"""Dynamic broker and group configs (Kafka's ConfigRecords for BROKER and
GROUP resources), sans-IO: what may be set, how a change is checked, and
what the kept values mean (docs/design/topic-configs.md).

A resource is ``(resource_type, name)``:

* ``(BROKER, "")`` the cluster-wide default, ``(BROKER, "<id>")`` one
  broker's override (Kafka's DYNAMIC_DEFAULT_BROKER_CONFIG and
  DYNAMIC_BROKER_CONFIG).  The ``log.*`` topic defaults
  (:data:`TOPIC_SYNONYMS`) are applied: a topic without its own override
  takes the broker's, then the cluster's, then Kafka's default.  A few
  configs Kafka updates at run time name mechanisms partlog does not have
  (:data:`KEPT_ONLY`: thread pools, Kerberos); they are checked, kept and
  described as Kafka would, and change nothing else.
* ``(GROUP, "<group id>")`` a KIP-848 group's session timeout and heartbeat
  interval (Kafka 4.0's GroupConfig), checked against the coordinator's
  bounds and applied by it.

:func:`alter` checks a request's changes against the current set in
Kafka's order and returns the new values; the callers (the embedded
controller, or a broker writing etcd) keep them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from partlog.kafka.errors import Errors
from partlog.kafka.topic_config import (
    CONFIG_TYPES,
    OP_APPEND,
    OP_DELETE,
    OP_SET,
    TOPIC_CONFIG_VALUE_CHARS_MAX,
    ConfigOp,
    TopicConfigError,
    apply_config_ops,
)

__all__ = [
    "DYNAMIC_RESOURCES_MAX",
    "GROUP_CONFIG_DEFAULTS",
    "KEPT_ONLY",
    "RESOURCE_BROKER",
    "RESOURCE_GROUP",
    "TOPIC_SYNONYMS",
    "DynamicChange",
    "DynamicConfigs",
    "GroupSettings",
    "alter",
    "invalid_resource",
]

# Kafka's ConfigResource.Type codes.
RESOURCE_BROKER = 4
RESOURCE_GROUP = 32
Resource = tuple[int, str]

# Resources with dynamic configs the cluster keeps (a group each, mostly):
# Kafka has no bound; ours bounds the set every broker holds.
DYNAMIC_RESOURCES_MAX = 10_000
# The longest group id or broker name a resource may have.
RESOURCE_NAME_CHARS_MAX = 255

# The broker config each topic config defaults from (Kafka's
# ServerTopicConfigSynonyms): settable per broker or cluster-wide, applied.
TOPIC_SYNONYMS: dict[str, str] = {
    "log.cleanup.policy": "cleanup.policy",
    "log.cleaner.delete.retention.ms": "delete.retention.ms",
    "log.flush.interval.messages": "flush.messages",
    "log.flush.interval.ms": "flush.ms",
    "log.index.interval.bytes": "index.interval.bytes",
    "log.cleaner.max.compaction.lag.ms": "max.compaction.lag.ms",
    "message.max.bytes": "max.message.bytes",
    "log.message.timestamp.after.max.ms": "message.timestamp.after.max.ms",
    "log.message.timestamp.before.max.ms": "message.timestamp.before.max.ms",
    "log.message.timestamp.type": "message.timestamp.type",
    "log.cleaner.min.cleanable.ratio": "min.cleanable.dirty.ratio",
    "log.cleaner.min.compaction.lag.ms": "min.compaction.lag.ms",
    "log.retention.bytes": "retention.bytes",
    "log.retention.ms": "retention.ms",
    "log.segment.bytes": "segment.bytes",
    "log.index.size.max.bytes": "segment.index.bytes",
    "log.roll.ms": "segment.ms",
}
# Dynamic broker configs of Kafka's that name mechanisms partlog has not
# (asyncio, no thread pools; no Kerberos): kept and described, no effect.
# Name -> (Kafka's ConfigDef type, least value).
KEPT_ONLY: dict[str, tuple[str, int]] = {
    "background.threads": ("INT", 1),
    "num.io.threads": ("INT", 1),
    "num.network.threads": ("INT", 1),
    "num.recovery.threads.per.data.dir": ("INT", 1),
    "num.replica.fetchers": ("INT", 1),
    "sasl.kerberos.min.time.before.relogin": ("LONG", 0),
}
BROKER_CONFIG_TYPES: dict[str, str] = {
    **{k: CONFIG_TYPES[v] for k, v in TOPIC_SYNONYMS.items()},
    **{k: t for k, (t, _) in KEPT_ONLY.items()},
}

# Kafka 4.0's group configs of consumer groups and the group coordinator's
# bounds on them (group.consumer.{min,max}.{session.timeout,heartbeat.interval}.ms).
SESSION_TIMEOUT = "consumer.session.timeout.ms"
HEARTBEAT_INTERVAL = "consumer.heartbeat.interval.ms"
GROUP_CONFIG_DEFAULTS: dict[str, int] = {SESSION_TIMEOUT: 45_000, HEARTBEAT_INTERVAL: 5_000}
GROUP_CONFIG_BOUNDS: dict[str, tuple[str, int, str, int]] = {
    SESSION_TIMEOUT: ("group.consumer.min.session.timeout.ms", 45_000, "group.consumer.max.session.timeout.ms", 60_000),
    HEARTBEAT_INTERVAL: (
        "group.consumer.min.heartbeat.interval.ms",
        5_000,
        "group.consumer.max.heartbeat.interval.ms",
        15_000,
    ),
}
_INT_MAX = 2**31 - 1
_LONG_MAX = 2**63 - 1


@dataclass(frozen=True, slots=True)
class GroupSettings:
    session_timeout_ms: int = GROUP_CONFIG_DEFAULTS[SESSION_TIMEOUT]
    heartbeat_interval_ms: int = GROUP_CONFIG_DEFAULTS[HEARTBEAT_INTERVAL]


@dataclass(frozen=True, slots=True)
class DynamicChange:
    """One resource of an (Incremental)AlterConfigs request, checked by the
    front already (names, ops, nulls, authorization)."""

    resource_type: int
    name: str
    replace: bool  # AlterConfigs: the resource's configs become exactly ``ops``' SETs
    ops: tuple[ConfigOp, ...]


@dataclass(frozen=True, slots=True)
class DynamicConfigs:
    """The cluster's dynamic configs at ``version`` (resource -> name -> value)."""

    resources: Mapping[Resource, Mapping[str, str]] = field(default_factory=dict)
    version: int = 0

    def of(self, resource_type: int, name: str) -> Mapping[str, str]:
        return self.resources.get((resource_type, name), {})

    def group(self, group_id: str) -> GroupSettings:
        held = self.resources.get((RESOURCE_GROUP, group_id))
        if not held:
            return GroupSettings()
        return GroupSettings(
            int(held.get(SESSION_TIMEOUT, GROUP_CONFIG_DEFAULTS[SESSION_TIMEOUT])),
            int(held.get(HEARTBEAT_INTERVAL, GROUP_CONFIG_DEFAULTS[HEARTBEAT_INTERVAL])),
        )

    def topic_defaults(self, broker_id: int) -> dict[str, str]:
        """Topic config name -> value for the topics of broker
        ``broker_id`` without their own: its override, else the cluster's."""
        out: dict[str, str] = {}
        for name in ("", str(broker_id)):
            for k, v in self.of(RESOURCE_BROKER, name).items():
                if k in TOPIC_SYNONYMS:
                    out[TOPIC_SYNONYMS[k]] = v
        return out


def _int(name: str, value: str, kind: str) -> int | str:
    """The value as Kafka's ConfigDef parses an INT or LONG, or its message."""
    try:
        n = int(value.strip())
    except ValueError:
        return f"Invalid value {value:.200} for configuration {name}: Not a number of type {kind}"
    if not -(_LONG_MAX + 1) <= n <= (_INT_MAX if kind == "INT" else _LONG_MAX):
        return f"Invalid value {value:.200} for configuration {name}: Not a number of type {kind}"
    return n


def _check_broker(configs: Mapping[str, str]) -> str | None:
    """Kafka's message for a bad value, or None."""
    topic = {TOPIC_SYNONYMS[k]: v for k, v in configs.items() if k in TOPIC_SYNONYMS}
    try:
        apply_config_ops({}, [ConfigOp(OP_SET, k, v) for k, v in topic.items()])
    except TopicConfigError as e:
        # The topic config's message, naming the broker config.
        back = {v: k for k, v in TOPIC_SYNONYMS.items()}
        msg = str(e)
        for t, b in back.items():
            msg = msg.replace(f"configuration {t}:", f"configuration {b}:")
        return msg
    for k, (kind, least) in KEPT_ONLY.items():
        if k in configs:
            n = _int(k, configs[k], kind)
            if isinstance(n, str):
                return n
            if n < least:
                return f"Invalid value {n} for configuration {k}: Value must be at least {least}"
    return None


def _check_group(configs: Mapping[str, str]) -> str | None:
    """GroupConfig.validate's message for these overrides, or None."""
    values = dict(GROUP_CONFIG_DEFAULTS)
    for k, v in configs.items():
        if k not in GROUP_CONFIG_DEFAULTS:
            return f"Unknown group config name: {k:.255}"
        n = _int(k, v, "INT")
        if isinstance(n, str):
            return n
        if n < 1:
            return f"Invalid value {n} for configuration {k}: Value must be at least 1"
        values[k] = n
    for k, (least_name, least, most_name, most) in GROUP_CONFIG_BOUNDS.items():
        if values[k] < least:
            return f"{k} must be greater than or equal to {least_name}"
        if values[k] > most:
            return f"{k} must be less than or equal to {most_name}"
    if values[SESSION_TIMEOUT] <= values[HEARTBEAT_INTERVAL]:
        return f"{SESSION_TIMEOUT} must be greater than {HEARTBEAT_INTERVAL}"
    return None


def _apply_ops(
    current: Mapping[str, str], ops: Sequence[ConfigOp], replace: bool, resource_type: int
) -> dict[str, str] | str:
    """The resource's configs after ``ops``; APPEND and SUBTRACT only on a
    LIST config (log.cleanup.policy), from its value, else Kafka's default."""
    out: dict[str, str] = {} if replace else dict(current)
    for o in ops:
        if o.op == OP_SET:
            assert o.value is not None
            out[o.name] = o.value
        elif o.op == OP_DELETE:
            out.pop(o.name, None)
        else:
            topic_name = TOPIC_SYNONYMS.get(o.name)
            if topic_name is None or CONFIG_TYPES[topic_name] != "LIST":
                verb = "APPEND" if o.op == OP_APPEND else "SUBTRACT"
                if resource_type == RESOURCE_BROKER:  # the broker's ConfigAdminManager
                    return f"Config value {verb.lower()} is not allowed for config key: {o.name:.255}"
                return f"Can't {verb} to key {o.name:.255} because its type is not LIST."
            start = {topic_name: out[o.name]} if o.name in out else {}
            changed = apply_config_ops(start, [ConfigOp(o.op, topic_name, o.value)])
            out[o.name] = changed[topic_name]
    return out


def alter(
    current: DynamicConfigs, changes: Sequence[DynamicChange]
) -> tuple[list[tuple[Errors, str | None]], dict[Resource, dict[str, str]]]:
    """Per change, Kafka's answer; and the resources whose configs change,
    with their new whole configs (empty: the resource has none left).
    Every accepted change is applied; a refused one changes nothing."""
    answers: list[tuple[Errors, str | None]] = []
    out: dict[Resource, dict[str, str]] = {}
    count = len(current.resources)
    for c in changes:
        key = (c.resource_type, c.name)
        broker = c.resource_type == RESOURCE_BROKER
        if broker:
            if c.name and not (c.name.isascii() and c.name.isdigit()):
                # Kafka's ControllerConfigurationValidator: a broker is named by its id.
                answers.append((Errors.INVALID_REQUEST, f"Invalid broker name {c.name[:60]}"))
                continue
            unknown = sorted({o.name for o in c.ops} - BROKER_CONFIG_TYPES.keys())
            if unknown:
                # Kafka's answer for a config it cannot update at run time.
                answers.append((Errors.INVALID_REQUEST, f"Cannot update these configs dynamically: {unknown}"))
                continue
        elif c.resource_type == RESOURCE_GROUP:
            if not c.name:
                answers.append((Errors.INVALID_REQUEST, "Default group resources are not allowed."))
                continue
        else:
            answers.append((Errors.INVALID_REQUEST, f"Unknown resource type {c.resource_type}"))
            continue
        if len(c.name) > RESOURCE_NAME_CHARS_MAX:
            answers.append((Errors.INVALID_REQUEST, f"a resource name is at most {RESOURCE_NAME_CHARS_MAX} characters"))
            continue
        long = next(
            (o.name for o in c.ops if o.value is not None and len(o.value) > TOPIC_CONFIG_VALUE_CHARS_MAX), None
        )
        if long is not None:
            too_long = f"Invalid value for configuration {long:.255}: over {TOPIC_CONFIG_VALUE_CHARS_MAX} characters"
            answers.append((Errors.INVALID_CONFIG, too_long))
            continue
        before = out.get(key, current.of(*key))
        new: dict[str, str] | str
        try:
            new = _apply_ops(before, c.ops, c.replace, c.resource_type)
        except TopicConfigError as e:
            new = str(e)
        why = new if isinstance(new, str) else _check_broker(new) if broker else _check_group(new)
        if why is not None:
            # Kafka's broker validates BROKER resources and answers
            # INVALID_REQUEST (KAFKA-13609); its controller, GROUP ones: INVALID_CONFIG.
            answers.append((Errors.INVALID_REQUEST if broker else Errors.INVALID_CONFIG, why))
            continue
        assert isinstance(new, dict)
        held_before = bool(before)
        if new and not held_before and count >= DYNAMIC_RESOURCES_MAX:
            answers.append(
                (Errors.POLICY_VIOLATION, f"the cluster keeps configs of at most {DYNAMIC_RESOURCES_MAX} resources")
            )
            continue
        count += bool(new) - held_before
        out[key] = new
        answers.append((Errors.NONE, None))
    return answers, {k: v for k, v in out.items() if v != dict(current.of(*k))}


def invalid_resource(resource_type: int, name: str, configs: Mapping[str, str]) -> str | None:
    """Why a kept resource's configs are not ones :func:`alter` could have
    made (a reader of another writer's values refuses them), or None."""
    if resource_type not in (RESOURCE_BROKER, RESOURCE_GROUP):
        return f"resource type {resource_type}"
    if len(name) > RESOURCE_NAME_CHARS_MAX or (resource_type == RESOURCE_GROUP and not name):
        return f"resource name {name[:80]!r}"
    if resource_type == RESOURCE_BROKER and name and not (name.isascii() and name.isdigit()):
        return f"broker name {name[:80]!r}"
    if not configs or len(configs) > len(BROKER_CONFIG_TYPES) + len(GROUP_CONFIG_DEFAULTS):
        return f"{len(configs)} configs"
    if any(not isinstance(v, str) or len(v) > TOPIC_CONFIG_VALUE_CHARS_MAX for v in configs.values()):
        return "a value that is not a string of at most TOPIC_CONFIG_VALUE_CHARS_MAX characters"
    if resource_type == RESOURCE_BROKER:
        unknown = sorted(configs.keys() - BROKER_CONFIG_TYPES.keys())
        return f"unknown broker configs {unknown[:5]}" if unknown else _check_broker(configs)
    return _check_group(configs)
