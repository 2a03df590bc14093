"""Transaction markers and read_committed on real brokers over loopback:
``write_txn_markers`` routed to each partition's leader and replicated
before it answers, the marker listeners, and the last stable offset and
aborted transactions that every replica answers a READ_COMMITTED fetch with."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder
from prometheus_client import generate_latest

from partlog.broker.server import Broker, BrokerConfig, start_brokers
from partlog.controller.cluster_meta import StaticMetadata
from partlog.kafka.errors import Errors
from partlog.kafka.record_batch import read_records
from partlog.kafka.records import TopicIdPartition, TxnMarkerRequest
from partlog.rpc.client import RpcClient
from partlog.rpc.wire import enc_tp
from partlog.wal.localdir_store import LocalDirStore

T0 = 1_700_000_000_000


def _txn_batch(producer_id: int, epoch: int, seq: int, values: list[bytes]) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=True, producer_id=producer_id,
                                  producer_epoch=epoch, base_sequence=seq, batch_size=1 << 30)  # fmt: skip
    for i, v in enumerate(values):
        b.append(i, timestamp=T0 + i, key=None, value=v, headers=[])
    return bytes(b.build())


async def _brokers(tmp_path: Path) -> tuple[list[Broker], StaticMetadata]:
    meta = StaticMetadata.generate(azs=3, brokers_per_az=1, topics={"t": 3}, replication_factor=3)
    objects = LocalDirStore(tmp_path / "objects", fsync=False)
    configs = [
        BrokerConfig(b.broker_id, b.az, os.path.join(tmp_path, f"b{b.broker_id}"), sync=False) for b in meta.brokers()
    ]
    return await start_brokers(configs, meta, objects)


async def _fetch(port: int, tp: TopicIdPartition, isolation: int) -> list[Any]:
    client = await RpcClient.connect("127.0.0.1", port)
    try:
        body = await client.call("fetch", {"partitions": [[*enc_tp(tp), 0, 1 << 20]], "isolation": isolation})
        return list(body["partitions"][0])
    finally:
        await client.close()


@pytest.mark.timeout(120)
def test_markers_reach_the_leaders_and_every_replica_answers_read_committed(tmp_path: Path) -> None:
    async def main() -> None:
        brokers, meta = await _brokers(tmp_path)
        try:
            [topic] = meta.topics()
            tps = [TopicIdPartition(topic.topic_id, p) for p in range(3)]
            heard: list[tuple[int, TopicIdPartition, int, bool, int]] = []

            def listener(bid: int) -> Callable[[TopicIdPartition, int, bool, int], None]:
                return lambda tp, pid, committed, offset: heard.append((bid, tp, pid, committed, offset))

            for b in brokers:
                b.add_marker_listener(listener(b.broker_id))
            client = await RpcClient.connect("127.0.0.1", brokers[0].port)
            pid = (await client.call("init_producer_id", {}))["producer_id"]
            batches = [[*enc_tp(tp), _txn_batch(pid, 0, 0, [b"a", b"b"])] for tp in tps[:2]]
            res = await client.call("produce", {"batches": batches, "acks": -1})
            assert [r[0] for r in res["results"]] == [0, 0], res
            await client.close()

            # Open transactions: read_committed sees nothing, the LSO is their first offset.
            leader0 = next(b for b in brokers if b.leader_epoch(tps[0]) is not None)
            err, hwm, _, records, _, lso, aborted = await _fetch(leader0.port, tps[0], 1)
            assert (err, hwm, lso, records, aborted) == (0, 2, 0, b"", [])
            err, _, _, records, _, lso, _ = await _fetch(leader0.port, tps[0], 0)
            assert err == 0 and len(read_records(tps[0], records)[0]) == 2

            # Markers sent from a broker that leads neither partition (routed to the leaders).
            sender = next(b for b in brokers if b.leader_epoch(tps[0]) is None and b.leader_epoch(tps[1]) is None)
            answers = await sender.write_txn_markers(
                [TxnMarkerRequest(tps[0], pid, 0, 0, False), TxnMarkerRequest(tps[1], pid, 0, 0, True)],
                timeout_ms=30_000,
            )
            assert answers == [Errors.NONE, Errors.NONE]
            # Each leader told its own listeners, once the marker was replicated.
            leaders = {tp: next(b.broker_id for b in brokers if b.leader_epoch(tp) is not None) for tp in tps[:2]}
            assert sorted(heard, key=lambda h: h[1].partition) == [
                (leaders[tps[0]], tps[0], pid, False, 2),
                (leaders[tps[1]], tps[1], pid, True, 2),
            ]
            # Every replica (followers serve fetches too) answers the same,
            # once it learned the HWM (with its next fetch from the leader).
            for b in brokers:
                for _ in range(600):
                    if (await _fetch(b.port, tps[0], 1))[1] == 3 and (await _fetch(b.port, tps[1], 1))[1] == 3:
                        break
                    await asyncio.sleep(0.05)
                err, hwm, _, records, _, lso, aborted = await _fetch(b.port, tps[0], 1)
                assert (err, hwm, lso, aborted) == (0, 3, 3, [[pid, 0]]), b.broker_id
                assert read_records(tps[0], records, 0, [tuple(a) for a in aborted])[0] == []
                err, hwm, _, records, _, lso, aborted = await _fetch(b.port, tps[1], 1)
                assert (err, hwm, lso, aborted) == (0, 3, 3, []), b.broker_id
                assert [r.value for r in read_records(tps[1], records, 0, [])[0]] == [b"a", b"b"]

            # Counted by the leaders, by answer.
            scraped = b"".join(generate_latest(b.metrics.registry) for b in brokers)
            assert scraped.count(b'partlog_txn_markers_total{error="NONE"} 1.0') == 2

            # A marker of an older producer epoch than the partition's is refused.
            bumped = await sender.write_txn_markers([TxnMarkerRequest(tps[2], pid, 5, 0, False)], timeout_ms=30_000)
            assert bumped == [Errors.NONE]
            stale = await sender.write_txn_markers([TxnMarkerRequest(tps[2], pid, 4, 0, False)], timeout_ms=30_000)
            assert stale[0] in (Errors.INVALID_PRODUCER_EPOCH, Errors.PRODUCER_FENCED), stale
        finally:
            for b in brokers:
                await b.stop()

    asyncio.run(main())
