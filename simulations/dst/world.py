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

Invariants, checked as events happen and at the end:

* every record acknowledged with acks=all is read back at the offset its
  acknowledgement gave (unless DeleteRecords or retention removed it); an
  idempotent producer's exactly once, and one producer's records to one
  partition in the order they were sent; no two acknowledgements name the
  same offset (acks=1 records may be lost in a failover, and a stale leader
  may acknowledge one at an offset committed elsewhere, as in Kafka: they
  are counted, not required);
* every record read was sent by some producer, and a partition's offsets
  have no gaps (only a reset to the log start skips);
* no WAL object is deleted while any broker's store, leader or follower,
  references it (checked inside DeleteObjects, before the delete);
* each broker's file-reference index equals a recount from its log
  (``MetadataStore.check``, periodically and at the end);
* the controller's leader epochs never go backwards, and a partition has
  one leader per epoch;
* a leader's high watermark never goes backwards within its epoch;
* liveness: once faults stop, orphans past the age gate are deleted within
  a few walmgr cycles.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import logging
import os
import random
import shutil
import tempfile
import time
import traceback
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from typing import Any

from partlog.broker.server import Broker, BrokerConfig
from partlog.client.consumer import Consumer, CorruptRecordError
from partlog.client.producer import Producer, RecordMetadata
from partlog.controller.client import ControllerMetadata
from partlog.controller.cluster_meta import BrokerInfo, PartitionInfo, StaticMetadata
from partlog.controller.core import ControllerConfig
from partlog.controller.server import ControllerServer
from partlog.kafka.errors import Errors
from partlog.kafka.records import DeleteRecordsRequest, TopicIdPartition
from partlog.produce.pipeline import ProduceConfig
from partlog.replication.config import ReplicationConfig
from partlog.store import MetadataStore, StoreError
from simulations.dst.runtime import EPOCH_S, SimNetwork, VirtualLoop, cancel_node, deterministic_process, run_node
from simulations.dst.store import SimObjectStore, StoreFaults
from walmgr.config import WalmgrConfig
from walmgr.daemon import Walmgr

TOPIC = "dst"
# Demo-sized deadlines, as partlog cluster's: walmgr's age gate is 3 s.
COMMIT_DEADLINE_MS = 2_000
MAX_CLOCK_SKEW_MS = 500
GRACE_MS = 500
SESSION_TIMEOUT_MS = 6_000  # the controller fences a silent broker after this (KRaft: 9 s)
HEARTBEAT_INTERVAL_MS = 500
WALMGR_CYCLE_MS = 1_000
LEADER_IMBALANCE_CHECK_INTERVAL_MS = 5_000
BROKER_PORT_BASE = 9_100


class Violation(Exception):
    """An invariant broke; the message says which and where."""


class SimulatedCrash(asyncio.CancelledError):
    """Raised inside walmgr's DeleteObjects call: its process ends right
    there, the objects deleted and the confirmation not recorded."""


@dataclass(frozen=True)
class Shape:
    azs: int = 3
    brokers_per_az: int = 2
    partitions: int = 12
    replication_factor: int = 3
    # What acks=all users run for durability.  With 1, a power loss of a
    # lone ISR member loses what it acknowledged, in Kafka as here (seed 29
    # shows it: design.md, Durability).
    min_insync_replicas: int = 2
    producers_per_az: int = 1  # idempotent, acks=all
    rate_per_producer: float = 100.0  # records/s
    # Kafka's two other delivery contracts, beside the idempotent producers:
    # not idempotent with acks=all (duplicates allowed) and acks=1 (losses
    # allowed in a failover).  Placed in the AZs in turn.
    plain_producers: int = 1
    acks1_producers: int = 1
    rate_per_plain_producer: float = 50.0  # records/s
    duration_s: float = 30.0  # faults happen during this
    settle_s: float = 15.0  # after it, faults stop and the cluster heals


@dataclass(frozen=True)
class Faults:
    broker_crashes_per_min: float = 2.0
    restart_after_s: tuple[float, float] = (0.5, 6.0)
    az_partitions_per_min: float = 1.0
    partition_s: tuple[float, float] = (0.5, 5.0)
    black_hole_share: float = 0.5  # of partitions: SYNs vanish instead of being refused
    # A broker cut off from the controller only (it still reaches its peers
    # and clients): the non-transitive partition behind zombie leaders.
    controller_isolations_per_min: float = 1.0
    # walmgr cut off from the controller only: it decides on a stale view
    # of who leads, while it still reaches the brokers.
    walmgr_isolations_per_min: float = 1.0
    controller_crashes_per_min: float = 0.5
    walmgr_crashes_per_min: float = 1.0
    # Share of walmgr's DeleteObjects calls after which it crashes before
    # recording what S3 confirmed (in the middle of a plan).
    walmgr_crashes_mid_plan_share: float = 0.05
    producer_restarts_per_min: float = 1.0  # a new incarnation: a new producer id
    # One open connection reset (what a lost segment does to TCP): the
    # request or its answer is lost, and the client retries (a duplicate).
    connection_resets_per_min: float = 6.0
    # A slow link between two AZs: segments take this much longer for a
    # while (delay, and reordering across connections).
    slow_links_per_min: float = 1.0
    slow_link_extra_ms: tuple[float, float] = (50.0, 1_500.0)
    # A broker's clock jumps to another offset within clock_skew_ms.
    clock_jumps_per_min: float = 1.0
    # DeleteRecords on a partition's current leader, up to a few entries
    # below its HWM (Kafka's AdminClient.deleteRecords, as an operator would).
    delete_records_per_min: float = 2.0
    # retention.bytes set on the topic for a while (as its config would
    # reach every broker): each replica then deletes its oldest batches, and
    # walmgr sees objects leave some replicas' logs before others'.  Then
    # the limit is lifted, so that later records are read back.
    retention_changes_per_min: float = 1.0
    retention_bytes: tuple[int, ...] = (256, 1_024, 4_096)
    retention_s: tuple[float, float] = (1.0, 10.0)
    # A broker loses power: its store runs with sync off (the brokers here
    # do, as partlog broker --no-sync), so what the OS had not yet written
    # back, the transactions of the last power_loss_unsynced_s, is gone.
    # Modelled as whole transactions lost (LMDB's MDB_NOMETASYNC contract).
    power_losses_per_min: float = 1.0
    power_loss_unsynced_s: tuple[float, float] = (0.0, 1.0)
    clock_skew_ms: int = 400  # per broker, within walmgr's max_clock_skew_ms
    latency_same_az_ms: tuple[float, float] = (0.1, 1.0)
    latency_cross_az_ms: tuple[float, float] = (0.5, 3.0)
    store: StoreFaults = field(
        default_factory=lambda: StoreFaults(
            error_rate=0.01,
            lost_put_rate=0.01,
            list_lag_s=2.0,
            list_miss_rate=0.3,
            latency_s=(0.005, 0.03),
            slow_rate=0.02,
            slow_s=(0.5, 2.5),
        )
    )

    @classmethod
    def none(cls) -> Faults:
        return cls(
            broker_crashes_per_min=0.0,
            az_partitions_per_min=0.0,
            controller_isolations_per_min=0.0,
            walmgr_isolations_per_min=0.0,
            controller_crashes_per_min=0.0,
            walmgr_crashes_per_min=0.0,
            walmgr_crashes_mid_plan_share=0.0,
            producer_restarts_per_min=0.0,
            connection_resets_per_min=0.0,
            slow_links_per_min=0.0,
            clock_jumps_per_min=0.0,
            delete_records_per_min=0.0,
            retention_changes_per_min=0.0,
            power_losses_per_min=0.0,
            clock_skew_ms=0,
            store=StoreFaults(),
        )


