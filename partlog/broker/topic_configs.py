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
:class:`TopicConfigSync` decides what to write (sans-IO);
:class:`TopicConfigApplier` paces the broker's writes.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Coroutine, Iterable, Mapping
from typing import Any

from partlog.controller.cluster_meta import TopicInfo
from partlog.kafka.topic_config import TopicConfig

__all__ = ["INTERNAL_TOPIC_CONFIGS", "TopicConfigApplier", "TopicConfigSync"]


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

    def whole(self, t: TopicInfo, defaults: Mapping[str, str] | None = None) -> dict[str, str | int] | None:
        """The whole config ``t``'s store gets, if it changed since last
        applied (None: nothing to write)."""
        base = tuple(sorted((defaults or {}).items()))
        configs = t.configs
        if configs is None and (base or t.topic_id in self._applied):
            # Never configured by the controller, but the cluster's
            # dynamic defaults apply to it (and, once applied, their removal).
            configs = ()
        if configs is None or self._applied.get(t.topic_id) == (configs, base):
            return None
        merged = {**dict(base), **dict(configs), **self._internal.get(t.name, {})}
        return dict(TopicConfig().with_configs(merged).to_configs())

    def pending(
        self, topics: Iterable[TopicInfo], defaults: Mapping[str, str] | None = None
    ) -> list[tuple[TopicInfo, dict[str, str | int]]]:
        """Each configured topic whose overrides or ``defaults`` (topic
        config name -> the dynamic broker config's value) changed since last
        applied, with the whole config its store gets (TopicConfigError when
        they do not validate here: a newer controller's key)."""
        out = []
        live = set()
        for t in topics:
            live.add(t.topic_id)
            whole = self.whole(t, defaults)
            if whole is not None:
                out.append((t, whole))
        for gone in self._applied.keys() - live:
            del self._applied[gone]
        return out

    def applied(self, topic: TopicInfo, defaults: Mapping[str, str] | None = None) -> None:
        self._applied[topic.topic_id] = (topic.configs or (), tuple(sorted((defaults or {}).items())))


class TopicConfigApplier:
    """Runs :class:`TopicConfigSync` for a broker: ``apply_all`` at start
    (before it serves), ``schedule`` on every change of the metadata or of
    the dynamic defaults.  A scheduled pass writes the pending topics
    ``TOPICS_PER_SLICE`` at a time, handing the event loop back between
    slices: a dynamic default changes every topic's config at once (each
    write a durable store transaction), and a broker that wrote a thousand
    in one go missed its controller heartbeats and was fenced (librdkafka's
    0081 against a cluster with the suite's topics).  Each topic's config is
    computed just before it is written, so a pass never writes a stale one;
    one pass runs at a time, and a change meanwhile runs another."""

    TOPICS_PER_SLICE = 8

    def __init__(
        self,
        sync: TopicConfigSync,
        topics: Callable[[], Iterable[TopicInfo]],
        defaults: Callable[[], Mapping[str, str]],
        write: Callable[[TopicInfo, dict[str, str | int]], bool],
        spawn: Callable[[Coroutine[Any, Any, None]], None],
    ) -> None:
        self.sync = sync
        self._topics, self._defaults, self._write, self._spawn = topics, defaults, write, spawn
        self._running = False
        self._again = False

    def apply_all(self) -> None:
        defaults = self._defaults()
        for topic, whole in self.sync.pending(self._topics(), defaults):
            if self._write(topic, whole):
                self.sync.applied(topic, defaults)

    def schedule(self) -> None:
        if self._running:
            self._again = True
            return
        self._running = True
        self._spawn(self._run())

    async def _run(self) -> None:
        try:
            while True:
                self._again = False
                todo = [t.topic_id for t, _ in self.sync.pending(self._topics(), self._defaults())]
                for i in range(0, len(todo), self.TOPICS_PER_SLICE):
                    by_id = {t.topic_id: t for t in self._topics()}
                    defaults = self._defaults()
                    for tid in todo[i : i + self.TOPICS_PER_SLICE]:
                        t = by_id.get(tid)
                        whole = None if t is None else self.sync.whole(t, defaults)
                        if t is not None and whole is not None and self._write(t, whole):
                            self.sync.applied(t, defaults)
                    await asyncio.sleep(0)
                if not self._again:
                    return
        finally:
            self._running = False
