"""The simulation's fault injector: when a fault happens, which one, and
what it does to the cluster, the network and the clocks; then the
restart or heal that ends it.

Faults arrive as a Poisson process at the summed rates of
:class:`simulations.dst.config.Faults`; the time and kind of each come
from one stream (seeded by the run's seed), and fault number k draws its
details from a stream of its own (``f"{seed}/{k}"``).  Dropping a fault
(shrinking, ``only_faults``) therefore leaves every other fault's time,
kind and details as they were.  The network's conditions (partitions
between AZs, black holes, cut node pairs, slow links) are :class:`Links`,
which the simulated network asks for every segment.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import random
import shutil
from collections.abc import Awaitable, Callable
from typing import Any

from partlog.broker.server import Broker
from partlog.kafka.errors import Errors
from partlog.kafka.records import DeleteRecordsRequest
from simulations.dst.cluster import Cluster
from simulations.dst.config import Faults
from simulations.dst.invariants import Observed, check_controller
from simulations.dst.journal import Journal
from simulations.dst.reassign import Reassigner
from simulations.dst.runtime import SimNetwork, run_node
from simulations.dst.txn import TxnWorkload
from simulations.dst.workload import Ledger, Workload


class SimulatedCrash(asyncio.CancelledError):
    """Raised inside walmgr's DeleteObjects call: its process ends right
    there, the objects deleted and the confirmation not recorded."""


class Links:
    """Which nodes reach which, and how fast: what the faults set and
    :class:`simulations.dst.runtime.SimNetwork` asks (``latency_s``,
    ``reachable``, ``black_hole``)."""

    def __init__(self, network: SimNetwork, faults: Faults, az_of_node: Callable[[str], str]) -> None:
        self.network = network
        self.faults = faults
        self._az = az_of_node
        self.down_links: set[frozenset[str]] = set()  # AZ pairs (partitions)
        self.black_holes: set[frozenset[str]] = set()  # of the down AZ pairs: SYNs vanish
        self.cut_pairs: set[frozenset[str]] = set()  # node pairs (controller isolation)
        self.slow_links: dict[frozenset[str], float] = {}  # AZ pair -> extra seconds
        self.slow_directions: dict[tuple[str, str], float] = {}  # (from node, to node) -> extra seconds

    def latency_s(self, a: str, b: str) -> float:
        az_a, az_b = self._az(a), self._az(b)
        lo, hi = self.faults.latency_same_az_ms if az_a == az_b else self.faults.latency_cross_az_ms
        extra = self.slow_links.get(frozenset({az_a, az_b}), 0.0) if self.slow_links else 0.0
        if self.slow_directions:
            extra += self.slow_directions.get((a, b), 0.0)
        return self.network.rng.uniform(lo, hi) / 1000 + extra

    def reachable(self, a: str, b: str) -> bool:
        if frozenset({self._az(a), self._az(b)}) in self.down_links:
            return False
        return not self.cut_pairs or frozenset({a, b}) not in self.cut_pairs

    def black_hole(self, a: str, b: str) -> bool:
        return frozenset({self._az(a), self._az(b)}) in self.black_holes

    def clear(self) -> None:
        self.down_links.clear()
        self.black_holes.clear()
        self.cut_pairs.clear()
        self.slow_links.clear()
        self.slow_directions.clear()


class FaultInjector:
    """Draws the faults while ``on`` and injects them (module doc)."""

    def __init__(
        self,
        seed: int,
        faults: Faults,
        only_faults: frozenset[int] | None,
        cluster: Cluster,
        workload: Workload,
        observed: Observed,
        journal: Journal,
        txn: TxnWorkload | None = None,
    ) -> None:
        self.seed = seed
        # The transactional workload: its faults are drawn only with it.
        self.txn = txn
        # The consume-transform-produce transformers' names (set once they start).
        self.transformers: list[str] = []
        self.faults = faults
        # The faults (by number, in the order drawn) injected; None: all.
        # Shrinking narrows this down.
        self.only_faults = only_faults
        self.faults_drawn = 0
        self.cluster = cluster
        self.workload = workload
        self.ledger: Ledger = workload.ledger
        self.observed = observed
        self.journal = journal
        self.loop = cluster.loop
        self.network = cluster.network
        self.rng = random.Random(seed * 7919 + 1)
        # Each broker's clock starts skewed within clock_skew_ms (the
        # stream's first draws).
        cluster.skew_ms.update(
            {bid: self.rng.randint(-faults.clock_skew_ms, faults.clock_skew_ms) for bid in cluster.az_of}
        )
        self.links = Links(cluster.network, faults, cluster.az_of_node)
        # The operator's moves (Faults.reassign_per_min), None when off.
        self.reassigner = Reassigner(cluster, journal) if faults.reassign_per_min > 0 else None
        self.delete_calls = 0
        self.on = True
        self._task: asyncio.Task[None] | None = None
        # Scheduled restarts and heals: task -> whether its action has begun.
        self._pending: dict[asyncio.Task[Any], list[bool]] = {}

    def start(self) -> None:
        self._task = run_node("world", self._fault_loop())

    def stop(self) -> list[asyncio.Task[Any]]:
        """Faults stop: no new ones, the scheduled restarts and heals that
        have not begun are cancelled, and every link is healed.  The ones
        under way are returned, to be waited for (a restart cut off halfway
        would leave a broker half started)."""
        self.on = False
        if self.txn is not None:
            self.txn.coordinator.crash_at_markers = None
            self.txn.coordinator.lose_markers.clear()
        if self._task is not None:
            self._task.cancel()
        under_way = []
        for t, begun in list(self._pending.items()):
            if begun[0]:
                under_way.append(t)
            else:
                t.cancel()
        self.links.clear()
        return under_way

    async def _fault_loop(self) -> None:
        f = self.faults
        rates = {
            "broker_crash": f.broker_crashes_per_min,
            "az_partition": f.az_partitions_per_min,
            "controller_crash": f.controller_crashes_per_min,
            "walmgr_crash": f.walmgr_crashes_per_min,
            "producer_restart": f.producer_restarts_per_min,
            "controller_isolation": f.controller_isolations_per_min,
            "walmgr_isolation": f.walmgr_isolations_per_min,
            "connection_reset": f.connection_resets_per_min,
            "slow_link": f.slow_links_per_min,
            "clock_jump": f.clock_jumps_per_min,
            "delete_records": f.delete_records_per_min,
            "retention": f.retention_changes_per_min,
            "power_loss": f.power_losses_per_min,
        }
        # Each absent when off: the other shapes' draws stay as they were.
        if f.slow_replies_per_min > 0:
            rates["slow_reply"] = f.slow_replies_per_min
        if f.create_partitions_per_min > 0:
            rates["create_partitions"] = f.create_partitions_per_min
        if f.reassign_per_min > 0:
            rates["reassign"] = f.reassign_per_min
        if self.txn is not None:
            rates |= {
                "txn_coordinator_crash": f.txn_coordinator_crashes_per_min,
                "txn_marker_loss": f.txn_marker_losses_per_min,
                "txn_leader_crash": f.txn_leader_crashes_per_min,
                "transformer_crash": f.transformer_crashes_per_min,
            }
        total = sum(rates.values())
        if total <= 0:
            return
        while self.on:
            await asyncio.sleep(self.rng.expovariate(total / 60))
            if not self.on:
                return
            kind = self.rng.choices(list(rates), weights=list(rates.values()))[0]
            # Fault number k draws its details from its own stream: dropping
            # one (shrinking) leaves every other fault's time and kind as it was.
            k = self.faults_drawn
            self.faults_drawn += 1
            if self.only_faults is not None and k not in self.only_faults:
                self.journal.event(f"#{k} {kind}: skipped")
                continue
            await self._inject(k, kind, random.Random(f"{self.seed}/{k}"))

    async def _inject(self, k: int, kind: str, rng: random.Random) -> None:
        f = self.faults
        cluster = self.cluster
        links = self.links
        count = self.journal.count
        if kind == "broker_crash":
            alive = sorted(cluster.brokers)
            if len(alive) <= 1:
                return
            bid = rng.choice(alive)
            await cluster.crash_broker(bid)
            count(kind, f"#{k} broker {bid}")
            self._schedule(rng.uniform(*f.restart_after_s), functools.partial(cluster.restart_broker, bid))
        elif kind == "az_partition":
            a, b = rng.sample(sorted(set(cluster.az_of.values())), 2)
            link = frozenset({a, b})
            if link in links.down_links:
                return
            links.down_links.add(link)
            hole = rng.random() < f.black_hole_share
            if hole:
                links.black_holes.add(link)
            self.network.heal_check()
            count(kind, f"#{k} {a}-{b}{' (black hole)' if hole else ''}")
            self._schedule(rng.uniform(*f.partition_s), functools.partial(self._heal, link))
        elif kind == "controller_crash" and cluster.controller is not None:
            # Its last decisions (an ISR shrink it just committed) stand while
            # it is down: the invariants judge by them, not by an older sample.
            check_controller(cluster, self.observed, self.journal)
            await cluster.crash_controller()
            count(kind, f"#{k}")
            self._schedule(rng.uniform(*f.restart_after_s), self._restart_controller)
        elif kind == "producer_restart" and self.workload.restarts:
            name = rng.choice(sorted(self.workload.restarts))
            self.workload.restarts[name].set()
            count(kind, f"#{k} {name}")
        elif kind == "walmgr_crash" and not cluster.walmgr_down():
            await cluster.crash_walmgr()
            count(kind, f"#{k}")
            self._schedule(rng.uniform(*f.restart_after_s), self._restart_walmgr)
        elif kind in ("controller_isolation", "walmgr_isolation"):
            # A broker (a zombie leader) or walmgr (a stale view of leaders).
            node = "wm" if kind == "walmgr_isolation" else f"b{rng.choice(sorted(cluster.az_of))}"
            pair = frozenset({node, "ctl"})
            if pair in links.cut_pairs:
                return
            links.cut_pairs.add(pair)
            self.network.heal_check()
            count(kind, f"#{k} {node}")
            self._schedule(rng.uniform(*f.partition_s), functools.partial(self._heal_pair, pair))
        elif kind == "connection_reset":
            open_ = [t for ts in self.network.transports.values() for t in ts if not t.is_closing()]
            if open_:
                t = rng.choice(open_)
                self.network.reset(t)
                count(kind, f"#{k} {t.node}->{t.peer.node if t.peer else '?'}")
        elif kind == "slow_link":
            a, b = rng.sample(sorted(set(cluster.az_of.values())), 2)
            link = frozenset({a, b})
            extra_ms = rng.uniform(*f.slow_link_extra_ms)
            links.slow_links[link] = extra_ms / 1000
            count(kind, f"#{k} {a}-{b} +{extra_ms:.0f} ms")
            self._schedule(rng.uniform(*f.partition_s), functools.partial(self._unslow, link))
        elif kind == "slow_reply":
            src, dst = rng.sample(sorted(cluster.az_of), 2)
            direction = (f"b{src}", f"b{dst}")
            extra_ms = rng.uniform(*f.slow_reply_extra_ms)
            links.slow_directions[direction] = extra_ms / 1000
            count(kind, f"#{k} b{src}->b{dst} +{extra_ms:.0f} ms")
            self._schedule(rng.uniform(*f.partition_s), functools.partial(self._unslow_direction, direction))
        elif kind == "delete_records":
            await self._delete_records(k, rng)
        elif kind == "create_partitions" and cluster.controller is not None:
            grown = await cluster.create_partitions(rng.randint(1, 3))
            if grown:
                count(kind, f"#{k} {grown}")
        elif kind == "reassign" and self.reassigner is not None and cluster.controller is not None:
            await self.reassigner.inject(k, rng, self._schedule)
        elif kind == "power_loss":
            alive = sorted(b for b, broker in cluster.brokers.items() if not broker.store._closed)
            if len(alive) <= 1:
                return
            bid = rng.choice(alive)
            broker = cluster.brokers[bid]
            # The disk as of now; what the broker writes from here on until
            # the power goes is lost.
            snapshot = os.path.join(cluster.data_dir, f"power-{k}")
            os.makedirs(snapshot)
            broker.store.copy_to(snapshot)
            self._schedule(
                rng.uniform(*f.power_loss_unsynced_s),
                functools.partial(self._power_off, k, bid, broker, snapshot, rng.uniform(*f.restart_after_s)),
            )
        elif kind == "retention":
            limit = rng.choice(f.retention_bytes)
            await cluster.set_retention(limit)
            count(kind, f"#{k} retention.bytes={limit}")
            self._schedule(rng.uniform(*f.retention_s), functools.partial(cluster.set_retention, -1))
        elif kind in ("txn_coordinator_crash", "txn_marker_loss", "txn_leader_crash", "transformer_crash"):
            await self._inject_txn(k, kind, rng)
        elif kind == "clock_jump":
            bid = rng.choice(sorted(cluster.az_of))
            cluster.skew_ms[bid] = rng.randint(-f.clock_skew_ms, f.clock_skew_ms)
            count(kind, f"#{k} broker {bid} to {cluster.skew_ms[bid]:+d} ms")

    async def _inject_txn(self, k: int, kind: str, rng: random.Random) -> None:
        """The transaction faults (Faults: txn_*, transformer_crashes_per_min)."""
        assert self.txn is not None
        coordinator = self.txn.coordinator
        if kind == "txn_coordinator_crash":
            # Armed: the host crashes once the first marker of the next
            # decided transaction is written (the coordinator counts it).
            restart_after = rng.uniform(*self.faults.restart_after_s)
            coordinator.crash_at_markers = functools.partial(self._crash_coordinator, restart_after)
            self.journal.event(f"#{k} {kind} armed")
        elif kind == "txn_marker_loss":
            lost = [rng.choice(("request", "answer")) for _ in range(rng.randint(1, 3))]
            coordinator.lose_markers.extend(lost)
            self.journal.event(f"#{k} {kind}: the next marker calls lose their {', '.join(lost)}")
        elif kind == "txn_leader_crash":
            # The leader of a partition an open transaction has written to.
            open_ = [t for _, t in sorted(self.txn.ledger.open.items()) if t.acked]
            if not open_:
                return
            txn = rng.choice(open_)
            tp = rng.choice(sorted({txn.sent[v] for v in txn.acked}, key=lambda t: (str(t.topic_id), t.partition)))
            info = self.observed.partition_info.get(tp)
            alive = [b for b, x in self.cluster.brokers.items() if not x.store._closed]
            if info is None or info.leader not in alive or len(alive) <= 1:
                return
            await self.cluster.crash_broker(info.leader)
            self.journal.count(kind, f"#{k} broker {info.leader}, leader of {tp.partition} in {txn.key}")
            self._schedule(
                rng.uniform(*self.faults.restart_after_s), functools.partial(self.cluster.restart_broker, info.leader)
            )
        elif kind == "transformer_crash" and self.transformers:
            name = rng.choice(self.transformers)
            self.workload.restarts[name].set()
            self.journal.count(kind, f"#{k} {name}")

    async def _crash_coordinator(self, restart_after_s: float, bid: int) -> None:
        """The armed coordinator crash: its host broker, restarted later."""
        alive = [b for b, x in self.cluster.brokers.items() if not x.store._closed]
        if not self.on or bid not in alive or len(alive) <= 1:
            return
        self.journal.count("txn_coordinator_crash", f"broker {bid} after its first marker")
        await self.cluster.crash_broker(bid)
        self._schedule(restart_after_s, functools.partial(self.cluster.restart_broker, bid))

    async def _delete_records(self, k: int, rng: random.Random) -> None:
        """DeleteRecords on a partition's current leader, up to a few
        entries below its HWM, as an operator would."""
        tp = rng.choice(self.cluster.partitions)
        info = self.observed.partition_info.get(tp)
        leader = self.cluster.brokers.get(info.leader) if info is not None else None
        if info is None or leader is None or leader.store._closed:
            return
        if leader.replicas.leader_epoch(tp) != info.leader_epoch:
            return  # the broker does not lead it (yet): an admin's request would be refused
        st = leader.store.partition_state(tp)
        target = max(st["log_start_offset"], st["high_watermark"] - rng.randint(0, 5))
        [answer] = await asyncio.to_thread(leader.store.delete_records, [DeleteRecordsRequest(tp, target)])
        if answer.errors == Errors.NONE:
            self.ledger.deleted_below[tp] = max(self.ledger.deleted_below.get(tp, 0), answer.low_watermark)
            self.journal.count(
                "delete_records", f"#{k} {tp.partition} below {answer.low_watermark} on broker {info.leader}"
            )

    def _schedule(self, delay: float, action: Callable[[], Awaitable[None]]) -> None:
        """Run ``action()`` after ``delay`` (a restart, a heal); kept, so the
        end of the faulty period can cancel the ones still waiting and let
        the ones under way finish (a restart cut off halfway would leave a
        broker half started).  The coroutine is made only when it runs: one
        cancelled while it waits would otherwise never be awaited."""
        begun = [False]

        async def later() -> None:
            await asyncio.sleep(delay)
            begun[0] = True
            await action()

        task = run_node("world", later())
        self._pending[task] = begun
        task.add_done_callback(lambda t: self._pending.pop(t, None))

    async def _power_off(self, k: int, bid: int, broker: Broker, snapshot: str, restart_after_s: float) -> None:
        cluster = self.cluster
        if cluster.brokers.get(bid) is not broker or broker.store._closed:
            shutil.rmtree(snapshot, ignore_errors=True)
            return  # it crashed (and maybe restarted) meanwhile
        await cluster.crash_broker(bid)
        path = os.path.join(cluster.data_dir, "brokers", str(bid))
        os.replace(os.path.join(snapshot, "data.mdb"), os.path.join(path, "data.mdb"))
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(path, "lock.mdb"))
        # The snapshot's LMDB holds everything acknowledged then (copy_to
        # applied the journal first); the journal written since is lost too.
        shutil.rmtree(os.path.join(path, "journal"), ignore_errors=True)
        shutil.rmtree(snapshot, ignore_errors=True)
        self.observed.forget_hwms(bid)
        cluster.boots[bid] += 1  # the machine reboots
        self.journal.count("power_loss", f"#{k} broker {bid}")
        self._schedule(restart_after_s, functools.partial(cluster.restart_broker, bid))

    async def _heal(self, link: frozenset[str]) -> None:
        self.links.down_links.discard(link)
        self.links.black_holes.discard(link)
        self.journal.event(f"heal {sorted(link)}")

    async def _heal_pair(self, pair: frozenset[str]) -> None:
        self.links.cut_pairs.discard(pair)
        self.journal.event(f"heal {sorted(pair)}")

    async def _unslow(self, link: frozenset[str]) -> None:
        self.links.slow_links.pop(link, None)
        self.journal.event(f"fast {sorted(link)}")

    async def _unslow_direction(self, direction: tuple[str, str]) -> None:
        self.links.slow_directions.pop(direction, None)
        self.journal.event(f"fast {direction[0]}->{direction[1]}")

    async def _restart_controller(self) -> None:
        async with self.cluster.restarting_ctl:
            if self.cluster.controller is None and self.on:
                await run_node("ctl", self.cluster.start_controller())
                self.journal.count("controller_restart")

    async def _restart_walmgr(self) -> None:
        async with self.cluster.restarting_wm:
            if self.cluster.walmgr_down() and self.on:
                try:
                    await run_node("wm", self.cluster.start_walmgr())
                except Exception as e:
                    self.journal.event(f"walmgr restart failed: {type(e).__name__}: {e}")
                    return
                self.journal.count("walmgr_restart")

    def maybe_crash_mid_plan(self, keys: Any) -> None:
        """After walmgr's DeleteObjects: maybe end walmgr in the middle of
        its plan: these keys are deleted, and it never records that S3
        confirmed them."""
        self.delete_calls += 1
        share = self.faults.walmgr_crashes_mid_plan_share
        if not self.on or share <= 0 or self.cluster.walmgr_down():
            return
        rng = random.Random(f"{self.seed}/delete/{self.delete_calls}")
        if rng.random() >= share:
            return
        self.journal.count("walmgr_crash_mid_plan", f"after deleting {len(keys)} keys, before recording them")
        restart_after = rng.uniform(*self.faults.restart_after_s)
        self.loop.call_soon(lambda: run_node("world", self._crash_walmgr_then_restart(restart_after)))
        raise SimulatedCrash()

    async def _crash_walmgr_then_restart(self, after_s: float) -> None:
        await self.cluster.crash_walmgr()
        self._schedule(after_s, self._restart_walmgr)
