"""Partition reassignment through the controller RPC (a real server on
loopback, real LMDB): ControllerMetadata implements ReassignmentAdmin, a
broker's AlterPartition completes the move, and a malformed request is
refused (the rules themselves: tests/unit/test_reassignment.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from partlog.controller.cluster_meta import PartitionInfo, TopicInfo
from partlog.controller.reassignment import NO_REASSIGNMENT_MESSAGE, Reassignment, ReassignmentAdmin
from partlog.controller.rules import Refused
from partlog.controller.server import ControllerServer
from partlog.kafka.errors import Errors
from partlog.kafka.records import TopicIdPartition
from partlog.rpc.client import RpcClient, RpcRemoteError
from tests.integration.test_controller_rpc import client, run, until
from tests.unit.test_controller import config


@pytest.mark.timeout(60)
def test_reassignment_through_the_rpc(tmp_path: Path) -> None:
    async def main() -> None:
        server = ControllerServer(config(tmp_path / "ctl"), secret=b"s3cret")
        await server.start()
        brokers = {b: client(server, b) for b in (1, 2, 3)}
        admin = client(server, None)
        assert isinstance(admin, ReassignmentAdmin)
        try:
            for b in brokers.values():
                await b.start()
            await admin.start()
            created = (await admin.create_topics({"t": (1, 1)}))["t"]
            assert isinstance(created, TopicInfo)
            old = created.partitions[0].leader
            new = next(b for b in (1, 2, 3) if b != old)
            answers = await admin.alter_reassignments({("t", 0): (new,), ("t", 5): (1,), ("x", 0): None})
            assert answers == {
                ("t", 0): None,
                ("t", 5): Refused(Errors.UNKNOWN_TOPIC_OR_PARTITION, "Unable to find partition t:5."),
                ("x", 0): Refused(Errors.UNKNOWN_TOPIC_OR_PARTITION, "Unable to find a topic named x."),
            }
            # Answered once this view holds the change.
            p = admin.topic("t").partitions[0]  # type: ignore[union-attr]
            assert p.replicas == (new, old) and p.adding == (new,) and p.removing == (old,)
            listed = await admin.list_reassignments(None)
            assert listed == [Reassignment("t", 0, (new, old), (new,), (old,))]
            assert await admin.list_reassignments([("t", 0), ("t", 9), ("nope", 0)]) == listed
            # The leader takes the new replica into the ISR: done, and it hands over.
            leader = brokers[old]
            tp = TopicIdPartition(created.topic_id, 0)
            await until(lambda: leader.partition(tp) == p, "the leader sees the move")
            answer = await leader.alter_partition(old, tp, p.leader_epoch, p.partition_epoch, (new, old))
            assert answer == Errors.NEW_LEADER_ELECTED
            await until(lambda: admin.topic("t").partitions[0].replicas == (new,), "the move done")  # type: ignore[union-attr]
            done = admin.topic("t").partitions[0]  # type: ignore[union-attr]
            assert isinstance(done, PartitionInfo) and done.leader == new and done.isr == (new,)
            assert await admin.list_reassignments(None) == []
            assert await admin.alter_reassignments({("t", 0): None}) == {
                ("t", 0): Refused(Errors.NO_REASSIGNMENT_IN_PROGRESS, NO_REASSIGNMENT_MESSAGE)
            }
            # A partition named twice is a malformed body.
            rpc = await RpcClient.connect("127.0.0.1", server.port, secret=b"s3cret")
            try:
                with pytest.raises(RpcRemoteError, match="named twice"):
                    await rpc.call("alter_reassignments", {"partitions": [["t", 0, None], ["t", 0, [1]]]})
            finally:
                await rpc.close()
        finally:
            for c in (*brokers.values(), admin):
                await c.stop()
            await server.stop()

    run(main)


@pytest.mark.timeout(60)
def test_a_version_1_broker_gets_a_moving_partition_without_its_lists(tmp_path: Path) -> None:
    """e739335's brokers decode a partition of five items only: while a move
    is in progress, a version 1 connection's snapshot and AlterPartition
    answer carry the union without the lists (docs/design/upgrades.md),
    a version 2 connection's carry both."""
    import asyncio

    from partlog.controller.wire import dec_poll_response
    from partlog.rpc.frame import Kind, encode_frame
    from tests.integration.test_rpc_versions import _Peer

    async def main() -> None:
        server = ControllerServer(config(tmp_path / "ctl"))
        await server.start()
        brokers = {b: client(server, b, secret=None) for b in (1, 2)}
        try:
            for b in brokers.values():
                await b.start()
            created = (await brokers[1].create_topics({"t": (1, 1)}))["t"]
            assert isinstance(created, TopicInfo)
            old = created.partitions[0].leader
            new = 3 - old
            assert await brokers[1].alter_reassignments({("t", 0): (new,)}) == {("t", 0): None}
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            v1 = _Peer(reader, writer)
            await v1.next_frame()  # the challenge
            writer.write(encode_frame(Kind.REQUEST, 0, "hello", {"version": 1, "auth": b""}, version=1))
            assert (await v1.next_frame()).body == {"version": 1}
            writer.write(encode_frame(Kind.REQUEST, 1, "metadata_poll", {"version": -1, "max_wait_ms": 0}, version=1))
            got = await v1.next_frame()
            [raw] = got.body["topics"][0][2]
            assert len(raw) == 5 and raw[2] == [new, old]  # the union, no lists
            writer.close()
            rpc = await RpcClient.connect("127.0.0.1", server.port)
            try:
                snapshot = dec_poll_response(await rpc.call("metadata_poll", {"version": -1, "max_wait_ms": 0}))
            finally:
                await rpc.close()
            assert snapshot is not None
            moving = snapshot.topics[0].partitions[0]
            assert (moving.replicas, moving.adding, moving.removing) == ((new, old), (new,), (old,))
        finally:
            for c in brokers.values():
                await c.stop()
            await server.stop()

    run(main)
