"""``partlog bench metadata``: the embedded controller against etcd, same
cluster shape, same load, one run.

Both back ends get 3 broker sessions (one per AZ, no broker behind them:
what is measured is the metadata path alone), the same session timeout, and
``partitions`` partitions at replication factor 3 (in topics of at most
``PARTITIONS_PER_TOPIC_MAX``), so a broker leads a third of them.  Each size
of ``partitions`` is one run of both back ends (a fresh controller and a
fresh etcd).  Measured:

* **elections/s**: leader elections over the controller's time deciding and
  writing them durably, when a broker leading a third of the partitions is
  fenced.  Embedded: the core's ``tick`` that fences it (one fsynced LMDB
  transaction for all of them).  etcd: the acting controller's partition
  transactions (batched, each partition compare-and-swapped).
* **producer-id blocks/s**: ``blocks`` blocks, ``concurrency`` requests in
  flight over the 3 brokers.
* **propagation p50/p99**: an ISR change (AlterPartition by the leader) until
  every broker's view holds it, ``rounds`` samples.
* **fencing**: a broker session stopped without a goodbye (a crash) until
  the cluster's view no longer lists it, and until every partition it led
  has a new leader there, ``fencing_rounds`` samples.

Every number is printed beside the embedded controller's, with the ratio
etcd / embedded, and verdicts against issue 32's targets: elections/s on
etcd at least ``ELECTIONS_RATIO_TARGET`` of the embedded controller's, and
a crash to new leaders within ``FAILOVER_P50_MS_TARGET`` (p50), which the
issue sets for a broker leading ``FAILOVER_TARGET_LED`` partitions.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from partlog.controller.client import ControllerMetadata
from partlog.controller.cluster_meta import BrokerInfo, PartitionInfo, TopicInfo
from partlog.controller.core import Controller, ControllerConfig
from partlog.controller.etcd_meta import EtcdMetadata
from partlog.controller.server import ControllerServer
from partlog.kafka.errors import Errors
from partlog.kafka.records import TopicIdPartition
from partlog.limits import PARTITIONS_PER_TOPIC_MAX
from partlog.tools.cluster_report import percentile
from partlog.tools.etcd_launcher import EtcdCluster

__all__ = ["MetadataBenchOptions", "print_report", "run"]

SESSION_TIMEOUT_MS = 3_000
HEARTBEAT_INTERVAL_MS = 500
BROKERS = 3
TOPIC = "bench"
# Bounds on the options: each sample costs a session timeout or a round
# trip through both back ends; these keep one run within minutes.  At the
# most, a broker leads 10,000 partitions (issue 32's target).
PARTITIONS_MAX = 30_000
SIZES_MAX = 4
BLOCKS_MAX = 100_000
ROUNDS_MAX = 10_000
# Kills of brokers 1, 2, ...: the sessions have no brokers behind them, so
# a restarted victim never rejoins an ISR, and a third kill (of the last
# ISR member) would take every partition offline, measuring nothing.
FENCING_ROUNDS_MAX = 2
WAIT_S = 60.0
# Issue 32's targets (etcd, 3 members on loopback).
ELECTIONS_RATIO_TARGET = 0.25
FAILOVER_P50_MS_TARGET = 5_000
FAILOVER_TARGET_LED = 10_000

Source = ControllerMetadata | EtcdMetadata
RETRIABLE = (Errors.COORDINATOR_NOT_AVAILABLE, Errors.REQUEST_TIMED_OUT)


@dataclass(frozen=True, slots=True)
class MetadataBenchOptions:
    partitions: tuple[int, ...] = (300,)
    blocks: int = 300
    concurrency: int = 8
    rounds: int = 50
    fencing_rounds: int = 2

    def __post_init__(self) -> None:
        sizes = self.partitions
        if type(sizes) is not tuple or not 1 <= len(sizes) <= SIZES_MAX:
            raise ValueError(f"--partitions takes 1 to {SIZES_MAX} sizes, got {sizes!r}")
        for v in sizes:
            if type(v) is not int or not BROKERS <= v <= PARTITIONS_MAX:
                raise ValueError(f"--partitions must be integers in [{BROKERS}, {PARTITIONS_MAX}], got {v!r}")
        for name, low, high in (
            ("blocks", 1, BLOCKS_MAX),
            ("concurrency", 1, 1_000),
            ("rounds", 1, ROUNDS_MAX),
            ("fencing_rounds", 1, FENCING_ROUNDS_MAX),
        ):
            v = getattr(self, name)
            if type(v) is not int or not low <= v <= high:
                raise ValueError(f"--{name.replace('_', '-')} must be an integer in [{low}, {high}], got {v!r}")


class _Side:
    """One back end: broker sessions and an admin view."""

    def __init__(self, name: str, make: Callable[[BrokerInfo | None], Source]) -> None:
        self.name = name
        self.make = make
        self.sources: dict[int, Source] = {}
        self.admin: Source | None = None

    async def start_broker(self, bid: int) -> None:
        s = self.make(BrokerInfo(bid, f"az{bid}", "127.0.0.1", 20_000 + bid))
        await s.start(timeout_ms=int(WAIT_S * 1000))
        self.sources[bid] = s

    async def start(self) -> None:
        for bid in range(1, BROKERS + 1):
            await self.start_broker(bid)
        self.admin = self.make(None)
        await self.admin.start(timeout_ms=int(WAIT_S * 1000))
        if isinstance(self.admin, EtcdMetadata):
            admin = self.admin
            await admin.wait_for(lambda: all(admin.view.accepted(b) for b in range(1, BROKERS + 1)), WAIT_S)

    async def until(self, done: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + WAIT_S
        while not done():
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name}: {what} did not happen within {WAIT_S:g} s")
            await asyncio.sleep(0.002)

    async def stop(self) -> None:
        for s in self.sources.values():
            await s.stop()
        if self.admin is not None:
            await self.admin.stop()


async def _blocks(side: _Side, opts: MetadataBenchOptions) -> float:
    todo = opts.blocks
    brokers = sorted(side.sources)
    handed: list[int] = []

    async def worker(i: int) -> None:
        nonlocal todo
        s = side.sources[brokers[i % len(brokers)]]
        bid = brokers[i % len(brokers)]
        while todo > 0:
            todo -= 1
            got = await s.allocate_producer_ids(bid)
            deadline = time.monotonic() + WAIT_S
            # Retriable answers (a session between registrations on a loaded
            # machine) are retried, as a broker does.
            while got in RETRIABLE and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
                got = await s.allocate_producer_ids(bid)
            if isinstance(got, Errors):
                raise RuntimeError(f"{side.name}: producer-id block refused: {got.name}")
            handed.append(got.first_producer_id)

    began = time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(opts.concurrency)))
    elapsed = time.perf_counter() - began
    if len(set(handed)) != len(handed):
        raise RuntimeError(f"{side.name}: a producer-id block was handed out twice")
    return len(handed) / elapsed


def topics(partitions: int) -> dict[str, int]:
    """The bench's topics for ``partitions`` partitions: ``bench``, then
    ``bench-1``... of at most PARTITIONS_PER_TOPIC_MAX each."""
    n = -(-partitions // PARTITIONS_PER_TOPIC_MAX)
    sizes = [partitions // n + (i < partitions % n) for i in range(n)]
    return {(TOPIC if i == 0 else f"{TOPIC}-{i}"): size for i, size in enumerate(sizes)}


def _led(admin: Source, names: list[str], victim: int) -> list[tuple[str, int]]:
    out = []
    for name in names:
        t = admin.topic(name)
        assert t is not None
        out += [(name, i) for i, p in enumerate(t.partitions) if p.leader == victim]
    return out


def _moved(admin: Source, led: list[tuple[str, int]], victim: int) -> Callable[[], bool]:
    """A check that every partition in ``led`` has a leader other than
    ``victim``.  It forgets the partitions already seen moved (the victim
    is not re-elected while it is down) and looks each topic up once per
    call: it runs every few ms on the loop that also carries the sessions
    and the acting controller being measured, and a full pass over 10,000
    partitions each time would slow down what it measures."""
    pending = list(led)

    def done() -> bool:
        topics: dict[str, TopicInfo | None] = {}
        while pending:
            name, i = pending[-1]
            if name not in topics:
                topics[name] = admin.topic(name)
            t = topics[name]
            if t is None or t.partitions[i].leader == victim:
                return False
            pending.pop()
        return True

    return done


async def _propagation(side: _Side, tid: Any, opts: MetadataBenchOptions) -> list[float]:
    """ISR shrink/expand of partition 0 by its leader, until every view has it."""
    tp = TopicIdPartition(tid, 0)
    admin = side.admin
    assert admin is not None
    views = [admin, *side.sources.values()]
    out = []
    for r in range(opts.rounds):
        await side.until(lambda: len({s.partition(tp) for s in views}) == 1, "views agreeing")
        p = admin.partition(tp)
        assert p is not None
        leader = side.sources[p.leader]
        isr = (p.leader,) if len(p.isr) > 1 else p.replicas
        began = time.perf_counter()
        got = await leader.alter_partition(p.leader, tp, p.leader_epoch, p.partition_epoch, isr)
        if not isinstance(got, PartitionInfo):
            raise RuntimeError(f"{side.name}: AlterPartition round {r} refused: {got!r}")
        epoch = got.partition_epoch

        def everywhere(epoch: int = epoch) -> bool:
            return all((q := s.partition(tp)) is not None and q.partition_epoch >= epoch for s in side.sources.values())

        await side.until(everywhere, "the ISR change reaching every broker")
        out.append((time.perf_counter() - began) * 1000)
    return out


async def _fencing(side: _Side, names: list[str], opts: MetadataBenchOptions) -> tuple[list[float], list[float], int]:
    """Crash a broker session; ms until it is gone from the view, and until
    every partition it led has another leader there; the most it led."""
    gone_ms, moved_ms = [], []
    admin = side.admin
    assert admin is not None
    led_max = 0
    for r in range(opts.fencing_rounds):
        victim = 1 + r % BROKERS
        led = _led(admin, names, victim)
        led_max = max(led_max, len(led))
        began = time.perf_counter()
        await side.sources.pop(victim).stop()
        await side.until(lambda v=victim: admin.broker(v) is None, "fencing")  # type: ignore[misc]
        gone_ms.append((time.perf_counter() - began) * 1000)

        await side.until(_moved(admin, led, victim), "re-election")
        moved_ms.append((time.perf_counter() - began) * 1000)
        await side.start_broker(victim)
        if isinstance(admin, EtcdMetadata):
            await side.until(lambda v=victim: admin.view.accepted(v), "the new incarnation's acceptance")  # type: ignore[misc]
    return gone_ms, moved_ms, led_max


def _embedded_elections(data_dir: str, partitions: int) -> tuple[int, float]:
    """The embedded core fencing a broker that leads a third of the
    partitions: (elections, seconds of the tick that decided and wrote them)."""
    c = Controller(ControllerConfig(data_dir, broker_session_timeout_ms=SESSION_TIMEOUT_MS), now_ms=0)
    try:
        epochs: dict[int, int] = {}
        for b in range(1, BROKERS + 1):
            got = c.register_broker(b, f"az{b}", "127.0.0.1", 20_000 + b, 0)
            assert not isinstance(got, Errors)
            epochs[b] = got
        for name, n in topics(partitions).items():
            c.create_topic(name, n, BROKERS)
        for b in range(2, BROKERS + 1):
            c.heartbeat(b, epochs[b], SESSION_TIMEOUT_MS)
        before = c.leader_elections
        began = time.perf_counter()
        c.tick(SESSION_TIMEOUT_MS + 1)
        return c.leader_elections - before, time.perf_counter() - began
    finally:
        c.close()


async def _elections_etcd(side: _Side, names: list[str]) -> tuple[int, float, int]:
    """Revoke the session of broker 1 (not the acting controller's if
    avoidable) and read the controller's own count and time, and the transactions it took."""
    ctl = next((s for s in side.sources.values() if isinstance(s, EtcdMetadata) and s.is_controller), None)
    if ctl is None:
        raise RuntimeError("etcd: no acting controller")
    victim = next(b for b, s in side.sources.items() if s is not ctl)
    admin = side.admin
    assert isinstance(admin, EtcdMetadata)
    led = _led(admin, names, victim)
    n0, s0, t0 = ctl.leader_elections, ctl.controller_write_s, ctl.controller_txns
    src = side.sources.pop(victim)
    assert isinstance(src, EtcdMetadata)
    await src.stop(revoke=True)
    await side.until(_moved(admin, led, victim), "re-election")
    # Elections are written first: the pass's other chunks (ISR changes) may
    # still be in flight; its time is counted when it ends.
    await side.until(lambda: ctl.controller_write_s > s0, "the controller's pass")
    n, s, txns = ctl.leader_elections - n0, ctl.controller_write_s - s0, ctl.controller_txns - t0
    await side.start_broker(victim)
    await side.until(lambda: admin.view.accepted(victim), "the new incarnation's acceptance")
    return n, s, txns


