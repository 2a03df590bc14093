"""The RPC boundary (issue 13, item 3): input never fail-stops a store.

Regression: one commit RPC with an uploader id >= 2^31, a file size >= 2^64
(msgpack's largest, 2^64 - 1) or a non-integer field passed the RPC layer, overflowed a struct in the
commit stage and left the store fail-stopped until the process restarted.
Now the method's schema refuses it (BAD_REQUEST, that request only), the
store refuses what it cannot pack even when called directly, and a store
that does fail-stop (an I/O error) is reopened by its broker from disk.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import lmdb
import pytest

from partlog.broker.server import Broker, BrokerConfig, start_brokers
from partlog.controller.cluster_meta import StaticMetadata
from partlog.kafka.errors import Errors
from partlog.kafka.record_batch import build_record_batch
from partlog.kafka.records import (
    FindBatchRequest,
    TopicIdPartition,
)
from partlog.produce.pipeline import ProduceConfig
from partlog.rpc.client import RpcClient, RpcRemoteError
from partlog.rpc.frame import RpcErrorCode
from partlog.rpc.wire import enc_tp
from partlog.wal.key import make_wal_key
from partlog.wal.localdir_store import LocalDirStore


def now_ms() -> int:
    return int(time.time() * 1000)


async def _broker(tmp_path: Path) -> tuple[Broker, StaticMetadata]:
    meta = StaticMetadata.generate(azs=1, brokers_per_az=1, topics={"t": 1})
    cfg = BrokerConfig(1, "az1", os.path.join(tmp_path, "b1"), produce=ProduceConfig(commit_interval_ms=10), sync=False)
    [broker], meta = await start_brokers([cfg], meta, LocalDirStore(tmp_path / "objects", fsync=False))
    return broker, meta


async def _round_trip(client: RpcClient, tp: TopicIdPartition, value: bytes) -> int:
    """Produce one record and fetch it back; its offset."""
    batch = build_record_batch([(None, value, int(time.time() * 1000))])
    res = await client.call("produce", {"batches": [[*enc_tp(tp), batch]], "acks": 1})
    [[err, offset, *_]] = res["results"]
    assert err == Errors.NONE, res
    f = await client.call("fetch", {"partitions": [[*enc_tp(tp), offset, 1 << 20]]})
    assert f["partitions"][0][0] == Errors.NONE and value in f["partitions"][0][3]
    return int(offset)


@pytest.mark.timeout(60)
def test_out_of_range_commits_are_refused_and_the_store_keeps_serving(tmp_path: Path) -> None:
    async def main() -> None:
        broker, meta = await _broker(tmp_path)
        try:
            [topic] = meta.topics()
            tp = TopicIdPartition(topic.topic_id, 0)
            client = await RpcClient.connect("127.0.0.1", broker.port)
            await _round_trip(client, tp, b"before")
            now = now_ms()
            key = str(make_wal_key("wal", now, 1, "ab"))
            header = build_record_batch([(None, b"x", now)])[:61]
            batch = [0, tp.topic_id.bytes, 0, 1, header]
            bad: list[tuple[str, dict[str, Any]]] = [
                ("uploader", {"key": key, "uploader": 1 << 31, "file_size": 100, "batches": [batch]}),
                ("file_size", {"key": key, "uploader": 1, "file_size": (1 << 64) - 1, "batches": [batch]}),
                ("file_size", {"key": key, "uploader": 1, "file_size": 100.0, "batches": [batch]}),
                (
                    "byte_offset",
                    {"key": key, "uploader": 1, "file_size": 100, "batches": [[0, batch[1], 0, -1, header]]},
                ),
                ("uploader", {"key": key, "uploader": "1", "file_size": 100, "batches": [batch]}),
                ("uploader", {"key": key, "uploader": True, "file_size": 100, "batches": [batch]}),
            ]
            for field, body in bad:
                with pytest.raises(RpcRemoteError) as e:
                    await client.call("commit", body)
                assert e.value.code == RpcErrorCode.BAD_REQUEST and field in e.value.message, e.value
            assert broker.store.failed is None
            await _round_trip(client, tp, b"after")
            await client.close()
        finally:
            await broker.stop()

    asyncio.run(main())


@pytest.mark.timeout(60)
def test_a_fail_stopped_store_is_reopened_without_losing_acknowledged_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def main() -> None:
        broker, meta = await _broker(tmp_path)
        try:
            [topic] = meta.topics()
            tp = TopicIdPartition(topic.topic_id, 0)
            client = await RpcClient.connect("127.0.0.1", broker.port)
            acked = [await _round_trip(client, tp, f"acked-{i}".encode()) for i in range(3)]
            # The next commit's write fails as a disk would.
            store = broker.store
            real = store._commit_group
            fails = [1]

            def failing(*args: Any) -> Any:
                if fails:
                    fails.pop()
                    raise lmdb.Error("injected: I/O error")
                return real(*args)

            monkeypatch.setattr(store._pipeline, "_apply", failing)  # the pipeline holds the bound method
            batch = build_record_batch([(None, b"lost", int(time.time() * 1000))])
            res = await client.call("produce", {"batches": [[*enc_tp(tp), batch]], "acks": 1})
            assert res["results"][0][0] == Errors.KAFKA_STORAGE_ERROR  # not acknowledged
            for _ in range(200):  # the broker reopens the store in the background
                if broker.store.failed is None and broker.store.stats.get("reopens"):
                    break
                await asyncio.sleep(0.02)
            assert broker.store.stats.get("reopens") == 1 and broker.store.failed is None
            after = await _round_trip(client, tp, b"after")
            assert after == acked[-1] + 1  # the failed commit left no trace
            found = await asyncio.to_thread(broker.store.find_batches, [FindBatchRequest(tp, 0, 1 << 20)], 1 << 20)
            assert [b.metadata.base_offset for b in found[0].batches] == [*acked, after]
            broker.store.check()
            await client.close()
        finally:
            await broker.stop()

    asyncio.run(main())
