"""KIP-966 through the embedded controller's RPC (docs/design/elr.md): the
ELR as brokers see it, an unclean registration taking a broker out of it
before the election, and a version 2 peer served without the ELR."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from partlog.controller.cluster_meta import NO_LEADER, PartitionInfo, TopicInfo
from partlog.controller.server import ControllerServer
from partlog.kafka.records import TopicIdPartition
from partlog.rpc.frame import Kind, encode_frame
from tests.integration.test_controller_rpc import client, run, until
from tests.integration.test_rpc_versions import _Peer
from tests.unit.test_controller import config


@pytest.mark.timeout(120)
def test_an_unclean_broker_leaves_the_elr_before_the_election(tmp_path: Path) -> None:
    async def main() -> None:
        cfg = config(tmp_path / "ctl", broker_session_timeout_ms=1_000, min_insync_replicas=2)
        server = ControllerServer(cfg)
        await server.start()
        brokers = {b: client(server, b, secret=None) for b in (1, 2, 3)}
        watcher = client(server, None, secret=None)
        later = []
        try:
            for b in brokers.values():
                await b.start()
            await watcher.start()
            topic = (await watcher.create_topics({"t": (1, 3)}))["t"]
            assert isinstance(topic, TopicInfo)
            tp = TopicIdPartition(topic.topic_id, 0)

            def now() -> PartitionInfo:
                p = watcher.partition(tp)
                assert p is not None
                return p

            first, second, third = now().replicas
            # Two followers go: the ISR falls below 2, the lost one(s) join the ELR.
            await brokers[second].stop()
            await until(lambda: second not in now().isr, "the first follower fenced")
            await brokers[third].stop()
            await until(lambda: now().isr == (first,), "both followers fenced")
            assert set(now().elr) == {third} or set(now().elr) == {second, third}
            # The leader goes too: the ISR empties, everyone known to be safe is in the ELR.
            await brokers[first].stop()
            await until(lambda: now().leader == NO_LEADER, "the partition offline")
            p = now()
            assert p.isr == () and first in p.elr and third in p.elr, p
            # The leader's store lost its tail in a power loss: it registers unclean,
            # leaves the ELR, and is not elected.
            again = client(server, first, secret=None)
            again.unclean_shutdown = True
            later.append(again)
            await again.start()
            await until(lambda: first not in now().elr, "the unclean broker out of the ELR")
            assert now().leader == NO_LEADER and not again.unclean_shutdown  # reported once
            # A clean ELR member comes back and leads, ISR = {it}.
            back = client(server, third, secret=None)
            later.append(back)
            await back.start()
            await until(lambda: now().leader == third, "the ELR member elected")
            p = now()
            assert p.isr == (third,) and third not in p.elr and first not in p.elr, p
            assert server.controller.unclean_leader_elections == 0
        finally:
            for c in [*brokers.values(), *later, watcher]:
                await c.stop()
            await server.stop()

    run(main)


@pytest.mark.timeout(60)
def test_a_version_2_peer_gets_partitions_without_the_elr(tmp_path: Path) -> None:
    async def main() -> None:
        server = ControllerServer(config(tmp_path / "ctl", broker_session_timeout_ms=1_000, min_insync_replicas=2))
        await server.start()
        brokers = {b: client(server, b, secret=None) for b in (1, 2)}
        try:
            for b in brokers.values():
                await b.start()
            topic = (await brokers[1].create_topics({"t": (1, 2)}))["t"]
            assert isinstance(topic, TopicInfo)
            tp = TopicIdPartition(topic.topic_id, 0)
            leader = topic.partitions[0].leader
            follower = 3 - leader
            await brokers[follower].stop()
            await until(lambda: (brokers[leader].partition(tp) or topic.partitions[0]).elr == (follower,), "ELR")
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            v2 = _Peer(reader, writer)
            await v2.next_frame()  # the challenge
            hello = {"version": 2, "versions": [1, 2], "auth": b""}
            writer.write(encode_frame(Kind.REQUEST, 0, "hello", hello, version=2))
            assert (await v2.next_frame()).body == {"version": 2}
            writer.write(encode_frame(Kind.REQUEST, 1, "metadata_poll", {"version": -1, "max_wait_ms": 0}, version=2))
            [raw] = (await v2.next_frame()).body["topics"][0][2]
            assert len(raw) == 5 and raw[3] == [leader]  # no ELR item
            writer.close()
        finally:
            for c in brokers.values():
                await c.stop()
            await server.stop()

    run(main)