async def _measure(
    side: _Side, partitions: int, opts: MetadataBenchOptions, progress: Callable[[str], None]
) -> dict[str, Any]:
    await side.start()
    admin = side.admin
    assert admin is not None
    wanted = topics(partitions)
    names = list(wanted)
    answers = await admin.create_topics({name: (n, BROKERS) for name, n in wanted.items()})
    for got in answers.values():
        if not isinstance(got, TopicInfo):
            raise RuntimeError(f"{side.name}: topic creation refused: {got}")
    created = answers[TOPIC]
    assert isinstance(created, TopicInfo)
    tid = created.topic_id

    def everywhere() -> bool:
        return all(s.topic(name) is not None for s in side.sources.values() for name in names)

    await side.until(everywhere, "the topics everywhere")
    progress(f"{side.name}: producer-id blocks")
    blocks_per_s = await _blocks(side, opts)
    progress(f"{side.name}: propagation")
    prop = await _propagation(side, tid, opts)
    out: dict[str, Any] = {
        "producer_id_blocks_per_s": blocks_per_s,
        "propagation_ms": {"p50": percentile(prop, 0.5), "p99": percentile(prop, 0.99), "mean": statistics.fmean(prop)},
    }
    if isinstance(admin, EtcdMetadata):
        progress(f"{side.name}: elections")
        n, s, txns = await _elections_etcd(side, names)
        out["elections"] = {"count": n, "seconds": s, "per_s": n / s if s else 0.0, "transactions": txns}
    progress(f"{side.name}: fencing")
    gone, moved, led = await _fencing(side, names, opts)
    out["fencing_ms"] = {"p50": percentile(gone, 0.5), "max": max(gone)}
    out["failover_ms"] = {"p50": percentile(moved, 0.5), "max": max(moved), "led": led}
    return out


