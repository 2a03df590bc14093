"""Cluster metadata on etcd (issue 19): :class:`EtcdMetadata`, a
:class:`~partlog.controller.cluster_meta.MetadataSource` whose state lives in
an etcd v3 cluster under a key prefix (layout: :mod:`partlog.controller.etcd_layout`).

One object serves every role, as :class:`~partlog.controller.client.ControllerMetadata`
does for the embedded controller:

* **A view** (every instance): one range read of the prefix, then a watch
  from the revision after it; each change is applied to the view, and the
  listeners run once per burst of events.  No full snapshot is read per
  change; one is read again only when the watch's revision was compacted.
* **A broker session** (with ``broker``): a lease of the session timeout,
  kept alive every third of it, and ``brokers/<id>`` put under it.  The put's
  revision is the broker epoch.  A lease that expired (etcd did not hear
  from us for a session) fences the broker: the next registration is a new
  incarnation with a new epoch, and the listeners run (the broker re-derives
  its roles, as after a fencing by the embedded controller).
* **The acting controller** (brokers campaign by default): etcd's election
  recipe over the session lease (a candidate key per lease, the lowest
  create revision leads), then :func:`partlog.controller.etcd_controller.plan`
  after every change of the view, each decision written by one transaction
  guarded by the candidate key (a deposed controller's writes fail) and by
  the partition's mod revision (a stale decision fails).
* **Direct transactions** for what needs no single actor: AlterPartition
  (compare the partition's revision and the sender's broker epoch),
  producer-id blocks (compare-and-swap on a counter, KIP-730's scheme),
  topic creation and deletion.

When etcd cannot be reached the view stays as it was, so brokers keep
serving with their last view, as Kafka brokers do; calls that need the
quorum answer retriable errors (``COORDINATOR_NOT_AVAILABLE``,
``REQUEST_TIMED_OUT``) and every loop retries with capped backoff, logging
and counting each failure (``failures``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import socket
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import aetcd
import aetcd.exceptions
import aetcd.utils
import grpc
from aetcd.rtypes import EventKind

from partlog.controller.cluster_meta import (
    NO_LEADER,
    BrokerInfo,
    ClusterMismatchError,
    MetadataError,
    PartitionInfo,
    TopicInfo,
    check_alter_partition,
    check_same_cluster,
)
from partlog.controller.etcd_controller import PartitionChange, Plan, plan
from partlog.controller.etcd_layout import (
    KV,
    EtcdTarget,
    EtcdView,
    Keys,
    dec_counter,
    dec_uuid,
    enc_broker,
    enc_part,
    enc_topic,
    pack_value,
    parse_etcd_url,
)
from partlog.controller.model import (
    BROKER_SESSION_TIMEOUT_MS_DEFAULT,
    DELETED_TOPICS_MAX,
    LEADER_IMBALANCE_CHECK_INTERVAL_MS_DEFAULT,
    REASON_ALTER_PARTITION,
)
from partlog.controller.rules import assign_replicas, bump, valid_topic_name
from partlog.controller.view import SnapshotView
from partlog.kafka.errors import Errors
from partlog.kafka.producer_ids import PRODUCER_ID_BLOCK_SIZE, PRODUCER_ID_MAX, ProducerIdBlock
from partlog.kafka.records import TopicIdPartition
from partlog.limits import PARTITIONS_PER_CLUSTER_MAX, PARTITIONS_PER_TOPIC_MAX

__all__ = ["EtcdMetadata", "EtcdUnavailableError"]

log = logging.getLogger(__name__)

REQUEST_TIMEOUT_MS_DEFAULT = 5_000
RETRY_BACKOFF_MS_DEFAULT = 100
RETRY_BACKOFF_MAX_MS_DEFAULT = 1_000
# etcd grants no lease shorter than 1.5 election timeouts (2 s with its
# defaults), and lease TTLs are whole seconds.
SESSION_TIMEOUT_MS_MIN = 2_000
# Compare-and-swap attempts on the producer-id counter before answering a
# retriable error (each loses only to another broker's success).
PRODUCER_ID_CAS_ATTEMPTS_MAX = 32
# How often the acting controller re-plans without a change (preferred
# leaders fall due, a conflict to retry).
CONTROLLER_TICK_MS = 1_000
# A registration waiting for another session's lease logs every this many attempts.
DUPLICATE_LOG_EVERY = 30
# Partition transactions the acting controller keeps in flight in one pass.
CONTROLLER_TXNS_IN_FLIGHT_MAX = 64
# The whole prefix is read in one answer (the view is bounded by
# PARTITIONS_PER_CLUSTER_MAX partitions, ~40 bytes each): gRPC's 4 MiB default is too small.
GRPC_MESSAGE_BYTES_MAX = 256 * 1024 * 1024
# gRPC reconnect backoff bounds (see _new_client).
GRPC_RECONNECT_BACKOFF_MS_MIN = 100
GRPC_RECONNECT_BACKOFF_MS_MAX = 500

# What a call that did not reach etcd (or got no usable answer) raises.
_ETCD_ERRORS: tuple[type[BaseException], ...] = (aetcd.exceptions.ClientError, grpc.RpcError, OSError, TimeoutError)


class EtcdUnavailableError(ConnectionError):
    """etcd gave no usable answer."""


def _fresh_counter(value: bytes, revision: int, floor: int) -> tuple[int, int]:
    """The producer-id counter as etcd answered a read issued when ``floor``
    was known (linearizable, so at least as new): below it, the counter went
    back (a restore, a hostile writer) and blocks would be handed out twice."""
    first = dec_counter(value, "producer_ids")
    if first < floor:
        raise MetadataError(f"producer_ids is {first}, below {floor} already handed out")
    return first, revision


def _revision(resp: Sequence[Any], i: int = 0) -> int:
    """The revision a transaction's ``i``-th put was written at."""
    return int(resp[i].response_put.header.revision)


