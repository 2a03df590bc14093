"""``partlog cluster``: a local multi-AZ cluster on loopback, producers in
every AZ, everything consumed back and verified.

A walmgr runs beside them (``<data-dir>/walmgr``; demo-sized deadlines: a
2 s commit deadline, 0.5 s clock skew and 0.5 s grace), told of every
upload by the brokers; with ``orphan_rate`` that share of WAL files has its
commits dropped after the upload (the batches are answered with a retriable
error and produced again), so walmgr has orphans to delete.  The report
says how many were created and deleted, and how many deleted objects a
broker still referenced (always 0).

The brokers take their metadata from an embedded controller (its state in
``<data-dir>/controller``): the topic is created with one replica per AZ,
leaders are elected from the ISR when a broker dies, and with
``kill_broker_every_s`` a random broker is stopped abruptly (no handover:
its server, replication and store just stop) and restarted on the same data
directory a moment later, while the producers keep going.

Each record's value starts with ``<producer>:<sequence>:``, so the verifier
knows what every acknowledged record was: it must be read back exactly once,
at the offset its acknowledgement gave, and one producer's records to one
partition must appear in the order they were sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from partlog.broker.server import Broker, BrokerConfig
from partlog.client import Consumer, Producer, RecordMetadata
from partlog.controller.client import ControllerMetadata
from partlog.controller.cluster_meta import BrokerInfo, StaticMetadata
from partlog.controller.core import PARTITIONS_PER_TOPIC_MAX, ControllerConfig
from partlog.controller.etcd_layout import parse_etcd_url
from partlog.controller.etcd_meta import EtcdMetadata
from partlog.controller.server import ControllerServer
from partlog.kafka.errors import Errors
from partlog.kafka.records import TopicIdPartition
from partlog.kafka.topic_config import MAX_MESSAGE_BYTES_DEFAULT
from partlog.node import BrokerNode, NodeConfig
from partlog.produce.pipeline import ProduceConfig, SendCommit
from partlog.replication.manager import ReplicationStats
from partlog.store import COMMIT_DEADLINE_MS_DEFAULT
from partlog.tools.etcd_launcher import EtcdCluster
from partlog.wal.objectstore import LocalDirStore, ObjectStore, open_store
from walmgr.config import WalmgrConfig
from walmgr.daemon import Walmgr
from walmgr.model import State

log = logging.getLogger(__name__)

TOPIC = "partlog-cluster"
# How long the final consume may take before unread records count as lost.
VERIFY_TIMEOUT_S = 120.0
# Lost records the report names (the count is exact).
LOST_EXAMPLES_MAX = 10
# Demo-sized failure detection: a dead broker is fenced (and its partitions
# get new leaders) within the session timeout.  Kafka's defaults are 9 s and 2 s.
SESSION_TIMEOUT_MS = 3_000
HEARTBEAT_INTERVAL_MS = 500
# How long the cluster may take to elect every partition's first leader.
STARTUP_TIMEOUT_S = 60.0
# Demo-sized deletion safety (brokers and walmgr agree on the deadline).
DEMO_COMMIT_DEADLINE_MS = 2_000
DEMO_MAX_CLOCK_SKEW_MS = 500
DEMO_GRACE_MS = 500
WALMGR_CYCLE_MS = 1_000
# After producing, walmgr gets this many cycles past the age gate to delete
# the orphans.
WALMGR_FINAL_CYCLES = 3
# Segment ids an orphan-injecting broker remembers its choice for.
ORPHAN_CHOICES_MAX = 10_000
# Bounds on the options (flags are checked against them, so a typo such as
# --message-bytes 1e8 is a clear error, not a 23 GB allocation):
# a record must fit a batch under the topic's max.message.bytes (Kafka's
# default, 1 MiB + 12) with its framing;
MESSAGE_BYTES_MAX = MAX_MESSAGE_BYTES_DEFAULT - 1024
# every broker, producer and the walmgr run in one process on one event loop;
BROKERS_MAX = 64
PRODUCERS_MAX = 1_024
RATE_PER_PRODUCER_MAX = 1_000_000  # records/s
# a day of producing is a soak test; more is a mistake;
DURATION_S_MAX = 86_400.0
# the WAL buffer must rotate well inside the demo commit deadline, or every
# commit of a segment is refused as too old.
COMMIT_INTERVAL_MS_MAX = DEMO_COMMIT_DEADLINE_MS // 2


@dataclass(frozen=True, slots=True)
class ClusterOptions:
    azs: int = 3
    brokers_per_az: int = 2
    partitions: int = 12
    producers_per_az: int = 2
    rate_per_producer: int = 500  # records/s
    message_bytes: int = 100
    duration_s: float = 10.0
    data_dir: str | None = None
    store_url: str | None = None
    commit_interval_ms: int = 250
    buffer_bytes_max: int = 4 * 1024 * 1024
    sync: bool = True
    seed: int = 0
    # One replica per AZ by default (at most the number of brokers).
    replication_factor: int = 3
    # Kill a random broker every this many seconds and restart it after
    # restart_after_s (0: never).
    kill_broker_every_s: float = 0.0
    restart_after_s: float = 1.0
    walmgr: bool = True
    # Share of WAL files whose commits are dropped after upload (orphans).
    orphan_rate: float = 0.0
    # Every broker gets a Kafka listener (partlog.kafka_front).
    kafka: bool = True
    # Cluster metadata: "" for the embedded controller, "etcd" for a
    # 3-member etcd on loopback started here, or an etcd:// URL (each run
    # then uses its own sub-prefix of the URL's: a new cluster).
    metadata: str = ""
    # With "etcd": kill an etcd follower at 25% of the run (back at 40%),
    # then the etcd leader at 55% (back at 75%).
    etcd_member_faults: bool = False
    # With "etcd": every etcd member down for this many seconds from 30% of the run.
    etcd_outage_s: float = 0.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.orphan_rate <= 1.0:
            raise ValueError(f"orphan-rate must be in [0, 1], got {self.orphan_rate}")
        if self.orphan_rate and not self.walmgr:
            raise ValueError("orphan-rate needs walmgr (it deletes the orphans)")
        for name in (
            "azs",
            "brokers_per_az",
            "partitions",
            "producers_per_az",
            "replication_factor",
            "rate_per_producer",
            "message_bytes",
            "commit_interval_ms",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"{_flag(name)} must be > 0, got {getattr(self, name)}")
        bounds: dict[str, tuple[float, float]] = {
            "azs": (self.azs, BROKERS_MAX),
            "brokers_per_az": (self.azs * self.brokers_per_az, BROKERS_MAX),
            "partitions": (self.partitions, PARTITIONS_PER_TOPIC_MAX),
            "producers_per_az": (self.azs * self.producers_per_az, PRODUCERS_MAX),
            "rate_per_producer": (self.rate_per_producer, RATE_PER_PRODUCER_MAX),
            "message_bytes": (self.message_bytes, MESSAGE_BYTES_MAX),
            "duration_s": (self.duration_s, DURATION_S_MAX),
            "commit_interval_ms": (self.commit_interval_ms, COMMIT_INTERVAL_MS_MAX),
        }
        for name, (value, limit) in bounds.items():
            if value > limit:
                what = {"brokers_per_az": "brokers in all", "producers_per_az": "producers in all"}.get(
                    name, _flag(name)
                )
                raise ValueError(f"{what} may be at most {_num(limit)}, got {_num(value)}")
        if self.duration_s <= 0:
            raise ValueError(f"duration must be > 0, got {self.duration_s}")
        if self.kill_broker_every_s < 0 or self.restart_after_s < 0:
            raise ValueError("kill-broker-every and restart-after must be >= 0")
        if self.metadata not in ("", "etcd"):
            from partlog.controller.etcd_layout import parse_etcd_url

            parse_etcd_url(self.metadata)  # MetadataError (a ValueError) names what is wrong
        if (self.etcd_member_faults or self.etcd_outage_s) and self.metadata != "etcd":
            raise ValueError("etcd-member-faults and etcd-outage-s need --metadata etcd (an etcd started here)")
        if self.etcd_member_faults and self.etcd_outage_s:
            raise ValueError("give one of etcd-member-faults and etcd-outage-s per run")
        if not 0 <= self.etcd_outage_s <= self.duration_s:
            raise ValueError(f"etcd-outage-s must be in [0, duration], got {self.etcd_outage_s:g}")


def _num(x: float) -> str:
    return f"{x:,}" if isinstance(x, int) else f"{x:g}"


def _flag(field_name: str) -> str:
    """The command-line flag of a ClusterOptions field."""
    flags = {"rate_per_producer": "rate", "duration_s": "duration"}
    return "--" + flags.get(field_name, field_name).replace("_", "-")


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (nearest rank; 0.0 for none)."""
    if not values:
        return 0.0
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def free_ports(n: int) -> list[int]:
    """``n`` distinct free TCP ports on 127.0.0.1 (free when asked)."""
    import socket

    socks = [socket.socket() for _ in range(n)]
    try:
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in socks]
    finally:
        for sock in socks:
            sock.close()


