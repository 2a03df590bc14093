"""The acting controller on etcd, one part of
:class:`~partlog.controller.etcd_meta.EtcdMetadata` (brokers campaign by
default): etcd's election recipe over the session lease (a candidate key
per lease, the lowest create revision leads), then
:func:`partlog.controller.etcd_controller.plan` after every change of the
view, each decision written by one transaction guarded by the candidate key
(a deposed controller's writes fail) and by the partition's mod revision (a
stale decision fails).  The decisions themselves are sans-IO
(:mod:`partlog.controller.etcd_controller`); this is their shell.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from partlog.controller.cluster_meta import NO_LEADER
from partlog.controller.etcd_connection import ETCD_ERRORS, EtcdConnection, put_revision
from partlog.controller.etcd_controller import PartitionChange, Plan, plan
from partlog.controller.etcd_layout import EtcdView, Keys, enc_part, pack_value
from partlog.controller.etcd_session import EtcdSession
from partlog.runtime import Clock

__all__ = ["EtcdActingController"]

log = logging.getLogger(__name__)

# How often the acting controller re-plans without a change (preferred
# leaders fall due, a conflict to retry).
CONTROLLER_TICK_MS = 1_000
# Partition transactions the acting controller keeps in flight in one pass.
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
        self.is_controller = False
        # Counters for tests, metrics and the benchmark.
        self.elections_won = 0
        self.controller_writes = 0
        self.controller_conflicts = 0
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
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(CONTROLLER_TICK_MS / 1000):
                        await changed.wait()
            self.is_controller = False

    async def _pass(self, candidate: bytes, candidate_rev: int) -> None:
        """Write what :func:`plan` wants; stop at the first lost compare
        (the watch brings what changed, and the next pass re-plans)."""
        now_ms = self.clock.monotonic() * 1000
        due = self.leader_imbalance_check_interval_ms > 0 and now_ms >= self._next_preferred_ms
        todo = plan(self.view, unclean=self.unclean_leader_election_enable, elect_preferred=due)
        if due:
            self._next_preferred_ms = now_ms + self.leader_imbalance_check_interval_ms
        if not todo.empty():
            await self.write_plan(todo, candidate, candidate_rev)

    async def write_plan(self, todo: Plan, candidate: bytes, candidate_rev: int) -> None:
        """Write a plan, each change guarded by the revisions it was planned
        on and by our candidacy; stop after the first lost compare."""
        c = await self.conn.client()
        t = c.transactions
        guard = t.create(candidate) == candidate_rev
        in_flight = asyncio.Semaphore(CONTROLLER_TXNS_IN_FLIGHT_MAX)

        async def write(ch: PartitionChange) -> bool:
            # Everything compared was read by plan(), before any await.
            compare = [guard, t.mod(self.keys.part(ch.tp)) == ch.part_revision]
            compare.append(t.create(self.keys.topic(ch.topic)) == ch.topic_revision)
            if ch.new.leader != NO_LEADER:
                compare.append(t.mod(self.keys.broker(ch.new.leader)) == ch.leader_epoch_seen)
            async with in_flight:
                ok, resp = await self.conn.txn(compare, [t.put(self.keys.part(ch.tp), enc_part(ch.new))])
            if not ok:
                self.controller_conflicts += 1
                return False
            self.controller_writes += 1
            self.leader_elections += ch.election
            self.view.set_partition(ch.tp, ch.new, put_revision(resp))
            log.info(
                "etcd controller: %s/%d leader %d -> %d epoch %d isr %s (%s%s)",
                ch.topic, ch.tp.partition, ch.old.leader, ch.new.leader, ch.new.leader_epoch, list(ch.new.isr),
                ch.reason, ", unclean" if ch.unclean else "",
            )  # fmt: skip
            return True

        if todo.changes:
            # The partitions' transactions are independent (each compares its
            # own revision): in flight together, etcd commits them in few
            # raft rounds instead of one fsync each.
            began = self.clock.monotonic()
            done = await asyncio.gather(*(write(ch) for ch in todo.changes))
            self.controller_write_s += self.clock.monotonic() - began
            self._schedule_adopt()
            if not all(done):
                return  # the watch brings what changed; the next pass re-plans
        for bid, epoch in todo.accept:
            ok, _ = await self.conn.txn(
                [guard, t.mod(self.keys.broker(bid)) == epoch], [t.put(self.keys.incarnation(bid), pack_value(epoch))]
            )
            if ok:
                self.controller_writes += 1
                log.info("etcd controller: broker %d incarnation epoch=%d accepted", bid, epoch)
