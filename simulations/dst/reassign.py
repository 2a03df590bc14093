"""Partition reassignment as an operator's fault (``fuzz --reassign``;
docs/design/reassignment.md, "The simulation").

:meth:`Reassigner.inject` is the fault: through the admin source the
simulation already holds (``ControllerMetadata``, a
:class:`~partlog.controller.reassignment.ReassignmentAdmin`), it moves a
random settled partition of the topic to a target of the same size (its
leader moved away to a broker outside the replicas, or one follower),
sometimes cancelled again a moment later, or now and then cancels a move
in progress; at most
``REASSIGNMENTS_IN_PROGRESS_MAX`` moves are in progress (past it, a
cancel).  Moves are journalled; ``reassign_started``,
``reassign_completed`` and ``reassign_cancelled`` are counted as the
admin's view sees the partition move and settle.

The checks a move adds (beside every invariant the run checks anyway):

* a broker whose metadata (as its replica manager last applied it) no
  longer lists it among a partition's replicas, and that neither leads nor
  follows it, holds no log for it (``DROP_GRACE_S`` after first seen:
  a restarted broker applies its first metadata a moment after its store
  opens) (:meth:`Reassigner.check_dropped`, periodically and at the end);
* liveness: once faults stop, every move completes or is cancelled
  (:meth:`Reassigner.settle`, the controller's own state).
"""

from __future__ import annotations

import asyncio
import functools
import random
from collections.abc import Awaitable, Callable

from partlog.broker.server import Broker
from partlog.controller.reassignment import reassigning, target_of
from partlog.kafka.records import TopicIdPartition
from partlog.store import MetadataStore, StoreError
from simulations.dst.cluster import Cluster
from simulations.dst.config import REASSIGNMENTS_IN_PROGRESS_MAX, TOPIC
from simulations.dst.journal import Journal

# Of the operator's actions while a move is in progress: a cancel.
CANCEL_SHARE = 0.15
# Of the moves: the leader's replica moved away (else one follower's).
LEADER_MOVE_SHARE = 0.5
# Of the moves started: cancelled again this soon (virtual seconds), racing
# the added replica's catch-up and the move's completion.
CANCEL_SOON_SHARE = 0.25
CANCEL_SOON_S = (0.0, 0.3)
# How long a broker may hold a log of a partition it no longer replicates
# once its roles say so (virtual seconds; it applies metadata in milliseconds).
DROP_GRACE_S = 2.0
# Once faults stop (and the run's settle_s passed), every move is done within this.
MOVES_SETTLE_S = 60.0
# The watch's period (virtual seconds), as the checker's.
WATCH_INTERVAL_S = 0.5


