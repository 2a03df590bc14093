"""The cost of a metadata commit, the same model for every commit target.

A commit target (a partlog partition leader, or KIP-1164's coordinator) is
one store: a single writer whose journal commits groups (partlog's
``MetadataStore`` group commit; PostgreSQL's WAL flush groups the same way).
So each target is a queueing server: commits wait in FIFO order; when the
server is free it takes every waiting commit, up to
``GROUP_COMMIT_BATCHES_MAX`` batches, as one group, and serves the group in

    fixed (one sync and one transaction, sampled) + batches x us_per_batch

The two designs differ only in where commits go and in what the scenario
states about each side's store (:class:`simulations.scenario.CommitCost`):
by default both sides get the same store, so a comparison isolates topology.

The real ``MetadataStore`` still sequences every commit (offsets,
idempotence) when it arrives: arrival order is service order here, so the
answers are the same; the server only decides *when* they are ready.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable
from typing import Any

from partlog.store import GROUP_COMMIT_BATCHES_MAX
from simulations.event_loop import EventLoop
from simulations.latency import LatencySampler
from simulations.scenario import CommitCost


class EmpiricalSampler:
    """Draws from measured samples (linear interpolation between order
    statistics): a distribution the user measured, not a fitted shape."""

    __slots__ = ("_random", "_samples")

    def __init__(self, samples_ms: tuple[float, ...], rng: random.Random) -> None:
        assert samples_ms, "an empirical distribution needs samples"
        self._samples = sorted(samples_ms)
        self._random = rng.random

    def sample(self) -> float:
        s = self._samples
        if len(s) == 1:
            return s[0]
        x = self._random() * (len(s) - 1)
        i = int(x)
        if i >= len(s) - 1:
            return s[-1]
        return s[i] + (s[i + 1] - s[i]) * (x - i)


class CommitCostSampler:
    """Service time of one group commit of ``batches`` batches."""

    __slots__ = ("_fixed", "_ms_per_batch")

    def __init__(self, cost: CommitCost, rng: random.Random) -> None:
        self._fixed: LatencySampler | EmpiricalSampler = (
            EmpiricalSampler(cost.samples_ms, rng) if cost.samples_ms else LatencySampler(cost.fixed, rng)
        )
        self._ms_per_batch = cost.us_per_batch / 1000.0

    def sample(self, batches: int) -> float:
        return self._fixed.sample() + batches * self._ms_per_batch


class CommitServer:
    """One commit target's store as a FIFO group-commit server."""

    __slots__ = (
        "_busy",
        "_cost",
        "_generation",
        "_in_service",
        "_loop",
        "_queue",
        "_service_end_ms",
        "batches_max",
        "busy_ms",
        "groups",
        "served",
        "slow_factor",
        "wait_ms",
    )

    def __init__(self, loop: EventLoop, cost: CommitCostSampler, batches_max: int = GROUP_COMMIT_BATCHES_MAX) -> None:
        self._loop = loop
        self._cost = cost
        self.batches_max = batches_max
        # (arrival ms, batches, callback, args) waiting for the server
        self._queue: deque[tuple[float, int, Callable[..., None], tuple[Any, ...]]] = deque()
        self._busy = False
        self._in_service: list[tuple[float, int, Callable[..., None], tuple[Any, ...]]] = []
        # Bumped by abort(): a group in service when its node died never finishes.
        self._generation = 0
        self._service_end_ms = 0.0
        # A slow-broker or slow-az event multiplies service times by this.
        self.slow_factor = 1.0
        # What a run reports: time the server was busy, groups and commits
        # served, each commit's wait in the queue.
        self.busy_ms = 0.0
        self.groups = 0
        self.served = 0
        self.wait_ms: list[float] = []

    def submit(self, batches: int, done: Callable[..., None], *args: Any) -> None:
        """Queue a commit of ``batches`` batches; ``done(*args)`` runs when
        its group has been served (synced)."""
        self._queue.append((self._loop.now_ms, batches, done, args))
        if not self._busy:
            self._start()

    def _start(self) -> None:
        q = self._queue
        now = self._loop.now_ms
        group = [q.popleft()]
        total = group[0][1]
        while q and total + q[0][1] <= self.batches_max:
            item = q.popleft()
            total += item[1]
            group.append(item)
        for arrived, *_ in group:
            self.wait_ms.append(now - arrived)
        service = self._cost.sample(total) * self.slow_factor
        self.busy_ms += service
        self._service_end_ms = now + service
        self.groups += 1
        self.served += len(group)
        self._busy = True
        self._in_service = group
        self._loop.at(now + service, self._finish, self._generation)

    def _finish(self, generation: int) -> None:
        if generation != self._generation:
            return  # aborted: its callbacks already ran
        group, self._in_service = self._in_service, []
        self._busy = False
        for _, _, done, args in group:
            done(*args)
        if self._queue and not self._busy:
            self._start()

    def abort(self) -> None:
        """The node died: every commit it holds (in service or queued) is
        finished now, and each ``done`` sees its node dead and answers (or
        not) as a dead node does."""
        held = self._in_service + list(self._queue)
        if self._in_service:
            # The group in service stops now: its remaining time was not spent.
            self.busy_ms -= max(0.0, self._service_end_ms - self._loop.now_ms)
        self._in_service = []
        self._queue.clear()
        self._busy = False
        self._generation += 1
        for _, _, done, args in held:
            done(*args)

    def utilization(self, duration_ms: float) -> float:
        """Share of ``duration_ms`` spent serving (a group still in service
        at the end counts only up to it)."""
        if duration_ms <= 0:
            return 0.0
        over = max(0.0, self._service_end_ms - duration_ms) if self._busy else 0.0
        return min(1.0, (self.busy_ms - over) / duration_ms)
