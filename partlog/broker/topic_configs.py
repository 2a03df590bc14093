"""Keeping a broker's store in step with the topic configs its controller
keeps (docs/design/topic-configs.md).

A topic the controller configured (``TopicInfo.configs`` not None) gets,
in this broker's store, its whole config from the controller: Kafka's
defaults, then the controller's overrides, then the broker's own configs of
an internal topic (those keep their logs whole: safety over an override).
A topic the controller never configured keeps what the store holds, so
``Broker.alter_topic_configs`` (tools, tests) still sets it.  Sans-IO: this
decides what to write; the broker writes it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping

from partlog.controller.cluster_meta import TopicInfo
from partlog.kafka.topic_config import TopicConfig

__all__ = ["TopicConfigSync"]


class TopicConfigSync:
    """The overrides this broker last applied, per configured topic (in
    memory: a restarted broker applies every configured topic's once)."""

    def __init__(self, internal_configs: Mapping[str, Mapping[str, str | int]]) -> None:
        self._internal = internal_configs
        self._applied: dict[uuid.UUID, tuple[tuple[str, str], ...]] = {}

    def pending(self, topics: Iterable[TopicInfo]) -> list[tuple[TopicInfo, dict[str, str | int]]]:
        """Each configured topic whose overrides changed since last applied,
        with the whole config its store gets (TopicConfigError when the
        overrides do not validate here: a newer controller's key)."""
        out = []
        live = set()
        for t in topics:
            live.add(t.topic_id)
            if t.configs is None or self._applied.get(t.topic_id) == t.configs:
                continue
            merged = {**dict(t.configs), **self._internal.get(t.name, {})}
            whole: dict[str, str | int] = dict(TopicConfig().with_configs(merged).to_configs())
            out.append((t, whole))
        for gone in self._applied.keys() - live:
            del self._applied[gone]
        return out

    def applied(self, topic: TopicInfo) -> None:
        assert topic.configs is not None
        self._applied[topic.topic_id] = topic.configs
