"""The in-process cluster of ``partlog cluster``: an embedded controller
(its state in ``<data-dir>/controller``) or etcd, and brokers on loopback,
each restartable on its own data directory and port, beside a walmgr.

With ``metadata`` empty the brokers take their metadata from the embedded
controller: the topic is created with one replica per AZ and leaders are
elected from the ISR when a broker dies.  :meth:`LocalCluster.kill` stops a
broker abruptly (no handover: its server, replication and store just stop);
:meth:`LocalCluster.start_broker` restarts it on the same data directory.

The walmgr (``<data-dir>/walmgr``; demo-sized deadlines: a 2 s commit
deadline, 0.5 s clock skew and 0.5 s grace) is told of every upload by the
brokers; with ``orphan_rate`` an :class:`OrphanInjectingBroker` drops the
commits of that share of WAL files after the upload, so walmgr has orphans
to delete.

With an authorizer (``front.authorizer``, or ``opts.authorizer``: ``partlog
cluster --authorizer``), every broker RPC method needs
CLUSTER_ACTION (``partlog.broker.rpc_authz``); this cluster's RPC has
neither TLS nor a secret, so its brokers, walmgr and CLI clients are all
``User:ANONYMOUS`` there, and the brokers allow that principal every RPC
method (``NodeConfig.rpc_super_users``) without making it a super user on
the Kafka listeners, whose anonymous clients stay under the ACLs.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import os
import random
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from partlog.broker.server import Broker, BrokerConfig
from partlog.controller.client import ControllerMetadata
from partlog.controller.cluster_meta import BrokerInfo, StaticMetadata
from partlog.controller.core import ControllerConfig
from partlog.controller.etcd_layout import parse_etcd_url
from partlog.controller.etcd_meta import EtcdMetadata
from partlog.controller.etcd_scram import EtcdScramCredentials
from partlog.controller.scram_client import ControllerScramCredentials
from partlog.controller.server import ControllerServer
from partlog.kafka.errors import Errors
from partlog.kafka.principal_rules import ANONYMOUS
from partlog.kafka.records import TopicIdPartition
from partlog.kafka_front.apis import FrontConfig
from partlog.kafka_front.listeners import ListenerSecurity, ListenerSpec, SecurityProtocol, registration_text
from partlog.kafka_front.scram import NoCredentials
from partlog.node import BrokerNode, NodeConfig
from partlog.produce.pipeline import ProduceConfig, SendCommit
from partlog.replication.config import ReplicationConfig
from partlog.replication.stats import ReplicationStats
from partlog.store import COMMIT_DEADLINE_MS_DEFAULT
from partlog.store.shutdown import read_boot_id
from partlog.tools.cluster_options import (
    DEMO_COMMIT_DEADLINE_MS,
    DEMO_GRACE_MS,
    DEMO_MAX_CLOCK_SKEW_MS,
    DEMO_RELEASE_GRACE_MS,
    DEMO_REPLICA_ANSWER_AGE_MAX_MS,
    DEMO_VERDICT_WINDOW_MS,
    ClusterOptions,
)
from partlog.tools.etcd_launcher import EtcdCluster
from partlog.wal.objectstore import ObjectStore
from walmgr.config import WalmgrConfig
from walmgr.daemon import Walmgr

TOPIC = "partlog-cluster"
# Brokers heartbeat the embedded controller this often (Kafka's default is
# 2 s; the session timeout is ClusterOptions.broker_session_timeout_ms).
HEARTBEAT_INTERVAL_MS = 500
# How long the cluster may take to elect every partition's first leader.
STARTUP_TIMEOUT_S = 60.0
# How often the walmgr beside the brokers runs a cycle (a full scan every 10).
WALMGR_CYCLE_MS = 1_000
# The brokers' replication with walmgr: the demo-sized release grace.
DEMO_REPLICATION = ReplicationConfig(
    release_grace_ms=DEMO_RELEASE_GRACE_MS, replica_answer_age_max_ms=DEMO_REPLICA_ANSWER_AGE_MAX_MS
)
# Segment ids an orphan-injecting broker remembers its choice for.
ORPHAN_CHOICES_MAX = 10_000


# A broker's first start tries this many sets of ports (see _first_start).
FIRST_START_PORT_ATTEMPTS = 3


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

    def __init__(
        self, opts: ClusterOptions, data_dir: str, objects: ObjectStore, *, front: FrontConfig | None = None
    ) -> None:
        self.opts = opts
        # Every broker's Kafka listener config (the authorizer's tests set one).
        self.front = front or FrontConfig(
            authorizer=opts.authorizer,
            num_partitions=opts.num_partitions,
            auto_create_topics_enable=opts.auto_create_topics,
        )
        self.data_dir = data_dir
        self.objects = objects
        self.layout = StaticMetadata.generate(azs=opts.azs, brokers_per_az=opts.brokers_per_az, topics={})
        ids = [b.broker_id for b in self.layout.brokers()]
        protocols = [SecurityProtocol(p.strip()) for p in opts.kafka_protocol.split(",")]
        ports = free_ports(len(ids) * (1 + len(protocols)))
        self.ports = dict(zip(ids, ports[: len(ids)], strict=True))
        self.kafka_ports = dict(zip(ids, ports[len(ids) : 2 * len(ids)], strict=True)) if opts.kafka else {}
        # Every broker's Kafka listeners (the first on kafka_ports).
        self.kafka_listeners: dict[int, tuple[ListenerSpec, ...]] = {
            b: tuple(ListenerSpec(p, "127.0.0.1", ports[(1 + i) * len(ids) + n]) for i, p in enumerate(protocols))
            for n, b in enumerate(ids)
            if opts.kafka
        }
        # The embedded controller, or etcd (one started here, or the URL's).
        self.controller: ControllerServer | None = None
        self.etcd: EtcdCluster | None = None
        self.etcd_url = ""
        if not opts.metadata:
            self.controller = ControllerServer(
                ControllerConfig(
                    os.path.join(data_dir, "controller"), broker_session_timeout_ms=opts.broker_session_timeout_ms
                )
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
            boot_id=read_boot_id(),
            commit_deadline_ms=DEMO_COMMIT_DEADLINE_MS if self.opts.walmgr else COMMIT_DEADLINE_MS_DEFAULT,
            walmgr_address=self.walmgr_address,
            replication=DEMO_REPLICATION if self.opts.walmgr else ReplicationConfig(),
        )

    async def start(self) -> None:
        if self.controller is not None:
            await self.controller.start()
        else:
            await self._start_etcd()
        for b in self.layout.brokers():
            await self._first_start(b.broker_id)
        self.admin = self._source(None)
        await self.admin.start(timeout_ms=int(STARTUP_TIMEOUT_S * 1000))
        if isinstance(self.admin, EtcdMetadata):
            # Topics are placed on brokers the acting controller accepted.
            admin = self.admin
            ids = [b.broker_id for b in self.layout.brokers()]
            if not await admin.wait_for(lambda: all(admin.view.accepted(i) for i in ids), STARTUP_TIMEOUT_S):
                raise RuntimeError("the brokers were not accepted by an acting controller in time")
        rf = min(self.opts.replication_factor, len(self.layout.brokers()))
        # The topic's configs are the controller's (docs/design/topic-configs.md):
        # every broker, and one restarted, gives its store them.
        configs = {k: str(v) for k, v in self.topic_configs().items()}
        shape = {TOPIC: (self.opts.partitions, rf)}
        answer = (await self.admin.create_topics(shape, {TOPIC: configs} if configs else None))[TOPIC]
        if isinstance(answer, Errors):
            raise RuntimeError(f"cannot create topic {TOPIC}: {answer.name}")
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not all(self._led_somewhere(tp) for tp in self.partitions()):
            if time.monotonic() > deadline:
                raise RuntimeError("partition leaders were not elected in time")
            await asyncio.sleep(0.05)

    def topic_configs(self) -> dict[str, str | int]:
        """The topic's configs, created with it (tiering)."""
        if not self.opts.tiering_segment_ms:
            return {}
        return {
            "remote.storage.enable": "true",
            "segment.ms": self.opts.tiering_segment_ms,
            "segment.bytes": self.opts.tiering_segment_bytes,
        }

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
        return EtcdMetadata(
            self.etcd_url, me, create_cluster=me is not None, session_timeout_ms=self.opts.broker_session_timeout_ms
        )

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

    async def _first_start(self, broker_id: int) -> None:
        """Start a broker the first time.  Its ports were free when
        ``free_ports`` asked, but another process (a parallel test) may have
        bound one since: then it gets new ones, at most
        ``FIRST_START_PORT_ATTEMPTS`` times (a restart keeps its ports)."""
        for attempt in range(1, FIRST_START_PORT_ATTEMPTS + 1):
            try:
                await self.start_broker(broker_id)
                return
            except OSError as e:
                if e.errno != errno.EADDRINUSE or attempt == FIRST_START_PORT_ATTEMPTS:
                    raise
            source = self._sources.pop(broker_id, None)
            if isinstance(source, EtcdMetadata):
                await source.stop(revoke=True)  # its session ends now, not at its lease's expiry
            elif source is not None:
                await source.stop()
            rpc, *kafka = free_ports(1 + len(self.kafka_listeners.get(broker_id, ())))
            self.ports[broker_id] = rpc
            if broker_id in self.kafka_ports:
                self.kafka_ports[broker_id] = kafka[0]
                self.kafka_listeners[broker_id] = tuple(
                    replace(spec, port=port) for spec, port in zip(self.kafka_listeners[broker_id], kafka, strict=True)
                )

    async def start_broker(self, broker_id: int) -> None:
        info = self.layout.broker(broker_id)
        assert info is not None
        listeners = self.kafka_listeners.get(broker_id, ())
        names = registration_text(listeners) if len(listeners) > 1 else ""
        me = BrokerInfo(
            broker_id, info.az, "127.0.0.1", self.ports[broker_id], self.kafka_ports.get(broker_id, 0), names
        )
        source = self._source(me)
        # Known before the node starts, so a failed start can stop it.
        self._sources[broker_id] = source
        await source.start()
        make: Callable[..., Broker] = Broker
        if self.opts.orphan_rate > 0:
            seed = self.opts.seed * 1000 + broker_id * 10 + self.killed
            make = functools.partial(OrphanInjectingBroker, orphan_rate=self.opts.orphan_rate, seed=seed)
        config = NodeConfig(
            self.config(me),
            kafka_port=self.kafka_ports.get(broker_id),
            kafka=self.front,
            kafka_listeners=listeners,
            kafka_security=self._kafka_security(source),
            # The RPC's only principal here (module docstring).
            rpc_super_users=frozenset({ANONYMOUS}),
        )
        node = BrokerNode(config, source, self.objects, make_broker=make)
        try:
            await node.start()
        except OSError:
            await node.stop()  # its store is open: a retry opens it again
            raise
        self.brokers[broker_id], self._sources[broker_id], self.nodes[broker_id] = node.broker, source, node

    def _kafka_security(self, source: Any) -> ListenerSecurity:
        """The options' listener security; credentials from the controller
        unless the options hold their own."""
        security = self.opts.kafka_security or ListenerSecurity()
        if isinstance(security.credentials, NoCredentials):
            if isinstance(source, ControllerMetadata):
                security = replace(security, credentials=ControllerScramCredentials(source))
            elif isinstance(source, EtcdMetadata):
                security = replace(security, credentials=EtcdScramCredentials(source.conn, source.keys))
        return security

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

    def kafka_bootstraps(self) -> dict[str, str]:
        """Each listener's bootstrap.servers, by its name (its protocol)."""
        out: dict[str, list[str]] = {}
        for b in sorted(self.kafka_listeners):
            for spec in self.kafka_listeners[b]:
                out.setdefault(spec.name, []).append(f"{spec.host}:{spec.port}")
        return {name: ",".join(addresses) for name, addresses in out.items()}

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


async def start_walmgr(opts: ClusterOptions, data_dir: str, objects: ObjectStore) -> Walmgr:
    """A walmgr on the cluster's store, with the demo-sized deadlines the
    brokers share, listening for their upload notices."""
    [port] = free_ports(1)
    store_url = opts.store_url or "file://" + os.path.abspath(os.path.join(data_dir, "objects"))
    cfg = WalmgrConfig.for_cli(
        store_url,
        os.path.join(data_dir, "walmgr"),
        commit_deadline_ms=DEMO_COMMIT_DEADLINE_MS,
        max_clock_skew_ms=DEMO_MAX_CLOCK_SKEW_MS,
        grace_ms=DEMO_GRACE_MS,
        verdict_window_ms=DEMO_VERDICT_WINDOW_MS,
        cycle_interval_ms=WALMGR_CYCLE_MS,
        full_scan_interval_ms=10 * WALMGR_CYCLE_MS,
        listen=f"127.0.0.1:{port}",
    )
    mgr = Walmgr(cfg, store=objects)
    await mgr.start()
    return mgr
