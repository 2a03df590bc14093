"""Keeping a broker's store in step with the topic configs its controller
keeps (docs/design/topic-configs.md).

A topic the controller configured (``TopicInfo.configs`` not None) gets,
in this broker's store, its whole config from the controller: Kafka's
defaults, then the cluster's dynamic broker configs of topics (``log.*``,
:meth:`partlog.kafka.dynamic_config.DynamicConfigs.topic_defaults`), then
the controller's overrides, then the broker's own configs of
an internal topic (those keep their logs whole: safety over an override).
A topic the controller never configured keeps what the store holds, so
``Broker.alter_topic_configs`` (tools, tests) still sets it, until the
cluster has dynamic topic defaults: then it is treated as configured with
no overrides (and stays so in this process, so their removal reaches it).
Sans-IO: this decides what to write; the broker writes it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping

from partlog.controller.cluster_meta import TopicInfo
from partlog.kafka.topic_config import TopicConfig

__all__ = ["INTERNAL_TOPIC_CONFIGS", "TopicConfigSync"]


# Committed offsets live in __consumer_offsets (partlog.kafka_front), and
# transactional ids in __transaction_state; neither is compacted: retention
# must never drop a group's last commit or an id's last state, so every
# broker keeps their logs whole (Kafka compacts them instead).
INTERNAL_TOPIC_CONFIGS: dict[str, dict[str, str | int]] = {
    "__consumer_offsets": {"retention.ms": -1, "retention.bytes": -1},
    "__transaction_state": {"retention.ms": -1, "retention.bytes": -1},
}


class TopicConfigSync:
    """The overrides this broker last applied, per configured topic (in
    memory: a restarted broker applies every configured topic's once)."""

    def __init__(self, internal_configs: Mapping[str, Mapping[str, str | int]]) -> None:
        self._internal = internal_configs
        # Per topic: its overrides and the defaults, as last applied.
        self._applied: dict[uuid.UUID, tuple[tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]]] = {}

    def pending(
        self, topics: Iterable[TopicInfo], defaults: Mapping[str, str] | None = None
    ) -> list[tuple[TopicInfo, dict[str, str | int]]]:
        """Each configured topic whose overrides or ``defaults`` (topic
        config name -> the dynamic broker config's value) changed since last
        applied, with the whole config its store gets (TopicConfigError when
        they do not validate here: a newer controller's key)."""
        out = []
        live = set()
        base = tuple(sorted((defaults or {}).items()))
        for t in topics:
            live.add(t.topic_id)
            configs = t.configs
            if configs is None and (base or t.topic_id in self._applied):
                # Never configured by the controller, but the cluster's
                # dynamic defaults apply to it (and, once applied, their removal).
                configs = ()
            if configs is None or self._applied.get(t.topic_id) == (configs, base):
                continue
            merged = {**dict(base), **dict(configs), **self._internal.get(t.name, {})}
            whole: dict[str, str | int] = dict(TopicConfig().with_configs(merged).to_configs())
            out.append((t, whole))
        for gone in self._applied.keys() - live:
            del self._applied[gone]
        return out

    def applied(self, topic: TopicInfo, defaults: Mapping[str, str] | None = None) -> None:
        self._applied[topic.topic_id] = (topic.configs or (), tuple(sorted((defaults or {}).items())))
