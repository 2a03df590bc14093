"""A broker's Kafka listener reads no request before the broker's startup
ends, as Kafka's acceptors do: the port is bound first (a port in use fails
before the broker registers), but an answer given then came from a broker
missing from its own metadata.  librdkafka's admin client, told the
controller is broker 1 with no broker 1 listed, then waited for a
controller until its request timed out (CI, under load: a CreateTopics
right after the port opened hung 30 s)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from partlog.broker.server import BrokerConfig
from partlog.controller.client import ControllerMetadata
from partlog.controller.cluster_meta import BrokerInfo
from partlog.controller.core import ControllerConfig
from partlog.controller.server import ControllerServer
from partlog.node import BrokerNode, NodeConfig
from partlog.tools.local_cluster import free_ports
from partlog.wal.localdir_store import LocalDirStore
from tests.kafka_helpers import kio_answer, kio_request


async def _read_frame(reader: asyncio.StreamReader) -> bytes:
    size = int.from_bytes(await reader.readexactly(4), "big", signed=True)
    return await reader.readexactly(size)


@pytest.mark.timeout(60)
def test_a_request_sent_before_registration_is_answered_after_it(tmp_path: Path) -> None:
    async def main() -> None:
        server = ControllerServer(ControllerConfig(str(tmp_path / "ctl")))
        await server.start()
        rpc_port, kafka_port = free_ports(2)
        source = ControllerMetadata("127.0.0.1", server.port, BrokerInfo(1, "az1", "127.0.0.1", rpc_port, kafka_port))
        node = BrokerNode(
            NodeConfig(BrokerConfig(1, "az1", str(tmp_path / "b1"), port=rpc_port, sync=False), kafka_port=kafka_port),
            source,
            LocalDirStore(tmp_path / "objects", fsync=False),
        )
        writer = None
        try:
            await source.connect(timeout_ms=5_000)
            await node.listen()
            reader, writer = await asyncio.open_connection("127.0.0.1", kafka_port)
            writer.write(kio_request(3, 1, 7, {"topics": None}))
            await writer.drain()
            # Not registered yet: the controller knows no broker.
            assert server.controller.registration(1) is None
            await source.start()
            await node.start()
            answer = kio_answer(3, 1, await asyncio.wait_for(_read_frame(reader), 30))
            assert answer.controller_id == 1
            assert [b.node_id for b in answer.brokers] == [1]
        finally:
            if writer is not None:
                writer.close()
            await node.stop()
            await source.stop()
            await server.stop()

    asyncio.run(main())