@dataclass
class Result:
    seed: int
    violations: list[str]
    events: list[tuple[float, str]]
    simulated_s: float
    wall_s: float
    steps: int
    acked: int
    verified: int
    faults: dict[str, int]
    errors_logged: list[str]
    digest: str
    faults_drawn: int = 0  # fault numbers 0..faults_drawn-1 were drawn
    # acks=1 acknowledgements, and how many of them a failover lost (allowed).
    acked_acks1: int = 0
    lost_acks1: int = 0
    only_faults: frozenset[int] | None = None

    @property
    def fault_numbers(self) -> list[int]:
        """The faults this run injected (or tried to), by number: what shrinking may drop."""
        return [k for k in range(self.faults_drawn) if self.only_faults is None or k in self.only_faults]

    @property
    def ok(self) -> bool:
        return not self.violations


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
    def __init__(
        self, seed: int, shape: Shape, faults: Faults, data_dir: str, only_faults: frozenset[int] | None = None
    ) -> None:
        self.seed = seed
        # The faults (by number, in the order drawn) injected; None: all.
        # Shrinking narrows this down.
        self.only_faults = only_faults
        self.faults_drawn = 0
        self.shape = shape
        self.faults = faults
        self.data_dir = data_dir
        self.rng = random.Random(seed)
        self.fault_rng = random.Random(seed * 7919 + 1)
        self.network = SimNetwork(random.Random(seed * 31 + 7))
        self.loop = VirtualLoop(self.network)
        self.objects = SimObjectStore(random.Random(seed * 131 + 3), faults.store)
        self.objects.before_delete = self._check_delete
        self.objects.after_delete = self._maybe_crash_mid_plan
        self.delete_calls = 0
        self.loop.latency = self.objects.took_s
        self.layout = StaticMetadata.generate(azs=shape.azs, brokers_per_az=shape.brokers_per_az, topics={})
        self.az_of = {b.broker_id: b.az for b in self.layout.brokers()}
        self.skew_ms = {bid: self.fault_rng.randint(-faults.clock_skew_ms, faults.clock_skew_ms) for bid in self.az_of}
        self.controller: ControllerServer | None = None
        self.controller_port = 0
        self.brokers: dict[int, Broker] = {}
        self.sources: dict[int, ControllerMetadata] = {}
        self.down: set[int] = set()
        self.walmgr: Walmgr | None = None
        self.walmgr_task: asyncio.Task[Any] | None = None
        self.walmgr_starting: Walmgr | None = None
        self.admin: ControllerMetadata | None = None
        self.partitions: list[TopicIdPartition] = []
        self.down_links: set[frozenset[str]] = set()
        self.black_holes: set[frozenset[str]] = set()
        self.events: list[tuple[float, str]] = []
        self.violations: list[str] = []
        self.fault_counts: dict[str, int] = {}
        # (tp, offset) -> value, for acks=all acknowledgements.
        self.acked: dict[tuple[TopicIdPartition, int], bytes] = {}
        # (tp, offset) -> value, for acks=1 acknowledgements.
        self.acked1: dict[tuple[TopicIdPartition, int], bytes] = {}
        self.lost_acks1 = 0
        # Producer name -> "idempotent", "plain" (acks=all) or "acks1".
        self.kind_of: dict[str, str] = {}
        self.sent: set[bytes] = set()
        # The retention.bytes the topic has now (None: Kafka's default, none).
        self.retention_bytes: int | None = None
        self.sent_order: dict[tuple[str, TopicIdPartition], list[bytes]] = {}
        self.acked_unplaced: dict[bytes, TopicIdPartition] = {}
        # Log start offsets DeleteRecords set: records below are gone by design.
        self.deleted_below: dict[TopicIdPartition, int] = {}
        self.faults_on = True
        # One restart at a time per process kind: two pending ones (two
        # crashes) would both see it down and start two processes on one
        # directory.  Separate locks: walmgr's start waits for the controller.
        self._restarting_ctl = asyncio.Lock()
        self._restarting_wm = asyncio.Lock()
        # Scheduled restarts and heals: task -> whether its action has begun.
        self._pending: dict[asyncio.Task[Any], list[bool]] = {}
        self.producer_restarts: dict[str, asyncio.Event] = {}
        self.live_producers: dict[str, Producer] = {}
        # Controller epochs seen per partition: leader epoch -> leader.
        self.epoch_leaders: dict[TopicIdPartition, dict[int, int]] = {}
        self.max_epoch: dict[TopicIdPartition, int] = {}
        self.hwm_seen: dict[tuple[int, TopicIdPartition, int], int] = {}
        # The controller's last decision per partition (kept while it is down:
        # nothing changes leaders or ISRs then).
        self.partition_info: dict[TopicIdPartition, PartitionInfo] = {}
        # Deleted keys a stale replica's divergent tail still references
        # (reported once, as events): broker -> keys.
        self.stale_references: dict[int, set[str]] = {}
        self.network.latency_s = self._latency
        self.cut_pairs: set[frozenset[str]] = set()  # node pairs (controller isolation)
        self.slow_links: dict[frozenset[str], float] = {}  # AZ pair -> extra seconds
        self.network.reachable = self._reachable
        self.network.black_hole = lambda a, b: frozenset({self._az(a), self._az(b)}) in self.black_holes

    # ------------------------------------------------------------ plumbing

    def _az(self, node: str) -> str:
        if node.startswith("b"):
            return self.az_of[int(node[1:])]
        if node.startswith("p-"):
            return node.split("-")[1]
        return "az1"  # controller, walmgr, verifier: in the first AZ

    def _latency(self, a: str, b: str) -> float:
        az_a, az_b = self._az(a), self._az(b)
        lo, hi = self.faults.latency_same_az_ms if az_a == az_b else self.faults.latency_cross_az_ms
        extra = self.slow_links.get(frozenset({az_a, az_b}), 0.0) if self.slow_links else 0.0
        return self.network.rng.uniform(lo, hi) / 1000 + extra

    def _reachable(self, a: str, b: str) -> bool:
        if frozenset({self._az(a), self._az(b)}) in self.down_links:
            return False
        return not self.cut_pairs or frozenset({a, b}) not in self.cut_pairs

    def now_ms(self) -> int:
        return int((EPOCH_S + self.loop.time()) * 1000)

    def event(self, what: str) -> None:
        self.events.append((round(self.loop.time(), 6), what))

    def count(self, kind: str, detail: str = "") -> None:
        self.fault_counts[kind] = self.fault_counts.get(kind, 0) + 1
        self.event(f"{kind} {detail}" if detail else kind)

    def violated(self, what: str) -> None:
        self.violations.append(f"t={self.loop.time():.3f}s: {what}")
        # Wherever it was found (the checker's task, walmgr's delete), the
        # run ends here: what follows a broken invariant proves nothing.
        if self.main_task is not None and not self.main_task.done():
            self.main_task.cancel()
        raise Violation(what)

    main_task: asyncio.Task[None] | None = None

    # ----------------------------------------------------------- the cluster

    def _broker_config(self, bid: int) -> BrokerConfig:
        return BrokerConfig(
            bid,
            self.az_of[bid],
            os.path.join(self.data_dir, "brokers", str(bid)),
            port=BROKER_PORT_BASE + bid,
            produce=ProduceConfig(commit_interval_ms=50),
            sync=False,
            # No threads in the simulation: checkpoints run inline, by count.
            store_checkpoint_thread=False,
            retention_check_interval_ms=1_000,
            commit_rpc_timeout_ms=3_000,
            commit_deadline_ms=COMMIT_DEADLINE_MS,
            replication=ReplicationConfig(
                replica_lag_time_max_ms=2_000, min_insync_replicas=self.shape.min_insync_replicas
            ),
            walmgr_address=f"127.0.0.1:{self.walmgr.port}" if self.walmgr is not None and self.walmgr.port else "",
        )

    async def start_controller(self) -> None:
        cfg = ControllerConfig(
            os.path.join(self.data_dir, "controller"),
            broker_session_timeout_ms=SESSION_TIMEOUT_MS,
            # Leaders move back to preferred replicas every few seconds.
            leader_imbalance_check_interval_ms=LEADER_IMBALANCE_CHECK_INTERVAL_MS,
        )
        server = ControllerServer(cfg, port=self.controller_port)
        await server.start()
        self.controller = server
        self.controller_port = server.port

    async def start_broker(self, bid: int) -> None:
        me = BrokerInfo(bid, self.az_of[bid], "127.0.0.1", BROKER_PORT_BASE + bid)
        source = ControllerMetadata("127.0.0.1", self.controller_port, me, heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS)
        self.sources[bid] = source
        await source.connect()
        broker = Broker(self._broker_config(bid), source, self.objects, clock=lambda: self.now_ms() + self.skew_ms[bid])
        self.brokers[bid] = broker
        await broker.listen()
        await source.start()
        await broker.start()
        if self.retention_bytes is not None:
            # The topic's config as it is now (a restarted broker learns it).
            await self._set_retention(broker, self.retention_bytes)

    async def _set_retention(self, broker: Broker, limit: int) -> None:
        if self.partitions and not broker.store._closed:
            await asyncio.to_thread(
                broker.store.alter_topic_configs, self.partitions[0].topic_id, {"retention.bytes": limit}
            )

    async def crash_broker(self, bid: int) -> None:
        node = f"b{bid}"
        cancel_node(self.loop, node)
        self.network.cut(node)
        broker = self.brokers.pop(bid)
        source = self.sources.pop(bid)
        del source
        await asyncio.sleep(0)
        # The files stay, as a process crash leaves them: the journal not
        # applied to LMDB, for the restart to replay.
        broker.store.close(checkpoint=False)
        self.down.add(bid)

    async def restart_broker(self, bid: int) -> None:
        if bid not in self.down:
            return  # already back (the faults stopped and everything restarted)
        self.down.discard(bid)
        self.count("broker_restart", f"broker {bid}")
        try:
            # As the broker's own node: a later crash must cancel its tasks
            # and close its listener.
            await run_node(f"b{bid}", self.start_broker(bid))
        except BaseException as e:
            # Failed or cut off halfway (the faults stopped): undo the half
            # start, as a crash would, so it can start again from scratch.
            self.event(f"broker {bid} restart failed: {type(e).__name__}: {e}")
            cancel_node(self.loop, f"b{bid}")
            self.network.cut(f"b{bid}")
            half = self.brokers.pop(bid, None)
            if half is not None:
                half.store.close(checkpoint=False)
            self.sources.pop(bid, None)
            self.down.add(bid)
            if not isinstance(e, Exception):
                raise

    async def crash_controller(self) -> None:
        # Its last decisions (an ISR shrink it just committed) stand while it
        # is down: the invariants judge by them, not by an older sample.
        self._check_controller()
        cancel_node(self.loop, "ctl")
        self.network.cut("ctl")
        assert self.controller is not None
        await asyncio.sleep(0)
        ctl = self.controller._controller
        if ctl is not None:
            ctl.close()
            self.controller._controller = None
        self.controller = None

    async def start_walmgr(self) -> None:
        cfg = WalmgrConfig.for_cli(
            "file:///sim-objects",
            os.path.join(self.data_dir, "walmgr"),
            commit_deadline_ms=COMMIT_DEADLINE_MS,
            max_clock_skew_ms=MAX_CLOCK_SKEW_MS,
            grace_ms=GRACE_MS,
            cycle_interval_ms=WALMGR_CYCLE_MS,
            full_scan_interval_ms=5_000,
            check_timeout_ms=2_000,
            listen=f"127.0.0.1:{self.walmgr.port if self.walmgr is not None else 0}",
        )
        metadata = ControllerMetadata("127.0.0.1", self.controller_port)
        await metadata.start()  # a source handed to walmgr is started by its owner
        mgr = Walmgr(cfg, store=self.objects, metadata=metadata, clock=self.now_ms)
        # A crash while it starts must release what it holds already (the
        # registry's lock): remembered before start() returns.
        self.walmgr_starting = mgr
        try:
            await mgr.start()
        except Exception:
            # As the CLI does when start() fails: stop what it opened.
            self.walmgr_starting = None
            await mgr.stop()
            raise
        self.walmgr, self.walmgr_starting = mgr, None
        self.walmgr_task = asyncio.ensure_future(mgr.run())

    async def crash_walmgr(self) -> None:
        cancel_node(self.loop, "wm")
        self.network.cut("wm")
        await asyncio.sleep(0)
        for mgr in (self.walmgr, self.walmgr_starting):
            if mgr is not None and mgr.registry is not None:
                mgr.registry.close()
                mgr.registry = None
        self.walmgr_starting = None

    # ------------------------------------------------------------ invariants

    def _stores(self) -> Iterator[tuple[int, MetadataStore, bool]]:
        """Every broker's store: the live ones, and the crashed ones' files
        opened read-only (they reference what they referenced)."""
        for bid in sorted(self.az_of):
            broker = self.brokers.get(bid)
            if broker is not None and not broker.store._closed:
                yield bid, broker.store, False
                continue
            path = os.path.join(self.data_dir, "brokers", str(bid))
            if os.path.exists(os.path.join(path, "data.mdb")):
                store = MetadataStore.open(path, readonly=True)
                try:
                    yield bid, store, True
                finally:
                    store.close()

    def _check_delete(self, keys: Any) -> None:
        """Before a DeleteObjects: no key may be referenced by the log of a
        replica that is, or can become, authoritative for its partition:
        the leader or an ISR member as the controller last decided (its
        tail above the HWM included: an ISR member can be elected with it).
        A stale replica outside the ISR (a zombie leader, a follower that
        fell out) may still hold a divergent tail that references the key:
        it truncates that tail before it can lead or rejoin the ISR, so it
        is reported as an event, not a violation (design.md)."""
        wanted = set(keys)
        self._check_controller()  # the controller's decisions as of now
        for bid, store, crashed in self._stores():
            held = store.referenced_files(wanted)
            if not held:
                continue
            for tp, offset, key in self._references(store, held):
                info = self.partition_info.get(tp)
                authoritative = info is None or bid == info.leader or bid in info.isr
                where = f"{tp} offset {offset} on broker {bid}{' (crashed)' if crashed else ''}"
                if authoritative:
                    role = "leader" if info is not None and bid == info.leader else "ISR member"
                    self.violated(f"walmgr deleted {key} while it is referenced at {where}, the partition's {role}")
                self.event(f"deleted {key} still referenced by a stale replica's divergent tail: {where}")
                self.stale_references.setdefault(bid, set()).add(key)

    def _maybe_crash_mid_plan(self, keys: Any) -> None:
        """Maybe end walmgr in the middle of its plan: these keys are
        deleted, and it never records that S3 confirmed them."""
        self.delete_calls += 1
        share = self.faults.walmgr_crashes_mid_plan_share
        if not self.faults_on or share <= 0 or self.walmgr is None or self.walmgr.registry is None:
            return
        rng = random.Random(f"{self.seed}/delete/{self.delete_calls}")
        if rng.random() >= share:
            return
        self.count("walmgr_crash_mid_plan", f"after deleting {len(keys)} keys, before recording them")
        restart_after = rng.uniform(*self.faults.restart_after_s)
        self.loop.call_soon(lambda: run_node("world", self._crash_walmgr_then_restart(restart_after)))
        raise SimulatedCrash()

    async def _crash_walmgr_then_restart(self, after_s: float) -> None:
        await self.crash_walmgr()
        self._schedule(after_s, self._restart_walmgr)

    def _references(self, store: MetadataStore, keys: set[str]) -> Iterator[tuple[TopicIdPartition, int, str]]:
        """(partition, offset, key) for every entry of ``store`` referencing one of ``keys``."""
        for tp in self.partitions:
            try:
                start = store.partition_state(tp)["log_start_offset"]
                entries = store.read_log(tp, start, 1 << 40).entries
            except (KeyError, StoreError):
                continue
            for e in entries:
                if e.object_key in keys:
                    yield tp, int.from_bytes(e.header[:8], "big", signed=True), e.object_key

    def _check_controller(self) -> None:
        if self.controller is None or self.controller._controller is None:
            return
        for t in self.controller.controller.snapshot().topics:
            for p, info in enumerate(t.partitions):
                tp = TopicIdPartition(t.topic_id, p)
                if info.leader_epoch < self.max_epoch.get(tp, -1):
                    self.violated(f"{tp}: leader epoch went back from {self.max_epoch[tp]} to {info.leader_epoch}")
                self.max_epoch[tp] = info.leader_epoch
                self.partition_info[tp] = info
                seen = self.epoch_leaders.setdefault(tp, {})
                if seen.setdefault(info.leader_epoch, info.leader) != info.leader:
                    self.violated(
                        f"{tp}: two leaders at epoch {info.leader_epoch}: {seen[info.leader_epoch]}, {info.leader}"
                    )

    def _check_hwms(self) -> None:
        for bid, broker in self.brokers.items():
            if broker.store._closed:
                continue
            for tp in self.partitions:
                epoch = broker.replicas.leader_epoch(tp)
                if epoch is None or epoch < 0:
                    continue
                try:
                    state = broker.store.partition_state(tp)
                except (StoreError, KeyError):
                    continue
                hwm = int(state["high_watermark"])
                key = (bid, tp, epoch)
                if hwm < self.hwm_seen.get(key, -1):
                    self.violated(f"broker {bid} {tp} epoch {epoch}: HWM went back from {self.hwm_seen[key]} to {hwm}")
                self.hwm_seen[key] = hwm
                # The HWM never passes what an ISR member holds: every member
                # of the controller's ISR (the live ones) has the committed
                # entries, so any of them can be elected without losing one.
                info = self.partition_info.get(tp)
                if info is None or info.leader != bid or info.leader_epoch != epoch:
                    continue
                # On a leader, retention and DeleteRecords stop at the HWM
                # (Kafka: the log start never passes it); past it they would
                # remove entries not yet committed, acknowledged a moment later.
                if state["log_start_offset"] > hwm:
                    self.violated(f"broker {bid} {tp}: log start {state['log_start_offset']} passes the HWM {hwm}")
                for m in info.isr:
                    member = self.brokers.get(m)
                    if m == bid or member is None or member.store._closed:
                        continue
                    try:
                        leo = member.store.log_end_offset(tp)
                    except (StoreError, KeyError):
                        continue
                    if leo < hwm:
                        self.violated(
                            f"{tp}: leader {bid}'s HWM {hwm} (epoch {epoch}) passes ISR member {m}'s log end {leo}"
                        )

    def _check_stores(self) -> None:
        for bid, store, _ in self._stores():
            problems = store.check()
            if problems:
                self.violated(f"broker {bid} store: {problems[:3]}")

    def _check_no_new_references(self) -> None:
        """After walmgr deleted an object, no leader or ISR member may gain
        a reference to it (a commit that came after the gate passed)."""
        gone = set(self.objects.deleted)
        if not gone:
            return
        for bid, broker in sorted(self.brokers.items()):
            if broker.store._closed:
                continue
            held = broker.store.referenced_files(gone) - self.stale_references.get(bid, set())
            if not held:
                continue
            for tp, offset, key in self._references(broker.store, held):
                info = self.partition_info.get(tp)
                if info is None or bid == info.leader or bid in info.isr:
                    self.violated(f"{tp} offset {offset} on broker {bid} references {key}, deleted by walmgr")
                self.stale_references.setdefault(bid, set()).add(key)

    async def _invariant_loop(self) -> None:
        n = 0
        while True:
            await asyncio.sleep(0.5)
            self._check_controller()
            self._check_no_new_references()
            self._check_hwms()
            n += 1
            if n % 20 == 0:
                self._check_stores()

    # -------------------------------------------------------------- workload

    def _on_ack(self, producer: str, tp: TopicIdPartition, value: bytes, fut: asyncio.Future[RecordMetadata]) -> None:
        if fut.cancelled() or fut.exception() is not None:
            return
        md = fut.result()
        if self.kind_of[producer] == "acks1":
            # May be lost in a failover (Kafka's contract for acks=1).  A
            # stale leader (cut off from the controller, not yet told) still
            # takes acks=1 writes at offsets the new leader has committed, as
            # in Kafka; they are truncated.  A current leader writing over a
            # committed offset shows in the acks=all read-back instead.
            where = (tp, md.offset)
            old = self.acked.get(where)
            if old is not None and old != value:
                self.event(f"{tp} offset {md.offset}: acks=1 {value!r} acknowledged where acks=all holds {old!r}")
            self.acked1[where] = value
            return
        if md.offset < 0:
            # Acknowledged with its offset unknown (a retry the leader had
            # already taken): it must still be read back exactly once.
            self.acked_unplaced[value] = tp
            return
        where = (tp, md.offset)
        old = self.acked.get(where)
        if old is not None and old != value:
            self.violated(f"{tp} offset {md.offset} acknowledged for {old!r} and {value!r}")
        self.acked[where] = value

    async def _produce(self, name: str, az: str, kind: str) -> None:
        self.kind_of[name] = kind
        bootstrap = [("127.0.0.1", BROKER_PORT_BASE + b) for b in sorted(self.az_of)]
        rng = random.Random(hash((self.seed, name)) & 0xFFFFFFFF)
        restart = self.producer_restarts.setdefault(name, asyncio.Event())
        seq = 0
        while self.faults_on or self.loop.time() < self._stop_producing_at:
            restart.clear()
            seq = await self._produce_as(name, az, kind, bootstrap, rng, seq, restart)

    async def _produce_as(
        self,
        name: str,
        az: str,
        kind: str,
        bootstrap: list[tuple[str, int]],
        rng: random.Random,
        seq: int,
        restart: asyncio.Event,
    ) -> int:
        """One producer incarnation (a producer id); the next sequence number."""
        producer = Producer(
            bootstrap,
            az=az,
            acks=1 if kind == "acks1" else -1,
            idempotent=kind == "idempotent",
            linger_ms=5,
            delivery_timeout_ms=600_000,
        )
        self.live_producers[name] = producer
        while True:
            try:
                await producer.start()
                break
            except Exception:  # no broker reachable yet: retry
                await asyncio.sleep(0.5)
        rate = self.shape.rate_per_producer if kind == "idempotent" else self.shape.rate_per_plain_producer
        interval = 1.0 / rate
        try:
            while (self.faults_on or self.loop.time() < self._stop_producing_at) and not restart.is_set():
                tp = self.partitions[rng.randrange(len(self.partitions))]
                value = f"{name}:{seq}".encode()
                seq += 1
                self.sent.add(value)
                self.sent_order.setdefault((name, tp), []).append(value)
                fut = producer.send(tp, value)
                fut.add_done_callback(functools.partial(self._on_ack, name, tp, value))
                await asyncio.sleep(interval)
            await producer.flush()
        finally:
            await producer.close()
        return seq

    _stop_producing_at = 0.0

    # ----------------------------------------------------------------- faults

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
        total = sum(rates.values())
        if total <= 0:
            return
        while self.faults_on:
            await asyncio.sleep(self.fault_rng.expovariate(total / 60))
            if not self.faults_on:
                return
            kind = self.fault_rng.choices(list(rates), weights=list(rates.values()))[0]
            # Fault number k draws its details from its own stream: dropping
            # one (shrinking) leaves every other fault's time and kind as it was.
            k = self.faults_drawn
            self.faults_drawn += 1
            if self.only_faults is not None and k not in self.only_faults:
                self.event(f"#{k} {kind}: skipped")
                continue
            await self._inject(k, kind, random.Random(f"{self.seed}/{k}"))

    async def _inject(self, k: int, kind: str, rng: random.Random) -> None:
        f = self.faults
        if kind == "broker_crash":
            alive = sorted(self.brokers)
            if len(alive) <= 1:
                return
            bid = rng.choice(alive)
            await self.crash_broker(bid)
            self.count(kind, f"#{k} broker {bid}")
            self._schedule(rng.uniform(*f.restart_after_s), functools.partial(self.restart_broker, bid))
        elif kind == "az_partition":
            a, b = rng.sample(sorted(set(self.az_of.values())), 2)
            link = frozenset({a, b})
            if link in self.down_links:
                return
            self.down_links.add(link)
            hole = rng.random() < f.black_hole_share
            if hole:
                self.black_holes.add(link)
            self.network.heal_check()
            self.count(kind, f"#{k} {a}-{b}{' (black hole)' if hole else ''}")
            self._schedule(rng.uniform(*f.partition_s), functools.partial(self._heal, link))
        elif kind == "controller_crash" and self.controller is not None:
            await self.crash_controller()
            self.count(kind, f"#{k}")
            self._schedule(rng.uniform(*f.restart_after_s), self._restart_controller)
        elif kind == "producer_restart" and self.producer_restarts:
            name = rng.choice(sorted(self.producer_restarts))
            self.producer_restarts[name].set()
            self.count(kind, f"#{k} {name}")
        elif kind == "walmgr_crash" and self.walmgr is not None and self.walmgr.registry is not None:
            await self.crash_walmgr()
            self.count(kind, f"#{k}")
            self._schedule(rng.uniform(*f.restart_after_s), self._restart_walmgr)
        elif kind in ("controller_isolation", "walmgr_isolation"):
            # A broker (a zombie leader) or walmgr (a stale view of leaders).
            node = "wm" if kind == "walmgr_isolation" else f"b{rng.choice(sorted(self.az_of))}"
            pair = frozenset({node, "ctl"})
            if pair in self.cut_pairs:
                return
            self.cut_pairs.add(pair)
            self.network.heal_check()
            self.count(kind, f"#{k} {node}")
            self._schedule(rng.uniform(*f.partition_s), functools.partial(self._heal_pair, pair))
        elif kind == "connection_reset":
            open_ = [t for ts in self.network.transports.values() for t in ts if not t.is_closing()]
            if open_:
                t = rng.choice(open_)
                self.network.reset(t)
                self.count(kind, f"#{k} {t.node}->{t.peer.node if t.peer else '?'}")
        elif kind == "slow_link":
            a, b = rng.sample(sorted(set(self.az_of.values())), 2)
            link = frozenset({a, b})
            extra_ms = rng.uniform(*f.slow_link_extra_ms)
            self.slow_links[link] = extra_ms / 1000
            self.count(kind, f"#{k} {a}-{b} +{extra_ms:.0f} ms")
            self._schedule(rng.uniform(*f.partition_s), functools.partial(self._unslow, link))
        elif kind == "delete_records":
            tp = rng.choice(self.partitions)
            info = self.partition_info.get(tp)
            leader = self.brokers.get(info.leader) if info is not None else None
            if info is None or leader is None or leader.store._closed:
                return
            if leader.replicas.leader_epoch(tp) != info.leader_epoch:
                return  # the broker does not lead it (yet): an admin's request would be refused
            st = leader.store.partition_state(tp)
            target = max(st["log_start_offset"], st["high_watermark"] - rng.randint(0, 5))
            [answer] = await asyncio.to_thread(leader.store.delete_records, [DeleteRecordsRequest(tp, target)])
            if answer.errors == Errors.NONE:
                self.deleted_below[tp] = max(self.deleted_below.get(tp, 0), answer.low_watermark)
                self.count(kind, f"#{k} {tp.partition} below {answer.low_watermark} on broker {info.leader}")
        elif kind == "power_loss":
            alive = sorted(b for b, broker in self.brokers.items() if not broker.store._closed)
            if len(alive) <= 1:
                return
            bid = rng.choice(alive)
            broker = self.brokers[bid]
            # The disk as of now; what the broker writes from here on until
            # the power goes is lost.
            snapshot = os.path.join(self.data_dir, f"power-{k}")
            os.makedirs(snapshot)
            broker.store.copy_to(snapshot)
            self._schedule(
                rng.uniform(*f.power_loss_unsynced_s),
                functools.partial(self._power_off, k, bid, broker, snapshot, rng.uniform(*f.restart_after_s)),
            )
        elif kind == "retention":
            limit = rng.choice(f.retention_bytes)
            await self._retention(limit)
            self.count(kind, f"#{k} retention.bytes={limit}")
            self._schedule(rng.uniform(*f.retention_s), functools.partial(self._retention, -1))
        elif kind == "clock_jump":
            bid = rng.choice(sorted(self.az_of))
            self.skew_ms[bid] = rng.randint(-f.clock_skew_ms, f.clock_skew_ms)
            self.count(kind, f"#{k} broker {bid} to {self.skew_ms[bid]:+d} ms")

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
        if self.brokers.get(bid) is not broker or broker.store._closed:
            shutil.rmtree(snapshot, ignore_errors=True)
            return  # it crashed (and maybe restarted) meanwhile
        await self.crash_broker(bid)
        path = os.path.join(self.data_dir, "brokers", str(bid))
        os.replace(os.path.join(snapshot, "data.mdb"), os.path.join(path, "data.mdb"))
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(path, "lock.mdb"))
        # The snapshot's LMDB holds everything acknowledged then (copy_to
        # applied the journal first); the journal written since is lost too.
        shutil.rmtree(os.path.join(path, "journal"), ignore_errors=True)
        shutil.rmtree(snapshot, ignore_errors=True)
        # Its HWMs may be back where they were then (the monotonic-HWM
        # invariant is for a leader within its epoch, and it leads no more).
        for key in [key for key in self.hwm_seen if key[0] == bid]:
            del self.hwm_seen[key]
        self.count("power_loss", f"#{k} broker {bid}")
        self._schedule(restart_after_s, functools.partial(self.restart_broker, bid))

    async def _retention(self, limit: int) -> None:
        self.retention_bytes = limit
        for broker in list(self.brokers.values()):
            await self._set_retention(broker, limit)
        if limit < 0:
            self.event("retention.bytes=-1")

    async def _heal(self, link: frozenset[str]) -> None:
        self.down_links.discard(link)
        self.black_holes.discard(link)
        self.event(f"heal {sorted(link)}")

    async def _heal_pair(self, pair: frozenset[str]) -> None:
        self.cut_pairs.discard(pair)
        self.event(f"heal {sorted(pair)}")

    async def _unslow(self, link: frozenset[str]) -> None:
        self.slow_links.pop(link, None)
        self.event(f"fast {sorted(link)}")

    async def _restart_controller(self) -> None:
        async with self._restarting_ctl:
            if self.controller is None and self.faults_on:
                await run_node("ctl", self.start_controller())
                self.count("controller_restart")

    async def _restart_walmgr(self) -> None:
        async with self._restarting_wm:
            if (self.walmgr is None or self.walmgr.registry is None) and self.faults_on:
                try:
                    await run_node("wm", self.start_walmgr())
                except Exception as e:
                    self.event(f"walmgr restart failed: {type(e).__name__}: {e}")
                    return
                self.count("walmgr_restart")

    # ------------------------------------------------------------------- run

    async def main(self) -> None:
        await run_node("ctl", self.start_controller())
        await run_node("wm", self._start_walmgr_early())
        for bid in sorted(self.az_of):
            await run_node(f"b{bid}", self.start_broker(bid))
        self.admin = ControllerMetadata("127.0.0.1", self.controller_port)
        await self.admin.start()
        rf = min(self.shape.replication_factor, len(self.az_of))
        answer = (await self.admin.create_topics({TOPIC: (self.shape.partitions, rf)}))[TOPIC]
        assert not isinstance(answer, Errors), answer
        self.partitions = [TopicIdPartition(answer.topic_id, p) for p in range(self.shape.partitions)]
        for _ in range(200):
            if all(any(b.replicas.is_leader(tp) for b in self.brokers.values()) for tp in self.partitions):
                break
            await asyncio.sleep(0.05)
        self.event("cluster up")
        checks = run_node("checker", self._invariant_loop())
        azs = sorted(set(self.az_of.values()))
        producers = [
            run_node(f"p-{az}-{i}", self._produce(f"p{az}{i}", az, "idempotent"))
            for az in azs
            for i in range(self.shape.producers_per_az)
        ]
        for i in range(self.shape.plain_producers):
            az = azs[i % len(azs)]
            producers.append(run_node(f"p-{az}-plain{i}", self._produce(f"q{az}{i}", az, "plain")))
        for i in range(self.shape.acks1_producers):
            az = azs[(i + 1) % len(azs)]
            producers.append(run_node(f"p-{az}-acks1{i}", self._produce(f"r{az}{i}", az, "acks1")))
        faults = run_node("world", self._fault_loop())
        await asyncio.sleep(self.shape.duration_s)
        # Faults stop; everything comes back.
        self.faults_on = False
        self._stop_producing_at = self.loop.time() + 1.0
        faults.cancel()
        under_way = []
        for t, begun in list(self._pending.items()):
            if begun[0]:
                under_way.append(t)
            else:
                t.cancel()
        self.down_links.clear()
        self.black_holes.clear()
        self.cut_pairs.clear()
        self.slow_links.clear()
        if self.retention_bytes is not None and self.retention_bytes >= 0:
            await self._retention(-1)
        self.event("faults stop")
        # The controller first: restarts under way may wait for it.
        async with self._restarting_ctl:
            if self.controller is None:
                await run_node("ctl", self.start_controller())
        if under_way:
            _, hung = await asyncio.wait(under_way, timeout=30)
            for t in hung:
                t.cancel()
            if hung:
                await asyncio.wait(hung, timeout=5)
        for bid in sorted(self.down):
            await run_node(f"b{bid}", self.start_broker(bid))
        self.down.clear()
        async with self._restarting_wm:
            if self.walmgr is None or self.walmgr.registry is None:
                await run_node("wm", self.start_walmgr())
        # Producers finish what they have in flight.
        pending: set[asyncio.Task[Any]] = set()
        if producers:
            _done, pending = await asyncio.wait(producers, timeout=self.shape.settle_s + 60)
        if pending:
            # Liveness: with every broker back, a producer delivers what it holds.
            stuck = {}
            for name, p in self.live_producers.items():
                parts = {
                    str(tp.partition): (len(st.pending), len(st.ready), st.inflight)
                    for tp, st in p._parts.items()
                    if st.pending or st.ready or st.inflight
                }
                if parts:
                    stuck[name] = parts
            self.violated(
                f"{len(pending)} producers still hold records {self.shape.settle_s + 60:.0f} s after the faults "
                f"stopped (partition: pending, ready batches, in flight): {stuck}"
            )
        await asyncio.sleep(self.shape.settle_s)
        checks.cancel()
        self._check_controller()
        self._check_no_new_references()
        self._check_stores()
        await self._verify()
        await self._verify_orphans_deleted()

    async def _start_walmgr_early(self) -> None:
        """walmgr starts before the brokers (they learn its address)."""
        await self.start_walmgr()

    async def _verify(self) -> None:
        """Read every partition from its log start to its HWM and check what
        was acknowledged (see the module's docstring)."""
        bootstrap = [("127.0.0.1", BROKER_PORT_BASE + b) for b in sorted(self.az_of)]
        # auto.offset.reset=earliest: retention may move a log start past the
        # reader, as it does past any consumer.
        consumer = Consumer(bootstrap, max_wait_ms=100, auto_offset_reset="earliest")
        await run_node("verifier", consumer.start())
        for tp in self.partitions:
            consumer.assign([tp], self.deleted_below.get(tp, 0))
        want = {tp: max((o for (t, o) in self.acked if t == tp), default=-1) for tp in self.partitions}

        def behind(tp: TopicIdPartition) -> bool:
            pos = consumer.positions[tp]
            return pos <= want[tp] or pos < consumer.high_watermarks.get(tp, pos + 1)

        seen: dict[tuple[TopicIdPartition, int], bytes] = {}
        deadline = self.loop.time() + 60
        while any(behind(tp) for tp in self.partitions):
            if self.loop.time() > deadline:
                missing = {
                    tp: (consumer.positions[tp], want[tp], consumer.high_watermarks.get(tp))
                    for tp in self.partitions
                    if behind(tp)
                }
                self.violated(f"records not readable within 60 s: position/last acked/HWM {missing}")
            before = dict(consumer.positions)
            try:
                records = await run_node("verifier", consumer.poll())
            except CorruptRecordError as e:
                self.violated(f"corrupt batches: {e}")
            for r in records:
                tp = r.topic_id_partition
                # No gaps: each fetch continues where the last one ended.
                if r.offset != before[tp]:
                    self.violated(f"{tp}: read offset {r.offset} after {before[tp] - 1} (a gap)")
                before[tp] = r.offset + 1
                if r.value is None:
                    continue
                seen[(tp, r.offset)] = r.value
        await consumer.close()
        # Where each partition's log started for the reader: DeleteRecords
        # and retention removed what lies below, by design.
        start = dict(self.deleted_below)
        for tp, resets in consumer.resets.items():
            for frm, to, hwm in resets:
                self.event(f"verifier: {tp.partition} reset from {frm} to the log start {to} (HWM {hwm})")
                if to > hwm or to < frm:
                    self.violated(f"{tp}: reset from {frm} to a log start of {to}, HWM {hwm}")
                start[tp] = max(start.get(tp, 0), to)
        for where, value in self.acked.items():
            if where[1] < start.get(where[0], 0):
                continue
            got = seen.get(where)
            if got != value:
                self.violated(f"{where[0]} offset {where[1]}: acknowledged {value!r}, read {got!r}")
        for where, value in self.acked1.items():
            if where[1] >= start.get(where[0], 0) and seen.get(where) != value:
                self.lost_acks1 += 1
        # Exactly once (idempotent producers), in order per producer and partition.
        by_value: dict[bytes, list[tuple[TopicIdPartition, int]]] = {}
        for where, value in seen.items():
            by_value.setdefault(value, []).append(where)
        acked_values = set(self.acked.values()) | set(self.acked_unplaced)
        for value, places in by_value.items():
            if value not in self.sent:
                self.violated(f"{places[0][0]} offset {places[0][1]}: read {value!r}, which no producer sent")
            if len(places) > 1 and value in acked_values and self._kind_of_value(value) == "idempotent":
                self.violated(f"{value!r} read {len(places)} times: {places[:3]}")
        for value, tp in self.acked_unplaced.items():
            if value not in by_value and start.get(tp, 0) > 0:
                continue  # maybe below the log start DeleteRecords or retention set
            if [t for t, _ in by_value.get(value, ())] != [tp]:
                self.violated(f"{value!r} acknowledged (offset unknown) on {tp}, read at {by_value.get(value)}")
        for (name, tp), sent in self.sent_order.items():
            if self.kind_of[name] != "idempotent":
                continue  # retries may reorder and duplicate without idempotence
            offsets = {v: o for (t, o), v in seen.items() if t == tp}
            read = [offsets[v] for v in sent if v in offsets]
            if read != sorted(read):
                self.violated(f"{name} {tp}: records read out of the order sent")
        self.verified = len(self.acked) + len(self.acked_unplaced)

    def _kind_of_value(self, value: bytes) -> str:
        return self.kind_of.get(value.split(b":", 1)[0].decode(), "")

    async def _verify_orphans_deleted(self) -> None:
        """Liveness: objects nobody references, past the age gate, are
        deleted within a few walmgr cycles once the faults stopped."""
        gate_s = (COMMIT_DEADLINE_MS + MAX_CLOCK_SKEW_MS + GRACE_MS) / 1000
        await asyncio.sleep(gate_s + 1)
        orphans = self._orphans(gate_s)
        for _ in range(6):
            if not orphans:
                return
            await asyncio.sleep(WALMGR_CYCLE_MS / 1000 * 2)
            orphans = self._orphans(gate_s)
        if orphans:
            why = []
            for k in sorted(orphans)[:3]:
                rec = self.walmgr.registry.get(k) if self.walmgr is not None and self.walmgr.registry else None
                why.append(f"{k} ({'untracked' if rec is None else f'{rec.state.name}: {rec.note}'})")
            task = self.walmgr_task
            state = "walmgr not running" if task is None else "walmgr running"
            if task is not None and task.done():
                exc = None if task.cancelled() else task.exception()
                state = f"walmgr's loop ended: {'cancelled' if exc is None else repr(exc)}"
            self.violated(f"{len(orphans)} orphans past the gate not deleted ({state}): {'; '.join(why)}")

    def _orphans(self, gate_s: float) -> set[str]:
        now = self.loop.time()
        old = {k for k, (_, at) in self.objects.objects.items() if now - at > gate_s + 2}
        for _, store, _ in self._stores():
            old -= store.referenced_files(old)
        return old

    verified = 0
    crash_trace = ""


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
    try:
        with deterministic_process(world.loop, seed), _inline_pools():
            try:
                world.main_task = world.loop.create_task(world.main())
                world.loop.run_until_complete(world.main_task)
            except (Violation, asyncio.CancelledError):
                if not world.violations:
                    raise
            except Exception as e:  # the world itself broke: report it like a violation
                world.violations.append(f"t={world.loop.time():.3f}s: the run failed: {type(e).__name__}: {e}")
                world.crash_trace = traceback.format_exc()
            finally:
                with contextlib.suppress(Exception):
                    _shutdown(world)
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)
        shutil.rmtree(data_dir, ignore_errors=True)
    wall_s = time.perf_counter() - wall
    # Two runs of one seed must agree on all of this, to the step.
    fingerprint = (world.events, sorted((str(tp), o, v) for (tp, o), v in world.acked.items()), world.loop.steps)
    digest = hashlib.sha256(repr(fingerprint).encode()).hexdigest()[:16]
    return Result(
        seed,
        world.violations,
        world.events,
        world.loop.time(),
        wall_s,
        world.loop.steps,
        len(world.acked),
        world.verified,
        dict(sorted(world.fault_counts.items())),
        handler.records,
        digest,
        world.faults_drawn,
        only_faults=only_faults,
        acked_acks1=len(world.acked1),
        lost_acks1=world.lost_acks1,
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
    for b in world.brokers.values():
        with contextlib.suppress(Exception):
            b.store.close()
    if world.controller is not None and world.controller._controller is not None:
        world.controller._controller.close()
    if world.walmgr is not None and world.walmgr.registry is not None:
        world.walmgr.registry.close()
    with contextlib.suppress(BaseException):
        loop.run_until_complete(loop.shutdown_asyncgens())
    loop.close()
