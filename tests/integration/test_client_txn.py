"""partlog.client's TransactionalProducer against real brokers with Kafka
front ends on loopback: a commit over two partitions is visible to
read_committed consumers (partlog's and librdkafka's), an abort is not, a
second producer of the same id fences the first, and a call to a broker
that is not the coordinator is answered NOT_COORDINATOR and the client
finds the coordinator again."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from partlog.client import Consumer, ProduceError, ProducerFencedError, TransactionalProducer, TransactionStateError
from partlog.kafka.coordinator_key import partition_for
from partlog.kafka.errors import Errors
from partlog.kafka.records import TopicIdPartition
from partlog.rpc.client import RpcClient
from partlog.rpc.wire import enc_tp
from partlog.txn.log import TXN_STATE_TOPIC
from tests.kafka_helpers import ClusterThread

confluent_kafka = pytest.importorskip("confluent_kafka")

TOPIC = "client-txn"
PARTITIONS = 2


@pytest.fixture
def cluster(tmp_path: Any) -> Iterator[ClusterThread]:
    c = ClusterThread(str(tmp_path))
    try:
        from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

        admin = AdminClient({"bootstrap.servers": c.bootstrap})
        for f in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)]).values():
            f.result(30)
        yield c
    finally:
        c.close()


def _producer(cluster: ClusterThread, txn_id: str) -> TransactionalProducer:
    return TransactionalProducer(cluster.cluster.bootstrap(), txn_id, linger_ms=2, max_block_ms=30_000)


async def _tps(p: TransactionalProducer) -> list[TopicIdPartition]:
    view = await p.conns.load_metadata(None)
    return view.partitions(TOPIC)


async def _read_committed(cluster: ClusterThread, tps: list[TopicIdPartition], want: int) -> list[bytes]:
    """Values a read_committed partlog Consumer reads, until it has
    ``want`` and a quiet second more (or 30 s)."""
    c = Consumer(cluster.cluster.bootstrap(), isolation_level="read_committed", max_wait_ms=100)
    await c.start()
    c.assign(tps)
    out: list[bytes] = []
    deadline = time.monotonic() + 30
    quiet_until: float | None = None
    try:
        while time.monotonic() < deadline:
            out += [r.value or b"" for r in await c.poll()]
            if len(out) >= want and quiet_until is None:
                quiet_until = time.monotonic() + 1
            if quiet_until is not None and time.monotonic() > quiet_until:
                break
            await asyncio.sleep(0.05)
    finally:
        await c.close()
    return out


def _confluent_read_committed(cluster: ClusterThread, want: int) -> list[bytes]:
    c = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"rc-{uuid.uuid4()}",
                                  "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                                  "enable.auto.commit": False})  # fmt: skip
    try:
        c.subscribe([TOPIC])
        out: list[bytes] = []
        deadline = time.monotonic() + 60
        quiet_until: float | None = None
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                out.append(bytes(m.value() or b""))
            if len(out) >= want and quiet_until is None:
                quiet_until = time.monotonic() + 2
            if quiet_until is not None and time.monotonic() > quiet_until:
                break
        return out
    finally:
        c.close()


def test_commit_visible_abort_invisible(cluster: ClusterThread) -> None:
    async def run() -> list[TopicIdPartition]:
        p = _producer(cluster, "txn-commit")
        try:
            await p.init_transactions()
            tps = await _tps(p)
            p.begin_transaction()
            futs = [p.send(tps[i % 2], f"c{i}".encode()) for i in range(10)]
            await p.commit_transaction()
            assert all(f.done() and f.result().offset >= 0 for f in futs)
            p.begin_transaction()
            for i in range(6):
                p.send(tps[i % 2], f"a{i}".encode())
            await p.abort_transaction()
            p.begin_transaction()
            p.send(tps[0], b"c-last")
            await p.commit_transaction()
            with pytest.raises(TransactionStateError):
                await p.commit_transaction()  # READY: nothing to commit
            return tps
        finally:
            await p.close()

    tps = cluster.call(run())
    want = sorted([f"c{i}".encode() for i in range(10)] + [b"c-last"])
    assert sorted(cluster.call(_read_committed(cluster, tps, len(want)))) == want
    assert sorted(_confluent_read_committed(cluster, len(want))) == want


def test_second_producer_fences_first(cluster: ClusterThread) -> None:
    async def run() -> None:
        first, second = _producer(cluster, "txn-fence"), _producer(cluster, "txn-fence")
        try:
            await first.init_transactions()
            tps = await _tps(first)
            first.begin_transaction()
            await first.send(tps[0], b"zombie")
            await second.init_transactions()  # fences first, aborts its transaction
            assert second.producer_epoch > first.producer_epoch or second.producer_id != first.producer_id
            with pytest.raises(ProducerFencedError) as e:
                await first.commit_transaction()
            assert e.value.error in (Errors.PRODUCER_FENCED, Errors.INVALID_PRODUCER_EPOCH)
            with pytest.raises(ProducerFencedError):
                first.begin_transaction()
            second.begin_transaction()
            second.send(tps[1], b"survivor")
            await second.commit_transaction()
            got = await _read_committed(cluster, tps, 1)
            assert got == [b"survivor"]
        finally:
            await first.close()
            await second.close()

    cluster.call(run(), timeout=120)


def test_not_coordinator_is_answered_and_the_client_recovers(cluster: ClusterThread) -> None:
    async def run() -> None:
        p = _producer(cluster, "txn-moves")
        try:
            await p.init_transactions()
            tps = await _tps(p)
            view = await p.conns.load_metadata(None)
            _, parts = view.topics[TXN_STATE_TOPIC]
            coordinator = parts[partition_for("txn-moves", len(parts))].leader
            other = next(b for b in view.brokers if b != coordinator)
            # A broker that is not the coordinator answers NOT_COORDINATOR.
            _, host, port = view.brokers[other]
            client = await RpcClient.connect(host, port)
            try:
                body = {"transactional_id": "txn-moves", "producer_id": p.producer_id,
                        "producer_epoch": p.producer_epoch, "partitions": [enc_tp(tps[0])]}  # fmt: skip
                answer = await client.call("add_partitions_to_txn", body, timeout_ms=10_000)
                assert answer == {"partitions": [[int(Errors.NOT_COORDINATOR)]]}
            finally:
                await client.close()
            # The client believes the other broker coordinates: it is told
            # NOT_COORDINATOR, looks again and commits.
            p._coordinator = other
            relocations = p.stats["relocations"]
            p.begin_transaction()
            p.send(tps[0], b"moved")
            await p.commit_transaction()
            assert p.stats["relocations"] > relocations
            assert p.stats["coordinator_retries"] >= 1
            assert await _read_committed(cluster, tps, 1) == [b"moved"]
        finally:
            await p.close()

    cluster.call(run(), timeout=120)


def test_leaders_verify_the_clients_writes(cluster: ClusterThread) -> None:
    """The produce RPC carries the transactional id (KIP-890 part 1): a
    batch to a partition never added to the transaction is refused."""

    async def run() -> None:
        p = _producer(cluster, "txn-stray")
        try:
            await p.init_transactions()
            tps = await _tps(p)
            p.begin_transaction()
            await p.send(tps[0], b"added")
            assert p._producer is not None
            with pytest.raises(ProduceError) as e:
                await p._producer.send(tps[1], b"stray")  # past AddPartitionsToTxn
            assert e.value.error == Errors.INVALID_TXN_STATE
            await p.abort_transaction()
        finally:
            await p.close()

    cluster.call(run(), timeout=120)
