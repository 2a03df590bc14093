"""One simulated world: the real controller, brokers, walmgr and clients on
the deterministic runtime, a workload, faults, and the invariants.

Everything that decides is partlog's own code, unmodified: ``ControllerServer``
(its LMDB state), ``Broker`` (pipeline, group commit on a real LMDB store,
replication, fetch path, RPC), ``ControllerMetadata``, ``Walmgr`` (scanner,
decision core, registry, deleter) and the ``Producer``/``Consumer``
clients.  Simulated: the network (in-memory connections with latency,
partitions between AZs, resets), the object store (in memory, with errors,
lost PUT responses and lagging listings), the clocks (virtual, with a skew
per broker within ``max_clock_skew_ms``), and crashes (a node's tasks are
cancelled and its connections reset; its LMDB files stay, as a process
crash leaves them).

The parts, as TigerBeetle's VOPR splits its simulator:

* :mod:`simulations.dst.config`: the shape, the fault rates, the result;
* :mod:`simulations.dst.cluster`: the nodes, started, crashed, restarted;
* :mod:`simulations.dst.workload`: the producers, the ledger of what was
  acknowledged, and the verifier that reads it back;
* :mod:`simulations.dst.faults`: when which fault happens, and its heal;
* :mod:`simulations.dst.reassign`: an operator's partition moves (a fault
  with ``Faults.reassign_per_min``) and the checks they add;
* :mod:`simulations.dst.invariants`: the checks (listed there), each over
  a read-only view of the cluster;
* :mod:`simulations.dst.journal`: the events and violations a run records.

This module composes them (:class:`World`), runs the scenario (start,
faults for ``duration_s``, heal, settle, verify) and makes one run
deterministic (:func:`run`: the patched process of
:func:`simulations.dst.runtime.deterministic_process`, walmgr's thread
pool made inline).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import logging
import random
import shutil
import tempfile
import time
import traceback
from collections.abc import Iterator
from concurrent.futures import Executor, Future
from typing import Any

from partlog.runtime import SeededEntropy
from simulations.dst.cluster import Cluster
from simulations.dst.config import Faults, Result, Shape
from simulations.dst.ctp import Transformers, create_topics
from simulations.dst.faults import FaultInjector
from simulations.dst.invariants import (
    Observed,
    check_acknowledged,
    check_consume_transform_produce,
    check_controller,
    check_delete,
    check_exactly_once_in_order,
    check_no_new_references,
    check_orphans_deleted,
    check_periodically,
    check_read_committed,
    check_replica_reads,
    check_stable_offsets,
    check_stores,
    check_transactions_atomic,
    hanging_transactions,
    lost_acks1,
)
from simulations.dst.journal import Journal, Violation
from simulations.dst.reassign import MOVES_SETTLE_S
from simulations.dst.runtime import SimNetwork, VirtualLoop, deterministic_process, run_node
from simulations.dst.store import SimObjectStore
from simulations.dst.tiering import check_tiered
from simulations.dst.txn import TxnWorkload, control_offsets
from simulations.dst.workload import Workload


class _InlineExecutor(Executor):
    """walmgr's scanner reads footers in a thread pool: here, in order, in
    the loop's thread (the store's faults then replay exactly)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
        f: Future[Any] = Future()
        try:
            f.set_result(fn(*args, **kwargs))
        except BaseException as e:
            f.set_exception(e)
        return f

    def map(self, fn: Any, *iterables: Any, timeout: Any = None, chunksize: int = 1) -> Iterator[Any]:
        return iter([fn(*args) for args in zip(*iterables, strict=False)])

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        return None