class Reassigner:
    """The operator's moves, their accounting, and the checks they add (module doc)."""

    def __init__(self, cluster: Cluster, journal: Journal) -> None:
        self.cluster = cluster
        self.journal = journal
        # Partition index -> the target of its move in progress.
        self.moving: dict[int, tuple[int, ...]] = {}
        # (broker, partition) -> (that broker's incarnation, when first seen
        # holding a log it no longer replicates).
        self.holding: dict[tuple[int, TopicIdPartition], tuple[Broker, float]] = {}

    async def inject(
        self, k: int, rng: random.Random, schedule: Callable[[float, Callable[[], Awaitable[None]]], None]
    ) -> None:
        """Fault number ``k``: a move started (``schedule``, the injector's:
        maybe its cancel a moment later) or a move in progress cancelled."""
        admin = self.cluster.admin
        topic = admin.topic(TOPIC) if admin is not None else None
        if admin is None or topic is None:
            return
        parts = topic.partitions
        moving = [i for i, p in enumerate(parts) if reassigning(p)]
        target: tuple[int, ...] | None = None
        if moving and (len(moving) >= REASSIGNMENTS_IN_PROGRESS_MAX or rng.random() < CANCEL_SHARE):
            index = rng.choice(moving)
            what = f"cancel the move of partition {index} to {list(target_of(parts[index]))}"
        else:
            settled = [i for i, p in enumerate(parts) if not reassigning(p) and p.replicas]
            if not settled:
                return
            index = rng.choice(settled)
            p = parts[index]
            outside = [b for b in sorted(self.cluster.az_of) if b not in p.replicas]
            if not outside:
                return
            followers = [r for r in p.replicas if r != p.leader]
            away = p.leader if p.leader in p.replicas and (rng.random() < LEADER_MOVE_SHARE or not followers) else None
            gone = away if away is not None else rng.choice(followers)
            kept = [r for r in p.replicas if r != gone]
            kept.insert(rng.randint(0, len(kept)), rng.choice(outside))
            target = tuple(kept)
            what = f"move partition {index} {list(p.replicas)} -> {list(target)}" + (" (its leader)" if away else "")
        answer = (await admin.alter_reassignments({(TOPIC, index): target}))[(TOPIC, index)]
        if answer is not None:
            self.journal.event(f"#{k} reassign: {what}: refused {answer.error.name}: {answer.message[:80]}")
            return
        if target is None:
            self.journal.event(f"#{k} reassign: {what}")
        else:
            self.journal.count("reassign_started", f"#{k} {what}")
            self.moving[index] = target
            if rng.random() < CANCEL_SOON_SHARE:
                schedule(rng.uniform(*CANCEL_SOON_S), functools.partial(self._cancel, k, index, target))
        self.look()

    async def _cancel(self, k: int, index: int, target: tuple[int, ...]) -> None:
        """Fault ``k``'s move of partition ``index`` cancelled, if the
        admin's view still shows it in progress (the controller may have
        completed it meanwhile: NO_REASSIGNMENT_IN_PROGRESS, journalled)."""
        admin = self.cluster.admin
        topic = admin.topic(TOPIC) if admin is not None else None
        if admin is None or topic is None or not reassigning(topic.partitions[index]):
            return
        answer = (await admin.alter_reassignments({(TOPIC, index): None}))[(TOPIC, index)]
        refused = "" if answer is None else f": refused {answer.error.name}: {answer.message[:80]}"
        self.journal.event(f"#{k} reassign: cancel the move of partition {index} to {list(target)}{refused}")
        self.look()

    def look(self) -> None:
        """Count the moves the admin's view shows settled: completed on
        their target, else cancelled (or reverted by an answer that was
        lost); adopt moves it shows that this did not start (a start whose
        answer was lost)."""
        admin = self.cluster.admin
        topic = admin.topic(TOPIC) if admin is not None else None
        if topic is None:
            return
        for i, p in enumerate(topic.partitions):
            if reassigning(p):
                self.moving.setdefault(i, target_of(p))
        for i, target in sorted(self.moving.items()):
            p = topic.partitions[i]
            if reassigning(p):
                continue
            del self.moving[i]
            done = p.replicas == target
            self.journal.count(
                "reassign_completed" if done else "reassign_cancelled",
                f"partition {i} on {list(p.replicas)}" + ("" if done else f" (not {list(target)})"),
            )

    def check_dropped(self) -> None:
        """No broker holds a log of a partition its applied metadata says
        it no longer replicates, once it neither leads nor follows it, for
        longer than DROP_GRACE_S (module doc)."""
        now = self.cluster.loop.time()
        for bid, broker in sorted(self.cluster.brokers.items()):
            # Roles being taken (the lock held): the drop comes at the end.
            if broker.store._closed or broker.replicas._roles.locked():
                continue
            for tp in self.cluster.partitions:
                info = broker.replicas.metadata.partition(tp)
                key = (bid, tp)
                if (
                    info is None
                    or not info.replicas
                    or bid in info.replicas
                    or broker.replicas.replica_epoch(tp) is not None
                    or _as_created(broker.store, tp)
                ):
                    self.holding.pop(key, None)
                    continue
                seen = self.holding.get(key)
                if seen is None or seen[0] is not broker:
                    self.holding[key] = (broker, now)
                elif now - seen[1] >= DROP_GRACE_S:
                    self.journal.violated(
                        f"broker {bid} still holds a log of {tp} {now - seen[1]:.1f} s after its metadata took it "
                        f"out of the replicas {list(info.replicas)} (log {broker.store.log_start_offset(tp)}.."
                        f"{broker.store.log_end_offset(tp)})"
                    )

    async def watch(self) -> None:
        """The periodic part (the checker's node runs it)."""
        while True:
            await asyncio.sleep(WATCH_INTERVAL_S)
            self.look()
            self.check_dropped()

    async def settle(self, within_s: float) -> None:
        """Liveness once faults stop: no move left in progress at the
        controller within ``within_s``; then every broker taken out of a
        partition's replicas has dropped its log."""
        left = self._in_progress()
        for _ in range(int(within_s / WATCH_INTERVAL_S)):
            if left == []:
                break
            await asyncio.sleep(WATCH_INTERVAL_S)
            left = self._in_progress()
        if left != []:
            self.journal.violated(f"moves still in progress {within_s:.0f} s after the run settled: {left}")
        await asyncio.sleep(DROP_GRACE_S + 2 * WATCH_INTERVAL_S)
        self.look()
        self.check_dropped()

    def _in_progress(self) -> list[str] | None:
        """The moves the controller holds in progress (None: it is down)."""
        server = self.cluster.controller
        if server is None or server._controller is None:
            return None
        topic = server.controller.topic(TOPIC)
        if topic is None:
            return []
        parts = enumerate(topic.partitions)
        return [f"{i}: {list(p.replicas)} adding {list(p.adding)}" for i, p in parts if reassigning(p)]


def _as_created(store: MetadataStore, tp: TopicIdPartition) -> bool:
    """Whether ``store`` holds nothing of ``tp`` (not created, or an empty log from 0)."""
    try:
        return store.log_end_offset(tp) == store.log_start_offset(tp) == 0
    except (KeyError, StoreError):
        return True
