"""A partlog broker: the asyncio shell around the sans-IO produce pipeline,
the leader's MetadataStore and the fetch path.

It serves, over the inter-broker RPC (``partlog.rpc.server``):

* ``produce``: any partition; batches go into this broker's WAL buffer.
* ``commit``: from other brokers' pipelines, for partitions this broker leads
  (appended in arrival order per connection, so WAL-file order holds;
  acks=all ones answered once replicated, see ``partlog.replication.manager``).
* ``replica_fetch``: followers replicating the partitions this broker leads.
* ``fetch``: partitions this broker holds a replica of, with long-poll.
* ``metadata``, ``list_offsets``, ``init_producer_id``.

With its authorizer on (:meth:`Broker.authorize_rpc`), every method needs
CLUSTER_ACTION on the cluster for the peer's principal (``rpc_authz.py``).

Everything the broker decides lives in the sans-IO classes; the services
here only move bytes, run the store and the object store in threads, and
keep time.  This module wires them together and runs the broker's life
(listen, start, metadata changes, stop):

=============================  ==========================================
``produce_driver.py``          admission, uploads, the per-leader commit senders
``leader_commits.py``          the leader's commit entry, store fail-stop and reopen
``txn_verification.py``        KIP-890: leaders verify with the txn coordinator
``fetch_service.py``           fetch long-poll, routing to replicas and leaders
``rpc_handlers.py``            the broker RPC's methods
``rpc_authz.py``               CLUSTER_ACTION for every method, authorizer on
``producer_id_blocks.py``      InitProducerId from the controller's blocks
``walmgr_notifier.py``         upload notifications to walmgr
``tiering.py``                 the builder loop: committed batches into tiered segments
``peers.py``                   the pooled connections to other brokers
``tasks.py``                   background tasks
``metrics.py``                 the one recorder (Prometheus) and its view
=============================  ==========================================

The Kafka listener is not here: :mod:`partlog.node` puts a broker and its
listener together (the broker implements ``partlog.kafka_front.port.BrokerPort``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import ssl
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from partlog.acl import AuthorizerConfig
from partlog.acl.source import AclSource
from partlog.broker.fetch_service import FetchService, NewData
from partlog.broker.leader_commits import LeaderCommits
from partlog.broker.local_segments import (
    LOCAL_SEGMENT_BYTES_MAX_DEFAULT,
    LOCAL_SEGMENT_BYTES_PER_PARTITION_DEFAULT,
    LocalSegments,
)
from partlog.broker.metrics import BrokerMetrics, BrokerStats
from partlog.broker.peers import Peers
from partlog.broker.produce_driver import PRODUCE_TIMEOUT_MS_DEFAULT, ProduceDriver
from partlog.broker.producer_id_blocks import ProducerIdBlocks
from partlog.broker.rpc_authz import RpcClusterAuthz
from partlog.broker.rpc_handlers import RpcHandlers
from partlog.broker.tasks import Tasks
from partlog.broker.tiering import TIERING_INTERVAL_MS_DEFAULT, Tiering
from partlog.broker.topic_configs import INTERNAL_TOPIC_CONFIGS, TopicConfigApplier, TopicConfigSync
from partlog.broker.txn_verification import TXN_VERIFICATION_TIMEOUT_MS, TxnVerification
from partlog.broker.walmgr_notifier import WalmgrNotifier
from partlog.controller.cluster_meta import (
    ClusterMismatchError,
    CountsFailures,
    KnowsDeletedTopics,
    MetadataSource,
    StaticMetadata,
    TopicInfo,
)
from partlog.controller.dynamic_configs import DynamicConfigSource, LocalConfigs, source_stats
from partlog.fetch.reads import CACHE_BYTES_MAX_DEFAULT, SEGMENT_READ_CHUNK_BYTES_DEFAULT, RangeCache
from partlog.kafka.errors import Errors, peer_error
from partlog.kafka.principal_rules import PrincipalMapper
from partlog.kafka.records import (
    CreateTopicAndPartitionsRequest,
    FindBatchRequest,
    ListOffsetsRequest,
    TopicIdPartition,
    TxnMarkerRequest,
)
from partlog.kafka.topic_config import TopicConfig, TopicConfigError
from partlog.produce.pipeline import BatchResult, ProduceConfig, ProducePipeline
from partlog.replication.config import ReplicationConfig
from partlog.replication.manager import ReplicaManager
from partlog.rpc.methods import BROKER_SCHEMAS
from partlog.rpc.server import RpcServer
from partlog.rpc.server_limits import ServerLimits
from partlog.runtime import SYSTEM_CLOCK, SYSTEM_ENTROPY, Clock, Entropy
from partlog.store import COMMIT_DEADLINE_MS_DEFAULT, MetadataStore, StoreError
from partlog.wal.objectstore import ObjectStore

log = logging.getLogger(__name__)

# How long a commit RPC to another leader may take before its batches are
# answered REQUEST_TIMED_OUT (the producer retries; idempotence dedups).
COMMIT_RPC_TIMEOUT_MS_DEFAULT = 10_000
# A leader's KIP-890 verification answers within the commit RPC's timeout
# (at most half of it, below), so the sender hears the leader's answer.
assert TXN_VERIFICATION_TIMEOUT_MS <= COMMIT_RPC_TIMEOUT_MS_DEFAULT // 2
# Kafka's log.retention.check.interval.ms default: how often the broker
# applies retention.ms / retention.bytes to the partitions it leads.
RETENTION_CHECK_INTERVAL_MS_DEFAULT = 300_000


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    broker_id: int
    az: str
    data_dir: str
    host: str = "127.0.0.1"
    port: int = 0
    produce: ProduceConfig = field(default_factory=ProduceConfig)
    sync: bool = True
    boot_id: str | None = None  # the machine's, for KIP-966's unclean shutdown (partlog.store.shutdown)
    # The store's checkpoints in a thread of their own (False: inline, by
    # count, as the deterministic simulation needs).
    store_checkpoint_thread: bool = True
    commit_rpc_timeout_ms: int = COMMIT_RPC_TIMEOUT_MS_DEFAULT
    commit_deadline_ms: int = COMMIT_DEADLINE_MS_DEFAULT
    fetch_cache_bytes_max: int = CACHE_BYTES_MAX_DEFAULT
    # Tiered segments are read in aligned chunks of this size (read-ahead
    # through the fetch cache, docs/design/tiered-reads.md); 0: no read-ahead.
    segment_read_chunk_bytes: int = SEGMENT_READ_CHUNK_BYTES_DEFAULT
    # Local copies of each served partition's newest segments (KIP-1163's
    # third policy), at most this many bytes a partition (0: off) and in all.
    local_segment_bytes_per_partition: int = LOCAL_SEGMENT_BYTES_PER_PARTITION_DEFAULT
    local_segment_bytes_max: int = LOCAL_SEGMENT_BYTES_MAX_DEFAULT
    secret: bytes | None = field(default=None, repr=False)
    # TLS for the broker RPC: the server side (CERT_REQUIRED for mutual TLS)
    # and the context this broker connects to other brokers with.
    server_ssl: ssl.SSLContext | None = field(default=None, repr=False)
    client_ssl: ssl.SSLContext | None = field(default=None, repr=False)
    retention_check_interval_ms: int = RETENTION_CHECK_INTERVAL_MS_DEFAULT
    # Prometheus metrics on 127.0.0.1:metrics_port; 0 keeps them in-process only.
    metrics_port: int = 0
    replication: ReplicationConfig = field(default_factory=ReplicationConfig)
    # walmgr's notification address "HOST:PORT" ("" : none).  Best effort:
    # the broker never waits for walmgr and never fails because of it.
    walmgr_address: str = ""
    # The RPC server's connection limits and deadlines (partlog.rpc.server_limits).
    rpc_limits: ServerLimits = field(default_factory=ServerLimits)
    # The builder loop's period, for topics with remote.storage.enable.
    tiering_interval_ms: int = TIERING_INTERVAL_MS_DEFAULT

    def __post_init__(self) -> None:
        names = ("commit_rpc_timeout_ms", "commit_deadline_ms", "retention_check_interval_ms", "tiering_interval_ms")
        for name in names:
            if getattr(self, name) <= 0:
                raise ValueError(f"BrokerConfig.{name} must be > 0, got {getattr(self, name)}")
        for name in ("fetch_cache_bytes_max", "segment_read_chunk_bytes", "local_segment_bytes_per_partition",
                     "local_segment_bytes_max"):  # fmt: skip
            if getattr(self, name) < 0:
                raise ValueError(f"BrokerConfig.{name} must be >= 0, got {getattr(self, name)}")


class Broker:
    """One broker.  ``await start()``, then serve until ``await stop()``."""

    def __init__(
        self,
        config: BrokerConfig,
        metadata: MetadataSource,
        objects: ObjectStore,
        *,
        clock: Clock = SYSTEM_CLOCK,
        entropy: Entropy = SYSTEM_ENTROPY,
    ) -> None:
        self.config = config
        self.broker_id = bid = config.broker_id
        self.metadata = metadata
        self.objects = objects
        # Time and randomness, handed on to every service (partlog.runtime).
        self.clock = clock
        self.entropy = entropy
        self._stopping = False
        self._server: RpcServer | None = None
        self.port = 0
        # The RPC's authorization (authorize_rpc): off unless the node's authorizer is on.
        self.rpc_authz: RpcClusterAuthz | None = None
        self._rpc_principals: PrincipalMapper | None = None
        # Known from the metadata by the time the broker listens (listen()).
        self.cluster_id: uuid.UUID | None = None
        # Topics by name: (topic id, partitions), rebuilt when the metadata
        # changes (the Kafka front end names topics on every request).
        self.topic_index: dict[str, tuple[uuid.UUID, int]] = {}
        self._topic_sizes: dict[uuid.UUID, int] = {}  # the partitions the store has, by topic
        self.dynamic_configs: DynamicConfigSource = LocalConfigs()  # follow_dynamic_configs
        self._configs_applier = TopicConfigApplier(
            TopicConfigSync(INTERNAL_TOPIC_CONFIGS), lambda: self.metadata.topics(),
            lambda: self.dynamic_configs.configs.topic_defaults(self.broker_id), self._write_topic_configs,
            lambda run: self.tasks.spawn(run))  # fmt: skip

        def current() -> MetadataSource:
            return self.metadata

        def stopping() -> bool:
            return self._stopping

        def cluster() -> uuid.UUID | None:
            return self.cluster_id

        self.tasks = Tasks(bid)
        self.peers = Peers(secret=config.secret, client_ssl=config.client_ssl, metadata=current, cluster_id=cluster)
        self.data = NewData()
        # The HWM follows replication, not the leader's log end.
        self.store = MetadataStore.open(
            config.data_dir,
            sync=config.sync,
            commit_deadline_ms=config.commit_deadline_ms,
            clock=clock.wall_ms,
            monotonic=clock.monotonic,
            auto_high_watermark=False,
            checkpoint_thread=config.store_checkpoint_thread,
            release_grace_ms=config.replication.release_grace_ms,
            boot_id=config.boot_id,
        )
        self.replicas = ReplicaManager(
            bid,
            self.store,
            metadata,
            config.replication,
            client=self.peers.client,
            drop_client=self.peers.drop,
            on_data=self.data.wake,
            clock=clock,
            # A follower's fail-stopped store is reopened as a leader's is
            # (self.commits exists by the time a fetcher runs).
            on_store_failed=lambda: self.commits.store_failed(),
            objects=objects,
        )
        self.pipeline = ProducePipeline(
            bid, config.produce, leader_of=metadata.leader_of, rand_hex=lambda: entropy.token_hex(8)
        )
        self.metrics = BrokerMetrics(
            bid,
            lambda: float(self.pipeline.inflight_bytes),
            config.produce.inflight_bytes_max,
            lambda: float(self.pipeline.uploads_inflight),
            config.produce.uploads_inflight_max,
            lambda: float(self.pipeline.uploads_waiting),
        )
        self.metrics.cache_bytes_max.set(config.fetch_cache_bytes_max)
        self.metrics.metadata_errors.set_function(
            lambda: float(self.metadata.failures if isinstance(self.metadata, CountsFailures) else 0)
        )
        self.metrics.watch_replication(
            lambda: self.replicas.stats, lambda: self.replicas.leaders, lambda: self.replicas.under_replicated
        )
        self.metrics.watch_store(self.store.store_stats)
        if callable(session_stats := getattr(self.metadata, "session_stats", None)):  # etcd's (EtcdMetadata)
            self.metrics.watch_metadata_session(session_stats)
        self.stats = BrokerStats(self.metrics)
        self.notifier = WalmgrNotifier(
            bid,
            config.walmgr_address,
            secret=config.secret,
            client_ssl=config.client_ssl,
            cluster_id=cluster,
            stopping=stopping,
        )
        self.verification = TxnVerification(
            bid,
            self.store.verification,
            self.peers,
            metrics=self.metrics,
            leads=self.replicas.is_leader,
            timeout_ms=max(1, min(TXN_VERIFICATION_TIMEOUT_MS, config.commit_rpc_timeout_ms // 2)),
        )
        self.commits = LeaderCommits(
            bid,
            self.store,
            self.replicas,
            metrics=self.metrics,
            tasks=self.tasks,
            wake=self.data.wake,
            stopping=stopping,
            commit_rpc_timeout_ms=config.commit_rpc_timeout_ms,
            verification=self.verification,
        )
        self.produce_driver = ProduceDriver(
            bid,
            config.az,
            self.pipeline,
            objects,
            commits=self.commits,
            peers=self.peers,
            notifier=self.notifier,
            metrics=self.metrics,
            tasks=self.tasks,
            metadata=current,
            stopping=stopping,
            clock=clock,
            commit_rpc_timeout_ms=config.commit_rpc_timeout_ms,
        )
        self.producer_ids = ProducerIdBlocks(bid, tasks=self.tasks, metadata=current, clock=clock, entropy=entropy)
        self.local_segments = LocalSegments(
            os.path.join(config.data_dir, "local-segments"), self.store, self.replicas, objects, metrics=self.metrics,
            tasks=self.tasks, stopping=stopping, interval_ms=config.tiering_interval_ms,
            partition_bytes_max=config.local_segment_bytes_per_partition,
            total_bytes_max=config.local_segment_bytes_max,
        )  # fmt: skip
        self.fetches = FetchService(
            bid,
            config.az,
            self.store,
            self.replicas,
            objects,
            RangeCache(config.fetch_cache_bytes_max),
            data=self.data,
            peers=self.peers,
            metrics=self.metrics,
            metadata=current,
            as_leader=lambda method, body: self.rpc.as_leader(method, body),
            clock=clock,
            segment_read_chunk_bytes=config.segment_read_chunk_bytes,
            local=self.local_segments,
        )
        self.rpc = RpcHandlers(
            bid,
            self.store,
            self.replicas,
            produce=self.produce_driver,
            commits=self.commits,
            fetches=self.fetches,
            producer_ids=self.producer_ids,
            metrics=self.metrics,
            metadata=current,
            wake=self.data.wake,
        )
        self.tiering = Tiering(
            bid, self.store, self.replicas, objects, metrics=self.metrics, tasks=self.tasks, clock=clock,
            entropy=entropy, stopping=stopping, interval_ms=config.tiering_interval_ms, cluster_id=cluster,
        )  # fmt: skip

    # ------------------------------------------------------------ lifecycle

    def _new_topics(self, metadata: MetadataSource) -> list[CreateTopicAndPartitionsRequest]:
        """Topics of ``metadata`` this broker lacks, or has with fewer partitions (CreatePartitions: the
        store adds the missing ones); only those cost a store write.  Refreshes the index of topics by name."""
        topics = metadata.topics()
        self.topic_index = {t.name: (t.topic_id, t.num_partitions) for t in topics}
        new = [t for t in topics if self._topic_sizes.get(t.topic_id, 0) < t.num_partitions]
        self._topic_sizes.update((t.topic_id, t.num_partitions) for t in new)
        return [
            CreateTopicAndPartitionsRequest(
                t.topic_id, t.name, t.num_partitions, INTERNAL_TOPIC_CONFIGS.get(t.name, {})
            )
            for t in new
        ]

    def _metadata_cluster(self, metadata: MetadataSource) -> uuid.UUID:
        """The cluster ``metadata`` names; a broker without one, or with
        another than it started with, refuses (ClusterMismatchError)."""
        cluster_id = getattr(metadata, "cluster_id", None)
        if not isinstance(cluster_id, uuid.UUID):
            raise ClusterMismatchError(f"broker {self.broker_id}: the cluster metadata names no cluster id")
        if self.cluster_id is not None and cluster_id != self.cluster_id:
            raise ClusterMismatchError(
                f"broker {self.broker_id}: new metadata names cluster {cluster_id}, "
                f"this broker serves cluster {self.cluster_id}"
            )
        return cluster_id

    async def listen(self) -> None:
        """Bind the RPC port (``start`` does it when not done yet).  A broker
        that registers with a controller listens first, so a port already in
        use fails before the controller is told this broker serves there.
        The cluster id comes from the metadata now: the store must belong to
        it (``MetadataStore.bind_cluster``), and the handshake announces it."""
        if self._server is not None:
            return
        cluster_id = self._metadata_cluster(self.metadata)
        if self.config.metrics_port:
            try:
                self.metrics.serve(self.config.metrics_port)
            except OSError as e:
                raise OSError(e.errno, f"metrics port 127.0.0.1:{self.config.metrics_port}: {e.strerror}") from e
        await asyncio.to_thread(self.store.bind_cluster, cluster_id)
        self.cluster_id = cluster_id
        self.pipeline.cluster_id = cluster_id
        server = RpcServer(
            self.rpc.table(),
            host=self.config.host,
            port=self.config.port,
            secret=self.config.secret,
            cluster_id=cluster_id,
            ssl=self.config.server_ssl,
            schemas=BROKER_SCHEMAS,
            ordered_methods=frozenset({"commit"}),
            **dataclasses.asdict(self.config.rpc_limits),
            authorize=self.rpc_authz,
            principal_mapper=self._rpc_principals,
            clock=self.clock,
            entropy=self.entropy,
        )
        await server.start()
        self._server = server
        self.port = server.port

    def authorize_rpc(self, config: AuthorizerConfig, acls: AclSource, principal_rules: PrincipalMapper) -> None:
        """Authorize the RPC's peers (before ``listen``): every method then
        needs CLUSTER_ACTION on the cluster, decided under ``config`` over
        ``acls``, for the principal ``principal_rules`` map a peer's
        certificate to (``User:ANONYMOUS`` without TLS)."""
        assert self._server is None, "authorize_rpc after listen"
        self.rpc_authz = RpcClusterAuthz(config, acls, self.metrics.rpc_authorization_failures, self.clock)
        self._rpc_principals = principal_rules

    async def unlisten(self) -> None:
        """Close the RPC port ``listen`` bound (a node whose other listener
        failed to bind gives it back); ``listen`` may bind it again."""
        if self._server is not None:
            await self._server.close()
            self._server = None

    async def start(self) -> None:
        await self.listen()
        await asyncio.to_thread(self.store.create_topic_and_partitions, self._new_topics(self.metadata))
        self._configs_applier.apply_all()
        self.metadata.add_listener(self._metadata_changed)
        await self._apply_roles(self.metadata)
        self.replicas.start()
        self.tasks.spawn(self.produce_driver.rotation_timer())
        self.tasks.spawn(self._retention_timer())
        if self.config.walmgr_address:
            self.tasks.spawn(self.notifier.run())
        if self.tiering.ensure_started():  # only if some topic enables it
            self.local_segments.ensure_started()
        log.info("broker started id=%d az=%s port=%d", self.broker_id, self.config.az, self.port)

    async def stop(self) -> None:
        """Stop serving; answered requests stay answered, pending ones fail."""
        self._stopping = True
        if self._server is not None:
            await self._server.close()
        await self.replicas.stop()
        await self.tasks.cancel_all()
        self.metrics.close()
        await self.peers.close()
        self.produce_driver.cancel_replies()
        await asyncio.to_thread(self.store.close)

    def set_metadata(self, metadata: MetadataSource) -> None:
        """Adopt new metadata (brokers' ports, new topics).  New topics are
        created in the store at once (idempotent; a short blocking write).
        Metadata of another cluster raises :class:`ClusterMismatchError`."""
        self._metadata_cluster(metadata)
        if metadata is not self.metadata:
            metadata.add_listener(self._metadata_changed)
        self.metadata = metadata
        self._metadata_changed()

    def _metadata_changed(self) -> None:
        """The metadata changed (a controller push, or ``set_metadata``): new
        topics, then the roles it gives this broker."""
        metadata = self.metadata
        self.pipeline.leader_of = metadata.leader_of
        reqs = self._new_topics(metadata)
        if reqs:
            self.store.create_topic_and_partitions(reqs)
        self._configs_applier.schedule()
        if not self._stopping:
            self.tasks.spawn(self._apply_roles(metadata))

    def _write_topic_configs(self, topic: TopicInfo, whole: dict[str, str | int]) -> bool:
        """Give the store a topic's whole config (TopicConfigApplier); False: not applied."""
        try:
            self.alter_topic_configs(topic.topic_id, whole)
        except (TopicConfigError, KeyError) as e:
            log.error("broker %d: topic %s configs not applied: %s", self.broker_id, topic.name, e)
            return False
        return True

    def follow_dynamic_configs(self, source: DynamicConfigSource) -> None:
        """Follow the node's dynamic configs: their ``log.*`` topic defaults reach the store."""
        self.dynamic_configs = source
        source.add_listener(self._configs_applier.schedule)
        self.metrics.watch_dynamic_configs(lambda: source_stats(source))

    async def _apply_roles(self, metadata: MetadataSource) -> None:
        """Take the roles ``metadata`` gives this broker, then drop the logs
        of topics it says were deleted (after the roles: no partition of
        theirs is led or followed any more, so nothing appends to them)."""
        await self.replicas.apply_metadata(metadata)
        if not isinstance(metadata, KnowsDeletedTopics):
            return
        gone = set(metadata.deleted_topics()) & set(self.store.topics())
        if gone:
            try:
                await asyncio.to_thread(self.store.delete_topics, gone)
            except StoreError:
                log.exception(
                    "broker %d: dropping deleted topics failed; the next metadata tries again", self.broker_id
                )
                return
            log.info("broker %d dropped the logs of %d deleted topics", self.broker_id, len(gone))

    async def _retention_timer(self) -> None:
        """Apply retention periodically, as Kafka's log manager does.  The
        batches it removes drop their WAL references in the same transaction;
        walmgr deletes the objects nobody references any more."""
        interval_s = self.config.retention_check_interval_ms / 1000
        while not self._stopping:
            await asyncio.sleep(interval_s)
            try:
                changed = await asyncio.to_thread(self.store.enforce_retention, self.clock.wall_ms())
            except StoreError:
                log.exception("retention failed on broker %d", self.broker_id)
                continue
            self.metrics.retention_runs.inc()
            if changed:
                log.info("retention moved log start of %d partitions on broker %d", len(changed), self.broker_id)

    # ------------------------------------------------------------- serving

    async def produce(
        self,
        batches: Sequence[tuple[TopicIdPartition, bytes]],
        *,
        acks: int = -1,
        timeout_ms: int = PRODUCE_TIMEOUT_MS_DEFAULT,
        urgent: bool = False,
        transactional_id: str | None = None,
    ) -> list[BatchResult]:
        """Produce ``batches``.  acks=1 is answered once every batch is
        committed by its leader, acks=-1 (all) once it is also replicated to
        the ISR (or failed); acks=0 as soon as the batches are in the WAL
        buffer (results NONE, offsets -1), as Kafka's acks=0 producer learns
        nothing either.  ``urgent`` (a coordinator's record) closes the open
        WAL file now instead of at its commit interval.  With a
        ``transactional_id`` (a Kafka client's), the leaders verify the
        transaction's first batches with its coordinator (KIP-890 part 1,
        :mod:`partlog.broker.txn_verification`)."""
        return await self.produce_driver.produce(
            batches, acks=acks, timeout_ms=timeout_ms, urgent=urgent, transactional_id=transactional_id
        )

    async def fetch(
        self, reqs: list[FindBatchRequest], *, max_wait_ms: int, min_bytes: int, max_bytes: int
    ) -> dict[str, Any]:
        """Read partitions this broker holds a replica of, up to their HWMs,
        waiting up to ``max_wait_ms`` for ``min_bytes``:
        ``{"partitions": [[error, hwm, log start, records, message, last stable
        offset, [[producer id, first offset] of aborted transactions]], ...]}``."""
        return await self.fetches.fetch(reqs, max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=max_bytes)

    async def fetch_routed(
        self, reqs: list[FindBatchRequest], *, max_wait_ms: int, min_bytes: int, max_bytes: int, az: str | None = None
    ) -> list[list[Any]]:
        """See :meth:`FetchService.fetch_routed`."""
        return await self.fetches.fetch_routed(
            reqs, max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=max_bytes, az=az
        )

    async def on_leaders(
        self, method: str, items: list[tuple[TopicIdPartition, list[Any]]], failed: list[Any]
    ) -> list[list[Any]]:
        """See :meth:`FetchService.on_leaders`."""
        return await self.fetches.on_leaders(method, items, failed)

    async def list_offsets_routed(self, reqs: list[ListOffsetsRequest]) -> list[tuple[Errors, int, int]]:
        return await self.fetches.list_offsets_routed(reqs)

    async def write_txn_markers(self, markers: Sequence[TxnMarkerRequest], *, timeout_ms: int) -> list[Errors]:
        """Each COMMIT/ABORT marker appended by its partition's leader (here
        or over the broker RPC) and replicated to the ISR: per marker its
        error; NOT_LEADER_OR_FOLLOWER where the leader is unknown, moved or
        unreachable, REQUEST_TIMED_OUT after ``timeout_ms`` (both retriable:
        the coordinator sends again)."""
        items = [
            (m.topic_id_partition, [m.producer_id, m.producer_epoch, m.coordinator_epoch, int(m.committed)])
            for m in markers
        ]
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                rows = await self.fetches.on_leaders("write_txn_markers", items, [int(Errors.NOT_LEADER_OR_FOLLOWER)])
        except TimeoutError:
            return [Errors.REQUEST_TIMED_OUT] * len(markers)
        return [peer_error(row[0]) for row in rows]

    def add_marker_listener(self, fn: Callable[[TopicIdPartition, int, bool, int], None]) -> None:
        """``fn(tp, producer id, committed, offset)`` after a marker this
        broker leads is appended at ``offset`` and replicated."""
        self.rpc.marker_listeners.append(fn)

    def set_txn_verifier(
        self,
        verify: Callable[[str, int, int, Sequence[TopicIdPartition]], Awaitable[list[Errors]]],
        locate: Callable[[str], int | None],
    ) -> None:
        """KIP-890: ``verify`` answers for the transactional ids this broker
        coordinates, ``locate`` names an id's coordinator broker."""
        self.verification.register(verify, locate)

    def set_txn_coordinator(
        self,
        init_producer_id: Callable[[str, int, tuple[int, int] | None], Awaitable[tuple[Errors, int, int]]],
        add_partitions: Callable[[str, int, int, Sequence[TopicIdPartition]], Awaitable[list[Errors]]],
        end_txn: Callable[[str, int, int, bool], Awaitable[Errors]],
    ) -> None:
        """The Kafka front end's transaction coordinator answers the broker
        RPC's transaction methods (``partlog.broker.txn_rpc``)."""
        self.rpc.txn.register(init_producer_id, add_partitions, end_txn)

    async def init_producer_id(self, wait_ms: int = 5_000) -> int | None:
        """A producer id (KIP-730 blocks; see :class:`ProducerIdBlocks`);
        None if the controller gave none within ``wait_ms``."""
        return await self.producer_ids.init_producer_id(wait_ms)

    @property
    def walmgr_notifications_sent(self) -> int:
        return self.notifier.sent

    @property
    def walmgr_notifications_dropped(self) -> int:
        return self.notifier.dropped

    # ------------------------------------------- the Kafka front end's port

    # What partlog.kafka_front.port.BrokerPort asks beyond the serving
    # methods above.

    @property
    def az(self) -> str:
        return self.config.az

    @property
    def min_insync_replicas(self) -> int:
        return self.config.replication.min_insync_replicas

    def topic_config(self, topic_id: uuid.UUID) -> TopicConfig:
        return self.store.topic_config(topic_id)

    def compacted(self, topic_id: uuid.UUID) -> bool:
        return topic_id in self.tiering.compacted_topics

    def alter_topic_configs(self, topic_id: uuid.UUID, configs: dict[str, str | int]) -> None:
        """Change a topic's configs in this broker's store; the builder loop
        starts once a topic sets remote.storage.enable.  TopicConfigError for
        a bad value, KeyError for an unknown topic."""
        self.store.alter_topic_configs(topic_id, configs)
        if self.tiering.ensure_started():
            self.local_segments.ensure_started()

    def serves(self, tp: TopicIdPartition) -> bool:
        return self.replicas.serves(tp)

    def leader_epoch(self, tp: TopicIdPartition) -> int | None:
        return self.replicas.leader_epoch(tp)

    def leader_epoch_cache(self, tp: TopicIdPartition) -> list[tuple[int, int]]:
        return self.store.leader_epoch_cache(tp)

    def log_start_offset(self, tp: TopicIdPartition) -> int:
        return self.store.log_start_offset(tp)

    def log_end_offset(self, tp: TopicIdPartition) -> int:
        return self.store.log_end_offset(tp)

    def high_watermark(self, tp: TopicIdPartition) -> int:
        return self.store.high_watermark(tp)

    def new_data(self) -> asyncio.Event:
        return self.data.event


async def start_brokers(
    configs: Sequence[BrokerConfig], metadata: StaticMetadata, objects: ObjectStore, *, clock: Clock = SYSTEM_CLOCK
) -> tuple[list[Broker], StaticMetadata]:
    """Start in-process brokers (ports 0: the OS picks) on ``clock``, then
    hand all of them the metadata with the ports filled in.  If one fails to
    start, the started ones are stopped again."""
    brokers = [Broker(c, metadata, objects, clock=clock) for c in configs]
    started: list[Broker] = []
    try:
        for b in brokers:
            await b.start()
            started.append(b)
    except BaseException:
        for b in started:
            await b.stop()
        raise
    metadata = metadata.with_ports({b.broker_id: b.port for b in brokers}, {b.broker_id: 0 for b in brokers})
    for b in brokers:
        b.set_metadata(metadata)
    return brokers, metadata


__all__ = ["Broker", "BrokerConfig", "start_brokers"]
