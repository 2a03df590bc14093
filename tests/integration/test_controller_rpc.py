"""The embedded controller's asyncio server and its clients over real TCP
(the sans-IO core is in tests/unit/test_controller.py).

pytest-asyncio is not a dependency: async tests run their own ``asyncio.run``.
No test asserts on time: they wait for conditions with bounded polling."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from partlog.controller.client import ControllerMetadata
from partlog.controller.cluster_meta import BrokerInfo, MetadataSource, PartitionInfo, TopicInfo
from partlog.controller.server import ControllerServer
from partlog.kafka.errors import Errors
from partlog.kafka.producer_ids import ProducerIdBlock
from partlog.kafka.records import TopicIdPartition
from partlog.rpc.client import RpcClient, RpcRemoteError
from partlog.rpc.frame import RpcErrorCode
from tests.unit.test_controller import AZ_OF, config

WAIT_S = 20.0


async def until(cond: Callable[[], bool], what: str, timeout_s: float = WAIT_S) -> None:
    """Poll ``cond`` every 20 ms until it holds; fail after ``timeout_s``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not cond():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def run(coro: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(coro())


def client(server: ControllerServer, broker_id: int | None, **kw: Any) -> ControllerMetadata:
    info = None if broker_id is None else BrokerInfo(broker_id, AZ_OF[broker_id], "127.0.0.1", 9000 + broker_id)
    kw.setdefault("heartbeat_interval_ms", 100)
    kw.setdefault("poll_wait_ms", 2_000)
    kw.setdefault("retry_backoff_max_ms", 200)
    kw.setdefault("secret", b"s3cret")
    return ControllerMetadata(server.host, server.port, info, **kw)


@pytest.mark.timeout(60)
def test_failover_seen_by_the_other_broker(tmp_path: Path) -> None:
    async def main() -> None:
        server = ControllerServer(config(tmp_path / "ctl", broker_session_timeout_ms=1_500), secret=b"s3cret")
        await server.start()
        b1, b2 = client(server, 1), client(server, 2)
        watcher = client(server, None)
        source: MetadataSource = watcher  # mypy checks the protocol
        assert source.brokers() == []
        try:
            await b1.start()
            await b2.start()
            await watcher.start()
            assert b1.broker_epoch > 0 and b2.broker_epoch > b1.broker_epoch and watcher.broker_epoch == -1
            created = await watcher.create_topics({"orders": (2, 2), "bad/name": (1, 1), "big": (1, 3)})
            assert created["bad/name"] == Errors.INVALID_REQUEST
            assert created["big"] == Errors.INVALID_REPLICATION_FACTOR
            topic = created["orders"]
            assert isinstance(topic, TopicInfo)
            assert watcher.topic("orders") == topic  # create_topics returns once the view has it
            await until(lambda: b1.topic("orders") == topic and b2.topic("orders") == topic, "both brokers see it")
            assert await watcher.create_topics({"orders": (2, 2)}) == {"orders": topic}
            tps = [TopicIdPartition(topic.topic_id, p) for p in range(2)]
            led_by_1 = next(tp for tp in tps if b2.leader_of(tp) == 1)
            assert b2.representative(1, "az2") == 2 and b2.representative(1, "az1") == 1

            # AlterPartition through the client: the view has the new epoch at once.
            p = b1.partition(led_by_1)
            assert p is not None
            shrunk = await b1.alter_partition(1, led_by_1, p.leader_epoch, p.partition_epoch, (1,))
            assert isinstance(shrunk, PartitionInfo) and shrunk.isr == (1,)
            assert b1.partition(led_by_1) == shrunk
            grown = await b1.alter_partition(1, led_by_1, shrunk.leader_epoch, shrunk.partition_epoch, (1, 2))
            assert isinstance(grown, PartitionInfo) and grown.isr == (1, 2)
            assert await b2.alter_partition(2, led_by_1, grown.leader_epoch, grown.partition_epoch, (2,)) == (
                Errors.NOT_LEADER_OR_FOLLOWER
            )
            block = await b1.allocate_producer_ids(1)
            assert isinstance(block, ProducerIdBlock) and block.assigned_broker_id == 1 and block.size == 1000
            assert await watcher.allocate_producer_ids(1) == Errors.COORDINATOR_NOT_AVAILABLE

            seen: list[int | None] = []
            b2.add_listener(lambda: seen.append(b2.leader_of(led_by_1)))
            await b1.stop()  # broker 1 stops heartbeating
            await until(lambda: 2 in seen, "broker 2's listener sees itself leading")
            assert b2.leader_of(led_by_1) == 2 and [b.broker_id for b in b2.brokers()] == [2]
            p2 = b2.partition(led_by_1)
            assert p2 is not None and p2.leader_epoch == grown.leader_epoch + 1 and p2.isr == (2,)
            assert server.controller.leader_elections >= 1
        finally:
            for c in (b1, b2, watcher):
                await c.stop()
            await server.stop()

    run(main)


@pytest.mark.timeout(60)
def test_long_poll_wakes_on_change_and_bad_bodies_are_refused(tmp_path: Path) -> None:
    async def main() -> None:
        server = ControllerServer(config(tmp_path / "ctl"))
        await server.start()
        rpc = await RpcClient.connect("127.0.0.1", server.port)
        try:
            first = await rpc.call("metadata_poll", {"version": -1, "max_wait_ms": 0})
            assert first["topics"] == [] and first["brokers"] == []
            v = first["version"]
            assert await rpc.call("metadata_poll", {"version": v, "max_wait_ms": 0}) == {"version": v}
            # A parked poll is answered by the change, not by its 30 s wait: if
            # it were not woken it would come back "unchanged" and fail below.
            parked = asyncio.ensure_future(rpc.call("metadata_poll", {"version": v, "max_wait_ms": 30_000}))
            await asyncio.sleep(0.05)
            reg = await rpc.call("register_broker", {"broker_id": 1, "az": "az1", "host": "h", "port": 1})
            assert reg["error"] == 0 and reg["broker_epoch"] > 0
            news = await parked
            assert news["version"] != v and news["brokers"] == [[1, "az1", "h", 1, 0]]

            for method, body, field in [
                ("register_broker", {"broker_id": 1, "az": "az1", "host": "h"}, "port"),
                ("register_broker", {"broker_id": -1, "az": "az1", "host": "h", "port": 1}, "broker_id"),
                ("register_broker", {"broker_id": 1, "az": "", "host": "h", "port": 1}, "az"),
                ("register_broker", {"broker_id": 1, "az": "a", "host": "h", "port": 70000}, "port"),
                ("heartbeat", {"broker_id": 1, "broker_epoch": "x"}, "broker_epoch"),
                ("metadata_poll", {"version": 0, "max_wait_ms": -5}, "max_wait_ms"),
                ("metadata_poll", [0, 5], "metadata_poll"),
                ("alter_partition", {"broker_id": 1, "broker_epoch": 1, "topic_id": b"x"}, "topic_id"),
                ("create_topics", {"topics": [["t", 1]]}, "topics[0]"),
                ("create_topics", {"topics": [["t", 1, "2"]]}, "replication_factor"),
                ("allocate_producer_ids", {"broker_id": 1}, "broker_epoch"),
            ]:
                with pytest.raises(RpcRemoteError) as e:
                    await rpc.call(method, body)
                assert e.value.code == RpcErrorCode.BAD_REQUEST and field in e.value.message, (method, e.value)
            hb = await rpc.call("heartbeat", {"broker_id": 1, "broker_epoch": 999})
            assert hb["error"] == Errors.STALE_BROKER_EPOCH
        finally:
            await rpc.close()
            await server.stop()

    run(main)


@pytest.mark.timeout(60)
def test_controller_restart_clients_reconnect(tmp_path: Path) -> None:
    async def main() -> None:
        cfg = config(tmp_path / "ctl", broker_session_timeout_ms=2_000)
        server = ControllerServer(cfg)
        await server.start()
        port = server.port
        b1, b2 = client(server, 1, secret=None), client(server, 2, secret=None)
        try:
            await b1.start()
            await b2.start()
            created = await b1.create_topics({"t": (1, 2)})
            topic = created["t"]
            assert isinstance(topic, TopicInfo)
            tp = TopicIdPartition(topic.topic_id, 0)
            epochs = (b1.broker_epoch, b2.broker_epoch)
            pid_first = await b1.allocate_producer_ids(1)
            assert isinstance(pid_first, ProducerIdBlock)

            await server.stop()
            # Meanwhile the brokers keep their view and get retriable answers.
            p = b1.partition(tp)
            assert p is not None and b1.leader_of(tp) == p.leader
            leader = p.leader
            answer = await (b1 if leader == 1 else b2).alter_partition(
                leader, tp, p.leader_epoch, p.partition_epoch, (leader,)
            )
            assert answer in (Errors.COORDINATOR_NOT_AVAILABLE, Errors.REQUEST_TIMED_OUT)
            assert await b1.allocate_producer_ids(1) == Errors.COORDINATOR_NOT_AVAILABLE
            assert await b1.create_topics({"u": (1, 1)}) == {"u": Errors.COORDINATOR_NOT_AVAILABLE}

            server = ControllerServer(cfg, port=port)
            await server.start()
            # The same incarnations go on (epochs persisted), and the clients work again.
            created = await b2.create_topics({"u": (1, 1)})
            assert isinstance(created["u"], TopicInfo)
            await until(lambda: b1.topic("u") is not None, "broker 1 sees the topic created after the restart")
            assert (b1.broker_epoch, b2.broker_epoch) == epochs
            block = await b1.allocate_producer_ids(1)
            assert isinstance(block, ProducerIdBlock) and block.first_producer_id > pid_first.last_producer_id
            answer = await (b1 if leader == 1 else b2).alter_partition(
                leader, tp, p.leader_epoch, p.partition_epoch, (leader,)
            )
            assert isinstance(answer, PartitionInfo) and answer.isr == (leader,)
            # Heartbeats reach the new controller with the same epochs.
            n1, n2 = b1.heartbeats_answered, b2.heartbeats_answered
            await until(lambda: b1.heartbeats_answered > n1 and b2.heartbeats_answered > n2, "heartbeats")
            assert (b1.broker_epoch, b2.broker_epoch) == epochs
        finally:
            await b1.stop()
            await b2.stop()
            await server.stop()

    run(main)


@pytest.mark.timeout(60)
def test_fenced_broker_registers_again_and_listeners_hear_it(tmp_path: Path) -> None:
    async def main() -> None:
        server = ControllerServer(config(tmp_path / "ctl", broker_session_timeout_ms=400))
        await server.start()
        # Heartbeats far apart: the controller fences the broker between two.
        b1 = client(server, 1, secret=None, heartbeat_interval_ms=1_500)
        try:
            await b1.start()
            first = b1.broker_epoch
            epochs: list[int] = []
            b1.add_listener(lambda: epochs.append(b1.broker_epoch))
            await until(lambda: b1.registrations >= 2, "broker 1 registers again")
            await until(lambda: any(e > first for e in epochs), "a listener sees the new incarnation")
            assert b1.broker_epoch > first
        finally:
            await b1.stop()
            await server.stop()

    run(main)
