"""The acting controller on etcd, one part of
:class:`~partlog.controller.etcd_meta.EtcdMetadata` (brokers campaign by
default): etcd's election recipe over the session lease (a candidate key
per lease, the lowest create revision leads), then
:func:`partlog.controller.etcd_controller.plan` after every change of the
view, its partition changes batched into few transactions
(:mod:`partlog.controller.etcd_batch`), each guarded by the candidate key (a
deposed controller's writes fail) and each partition in it by its own mod
revision (a stale decision fails).  The decisions themselves are sans-IO
(:mod:`partlog.controller.etcd_controller`); this is their shell.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from partlog.controller.etcd_batch import CHUNK_ATTEMPTS_MAX, Chunk, Guard, chunk_changes, iter_chunks, still_valid
from partlog.controller.etcd_connection import ETCD_ERRORS, EtcdConnection, put_revision
from partlog.controller.etcd_controller import PartitionChange, Plan, plan
from partlog.controller.etcd_layout import EtcdView, Keys, pack_value
from partlog.controller.etcd_session import EtcdSession
from partlog.runtime import Clock

__all__ = ["EtcdActingController"]

log = logging.getLogger(__name__)

# How often the acting controller re-plans without a change (preferred
# leaders fall due, a conflict to retry).
CONTROLLER_TICK_MS = 1_000
# The most a pass waits after the last one, which waits as long as its
# plan took (a plan reads every partition: ~0.1 s at 30,000).
CONTROLLER_PLAN_PACING_S_MAX = 0.5
# Transactions (chunks of partition changes) the acting controller keeps in
# flight in one pass: etcd commits those that arrive together in one raft
# round, and 64 chunks of ~58 partitions cover a broker leading 3,000.
CONTROLLER_TXNS_IN_FLIGHT_MAX = 64


class EtcdActingController:
    """Campaigns with ``session``'s lease and, while it leads, writes what
    the rules want of ``view``.  ``view_changed`` returns the event the
    metadata source sets at its next adoption of the view; ``schedule_adopt``
    asks for that adoption; ``failed`` and ``backoff`` are the source's."""

    def __init__(
        self,
        conn: EtcdConnection,
        keys: Keys,
        view: EtcdView,
        session: EtcdSession,
        *,
        unclean_leader_election_enable: bool,
        leader_imbalance_check_interval_ms: int,
        failed: Callable[[str, BaseException], None],
        backoff: Callable[[int], float],
        view_changed: Callable[[], asyncio.Event],
        schedule_adopt: Callable[[], None],
        clock: Clock,
    ) -> None:
        self.clock = clock
        self.conn = conn
        self.keys = keys
        self.view = view
        self.session = session
        self.unclean_leader_election_enable = unclean_leader_election_enable
        self.leader_imbalance_check_interval_ms = leader_imbalance_check_interval_ms
        self._failed = failed
        self._backoff = backoff
        self._view_changed = view_changed
        self._schedule_adopt = schedule_adopt
        self._next_preferred_ms = 0.0
        # How long the last plan took: the next pass waits as long.
        self._plan_s = 0.0
        self.is_controller = False
        # Counters for tests, metrics and the benchmark.
        self.elections_won = 0
        self.controller_writes = 0
        # Partition changes dropped because something they were decided on
        # moved (the next pass re-plans them).
        self.controller_conflicts = 0
        # Transactions sent for partition changes (batched: few per pass).
        self.controller_txns = 0
        self.leader_elections = 0
        # Seconds spent in partition transactions (the benchmark's
        # elections/s divides by it).
        self.controller_write_s = 0.0

    async def run(self) -> None:
        """Campaign with each lease of the session, act while leading.  Runs
        until cancelled."""
        bi = self.session.broker
        attempt = 0
        while True:
            await self.session.registered.wait()
            lease = self.session.lease_id
            key = self.keys.candidate(lease)
            try:
                c = await self.conn.client()
                t = c.transactions
                ok, resp = await self.conn.txn(
                    [t.create(key) == 0], [t.put(key, pack_value(bi.broker_id), lease=lease)], [t.get(key)]
                )
                rev = put_revision(resp) if ok else (resp[0][0][1].create_revision if resp and resp[0] else 0)
            except ETCD_ERRORS as e:
                self._failed("campaign", e)
                await asyncio.sleep(self._backoff(attempt))
                attempt += 1
                continue
            attempt = 0
            if not rev:
                continue  # the lease ended between: campaign with the next one
            while lease == self.session.lease_id and self.session.registered.is_set():
                leading = self.view.leader_candidate() == key and self.view.candidates.get(key) == rev
                if leading and not self.is_controller:
                    self.is_controller = True
                    self.elections_won += 1
                    self._next_preferred_ms = self.clock.monotonic() * 1000 + self.leader_imbalance_check_interval_ms
                    log.info("etcd: broker %d is the acting controller (candidate revision %d)", bi.broker_id, rev)
                elif not leading and self.is_controller:
                    self.is_controller = False
                    log.warning("etcd: broker %d is no longer the acting controller", bi.broker_id)
                # Taken before the pass: a change that arrives during it
                # wakes the next pass at once.
                changed = self._view_changed()
                if self.is_controller and not self.view.frozen:
                    try:
                        await self._pass(key, rev)
                    except ETCD_ERRORS as e:
                        self._failed("controller write", e)
                    except Exception as e:
                        # A bug must not end the role silently while the
                        # candidacy lives on: log, count, re-plan later.
                        log.exception("etcd controller pass failed")
                        self._failed("controller pass", e)
                    # Planning reads the whole view: while a burst of events
                    # (its own writes' among them) keeps waking it, it takes
                    # at most about half of this process's loop.
                    await asyncio.sleep(self._plan_s)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(CONTROLLER_TICK_MS / 1000):
                        await changed.wait()
            self.is_controller = False

    async def _pass(self, candidate: bytes, candidate_rev: int) -> None:
        """Write what :func:`plan` wants; stop at the first lost compare
        (the watch brings what changed, and the next pass re-plans)."""
        began = self.clock.monotonic()
        now_ms = began * 1000
        due = self.leader_imbalance_check_interval_ms > 0 and now_ms >= self._next_preferred_ms
        todo = plan(self.view, unclean=self.unclean_leader_election_enable, elect_preferred=due)
        self._plan_s = min(self.clock.monotonic() - began, CONTROLLER_PLAN_PACING_S_MAX)
        if due:
            self._next_preferred_ms = now_ms + self.leader_imbalance_check_interval_ms
        if not todo.empty():
            await self.write_plan(todo, candidate, candidate_rev)

    async def write_plan(self, todo: Plan, candidate: bytes, candidate_rev: int) -> None:
        """Write a plan: its partition changes batched into few transactions
        (:mod:`partlog.controller.etcd_batch`), each partition guarded by the
        revisions it was planned on and every transaction by our candidacy;
        incarnations are accepted only when every change landed."""
        c = await self.conn.client()
        t = c.transactions
        guard = t.create(candidate) == candidate_rev
        if todo.changes:
            # Elections first, and alone: a partition without a leader takes
            # no produce, one that only shrinks its ISR still does.  The ISR
            # changes wait until every election landed, so they compete with
            # none of them, neither in etcd's raft rounds nor in the watchers'
            # queues (a broker's fencing shrinks twice as many ISRs as it
            # hands over leaderships, with RF 3).
            elections = [ch for ch in todo.changes if ch.election]
            others = [ch for ch in todo.changes if not ch.election]
            for part in (elections, others):
                if part and not await self._write_changes(part, candidate, candidate_rev):
                    return  # the watch brings what changed; the next pass re-plans
        for bid, epoch in todo.accept:
            ok, _ = await self.conn.txn(
                [guard, t.mod(self.keys.broker(bid)) == epoch], [t.put(self.keys.incarnation(bid), pack_value(epoch))]
            )
            if ok:
                self.controller_writes += 1
                log.info("etcd controller: broker %d incarnation epoch=%d accepted", bid, epoch)

    async def _write_changes(self, changes: list[PartitionChange], candidate: bytes, candidate_rev: int) -> bool:
        """Write ``changes`` in chunks, several in flight; whether every
        change landed.  Every chunk ends before this returns (a failed one
        does not leave others writing beside the next pass); then the first
        error is raised."""
        in_flight = asyncio.Semaphore(CONTROLLER_TXNS_IN_FLIGHT_MAX)

        async def write(chunk: Chunk) -> bool:
            async with in_flight:
                return await self._write_chunk(chunk)

        # The chunks are independent (no partition is in two): in flight
        # together, etcd commits them in few raft rounds.  Each is sent as
        # soon as it is packed, so the first are on their way while the
        # rest are packed.
        began = self.clock.monotonic()
        tasks: list[asyncio.Task[bool]] = []
        try:
            for chunk in iter_chunks(changes, self.keys, Guard(candidate, "create", candidate_rev)):
                tasks.append(asyncio.ensure_future(write(chunk)))
                await asyncio.sleep(0)
        except BaseException:
            for task in tasks:
                task.cancel()
            raise
        done = await asyncio.gather(*tasks, return_exceptions=True)
        self.controller_write_s += self.clock.monotonic() - began
        self._schedule_adopt()
        for d in done:
            if isinstance(d, BaseException):
                raise d
        return all(done)

    async def _write_chunk(self, chunk: Chunk) -> bool:
        """One chunk's transaction; after a lost compare, again with only the
        changes whose every guard still holds (their partitions did not move),
        at most CHUNK_ATTEMPTS_MAX times.  Whether every change landed."""
        c = await self.conn.client()
        t = c.transactions
        for _ in range(CHUNK_ATTEMPTS_MAX):
            compare = [(t.create if g.target == "create" else t.mod)(g.key) == g.revision for g in chunk.compares]
            puts = [t.put(k, v) for k, v in chunk.puts]
            # A lost compare reads back every compared key, in the revision
            # the compare was evaluated at: what moved, without a second trip.
            failure = [t.get(g.key) for g in chunk.compares]
            ok, resp = await self.conn.txn(compare, puts, failure)
            self.controller_txns += 1
            if ok:
                self._landed(chunk, put_revision(resp))
                return True
            now: dict[bytes, tuple[int, int] | None] = {}
            for g, got in zip(chunk.compares, resp, strict=True):
                now[g.key] = (got[0][1].create_revision, got[0][1].mod_revision) if got else None
            keep, dropped = still_valid(chunk, self.keys, now)
            self.controller_conflicts += len(dropped)
            for ch in dropped:
                log.info("etcd controller: %s/%d changed under the plan: re-planned later", ch.topic, ch.tp.partition)
            if not keep:
                return False
            # Re-packing fewer changes than fitted before makes one chunk.
            (chunk,) = chunk_changes(keep, self.keys, chunk.compares[0])
            if not dropped:
                log.warning("etcd controller: a chunk lost a compare that still holds; retrying")
        return False

    def _landed(self, chunk: Chunk, revision: int) -> None:
        """A chunk committed at ``revision`` (one revision for all its puts)."""
        for ch in chunk.changes:
            self.controller_writes += 1
            self.leader_elections += ch.election
            self.view.set_partition(ch.tp, ch.new, revision)
            log.info(
                "etcd controller: %s/%d leader %d -> %d epoch %d isr %s (%s%s)",
                ch.topic, ch.tp.partition, ch.old.leader, ch.new.leader, ch.new.leader_epoch, list(ch.new.isr),
                ch.reason, ", unclean" if ch.unclean else "",
            )  # fmt: skip
