"""A partlog broker: the asyncio shell around the sans-IO produce pipeline,
the leader's MetadataStore and the fetch path.

It serves, over the inter-broker RPC (``partlog.rpc.transport``):

* ``produce``: any partition; batches go into this broker's WAL buffer.
* ``commit``: from other brokers' pipelines, for partitions this broker leads
  (appended in arrival order per connection, so WAL-file order holds;
  acks=all ones answered once replicated, see ``partlog.replication.manager``).
* ``replica_fetch``: followers replicating the partitions this broker leads.
* ``fetch``: partitions this broker holds a replica of, with long-poll.
* ``metadata``, ``list_offsets``, ``init_producer_id``.

Everything the broker decides lives in the sans-IO classes; this module only
moves bytes, runs the store and the object store in threads, and keeps time.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import secrets
import ssl
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from partlog.broker.metrics import BrokerMetrics
from partlog.controller.cluster_meta import ClusterMismatchError, MetadataSource, StaticMetadata
from partlog.fetch.reads import CACHE_BYTES_MAX_DEFAULT, RangeCache, assemble, plan_reads
from partlog.kafka.errors import Errors
from partlog.kafka.leader_epochs import end_offset_for_epoch
from partlog.kafka.producer_ids import ProducerIdAllocator
from partlog.kafka.records import (
    BatchInfo,
    CommitBatchRequest,
    CommitBatchResponse,
    CreateTopicAndPartitionsRequest,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    FindBatchRequest,
    ListOffsetsRequest,
    TopicIdPartition,
)
from partlog.kafka.topic_config import TopicConfig
from partlog.produce.pipeline import (
    Action,
    BatchResult,
    ProduceConfig,
    ProducePipeline,
    Reply,
    SendCommit,
    Upload,
)
from partlog.replication.manager import ReplicaManager, ReplicationConfig
from partlog.rpc.frame import RpcErrorCode
from partlog.rpc.methods import (
    BROKER_SCHEMAS,
    PARTITIONS_MAX,
    PRODUCE_BATCHES_MAX,
    REFERENCE_CHECKS_MAX,
    REPLICAS_ASKED_MAX,
    RESPONSE_SCHEMAS,
)
from partlog.rpc.transport import (
    RPC_TIMEOUT_MS_DEFAULT,
    Deferred,
    RpcClient,
    RpcConnectionError,
    RpcError,
    RpcRemoteError,
    RpcServer,
    RpcTimeoutError,
    ServerLimits,
)
from partlog.rpc.wire import (
    Verdict,
    WireError,
    dec_commit,
    dec_commit_responses,
    dec_partition_items,
    dec_reference_checks,
    enc_commit,
    enc_commit_responses,
    enc_wal_uploaded,
)
from partlog.store import COMMIT_DEADLINE_MS_DEFAULT, MetadataStore, StoreError
from partlog.wal.key import WalKeyError, parse_wal_key
from partlog.wal.objectstore import ObjectStore

log = logging.getLogger(__name__)

# How long a commit RPC to another leader may take before its batches are
# answered REQUEST_TIMED_OUT (the producer retries; idempotence dedups).
COMMIT_RPC_TIMEOUT_MS_DEFAULT = 10_000
# Kafka's fetch.max.wait.ms default for consumers is 500.
FETCH_MAX_WAIT_MS_MAX = 30_000
# Kafka's request.timeout.ms default.
PRODUCE_TIMEOUT_MS_DEFAULT = 30_000
# Kafka's log.retention.check.interval.ms default: how often the broker
# applies retention.ms / retention.bytes to the partitions it leads.
RETENTION_CHECK_INTERVAL_MS_DEFAULT = 300_000
# A fetch's default total bytes: Kafka's fetch.max.bytes.
FETCH_MAX_BYTES_DEFAULT = 50 * 1024 * 1024
# A leader answers an acks=all commit that is not replicated in time with
# REQUEST_TIMED_OUT this much before the sender's commit RPC would time out.
ACKS_ALL_TIMEOUT_MARGIN_MS = 1_000
# Commit RPCs one broker keeps in flight to one leader (pipelined on one
# connection, so they are appended in WAL-file order).
COMMITS_IN_FLIGHT_MAX = 64
# Notifications to walmgr waiting to be sent; beyond it the oldest are
# dropped (walmgr's scans find those objects anyway).
WALMGR_NOTIFY_QUEUE_MAX = 10_000
# Objects per notification RPC, and how long a failed one waits.
WALMGR_NOTIFY_BATCH_MAX = 1_000
WALMGR_NOTIFY_BACKOFF_MS = 1_000


# Committed offsets live in __consumer_offsets (partlog.kafka_front), which is
# not compacted: retention must never drop a group's last commit, so every
# broker keeps that topic's log whole (Kafka compacts it instead).
INTERNAL_TOPIC_CONFIGS: dict[str, dict[str, str | int]] = {
    "__consumer_offsets": {"retention.ms": -1, "retention.bytes": -1}
}


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    broker_id: int
    az: str
    data_dir: str
    host: str = "127.0.0.1"
    port: int = 0
    produce: ProduceConfig = field(default_factory=ProduceConfig)
    sync: bool = True
    # The store's checkpoints in a thread of their own (False: inline, by
    # count, as the deterministic simulation needs).
    store_checkpoint_thread: bool = True
    commit_rpc_timeout_ms: int = COMMIT_RPC_TIMEOUT_MS_DEFAULT
    commit_deadline_ms: int = COMMIT_DEADLINE_MS_DEFAULT
    fetch_cache_bytes_max: int = CACHE_BYTES_MAX_DEFAULT
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
    # The RPC server's connection limits and deadlines (partlog.rpc.transport).
    rpc_limits: ServerLimits = field(default_factory=ServerLimits)

    def __post_init__(self) -> None:
        for name in ("commit_rpc_timeout_ms", "commit_deadline_ms", "retention_check_interval_ms"):
            if getattr(self, name) <= 0:
                raise ValueError(f"BrokerConfig.{name} must be > 0, got {getattr(self, name)}")
        if self.fetch_cache_bytes_max < 0:
            raise ValueError(f"BrokerConfig.fetch_cache_bytes_max must be >= 0, got {self.fetch_cache_bytes_max}")


# Samples kept for reports (latency percentiles, fan-out per file); older
# ones are dropped, Prometheus histograms keep the totals.
STATS_SAMPLES_MAX = 100_000


def _samples() -> deque[Any]:
    return deque(maxlen=STATS_SAMPLES_MAX)


@dataclass(slots=True)
class BrokerStats:
    produce_requests: int = 0
    produce_batches: int = 0
    produce_bytes: int = 0
    uploads: int = 0
    upload_errors: int = 0
    upload_ms: deque[float] = field(default_factory=_samples)
    commits_local: int = 0
    commits_remote: int = 0
    commit_errors: int = 0
    commit_ms: deque[float] = field(default_factory=_samples)
    # Per WAL file: (local, same-AZ remote, cross-AZ remote) commit RPCs.
    fanout: deque[tuple[int, int, int]] = field(default_factory=_samples)
    fetches: int = 0
    fetch_gets: int = 0
    commits_served: int = 0


class Broker:
    """One broker.  ``await start()``, then serve until ``await stop()``."""

    def __init__(
        self,
        config: BrokerConfig,
        metadata: MetadataSource,
        objects: ObjectStore,
        *,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.config = config
        self.broker_id = config.broker_id
        self.metadata = metadata
        self.objects = objects
        self._clock = clock
        # The HWM follows replication, not the leader's log end.
        self.store = MetadataStore.open(
            config.data_dir,
            sync=config.sync,
            commit_deadline_ms=config.commit_deadline_ms,
            clock=clock,
            auto_high_watermark=False,
            checkpoint_thread=config.store_checkpoint_thread,
        )
        self.replicas = ReplicaManager(
            config.broker_id,
            self.store,
            metadata,
            config.replication,
            client=self._client,
            drop_client=self._drop_client,
            on_data=self._wake_fetches,
            clock=clock,
        )
        self.producer_ids = ProducerIdAllocator(config.broker_id)
        self._producer_ids_ready = asyncio.Event()
        self._no_producer_id_blocks = False
        self.pipeline = ProducePipeline(
            config.broker_id,
            config.produce,
            leader_of=metadata.leader_of,
            rand_hex=lambda: secrets.token_hex(8),
        )
        self.cache = RangeCache(config.fetch_cache_bytes_max)
        self.stats = BrokerStats()
        self.metrics = BrokerMetrics(
            config.broker_id,
            lambda: float(self.pipeline.inflight_bytes),
            config.produce.inflight_bytes_max,
            lambda: float(self.pipeline.uploads_inflight),
            config.produce.uploads_inflight_max,
            lambda: float(self.pipeline.uploads_waiting),
        )
        self.metrics.cache_bytes_max.set(config.fetch_cache_bytes_max)
        self.metrics.metadata_errors.set_function(lambda: float(getattr(self.metadata, "failures", 0)))
        self.metrics.watch_replication(
            lambda: self.replicas.stats, lambda: self.replicas.leaders, lambda: self.replicas.under_replicated
        )
        self.metrics.watch_store(self.store.store_stats)
        self._server: RpcServer | None = None
        self._clients: dict[int, RpcClient] = {}
        self._client_locks: dict[int, asyncio.Lock] = {}
        self._replies: dict[int, asyncio.Future[Reply]] = {}
        self._next_produce_id = 0
        self._room = asyncio.Condition()
        # Produce admission in arrival order (see produce()).
        self._admit_next = 0
        self._admit_serving = 0
        self._admit_left: set[int] = set()
        self._commit_queues: dict[int, asyncio.Queue[SendCommit]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._timer_wake = asyncio.Event()
        self._new_data = asyncio.Event()
        self._upload_started: dict[int, float] = {}
        self._stopping = False
        self._topic_ids: set[uuid.UUID] = set()
        self._walmgr_queue: deque[tuple[str, int, int, int, tuple[TopicIdPartition, ...]]] = deque(
            maxlen=WALMGR_NOTIFY_QUEUE_MAX
        )
        self._walmgr_wake = asyncio.Event()
        self.walmgr_notifications_sent = 0
        self.walmgr_notifications_dropped = 0
        self.port = 0
        # Topics by name: (topic id, partitions), rebuilt when the metadata
        # changes (the Kafka front end names topics on every request).
        self.topic_index: dict[str, tuple[uuid.UUID, int]] = {}
        # Known from the metadata by the time the broker listens (listen()).
        self.cluster_id: uuid.UUID | None = None
        self._store_reopening = False
        # What on_leaders calls when this broker is the leader asked.
        self._leader_handlers: dict[str, Callable[[Any], Awaitable[Any]]] = {
            "list_offsets": self._handle_list_offsets,
            "delete_records": self._handle_delete_records,
            "offset_for_leader_epoch": self._handle_offset_for_leader_epoch,
        }

    # ------------------------------------------------------------ lifecycle

    def _new_topics(self, metadata: MetadataSource) -> list[CreateTopicAndPartitionsRequest]:
        """Topics of ``metadata`` this broker has not created yet (only those
        cost a store write); refreshes the index of topics by name."""
        topics = metadata.topics()
        self.topic_index = {t.name: (t.topic_id, t.num_partitions) for t in topics}
        new = [t for t in topics if t.topic_id not in self._topic_ids]
        self._topic_ids.update(t.topic_id for t in new)
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
        handlers: dict[str, Callable[[Any], Awaitable[Any]]] = {
            "produce": self._handle_produce,
            "commit": self._handle_commit,
            "fetch": self._handle_fetch,
            "metadata": self._handle_metadata,
            "list_offsets": self._handle_list_offsets,
            "init_producer_id": self._handle_init_producer_id,
            "replica_fetch": self.replicas.handle_replica_fetch,
            "referenced_files": self._handle_referenced_files,
            "delete_records": self._handle_delete_records,
            "offset_for_leader_epoch": self._handle_offset_for_leader_epoch,
        }
        server = RpcServer(
            handlers,
            host=self.config.host,
            port=self.config.port,
            secret=self.config.secret,
            cluster_id=cluster_id,
            ssl=self.config.server_ssl,
            schemas=BROKER_SCHEMAS,
            ordered_methods=frozenset({"commit"}),
            **dataclasses.asdict(self.config.rpc_limits),
        )
        await server.start()
        self._server = server
        self.port = server.port

    async def unlisten(self) -> None:
        """Close the RPC port ``listen`` bound (a node whose other listener
        failed to bind gives it back); ``listen`` may bind it again."""
        if self._server is not None:
            await self._server.close()
            self._server = None

    async def start(self) -> None:
        await self.listen()
        await asyncio.to_thread(self.store.create_topic_and_partitions, self._new_topics(self.metadata))
        self.metadata.add_listener(self._metadata_changed)
        await self._apply_roles(self.metadata)
        self.replicas.start()
        self._spawn(self._rotation_timer())
        self._spawn(self._retention_timer())
        if self.config.walmgr_address:
            self._spawn(self._walmgr_notifier())
        log.info("broker started id=%d az=%s port=%d", self.broker_id, self.config.az, self.port)

    async def stop(self) -> None:
        """Stop serving; answered requests stay answered, pending ones fail."""
        self._stopping = True
        if self._server is not None:
            await self._server.close()
        await self.replicas.stop()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self.metrics.close()
        for c in self._clients.values():
            await c.close()
        for fut in self._replies.values():
            if not fut.done():
                fut.cancel()
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
        if not self._stopping:
            self._spawn(self._apply_roles(metadata))

    async def _apply_roles(self, metadata: MetadataSource) -> None:
        """Take the roles ``metadata`` gives this broker, then drop the logs
        of topics it says were deleted (after the roles: no partition of
        theirs is led or followed any more, so nothing appends to them)."""
        await self.replicas.apply_metadata(metadata)
        deleted = getattr(metadata, "deleted_topics", None)
        if not callable(deleted):
            return
        gone = set(deleted()) & set(self.store.topics())
        if gone:
            try:
                await asyncio.to_thread(self.store.delete_topics, gone)
            except StoreError:
                log.exception(
                    "broker %d: dropping deleted topics failed; the next metadata tries again", self.broker_id
                )
                return
            log.info("broker %d dropped the logs of %d deleted topics", self.broker_id, len(gone))

    def _wake_fetches(self) -> None:
        self._new_data.set()
        self._new_data = asyncio.Event()

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("broker %d task failed", self.broker_id, exc_info=task.exception())

    # -------------------------------------------------------------- produce

    async def produce(
        self,
        batches: Sequence[tuple[TopicIdPartition, bytes]],
        *,
        acks: int = -1,
        timeout_ms: int = PRODUCE_TIMEOUT_MS_DEFAULT,
    ) -> list[BatchResult]:
        """Produce ``batches``.  acks=1 is answered once every batch is
        committed by its leader, acks=-1 (all) once it is also replicated to
        the ISR (or failed); acks=0 as soon as the batches are in the WAL
        buffer (results NONE, offsets -1), as Kafka's acks=0 producer learns
        nothing either."""
        if acks not in (0, 1, -1):
            raise ValueError(f"acks must be 0, 1 or -1, got {acks}")
        nbytes = sum(len(b) for _, b in batches)
        deadline = time.monotonic() + timeout_ms / 1000
        async with self._room:
            # Back-pressure: wait for room, unless nothing is in flight (a
            # request above the limit then gets RECORD_LIST_TOO_LARGE).
            # Requests are admitted in arrival order (tickets): a later,
            # smaller request must not overtake one that waits for room, or
            # an idempotent producer's later batches would reach the leader
            # before its earlier ones.
            ticket = self._admit_next
            self._admit_next += 1
            while ticket != self._admit_serving or (
                nbytes > self.pipeline.room_bytes() and self.pipeline.produces_inflight
            ):
                left = deadline - time.monotonic()
                if left <= 0:
                    self._admit_give_up(ticket)
                    return [
                        BatchResult(tp, Errors.REQUEST_TIMED_OUT, error_message="broker buffer full")
                        for tp, _ in batches
                    ]
                try:
                    async with asyncio.timeout(left):
                        await self._room.wait()
                except TimeoutError:
                    continue
                except BaseException:
                    self._admit_give_up(ticket)
                    raise
            self._admit_give_up(ticket)  # admitted: the next ticket's turn
            produce_id = self._next_produce_id
            self._next_produce_id += 1
            acks_all = acks == -1
            fut: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
            self._replies[produce_id] = fut
            self.stats.produce_requests += 1
            self.stats.produce_batches += len(batches)
            self.stats.produce_bytes += nbytes
            self.metrics.produce_requests.inc()
            self.metrics.produce_bytes.inc(nbytes)
            had_open = self.pipeline.next_deadline_ms() is not None
            self._perform(self.pipeline.produce(produce_id, batches, self._clock(), acks_all=acks_all))
            if not had_open:
                self._timer_wake.set()
        if acks == 0 and not fut.done():
            return [BatchResult(tp, Errors.NONE) for tp, _ in batches]
        try:
            async with asyncio.timeout(max(0.001, deadline - time.monotonic())):
                reply = await asyncio.shield(fut)
        except TimeoutError:
            # The pipeline still answers it later; the producer retries.
            return [BatchResult(tp, Errors.REQUEST_TIMED_OUT, error_message="produce timeout") for tp, _ in batches]
        return list(reply.results)

    def _admit_give_up(self, ticket: int) -> None:
        """``ticket`` leaves the admission queue (admitted, timed out or
        cancelled); the queue moves past every ticket that left.  Called
        with ``_room`` held."""
        self._admit_left.add(ticket)
        while self._admit_serving in self._admit_left:
            self._admit_left.discard(self._admit_serving)
            self._admit_serving += 1
        self._room.notify_all()

    async def _rotation_timer(self) -> None:
        while not self._stopping:
            deadline = self.pipeline.next_deadline_ms()
            self._timer_wake.clear()
            if deadline is None:
                await self._timer_wake.wait()
                continue
            delay = (deadline - self._clock()) / 1000
            if delay > 0:
                try:
                    async with asyncio.timeout(delay):
                        await self._timer_wake.wait()
                    continue
                except TimeoutError:
                    pass
            self._perform(self.pipeline.tick(self._clock()))

    async def _retention_timer(self) -> None:
        """Apply retention periodically, as Kafka's log manager does.  The
        batches it removes drop their WAL references in the same transaction;
        walmgr deletes the objects nobody references any more."""
        interval_s = self.config.retention_check_interval_ms / 1000
        while not self._stopping:
            await asyncio.sleep(interval_s)
            try:
                changed = await asyncio.to_thread(self.store.enforce_retention, self._clock())
            except StoreError:
                log.exception("retention failed on broker %d", self.broker_id)
                continue
            self.metrics.retention_runs.inc()
            if changed:
                log.info("retention moved log start of %d partitions on broker %d", len(changed), self.broker_id)

    def _perform(self, actions: list[Action]) -> None:
        for a in actions:
            if isinstance(a, Upload):
                self._spawn(self._upload(a))
            elif isinstance(a, SendCommit):
                self._queue_commit(a)
            else:
                fut = self._replies.pop(a.produce_id, None)
                if fut is not None and not fut.done():
                    fut.set_result(a)
                self._spawn(self._notify_room())

    async def _notify_room(self) -> None:
        async with self._room:
            self._room.notify_all()

    async def _upload(self, up: Upload) -> None:
        start = time.monotonic()
        error: str | None = None
        try:
            await asyncio.to_thread(self.objects.put, up.key, up.data)
        except Exception as e:  # any failure fails this segment's requests, retriably
            error = f"{type(e).__name__}: {e}"
            self.stats.upload_errors += 1
            self.metrics.upload_errors.inc()
        elapsed = time.monotonic() - start
        self.stats.uploads += 1
        self.stats.upload_ms.append(elapsed * 1000)
        self.metrics.uploads.inc()
        self.metrics.upload_seconds.observe(elapsed)
        if error is None:
            self.metrics.upload_bytes.inc(len(up.data))
            self._notify_walmgr(up)
        actions = self.pipeline.upload_done(up.segment_id, self._clock(), error)
        self._record_fanout(actions)
        self._perform(actions)

    def _record_fanout(self, actions: list[Action]) -> None:
        per_segment: dict[int, list[int]] = {}
        for a in actions:
            if isinstance(a, SendCommit):
                counts = per_segment.setdefault(a.segment_id, [0, 0, 0])
                leader = self.metadata.broker(a.leader_broker_id)
                if a.leader_broker_id == self.broker_id:
                    counts[0] += 1
                elif leader is not None and leader.az == self.config.az:
                    counts[1] += 1
                else:
                    counts[2] += 1
        for counts in per_segment.values():
            self.stats.fanout.append((counts[0], counts[1], counts[2]))
            self.metrics.wal_files_committed.inc()
            for where, n in zip(("local", "same_az", "cross_az"), counts, strict=True):
                if n:
                    self.metrics.commits.labels(where).inc(n)

    def _queue_commit(self, c: SendCommit) -> None:
        # One queue and one sender per leader: commits to a leader leave in
        # the order the pipeline released them (WAL-file order).
        q = self._commit_queues.get(c.leader_broker_id)
        if q is None:
            q = self._commit_queues[c.leader_broker_id] = asyncio.Queue()
            self._spawn(self._commit_sender(c.leader_broker_id, q))
        q.put_nowait(c)

    async def _commit_sender(self, leader: int, q: asyncio.Queue[SendCommit]) -> None:
        """Send the commits for ``leader`` in release order, pipelined: each
        is written to the connection (or appended locally) before the next
        starts, and answered when its leader answers."""
        slots = asyncio.Semaphore(COMMITS_IN_FLIGHT_MAX)
        while True:
            c = await q.get()
            await slots.acquire()
            start = time.monotonic()
            if leader == self.broker_id:
                self.stats.commits_local += 1
                try:
                    responses, wait = await self._commit_local(
                        c.key, self.broker_id, c.file_size, list(c.requests), c.acks_all
                    )
                except StoreError as e:
                    self._commit_finished(c, leader, start, None, Errors.KAFKA_STORAGE_ERROR, str(e))
                    slots.release()
                    continue
                if wait is None:
                    self._commit_finished(c, leader, start, responses)
                    slots.release()
                else:
                    self._spawn(self._commit_wait_local(c, start, wait, slots))
                continue
            self.stats.commits_remote += 1
            try:
                # Connecting counts against the commit's timeout: a leader
                # behind a black hole must not hold this queue for the RPC
                # layer's default handshake timeout.
                client = await self._client(leader, timeout_ms=self.config.commit_rpc_timeout_ms)
            except (RpcConnectionError, RpcTimeoutError, OSError) as e:
                # Regression (issue 14, found by the deterministic simulation):
                # a handshake timeout escaped here and killed this leader's
                # sender for good; every later commit to it, and the produce
                # requests behind them, waited for ever.
                error = Errors.REQUEST_TIMED_OUT if isinstance(e, RpcTimeoutError) else Errors.NETWORK_EXCEPTION
                self._commit_finished(c, leader, start, None, error, f"commit to broker {leader}: {e}")
                slots.release()
                continue
            # The task writes its frame in its first step, before this loop
            # takes the next commit: frames leave in release order.
            self._spawn(self._commit_remote(c, leader, client, start, slots))
            await asyncio.sleep(0)

    async def _commit_wait_local(
        self, c: SendCommit, start: float, wait: Awaitable[list[CommitBatchResponse]], slots: asyncio.Semaphore
    ) -> None:
        try:
            self._commit_finished(c, self.broker_id, start, await wait)
        finally:
            slots.release()

    async def _commit_remote(
        self, c: SendCommit, leader: int, client: RpcClient, start: float, slots: asyncio.Semaphore
    ) -> None:
        responses: list[CommitBatchResponse] | None = None
        error, message = Errors.REQUEST_TIMED_OUT, None
        try:
            body = await client.call(
                "commit",
                enc_commit(c.key, self.broker_id, c.file_size, c.requests, c.acks_all),
                timeout_ms=self.config.commit_rpc_timeout_ms,
            )
            responses = dec_commit_responses(body, c.requests)
        except RpcTimeoutError as e:
            error, message = Errors.REQUEST_TIMED_OUT, f"commit to broker {leader}: {e}"
        except (RpcConnectionError, OSError) as e:
            error, message = Errors.NETWORK_EXCEPTION, f"commit to broker {leader}: {e}"
            await self._drop_client(leader)
        except (RpcRemoteError, WireError) as e:
            error, message = Errors.KAFKA_STORAGE_ERROR, f"commit to broker {leader}: {e}"
        finally:
            slots.release()
        self._commit_finished(c, leader, start, responses, error, message)

    def _commit_finished(
        self,
        c: SendCommit,
        leader: int,
        start: float,
        responses: list[CommitBatchResponse] | None,
        error: Errors = Errors.REQUEST_TIMED_OUT,
        message: str | None = None,
    ) -> None:
        if responses is None:
            self.stats.commit_errors += 1
            self.metrics.commit_errors.inc()
            log.warning("commit failed key=%s leader=%d: %s", c.key, leader, message)
        self.stats.commit_ms.append((time.monotonic() - start) * 1000)
        self.metrics.commit_seconds.observe(time.monotonic() - start)
        self._perform(self.pipeline.commit_done(c.segment_id, leader, responses, self._clock(), error, message))

    async def _commit_local(
        self,
        key: str,
        uploader: int,
        file_size: int,
        requests: list[CommitBatchRequest],
        acks_all: Sequence[bool] = (),
    ) -> tuple[list[CommitBatchResponse], Awaitable[list[CommitBatchResponse]] | None]:
        """Commit to this broker's own store, refusing partitions it does not
        lead; acks=all batches come with an awaitable of the final answers."""
        try:
            responses, wait = await self.replicas.commit(
                key,
                uploader,
                file_size,
                requests,
                acks_all,
                max(1, self.config.commit_rpc_timeout_ms - ACKS_ALL_TIMEOUT_MARGIN_MS),
            )
        except StoreError:
            self._store_failed()
            raise
        # Wake long-polling fetches of followers' consumers and ours.
        self._wake_fetches()
        return responses, wait

    def _store_failed(self) -> None:
        """A commit's I/O failed and the store fail-stopped (Kafka takes the
        log directory offline): reopen it from disk in the background, once;
        until then every commit answers KAFKA_STORAGE_ERROR (retriable)."""
        if self.store.failed is None or self._store_reopening or self._stopping:
            return
        self._store_reopening = True
        log.error("broker %d: metadata store failed (%r): reopening it", self.broker_id, self.store.failed)
        self._spawn(self._reopen_store())

    async def _reopen_store(self) -> None:
        try:
            await asyncio.to_thread(self.store.reopen)
            self.metrics.store_reopens.inc()
            log.warning("broker %d: metadata store reopened from disk", self.broker_id)
            self._wake_fetches()
        finally:
            self._store_reopening = False

    async def _client(self, broker_id: int, *, timeout_ms: int | None = None) -> RpcClient:
        """The pooled connection to ``broker_id``, made (handshake included)
        within ``timeout_ms`` (the RPC layer's default when None)."""
        client = self._clients.get(broker_id)
        if client is not None:
            return client
        lock = self._client_locks.setdefault(broker_id, asyncio.Lock())
        async with lock:
            client = self._clients.get(broker_id)
            if client is None:
                info = self.metadata.broker(broker_id)
                if info is None or not info.port:
                    raise RpcConnectionError(f"broker {broker_id}: address unknown")
                client = await RpcClient.connect(
                    info.host,
                    info.port,
                    secret=self.config.secret,
                    ssl=self.config.client_ssl,
                    cluster_id=self.cluster_id,
                    timeout_ms=RPC_TIMEOUT_MS_DEFAULT if timeout_ms is None else timeout_ms,
                )
                self._clients[broker_id] = client
            return client

    async def _drop_client(self, broker_id: int) -> None:
        client = self._clients.pop(broker_id, None)
        if client is not None:
            await client.close()

    # ------------------------------------------------------------- handlers

    async def _handle_produce(self, body: Any) -> Any:
        try:
            m = _as_map(body, "produce")
            items = dec_partition_items(
                m, "batches", "produce", (bytes,), "[topic_id, partition, batch bytes]", PRODUCE_BATCHES_MAX
            )
            batches = [(tp, rest[0]) for tp, rest in items]
            timeout = m.get("timeout_ms", PRODUCE_TIMEOUT_MS_DEFAULT)
            if type(timeout) is not int or timeout <= 0:
                raise WireError("produce.timeout_ms: a positive integer")
            acks = m.get("acks", -1)
            if acks not in (0, 1, -1) or type(acks) is not int:
                raise WireError(f"produce.acks: 0, 1 or -1, got {acks!r}")
        except WireError as e:
            raise RpcError(RpcErrorCode.BAD_REQUEST, str(e)) from e
        results = await self.produce(batches, acks=acks, timeout_ms=timeout)
        return {
            "results": [
                [int(r.error), r.base_offset, r.log_append_time, r.log_start_offset, r.error_message] for r in results
            ]
        }

    async def _handle_commit(self, body: Any) -> Any:
        try:
            key, uploader, size, reqs, acks_all = dec_commit(body)
        except WireError as e:
            raise RpcError(RpcErrorCode.BAD_REQUEST, str(e)) from e
        self.stats.commits_served += 1
        self.metrics.commits_served.inc()
        responses, wait = await self._commit_local(key, uploader, size, reqs, acks_all)
        if wait is None:
            return enc_commit_responses(responses)
        # Appended in order; the answer waits for replication outside the
        # connection's ordered queue, so later commits are appended meanwhile.
        return Deferred(_encoded(wait))

    async def _handle_fetch(self, body: Any) -> Any:
        try:
            m = _as_map(body, "fetch")
            parts = dec_partition_items(
                m, "partitions", "fetch", (int, int), "[topic_id, partition, offset, max_bytes]", PARTITIONS_MAX
            )
            reqs = [FindBatchRequest(tp, offset, max(1, limit)) for tp, (offset, limit) in parts]
            max_wait = min(int(m.get("max_wait_ms", 0)), FETCH_MAX_WAIT_MS_MAX)
            min_bytes = int(m.get("min_bytes", 1))
            max_bytes = max(1, int(m.get("max_bytes", FETCH_MAX_BYTES_DEFAULT)))
        except (WireError, TypeError, ValueError, OverflowError) as e:  # int(inf) is an OverflowError
            raise RpcError(RpcErrorCode.BAD_REQUEST, str(e)) from e
        return await self.fetch(reqs, max_wait_ms=max_wait, min_bytes=min_bytes, max_bytes=max_bytes)

    async def fetch(
        self, reqs: list[FindBatchRequest], *, max_wait_ms: int, min_bytes: int, max_bytes: int
    ) -> dict[str, Any]:
        self.stats.fetches += 1
        self.metrics.fetches.inc()
        # Any replica serves fetches, up to its HWM (KIP-392 style).
        led = [r for r in reqs if self.replicas.serves(r.topic_id_partition)]
        deadline = time.monotonic() + max_wait_ms / 1000
        while True:
            waiter = self._new_data
            found = await asyncio.to_thread(self.store.find_batches, led, max_bytes) if led else []
            total = sum(b.metadata.byte_size for f in found for b in f.batches)
            left = deadline - time.monotonic()
            # Nothing led here: no commit of ours can help, answer now.
            if not led or total >= min_bytes or left <= 0 or any(f.errors != Errors.NONE for f in found):
                break
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(left):
                    await waiter.wait()
        by_tp: dict[TopicIdPartition, list[BatchInfo]] = {}
        for req, f in zip(led, found, strict=True):
            if f.errors == Errors.NONE:
                by_tp[req.topic_id_partition] = list(f.batches)
        reads = plan_reads([b for bs in by_tp.values() for b in bs])
        got = await asyncio.gather(*(self._read(r.key, r.offset, r.length) for r in reads))
        data = assemble(by_tp, {r.key: g for r, g in zip(reads, got, strict=True)})
        for d in data:
            if d.error == Errors.CORRUPT_MESSAGE:
                # Not retriable: the bytes will not change.  Counted and
                # logged, as Kafka's broker logs a corrupt log segment.
                self.metrics.fetch_corrupt.inc()
                log.warning("fetch of %s refused: %s", d.topic_id_partition, d.error_message)
        assembled = {d.topic_id_partition: d for d in data}
        found_by_tp = {req.topic_id_partition: f for req, f in zip(led, found, strict=True)}
        out = []
        for r in reqs:
            tp = r.topic_id_partition
            answer = found_by_tp.get(tp)
            if answer is None:
                out.append([int(Errors.NOT_LEADER_OR_FOLLOWER), -1, -1, b"", "no replica here"])
            elif answer.errors != Errors.NONE:
                out.append(
                    [int(answer.errors), answer.high_watermark, answer.log_start_offset, b"", answer.error_message]
                )
            else:
                d = assembled[tp]
                out.append([int(d.error), answer.high_watermark, answer.log_start_offset, d.records, d.error_message])
        return {"partitions": out}

    def read_replica_for(self, tp: TopicIdPartition, az: str | None) -> int | None:
        """The broker a fetch of ``tp`` should go to: this one when it holds
        a replica, else a replica in ``az`` (this broker's AZ by default),
        else the leader; None when the partition has no leader."""
        if self.replicas.serves(tp):
            return self.broker_id
        info = self.metadata.partition(tp)
        if info is None or info.leader < 0:
            return None
        want = self.config.az if az is None else az
        for r in info.isr:
            b = self.metadata.broker(r)
            if b is not None and b.az == want:
                return r
        return info.leader

    async def fetch_routed(
        self, reqs: list[FindBatchRequest], *, max_wait_ms: int, min_bytes: int, max_bytes: int, az: str | None = None
    ) -> list[list[Any]]:
        """:meth:`fetch` for any partition: those this broker holds a replica
        of are read here, the others are fetched from a replica in ``az``
        (or the leader) over the broker RPC, all with the same long-poll.
        One answer per request: [error, hwm, log start, records, message]."""
        by_broker: dict[int, list[int]] = {}
        out: list[list[Any]] = [[int(Errors.NOT_LEADER_OR_FOLLOWER), -1, -1, b"", "no leader"] for _ in reqs]
        for i, r in enumerate(reqs):
            target = self.read_replica_for(r.topic_id_partition, az)
            if target is not None:
                by_broker.setdefault(target, []).append(i)
        calls = [
            (b, idx[k : k + PARTITIONS_MAX]) for b, idx in by_broker.items() for k in range(0, len(idx), PARTITIONS_MAX)
        ]

        async def one(target: int, idx: list[int]) -> None:
            sub = [reqs[i] for i in idx]
            try:
                if target == self.broker_id:
                    answer = await self.fetch(sub, max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=max_bytes)
                    parts = answer["partitions"]
                else:
                    client = await self._client(target, timeout_ms=RPC_TIMEOUT_MS_DEFAULT)
                    body = {
                        "partitions": [
                            [r.topic_id_partition.topic_id.bytes, r.topic_id_partition.partition, r.offset,
                             r.max_partition_fetch_bytes]
                            for r in sub
                        ],
                        "max_wait_ms": max_wait_ms,
                        "min_bytes": min_bytes,
                        "max_bytes": max_bytes,
                    }  # fmt: skip
                    answer = await client.call("fetch", body, timeout_ms=max_wait_ms + RPC_TIMEOUT_MS_DEFAULT)
                    parts = _checked_fetch_answer(answer, len(sub))
            except (RpcError, RpcConnectionError, RpcTimeoutError, OSError, WireError) as e:
                if isinstance(e, RpcConnectionError | OSError):
                    await self._drop_client(target)
                for i in idx:
                    out[i] = [int(Errors.NOT_LEADER_OR_FOLLOWER), -1, -1, b"", f"fetch via broker {target}: {e}"]
                return
            for i, p in zip(idx, parts, strict=True):
                out[i] = list(p)

        await asyncio.gather(*(one(t, idx) for t, idx in calls))
        return out

    async def on_leaders(
        self, method: str, items: list[tuple[TopicIdPartition, list[Any]]], failed: list[Any]
    ) -> list[list[Any]]:
        """Ask each partition's leader (this broker's own handler when it
        leads, else the broker RPC) ``method`` with body
        ``{"partitions": [[topic_id, partition, *rest], ...]}``; one answer
        row per item, checked against ``RESPONSE_SCHEMAS[method]``, or
        ``failed`` for the items whose leader is unknown or unreachable."""
        out: list[list[Any]] = [list(failed) for _ in items]
        by_leader: dict[int, list[int]] = {}
        for i, (tp, _) in enumerate(items):
            leader = self.metadata.leader_of(tp)
            if leader is not None and leader >= 0:
                by_leader.setdefault(leader, []).append(i)
        # One RPC carries at most PARTITIONS_MAX partitions (the schema's limit).
        calls = [
            (b, idx[k : k + PARTITIONS_MAX]) for b, idx in by_leader.items() for k in range(0, len(idx), PARTITIONS_MAX)
        ]

        async def one(leader: int, idx: list[int]) -> None:
            body = {"partitions": [[items[i][0].topic_id.bytes, items[i][0].partition, *items[i][1]] for i in idx]}
            try:
                if leader == self.broker_id:
                    answer = await self._leader_handlers[method](body)
                else:
                    client = await self._client(leader, timeout_ms=RPC_TIMEOUT_MS_DEFAULT)
                    answer = await client.call(method, body, timeout_ms=RPC_TIMEOUT_MS_DEFAULT)
                RESPONSE_SCHEMAS[method].check(answer, f"{method} answer")
                parts = answer["partitions"]
                if len(parts) != len(idx):
                    raise WireError(f"{method} answer: {len(parts)} partitions for {len(idx)} asked")
                for i, row in zip(idx, parts, strict=True):
                    out[i] = list(row)
            except (RpcError, RpcConnectionError, RpcTimeoutError, OSError, WireError) as e:
                if isinstance(e, RpcConnectionError | OSError):
                    await self._drop_client(leader)
                log.info("%s via broker %d failed: %s", method, leader, e)

        await asyncio.gather(*(one(t, idx) for t, idx in calls))
        return out

    async def list_offsets_routed(self, reqs: list[ListOffsetsRequest]) -> list[tuple[Errors, int, int]]:
        """ListOffsets for any partition, answered by its leader (here, or
        over the broker RPC): (error, timestamp, offset) per request."""
        rows = await self.on_leaders(
            "list_offsets",
            [(r.topic_id_partition, [r.timestamp]) for r in reqs],
            [int(Errors.NOT_LEADER_OR_FOLLOWER), -1, -1],
        )
        return [(_error(err), ts, off) for err, ts, off in rows]

    async def _handle_delete_records(self, body: Any) -> Any:
        """DeleteRecords on the partitions this broker leads (Kafka's leader
        does it; followers learn the log start from replication)."""
        try:
            m = _as_map(body, "delete_records")
            items = dec_partition_items(
                m, "partitions", "delete_records", (int,), "[topic_id, partition, offset]", PARTITIONS_MAX
            )
        except WireError as e:
            raise RpcError(RpcErrorCode.BAD_REQUEST, str(e)) from e
        led = [i for i, (tp, _) in enumerate(items) if self.replicas.is_leader(tp)]
        out: list[list[int]] = [[int(Errors.NOT_LEADER_OR_FOLLOWER), -1] for _ in items]
        if led:
            reqs = [DeleteRecordsRequest(items[i][0], items[i][1][0]) for i in led]
            try:
                answers = await asyncio.to_thread(self.store.delete_records, reqs)
            except StoreError as e:
                log.warning("delete_records failed on broker %d: %s", self.broker_id, e)
                answers = [DeleteRecordsResponse(Errors.KAFKA_STORAGE_ERROR, -1) for _ in reqs]
            for i, a in zip(led, answers, strict=True):
                out[i] = [int(a.errors), a.low_watermark]
            self._wake_fetches()
        return {"partitions": out}

    async def _handle_offset_for_leader_epoch(self, body: Any) -> Any:
        """Kafka's OffsetForLeaderEpoch, answered by the leader: the end
        offset of the largest epoch <= the one asked, from its epoch cache;
        FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH for a current leader epoch
        older / newer than this leader's."""
        try:
            m = _as_map(body, "offset_for_leader_epoch")
            items = dec_partition_items(
                m, "partitions", "offset_for_leader_epoch", (int, int),
                "[topic_id, partition, current_leader_epoch, leader_epoch]", PARTITIONS_MAX,
            )  # fmt: skip
        except WireError as e:
            raise RpcError(RpcErrorCode.BAD_REQUEST, str(e)) from e
        out: list[list[int]] = []
        for tp, (current, asked) in items:
            epoch = self.replicas.leader_epoch(tp)
            if epoch is None:
                out.append([int(Errors.NOT_LEADER_OR_FOLLOWER), -1, -1])
            elif current >= 0 and current != epoch:
                err = Errors.FENCED_LEADER_EPOCH if current < epoch else Errors.UNKNOWN_LEADER_EPOCH
                out.append([int(err), -1, -1])
            else:
                end = end_offset_for_epoch(self.store.leader_epoch_cache(tp), asked, self.store.log_end_offset(tp))
                out.append([0, end.leader_epoch, end.end_offset])
        return {"partitions": out}

    async def _read(self, key: str, offset: int, length: int) -> tuple[int, bytes] | BaseException:
        cached = self.cache.get(key, offset, length)
        if cached is not None:
            self.metrics.fetch_cache_hits.inc()
            return offset, cached
        self.stats.fetch_gets += 1
        self.metrics.fetch_gets.inc()
        try:
            data = await asyncio.to_thread(self.objects.get_range, key, offset, length)
        except Exception as e:  # answered as a retriable error for the partitions that needed it
            return e
        self.cache.put(key, offset, data)
        self.metrics.cache_bytes.set(self.cache.bytes)
        return offset, data

    # ------------------------------------------------------------- walmgr

    def _notify_walmgr(self, up: Upload) -> None:
        if not self.config.walmgr_address:
            return
        if len(self._walmgr_queue) == self._walmgr_queue.maxlen:
            self.walmgr_notifications_dropped += 1  # the oldest goes; a scan finds it
        try:
            created_ms = parse_wal_key(up.key).created_ms
        except WalKeyError:
            return
        self._walmgr_queue.append((up.key, len(up.data), created_ms, self.broker_id, up.partitions))
        self._walmgr_wake.set()

    async def _walmgr_notifier(self) -> None:
        """Send queued upload notifications to walmgr in batches; on failure
        drop the batch and back off (walmgr's bucket scans are the safety net)."""
        client: RpcClient | None = None
        host, _, port = self.config.walmgr_address.rpartition(":")
        while not self._stopping:
            await self._walmgr_wake.wait()
            self._walmgr_wake.clear()
            while self._walmgr_queue:
                n = min(len(self._walmgr_queue), WALMGR_NOTIFY_BATCH_MAX)
                batch = [self._walmgr_queue.popleft() for _ in range(n)]
                try:
                    if client is None or not client.connected:
                        client = await RpcClient.connect(
                            host,
                            int(port),
                            secret=self.config.secret,
                            ssl=self.config.client_ssl,
                            cluster_id=self.cluster_id,
                        )
                    await client.call("wal_uploaded", enc_wal_uploaded(batch), timeout_ms=10_000)
                    self.walmgr_notifications_sent += n
                except (RpcError, RpcConnectionError, RpcTimeoutError, OSError, ValueError) as e:
                    self.walmgr_notifications_dropped += n
                    log.debug("walmgr notification failed (%d objects dropped): %s", n, e)
                    if client is not None:
                        await client.close()
                        client = None
                    await asyncio.sleep(WALMGR_NOTIFY_BACKOFF_MS / 1000)
        if client is not None:
            await client.close()

    async def _handle_referenced_files(self, body: Any) -> Any:
        """walmgr's question: does this replica's log (leader or ISR
        follower), at the leader epoch walmgr knows, still reference these
        objects?  Entries above the HWM and commits not yet durable count
        (``MetadataStore.referenced_files``).  Not a replica of the partition
        at that epoch: NOT_LEADER, and walmgr keeps the file."""
        try:
            checks = dec_reference_checks(body, REFERENCE_CHECKS_MAX, REPLICAS_ASKED_MAX)
        except WireError as e:
            raise RpcError(RpcErrorCode.BAD_REQUEST, str(e)) from e
        # The role is read before the store: a replica at the epoch asked
        # then, and the store's references after, is what the gate needs
        # (a reference cannot appear for an object past the commit deadline).
        roles = [Verdict.NOT_LEADER if self.replicas.replica_epoch(tp) != epoch else None for _, tp, epoch, _ in checks]
        referenced = await asyncio.to_thread(self.store.referenced_files, {c[0] for c in checks})
        # The ISR after the store: a member that joined before this read is
        # seen here; one that joins after has its log start at or past the
        # leader's of that moment (it holds none of the references the
        # leader had dropped).
        verdicts = [
            int(role)
            if role is not None
            else int(Verdict.ISR_CHANGED)
            if not self.replicas.isr_within(tp, asked)
            else int(Verdict.REFERENCED if key in referenced else Verdict.NOT_REFERENCED)
            for (key, tp, _, asked), role in zip(checks, roles, strict=True)
        ]
        return {"verdicts": verdicts}

    async def _handle_metadata(self, body: Any) -> Any:
        az = body.get("az") if isinstance(body, dict) else None
        brokers = [[b.broker_id, b.az, b.host, b.port] for b in self.metadata.brokers()]
        topics = []
        for t in self.metadata.topics():
            parts = []
            for p, leader in enumerate(t.leaders):
                # -1: no leader now (the client waits and asks again).
                if leader < 0 or self.metadata.broker(leader) is None:
                    target = -1
                elif isinstance(az, str):
                    target = self.metadata.representative(leader, az)
                else:
                    target = leader
                parts.append([p, leader, target])
            topics.append([t.name, t.topic_id.bytes, parts])
        return {"brokers": brokers, "topics": topics}

    async def _handle_list_offsets(self, body: Any) -> Any:
        try:
            m = _as_map(body, "list_offsets")
            items = dec_partition_items(
                m, "partitions", "list_offsets", (int,), "[topic_id, partition, timestamp]", PARTITIONS_MAX
            )
            reqs = [ListOffsetsRequest(tp, rest[0]) for tp, rest in items]
        except WireError as e:
            raise RpcError(RpcErrorCode.BAD_REQUEST, str(e)) from e
        led = [i for i, r in enumerate(reqs) if self.replicas.is_leader(r.topic_id_partition)]
        out: list[list[int]] = [[int(Errors.NOT_LEADER_OR_FOLLOWER), -1, -1] for _ in reqs]
        if led:
            answers = await asyncio.to_thread(self.store.list_offsets, [reqs[i] for i in led])
            for i, a in zip(led, answers, strict=True):
                out[i] = [int(a.errors), a.timestamp, a.offset]
        return {"partitions": out}

    async def _handle_init_producer_id(self, body: Any) -> Any:
        # Kafka answers InitProducerId with COORDINATOR_NOT_AVAILABLE (retriable)
        # while it cannot get ids.
        pid = await self.init_producer_id()
        if pid is None:
            return {"error": int(Errors.COORDINATOR_NOT_AVAILABLE), "producer_id": -1, "producer_epoch": -1}
        return {"error": 0, "producer_id": pid, "producer_epoch": 0}

    async def init_producer_id(self, wait_ms: int = 5_000) -> int | None:
        """A producer id from this broker's block (KIP-730), prefetching the
        next block at 90%; None if the controller gave none within
        ``wait_ms``.  A metadata source without a controller gives no blocks:
        then a random 62-bit id (design.md)."""
        deadline = time.monotonic() + wait_ms / 1000
        while True:
            if self.producer_ids.wants_block():
                self.producer_ids.block_requested()
                self._spawn(self._fetch_producer_ids())
            pid = self.producer_ids.next_id()
            if pid is not None:
                return pid
            if self._no_producer_id_blocks:
                return secrets.randbits(62)
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            self._producer_ids_ready.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(left):
                    await self._producer_ids_ready.wait()

    async def _fetch_producer_ids(self) -> None:
        try:
            block = await self.metadata.allocate_producer_ids(self.broker_id)
        except Exception:  # a MetadataSource must not raise; keep serving
            log.exception("allocate_producer_ids raised")
            block = Errors.UNKNOWN_SERVER_ERROR
        if block is None:
            # This source has no controller: random ids from now on.
            self._no_producer_id_blocks = True
            self.producer_ids.block_failed()
        elif isinstance(block, Errors):
            # Retriable (controller unreachable): the next InitProducerId asks again.
            log.info("no producer-id block for broker %d: %s", self.broker_id, block.name)
            self.producer_ids.block_failed()
        else:
            self.producer_ids.add_block(block)
        self._producer_ids_ready.set()

    # ------------------------------------------- the Kafka front end's port

    # What partlog.kafka_front.port.BrokerPort asks beyond produce, fetch,
    # fetch_routed, list_offsets_routed, on_leaders and init_producer_id.

    @property
    def az(self) -> str:
        return self.config.az

    @property
    def min_insync_replicas(self) -> int:
        return self.config.replication.min_insync_replicas

    def topic_config(self, topic_id: uuid.UUID) -> TopicConfig:
        return self.store.topic_config(topic_id)

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
        return self._new_data


async def _encoded(wait: Awaitable[list[CommitBatchResponse]]) -> Any:
    return enc_commit_responses(await wait)


def _chunked(by_broker: dict[int, list[int]]) -> list[tuple[int, list[int]]]:
    """(broker, indexes) calls: one RPC carries at most PARTITIONS_MAX
    partitions (its schema's limit), so a larger share is split."""
    return [
        (b, idx[k : k + PARTITIONS_MAX]) for b, idx in by_broker.items() for k in range(0, len(idx), PARTITIONS_MAX)
    ]


def _checked_fetch_answer(body: Any, n: int) -> list[Any]:
    """Another broker's fetch answer, checked (WireError): what a broken
    or hostile peer sends fails only the partitions asked of it."""
    RESPONSE_SCHEMAS["fetch"].check(body, "fetch answer")
    parts: list[Any] = body["partitions"]
    if len(parts) != n:
        raise WireError(f"fetch answer: {len(parts)} partitions for {n} asked")
    return parts


def _error(code: Any) -> Errors:
    """A peer's error code; one Kafka does not define is UNKNOWN_SERVER_ERROR."""
    try:
        return Errors(int(code))
    except (ValueError, TypeError):
        return Errors.UNKNOWN_SERVER_ERROR


def _as_map(body: Any, what: str) -> dict[str, Any]:
    if type(body) is not dict:
        raise WireError(f"{what}: expected a map, got {type(body).__name__}")
    return body


async def start_brokers(
    configs: Sequence[BrokerConfig], metadata: StaticMetadata, objects: ObjectStore
) -> tuple[list[Broker], StaticMetadata]:
    """Start in-process brokers (ports 0: the OS picks), then hand all of
    them the metadata with the ports filled in.  If one fails to start, the
    started ones are stopped again."""
    brokers = [Broker(c, metadata, objects) for c in configs]
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


__all__ = ["Broker", "BrokerConfig", "BrokerStats", "start_brokers"]
