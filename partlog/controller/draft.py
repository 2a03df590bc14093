"""The embedded controller's staged change (:class:`Draft`): the changes
one call of :class:`~partlog.controller.core.Controller` decides, over its
committed state, before the core writes them in one transaction and applies
them.  Every partition change goes through :meth:`Draft.set_part`, which
completes reassignments, keeps the ELR normalized (:mod:`partlog.controller.elr`),
bumps the epochs and records the event.  No I/O.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator
from dataclasses import replace
from typing import Protocol

from partlog.controller import elr
from partlog.controller.cluster_meta import NO_LEADER, PartitionInfo
from partlog.controller.model import (
    REASON_BROKER_FENCED,
    REASON_PREFERRED,
    REASON_UNCLEAN_SHUTDOWN,
    BrokerFenced,
    BrokerRegistration,
    ControllerConfig,
    ControllerEvent,
    IsrChanged,
    LeaderChanged,
)
from partlog.controller.reassignment import completed
from partlog.controller.rules import Overrides, after_fencing, bump, preferred
from partlog.kafka.records import TopicIdPartition

__all__ = ["Draft"]


class Committed(Protocol):
    """What a draft reads of the controller's committed state (the core's
    :class:`~partlog.controller.core.Controller`)."""

    config: ControllerConfig
    _brokers: dict[int, BrokerRegistration]
    _parts: dict[TopicIdPartition, PartitionInfo]
    _topic_names: dict[uuid.UUID, str]
    _offline: set[TopicIdPartition]
    _configs: dict[uuid.UUID, Overrides]


class Draft:
    """Changes staged over the controller's state: validate and decide
    against it, then write it in one transaction, then apply it."""

    def __init__(self, c: Committed) -> None:
        self.c = c
        self.brokers: dict[int, BrokerRegistration] = {}
        self.parts: dict[TopicIdPartition, PartitionInfo] = {}
        self.new_topics: dict[uuid.UUID, tuple[str, int]] = {}  # created or grown: id -> (name, partitions)
        self.deleted_topics: dict[uuid.UUID, str] = {}
        self.configs: dict[uuid.UUID, Overrides] = {}
        self.broker_epoch_last: int | None = None
        self.events: list[ControllerEvent] = []
        self.elections = 0
        self.unclean_elections = 0
        self.preferred_elections = 0

    def empty(self) -> bool:
        staged = (self.brokers, self.parts, self.new_topics, self.deleted_topics, self.configs)
        return not any(staged) and self.broker_epoch_last is None

    def broker(self, broker_id: int) -> BrokerRegistration | None:
        b = self.brokers.get(broker_id)
        return b if b is not None else self.c._brokers.get(broker_id)

    def alive(self, broker_id: int) -> bool:
        b = self.broker(broker_id)
        return b is not None and not b.fenced

    def part(self, tp: TopicIdPartition) -> PartitionInfo:
        p = self.parts.get(tp)
        return p if p is not None else self.c._parts[tp]

    def all_parts(self) -> Iterator[tuple[TopicIdPartition, PartitionInfo]]:
        for tp in self.c._parts:
            yield tp, self.part(tp)
        for tp, p in self.parts.items():
            if tp not in self.c._parts:
                yield tp, p

    def topic_name(self, tp: TopicIdPartition) -> str:
        name = self.c._topic_names.get(tp.topic_id)
        return name if name is not None else self.new_topics[tp.topic_id][0]

    def set_part(self, tp: TopicIdPartition, new: PartitionInfo, reason: str, unclean: bool = False) -> None:
        old = self.part(tp)
        # Every change of the ISR or the brokers may complete a reassignment.
        new = bump(old, elr.normalized(completed(new, self.alive)))
        if new == old:
            return
        self.parts[tp] = new
        name = self.topic_name(tp)
        if new.leader != old.leader:
            if new.leader != NO_LEADER:
                self.elections += 1
                self.unclean_elections += unclean
                self.preferred_elections += reason == REASON_PREFERRED
            self.events.append(
                LeaderChanged(name, tp.partition, new.leader, new.leader_epoch, new.isr, reason, unclean)
            )
        else:
            self.events.append(IsrChanged(name, tp.partition, new.isr, new.partition_epoch, reason))

    def fence(self, broker_ids: Iterable[int], reason: str) -> None:
        """Fence these brokers and fix up every partition they touch."""
        dead = set()
        for bid in broker_ids:
            b = self.broker(bid)
            assert b is not None and not b.fenced, f"fencing broker {bid} that is not alive"
            self.brokers[bid] = replace(b, fenced=True)
            self.events.append(BrokerFenced(bid, b.broker_epoch, reason))
            dead.add(bid)
        self.reconcile(dead, REASON_BROKER_FENCED)

    def elect_preferred(self) -> None:
        for tp, p in list(self.all_parts()):
            new = preferred(p, self.alive)
            if new is not p:
                self.set_part(tp, new, REASON_PREFERRED)

    def min_isr(self, tp: TopicIdPartition) -> int:
        return elr.min_isr(self.c._configs.get(tp.topic_id), self.c.config.min_insync_replicas)

    def forget(self, broker_id: int) -> None:
        """An unclean shutdown: ``broker_id`` leaves every ISR and ELR."""
        for tp, p in list(self.all_parts()):
            self.set_part(tp, elr.forget(p, broker_id, self.min_isr(tp)), REASON_UNCLEAN_SHUTDOWN)

    def reconcile(self, brokers: set[int], reason: str) -> None:
        """Re-derive ISR and leader of every partition replicated on
        ``brokers`` or offline."""
        unclean = self.c.config.unclean_leader_election_enable
        for tp, p in list(self.all_parts()):
            if tp in self.c._offline or p.leader == NO_LEADER or not brokers.isdisjoint(p.replicas):
                new, was_unclean = after_fencing(p, self.alive, unclean, self.min_isr(tp))
                self.set_part(tp, new, reason, was_unclean)
