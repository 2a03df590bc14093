"""Transactions on compacted topics (docs/design/compaction.md,
"Transactions"): the cleaner removes aborted data, compacts committed
transactional records with the rest, keeps markers, and never cleans at or
past the last stable offset.

* One broker on a LocalDirStore, batches and markers sent over its RPC: an
  open transaction's data is left alone until it ends (aborted, then it
  goes).  Before the rules, the cleaner left transactional batches whole:
  the aborted records stayed and committed ones superseded nothing.
* A LocalCluster with a Kafka listener and a confluent-kafka transactional
  producer committing and aborting on a compacted topic: read from the
  beginning, read_committed and read_uncommitted see the latest committed
  value per key, and nothing aborted.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import pytest

from partlog.broker.server import Broker
from partlog.kafka.errors import Errors
from partlog.kafka.record_batch import build_record_batch, read_records
from partlog.kafka.records import TopicIdPartition, TxnMarkerRequest
from partlog.rpc.client import RpcClient
from partlog.rpc.wire import enc_tp
from partlog.wal.localdir_store import LocalDirStore
from tests.integration.test_compaction import _broker, _tiered_to, _until
from tests.kafka_helpers import ClusterThread

T0 = 1_700_000_000_000


async def _produce(client: RpcClient, tp: TopicIdPartition, batch: bytes) -> None:
    res = await client.call("produce", {"batches": [[*enc_tp(tp), batch]], "acks": -1})
    assert res["results"][0][0] == 0, res


def _txn(pid: int, seq: int, records: list[tuple[bytes, bytes]]) -> bytes:
    rs = [(k, v, T0 + i) for i, (k, v) in enumerate(records)]
    return build_record_batch(rs, producer_id=pid, producer_epoch=0, base_sequence=seq, transactional=True)


async def _end(broker: Broker, tp: TopicIdPartition, pid: int, committed: bool) -> None:
    [err] = await broker.write_txn_markers([TxnMarkerRequest(tp, pid, 0, 0, committed)], timeout_ms=30_000)
    assert err == Errors.NONE


async def _read(broker: Broker, tp: TopicIdPartition, isolation: int) -> list[tuple[bytes | None, bytes | None]]:
    client = await RpcClient.connect("127.0.0.1", broker.port)
    try:
        body = await client.call("fetch", {"partitions": [[*enc_tp(tp), 0, 1 << 20]], "isolation": isolation})
    finally:
        await client.close()
    err, _, _, records, _, _, aborted = body["partitions"][0]
    assert err == 0
    return [(r.key, r.value) for r in read_records(tp, records, 0, [tuple(a) for a in aborted])[0]]


@pytest.mark.timeout(120)
def test_aborted_data_goes_and_open_transactions_wait(tmp_path: Path) -> None:
    async def main() -> None:
        objects = LocalDirStore(tmp_path / "objects", fsync=False)
        async with _broker(tmp_path, objects) as (broker, topic_id, tp):
            # Tiered, not cleaned until everything is written (min.compaction.lag.ms).
            held: dict[str, str | int] = {
                "cleanup.policy": "compact",
                "segment.ms": 100,
                "min.cleanable.dirty.ratio": "0.01",
            }
            broker.alter_topic_configs(topic_id, {**held, "min.compaction.lag.ms": 10**12})
            client = await RpcClient.connect("127.0.0.1", broker.port)
            a, b, c = [(await client.call("init_producer_id", {}))["producer_id"] for _ in range(3)]
            await _produce(client, tp, build_record_batch([(b"k0", b"p0", T0), (b"k1", b"p1", T0), (b"k2", b"p2", T0)]))
            await _produce(client, tp, _txn(a, 0, [(b"k0", b"aborted"), (b"kx", b"aborted")]))  # 3-4
            await _end(broker, tp, a, False)  # 5
            await _produce(client, tp, _txn(b, 0, [(b"k1", b"committed")]))  # 6
            await _end(broker, tp, b, True)  # 7
            assert await _until(lambda: _tiered_to(broker, tp) == 7)
            # An open transaction over k2, then a plain record: tiered, at and past the LSO.
            await _produce(client, tp, _txn(c, 0, [(b"k2", b"open")]))  # 8
            await _produce(client, tp, build_record_batch([(b"k3", b"p3", T0)]))  # 9
            await client.close()
            assert await _until(lambda: _tiered_to(broker, tp) == 9)
            assert broker.store.last_stable_offset(tp) == 8

            removed = broker.metrics.cleaner_records_removed._value
            broker.alter_topic_configs(topic_id, {"min.compaction.lag.ms": 0})
            # k1=p1 (superseded by a committed record) and the two aborted records.
            assert await _until(lambda: removed.get() == 3), removed.get()
            await asyncio.sleep(0.3)  # periods pass: nothing at or past the LSO is cleaned
            assert removed.get() == 3
            assert await _read(broker, tp, 0) == [
                (b"k0", b"p0"), (b"k2", b"p2"), (b"k1", b"committed"), (b"k2", b"open"), (b"k3", b"p3")
            ]  # fmt: skip

            # The open transaction aborts: its record goes, k2=p2 was kept for it.
            await _end(broker, tp, c, False)  # 10
            assert await _until(lambda: removed.get() == 4), removed.get()
            want = [(b"k0", b"p0"), (b"k2", b"p2"), (b"k1", b"committed"), (b"k3", b"p3")]
            assert await _read(broker, tp, 1) == want
            assert await _read(broker, tp, 0) == want
            assert broker.metrics.cleaner_errors._value.get() == 0
            assert broker.store.check() == []

    asyncio.run(main())


TOPIC = "compacted-txn"


def _consume(cluster: ClusterThread, isolation: str, end: int) -> list[tuple[int, bytes, bytes | None]]:
    """(offset, key, value) a fresh consumer with ``isolation`` reads from
    offset 0 until its position reaches ``end`` (bounded: 60 s)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": f"read-{uuid.uuid4()}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        got: list[tuple[int, bytes, bytes | None]] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            m = consumer.poll(0.2)
            if m is not None:
                assert m.error() is None, m.error()
                got.append((int(m.offset() or 0), bytes(m.key() or b""), m.value()))
            elif consumer.position([TopicPartition(TOPIC, 0)])[0].offset >= end:
                break  # markers and emptied batches take offsets: the position passes them
        return got
    finally:
        consumer.close()