async def _grpc_target(endpoints: Sequence[tuple[str, int]]) -> str:
    """One gRPC target naming every member's address, so the channel fails
    over (round robin) when a member dies.  Names are resolved now (and
    again at each reconnect)."""
    loop = asyncio.get_running_loop()
    v4: list[str] = []
    v6: list[str] = []
    for host, port in endpoints:
        for family, *_, addr in await loop.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM):
            if family == socket.AF_INET:
                v4.append(f"{addr[0]}:{port}")
            elif family == socket.AF_INET6:
                v6.append(f"[{addr[0]}]:{port}")
    if v4:
        return "ipv4:" + ",".join(dict.fromkeys(v4))
    if v6:
        return "ipv6:" + ",".join(dict.fromkeys(v6))
    raise OSError(f"no address for {endpoints}")


def _new_client(target: str, timeout_s: float) -> Any:
    """aetcd's client on a multi-address gRPC target (aetcd takes one host
    and port; the target is built before)."""
    host, _, port = target.rpartition(":")
    return aetcd.Client(
        host=host,
        port=int(port),
        timeout=timeout_s,
        options={
            "grpc.lb_policy_name": "round_robin",
            "grpc.max_receive_message_length": GRPC_MESSAGE_BYTES_MAX,
            # A member gone without a FIN is noticed within seconds.
            "grpc.keepalive_time_ms": 5_000,
            "grpc.keepalive_timeout_ms": 5_000,
            # gRPC's reconnect backoff grows to 2 minutes by default: after
            # an outage the channel would come back after the leases (a
            # session timeout) expired.  Capped well inside any session.
            "grpc.initial_reconnect_backoff_ms": GRPC_RECONNECT_BACKOFF_MS_MIN,
            "grpc.min_reconnect_backoff_ms": GRPC_RECONNECT_BACKOFF_MS_MIN,
            "grpc.max_reconnect_backoff_ms": GRPC_RECONNECT_BACKOFF_MS_MAX,
        },
    )


