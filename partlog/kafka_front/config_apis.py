"""Kafka's config APIs on the front end (docs/design/topic-configs.md):
DescribeConfigs, IncrementalAlterConfigs and AlterConfigs.

Topic configs: the controller keeps a topic's overrides (Kafka's dynamic
topic configs, ``TopicInfo.configs``); IncrementalAlterConfigs (SET,
DELETE, APPEND, SUBTRACT) and AlterConfigs (the whole set replaced) go to
it through the metadata source (:class:`TopicConfigAdmin`), which answers
once this broker's view holds the change.  Checks in Kafka's order: the
broker's preprocessing (a resource named twice, a config key named twice, a
null value, the resource type, a broker's name), then ALTER_CONFIGS on the
topic, then the controller (the configs validated whole: INVALID_CONFIG
with Kafka's message; then the topic's existence).

BROKER resources (one broker's, or ``""`` the cluster's default) and GROUP
resources (a KIP-848 group's session timeout and heartbeat interval) keep
Kafka's dynamic configs (:mod:`partlog.kafka.dynamic_config`) in the
cluster's metadata, through the broker's :class:`DynamicConfigSource`:
checked there, answered once this broker holds the change.  The ``log.*``
ones are the defaults of topics without their own override.

DescribeConfigs of a topic lists what :class:`TopicConfig` implements, the
values this broker's store enforces, DYNAMIC_TOPIC_CONFIG for an override
and DEFAULT_CONFIG otherwise, plus min.insync.replicas (a broker config in
partlog: STATIC_BROKER_CONFIG, read-only)."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping
from typing import Any

from partlog.acl import AclOperation
from partlog.controller.cluster_meta import ConfigChange, TopicConfigAdmin, TopicInfo
from partlog.controller.dynamic_configs import CHANGES_PER_REQUEST_MAX, CONFIGS_PER_RESOURCE_MAX
from partlog.controller.rules import valid_topic_name
from partlog.kafka.dynamic_config import (
    GROUP_CONFIG_DEFAULTS,
    RESOURCE_BROKER,
    RESOURCE_GROUP,
    RESOURCE_NAME_CHARS_MAX,
    TOPIC_SYNONYMS,
    DynamicChange,
)
from partlog.kafka.errors import Errors
from partlog.kafka.topic_config import (
    CONFIG_TYPES,
    OP_DELETE,
    OP_SET,
    OP_SUBTRACT,
    TOPIC_CONFIG_NAME_CHARS_MAX,
    TOPIC_CONFIG_OPS_MAX,
    TOPIC_CONFIG_VALUE_CHARS_MAX,
    ConfigOp,
    TopicConfig,
)
from partlog.kafka_front.handler import ApiHandlers, Session, kafka_error
from partlog.kafka_front.port import BrokerPort
from partlog.limits import TOPICS_PER_REQUEST_MAX

__all__ = ["ConfigApis", "topic_config_entries"]

log = logging.getLogger(__name__)

# Kafka's ConfigResource.Type, ConfigSource and ConfigType codes.
RESOURCE_TOPIC = 2
SOURCE_DYNAMIC_TOPIC = 1
SOURCE_DYNAMIC_BROKER = 2  # DYNAMIC_BROKER_CONFIG: this broker's
SOURCE_DYNAMIC_DEFAULT_BROKER = 3  # DYNAMIC_DEFAULT_BROKER_CONFIG: the cluster's
SOURCE_STATIC = 4  # STATIC_BROKER_CONFIG
SOURCE_DEFAULT = 5  # DEFAULT_CONFIG
SOURCE_GROUP = 8  # GROUP_CONFIG
_TYPE_CODES = {"BOOLEAN": 1, "STRING": 2, "INT": 3, "SHORT": 4, "LONG": 5, "DOUBLE": 6, "LIST": 7}
# The broker config each topic config defaults from (Kafka's
# ServerTopicConfigSynonyms), named by DescribeConfigs' DEFAULT_CONFIG synonym.
BROKER_SYNONYMS = {topic: broker for broker, topic in TOPIC_SYNONYMS.items()}
_DEFAULTS = TopicConfig().to_configs()
_STATIC_ONLY = "this cluster's topics come from its static cluster file"


def _config_type(value: str) -> int:
    """Kafka's ConfigType code of a broker config's value: BOOLEAN, STRING or LONG."""
    if value in ("true", "false"):
        return 1
    try:
        int(value)
    except ValueError:
        return 2
    return 5


def topic_config_entries(
    enforced: Mapping[str, str],
    overrides: Mapping[str, str],
    min_insync_replicas: int,
    broker_sources: Mapping[str, int] | None = None,
) -> dict[str, tuple[str, int, bool]]:
    """A topic's configs as DescribeConfigs lists them: name -> (value,
    source, read_only).  ``enforced``: the store's whole config;
    ``broker_sources``: the source of each default a dynamic broker config sets."""
    dynamic = broker_sources or {}
    out = {
        k: (overrides[k], SOURCE_DYNAMIC_TOPIC, False) if k in overrides else (v, dynamic.get(k, SOURCE_DEFAULT), False)
        for k, v in enforced.items()
    }
    out["min.insync.replicas"] = (str(min_insync_replicas), SOURCE_STATIC, True)
    return out


class ConfigApis(ApiHandlers):
    """``static_configs``: the broker configs DescribeConfigs shows, by their Kafka names."""

    def __init__(self, broker: BrokerPort, *, static_configs: Mapping[str, str]) -> None:
        super().__init__(broker)
        self.static_configs = dict(static_configs)

    # --------------------------------------------------------- describe

    async def describe_configs(self, req: Any, body: Any, session: Session) -> Mapping[str, Any]:
        results = []
        topics = self._topics_by_name()
        synonyms = bool(getattr(body, "include_synonyms", False))
        for r in body.resources:
            rtype, name = int(r.resource_type), r.resource_name
            base = {"resource_type": rtype, "resource_name": name, "error_message": None, "configs": []}
            if rtype == RESOURCE_TOPIC:
                t = topics.get(name)
                if not self.authz.topic(session, AclOperation.DESCRIBE_CONFIGS, name):
                    results.append({**base, "error_code": int(Errors.TOPIC_AUTHORIZATION_FAILED)})
                    continue
                if not valid_topic_name(name):
                    results.append({**base, "error_code": int(Errors.INVALID_TOPIC_EXCEPTION)})
                    continue
                if t is None:
                    results.append({**base, "error_code": int(Errors.UNKNOWN_TOPIC_OR_PARTITION)})
                    continue
                enforced = self.broker.topic_config(t.topic_id).to_configs()
                overrides = dict(t.configs or ())
                configs = topic_config_entries(enforced, overrides, self.broker.min_insync_replicas, self._sources())
            elif rtype == RESOURCE_BROKER:
                if not self.authz.cluster(session, AclOperation.DESCRIBE_CONFIGS):
                    results.append({**base, "error_code": int(Errors.CLUSTER_AUTHORIZATION_FAILED)})
                    continue
                if name not in ("", str(self.broker.broker_id)):
                    results.append({**base, "error_code": int(Errors.INVALID_REQUEST),
                                    "error_message": f"this is broker {self.broker.broker_id}"})  # fmt: skip
                    continue
                configs = self._broker_entries(name)
            elif rtype == RESOURCE_GROUP:
                if not self.authz.group(session, AclOperation.DESCRIBE_CONFIGS, name):
                    results.append({**base, "error_code": int(Errors.GROUP_AUTHORIZATION_FAILED)})
                    continue
                if not name:
                    results.append({**base, "error_code": int(Errors.INVALID_REQUEST),
                                    "error_message": "Group name must not be empty"})  # fmt: skip
                    continue
                held = self.broker.dynamic_configs.configs.of(RESOURCE_GROUP, name)
                configs = {k: (held[k], SOURCE_GROUP, False) if k in held else (str(v), SOURCE_DEFAULT, False)
                           for k, v in GROUP_CONFIG_DEFAULTS.items()}  # fmt: skip
            else:
                why = f"resource type {rtype} is not served (2 topic, 4 broker, 32 group)"
                results.append({**base, "error_code": int(Errors.INVALID_REQUEST), "error_message": why})
                continue
            keys = r.configuration_keys
            chosen = configs if keys is None else {k: configs[k] for k in keys if k in configs}
            entries = [self._entry(rtype, k, v, src, ro, synonyms) for k, (v, src, ro) in sorted(chosen.items())]
            results.append({**base, "error_code": 0, "configs": entries})
        return {"throttle_time": 0, "results": results}

    @staticmethod
    def _entry(rtype: int, name: str, value: str, source: int, read_only: bool, synonyms: bool) -> dict[str, Any]:
        kind = CONFIG_TYPES.get(name)
        entry = {"name": name, "value": value, "read_only": read_only, "config_source": source,
                 "is_sensitive": False, "synonyms": [], "documentation": None,
                 "config_type": _TYPE_CODES[kind] if kind else _config_type(value)}  # fmt: skip
        if synonyms:
            # Kafka's order: the topic's override, then the broker default it falls back to.
            out = [{"name": name, "value": value, "source": source}] if source != SOURCE_DEFAULT else []
            if rtype == RESOURCE_TOPIC and name in BROKER_SYNONYMS:
                out.append({"name": BROKER_SYNONYMS[name], "value": _DEFAULTS[name], "source": SOURCE_DEFAULT})
            entry["synonyms"] = out
        return entry

    def _broker_configs(self) -> dict[str, str]:
        return {
            "broker.id": str(self.broker.broker_id),
            "broker.rack": self.broker.az,
            **self.static_configs,
            "min.insync.replicas": str(self.broker.min_insync_replicas),
        }

    def _broker_entries(self, name: str) -> dict[str, tuple[str, int, bool]]:
        """A BROKER resource's configs: ``""`` the cluster's dynamic defaults
        alone (as Kafka), this broker's id its static configs, the topic
        defaults' broker configs and every dynamic one set."""
        held = self.broker.dynamic_configs.configs
        cluster = held.of(RESOURCE_BROKER, "")
        if not name:
            return {k: (v, SOURCE_DYNAMIC_DEFAULT_BROKER, False) for k, v in cluster.items()}
        out = {k: (v, SOURCE_STATIC, True) for k, v in self._broker_configs().items()}
        out.update({broker: (_DEFAULTS[topic], SOURCE_DEFAULT, False) for broker, topic in TOPIC_SYNONYMS.items()})
        out.update({k: (v, SOURCE_DYNAMIC_DEFAULT_BROKER, False) for k, v in cluster.items()})
        out.update({k: (v, SOURCE_DYNAMIC_BROKER, False) for k, v in held.of(RESOURCE_BROKER, name).items()})
        return out

    def _sources(self) -> dict[str, int]:
        """Topic config name -> the source of its default, for those a
        dynamic broker config sets (this broker's over the cluster's)."""
        held = self.broker.dynamic_configs.configs
        out = {TOPIC_SYNONYMS[k]: SOURCE_DYNAMIC_DEFAULT_BROKER for k in held.of(RESOURCE_BROKER, "")
               if k in TOPIC_SYNONYMS}  # fmt: skip
        mine = held.of(RESOURCE_BROKER, str(self.broker.broker_id))
        out.update({TOPIC_SYNONYMS[k]: SOURCE_DYNAMIC_BROKER for k in mine if k in TOPIC_SYNONYMS})
        return out

    # ------------------------------------------------------------ alter

    async def incremental_alter_configs(self, req: Any, body: Any, session: Session) -> Mapping[str, Any]:
        return await self._alter(body, session, incremental=True)

    async def alter_configs(self, req: Any, body: Any, session: Session) -> Mapping[str, Any]:
        return await self._alter(body, session, incremental=False)

    async def _alter(self, body: Any, session: Session, *, incremental: bool) -> Mapping[str, Any]:
        named = Counter((int(r.resource_type), r.resource_name) for r in body.resources)
        answers: list[tuple[Errors, str | None] | None] = []
        changes: dict[str, ConfigChange] = {}
        dynamic: list[DynamicChange] = []
        for r in body.resources:
            refusal = self._refusal(r, named, session, incremental)
            if refusal is None:
                # A DELETE's value is ignored, as Kafka does (librdkafka 0081 sends one).
                codes = [int(c.config_operation) if incremental else OP_SET for c in r.configs]
                ops = tuple(ConfigOp(op, c.name, None if op == OP_DELETE else c.value)
                            for c, op in zip(r.configs, codes, strict=True))  # fmt: skip
                if int(r.resource_type) == RESOURCE_TOPIC:  # the controller answers
                    changes[r.resource_name] = (not incremental, ops)
                else:  # BROKER or GROUP: the cluster's dynamic configs
                    dynamic.append(DynamicChange(int(r.resource_type), r.resource_name, not incremental, ops))
            answers.append(refusal)
        decided = await self._controller(changes, bool(body.validate_only))
        dynamic_answers = iter(await self._dynamic(dynamic, bool(body.validate_only)))
        rows = []
        for r, answer in zip(body.resources, answers, strict=True):
            if answer is None and int(r.resource_type) != RESOURCE_TOPIC:
                answer = next(dynamic_answers)
            err, why = answer if answer is not None else decided[r.resource_name]
            rows.append({"error_code": kafka_error(err), "error_message": why,
                         "resource_type": int(r.resource_type), "resource_name": r.resource_name})  # fmt: skip
        return {"throttle_time": 0, "responses": rows}

    def _refusal(
        self, r: Any, named: Counter[tuple[int, str]], session: Session, incremental: bool
    ) -> tuple[Errors, str | None] | None:
        """Why the broker answers this resource itself (Kafka's
        ConfigAdminManager.preprocess, then authorization); None: ask the controller."""
        rtype, name = int(r.resource_type), r.resource_name
        if named[(rtype, name)] > 1:
            return Errors.INVALID_REQUEST, "Each resource must appear at most once."
        keys = Counter(c.name for c in r.configs)
        if len(keys) != len(r.configs):
            return Errors.INVALID_REQUEST, "Error due to duplicate config keys"
        ops = [int(c.config_operation) if incremental else OP_SET for c in r.configs]
        unknown_op = next((op for op in ops if not OP_SET <= op <= OP_SUBTRACT), None)
        if unknown_op is not None:
            return Errors.INVALID_REQUEST, f"Unknown operations type {unknown_op}"
        nulls = [c.name for c, op in zip(r.configs, ops, strict=True) if c.value is None and op != OP_DELETE]
        if nulls:
            return Errors.INVALID_REQUEST, "Null value not supported for : " + ", ".join(nulls)
        if rtype in (RESOURCE_BROKER, RESOURCE_GROUP):
            if rtype == RESOURCE_BROKER and name and name != str(self.broker.broker_id):
                why = f"Unexpected broker id, expected {self.broker.broker_id}, but received {name:.60}"
                return Errors.INVALID_REQUEST, why
            if rtype == RESOURCE_BROKER and not self.authz.cluster(session, AclOperation.ALTER_CONFIGS):
                return Errors.CLUSTER_AUTHORIZATION_FAILED, None
            if rtype == RESOURCE_GROUP and not self.authz.group(session, AclOperation.ALTER_CONFIGS, name):
                return Errors.GROUP_AUTHORIZATION_FAILED, None
            if len(name) > RESOURCE_NAME_CHARS_MAX:
                return Errors.INVALID_REQUEST, f"a resource name is at most {RESOURCE_NAME_CHARS_MAX} characters"
            if len(r.configs) > CONFIGS_PER_RESOURCE_MAX:
                return Errors.INVALID_REQUEST, f"at most {CONFIGS_PER_RESOURCE_MAX} configs per resource"
        elif rtype != RESOURCE_TOPIC:
            return Errors.INVALID_REQUEST, f"Unknown resource type {rtype} (partlog serves 2 topic, 4 broker, 32 group)"
        elif not self.authz.topic(session, AclOperation.ALTER_CONFIGS, name):
            return Errors.TOPIC_AUTHORIZATION_FAILED, None
        elif len(r.configs) > TOPIC_CONFIG_OPS_MAX:
            return Errors.INVALID_REQUEST, f"at most {TOPIC_CONFIG_OPS_MAX} configs per resource"
        too_long = next((c.name for c in r.configs if len(c.name.encode()) > TOPIC_CONFIG_NAME_CHARS_MAX), None)
        if too_long is not None:
            return Errors.INVALID_CONFIG, f"Unknown config {too_long:.60}...: over {TOPIC_CONFIG_NAME_CHARS_MAX} bytes"
        chars_max = TOPIC_CONFIG_VALUE_CHARS_MAX
        long = next((c.name for c in r.configs if c.value is not None and len(c.value) > chars_max), None)
        if long is not None:
            return Errors.INVALID_CONFIG, f"Invalid value for configuration {long:.255}: over {chars_max} characters"
        return None

    async def _controller(
        self, changes: dict[str, ConfigChange], validate_only: bool
    ) -> dict[str, tuple[Errors, str | None]]:
        """The controller's answers, TOPICS_PER_REQUEST_MAX topics a call."""
        metadata = self.broker.metadata
        if not isinstance(metadata, TopicConfigAdmin):
            return dict.fromkeys(changes, (Errors.INVALID_REQUEST, _STATIC_ONLY))
        out: dict[str, tuple[Errors, str | None]] = {}
        names = list(changes)
        for i in range(0, len(names), TOPICS_PER_REQUEST_MAX):
            chunk = {n: changes[n] for n in names[i : i + TOPICS_PER_REQUEST_MAX]}
            out.update(await metadata.alter_topic_configs(chunk, validate_only=validate_only))
        return out

    async def _dynamic(self, changes: list[DynamicChange], validate_only: bool) -> list[tuple[Errors, str | None]]:
        """The cluster's answers for BROKER and GROUP resources, in order."""
        out: list[tuple[Errors, str | None]] = []
        source = self.broker.dynamic_configs
        for i in range(0, len(changes), CHANGES_PER_REQUEST_MAX):
            chunk = changes[i : i + CHANGES_PER_REQUEST_MAX]
            try:
                out.extend(await source.alter_dynamic_configs(chunk, validate_only=validate_only))
            except Exception as e:  # the controller or etcd unreachable: this request fails, retriably
                log.warning("dynamic configs not altered: %s", e)
                out.extend(
                    [(Errors.REQUEST_TIMED_OUT, f"the cluster's metadata did not answer: {e}"[:500])] * len(chunk)
                )
        return out

    @staticmethod
    def created_configs(topic: TopicInfo, config: TopicConfig) -> list[dict[str, Any]]:
        """CreateTopics' (v5+) configs of a created topic."""
        overrides = dict(topic.configs or ())
        return [{"name": k, "value": v, "read_only": False, "is_sensitive": False,
                 "config_source": SOURCE_DYNAMIC_TOPIC if k in overrides else SOURCE_DEFAULT}
                for k, v in sorted(config.to_configs().items())]  # fmt: skip