class _ErrorLog(logging.Handler):
    """Keeps what the real code logged at ERROR: an unexpected exception in
    a daemon is a finding even when no invariant broke."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if len(self.records) < 100:
            exc = ""
            if record.exc_info and record.exc_info[1] is not None:
                e = record.exc_info[1]
                tb = traceback.extract_tb(e.__traceback__)
                where = f" at {tb[-1].filename.rsplit('/', 2)[-1]}:{tb[-1].lineno}" if tb else ""
                exc = f": {type(e).__name__}: {e}{where}"
            self.records.append(f"{record.name}: {record.getMessage()[:300]}{exc[:300]}")


class World:
    """One run's world: the cluster, its workload, the fault injector and
    the state checker on one virtual loop, wired to each other."""

    def __init__(
        self, seed: int, shape: Shape, faults: Faults, data_dir: str, only_faults: frozenset[int] | None = None
    ) -> None:
        self.seed = seed
        self.shape = shape
        self.faults = faults
        self.network = SimNetwork(random.Random(seed * 31 + 7))
        self.loop = VirtualLoop(self.network)
        self.objects = SimObjectStore(random.Random(seed * 131 + 3), faults.store, monotonic=self.loop.time)
        self.loop.latency = self.objects.took_s
        self.journal = Journal(self.loop)
        # The run's one entropy: every node's ids, tokens and nonces, drawn in
        # the order the nodes ask (seeded, so a seed replays).
        self.entropy = SeededEntropy(random.Random(seed ^ 0x5EED))
        self.cluster = Cluster(shape, self.loop, self.network, self.objects, data_dir, self.journal, self.entropy)
        self.workload = Workload(seed, shape, self.cluster, self.journal)
        self.txn: TxnWorkload | None = None
        if shape.txn_producers > 0:
            w = self.workload
            self.txn = TxnWorkload(seed, shape, self.cluster, self.journal, w.ledger, w.restarts, w._producing)
        self.observed = Observed()
        self.injector = FaultInjector(
            seed, faults, only_faults, self.cluster, self.workload, self.observed, self.journal, self.txn
        )
        self.ctp: Transformers | None = None
        self.transformer_tasks: list[asyncio.Task[Any]] = []
        # The deletion-safety check runs inside DeleteObjects, before
        # anything is deleted; a crash of walmgr mid-plan, right after.
        self.objects.before_delete = functools.partial(check_delete, self.cluster, self.observed, self.journal)
        self.objects.after_delete = self.injector.maybe_crash_mid_plan
        links = self.injector.links
        self.network.latency_s = links.latency_s
        self.network.reachable = links.reachable
        self.network.black_hole = links.black_hole
        self.crash_trace = ""
        self.tiering: dict[str, int] = {}

    async def main(self) -> None:
        """Start the cluster, run the workload under faults for
        ``duration_s``, heal, let it settle ``settle_s``, then check the end
        state and read everything back."""
        cluster, journal, observed = self.cluster, self.journal, self.observed
        await cluster.start()
        checks = run_node("checker", check_periodically(cluster, observed, journal))
        producers = self.workload.start()
        if self.txn is not None:
            on_read = functools.partial(check_read_committed, self.txn.ledger, journal)
            if self.shape.txn_transformers > 0:
                topics = await create_topics(cluster, self.shape.txn_transformers)
                self.txn.inputs, self.txn.extra = topics.inputs, topics.all
                cluster.extra_partitions = topics.all
                self.ctp = Transformers(
                    self.seed,
                    cluster,
                    journal,
                    self.txn.ledger,
                    self.txn.coordinator,
                    self.workload.restarts,
                    topics,
                )
            producers += self.txn.start(on_read)
            if self.ctp is not None:
                self.transformer_tasks = self.ctp.start(on_read)
                self.injector.transformers = list(self.ctp.names)
            checks_txn = run_node("checker", self._check_txns_periodically())
        reassigner = self.injector.reassigner
        if reassigner is not None:
            watch = run_node("checker", reassigner.watch())
        self.injector.start()
        await asyncio.sleep(self.shape.duration_s)
        # Faults stop; everything comes back.
        self.workload.stop_at = self.loop.time() + 1.0
        under_way = self.injector.stop()
        if cluster.retention_bytes is not None and cluster.retention_bytes >= 0:
            await cluster.set_retention(-1)
        journal.event("faults stop")
        # The controller first: restarts under way may wait for it.
        await cluster.start_controller_if_down()
        if under_way:
            _, hung = await asyncio.wait(under_way, timeout=30)
            for t in hung:
                t.cancel()
            if hung:
                await asyncio.wait(hung, timeout=5)
        await cluster.start_down_brokers()
        await cluster.start_walmgr_if_down()
        # Producers finish what they have in flight.
        pending: set[asyncio.Task[Any]] = set()
        if producers:
            _done, pending = await asyncio.wait(producers, timeout=self.shape.settle_s + 60)
        if pending:
            # Liveness: with every broker back, a producer delivers what it holds.
            stuck = self.workload.stuck()
            journal.violated(
                f"{len(pending)} producers still hold records {self.shape.settle_s + 60:.0f} s after the faults "
                f"stopped (partition: pending, ready batches, in flight): {stuck}"
            )
        if self.txn is not None:
            await self._settle_transactions()
        await asyncio.sleep(self.shape.settle_s)
        if reassigner is not None:
            await reassigner.settle(MOVES_SETTLE_S)
            watch.cancel()
        checks.cancel()
        if self.txn is not None:
            checks_txn.cancel()
        check_controller(cluster, observed, journal)
        check_no_new_references(cluster, observed, journal)
        check_stores(cluster, journal)
        if self.shape.tiering:
            end = await check_tiered(cluster, journal)
            for broker in cluster.brokers.values():
                cluster.count_tiering(broker)
            self.tiering = {**cluster.tiering_counts, **end}
            journal.event("tiering: " + ", ".join(f"{v} {k}" for k, v in self.tiering.items()))
        if self.txn is not None:
            await self._verify_transactions()
        await self._verify()
        await check_orphans_deleted(cluster, journal)

    async def _check_txns_periodically(self) -> None:
        assert self.txn is not None
        while True:
            await asyncio.sleep(0.5)
            check_stable_offsets(self.cluster, self.txn.ledger, self.journal, self.txn.partitions)

    async def _settle_transactions(self) -> None:
        """Liveness once faults stop: every transaction decided and its
        markers written within its timeout and the coordinator's abort (the
        timer's second) and markers' time; then no leader's LSO stays below
        its HWM (a hanging transaction)."""
        assert self.txn is not None
        within_s = self.shape.txn_timeout_ms / 1000 + 30
        if self.ctp is not None:
            # The inputs take no more records: each transformer stops once
            # it has caught up (its inputs' transactions decided first).
            self.ctp.inputs_done = True
            _, behind = await asyncio.wait(self.transformer_tasks, timeout=2 * within_s)
            if behind:
                self.journal.violated(
                    f"{len(behind)} transformers did not catch up with their input {2 * within_s:.0f} s after "
                    "the producers stopped"
                )
        if not await self.txn.quiesce(within_s):
            open_ = sorted(self.txn.ledger.open)
            self.journal.violated(
                f"transactions still open or markers unsent {within_s:.0f} s after the producers stopped: "
                f"open {open_}, sending {sorted(self.txn.coordinator.finishing)}"
            )
        hanging = hanging_transactions(self.cluster, self.txn.partitions)
        for _ in range(20):  # a new leader learns its HWM from its followers' fetches
            if not hanging:
                return
            await asyncio.sleep(0.5)
            hanging = hanging_transactions(self.cluster, self.txn.partitions)
        self.journal.violated(f"hanging transactions once the markers were written: {hanging[:4]}")

    async def _verify_transactions(self) -> None:
        """Read every replica with READ_COMMITTED and judge what it returns."""
        assert self.txn is not None
        self.txn.reader_stop = True
        reads = await self.txn.read_replicas()
        check_replica_reads(self.txn.ledger, reads, self.journal)
        leader_reads = {}
        start = {}
        for tp in self.txn.partitions:
            for bid, broker in sorted(self.cluster.brokers.items()):
                if not broker.store._closed and broker.replicas.is_leader(tp) and (bid, tp) in reads:
                    leader_reads[tp] = reads[(bid, tp)]
                    start[tp] = broker.store.log_start_offset(tp)
                    break
        check_transactions_atomic(self.txn.ledger, leader_reads, start, self.journal)
        ledger = self.txn.ledger
        if self.ctp is not None:
            topics = self.ctp.topics
            if all(tp in leader_reads for tp in topics.inputs + topics.outputs):
                inputs = {tp: leader_reads[tp] for tp in topics.inputs}
                outputs = {tp: leader_reads[tp] for tp in topics.outputs}
                check_consume_transform_produce(ledger, inputs, outputs, self.journal)
                self.journal.event(
                    f"consume-transform-produce: {sum(map(len, inputs.values()))} committed input records, "
                    f"{sum(map(len, outputs.values()))} committed outputs"
                )
            else:
                self.journal.violated("consume-transform-produce: a partition has no leader at the end")
        self.journal.event(
            f"transactions: {sum(t.outcome == 'commit' for t in ledger.txns.values())} committed, "
            f"{sum(t.outcome == 'abort' for t in ledger.txns.values())} aborted, {ledger.markers_written} markers, "
            f"{ledger.read_committed} records read_committed, {ledger.fenced_batches_refused} fenced batches refused"
        )

    async def _verify(self) -> None:
        """Read every partition back and check what was acknowledged."""
        markers = None
        if self.txn is not None:
            # Markers leave offsets without records; the log is final now.
            markers = functools.cache(functools.partial(control_offsets, self.cluster))
        read, start = await self.workload.read_back(markers)
        ledger = self.workload.ledger
        check_acknowledged(ledger, read, start, self.journal)
        ledger.lost_acks1 += lost_acks1(ledger, read, start)
        check_exactly_once_in_order(ledger, read, start, self.journal)
        ledger.verified = len(ledger.acked) + len(ledger.acked_unplaced)


def run(
    seed: int, shape: Shape | None = None, faults: Faults | None = None, only_faults: frozenset[int] | None = None
) -> Result:
    """Run one world from ``seed``, injecting only the faults numbered in
    ``only_faults`` (None: all); the result, violations included."""
    shape = shape or Shape()
    faults = faults if faults is not None else Faults()
    data_dir = tempfile.mkdtemp(prefix=f"partlog-dst-{seed}-")
    handler = _ErrorLog()
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.ERROR)
    wall = time.perf_counter()
    world = World(seed, shape, faults, data_dir, only_faults)
    journal = world.journal
    try:
        with deterministic_process(world.loop), _inline_pools():
            try:
                journal.main_task = world.loop.create_task(world.main())
                world.loop.run_until_complete(journal.main_task)
            except (Violation, asyncio.CancelledError):
                if not journal.violations:
                    raise
            except Exception as e:  # the world itself broke: report it like a violation
                journal.violations.append(f"t={world.loop.time():.3f}s: the run failed: {type(e).__name__}: {e}")
                world.crash_trace = traceback.format_exc()
            finally:
                with contextlib.suppress(Exception):
                    _shutdown(world)
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)
        shutil.rmtree(data_dir, ignore_errors=True)
    wall_s = time.perf_counter() - wall
    ledger = world.workload.ledger
    # Two runs of one seed must agree on all of this, to the step.
    fingerprint = (journal.events, sorted((str(tp), o, v) for (tp, o), v in ledger.acked.items()), world.loop.steps)
    digest = hashlib.sha256(repr(fingerprint).encode()).hexdigest()[:16]
    return Result(
        seed,
        journal.violations,
        journal.events,
        world.loop.time(),
        wall_s,
        world.loop.steps,
        len(ledger.acked),
        ledger.verified,
        dict(sorted(journal.fault_counts.items())),
        handler.records,
        digest,
        world.injector.faults_drawn,
        only_faults=only_faults,
        acked_acks1=len(ledger.acked1),
        lost_acks1=ledger.lost_acks1,
        tiering=world.tiering,
        busiest_second_steps=world.loop.busiest_second_steps,
    )


@contextlib.contextmanager
def _inline_pools() -> Iterator[None]:
    import walmgr.scanner as scanner

    saved = scanner.__dict__["ThreadPoolExecutor"]
    setattr(scanner, "ThreadPoolExecutor", _InlineExecutor)  # noqa: B010 (a module-private name)
    try:
        yield
    finally:
        setattr(scanner, "ThreadPoolExecutor", saved)  # noqa: B010


def _shutdown(world: World) -> None:
    """Cancel every task, let them unwind, then close what holds files
    (LMDB environments, the registry lock) and the loop."""
    loop = world.loop
    for _ in range(5):
        tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
        if not tasks:
            break
        for t in tasks:
            t.cancel()
        # Bounded (in virtual time): a task may finish cleaning up slowly,
        # e.g. a producer's close() flushing records no broker will take.
        with contextlib.suppress(BaseException):
            loop.run_until_complete(asyncio.wait(tasks, timeout=5))
    cluster = world.cluster
    for b in cluster.brokers.values():
        with contextlib.suppress(Exception):
            b.store.close()
    if cluster.controller is not None and cluster.controller._controller is not None:
        cluster.controller._controller.close()
    if cluster.walmgr is not None and cluster.walmgr.registry is not None:
        cluster.walmgr.registry.close()
    with contextlib.suppress(BaseException):
        loop.run_until_complete(loop.shutdown_asyncgens())
    loop.close()
