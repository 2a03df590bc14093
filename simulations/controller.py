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
from typing import TYPE_CHECKING, Protocol

from partlog.controller.cluster_meta import NO_LEADER, StaticMetadata
from simulations.context import SimContext
from simulations.scenario import EventKind, EventSpec, FailureMode
from simulations.topology import COORDINATOR_ID, with_leaders, without_brokers

if TYPE_CHECKING:
    from simulations.commit_server import CommitServer


class Viewer(Protocol):
    def set_view(self, view: StaticMetadata) -> None: ...


class Failable(Viewer, Protocol):
    def fail(self, mode: FailureMode = ...) -> None: ...


class Coordinator(Protocol):
    alive: bool
    az: str

    def fail(self, mode: FailureMode = ...) -> None: ...

    def take_over(self, az: str, live_azs: Sequence[str]) -> None: ...

    def set_live_azs(self, live_azs: Sequence[str]) -> None: ...


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
        coordinator: Coordinator | None,
        rng: random.Random,
        servers: Mapping[int, CommitServer] | None = None,
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
        # Commit target id (COORDINATOR_ID for the coordinator) -> its store's server.
        self._servers = servers or {}
        self._dead: set[int] = set()
        self._lost_azs: set[str] = set()
        # Active slowdowns: event number -> (what: "broker", "az" or "link", which, factor).
        self._active_slow: dict[int, tuple[str, object, float]] = {}
        self._next_slow = 0
        # (virtual ms, what) for reports and plots.
        self.log: list[tuple[float, str]] = []

    def schedule(self, events: Sequence[EventSpec]) -> None:
        for e in events:
            self.ctx.loop.at(e.at_s * 1000, self._fire, e)

    def _fire(self, e: EventSpec) -> None:
        kind = e.kind
        if kind is EventKind.MOVE_LEADERS:
            self._move_leaders(e.partitions)
        elif kind is EventKind.BROKER_FAILURE:
            self._fail([e.broker], f"broker {e.broker} fails ({e.mode})", e.mode)
        elif kind is EventKind.AZ_LOSS:
            ids = [b for b, az in sorted(self.ctx.broker_azs.items()) if az == e.az]
            self._lost_azs.add(e.az)
            md = self.ctx.scenario.metadata
            self.ctx.az_dead_until_ms[e.az] = self.ctx.loop.now_ms + md.session_timeout_ms + md.broker_propagation_ms
            for p in self._producers.get(e.az, ()):
                p.alive = False
            c = self._coordinator
            if c is not None and c.alive and c.az == e.az:
                self._fail_coordinator(e.mode, self.ctx.scenario.metadata.coordinator_failover_ms)
            self._fail(ids, f"AZ {e.az} lost (brokers {ids}, {e.mode})", e.mode)
        elif kind is EventKind.COORDINATOR_FAILURE:
            if self._coordinator is not None and self._coordinator.alive:
                self.log.append((self.ctx.loop.now_ms, f"coordinator fails ({e.mode})"))
                self._fail_coordinator(e.mode, e.failover_ms)
        elif kind is EventKind.NETWORK_DEGRADATION:
            where = f"AZ {e.az}'s cross-AZ links" if e.az else "every cross-AZ link"
            self._slow(f"{where} {e.factor:g}x slower", e, ("link", e.az))
        elif kind is EventKind.SLOW_BROKER:
            self._slow(f"broker {e.broker}'s commit store {e.factor:g}x slower", e, ("broker", e.broker))
        else:
            self._slow(f"AZ {e.az}'s commit stores {e.factor:g}x slower", e, ("az", e.az))

    def _slow(self, what: str, e: EventSpec, target: tuple[str, object]) -> None:
        """A slowdown from now until ``e.duration_s`` later (0: the end).
        Slowdowns overlap: each node (and link) runs at the largest factor
        among those active on it, and a heal ends only its own."""
        self.log.append((self.ctx.loop.now_ms, what))
        self._next_slow += 1
        key = self._next_slow
        self._active_slow[key] = (target[0], target[1], e.factor)
        self._refresh_slow()
        if e.duration_s > 0:

            def heal() -> None:
                self.log.append((self.ctx.loop.now_ms, f"{what.rsplit(' ', 2)[0]} back to normal"))
                del self._active_slow[key]
                self._refresh_slow()

            self.ctx.loop.after(e.duration_s * 1000, heal)

    def _refresh_slow(self) -> None:
        """Each commit store's factor from the active slowdowns on its node
        or its node's AZ now (the coordinator's AZ is where it runs now);
        each degraded link's from those on it."""
        active = list(self._active_slow.values())
        azs = self.ctx.broker_azs
        for node, server in self._servers.items():
            c = self._coordinator
            az = c.az if node == COORDINATOR_ID and c is not None else azs.get(node, "")
            factors = [f for kind, k, f in active if (kind == "broker" and k == node) or (kind == "az" and k == az)]
            server.slow_factor = max(factors, default=1.0)
        links: dict[str, float] = {}
        for kind, k, f in active:
            if kind == "link":
                links[str(k)] = max(links.get(str(k), 1.0), f)
        self.ctx.network.set_degraded(links)

    def _fail_coordinator(self, mode: FailureMode, failover_ms: int) -> None:
        """The coordinator dies; a replica in the next live AZ takes over
        after ``failover_ms``, and brokers reach it once they learn of it."""
        c = self._coordinator
        assert c is not None
        c.fail(mode)
        azs = list(self.ctx.scenario.cluster.azs)

        def take_over() -> None:
            live = [a for a in azs if a not in self._lost_azs]
            if not live:
                self.log.append((self.ctx.loop.now_ms, "coordinator has no live AZ to fail over to"))
                return
            i = azs.index(c.az)
            new_az = next(a for a in azs[i + 1 :] + azs[: i + 1] if a in live)
            self.log.append((self.ctx.loop.now_ms, f"coordinator failed over to {new_az}"))
            c.take_over(new_az, live)
            self._refresh_slow()  # a slowed AZ slows the coordinator that runs there now

        self.ctx.loop.after(failover_ms + self.ctx.scenario.metadata.broker_propagation_ms, take_over)

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

    def _fail(self, ids: list[int], what: str, mode: FailureMode) -> None:
        self.log.append((self.ctx.loop.now_ms, what))
        md = self.ctx.scenario.metadata
        # Until brokers learn of the fencing, an acks=all commit whose ISR
        # holds a dead follower waits (simulations/context.py: ack_stall_ms).
        fenced_at = self.ctx.loop.now_ms + md.session_timeout_ms + md.broker_propagation_ms
        for b in ids:
            self._dead.add(b)
            self._brokers[b].fail(mode)
            self.ctx.dead_until_ms[b] = fenced_at
        # The controller notices when the session times out.
        self.ctx.loop.after(md.session_timeout_ms, self._fence, list(ids))

    def _fence(self, ids: list[int]) -> None:
        self.log.append((self.ctx.loop.now_ms, f"brokers {ids} fenced, leaders moved"))
        self._publish(without_brokers(self.truth, ids))
        c = self._coordinator
        if c is not None:
            # The coordinator's state topic drops the replicas of lost AZs at
            # the same moment partlog's ISRs drop the fenced followers.
            live = [a for a in self.ctx.scenario.cluster.azs if a not in self._lost_azs]
            self.ctx.loop.after(self.ctx.scenario.metadata.broker_propagation_ms, c.set_live_azs, live)
