"""The embedded controller as brokers and clients see it: :class:`ControllerMetadata`,
a :class:`partlog.controller.cluster_meta.MetadataSource` fed by the controller.

A broker's instance registers (a new broker epoch per incarnation),
heartbeats, and long-polls ``metadata_poll``; a client-only instance (no
``BrokerInfo``) only polls.  Every new snapshot replaces the view at once
and then the listeners run (plain callables, in the event loop).

Routing (brokers, AZs, produce representatives) is delegated to a
:class:`~partlog.controller.cluster_meta.StaticMetadata` built from each snapshot's
alive brokers, so the rules live in one place.  Partitions are looked up in
the snapshot's topics directly: their replica lists may name dead brokers,
which ``StaticMetadata`` refuses.

When the controller cannot be reached, the last snapshot stays, every loop
keeps retrying with capped exponential backoff, ``alter_partition`` answers
a retriable error and ``allocate_producer_ids`` None: nothing raises into
the broker.  Every failed call is logged and counted (``failures``), so a
daemon that keeps retrying is not silent about it; one-shot tools bound
their wait with :meth:`start`'s ``timeout_ms``.

Cluster identity: the controller names its cluster in the RPC handshake.
The first connection adopts it (or checks the ``cluster_id`` given); a
controller naming another cluster later is refused like an unreachable one
and logged as an error, and one that names none is refused too: a view
whose cluster nobody can check must not reach a broker or walmgr.

When the controller says this broker's incarnation is gone (a heartbeat
answered STALE_BROKER_EPOCH or BROKER_ID_NOT_REGISTERED: it was fenced, e.g.
after a long pause), the client registers again and calls the listeners.
``broker_epoch`` has changed then, and the broker treats it as a restart of
its role: it re-derives every partition's role from the next snapshot (the
controller already moved its leaderships and took it out of the ISRs).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl as ssl_module
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar, overload

from partlog import injected_bugs
from partlog.controller.cluster_meta import (
    BrokerInfo,
    ClusterMismatchError,
    ConfigChange,
    PartitionInfo,
    TopicInfo,
)
from partlog.controller.elr import ELR_RPC_VERSION
from partlog.controller.model import MetadataSnapshot
from partlog.controller.partition_admin import NewPartitions, dec_create_partitions_response, enc_create_partitions
from partlog.controller.reassignment import (
    Reassignment,
    dec_alter_reassignments_response,
    dec_list_reassignments_response,
    enc_alter_reassignments,
    enc_list_reassignments,
    listed,
)
from partlog.controller.rules import Refused
from partlog.controller.topic_create import ASSIGNMENTS_RPC_VERSION, Assignment, enc_assignments
from partlog.controller.view import ControllerUnavailableError, SnapshotView
from partlog.controller.wire import (
    dec_alter_partition_response,
    dec_alter_topic_configs_response,
    dec_create_topics_response,
    dec_delete_topics_response,
    dec_heartbeat_response,
    dec_pid_response,
    dec_poll_response,
    dec_register_response,
    enc_alter_partition,
    enc_alter_topic_configs,
    enc_broker_epoch,
    enc_create_topics,
    enc_delete_topics,
    enc_poll,
    enc_register,
)
from partlog.kafka.errors import Errors
from partlog.kafka.producer_ids import ProducerIdBlock
from partlog.kafka.records import TopicIdPartition
from partlog.rpc.client import RpcClient, RpcConnectionError, RpcHandshakeError, RpcRemoteError, RpcTimeoutError
from partlog.rpc.frame import RpcErrorCode
from partlog.rpc.wire import WireError

T = TypeVar("T")

__all__ = [
    "HEARTBEAT_INTERVAL_MS_DEFAULT",
    "ControllerMetadata",
    "ControllerUnavailableError",
]

log = logging.getLogger(__name__)

# Kafka's broker.heartbeat.interval.ms default.
HEARTBEAT_INTERVAL_MS_DEFAULT = 2_000
# How long one metadata_poll parks on the controller (the server caps it at
# 30 s); shorter means a dead controller connection is noticed sooner.
POLL_WAIT_MS_DEFAULT = 10_000
# Connect and per-call bound for everything but the long-poll (which gets
# this on top of its wait): Kafka's controller request timeouts are seconds.
REQUEST_TIMEOUT_MS_DEFAULT = 5_000
# Kafka's retry.backoff.ms and retry.backoff.max.ms defaults.
RETRY_BACKOFF_MS_DEFAULT = 100
RETRY_BACKOFF_MAX_MS_DEFAULT = 1_000

# What a call that did not reach the controller answers: retriable for the broker.
_UNREACHABLE = (RpcConnectionError, RpcTimeoutError, OSError)
_REREGISTER = (Errors.STALE_BROKER_EPOCH, Errors.BROKER_ID_NOT_REGISTERED)


class ControllerMetadata(SnapshotView):
    """Cluster metadata from the controller at ``host:port``.

    ``broker`` is this broker's id, AZ and the address other brokers and
    clients reach it at (register with the port the broker listens on), or
    None for a client-only view.  ``cluster_id``: the cluster this side
    belongs to (None: adopt the controller's).  ``await connect()`` returns
    once the controller answered a handshake (``cluster_id`` is then known);
    ``await start()`` once registered and holding a first snapshot.  Both
    retry until the controller answers, or for at most ``timeout_ms``
    (then :class:`ControllerUnavailableError`); a controller of another
    cluster raises :class:`ClusterMismatchError` at once.  ``await stop()``
    ends the background tasks (it does not unregister: the controller fences
    the broker after its session timeout)."""

    def __init__(
        self,
        host: str,
        port: int,
        broker: BrokerInfo | None = None,
        *,
        cluster_id: uuid.UUID | None = None,
        secret: bytes | None = None,
        ssl: ssl_module.SSLContext | None = None,
        heartbeat_interval_ms: int = HEARTBEAT_INTERVAL_MS_DEFAULT,
        poll_wait_ms: int = POLL_WAIT_MS_DEFAULT,
        request_timeout_ms: int = REQUEST_TIMEOUT_MS_DEFAULT,
        retry_backoff_ms: int = RETRY_BACKOFF_MS_DEFAULT,
        retry_backoff_max_ms: int = RETRY_BACKOFF_MAX_MS_DEFAULT,
    ) -> None:
        for name, v in (
            ("heartbeat_interval_ms", heartbeat_interval_ms),
            ("request_timeout_ms", request_timeout_ms),
            ("retry_backoff_ms", retry_backoff_ms),
        ):
            if v <= 0:
                raise ValueError(f"ControllerMetadata {name} must be > 0, got {v}")
        if poll_wait_ms < 0 or retry_backoff_max_ms < retry_backoff_ms:
            raise ValueError(
                f"ControllerMetadata needs poll_wait_ms >= 0 and retry_backoff_max_ms >= retry_backoff_ms, "
                f"got {poll_wait_ms} and {retry_backoff_max_ms}"
            )
        super().__init__(cluster_id)
        self.host = host
        self.port = port
        self.broker_info = broker
        self._secret = secret
        self._ssl = ssl
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.poll_wait_ms = poll_wait_ms
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.retry_backoff_max_ms = retry_backoff_max_ms
        self._client: RpcClient | None = None
        self._connect_lock = asyncio.Lock()
        self._register_lock = asyncio.Lock()
        self._broker_epoch = -1
        self._reregister = asyncio.Event()
        # Set by the broker before start() when its store shut down uncleanly
        # (KIP-966): sent with the next registration, until one is answered.
        self.unclean_shutdown = False
        # Counters for tests and metrics.
        self.registrations = 0
        self.heartbeats_answered = 0
        # Until start() returns, a controller of another cluster ends the
        # wait (the caller exits); afterwards the loops log it and retry.
        self._started = False

    # ------------------------------------------------------------ lifecycle

    @property
    def cluster_id(self) -> uuid.UUID | None:
        """The controller's cluster (None until a first handshake)."""
        return self._cluster_id

    async def connect(self, *, timeout_ms: int | None = None) -> uuid.UUID:
        """Reach the controller once (no registration); returns its cluster id."""
        async with self._bounded(timeout_ms, "answer"):
            attempt = 0
            while True:
                try:
                    await self._connected()
                    assert self._cluster_id is not None
                    return self._cluster_id
                except _UNREACHABLE as e:
                    self._failed("connect", e)
                await asyncio.sleep(self._backoff(attempt))
                attempt += 1

    async def start(self, *, timeout_ms: int | None = None) -> None:
        async with self._bounded(timeout_ms, "snapshot"):
            if self.broker_info is not None:
                await self._register()
            attempt = 0
            while True:
                # Versions are >= 0: -1 is answered with the full snapshot at once.
                with contextlib.suppress(_PollFailed):
                    snapshot = await self._poll(-1, 0)
                    if snapshot is not None:
                        self._adopt(snapshot)
                        break
                await asyncio.sleep(self._backoff(attempt))
                attempt += 1
        self._started = True
        self._spawn(self._poll_loop())
        if self.broker_info is not None:
            self._spawn(self._heartbeat_loop())

    async def stop(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._client is not None:
            await self._client.close()
            self._client = None

    def _where(self) -> str:
        return f"controller {self.host}:{self.port}"

    @property
    def broker_epoch(self) -> int:
        """This broker's current broker epoch (-1: not registered)."""
        return self._broker_epoch

    # ---------------------------------------------------------- connection

    async def _connected(self) -> RpcClient:
        """The shared connection, connecting when needed.  Raises
        :class:`ClusterMismatchError` for a controller of another cluster (or
        one naming none), else what ``RpcClient.connect`` raises."""
        client = self._client
        if client is not None and client.connected:
            return client
        async with self._connect_lock:
            client = self._client
            if client is not None and client.connected:
                return client
            if client is not None:
                await client.close()
                self._client = None
            try:
                client = await RpcClient.connect(
                    self.host,
                    self.port,
                    secret=self._secret,
                    ssl=self._ssl,
                    timeout_ms=self.request_timeout_ms,
                    cluster_id=self._cluster_id,
                )
            except RpcHandshakeError as e:
                if e.code == RpcErrorCode.CLUSTER_MISMATCH:
                    raise ClusterMismatchError(f"controller {self.host}:{self.port}: {e.message}") from e
                raise
            if client.server_cluster_id is None:
                await client.close()
                raise ClusterMismatchError(f"controller {self.host}:{self.port} names no cluster id")
            self._cluster_id = client.server_cluster_id
            self._client = client
            return client

    async def call(self, method: str, body: Any, timeout_ms: int | None = None) -> Any:
        """One call to the controller on the shared connection (the ACLs'
        view, :class:`partlog.controller.acls.ControllerAcls`, uses it)."""
        return await self._call(method, body, timeout_ms)

    async def _call(self, method: str, body: Any, timeout_ms: int | None = None) -> Any:
        """One call on the shared connection, connecting when needed.  Raises
        what ``RpcClient`` raises and :class:`ClusterMismatchError`; a lost
        connection is dropped so the next call connects anew."""
        client = await self._connected()
        try:
            return await client.call(method, body, timeout_ms=timeout_ms or self.request_timeout_ms)
        except RpcConnectionError:
            if self._client is client:
                self._client = None
                await client.close()
            raise

    # ---------------------------------------------------------- registering

    async def _register(self) -> None:
        """Register a new incarnation, retrying until the controller answers.
        Meanwhile ``broker_epoch`` is -1: nothing is sent for the old one."""
        assert self.broker_info is not None
        bid = self.broker_info.broker_id
        self._broker_epoch = -1
        attempt = 0
        while True:
            try:
                # KIP-966's flag, to controllers that know it (an older one registers us as clean).
                unclean = self.unclean_shutdown and (await self._connected()).version >= ELR_RPC_VERSION
                unclean = unclean and not injected_bugs.on("unclean_shutdown_ignored")
                body = enc_register(self.broker_info, unclean)
                answer = dec_register_response(await self._call("register_broker", body))
                if not isinstance(answer, Errors):
                    # Reported: the controller took this broker out of every ISR and ELR.
                    self.unclean_shutdown = False
                    self._broker_epoch = answer
                    self.registrations += 1
                    log.info("broker registered with the controller id=%d epoch=%d", bid, answer)
                    return
                log.error("controller refused to register broker %d: %s", bid, answer.name)
            except _UNREACHABLE as e:
                self._failed("register_broker", e)
            except ClusterMismatchError as e:
                if not self._started:
                    raise
                self._failed("register_broker", e)
            except (RpcRemoteError, WireError) as e:
                self._failed("register_broker", e)
            await asyncio.sleep(self._backoff(attempt))
            attempt += 1

    def _incarnation_gone(self, epoch: int) -> None:
        """The controller refused ``epoch``: register again, unless that
        epoch is already history (a newer registration is done or running)."""
        if epoch == self._broker_epoch:
            self._reregister.set()

    async def _heartbeat_loop(self) -> None:
        assert self.broker_info is not None
        bid = self.broker_info.broker_id
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.heartbeat_interval_ms / 1000):
                    await self._reregister.wait()
            if not self._reregister.is_set():
                epoch = self._broker_epoch
                try:
                    err = dec_heartbeat_response(await self._call("heartbeat", enc_broker_epoch(bid, epoch)))
                except (*_UNREACHABLE, ClusterMismatchError, RpcRemoteError, WireError) as e:
                    self._failed("heartbeat", e)
                    continue
                if err == Errors.NONE:
                    self.heartbeats_answered += 1
                if err not in _REREGISTER:
                    if err != Errors.NONE:
                        log.warning("heartbeat answered %s", err.name)
                    continue
                log.warning(
                    "controller no longer knows this broker's incarnation id=%d epoch=%d (%s): registering again",
                    bid,
                    epoch,
                    err.name,
                )
            self._reregister.clear()
            await self._register()
            # The broker restarts its role: every partition's role comes from
            # the snapshots that follow (the controller moved its leaderships).
            self._notify()

    # -------------------------------------------------------------- polling

    async def _poll(self, version: int, wait_ms: int) -> MetadataSnapshot | None:
        """One metadata_poll: a new snapshot, or None when unchanged; raises
        _PollFailed when it got no usable answer."""
        try:
            resp = await self._call(
                "metadata_poll", enc_poll(version, wait_ms), timeout_ms=wait_ms + self.request_timeout_ms
            )
            return dec_poll_response(resp)
        except ClusterMismatchError as e:
            if not self._started:
                raise
            self._failed("metadata_poll", e)
        except (*_UNREACHABLE, RpcRemoteError, WireError) as e:
            self._failed("metadata_poll", e)
        raise _PollFailed

    async def _poll_loop(self) -> None:
        attempt = 0
        while True:
            try:
                snapshot = await self._poll(self._version, self.poll_wait_ms)
            except _PollFailed:
                await asyncio.sleep(self._backoff(attempt))
                attempt += 1
                continue
            attempt = 0
            if snapshot is not None:
                self._adopt(snapshot)

    async def alter_partition(
        self, broker_id: int, tp: TopicIdPartition, leader_epoch: int, partition_epoch: int, isr: tuple[int, ...]
    ) -> PartitionInfo | Errors:
        """Kafka's AlterPartition for this broker.  A committed change is
        also applied to this view at once (the next snapshot has it too), so
        the leader's next request carries the new partition epoch.  Errors:
        the controller's (see :meth:`partlog.controller.core.Controller.alter_partition`),
        or REQUEST_TIMED_OUT / COORDINATOR_NOT_AVAILABLE (retriable) when it
        cannot be reached or this broker is between registrations."""
        if self.broker_info is None or broker_id != self.broker_info.broker_id:
            return Errors.BROKER_ID_NOT_REGISTERED
        if self._broker_epoch < 0:
            return Errors.COORDINATOR_NOT_AVAILABLE
        epoch = self._broker_epoch
        try:
            answer = dec_alter_partition_response(
                await self._call(
                    "alter_partition",
                    enc_alter_partition(broker_id, epoch, tp, leader_epoch, partition_epoch, isr),
                )
            )
        except RpcTimeoutError:
            return Errors.REQUEST_TIMED_OUT
        except (*_UNREACHABLE, ClusterMismatchError) as e:
            self._failed("alter_partition", e)
            return Errors.COORDINATOR_NOT_AVAILABLE
        except (RpcRemoteError, WireError) as e:
            self._failed("alter_partition", e)
            return Errors.UNKNOWN_SERVER_ERROR
        if isinstance(answer, Errors):
            if answer in _REREGISTER:
                self._incarnation_gone(epoch)
            return answer
        committed = answer
        self._apply_partition(tp, committed)
        return committed

    async def allocate_producer_ids(self, broker_id: int) -> ProducerIdBlock | Errors:
        """The next producer-id block for this broker, or the retriable error
        why none can be had now (controller unreachable, between
        registrations): the caller retries later
        (``ProducerIdAllocator.block_failed``)."""
        if self.broker_info is None or broker_id != self.broker_info.broker_id or self._broker_epoch < 0:
            return Errors.COORDINATOR_NOT_AVAILABLE
        epoch = self._broker_epoch
        try:
            answer = dec_pid_response(await self._call("allocate_producer_ids", enc_broker_epoch(broker_id, epoch)))
        except (*_UNREACHABLE, ClusterMismatchError, RpcRemoteError, WireError) as e:
            self._failed("allocate_producer_ids", e)
            return Errors.COORDINATOR_NOT_AVAILABLE
        if isinstance(answer, Errors):
            log.warning("controller refused a producer-id block: %s", answer.name)
            if answer in _REREGISTER:
                self._incarnation_gone(epoch)
            return Errors.COORDINATOR_NOT_AVAILABLE
        block = answer
        if block.assigned_broker_id != broker_id:
            log.error("controller answered a bad producer-id block %s", block)
            return Errors.COORDINATOR_NOT_AVAILABLE
        return block

    # --------------------------------------------------------------- admin

    @overload
    async def create_topics(
        self,
        topics: Mapping[str, tuple[int, int]],
        configs: Mapping[str, Mapping[str, str]] | None = None,
        *,
        assignments: None = None,
        timeout_ms: None = None,
    ) -> dict[str, TopicInfo | Errors]: ...

    @overload
    async def create_topics(
        self,
        topics: Mapping[str, tuple[int, int]],
        configs: Mapping[str, Mapping[str, str]] | None = None,
        *,
        assignments: Mapping[str, Sequence[Assignment]] | None = None,
        timeout_ms: int | None = None,
    ) -> dict[str, TopicInfo | Errors | Refused]: ...

    async def create_topics(
        self,
        topics: Mapping[str, tuple[int, int]],
        configs: Mapping[str, Mapping[str, str]] | None = None,
        *,
        assignments: Mapping[str, Sequence[Assignment]] | None = None,
        timeout_ms: int | None = None,
    ) -> dict[str, TopicInfo | Errors | Refused] | dict[str, TopicInfo | Errors]:
        """Create topics ``{name: (partitions, replication_factor)}``, with
        the config overrides ``configs`` names (INVALID_CONFIG when bad) and
        the manual replica ``assignments`` of those that have them (their
        shape -1, -1; see :mod:`partlog.controller.topic_create`), in one
        controller transaction.

        Per topic: the TopicInfo as created (or as it exists, when it exists
        with the same shape), or the error (TOPIC_ALREADY_EXISTS,
        INVALID_PARTITIONS, INVALID_REPLICATION_FACTOR, INVALID_REQUEST for a
        bad name, a Refused with Kafka's message; COORDINATOR_NOT_AVAILABLE /
        REQUEST_TIMED_OUT when the controller cannot be reached: retry).  A
        Refused only comes with assignments or ``timeout_ms`` (hence the
        overloads; past ``timeout_ms``: REQUEST_TIMED_OUT naming it).  A
        controller older than RPC version 3 cannot take assignments: those
        topics are UNSUPPORTED_VERSION here, the others go on.  Returns once
        this view holds the created topics; the call waits at most
        ``timeout_ms`` (None: ``request_timeout_ms``) for the controller."""
        refused: dict[str, TopicInfo | Errors | Refused] = {}
        encoded = None
        if assignments:
            version = await self._controller_version()
            if version is not None and version < ASSIGNMENTS_RPC_VERSION:
                why = f"the controller speaks RPC version {version}: manual assignments need {ASSIGNMENTS_RPC_VERSION}"
                refused = dict.fromkeys(assignments, Refused(Errors.UNSUPPORTED_VERSION, why))
                topics = {n: shape for n, shape in topics.items() if n not in assignments}
            else:
                encoded = enc_assignments(assignments)
        if not topics:
            return refused
        body = enc_create_topics(topics, configs, encoded)
        out = await self._admin("create_topics", body, dec_create_topics_response, timeout_ms)
        if out == Errors.REQUEST_TIMED_OUT and timeout_ms is not None:
            late = Refused(out, f"not done within {timeout_ms} ms: the topic may still be created")
            return {**dict.fromkeys(topics, late), **refused}
        if isinstance(out, Errors):
            return {**dict.fromkeys(topics, out), **refused}
        created = {t.topic_id for t in out.values() if isinstance(t, TopicInfo)}
        await self._view_until(lambda: created <= self._topics.keys())
        return {**out, **refused}

    async def _controller_version(self) -> int | None:
        """The RPC version of the connection to the controller (None: it cannot be reached now)."""
        try:
            return (await self._connected()).version
        except (*_UNREACHABLE, ClusterMismatchError):
            return None

    async def create_partitions(
        self, topics: Mapping[str, NewPartitions], validate_only: bool
    ) -> dict[str, TopicInfo | Refused]:
        """Grow topics (see :class:`~partlog.controller.partition_admin.PartitionAdmin`);
        a controller that cannot be reached answers every topic with its
        retriable error.  Returns once this view holds the new partitions."""
        body = enc_create_partitions(topics, validate_only)
        out = await self._admin("create_partitions", body, dec_create_partitions_response)
        if isinstance(out, Errors):
            return dict.fromkeys(topics, Refused(out, f"the controller did not answer: {out.name}"))
        grown = {t.topic_id: t.num_partitions for t in out.values() if isinstance(t, TopicInfo)}
        if not validate_only:
            await self._view_grown(grown)
        return out

    async def alter_reassignments(
        self, changes: Mapping[tuple[str, int], tuple[int, ...] | None]
    ) -> dict[tuple[str, int], Refused | None]:
        """Start, replace or cancel reassignments (see
        :class:`~partlog.controller.reassignment.ReassignmentAdmin`); a
        controller that cannot be reached answers every partition with its
        retriable error.  Returns once this view holds the controller's
        version after the change."""
        out = await self._admin(
            "alter_reassignments", enc_alter_reassignments(changes), dec_alter_reassignments_response
        )
        if isinstance(out, Errors):
            return dict.fromkeys(changes, Refused(out, f"the controller did not answer: {out.name}"))
        version, answers = out
        await self._view_until(lambda: self._version >= version)
        return answers

    async def list_reassignments(self, partitions: Iterable[tuple[str, int]] | None) -> list[Reassignment]:
        """The reassignments in progress (see
        :class:`~partlog.controller.reassignment.ReassignmentAdmin`), as the
        controller holds them; when it cannot be reached, as this view last
        saw them (logged)."""
        asked = None if partitions is None else list(partitions)
        out = await self._admin("list_reassignments", enc_list_reassignments(asked), dec_list_reassignments_response)
        if isinstance(out, Errors):
            log.warning("list_reassignments: the controller did not answer (%s): answering from this view", out.name)
            return listed(self.topics(), asked)
        return out

    async def delete_topics(self, names: list[str]) -> dict[str, uuid.UUID | Errors]:
        """Delete topics by name.  Per name: the deleted topic's id, or the
        error (UNKNOWN_TOPIC_OR_PARTITION; COORDINATOR_NOT_AVAILABLE /
        REQUEST_TIMED_OUT when the controller cannot be reached).  Returns
        once this view no longer holds them (or after ``request_timeout_ms``)."""
        out = await self._admin("delete_topics", enc_delete_topics(names), dec_delete_topics_response)
        if isinstance(out, Errors):
            return dict.fromkeys(names, out)
        gone = {t for t in out.values() if isinstance(t, uuid.UUID)}
        await self._view_until(lambda: not gone & self._topics.keys())
        return out

    async def alter_topic_configs(
        self, changes: Mapping[str, ConfigChange], *, validate_only: bool
    ) -> dict[str, tuple[Errors, str | None]]:
        """Alter topics' config overrides (see :meth:`Controller.alter_topic_configs`);
        returns once this view holds the controller's version after the change."""
        answer = await self._admin(
            "alter_topic_configs", enc_alter_topic_configs(changes, validate_only), dec_alter_topic_configs_response
        )
        if isinstance(answer, Errors):
            return dict.fromkeys(changes, (answer, None))
        version, out = answer
        await self._view_until(lambda: self._version >= version)
        return out

    async def admin_call(self, method: str, body: Any, decode: Callable[[Any], T]) -> T | Errors:
        """One admin RPC of a module beside this one (scram_client), errors as ``_admin``'s."""
        return await self._admin(method, body, decode)

    async def _admin(
        self, method: str, body: Any, decode: Callable[[Any], T], timeout_ms: int | None = None
    ) -> T | Errors:
        """An admin call's decoded answer, or the error that stands for all
        it asked (controller unreachable or slow: retriable; refused:
        INVALID_REQUEST; an answer that does not decode: UNKNOWN_SERVER_ERROR).
        ``timeout_ms``: the call's bound (None: ``request_timeout_ms``)."""
        try:
            return decode(await self._call(method, body, timeout_ms))
        except WireError as e:
            log.error("%s: bad answer: %s", method, e)
            return Errors.UNKNOWN_SERVER_ERROR
        except RpcTimeoutError:
            return Errors.REQUEST_TIMED_OUT
        except _UNREACHABLE:
            return Errors.COORDINATOR_NOT_AVAILABLE
        except RpcRemoteError as e:
            log.error("%s refused: %s", method, e)
            return Errors.INVALID_REQUEST


class _PollFailed(Exception):
    """A metadata_poll got no answer (the loop backs off and retries)."""