@pytest.mark.timeout(240)
def test_confluent_transactions_on_a_compacted_topic(tmp_path: Path) -> None:
    confluent_kafka = pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    cluster = ClusterThread(str(tmp_path), azs=1, partitions=1, replication_factor=1)
    try:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        for f in admin.create_topics([NewTopic(TOPIC, 1, 1)]).values():
            f.result(30)
        [broker] = cluster.cluster.brokers.values()
        topic_id = next(t.topic_id for t in broker.metadata.topics() if t.name == TOPIC)
        tp = TopicIdPartition(topic_id, 0)
        configs: dict[str, str | int] = {"cleanup.policy": "compact", "segment.ms": 200}
        configs["min.cleanable.dirty.ratio"] = "0.01"

        async def alter() -> None:
            broker.alter_topic_configs(topic_id, configs)

        cluster.call(alter())

        p = confluent_kafka.Producer(
            {"bootstrap.servers": cluster.bootstrap, "transactional.id": "compacted", "linger.ms": 5}
        )
        p.init_transactions(30)
        latest: dict[bytes, bytes | None] = {}
        aborted_values: set[bytes] = set()
        for r in range(6):
            p.begin_transaction()
            commit = r % 3 != 1
            for i in range(40):
                key, value = b"k%02d" % (i % 10), b"r%d-%d" % (r, i)
                tombstone = commit and r == 5 and i >= 37
                p.produce(TOPIC, key=key, value=None if tombstone else value)
                if commit:
                    latest[key] = None if tombstone else value
                else:
                    aborted_values.add(value)
            if commit:
                p.commit_transaction(30)
            else:
                assert p.flush(30) == 0  # written before the abort
                p.abort_transaction(30)
            time.sleep(0.3)  # a segment or so per transaction (segment.ms)
        # Plain (non-transactional) records after: the latest value wins either way.
        plain = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 5})
        plain.produce(TOPIC, key=b"k00", value=b"plain")
        plain.flush(30)
        latest[b"k00"] = b"plain"
        # The coordinator writes the last COMMIT marker after it answered EndTxn.
        deadline = time.monotonic() + 30
        stable = broker.store.last_stable_offset
        while stable(tp) < broker.store.high_watermark(tp) and time.monotonic() < deadline:
            time.sleep(0.05)
        hwm = broker.store.high_watermark(tp)
        assert broker.store.last_stable_offset(tp) == hwm

        # 40 aborted records in each of two transactions; of the 4 x 40
        # committed ones and the plain one, all but the latest of each key.
        removed = broker.metrics.cleaner_records_removed._value
        want_removed = 2 * 40 + 4 * 40 + 1 - 10
        deadline = time.monotonic() + 90
        while removed.get() < want_removed and time.monotonic() < deadline:
            time.sleep(0.2)
        assert removed.get() == want_removed, (removed.get(), want_removed)
        assert broker.metrics.cleaner_errors._value.get() == 0
        assert broker.store.check() == []

        for isolation in ("read_committed", "read_uncommitted"):
            got = _consume(cluster, isolation, hwm)
            offsets = [o for o, _, _ in got]
            assert offsets == sorted(set(offsets)), isolation
            assert not {v for _, _, v in got} & aborted_values, isolation
            assert {k: v for _, k, v in got} == latest and len(got) == len(latest), isolation

        # The producer goes on after the clean: its state (epoch, sequence) survived it.
        p.begin_transaction()
        p.produce(TOPIC, key=b"k01", value=b"after")
        p.commit_transaction(30)
        assert broker.store.high_watermark(tp) > hwm
    finally:
        cluster.close()