async def _run(opts: MetadataBenchOptions, tmp: str, progress: Callable[[str], None]) -> dict[str, Any]:
    runs = []
    for size in opts.partitions:
        base = os.path.join(tmp, str(size))
        os.makedirs(base)

        def said(m: str, size: int = size) -> None:
            progress(f"{size} partitions: {m}")

        try:
            runs.append(await _run_size(size, opts, base, said))
        except RuntimeError as e:
            # A size that fails (a step past WAIT_S) keeps the others' results.
            runs.append({"partitions": size, "error": str(e)})
    return {"options": dataclasses.asdict(opts), "runs": runs}


async def _run_size(
    partitions: int, opts: MetadataBenchOptions, tmp: str, progress: Callable[[str], None]
) -> dict[str, Any]:
    result: dict[str, Any] = {"partitions": partitions}
    # Embedded controller.
    progress("embedded: elections (the core, fsynced)")
    n, s = await asyncio.to_thread(_embedded_elections, os.path.join(tmp, "core"), partitions)
    server = ControllerServer(
        ControllerConfig(os.path.join(tmp, "controller"), broker_session_timeout_ms=SESSION_TIMEOUT_MS)
    )
    await server.start()
    embedded = _Side(
        "embedded",
        lambda me: ControllerMetadata("127.0.0.1", server.port, me, heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS),
    )
    try:
        result["embedded"] = await _measure(embedded, partitions, opts, progress)
        result["embedded"]["elections"] = {"count": n, "seconds": s, "per_s": n / s if s else 0.0}
    finally:
        await embedded.stop()
        await server.stop()
    # etcd.
    etcd = EtcdCluster(os.path.join(tmp, "etcd"))
    await asyncio.to_thread(etcd.start)
    url = etcd.url("/bench")
    result["etcd_url"] = url
    side = _Side(
        "etcd",
        lambda me: EtcdMetadata(url, me, create_cluster=me is not None, session_timeout_ms=SESSION_TIMEOUT_MS),
    )
    try:
        result["etcd"] = await _measure(side, partitions, opts, progress)
    finally:
        await side.stop()
        await asyncio.to_thread(etcd.close)
    e, k = result["embedded"], result["etcd"]
    result["ratios_etcd_to_embedded"] = {
        "elections_per_s": k["elections"]["per_s"] / e["elections"]["per_s"] if e["elections"]["per_s"] else 0.0,
        "producer_id_blocks_per_s": k["producer_id_blocks_per_s"] / e["producer_id_blocks_per_s"],
        "propagation_p50": k["propagation_ms"]["p50"] / max(e["propagation_ms"]["p50"], 1e-9),
        "propagation_p99": k["propagation_ms"]["p99"] / max(e["propagation_ms"]["p99"], 1e-9),
        "fencing_p50": k["fencing_ms"]["p50"] / max(e["fencing_ms"]["p50"], 1e-9),
        "failover_p50": k["failover_ms"]["p50"] / max(e["failover_ms"]["p50"], 1e-9),
    }
    result["verdicts"] = {
        "elections_ratio": result["ratios_etcd_to_embedded"]["elections_per_s"] >= ELECTIONS_RATIO_TARGET,
        "failover_p50": k["failover_ms"]["p50"] <= FAILOVER_P50_MS_TARGET,
        # The failover target is the for a broker leading this many.
        "failover_at_target_scale": k["failover_ms"]["led"] >= FAILOVER_TARGET_LED,
    }
    return result


