"""The scenario's events, played as a controller would: leadership moves,
broker failures and AZ loss produce new metadata versions, which reach
brokers after ``broker_propagation_ms`` and clients after
``client_propagation_ms``.  Until then each acts on what it last knew: the
window in which a representative commits to a leader that moved (the
dev-list thread's exception 2).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Protocol

from partlog.controller.cluster_meta import NO_LEADER, StaticMetadata
from simulations.context import SimContext
from simulations.scenario import EventKind, EventSpec
from simulations.topology import with_leaders, without_brokers


class Viewer(Protocol):
    def set_view(self, view: StaticMetadata) -> None: ...


class Failable(Viewer, Protocol):
    def fail(self) -> None: ...


class Stoppable(Protocol):
    alive: bool


class Controller:
    def __init__(
        self,
        ctx: SimContext,
        truth: StaticMetadata,
        brokers: dict[int, Failable],
        clients: Mapping[str, Sequence[Viewer]],
        producers: Mapping[str, Sequence[Stoppable]],
        coordinator: Stoppable | None,
        rng: random.Random,
    ) -> None:
        """``clients``: per AZ, whatever routes by client metadata;
        ``producers``: per AZ, what stops when the AZ is lost."""
        self.ctx = ctx
        self.truth = truth
        self._brokers = brokers
        self._clients = clients
        self._producers = producers
        self._coordinator = coordinator
        self._rng = rng
        self._dead: set[int] = set()
        # (virtual ms, what) for reports and plots.
        self.log: list[tuple[float, str]] = []

    def schedule(self, events: Sequence[EventSpec]) -> None:
        for e in events:
            self.ctx.loop.at(e.at_s * 1000, self._fire, e)

    def _fire(self, e: EventSpec) -> None:
        if e.kind is EventKind.MOVE_LEADERS:
            self._move_leaders(e.partitions)
        elif e.kind is EventKind.BROKER_FAILURE:
            self._fail([e.broker], f"broker {e.broker} fails")
        else:
            ids = [b for b, az in sorted(self.ctx.broker_azs.items()) if az == e.az]
            for p in self._producers.get(e.az, ()):
                p.alive = False
            if self._coordinator is not None and self.ctx.scenario.cluster.coordinator_az == e.az:
                self._coordinator.alive = False
            self._fail(ids, f"AZ {e.az} lost (brokers {ids})")

    def _publish(self, truth: StaticMetadata) -> None:
        self.truth = truth
        loop = self.ctx.loop
        md = self.ctx.scenario.metadata
        for b in self._brokers.values():
            loop.after(md.broker_propagation_ms, b.set_view, truth)
        for viewers in self._clients.values():
            for v in viewers:
                loop.after(md.client_propagation_ms, v.set_view, truth)

    def _move_leaders(self, count: int) -> None:
        """Move ``count`` partitions (chosen at random among those with
        another live replica) to their next replica, as a reassignment or a
        preferred-leader election does."""
        [topic] = self.truth.topics()
        candidates = [
            p
            for p, info in enumerate(topic.partitions)
            if info.leader != NO_LEADER and any(r != info.leader and r not in self._dead for r in info.replicas)
        ]
        chosen = sorted(self._rng.sample(candidates, min(count, len(candidates))))
        moves = {}
        for p in chosen:
            info = topic.partitions[p]
            reps = info.replicas
            i = reps.index(info.leader)
            moves[p] = next(r for r in reps[i + 1 :] + reps[:i] if r not in self._dead)
        self.log.append((self.ctx.loop.now_ms, f"{len(moves)} partitions change leader"))
        self._publish(with_leaders(self.truth, moves))

    def _fail(self, ids: list[int], what: str) -> None:
        self.log.append((self.ctx.loop.now_ms, what))
        for b in ids:
            self._dead.add(b)
            self._brokers[b].fail()
        # The controller notices when the session times out.
        self.ctx.loop.after(self.ctx.scenario.metadata.session_timeout_ms, self._fence, list(ids))

    def _fence(self, ids: list[int]) -> None:
        self.log.append((self.ctx.loop.now_ms, f"brokers {ids} fenced, leaders moved"))
        self._publish(without_brokers(self.truth, ids))
