"""The controller's asyncio shell: the RPC server around :class:`partlog.controller.core.Controller`.

It moves bytes, keeps time and runs the controller's LMDB writes in a
thread; every decision is the sans-IO core's.  One asyncio lock makes the
controller single-writer: calls run one at a time, and after each one the
shell logs the controller's events and, if the version moved, publishes the
new snapshot (encoded once, shared by every long-poll).

RPC methods (msgpack bodies; Kafka error codes travel as ``"error"``; a body
of the wrong shape is answered with the RPC error BAD_REQUEST naming the
field)::

    register_broker       {"broker_id", "az", "host", "port"}
                       -> {"error", "broker_epoch"}
    heartbeat             {"broker_id", "broker_epoch"}
                       -> {"error", "version"}
    metadata_poll         {"version", "max_wait_ms"}
                       -> {"version", "brokers": [[id, az, host, port]],
                           "topics": [[name, topic_id, [[leader, leader_epoch,
                                      replicas, isr, partition_epoch]]]]}
                          at once when the controller's version differs from
                          "version"; else after a change, or {"version"} alone
                          after max_wait_ms (capped at METADATA_POLL_WAIT_MS_MAX)
    alter_partition       {"broker_id", "broker_epoch", "topic_id", "partition",
                           "leader_epoch", "partition_epoch", "isr"}
                       -> {"error", "partition": [leader, ...] or nil}
    allocate_producer_ids {"broker_id", "broker_epoch"}
                       -> {"error", "broker_id", "first_producer_id", "size"}
    create_topics         {"topics": [[name, partitions, replication_factor]],
                           "configs"?: [[name, [[config, value]]]]}
                       -> {"version", "topics": [[name, error, topic or nil]]}
    create_partitions     see :mod:`partlog.controller.partition_admin`
    alter_reassignments   see :mod:`partlog.controller.reassignment`
    list_reassignments    see :mod:`partlog.controller.reassignment`
    alter_topic_configs   {"topics": [[name, replace, [[op, config, value or nil]]]],
                           "validate_only"?}
                       -> {"version", "topics": [[name, error, message or nil]]}
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import ssl as ssl_module
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any, TypeVar

from partlog.controller.acls import AclService
from partlog.controller.cluster_meta import NO_LEADER, PartitionInfo, TopicInfo
from partlog.controller.core import Controller, ControllerConfig
from partlog.controller.dynamic_configs import CONTROLLER_DYNAMIC_CONFIG_SCHEMAS, DynamicConfigService
from partlog.controller.elr import ELR_RPC_VERSION
from partlog.controller.model import (
    BrokerFenced,
    BrokerRegistered,
    IsrChanged,
    LeaderChanged,
    MetadataSnapshot,
    TopicDeleted,
)
from partlog.controller.partition_admin import (
    NewPartitions,
    dec_create_partitions,
    enc_create_partitions_response,
)
from partlog.controller.reassignment import (
    LISTS_RPC_VERSION,
    dec_alter_reassignments,
    dec_list_reassignments,
    enc_alter_reassignments_response,
    enc_list_reassignments_response,
    listed,
    reassigning,
    without_lists,
)
from partlog.controller.rules import Refused
from partlog.controller.scram_store import CONTROLLER_SCRAM_SCHEMAS, scram_handlers
from partlog.controller.topic_create import ASSIGNMENTS_RPC_VERSION, NewTopic, dec_create_topics_assignments
from partlog.controller.wire import (
    dec_alter_partition,
    dec_alter_topic_configs,
    dec_broker_epoch,
    dec_create_topics,
    dec_create_topics_configs,
    dec_delete_topics,
    dec_poll,
    dec_register,
    dec_unclean_shutdown,
    enc_alter_partition_response,
    enc_alter_topic_configs_response,
    enc_create_topics_response,
    enc_delete_topics_response,
    enc_heartbeat_response,
    enc_pid_response,
    enc_register_response,
    enc_snapshot,
)
from partlog.kafka.errors import Errors
from partlog.rpc.frame import RpcError, RpcErrorCode
from partlog.rpc.handlers import peer_version
from partlog.rpc.methods import CONTROLLER_SCHEMAS
from partlog.rpc.server import RpcServer
from partlog.rpc.wire import WireError
from partlog.runtime import SYSTEM_CLOCK, SYSTEM_ENTROPY, Clock, Entropy

__all__ = ["METADATA_POLL_WAIT_MS_MAX", "ControllerServer"]

log = logging.getLogger(__name__)

# A parked metadata_poll answers "unchanged" after at most this long, as
# Kafka's fetch.max.wait.ms bounds a long-poll; clients poll again.
METADATA_POLL_WAIT_MS_MAX = 30_000
# The tick fences brokers: its period bounds how late after the session
# timeout that happens (a quarter of the timeout), and a fraction of a second
# is plenty for KRaft's 9 s default.
TICK_INTERVAL_MS_MAX = 250
TICK_INTERVAL_MS_MIN = 10

T = TypeVar("T")


class ControllerServer:
    """Serves one :class:`Controller` over the RPC.  ``await start()``, then
    serve until ``await stop()``; ``.port`` is the bound port after start.

    ``secret`` and ``ssl`` are as :class:`partlog.rpc.server.RpcServer`'s;
    ``clock`` times heartbeats and sessions, ``entropy`` makes the cluster
    and topic ids (the real ones by default; the simulation hands in its own)."""

    def __init__(
        self,
        config: ControllerConfig,
        host: str = "127.0.0.1",
        port: int = 0,
        secret: bytes | None = None,
        ssl: ssl_module.SSLContext | None = None,
        clock: Clock = SYSTEM_CLOCK,
        entropy: Entropy = SYSTEM_ENTROPY,
    ) -> None:
        self.config = config
        self.host = host
        self.port = port
        self._secret = secret
        self._ssl = ssl
        self.clock = clock
        self.entropy = entropy
        self._controller: Controller | None = None
        self._server: RpcServer | None = None
        self._lock = asyncio.Lock()
        self._tick_task: asyncio.Task[None] | None = None
        self._published_version = -1
        self._published: dict[str, Any] = {}
        # The same for version 1 peers, without a move's lists (upgrades.md).
        self._published_v1: dict[str, Any] = {}
        self._published_v2: dict[str, Any] = {}  # without the ELR (before ELR_RPC_VERSION)
        # Set and replaced on every published change: parked polls wait on it.
        self._changed = asyncio.Event()
        self.tick_interval_ms = max(
            TICK_INTERVAL_MS_MIN, min(config.broker_session_timeout_ms // 4, TICK_INTERVAL_MS_MAX)
        )

    @property
    def controller(self) -> Controller:
        """The core (for inspection; calls from outside must not race the shell)."""
        assert self._controller is not None, "not started"
        return self._controller

    async def start(self) -> None:
        assert self._controller is None, "started twice"
        now_ms = self.clock.wall_ms()

        def open_state() -> tuple[Controller, AclService, DynamicConfigService]:
            c = Controller(self.config, now_ms=now_ms, new_uuid=self.entropy.uuid4)
            try:
                # The ACLs (partlog.controller.acls) and the dynamic configs
                # keep their own LMDB and lock.
                data_dir = os.fspath(self.config.data_dir)
                acls = AclService(os.path.join(data_dir, "acls"))
                return c, acls, DynamicConfigService(os.path.join(data_dir, "dynamic_configs"))
            except BaseException:
                c.close()
                raise

        controller, acls, dynamic_configs = await asyncio.to_thread(open_state)
        self._controller = controller
        self._publish()
        handlers: dict[str, Callable[[Any], Awaitable[Any]]] = {
            **acls.handlers(),
            **dynamic_configs.handlers(),  # BROKER and GROUP resources' configs
            **scram_handlers(controller.scram),  # KIP-554's credentials
            "register_broker": self._handle_register,
            "heartbeat": self._handle_heartbeat,
            "metadata_poll": self._handle_metadata_poll,
            "alter_partition": self._handle_alter_partition,
            "allocate_producer_ids": self._handle_allocate_producer_ids,
            "create_topics": self._handle_create_topics,
            "create_partitions": self._handle_create_partitions,
            "alter_reassignments": self._handle_alter_reassignments,
            "list_reassignments": self._handle_list_reassignments,
            "delete_topics": self._handle_delete_topics,
            "alter_topic_configs": self._handle_alter_topic_configs,
        }
        # The challenge names the cluster: brokers and walmgr refuse another's controller.
        self._server = RpcServer(
            handlers,
            host=self.host,
            port=self.port,
            secret=self._secret,
            ssl=self._ssl,
            cluster_id=controller.cluster_id,
            schemas={**CONTROLLER_SCHEMAS, **CONTROLLER_SCRAM_SCHEMAS, **CONTROLLER_DYNAMIC_CONFIG_SCHEMAS},
            clock=self.clock,
            entropy=self.entropy,
        )
        try:
            await self._server.start()
        except BaseException:
            await asyncio.to_thread(controller.close)
            self._controller = None
            raise
        self.port = self._server.port
        self._tick_task = asyncio.create_task(self._tick_loop())
        log.info(
            "controller started port=%d data_dir=%s version=%d session_timeout_ms=%d",
            self.port,
            self.config.data_dir,
            self._controller.version,
            self.config.broker_session_timeout_ms,
        )

    async def stop(self) -> None:
        """Stop serving (parked polls and pending calls fail on the client
        side with a lost connection) and close the controller's LMDB."""
        if self._tick_task is not None:
            self._tick_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._tick_task
            self._tick_task = None
        if self._server is not None:
            await self._server.close()
            self._server = None
        async with self._lock:
            if self._controller is not None:
                await asyncio.to_thread(self._controller.close)
                self._controller = None
        log.info("controller stopped port=%d", self.port)

    # ------------------------------------------------------------ plumbing

    async def _run(self, fn: Callable[[Controller], T], *, write: bool = True) -> T:
        """Run ``fn(controller)`` as the only writer (in a thread when it may
        write: LMDB fsyncs), then log its events and publish a new version."""
        async with self._lock:
            c = self.controller
            try:
                if not write:
                    return fn(c)
                task = asyncio.ensure_future(asyncio.to_thread(fn, c))
                try:
                    return await asyncio.shield(task)
                except asyncio.CancelledError:
                    # The thread runs on: hold the lock (so stop() cannot
                    # close LMDB under it) until it is done.
                    await asyncio.wait([task])
                    raise
            finally:
                self._log_events(c)
                self._publish()

    def _publish(self) -> None:
        c = self.controller
        if c.version == self._published_version:
            return
        # Encoded once per version; every poller shares it.
        snapshot = c.snapshot()
        body = enc_snapshot(snapshot)
        self._published_version = c.version
        self._published = body
        self._published_v1 = self._published_v2 = body
        if any(p.elr for t in snapshot.topics for p in t.partitions):
            snapshot = _without_elr(snapshot)
            self._published_v1 = self._published_v2 = enc_snapshot(snapshot)
        if any(reassigning(p) for t in snapshot.topics for p in t.partitions):
            self._published_v1 = enc_snapshot(_without_lists(snapshot))
        self._changed.set()
        self._changed = asyncio.Event()

    def _log_events(self, c: Controller) -> None:
        for e in c.take_events():
            if isinstance(e, LeaderChanged):
                if e.leader == NO_LEADER:
                    log.warning(
                        "partition offline topic=%s partition=%d epoch=%d isr=%s reason=%s",
                        e.topic,
                        e.partition,
                        e.leader_epoch,
                        list(e.isr),
                        e.reason,
                    )
                else:
                    log.info(
                        "leader elected topic=%s partition=%d leader=%d epoch=%d reason=%s unclean=%s",
                        e.topic,
                        e.partition,
                        e.leader,
                        e.leader_epoch,
                        e.reason,
                        e.unclean,
                    )
            elif isinstance(e, IsrChanged):
                log.info(
                    "isr changed topic=%s partition=%d isr=%s partition_epoch=%d reason=%s",
                    e.topic,
                    e.partition,
                    list(e.isr),
                    e.partition_epoch,
                    e.reason,
                )
            elif isinstance(e, TopicDeleted):
                log.warning("topic deleted name=%s id=%s", e.topic, e.topic_id)
            elif isinstance(e, BrokerFenced):
                log.warning("broker fenced id=%d epoch=%d reason=%s", e.broker_id, e.broker_epoch, e.reason)
            elif isinstance(e, BrokerRegistered):
                log.info(
                    "broker registered id=%d epoch=%d az=%s host=%s port=%d",
                    e.broker_id,
                    e.broker_epoch,
                    e.az,
                    e.host,
                    e.port,
                )

    async def _tick_loop(self) -> None:
        while True:
            await asyncio.sleep(self.tick_interval_ms / 1000)
            try:
                await self._run(lambda c: c.tick(self.clock.wall_ms()))
            except Exception:
                # A failed write changed nothing; the next tick tries again.
                log.exception("controller tick failed")

    # ------------------------------------------------------------- handlers

    async def _handle_register(self, body: Any) -> Any:
        info, unclean = _decode(dec_register, body), _decode(dec_unclean_shutdown, body)
        listeners = info.kafka_listeners
        epoch = await self._run(
            lambda c: c.register_broker(
                info.broker_id, info.az, info.host, info.port, self.clock.wall_ms(), info.kafka_port, listeners, unclean
            )
        )
        return enc_register_response(epoch)

    async def _handle_heartbeat(self, body: Any) -> Any:
        bid, epoch = _decode(lambda b: dec_broker_epoch(b, "heartbeat"), body)
        err = await self._run(lambda c: c.heartbeat(bid, epoch, self.clock.wall_ms()), write=False)
        return enc_heartbeat_response(err, self._published_version)

    async def _handle_metadata_poll(self, body: Any) -> Any:
        version, wait_ms = _decode(dec_poll, body)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + min(wait_ms, METADATA_POLL_WAIT_MS_MAX) / 1000
        while self._published_version == version:
            changed = self._changed
            left = deadline - loop.time()
            if left <= 0:
                return {"version": version}
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(left):
                    await changed.wait()
        if peer_version() >= ELR_RPC_VERSION:
            return self._published
        return self._published_v2 if peer_version() >= LISTS_RPC_VERSION else self._published_v1

    async def _handle_alter_partition(self, body: Any) -> Any:
        bid, epoch, tp, leader_epoch, partition_epoch, isr = _decode(dec_alter_partition, body)
        answer = await self._run(lambda c: c.alter_partition(bid, epoch, tp, leader_epoch, partition_epoch, isr))
        if isinstance(answer, PartitionInfo) and peer_version() < ELR_RPC_VERSION:
            answer = replace(answer, elr=())
        if isinstance(answer, PartitionInfo) and peer_version() < LISTS_RPC_VERSION:
            answer = without_lists(answer)
        return enc_alter_partition_response(answer)

    async def _handle_allocate_producer_ids(self, body: Any) -> Any:
        bid, epoch = _decode(lambda b: dec_broker_epoch(b, "allocate_producer_ids"), body)
        answer = await self._run(lambda c: c.allocate_producer_ids(bid, epoch))
        if not isinstance(answer, Errors):
            log.info("producer ids allocated broker=%d first=%d size=%d", bid, answer.first_producer_id, answer.size)
        return enc_pid_response(answer, bid)

    async def _handle_create_topics(self, body: Any) -> Any:
        wanted = _decode(dec_create_topics, body)
        configs = _decode(dec_create_topics_configs, body)
        assigned = _decode(dec_create_topics_assignments, body)
        topics = [
            NewTopic(name, partitions, rf, dict(configs.get(name, ())), assigned.get(name))
            for name, partitions, rf in wanted
        ]
        # One transaction for the whole request: one fsync and one new
        # version (one snapshot for every poller), not one per topic.
        answers = await self._run(lambda c: c.create_topics(topics))
        for t in topics:
            a = answers[t.name]
            if isinstance(a, TopicInfo):
                log.info("topic created or present name=%s id=%s partitions=%d", t.name, a.topic_id, a.num_partitions)
            else:
                log.info("create topic refused name=%.300s error=%s", t.name, _error_name(a))
        messages = peer_version() >= ASSIGNMENTS_RPC_VERSION
        return enc_create_topics_response(
            self._published_version, [(t.name, answers[t.name]) for t in topics], messages
        )

    async def _handle_create_partitions(self, body: Any) -> Any:
        wanted, validate_only = _decode(dec_create_partitions, body)
        answers = []
        for name, n in wanted.items():
            answers.append((name, await self._create_partitions(name, n, validate_only)))
        return enc_create_partitions_response(self._published_version, answers)

    async def _create_partitions(self, name: str, n: NewPartitions, validate_only: bool) -> TopicInfo | Refused:
        answer = await self._run(lambda c: c.create_partitions(name, n.count, n.assignments, validate_only))
        if isinstance(answer, Refused):
            log.info("create partitions refused name=%.300s error=%s", name, answer.error.name)
        elif not validate_only:
            log.info("topic grown name=%s id=%s partitions=%d", name, answer.topic_id, answer.num_partitions)
        return answer

    async def _handle_alter_reassignments(self, body: Any) -> Any:
        changes = _decode(dec_alter_reassignments, body)
        answer = await self._run(lambda c: c.alter_reassignments(changes))
        # Kafka's one line per request; each partition's change is logged as its event.
        refused = sum(r is not None for r in answer.values())
        log.info("altered %d of %d partition reassignment(s)", len(answer) - refused, len(answer))
        return enc_alter_reassignments_response(self._published_version, answer)

    async def _handle_list_reassignments(self, body: Any) -> Any:
        partitions = _decode(dec_list_reassignments, body)
        return enc_list_reassignments_response(
            await self._run(lambda c: listed(c.snapshot().topics, partitions), write=False)
        )

    async def _handle_delete_topics(self, body: Any) -> Any:
        names = _decode(dec_delete_topics, body)
        answer = await self._run(lambda c: c.delete_topics(names))
        return enc_delete_topics_response(answer)

    async def _handle_alter_topic_configs(self, body: Any) -> Any:
        changes, validate_only = _decode(dec_alter_topic_configs, body)
        answer = await self._run(lambda c: c.alter_topic_configs(changes, validate_only=validate_only))
        if not validate_only:
            for name, (err, _) in answer.items():
                log.info("topic configs altered name=%.300s error=%s", name, err.name)
        return enc_alter_topic_configs_response(self._published_version, answer)


def _error_name(a: Errors | Refused) -> str:
    return a.error.name if isinstance(a, Refused) else a.name


def _decode(fn: Callable[[Any], T], body: Any) -> T:
    try:
        return fn(body)
    except WireError as e:
        raise RpcError(RpcErrorCode.BAD_REQUEST, str(e)) from e


def _without_elr(s: MetadataSnapshot) -> MetadataSnapshot:
    """``s`` for peers before version 3: partitions without their ELR."""
    topics = [replace(t, partitions=tuple(replace(p, elr=()) for p in t.partitions)) for t in s.topics]
    return s._replace(topics=topics)


def _without_lists(s: MetadataSnapshot) -> MetadataSnapshot:
    """``s`` for version 1 peers: moving partitions without their lists."""
    topics = [
        replace(t, partitions=tuple(map(without_lists, t.partitions))) if any(map(reassigning, t.partitions)) else t
        for t in s.topics
    ]
    return s._replace(topics=topics)
