"""walmgr asks a partition's ISR followers as well as its leader (issue 14):
a follower at the leader epoch asked answers from its own log; at another
epoch, or without a replica, it answers NOT_LEADER (walmgr keeps the file).
A leader whose ISR has a member walmgr did not ask answers ISR_CHANGED."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from partlog.client.producer import Producer
from partlog.rpc.client import RpcClient
from partlog.rpc.wire import Verdict, dec_verdicts, enc_reference_checks
from partlog.wal.localdir_store import LocalDirStore
from tests.cluster_helpers import running_cluster, topic_partitions


@pytest.mark.timeout(120)
def test_followers_answer_from_their_own_logs_at_the_epoch_asked(tmp_path: Path) -> None:
    objects = LocalDirStore(tmp_path / "objects", fsync=False)

    async def main() -> None:
        async with running_cluster(tmp_path, objects, partitions=1, replication_factor=3) as (brokers, meta):
            [tp] = topic_partitions(meta)
            leader = meta.leader_of(tp)
            assert leader is not None
            producer = Producer([("127.0.0.1", b.port) for b in brokers], acks=-1)
            await producer.start()
            await producer.send(tp, b"v")  # acks=all: on every ISR member
            await producer.close()
            [key] = brokers[0].store.file_usage()
            other = key.replace(".wal", "0.wal")

            async def ask(port: int, epoch: int, asked: tuple[int, ...] | None = None) -> list[int]:
                client = await RpcClient.connect("127.0.0.1", port, cluster_id=meta.cluster_id)
                try:
                    checks = [(key, tp, epoch, asked), (other, tp, epoch, asked)]
                    return dec_verdicts(await client.call("referenced_files", enc_reference_checks(checks)), 2)
                finally:
                    await client.close()

            for b in brokers:
                role = "leader" if b.broker_id == leader else "follower"
                assert await ask(b.port, 0) == [Verdict.REFERENCED, Verdict.NOT_REFERENCED], role
                assert await ask(b.port, 1) == [Verdict.NOT_LEADER, Verdict.NOT_LEADER], role
                everyone = tuple(x.broker_id for x in brokers)
                assert await ask(b.port, 0, everyone) == [Verdict.REFERENCED, Verdict.NOT_REFERENCED], role
                # Regression (DST): walmgr's metadata may predate a member's
                # joining the ISR; the leader says so, and walmgr keeps the
                # file (that member may still name it).  Followers answer
                # from their logs: only the leader knows the ISR.
                want = Verdict.ISR_CHANGED if b.broker_id == leader else Verdict.REFERENCED
                assert (await ask(b.port, 0, (leader,)))[0] == want, role

    asyncio.run(main())