class EtcdMetadata(SnapshotView):
    """Cluster metadata in etcd at ``target`` (an ``etcd://`` URL or an
    :class:`EtcdTarget`).

    ``broker``: this broker (registers, keeps a session, campaigns for the
    controller role unless ``campaign`` is False), or None for a view only
    (clients, walmgr, the topics tool).  ``cluster_id``: the cluster this
    side belongs to (None: adopt etcd's).  ``create_cluster``: make the
    cluster id under the prefix when there is none (brokers do; a view never
    does, so a mistyped prefix is an error, not a new empty cluster).

    ``await connect()`` returns the cluster id; ``await start()`` returns
    once registered and holding a first view.  Both retry while etcd is
    unreachable, for at most ``timeout_ms`` (then
    :class:`ControllerUnavailableError`); a prefix of another cluster, or of
    none, raises :class:`ClusterMismatchError` at once."""

    def __init__(
        self,
        target: EtcdTarget | str,
        broker: BrokerInfo | None = None,
        *,
        cluster_id: uuid.UUID | None = None,
        create_cluster: bool = False,
        campaign: bool | None = None,
        session_timeout_ms: int = BROKER_SESSION_TIMEOUT_MS_DEFAULT,
        request_timeout_ms: int = REQUEST_TIMEOUT_MS_DEFAULT,
        retry_backoff_ms: int = RETRY_BACKOFF_MS_DEFAULT,
        retry_backoff_max_ms: int = RETRY_BACKOFF_MAX_MS_DEFAULT,
        unclean_leader_election_enable: bool = False,
        leader_imbalance_check_interval_ms: int = LEADER_IMBALANCE_CHECK_INTERVAL_MS_DEFAULT,
        producer_id_block_size: int = PRODUCER_ID_BLOCK_SIZE,
    ) -> None:
        super().__init__(cluster_id)
        self.target = target if isinstance(target, EtcdTarget) else parse_etcd_url(target)
        if session_timeout_ms < SESSION_TIMEOUT_MS_MIN:
            raise ValueError(
                f"EtcdMetadata session_timeout_ms must be >= {SESSION_TIMEOUT_MS_MIN}, got {session_timeout_ms}"
            )
        for name, v in (
            ("request_timeout_ms", request_timeout_ms),
            ("retry_backoff_ms", retry_backoff_ms),
            ("producer_id_block_size", producer_id_block_size),
        ):
            if type(v) is not int or v <= 0:
                raise ValueError(f"EtcdMetadata {name} must be an integer > 0, got {v!r}")
        if retry_backoff_max_ms < retry_backoff_ms or leader_imbalance_check_interval_ms < 0:
            raise ValueError("EtcdMetadata needs retry_backoff_max_ms >= retry_backoff_ms and an interval >= 0")
        self.broker_info = broker
        self.create_cluster = create_cluster
        self.campaign = broker is not None if campaign is None else campaign
        if self.campaign and broker is None:
            raise ValueError("EtcdMetadata: only a broker campaigns (its session lease backs the candidacy)")
        self.session_timeout_ms = session_timeout_ms
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.retry_backoff_max_ms = retry_backoff_max_ms
        self.unclean_leader_election_enable = unclean_leader_election_enable
        self.leader_imbalance_check_interval_ms = leader_imbalance_check_interval_ms
        self.producer_id_block_size = producer_id_block_size
        self.keys = Keys(self.target.prefix)
        self.view = EtcdView(self.keys)
        self._client: Any = None
        self._client_lock = asyncio.Lock()
        self._lease_id = 0
        self._broker_epoch = -1
        self._registered = asyncio.Event()
        self._reregister = asyncio.Event()
        self._adopt_pending = False
        self._started = False
        self._pid_lock = asyncio.Lock()
        self._pid_seen: tuple[int, int] | None = None
        # The counter after the last block this process was handed.
        self._pid_floor = 0
        self._next_preferred_ms = 0.0
        self.is_controller = False
        # Counters for tests, metrics and the benchmark.
        self.registrations = 0
        # Registration attempts refused because another session holds the id.
        self.duplicate_waits = 0
        self.keepalives = 0
        self.elections_won = 0
        self.controller_writes = 0
        self.controller_conflicts = 0
        self.leader_elections = 0
        # Seconds the acting controller spent in its partition transactions
        # (the benchmark's elections/s divides by it).
        self.controller_write_s = 0.0

    # ------------------------------------------------------------ lifecycle

    @property
    def cluster_id(self) -> uuid.UUID | None:
        return self._cluster_id

    @property
    def broker_epoch(self) -> int:
        """This broker's current epoch (-1: not registered)."""
        return self._broker_epoch

    def describe(self) -> str:
        return self.target.url()

    def _where(self) -> str:
        return f"etcd {self.target.url()}"

    async def connect(self, *, timeout_ms: int | None = None) -> uuid.UUID:
        """Reach etcd and settle the cluster id (see the class doc)."""
        async with self._bounded(timeout_ms, "answer"):
            attempt = 0
            while True:
                try:
                    return await self._settle_cluster()
                except _ETCD_ERRORS as e:
                    self._failed("connect", e)
                await asyncio.sleep(self._backoff(attempt))
                attempt += 1

    async def start(self, *, timeout_ms: int | None = None) -> None:
        async with self._bounded(timeout_ms, "view"):
            await self.connect()
            attempt = 0
            while True:
                try:
                    await self._load()
                    break
                except _ETCD_ERRORS as e:
                    self._failed("read", e)
                await asyncio.sleep(self._backoff(attempt))
                attempt += 1
            if self.broker_info is not None:
                await self._register()
        self._started = True
        self._spawn(self._watch_loop())
        if self.broker_info is not None:
            self._spawn(self._session_loop())
        if self.campaign:
            self._spawn(self._controller_loop())
        bi = self.broker_info
        if bi is not None:
            # A broker takes no role before the acting controller accepted
            # this incarnation: until then the view may still show partitions
            # its previous incarnation led.
            async with self._bounded(timeout_ms, "acceptance of this broker by the acting controller"):
                while not self.accepted:
                    await self._view_changed.wait()

    @property
    def accepted(self) -> bool:
        """This broker's current incarnation is accepted (see etcd_controller)."""
        bi = self.broker_info
        return (
            bi is not None and self._broker_epoch > 0 and self.view.incarnations.get(bi.broker_id) == self._broker_epoch
        )

    async def stop(self, *, revoke: bool = False) -> None:
        """End the background tasks.  ``revoke``: end the session now (the
        broker is fenced at once); by default it ends when the lease
        expires, as a crashed broker's would."""
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        client = self._client
        if client is not None:
            if revoke and self._lease_id:
                with contextlib.suppress(*_ETCD_ERRORS):
                    await client.revoke_lease(self._lease_id)
            with contextlib.suppress(*_ETCD_ERRORS):
                await client.close()
            self._client = None
        self.is_controller = False

    async def _etcd(self) -> Any:
        if self._client is None:
            async with self._client_lock:
                if self._client is None:
                    target = await _grpc_target(self.target.endpoints)
                    self._client = _new_client(target, self.request_timeout_ms / 1000)
        return self._client

    async def _txn(self, compare: list[Any], success: list[Any], failure: list[Any] | None = None) -> tuple[bool, Any]:
        c = await self._etcd()
        ok, resp = await c.transaction(compare=compare, success=success, failure=failure or [])
        return bool(ok), resp

    # ------------------------------------------------------------- identity

    async def _settle_cluster(self) -> uuid.UUID:
        c = await self._etcd()
        t = c.transactions
        while True:
            got = await c.get(self.keys.cluster_id)
            if got is not None:
                theirs = dec_uuid(got.value, f"etcd {self.target.url()}: cluster_id")
                check_same_cluster(f"etcd prefix {self.target.prefix}", theirs, "this side", self._cluster_id)
                self._cluster_id = theirs
                return theirs
            if not self.create_cluster:
                raise ClusterMismatchError(
                    f"etcd {self.target.url()}: no cluster under prefix {self.target.prefix} "
                    f"({self.target.prefix}/cluster_id is missing; brokers create it): check the prefix"
                )
            cid = self._cluster_id or uuid.uuid4()
            # The producer-id counter is born with the cluster: a missing one
            # later means it was deleted, and is refused (never restarted at 0).
            ok, _ = await self._txn(
                [t.create(self.keys.cluster_id) == 0, t.create(self.keys.producer_ids) == 0],
                [t.put(self.keys.cluster_id, str(cid).encode()), t.put(self.keys.producer_ids, pack_value(0))],
            )
            if ok:
                log.info("etcd %s: created cluster %s", self.target.url(), cid)

    # ----------------------------------------------------------------- view

    async def _load(self) -> None:
        c = await self._etcd()
        got = await c.get_prefix(self.keys.root)
        self.view.load((KV(kv.key, kv.value, kv.create_revision, kv.mod_revision) for kv in got), got.header.revision)
        self._adopt_now()

    async def _watch_loop(self) -> None:
        attempt = 0
        while True:
            try:
                c = await self._etcd()
                watch = await c.watch_prefix(self.keys.root, start_revision=self.view.revision + 1)
                try:
                    async for ev in watch:
                        attempt = 0
                        kv = ev.kv
                        value = None if ev.kind == EventKind.DELETE else kv.value
                        self.view.apply(KV(kv.key, value, kv.create_revision, kv.mod_revision))
                        self._schedule_adopt()
                finally:
                    with contextlib.suppress(*_ETCD_ERRORS):
                        await watch.cancel()
            except aetcd.exceptions.RevisionCompactedError as e:
                # Our revision is gone from etcd's history: read it all again.
                log.warning("etcd %s: watch revision compacted (%s): reading the prefix again", self.target.url(), e)
                try:
                    await self._load()
                except _ETCD_ERRORS as e2:
                    self._failed("read", e2)
                except MetadataError as e2:
                    # etcd answered an older revision than this view applied
                    # (restored from a backup?): freeze, refuse every write.
                    self.view.frozen = True
                    log.error("%s: %s; metadata is frozen and writes are refused until restart", self._where(), e2)
                    return
            except _ETCD_ERRORS as e:
                self._failed("watch", e)
                await asyncio.sleep(self._backoff(attempt))
                attempt += 1

    def _schedule_adopt(self) -> None:
        # One adoption per burst: the events of one transaction arrive
        # together, and listeners see them at once.
        if not self._adopt_pending:
            self._adopt_pending = True
            asyncio.get_running_loop().call_soon(self._adopt_now)

    def _adopt_now(self) -> None:
        self._adopt_pending = False
        s = self.view.snapshot()
        if s.version != self._version:
            self._adopt(s)
        bi = self.broker_info
        if bi is not None and self._broker_epoch > 0 and self.view.revision >= self._broker_epoch:
            me = self.view.brokers.get(bi.broker_id)
            if me is None or me.epoch != self._broker_epoch:
                # Our key is gone (the lease expired) or another process
                # registered this id: this incarnation is over.
                self._incarnation_gone(self._broker_epoch)

    # -------------------------------------------------------------- session

    def _incarnation_gone(self, epoch: int) -> None:
        if epoch == self._broker_epoch and not self._reregister.is_set():
            log.warning("etcd: broker %s incarnation epoch=%d is fenced: registering again",
                        self.broker_info.broker_id if self.broker_info else "-", epoch)  # fmt: skip
            self._reregister.set()

    def _lease_ttl_s(self) -> int:
        return max(2, math.ceil(self.session_timeout_ms / 1000))

    async def _register(self) -> None:
        """Register a new incarnation under a new lease, retrying until etcd
        answers.  Meanwhile ``broker_epoch`` is -1.

        The key is created only if it does not exist: while another session
        holds this broker id (a previous incarnation whose lease has not
        expired yet, or a second process started with the same id) this
        one waits, as Kafka answers DUPLICATE_BROKER_REGISTRATION until the
        old session times out.  Two processes can then never take turns
        fencing each other, and the old incarnation is fenced (its key gone,
        its partitions re-elected) before the new one exists."""
        bi = self.broker_info
        assert bi is not None and self._cluster_id is not None
        key = self.keys.broker(bi.broker_id)
        self._broker_epoch = -1
        self._registered.clear()
        attempt = 0
        while True:
            try:
                c = await self._etcd()
                t = c.transactions
                lease = await c.lease(self._lease_ttl_s())
                ok, resp = await self._txn(
                    [t.create(key) == 0, t.value(self.keys.cluster_id) == str(self._cluster_id).encode()],
                    [t.put(key, enc_broker(bi, lease.id), lease=lease.id)],
                    [t.get(key), t.get(self.keys.cluster_id)],
                )
                if ok:
                    previous, self._lease_id = self._lease_id, lease.id
                    self._broker_epoch = _revision(resp)
                    self.registrations += 1
                    self._registered.set()
                    log.info("etcd: broker %d registered epoch=%d lease=%x", bi.broker_id, self._broker_epoch, lease.id)
                    if previous and previous != lease.id:
                        # Our own previous lease: it holds nothing now, and
                        # revoking it ends its candidacy for the controller.
                        with contextlib.suppress(*_ETCD_ERRORS):
                            await c.revoke_lease(previous)
                    return
                with contextlib.suppress(*_ETCD_ERRORS):
                    await c.revoke_lease(lease.id)
                holder = resp[0][0][1] if resp and resp[0] else None
                if holder is not None:
                    self.duplicate_waits += 1
                    if self.duplicate_waits % DUPLICATE_LOG_EVERY == 1:
                        log.warning(
                            "etcd: broker id %d is registered by another live session (lease %x, epoch %d): "
                            "waiting for it to end (DUPLICATE_BROKER_REGISTRATION)",
                            bi.broker_id, holder.lease, holder.mod_revision,
                        )  # fmt: skip
                else:
                    log.error(
                        "etcd %s: cluster_id is no longer %s: not registering", self.target.url(), self._cluster_id
                    )
            except _ETCD_ERRORS as e:
                self._failed("register", e)
            await asyncio.sleep(self._backoff(attempt))
            attempt += 1

    async def _session_loop(self) -> None:
        period_s = self._lease_ttl_s() / 3
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(period_s):
                    await self._reregister.wait()
            if not self._reregister.is_set():
                if await self._keep_alive(period_s):
                    continue
                log.warning("etcd: broker lease %x expired: this incarnation is fenced", self._lease_id)
            self._reregister.clear()
            await self._register()
            # The broker restarts its role: its partitions' roles come from
            # the views that follow (the controller moved its leaderships).
            self._notify()

    async def _keep_alive(self, period_s: float) -> bool:
        """Renew the lease; False once etcd says it is gone.  A failed
        attempt is retried at once with a short backoff (each bounded by the
        period): waiting a whole period between tries could let the lease
        run out while one member is slow to answer."""
        attempt = 0
        while True:
            try:
                async with asyncio.timeout(period_s):
                    c = await self._etcd()
                    reply = await c.refresh_lease(self._lease_id)
                if reply is None or reply.TTL <= 0:
                    return False
                self.keepalives += 1
                return True
            except _ETCD_ERRORS as e:  # TimeoutError among them
                self._failed("keepalive", e)
            await asyncio.sleep(min(self._backoff(attempt), period_s))
            attempt += 1

    # ----------------------------------------------------------- controller

    async def _controller_loop(self) -> None:
        bi = self.broker_info
        assert bi is not None
        attempt = 0
        while True:
            await self._registered.wait()
            lease = self._lease_id
            key = self.keys.candidate(lease)
            try:
                c = await self._etcd()
                t = c.transactions
                ok, resp = await self._txn(
                    [t.create(key) == 0], [t.put(key, pack_value(bi.broker_id), lease=lease)], [t.get(key)]
                )
                rev = _revision(resp) if ok else (resp[0][0][1].create_revision if resp and resp[0] else 0)
            except _ETCD_ERRORS as e:
                self._failed("campaign", e)
                await asyncio.sleep(self._backoff(attempt))
                attempt += 1
                continue
            attempt = 0
            if not rev:
                continue  # the lease ended between: campaign with the next one
            while lease == self._lease_id and self._registered.is_set():
                leading = self.view.leader_candidate() == key and self.view.candidates.get(key) == rev
                if leading and not self.is_controller:
                    self.is_controller = True
                    self.elections_won += 1
                    self._next_preferred_ms = time.monotonic() * 1000 + self.leader_imbalance_check_interval_ms
                    log.info("etcd: broker %d is the acting controller (candidate revision %d)", bi.broker_id, rev)
                elif not leading and self.is_controller:
                    self.is_controller = False
                    log.warning("etcd: broker %d is no longer the acting controller", bi.broker_id)
                # Taken before the pass: a change that arrives during it
                # wakes the next pass at once.
                changed = self._view_changed
                if self.is_controller and not self.view.frozen:
                    try:
                        await self._controller_pass(key, rev)
                    except _ETCD_ERRORS as e:
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

    async def _controller_pass(self, candidate: bytes, candidate_rev: int) -> None:
        """Write what :func:`plan` wants; stop at the first lost compare
        (the watch brings what changed, and the next pass re-plans)."""
        now_ms = time.monotonic() * 1000
        due = self.leader_imbalance_check_interval_ms > 0 and now_ms >= self._next_preferred_ms
        todo = plan(self.view, unclean=self.unclean_leader_election_enable, elect_preferred=due)
        if due:
            self._next_preferred_ms = now_ms + self.leader_imbalance_check_interval_ms
        if not todo.empty():
            await self._write_plan(todo, candidate, candidate_rev)

    async def _write_plan(self, todo: Plan, candidate: bytes, candidate_rev: int) -> None:
        """Write a plan, each change guarded by the revisions it was planned
        on and by our candidacy; stop after the first lost compare."""
        c = await self._etcd()
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
                ok, resp = await self._txn(compare, [t.put(self.keys.part(ch.tp), enc_part(ch.new))])
            if not ok:
                self.controller_conflicts += 1
                return False
            self.controller_writes += 1
            self.leader_elections += ch.election
            self.view.set_partition(ch.tp, ch.new, _revision(resp))
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
            began = time.perf_counter()
            done = await asyncio.gather(*(write(ch) for ch in todo.changes))
            self.controller_write_s += time.perf_counter() - began
            self._schedule_adopt()
            if not all(done):
                return  # the watch brings what changed; the next pass re-plans
        for bid, epoch in todo.accept:
            ok, _ = await self._txn(
                [guard, t.mod(self.keys.broker(bid)) == epoch], [t.put(self.keys.incarnation(bid), pack_value(epoch))]
            )
            if ok:
                self.controller_writes += 1
                log.info("etcd controller: broker %d incarnation epoch=%d accepted", bid, epoch)

    # -------------------------------------------------------- AlterPartition

    async def alter_partition(
        self, broker_id: int, tp: TopicIdPartition, leader_epoch: int, partition_epoch: int, isr: tuple[int, ...]
    ) -> PartitionInfo | Errors:
        """Kafka's AlterPartition as one transaction: it commits only if the
        partition is still the one checked and the sender still holds its
        broker epoch (and every added replica its own).  Errors as the
        embedded controller's; COORDINATOR_NOT_AVAILABLE / REQUEST_TIMED_OUT
        (retriable) when etcd cannot be reached or between registrations."""
        if self.broker_info is None or broker_id != self.broker_info.broker_id:
            return Errors.BROKER_ID_NOT_REGISTERED
        epoch = self._broker_epoch
        if epoch < 0 or self.view.frozen:
            return Errors.COORDINATOR_NOT_AVAILABLE
        me = self.view.brokers.get(broker_id)
        if me is not None and me.epoch != epoch and self.view.revision >= epoch:
            self._incarnation_gone(epoch)
            return Errors.STALE_BROKER_EPOCH
        p = self.view.partition(tp)
        asked = list(isr)
        err = check_alter_partition(p, broker_id, leader_epoch, partition_epoch, asked)
        if err != Errors.NONE:
            return err
        assert p is not None
        added = sorted(set(asked) - set(p.isr))
        if not all(self.view.accepted(r) for r in added):
            return Errors.INELIGIBLE_REPLICA
        new = bump(p, replace(p, isr=tuple(r for r in p.replicas if r in set(asked))))
        if new == p:
            return p
        # Every revision compared is read with ``p``, before any await: one
        # read after it could be newer than the state ``new`` was built on.
        owner = self.view.topic_revision(tp.topic_id)
        assert owner is not None  # the partition is known
        part_rev = self.view.part_revision(tp)
        added_epochs = [(r, self.view.brokers[r].epoch) for r in added]
        try:
            c = await self._etcd()
            t = c.transactions
            compare = [
                t.mod(self.keys.part(tp)) == part_rev,
                t.create(self.keys.topic(owner[0])) == owner[1],
                t.mod(self.keys.broker(broker_id)) == epoch,
            ]
            compare += [t.mod(self.keys.broker(r)) == e for r, e in added_epochs]
            # A lost compare answers what changed, to give Kafka's error.
            failure = [t.get(self.keys.broker(broker_id)), t.get(self.keys.topic(owner[0]))]
            failure += [t.get(self.keys.broker(r)) for r, _ in added_epochs]
            ok, resp = await self._txn(compare, [t.put(self.keys.part(tp), enc_part(new))], failure)
        except (aetcd.exceptions.ConnectionTimeoutError, TimeoutError):
            return Errors.REQUEST_TIMED_OUT
        except _ETCD_ERRORS as e:
            self._failed("alter_partition", e)
            return Errors.COORDINATOR_NOT_AVAILABLE
        if ok:
            self.view.set_partition(tp, new, _revision(resp))
            self._schedule_adopt()
            log.info("etcd: %s/%d isr %s -> %s (%s)", owner[0], tp.partition, list(p.isr), list(new.isr),
                     REASON_ALTER_PARTITION)  # fmt: skip
            return new

        def got(i: int) -> Any:
            return resp[i][0][1] if len(resp) > i and resp[i] else None

        mine = got(0)
        if mine is None or mine.mod_revision != epoch:
            self._incarnation_gone(epoch)
            return Errors.STALE_BROKER_EPOCH if mine is not None else Errors.BROKER_ID_NOT_REGISTERED
        topic = got(1)
        if topic is None or topic.create_revision != owner[1]:
            return Errors.UNKNOWN_TOPIC_OR_PARTITION  # deleted (or re-created) meanwhile
        if any((b := got(2 + i)) is None or b.mod_revision != e for i, (_, e) in enumerate(added_epochs)):
            return Errors.INELIGIBLE_REPLICA  # an added replica's incarnation ended meanwhile
        # The partition changed under us: the leader retries with what the
        # view brings (Kafka's answer to a stale partition epoch).
        return Errors.INVALID_UPDATE_VERSION

    # ----------------------------------------------------------- producer ids

    async def allocate_producer_ids(self, broker_id: int) -> ProducerIdBlock | Errors:
        """The next block of producer ids, by compare-and-swap on
        ``producer_ids`` (KIP-730's scheme): the block is durable in etcd
        before it is returned, and no id is handed out twice.  Retriable
        COORDINATOR_NOT_AVAILABLE when etcd cannot be reached, this broker
        is between registrations, or the counter key is unreadable (never
        guessed over)."""
        if self.broker_info is None or broker_id != self.broker_info.broker_id or self._broker_epoch < 0:
            return Errors.COORDINATOR_NOT_AVAILABLE
        if self.view.frozen:
            return Errors.COORDINATOR_NOT_AVAILABLE
        epoch = self._broker_epoch
        size = self.producer_id_block_size
        # One CAS at a time per process: its own requests would only make
        # each other retry.
        async with self._pid_lock:
            try:
                c = await self._etcd()
                t = c.transactions
                seen = self._pid_seen  # (counter, its mod revision) as this process last wrote it
                if seen is None or seen[0] < self.view.producer_ids_next:
                    # Unknown, or another broker allocated since: read it.
                    floor = self._pid_floor_now()
                    got = await c.get(self.keys.producer_ids)
                    if got is None:
                        # Made with the cluster id: missing, it was deleted.
                        raise MetadataError("producer_ids is missing (it is made with the cluster): not starting at 0")
                    seen = _fresh_counter(got.value, got.mod_revision, floor)
                for _ in range(PRODUCER_ID_CAS_ATTEMPTS_MAX):
                    first, rev = seen
                    if first > PRODUCER_ID_MAX - size + 1:
                        log.error("etcd: producer ids exhausted at %d", first)
                        return Errors.UNKNOWN_SERVER_ERROR
                    floor = self._pid_floor_now()
                    ok, resp = await self._txn(
                        [t.mod(self.keys.producer_ids) == rev, t.mod(self.keys.broker(broker_id)) == epoch],
                        [t.put(self.keys.producer_ids, pack_value(first + size))],
                        # A lost race answers what won it: the next attempt
                        # needs no read of its own.
                        [t.get(self.keys.broker(broker_id)), t.get(self.keys.producer_ids)],
                    )
                    if ok:
                        self._pid_seen = (first + size, _revision(resp))
                        self._pid_floor = first + size
                        return ProducerIdBlock(broker_id, first, size)
                    mine = resp[0][0][1] if resp and resp[0] else None
                    if mine is None or mine.mod_revision != epoch:
                        self._incarnation_gone(epoch)
                        return Errors.COORDINATOR_NOT_AVAILABLE
                    counter = resp[1][0] if len(resp) > 1 and resp[1] else None
                    if counter is None:
                        # We lost to a writer, yet there is no counter: it was
                        # deleted.  Starting over at 0 would hand ids out twice.
                        raise MetadataError("producer_ids deleted after blocks were handed out: not restarting at 0")
                    seen = _fresh_counter(counter[0], counter[1].mod_revision, floor)
                self._pid_seen = None
            except ValueError as e:  # MetadataError: an unreadable counter
                self._pid_seen = None
                log.error("etcd %s: producer_ids: %s", self.target.url(), e)
                return Errors.COORDINATOR_NOT_AVAILABLE
            except _ETCD_ERRORS as e:
                self._pid_seen = None
                self._failed("allocate_producer_ids", e)
                return Errors.COORDINATOR_NOT_AVAILABLE
        return Errors.COORDINATOR_NOT_AVAILABLE

    def _pid_floor_now(self) -> int:
        """What a read of the counter issued now must not be below: what
        this process was handed and what its view has applied."""
        return max(self.view.producer_ids_next, self._pid_floor)

    # --------------------------------------------------------------- admin

    async def create_topics(self, topics: Mapping[str, tuple[int, int]]) -> dict[str, TopicInfo | Errors]:
        """Create topics ``{name: (partitions, replication_factor)}``, each
        by one transaction that succeeds only if the name is free; answers as
        :meth:`ControllerMetadata.create_topics`.  Replicas are assigned over
        the brokers the acting controller has accepted."""
        out: dict[str, TopicInfo | Errors] = {}
        created: set[uuid.UUID] = set()
        for name, (partitions, rf) in topics.items():
            answer = await self._create_topic(name, partitions, rf)
            out[name] = answer
            if isinstance(answer, TopicInfo):
                created.add(answer.topic_id)
        await self._view_until(lambda: created <= self._topics.keys())
        for name, answer in out.items():
            if isinstance(answer, TopicInfo):
                out[name] = self.topic(name) or answer
        return out

    async def _create_topic(self, name: str, partitions: int, rf: int) -> TopicInfo | Errors:
        if self.view.frozen:
            return Errors.COORDINATOR_NOT_AVAILABLE
        if not valid_topic_name(name):
            return Errors.INVALID_REQUEST
        if (
            not 1 <= partitions <= PARTITIONS_PER_TOPIC_MAX
            or self.view.partition_count() + partitions > PARTITIONS_PER_CLUSTER_MAX
        ):
            return Errors.INVALID_PARTITIONS
        existing = self._same_shape(name, partitions, rf)
        if existing is not None:
            return existing
        alive = [b.info for bid, b in sorted(self.view.brokers.items()) if self.view.accepted(bid)]
        if not 1 <= rf <= len(alive):
            return Errors.INVALID_REPLICATION_FACTOR
        tid = uuid.uuid4()
        replicas = assign_replicas(alive, partitions, rf, self.view.partition_count())
        try:
            c = await self._etcd()
            t = c.transactions
            ok, _ = await self._txn(
                [t.create(self.keys.topic(name)) == 0, t.value(self.keys.cluster_id) == str(self._cluster_id).encode()],
                [t.put(self.keys.topic(name), enc_topic(tid, replicas))],
            )
            if not ok:
                # Someone else created it (or the cluster id moved): read it.
                await self._view_until(lambda: self.view.topic_of(name) is not None)
                existing = self._same_shape(name, partitions, rf)
                return existing if existing is not None else Errors.TOPIC_ALREADY_EXISTS
        except (aetcd.exceptions.ConnectionTimeoutError, TimeoutError):
            return Errors.REQUEST_TIMED_OUT
        except _ETCD_ERRORS as e:
            self._failed("create_topics", e)
            return Errors.COORDINATOR_NOT_AVAILABLE
        parts = tuple(PartitionInfo(r[0], 0, r, r, 0) for r in replicas)
        return TopicInfo(tid, name, parts)

    def _same_shape(self, name: str, partitions: int, rf: int) -> TopicInfo | Errors | None:
        got = self.view.topic_of(name)
        if got is None:
            return None
        info = self.view.snapshot()
        t = next((x for x in info.topics if x.name == name), None)
        if t is not None and t.num_partitions == partitions and len(t.partitions[0].replicas) == rf:
            return t
        return Errors.TOPIC_ALREADY_EXISTS

    async def delete_topics(self, names: list[str]) -> dict[str, uuid.UUID | Errors]:
        """Delete topics by name, each by one transaction (the topic key,
        its partitions, and the deleted record, kept for good)."""
        out: dict[str, uuid.UUID | Errors] = {}
        for name in names:
            if name in out:
                continue
            got = self.view.topic_of(name)
            if self.view.frozen:
                out[name] = Errors.COORDINATOR_NOT_AVAILABLE
                continue
            if got is None:
                out[name] = Errors.UNKNOWN_TOPIC_OR_PARTITION
                continue
            if len(self.view.deleted) >= DELETED_TOPICS_MAX:
                out[name] = Errors.POLICY_VIOLATION
                continue
            tid, rev = got
            try:
                c = await self._etcd()
                t = c.transactions
                parts = self.keys.parts_of(tid)
                ok, _ = await self._txn(
                    [t.create(self.keys.topic(name)) == rev],
                    [
                        t.delete(self.keys.topic(name)),
                        t.delete(parts, range_end=aetcd.utils.prefix_range_end(parts)),
                        t.put(self.keys.deleted_topic(tid), pack_value(name)),
                    ],
                )
            except _ETCD_ERRORS as e:
                self._failed("delete_topics", e)
                out[name] = Errors.COORDINATOR_NOT_AVAILABLE
                continue
            out[name] = tid if ok else Errors.UNKNOWN_TOPIC_OR_PARTITION
        gone = {t for t in out.values() if isinstance(t, uuid.UUID)}
        await self._view_until(lambda: not gone & self._topics.keys())
        return out