class OrphanInjectingBroker(Broker):
    """A broker that drops every commit of a share of its WAL files after
    the upload, as a crash between upload and commit would: the object is an
    orphan, its batches are answered REQUEST_TIMED_OUT and produced again."""

    def __init__(self, *args: Any, orphan_rate: float, seed: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._orphan_rate = orphan_rate
        self._rng = random.Random(seed)
        self._choices: dict[int, bool] = {}
        self.orphans_created: list[str] = []
        self._send_commit = self.produce_driver.send_commit
        self.produce_driver.send_commit = self._queue_commit  # type: ignore[method-assign]

    def _queue_commit(self, c: SendCommit) -> None:
        drop = self._choices.get(c.segment_id)
        if drop is None:
            drop = self._choices[c.segment_id] = self._rng.random() < self._orphan_rate
            if drop:
                self.orphans_created.append(c.key)
            if len(self._choices) > ORPHAN_CHOICES_MAX:
                del self._choices[next(iter(self._choices))]
        if drop:
            self.produce_driver.fail_commit(c, Errors.REQUEST_TIMED_OUT, "orphan injected")
            return
        self._send_commit(c)


class LocalCluster:
    """A controller and brokers in this process, each broker restartable on
    its own data directory and port."""

    def __init__(self, opts: ClusterOptions, data_dir: str, objects: ObjectStore) -> None:
        self.opts = opts
        self.data_dir = data_dir
        self.objects = objects
        self.layout = StaticMetadata.generate(azs=opts.azs, brokers_per_az=opts.brokers_per_az, topics={})
        ids = [b.broker_id for b in self.layout.brokers()]
        ports = free_ports(2 * len(ids))
        self.ports = dict(zip(ids, ports[: len(ids)], strict=True))
        self.kafka_ports = dict(zip(ids, ports[len(ids) :], strict=True)) if opts.kafka else {}
        # The embedded controller, or etcd (one started here, or the URL's).
        self.controller: ControllerServer | None = None
        self.etcd: EtcdCluster | None = None
        self.etcd_url = ""
        if not opts.metadata:
            self.controller = ControllerServer(
                ControllerConfig(os.path.join(data_dir, "controller"), broker_session_timeout_ms=SESSION_TIMEOUT_MS)
            )
        self.brokers: dict[int, Broker] = {}
        self.nodes: dict[int, BrokerNode] = {}
        self._sources: dict[int, ControllerMetadata | EtcdMetadata] = {}
        self.admin: ControllerMetadata | EtcdMetadata | None = None
        # Leader elections and controller take-overs made by etcd sources
        # since stopped (killed brokers').
        self._past_elections = 0
        self._past_controller_elections = 0
        self.killed = 0
        # Replication counters of broker incarnations that were killed.
        self.past = ReplicationStats()
        self.walmgr_address = ""
        self.orphans_created: list[str] = []

    def config(self, b: BrokerInfo) -> BrokerConfig:
        return BrokerConfig(
            b.broker_id,
            b.az,
            os.path.join(self.data_dir, "brokers", str(b.broker_id), "meta"),
            port=self.ports[b.broker_id],
            produce=ProduceConfig(
                commit_interval_ms=self.opts.commit_interval_ms, buffer_bytes_max=self.opts.buffer_bytes_max
            ),
            sync=self.opts.sync,
            commit_deadline_ms=DEMO_COMMIT_DEADLINE_MS if self.opts.walmgr else COMMIT_DEADLINE_MS_DEFAULT,
            walmgr_address=self.walmgr_address,
        )

    async def start(self) -> None:
        if self.controller is not None:
            await self.controller.start()
        else:
            await self._start_etcd()
        for b in self.layout.brokers():
            await self.start_broker(b.broker_id)
        self.admin = self._source(None)
        await self.admin.start(timeout_ms=int(STARTUP_TIMEOUT_S * 1000))
        if isinstance(self.admin, EtcdMetadata):
            # Topics are placed on brokers the acting controller accepted.
            admin = self.admin
            ids = [b.broker_id for b in self.layout.brokers()]
            if not await admin.wait_for(lambda: all(admin.view.accepted(i) for i in ids), STARTUP_TIMEOUT_S):
                raise RuntimeError("the brokers were not accepted by an acting controller in time")
        rf = min(self.opts.replication_factor, len(self.layout.brokers()))
        answer = (await self.admin.create_topics({TOPIC: (self.opts.partitions, rf)}))[TOPIC]
        if isinstance(answer, Errors):
            raise RuntimeError(f"cannot create topic {TOPIC}: {answer.name}")
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not all(self._led_somewhere(tp) for tp in self.partitions()):
            if time.monotonic() > deadline:
                raise RuntimeError("partition leaders were not elected in time")
            await asyncio.sleep(0.05)

    async def _start_etcd(self) -> None:
        run = f"/cluster-{uuid.uuid4().hex[:8]}"
        if self.opts.metadata == "etcd":
            self.etcd = EtcdCluster(os.path.join(self.data_dir, "etcd"))
            await asyncio.to_thread(self.etcd.start)
            self.etcd_url = self.etcd.url("/partlog" + run)
        else:
            target = parse_etcd_url(self.opts.metadata)
            self.etcd_url = replace(target, prefix=target.prefix + run).url()

    def _source(self, me: BrokerInfo | None) -> ControllerMetadata | EtcdMetadata:
        if self.controller is not None:
            return ControllerMetadata(
                "127.0.0.1", self.controller.port, me, heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS
            )
        return EtcdMetadata(self.etcd_url, me, create_cluster=me is not None, session_timeout_ms=SESSION_TIMEOUT_MS)

    @property
    def leader_elections(self) -> int:
        if self.controller is not None:
            return self.controller.controller.leader_elections
        live = [s for s in self._sources.values() if isinstance(s, EtcdMetadata)]
        return self._past_elections + sum(s.leader_elections for s in live)

    @property
    def controller_elections(self) -> int:
        """Acting-controller take-overs (etcd; 0 for the embedded controller)."""
        live = [s for s in self._sources.values() if isinstance(s, EtcdMetadata)]
        return self._past_controller_elections + sum(s.elections_won for s in live)

    def partitions(self) -> list[TopicIdPartition]:
        assert self.admin is not None
        topic = next(t for t in self.admin.topics() if t.name == TOPIC)
        return [TopicIdPartition(topic.topic_id, p) for p in range(topic.num_partitions)]

    def _led_somewhere(self, tp: TopicIdPartition) -> bool:
        return any(b.replicas.is_leader(tp) for b in self.brokers.values())

    async def start_broker(self, broker_id: int) -> None:
        info = self.layout.broker(broker_id)
        assert info is not None
        me = BrokerInfo(broker_id, info.az, "127.0.0.1", self.ports[broker_id], self.kafka_ports.get(broker_id, 0))
        source = self._source(me)
        await source.start()
        make: Callable[..., Broker] = Broker
        if self.opts.orphan_rate > 0:
            seed = self.opts.seed * 1000 + broker_id * 10 + self.killed
            make = functools.partial(OrphanInjectingBroker, orphan_rate=self.opts.orphan_rate, seed=seed)
        config = NodeConfig(self.config(me), kafka_port=self.kafka_ports.get(broker_id))
        node = BrokerNode(config, source, self.objects, make_broker=make)
        await node.start()
        self.brokers[broker_id], self._sources[broker_id], self.nodes[broker_id] = node.broker, source, node

    async def kill(self, broker_id: int) -> None:
        """Stop a broker abruptly: no leadership handover, no goodbye to the controller."""
        broker, source = self.brokers.pop(broker_id), self._sources.pop(broker_id)
        await source.stop()
        await self.nodes.pop(broker_id).stop()
        if isinstance(source, EtcdMetadata):
            self._past_elections += source.leader_elections
            self._past_controller_elections += source.elections_won
        self._collect_orphans(broker)
        st = broker.replicas.stats
        self.past.truncations += st.truncations
        self.past.entries_replicated += st.entries_replicated
        self.killed += 1

    def _collect_orphans(self, broker: Broker) -> None:
        if isinstance(broker, OrphanInjectingBroker):
            self.orphans_created += broker.orphans_created
            broker.orphans_created = []

    def all_orphans(self) -> list[str]:
        for b in self.brokers.values():
            self._collect_orphans(b)
        return list(self.orphans_created)

    def replication_total(self, name: str) -> int:
        return int(getattr(self.past, name)) + sum(int(getattr(b.replicas.stats, name)) for b in self.brokers.values())

    def kafka_bootstrap(self) -> str:
        """Kafka clients' bootstrap.servers: every broker's Kafka listener."""
        return ",".join(f"127.0.0.1:{self.kafka_ports[b]}" for b in sorted(self.kafka_ports))

    def bootstrap(self, az: str | None = None) -> list[tuple[str, int]]:
        """Live brokers' addresses, those in ``az`` first."""
        infos = sorted(self.layout.brokers(), key=lambda b: (b.az != az, b.broker_id))
        return [("127.0.0.1", self.ports[b.broker_id]) for b in infos if b.broker_id in self.brokers]

    async def stop(self) -> None:
        for broker_id in list(self.brokers):
            _, source = self.brokers.pop(broker_id), self._sources.pop(broker_id)
            await self.nodes.pop(broker_id).stop()
            await source.stop()
        if self.admin is not None:
            await self.admin.stop()
        if self.controller is not None:
            await self.controller.stop()
        if self.etcd is not None:
            await asyncio.to_thread(self.etcd.close)


async def _kill_loop(cluster: LocalCluster, opts: ClusterOptions, rng: random.Random) -> None:
    """Kill one random broker every ``kill_broker_every_s`` and restart it after ``restart_after_s``."""
    while True:
        await asyncio.sleep(opts.kill_broker_every_s)
        victim = rng.choice(sorted(cluster.brokers))
        log.warning("killing broker %d", victim)
        await cluster.kill(victim)
        await asyncio.sleep(opts.restart_after_s)
        log.warning("restarting broker %d", victim)
        await cluster.start_broker(victim)


# How long after an etcd fault the produce pause is looked for.
ETCD_FAULT_WINDOW_S = 10.0
# How long a killed etcd leader's successor may take to be elected.
ETCD_ELECTION_WAIT_S = 30.0


async def _etcd_fault_loop(
    cluster: LocalCluster, opts: ClusterOptions, start: float, events: list[dict[str, Any]]
) -> None:
    """The etcd faults of ``opts``, at fixed shares of the run (see ClusterOptions)."""
    etcd = cluster.etcd
    assert etcd is not None
    d = opts.duration_s

    async def at(share: float) -> None:
        await asyncio.sleep(max(0.0, start + share * d - time.monotonic()))

    if opts.etcd_member_faults:
        await at(0.25)
        leader = await asyncio.to_thread(etcd.leader)
        follower = next(i for i in range(etcd.members) if i != leader)
        events.append({"fault": f"etcd follower m{follower} killed", "at_s": time.monotonic() - start})
        log.warning("killing etcd follower m%d", follower)
        await asyncio.to_thread(etcd.kill, follower)
        await at(0.40)
        await asyncio.to_thread(etcd.restart, follower)
        await at(0.55)
        leader = await asyncio.to_thread(etcd.leader)
        victim = 0 if leader is None else leader
        killed_at = time.monotonic()
        log.warning("killing etcd leader m%d", victim)
        await asyncio.to_thread(etcd.kill, victim)
        elected = None
        while elected is None and time.monotonic() - killed_at < ETCD_ELECTION_WAIT_S:
            await asyncio.sleep(0.05)
            elected = await asyncio.to_thread(etcd.leader)
        events.append({
            "fault": f"etcd leader m{victim} killed",
            "at_s": killed_at - start,
            "etcd_election_s": None if elected is None else time.monotonic() - killed_at,
        })  # fmt: skip
        await at(0.75)
        await asyncio.to_thread(etcd.restart, victim)
    if opts.etcd_outage_s:
        await at(0.30)
        events.append(
            {"fault": "every etcd member down", "at_s": time.monotonic() - start, "for_s": opts.etcd_outage_s}
        )
        log.warning("stopping every etcd member for %.1f s", opts.etcd_outage_s)
        await asyncio.to_thread(etcd.stop_all_members)
        await asyncio.sleep(opts.etcd_outage_s)
        await asyncio.to_thread(etcd.restart_all)


def _fault_effects(events: list[dict[str, Any]], ack_times: list[float]) -> list[dict[str, Any]]:
    """Each fault with the acknowledgements in its window and the longest
    gap between two of them (the produce pause it caused, at most), beside
    the longest gap before the first fault (the same load without one: the
    baseline the pause is read against)."""
    acks = sorted(ack_times)
    first = min((ev["at_s"] for ev in events), default=0.0)
    calm = [t for t in acks if t < first]
    baseline = max((b - a for a, b in itertools.pairwise(calm)), default=0.0)
    out = []
    for ev in events:
        begin = ev["at_s"]
        end = begin + ev.get("for_s", 0.0) + ETCD_FAULT_WINDOW_S
        inside = [t for t in acks if begin <= t <= end]
        before = [t for t in acks if t < begin][-1:]
        points = before + inside
        gaps = [b - a for a, b in itertools.pairwise(points)]
        during = [t for t in inside if t <= begin + ev.get("for_s", 0.0)]
        out.append({
            **ev, "acks_in_window": len(inside), "acks_during": len(during),
            "produce_pause_s": max(gaps, default=0.0), "produce_pause_before_faults_s": baseline,
        })  # fmt: skip
    return out


async def run(
    opts: ClusterOptions,
    progress: Callable[[str], None] | None = None,
    *,
    ready: Callable[[str, str], None] | None = None,
    serve_until: asyncio.Event | None = None,
) -> dict[str, Any]:
    """Run the cluster, produce, verify; the report.  Without ``data_dir``
    everything lives in a temporary directory, removed at the end.

    ``ready`` is called with the Kafka bootstrap servers and the brokers'
    RPC addresses (partlog's own client) once every listener accepts.
    With ``serve_until`` the cluster runs no load of its own: it serves
    outside clients until the event is set, then stops."""
    temporary = opts.data_dir is None
    data_dir = opts.data_dir or tempfile.mkdtemp(prefix="partlog-cluster-")
    try:
        result = await _run_in(opts, data_dir, progress, ready, serve_until)
    finally:
        if temporary:
            shutil.rmtree(data_dir, ignore_errors=True)
    result["data_kept"] = not temporary
    return result


async def _run_in(
    opts: ClusterOptions,
    data_dir: str,
    progress: Callable[[str], None] | None,
    ready: Callable[[str, str], None] | None = None,
    serve_until: asyncio.Event | None = None,
) -> dict[str, Any]:
    objects: ObjectStore = (
        open_store(opts.store_url) if opts.store_url else LocalDirStore(os.path.join(data_dir, "objects"))
    )
    # Fail fast on a wrong store: producers would otherwise retry uploads
    # until their delivery timeout.
    objects.list_page("", max_keys=1)
    cluster = LocalCluster(opts, data_dir, objects)
    mgr: Walmgr | None = None
    try:
        if opts.walmgr:
            mgr = await _start_walmgr(opts, data_dir, objects)
            cluster.walmgr_address = f"127.0.0.1:{mgr.port}"
        await cluster.start()
        if mgr is not None:
            mgr.metadata = cluster.admin
        if ready is not None and cluster.kafka_ports:
            ready(cluster.kafka_bootstrap(), ",".join(f"{h}:{p}" for h, p in cluster.bootstrap()))
        if serve_until is not None:
            runner = asyncio.ensure_future(mgr.run()) if mgr is not None else None
            await serve_until.wait()
            if runner is not None:
                runner.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await runner
            return {"served": True, "brokers": len(cluster.brokers), "bootstrap": cluster.kafka_bootstrap()}
        return await _run(cluster, opts, data_dir, objects, progress, mgr)
    finally:
        if mgr is not None:
            await mgr.stop()
        await cluster.stop()


async def _start_walmgr(opts: ClusterOptions, data_dir: str, objects: ObjectStore) -> Walmgr:
    [port] = free_ports(1)
    store_url = opts.store_url or "file://" + os.path.abspath(os.path.join(data_dir, "objects"))
    cfg = WalmgrConfig.for_cli(
        store_url,
        os.path.join(data_dir, "walmgr"),
        commit_deadline_ms=DEMO_COMMIT_DEADLINE_MS,
        max_clock_skew_ms=DEMO_MAX_CLOCK_SKEW_MS,
        grace_ms=DEMO_GRACE_MS,
        cycle_interval_ms=WALMGR_CYCLE_MS,
        full_scan_interval_ms=10 * WALMGR_CYCLE_MS,
        listen=f"127.0.0.1:{port}",
    )
    mgr = Walmgr(cfg, store=objects)
    await mgr.start()
    return mgr


async def _walmgr_finish(cluster: LocalCluster, mgr: Walmgr, runner: asyncio.Task[None]) -> dict[str, int]:
    """Stop the daemon loop, give walmgr cycles until every orphan is past
    the gate and deleted (or WALMGR_FINAL_CYCLES cycles past it), then count
    what it deleted against what the brokers still reference."""
    runner.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await runner
    orphans = set(cluster.all_orphans())
    gate_s = mgr.config.age_gate_ms / 1000
    deadline = time.monotonic() + gate_s + WALMGR_FINAL_CYCLES * WALMGR_CYCLE_MS / 1000
    reg = mgr.registry
    assert reg is not None

    def deleted_keys() -> set[str]:
        return {r.key for r in reg.records({State.DELETED})}

    while True:
        await mgr.cycle()
        if orphans <= deleted_keys() or time.monotonic() > deadline:
            break
        await asyncio.sleep(WALMGR_CYCLE_MS / 1000)
    deleted = deleted_keys()
    referenced = {k for b in cluster.brokers.values() for k in b.store.file_usage()}
    return {
        "orphans_created": len(orphans),
        "orphans_deleted": len(orphans & deleted),
        "objects_deleted": len(deleted),
        "objects_deleted_referenced": len(deleted & referenced),
    }


async def _run(
    cluster: LocalCluster,
    opts: ClusterOptions,
    data_dir: str,
    objects: ObjectStore,
    progress: Callable[[str], None] | None,
    mgr: Walmgr | None = None,
) -> dict[str, Any]:
    meta = cluster.layout
    walmgr_runner = asyncio.ensure_future(mgr.run()) if mgr is not None else None
    rng = random.Random(opts.seed)
    tps = cluster.partitions()
    producers: list[Producer] = []
    for az in meta.azs():
        for _ in range(opts.producers_per_az):
            producers.append(Producer(cluster.bootstrap(az), az=az))
    for p in producers:
        await p.start()
    killer = asyncio.ensure_future(_kill_loop(cluster, opts, rng)) if opts.kill_broker_every_s > 0 else None
    fault_events: list[dict[str, Any]] = []
    ack_times: list[float] = []

    acked: dict[tuple[int, int], RecordMetadata] = {}
    sent = 0
    failed = 0
    futures: list[asyncio.Future[RecordMetadata]] = []
    start = time.monotonic()
    pad = b"x" * max(0, opts.message_bytes - 24)
    faulter = None
    if opts.etcd_member_faults or opts.etcd_outage_s:
        faulter = asyncio.ensure_future(_etcd_fault_loop(cluster, opts, start, fault_events))

    def on_done(key: tuple[int, int]) -> Callable[[asyncio.Future[RecordMetadata]], None]:
        def cb(f: asyncio.Future[RecordMetadata]) -> None:
            nonlocal failed
            if f.cancelled() or f.exception() is not None:
                failed += 1
            else:
                acked[key] = f.result()
                ack_times.append(time.monotonic() - start)

        return cb

    seqs = [0] * len(producers)
    tick_s = 0.01
    next_report = start + 1.0
    while (now := time.monotonic()) - start < opts.duration_s:
        elapsed = now - start
        for pi, p in enumerate(producers):
            due = int(opts.rate_per_producer * elapsed) - seqs[pi]
            for _ in range(due):
                seq = seqs[pi]
                seqs[pi] += 1
                tp = tps[rng.randrange(len(tps))]
                fut = p.send(tp, f"{pi}:{seq}:".encode() + pad)
                fut.add_done_callback(on_done((pi, seq)))
                futures.append(fut)
                sent += 1
        if progress and now >= next_report:
            next_report += 1.0
            progress(f"{elapsed:5.1f}s produced {sent:,} acked {len(acked):,} failed {failed:,}")
        await asyncio.sleep(tick_s)
    if faulter is not None:
        # Finish the faults (every etcd member is back when it returns).
        await faulter
    if killer is not None:
        killer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await killer
        # Bring every broker back, so all data is served again.
        for b in meta.brokers():
            if b.broker_id not in cluster.brokers:
                await cluster.start_broker(b.broker_id)
    for p in producers:
        await p.flush()
    await asyncio.gather(*futures, return_exceptions=True)
    produce_s = time.monotonic() - start
    if progress:
        progress(f"produced {sent:,} acked {len(acked):,} failed {failed:,}; consuming back")

    # Consume everything back.
    consumer = Consumer(cluster.bootstrap(), max_wait_ms=100)
    await consumer.start()
    consumer.assign(tps)
    seen: dict[tuple[int, int], list[tuple[TopicIdPartition, int]]] = {}
    expected_end = {tp: 0 for tp in tps}
    for md in acked.values():
        expected_end[md.topic_id_partition] = max(expected_end[md.topic_id_partition], md.offset + 1)
    deadline = time.monotonic() + VERIFY_TIMEOUT_S
    while time.monotonic() < deadline:
        if all(consumer.positions[tp] >= expected_end[tp] for tp in tps):
            break
        for rec in await consumer.poll():
            pi_s, seq_s, _ = (rec.value or b"").split(b":", 2)
            seen.setdefault((int(pi_s), int(seq_s)), []).append((rec.topic_id_partition, rec.offset))
    await consumer.close()

    verified = lost = duplicated = misplaced = 0
    # The first few acknowledged records not read back where acknowledged:
    # (producer, sequence, partition, acknowledged offset, offsets seen).
    lost_examples: list[tuple[int, int, int, int, list[int]]] = []
    for key, md in acked.items():
        where = seen.get(key, [])
        if not where:
            lost += 1
        elif (md.topic_id_partition, md.offset) not in where:
            misplaced += 1
        else:
            verified += 1
            continue
        if len(lost_examples) < LOST_EXAMPLES_MAX:
            tp = md.topic_id_partition
            lost_examples.append((key[0], key[1], tp.partition, md.offset, [o for _, o in where]))
    duplicated = sum(len(w) - 1 for w in seen.values() if len(w) > 1)
    # Order: per (producer, partition), offsets increase with sequence.
    order_violations = 0
    last: dict[tuple[int, TopicIdPartition], tuple[int, int]] = {}
    for (pi, seq), where in sorted(seen.items()):
        tp, off = where[0]
        prev = last.get((pi, tp))
        if prev is not None and off < prev[1]:
            order_violations += 1
        last[(pi, tp)] = (seq, off)

    etcd_faults = _fault_effects(fault_events, ack_times)
    walmgr_result: dict[str, int] = {}
    if mgr is not None and walmgr_runner is not None:
        if progress:
            progress("walmgr: deleting orphans past the age gate")
        walmgr_result = await _walmgr_finish(cluster, mgr, walmgr_runner)
    brokers = list(cluster.brokers.values())
    fanout = [f for br in brokers for f in br.stats.fanout]
    latencies = [lat for p in producers for lat in p.latencies_ms]
    acked_bytes = len(acked) * opts.message_bytes
    result: dict[str, Any] = {
        "azs": opts.azs,
        "brokers": len(brokers),
        "partitions": opts.partitions,
        "replication_factor": min(opts.replication_factor, len(brokers)),
        "metadata": "embedded controller" if cluster.controller is not None else cluster.etcd_url,
        "leader_elections": cluster.leader_elections,
        "controller_elections": cluster.controller_elections,
        "etcd_faults": etcd_faults,
        "truncations": cluster.replication_total("truncations"),
        "brokers_killed": cluster.killed,
        "entries_replicated": cluster.replication_total("entries_replicated"),
        "producers": len(producers),
        "records_produced": sent,
        "records_acked": len(acked),
        "records_failed": failed,
        "records_verified": verified,
        "records_lost": lost + misplaced,
        "records_lost_examples": lost_examples,
        "records_duplicated": duplicated,
        "order_violations": order_violations,
        "wal_files": sum(br.stats.uploads - br.stats.upload_errors for br in brokers),
        "commit_rpcs_per_file": {
            "local_mean": statistics.fmean([f[0] for f in fanout]) if fanout else 0.0,
            "same_az_mean": statistics.fmean([f[1] for f in fanout]) if fanout else 0.0,
            "cross_az_mean": statistics.fmean([f[2] for f in fanout]) if fanout else 0.0,
            "remote_max": max((f[1] + f[2] for f in fanout), default=0),
        },
        "produce_latency_ms": {"p50": percentile(latencies, 0.5), "p99": percentile(latencies, 0.99)},
        # What the brokers handled (for `python -m simulations calibrate`).
        "produce_requests": sum(br.stats.produce_requests for br in brokers),
        "commit_rpcs_remote": sum(br.stats.commits_remote for br in brokers),
        "commits_local": sum(br.stats.commits_local for br in brokers),
        "commit_ms": {
            "p50": percentile([x for br in brokers for x in br.stats.commit_ms], 0.5),
            "p99": percentile([x for br in brokers for x in br.stats.commit_ms], 0.99),
        },
        "upload_ms": {
            "p50": percentile([x for br in brokers for x in br.stats.upload_ms], 0.5),
            "p99": percentile([x for br in brokers for x in br.stats.upload_ms], 0.99),
        },
        "mib_per_s": acked_bytes / produce_s / (1 << 20),
        "duration_s": produce_s,
        "data_dir": data_dir,
        "store": objects.describe(),
        **walmgr_result,
    }
    for p in producers:
        await p.close()
    return result


def print_report(r: dict[str, Any], out: Any = sys.stdout) -> None:
    c = r["commit_rpcs_per_file"]
    lines = [
        f"cluster: {r['azs']} AZs, {r['brokers']} brokers, {r['partitions']} partitions "
        f"(replication factor {r['replication_factor']}), {r['producers']} producers",
        f"records: produced {r['records_produced']:,}  acked {r['records_acked']:,}  failed {r['records_failed']:,}",
        f"verify:  verified {r['records_verified']:,}  lost {r['records_lost']:,}  "
        f"duplicated {r['records_duplicated']:,}  order violations {r['order_violations']:,}",
        f"WAL files: {r['wal_files']:,}; commit RPCs per file: local {c['local_mean']:.2f}, "
        f"same-AZ {c['same_az_mean']:.2f}, cross-AZ {c['cross_az_mean']:.2f}, remote max {c['remote_max']}",
        f"produce latency: p50 {r['produce_latency_ms']['p50']:.0f} ms, p99 {r['produce_latency_ms']['p99']:.0f} ms; "
        f"{r['mib_per_s']:.2f} MiB/s",
        f"replication: {r['entries_replicated']:,} entries replicated, {r['leader_elections']} leader elections, "
        f"{r['truncations']} truncations, {r['brokers_killed']} brokers killed",
        f"metadata: {r['metadata']}"
        + (
            f", {r['controller_elections']} acting-controller elections"
            if r["metadata"] != "embedded controller"
            else ""
        ),
        *(
            f"etcd fault: {f['fault']} at {f['at_s']:.1f} s: produce paused at most {f['produce_pause_s']:.2f} s "
            f"(before any fault: {f['produce_pause_before_faults_s']:.2f} s), "
            f"{f['acks_during'] if 'for_s' in f else f['acks_in_window']:,} acks "
            + ("while it lasted" if "for_s" in f else f"in the {ETCD_FAULT_WINDOW_S:g} s after")
            + (f"; etcd elected a new leader in {f['etcd_election_s']:.2f} s" if f.get("etcd_election_s") else "")
            for f in r.get("etcd_faults", [])
        ),
        f"data: {r['data_dir']} ({r['store']})"
        if r.get("data_kept", True)
        else "data: a temporary directory, removed at exit (--data-dir DIR keeps it)",
    ]
    if "orphans_created" in r:
        lines.insert(
            -1,
            f"walmgr: orphans created {r['orphans_created']:,}, deleted {r['orphans_deleted']:,}; objects deleted "
            f"{r['objects_deleted']:,}, of them still referenced {r['objects_deleted_referenced']}",
        )
    print("\n".join(lines), file=out)