def run(opts: MetadataBenchOptions, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="partlog-bench-metadata-") as tmp:
        return asyncio.run(_run(opts, tmp, progress or (lambda _m: None)))


def print_report(r: dict[str, Any]) -> None:
    o = r["options"]
    print(
        f"metadata back ends: {BROKERS} brokers, RF {BROKERS}, session timeout {SESSION_TIMEOUT_MS} ms; "
        f"{o['blocks']} blocks at concurrency {o['concurrency']}, {o['rounds']} propagation rounds, "
        f"{o['fencing_rounds']} kills; etcd: 3 members on loopback"
    )
    for run in r["runs"]:
        if "error" in run:
            print(f"\n{run['partitions']:,} partitions: failed: {run['error']}")
        else:
            _print_run(run)


def _print_run(r: dict[str, Any]) -> None:
    e, k, q = r["embedded"], r["etcd"], r["ratios_etcd_to_embedded"]
    blocks = "producer_id_blocks_per_s"
    rows = [
        ("elections/s (controller write time)", e["elections"]["per_s"], k["elections"]["per_s"], q["elections_per_s"]),
        ("producer-id blocks/s", e[blocks], k[blocks], q[blocks]),
        ("propagation p50 ms", e["propagation_ms"]["p50"], k["propagation_ms"]["p50"], q["propagation_p50"]),
        ("propagation p99 ms", e["propagation_ms"]["p99"], k["propagation_ms"]["p99"], q["propagation_p99"]),
        ("fencing after a kill p50 ms", e["fencing_ms"]["p50"], k["fencing_ms"]["p50"], q["fencing_p50"]),
        ("new leaders after a kill p50 ms", e["failover_ms"]["p50"], k["failover_ms"]["p50"], q["failover_p50"]),
    ]  # fmt: skip
    print()
    print(f"{r['partitions']:,} partitions; the crashed broker led {k['failover_ms']['led']:,}")
    print(f"{'':38} {'embedded':>12} {'etcd':>12} {'etcd/embedded':>14}")
    for name, a, b, ratio in rows:
        print(f"{name:38} {a:12,.1f} {b:12,.1f} {ratio:14.2f}")
    print(
        f"elections measured: embedded {e['elections']['count']} in one fsynced transaction, "
        f"etcd {k['elections']['count']} in {k['elections']['transactions']} transactions"
    )
    v = r["verdicts"]
    scale = "" if v["failover_at_target_scale"] else f" (the issue's scale: a broker leading {FAILOVER_TARGET_LED:,})"
    print(
        f"verdicts (issue 32): etcd elections/s >= {ELECTIONS_RATIO_TARGET} of embedded: "
        f"{'PASS' if v['elections_ratio'] else 'FAIL'} ({q['elections_per_s']:.2f}); "
        f"etcd new leaders p50 <= {FAILOVER_P50_MS_TARGET:,} ms: {'PASS' if v['failover_p50'] else 'FAIL'}"
        f" ({k['failover_ms']['p50']:,.0f} ms){scale}"
    )
