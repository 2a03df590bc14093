"""The simulated cluster's nodes: the real controller, brokers and walmgr,
started, crashed and restarted on the deterministic runtime.

A node is a name the runtime knows its tasks by (``ctl``, ``wm``,
``b<id>``): a crash cancels exactly that node's tasks and cuts its
connections; its files stay, as a process crash leaves them.  What
decides when a node crashes is :mod:`simulations.dst.faults`; what is
checked about the nodes is :mod:`simulations.dst.invariants`, through
the read-only parts of :class:`Cluster` (``stores()`` among them).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from typing import Any

from partlog.broker.server import Broker, BrokerConfig
from partlog.broker.tiering import TIERING_INTERVAL_MS_DEFAULT
from partlog.controller.client import ControllerMetadata
from partlog.controller.cluster_meta import BrokerInfo, StaticMetadata
from partlog.controller.core import ControllerConfig
from partlog.controller.partition_admin import NewPartitions
from partlog.controller.rules import Refused
from partlog.controller.server import ControllerServer
from partlog.kafka.errors import Errors
from partlog.kafka.records import TopicIdPartition
from partlog.produce.pipeline import ProduceConfig
from partlog.replication.config import ReplicationConfig
from partlog.runtime import Entropy
from partlog.store import MetadataStore
from simulations.dst.config import (
    BROKER_PORT_BASE,
    COMMIT_DEADLINE_MS,
    GRACE_MS,
    GROWN_PARTITIONS_MAX,
    HEARTBEAT_INTERVAL_MS,
    LEADER_IMBALANCE_CHECK_INTERVAL_MS,
    MAX_CLOCK_SKEW_MS,
    RELEASE_GRACE_MS,
    REPLICA_ANSWER_AGE_MAX_MS,
    SESSION_TIMEOUT_MS,
    TIERING_INTERVAL_MS,
    TOPIC,
    VERDICT_WINDOW_MS,
    WALMGR_CYCLE_MS,
    Shape,
)
from simulations.dst.journal import Journal
from simulations.dst.runtime import SimNetwork, VirtualClock, VirtualLoop, cancel_node, run_node
from simulations.dst.store import SimObjectStore
from walmgr.config import WalmgrConfig
from walmgr.daemon import Walmgr


class BrokerClock:
    """A broker's clock in the simulation: the virtual time, its wall clock
    off by the broker's current skew (``cluster.skew_ms``, which a clock-jump
    fault changes); monotonic time is not skewed."""

    def __init__(self, cluster: Cluster, broker_id: int) -> None:
        self.cluster = cluster
        self.broker_id = broker_id

    def wall_ms(self) -> int:
        return self.cluster.now_ms() + self.cluster.skew_ms[self.broker_id]

    def monotonic(self) -> float:
        return self.cluster.clock.monotonic()

    async def sleep(self, seconds: float) -> None:
        await self.cluster.clock.sleep(seconds)


class Cluster:
    """One controller, the brokers of ``shape`` in their AZs, one walmgr,
    all on ``objects``; files under ``data_dir``."""

    def __init__(
        self,
        shape: Shape,
        loop: VirtualLoop,
        network: SimNetwork,
        objects: SimObjectStore,
        data_dir: str,
        journal: Journal,
        entropy: Entropy,
    ) -> None:
        self.shape = shape
        self.entropy = entropy
        self.loop = loop
        self.clock = VirtualClock(loop)
        self.network = network
        self.objects = objects
        self.data_dir = data_dir
        self.journal = journal
        self.layout = StaticMetadata.generate(azs=shape.azs, brokers_per_az=shape.brokers_per_az, topics={})
        self.az_of = {b.broker_id: b.az for b in self.layout.brokers()}
        # Each broker's clock offset (ms); the faults draw and move them.
        self.skew_ms = dict.fromkeys(self.az_of, 0)
        # Each machine's boot count (its boot id): a power loss reboots it,
        # a process crash does not (partlog.store.shutdown's rule).
        self.boots = dict.fromkeys(self.az_of, 0)
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
        # Other topics' partitions (consume-transform-produce: simulations/dst/ctp.py),
        # which the walmgr and HWM checks cover too; no other load or fault touches them.
        self.extra_partitions: list[TopicIdPartition] = []
        # The retention.bytes the topic has now (None: Kafka's default, none).
        self.retention_bytes: int | None = None
        # One restart at a time per process kind: two pending ones (two
        # crashes) would both see it down and start two processes on one
        # directory.  Separate locks: walmgr's start waits for the controller.
        self.restarting_ctl = asyncio.Lock()
        self.restarting_wm = asyncio.Lock()
        # With Shape.tiering: what the brokers' builder loops and replica
        # fetchers did, summed over every incarnation (a crash's counters
        # are added when it goes).
        self.tiering_counts: dict[str, int] = {}

    def az_of_node(self, node: str) -> str:
        if node.startswith("b"):
            return self.az_of[int(node[1:])]
        if node.startswith("p-"):
            return node.split("-")[1]
        return "az1"  # controller, walmgr, verifier: in the first AZ

    def now_ms(self) -> int:
        return self.clock.wall_ms()

    def bootstrap(self) -> list[tuple[str, int]]:
        """Every broker's address, as a client's bootstrap list."""
        return [("127.0.0.1", BROKER_PORT_BASE + b) for b in sorted(self.az_of)]

    async def start(self) -> None:
        """Controller, walmgr, brokers, then the topic; back once every
        partition has a leader (or after 10 s)."""
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
        if self.shape.tiering:
            for bid in sorted(self.brokers):
                await run_node(f"b{bid}", self._enable_tiering(self.brokers[bid]))
        self.journal.event("cluster up")

    async def create_partitions(self, added: int) -> str:
        """Grow the topic by ``added`` partitions through the controller (as
        an operator's CreatePartitions); once the admin's view holds them,
        the producers spread over them.  What was done ("" for nothing:
        at GROWN_PARTITIONS_MAX, or the controller did not answer)."""
        t = self.admin.topic(TOPIC) if self.admin is not None else None
        if self.admin is None or t is None or t.num_partitions + added > GROWN_PARTITIONS_MAX:
            return ""
        count = t.num_partitions + added
        answer = (await self.admin.create_partitions({TOPIC: NewPartitions(count)}, False))[TOPIC]
        grown = self.admin.topic(TOPIC)
        if grown is not None and grown.num_partitions > len(self.partitions):
            self.partitions = [TopicIdPartition(grown.topic_id, p) for p in range(grown.num_partitions)]
        if isinstance(answer, Refused):
            return ""
        return f"{t.num_partitions} -> {answer.num_partitions} partitions"

    # ------------------------------------------------------------ brokers

    def _broker_config(self, bid: int) -> BrokerConfig:
        return BrokerConfig(
            bid,
            self.az_of[bid],
            os.path.join(self.data_dir, "brokers", str(bid)),
            port=BROKER_PORT_BASE + bid,
            produce=ProduceConfig(commit_interval_ms=50),
            sync=False,
            boot_id=f"machine-{bid}-boot-{self.boots[bid]}",
            # No threads in the simulation: checkpoints run inline, by count.
            store_checkpoint_thread=False,
            retention_check_interval_ms=1_000,
            commit_rpc_timeout_ms=3_000,
            commit_deadline_ms=COMMIT_DEADLINE_MS,
            replication=ReplicationConfig(
                replica_lag_time_max_ms=2_000,
                min_insync_replicas=self.shape.min_insync_replicas,
                release_grace_ms=RELEASE_GRACE_MS,
                replica_answer_age_max_ms=REPLICA_ANSWER_AGE_MAX_MS,
            ),
            walmgr_address=f"127.0.0.1:{self.walmgr.port}" if self.walmgr is not None and self.walmgr.port else "",
            # (Without tiering the loop never starts: the interval is moot.)
            tiering_interval_ms=TIERING_INTERVAL_MS if self.shape.tiering else TIERING_INTERVAL_MS_DEFAULT,
        )

    async def start_broker(self, bid: int) -> None:
        me = BrokerInfo(bid, self.az_of[bid], "127.0.0.1", BROKER_PORT_BASE + bid)
        source = ControllerMetadata("127.0.0.1", self.controller_port, me, heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS)
        self.sources[bid] = source
        await source.connect()
        broker = Broker(
            self._broker_config(bid), source, self.objects, clock=BrokerClock(self, bid), entropy=self.entropy
        )
        self.brokers[bid] = broker
        # KIP-966: reported with the registration (the node's CLI does the same).
        source.unclean_shutdown = broker.store.unclean_shutdown
        await broker.listen()
        await source.start()
        await broker.start()
        if self.retention_bytes is not None:
            # The topic's config as it is now (a restarted broker learns it).
            await self._set_retention(broker, self.retention_bytes)
        if self.shape.tiering and self.partitions:
            await self._enable_tiering(broker)

    async def _enable_tiering(self, broker: Broker) -> None:
        """The topic's tiering configs in the broker's store, as its config
        would reach it; the broker's builder loop starts (as the broker's
        node's task: a crash stops it).  A restarted broker has them in its
        store already; setting them again changes nothing."""
        configs: dict[str, str | int] = {
            "remote.storage.enable": "true",
            "segment.ms": self.shape.tiering_segment_ms,
        }
        topic_id = self.partitions[0].topic_id
        for _ in range(100):  # the broker's store learns the topic from its metadata
            if broker.store._closed:
                return
            if topic_id in await asyncio.to_thread(broker.store.topics):
                await asyncio.to_thread(broker.alter_topic_configs, topic_id, configs)
                return
            await asyncio.sleep(0.05)
        self.journal.violated(f"broker {broker.broker_id}: the topic never reached its store")

    def count_tiering(self, broker: Broker) -> None:
        """Add what ``broker``'s builder loop and fetchers did to
        ``tiering_counts`` (when it crashes, and at the end)."""
        registry = broker.metrics.registry
        stats = broker.replicas.stats
        got = {
            "segments uploaded": registry.get_sample_value("partlog_tiered_segments_total") or 0.0,
            "swaps on leaders": registry.get_sample_value("partlog_tiered_swaps_total", {"outcome": "ok"}) or 0.0,
            "swaps applied on followers": stats.segment_swaps_applied,
            "follower swaps refused": stats.segment_swaps_failed,
        }
        for k, v in got.items():
            self.tiering_counts[k] = self.tiering_counts.get(k, 0) + int(v)

    async def _set_retention(self, broker: Broker, limit: int) -> None:
        if self.partitions and not broker.store._closed:
            await asyncio.to_thread(
                broker.store.alter_topic_configs, self.partitions[0].topic_id, {"retention.bytes": limit}
            )

    async def set_retention(self, limit: int) -> None:
        """The topic's retention.bytes on every live broker (-1: none)."""
        self.retention_bytes = limit
        for broker in list(self.brokers.values()):
            await self._set_retention(broker, limit)
        if limit < 0:
            self.journal.event("retention.bytes=-1")

    async def crash_broker(self, bid: int) -> None:
        node = f"b{bid}"
        cancel_node(self.loop, node)
        self.network.cut(node)
        broker = self.brokers.pop(bid)
        if self.shape.tiering:
            self.count_tiering(broker)
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
        self.journal.count("broker_restart", f"broker {bid}")
        try:
            # As the broker's own node: a later crash must cancel its tasks
            # and close its listener.
            await run_node(f"b{bid}", self.start_broker(bid))
        except BaseException as e:
            # Failed or cut off halfway (the faults stopped): undo the half
            # start, as a crash would, so it can start again from scratch.
            self.journal.event(f"broker {bid} restart failed: {type(e).__name__}: {e}")
            cancel_node(self.loop, f"b{bid}")
            self.network.cut(f"b{bid}")
            half = self.brokers.pop(bid, None)
            if half is not None:
                half.store.close(checkpoint=False)
            self.sources.pop(bid, None)
            self.down.add(bid)
            if not isinstance(e, Exception):
                raise

    async def start_down_brokers(self) -> None:
        """Every crashed broker back (the faults stopped)."""
        for bid in sorted(self.down):
            await run_node(f"b{bid}", self.start_broker(bid))
        self.down.clear()

    def stores(self) -> Iterator[tuple[int, MetadataStore, bool]]:
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

    # --------------------------------------------------------- controller

    async def start_controller(self) -> None:
        cfg = ControllerConfig(
            os.path.join(self.data_dir, "controller"),
            broker_session_timeout_ms=SESSION_TIMEOUT_MS,
            # Leaders move back to preferred replicas every few seconds.
            leader_imbalance_check_interval_ms=LEADER_IMBALANCE_CHECK_INTERVAL_MS,
            # The brokers' min ISR: the ELR's threshold (docs/design/elr.md).
            min_insync_replicas=self.shape.min_insync_replicas,
        )
        server = ControllerServer(cfg, port=self.controller_port, clock=self.clock, entropy=self.entropy)
        await server.start()
        self.controller = server
        self.controller_port = server.port

    async def crash_controller(self) -> None:
        cancel_node(self.loop, "ctl")
        self.network.cut("ctl")
        assert self.controller is not None
        await asyncio.sleep(0)
        ctl = self.controller._controller
        if ctl is not None:
            ctl.close()
            self.controller._controller = None
        self.controller = None

    async def start_controller_if_down(self) -> None:
        async with self.restarting_ctl:
            if self.controller is None:
                await run_node("ctl", self.start_controller())

    # ------------------------------------------------------------- walmgr

    async def _start_walmgr_early(self) -> None:
        """walmgr starts before the brokers (they learn its address)."""
        await self.start_walmgr()

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
            verdict_window_ms=VERDICT_WINDOW_MS,
            listen=f"127.0.0.1:{self.walmgr.port if self.walmgr is not None else 0}",
        )
        metadata = ControllerMetadata("127.0.0.1", self.controller_port)
        await metadata.start()  # a source handed to walmgr is started by its owner
        mgr = Walmgr(cfg, store=self.objects, metadata=metadata, clock=self.clock, entropy=self.entropy)
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

    def walmgr_down(self) -> bool:
        return self.walmgr is None or self.walmgr.registry is None

    async def crash_walmgr(self) -> None:
        cancel_node(self.loop, "wm")
        self.network.cut("wm")
        await asyncio.sleep(0)
        for mgr in (self.walmgr, self.walmgr_starting):
            if mgr is not None and mgr.registry is not None:
                mgr.registry.close()
                mgr.registry = None
        self.walmgr_starting = None

    async def start_walmgr_if_down(self) -> None:
        async with self.restarting_wm:
            if self.walmgr_down():
                await run_node("wm", self.start_walmgr())
