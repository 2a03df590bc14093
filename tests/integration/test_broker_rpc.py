"""The broker's small RPCs on a real broker over loopback: metadata with
representatives, list_offsets, init_producer_id, acks=0, and leadership."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from partlog.broker.server import Broker, BrokerConfig, start_brokers
from partlog.controller.cluster_meta import StaticMetadata
from partlog.kafka.errors import Errors
from partlog.kafka.records import ListOffsetsRequest, TopicIdPartition
from partlog.rpc.client import RpcClient, RpcRemoteError
from partlog.rpc.wire import enc_tp
from partlog.wal.localdir_store import LocalDirStore
from tests.batches import build_batch

T0 = 1_700_000_000_000


async def _brokers(tmp_path: Path, n_azs: int) -> tuple[list[Broker], StaticMetadata]:
    meta = StaticMetadata.generate(azs=n_azs, brokers_per_az=1, topics={"t": n_azs})
    objects = LocalDirStore(tmp_path / "objects", fsync=False)
    configs = [
        BrokerConfig(b.broker_id, b.az, os.path.join(tmp_path, f"b{b.broker_id}"), sync=False) for b in meta.brokers()
    ]
    return await start_brokers(configs, meta, objects)


@pytest.mark.timeout(60)
def test_metadata_list_offsets_and_leadership(tmp_path: Path) -> None:
    async def main() -> None:
        brokers, meta = await _brokers(tmp_path, 3)
        try:
            [topic] = meta.topics()
            tps = [TopicIdPartition(topic.topic_id, p) for p in range(3)]
            client = await RpcClient.connect("127.0.0.1", brokers[0].port)
            # Metadata: a client in az2 produces partition 0 (led by broker 1 in az1) to az2's broker.
            body = await client.call("metadata", {"az": "az2"})
            [[name, tid, parts]] = body["topics"]
            assert name == "t" and tid == topic.topic_id.bytes
            assert parts == [[0, 1, 2], [1, 2, 2], [2, 3, 2]]
            assert sorted(b[0] for b in body["brokers"]) == [1, 2, 3]
            # Produce through broker 1 (any broker accepts any partition).
            batch = build_batch(3, timestamp_ms=T0)
            res = await client.call("produce", {"batches": [[*enc_tp(tp), batch] for tp in tps]})
            assert [r[0] for r in res["results"]] == [0, 0, 0] and [r[1] for r in res["results"]] == [0, 0, 0]
            # list_offsets: only the leader answers; others say NOT_LEADER_OR_FOLLOWER.
            latest = ListOffsetsRequest.LATEST_TIMESTAMP
            lo = await client.call("list_offsets", {"partitions": [[*enc_tp(tp), latest] for tp in tps]})
            assert lo["partitions"][0] == [int(Errors.NONE), -1, 3]
            assert [p[0] for p in lo["partitions"][1:]] == [int(Errors.NOT_LEADER_OR_FOLLOWER)] * 2
            ts = await client.call("list_offsets", {"partitions": [[*enc_tp(tps[0]), T0 + 1]]})
            assert ts["partitions"][0] == [int(Errors.NONE), T0 + 2, 0]
            # A fetch of a partition this broker does not lead.
            f = await client.call("fetch", {"partitions": [[*enc_tp(tps[1]), 0, 1 << 20]]})
            assert f["partitions"][0][0] == int(Errors.NOT_LEADER_OR_FOLLOWER)
            # init_producer_id hands out distinct ids.
            ids = {(await client.call("init_producer_id", {}))["producer_id"] for _ in range(5)}
            assert len(ids) == 5 and all(i >= 0 for i in ids)
            # acks=0 answers before the commit: no offsets.
            res = await client.call("produce", {"acks": 0, "batches": [[*enc_tp(tps[0]), batch]]})
            assert res["results"] == [[0, -1, -1, -1, None]]
            with pytest.raises(RpcRemoteError, match="acks"):
                await client.call("produce", {"acks": 2, "batches": [[*enc_tp(tps[0]), batch]]})
            with pytest.raises(RpcRemoteError, match="list_offsets"):
                await client.call("list_offsets", {"partitions": "nope"})
            await client.close()
        finally:
            for b in brokers:
                await b.stop()

    asyncio.run(main())


@pytest.mark.timeout(60)
def test_broker_applies_retention_periodically(tmp_path: Path) -> None:
    async def main() -> None:
        meta = StaticMetadata.generate(azs=1, brokers_per_az=1, topics={"t": 1})
        objects = LocalDirStore(tmp_path / "objects", fsync=False)
        broker = Broker(
            BrokerConfig(1, "az1", str(tmp_path / "b1"), sync=False, retention_check_interval_ms=20), meta, objects
        )
        await broker.start()
        try:
            [topic] = meta.topics()
            tp = TopicIdPartition(topic.topic_id, 0)
            broker.store.alter_topic_configs(topic.topic_id, {"retention.ms": 60_000})
            now = int(time.time() * 1000)
            old = build_batch(2, timestamp_ms=now - 600_000)  # 10 minutes old: past retention.ms
            new = build_batch(2, timestamp_ms=now)
            results = await broker.produce([(tp, old), (tp, new)])
            assert [r.base_offset for r in results] == [0, 2]
            for _ in range(500):  # bounded: the timer runs every 20 ms
                if broker.store.partition_state(tp)["log_start_offset"] == 2:
                    break
                await asyncio.sleep(0.01)
            assert broker.store.partition_state(tp)["log_start_offset"] == 2
            assert broker.metrics.retention_runs._value.get() >= 1
        finally:
            await broker.stop()

    asyncio.run(main())


def test_broker_config_refuses_bad_limits(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="retention_check_interval_ms must be > 0"):
        BrokerConfig(1, "az1", str(tmp_path), retention_check_interval_ms=0)
