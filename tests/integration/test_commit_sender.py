"""A broker's commit sender for a leader survives every failure to reach it
(issue 14, found by the deterministic simulation, seed 2).

The sender caught connection errors but not a handshake timeout: a leader
behind a black hole (a peer that accepts and never answers) killed the
sender task for good, and every later commit to that leader, with the
produce requests behind it, waited for ever.  Connecting also waited the
RPC layer's 30 s default instead of the commit's timeout.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from partlog.broker.server import Broker, BrokerConfig
from partlog.controller.cluster_meta import StaticMetadata
from partlog.kafka.errors import Errors
from partlog.kafka.record_batch import build_record_batch
from partlog.produce.pipeline import ProduceConfig
from partlog.rpc.client import RpcClient
from partlog.wal.localdir_store import LocalDirStore


@pytest.mark.timeout(120)
def test_a_silent_leader_fails_the_commit_and_the_sender_lives_on(tmp_path: Path) -> None:
    async def main() -> None:
        objects = LocalDirStore(tmp_path / "objects", fsync=False)
        meta = StaticMetadata.generate(azs=2, brokers_per_az=1, topics={"t": 2})
        [topic] = meta.topics()
        assert topic.partitions[1].leader == 2

        async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await asyncio.sleep(3600)  # accepts, never answers: a black hole

        silent = await asyncio.start_server(hold, "127.0.0.1", 0)
        silent_port = silent.sockets[0].getsockname()[1]

        def config(bid: int) -> BrokerConfig:
            return BrokerConfig(
                bid,
                f"az{bid}",
                str(tmp_path / f"b{bid}"),
                sync=False,
                produce=ProduceConfig(commit_interval_ms=5),
                commit_rpc_timeout_ms=300,
            )

        b1 = Broker(config(1), meta, objects)
        await b1.start()
        b1.set_metadata(meta.with_ports({1: b1.port, 2: silent_port}))
        b2: Broker | None = None
        client = await RpcClient.connect("127.0.0.1", b1.port, cluster_id=meta.cluster_id)
        try:

            async def produce(value: bytes) -> list[Any]:
                batch = build_record_batch([(None, value, 0)])
                request = {"batches": [[topic.topic_id.bytes, 1, batch]], "acks": 1, "timeout_ms": 10_000}
                body = await client.call("produce", request, timeout_ms=20_000)
                err, base, _, _, message = body["results"][0]
                return [err, base, message]

            # Answered within the commit's timeout, not the RPC layer's 30 s
            # handshake default (the produce request itself allows 10 s).
            err, _, message = await produce(b"lost")
            assert err in (Errors.REQUEST_TIMED_OUT, Errors.NETWORK_EXCEPTION), Errors(err)
            assert "no handshake within 300 ms" in str(message), message

            # The leader comes back at its real address: the same sender commits.
            b2 = Broker(config(2), meta, objects)
            await b2.start()
            real = meta.with_ports({1: b1.port, 2: b2.port})
            b2.set_metadata(real)
            b1.set_metadata(real)
            err, base, _ = await produce(b"kept")
            assert (Errors(err), base) == (Errors.NONE, 0)
        finally:
            await client.close()
            await b1.stop()
            if b2 is not None:
                await b2.stop()
            silent.close()

    asyncio.run(main())
