"""Transactions through the Kafka front end with real clients:
confluent-kafka (librdkafka) producing transactionally over several
partitions of two topics, committing and aborting, fenced by a newer
producer, and consuming with read_committed and read_uncommitted; aiokafka
and kafkajs committing and aborting with a group's offsets in the
transaction."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from partlog.tools.local_cluster import TOPIC
from tests.kafka_helpers import ClusterThread

confluent_kafka = pytest.importorskip("confluent_kafka")

PARTITIONS = 4
OTHER_TOPIC = "txn-other"
# Bounded waits: a consumer stops once it has seen every offset below the
# end it was asked to reach, or after this long.
CONSUME_S = 60


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterThread]:
    c = ClusterThread(str(tmp_path_factory.mktemp("txn")), partitions=PARTITIONS)
    try:
        from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

        admin = AdminClient({"bootstrap.servers": c.bootstrap})
        for f in admin.create_topics([NewTopic(OTHER_TOPIC, 2, 3)]).values():
            f.result(30)
        yield c
    finally:
        c.close()


def _producer(cluster: ClusterThread, txn_id: str) -> Any:
    from confluent_kafka import Producer

    p = Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "transactional.id": txn_id,
            "linger.ms": 5,
            "transaction.timeout.ms": 60_000,
        }
    )
    p.init_transactions(30)
    return p


def _send(p: Any, tag: str, n: int) -> None:
    for i in range(n):
        p.produce(TOPIC, value=f"{tag}-{i}".encode(), partition=i % PARTITIONS)
        p.produce(OTHER_TOPIC, value=f"{tag}-o{i}".encode(), partition=i % 2)


def _read_all(cluster: ClusterThread, isolation: str, topics: list[tuple[str, int]]) -> list[str]:
    """Every record value of ``topics`` a fresh consumer with ``isolation``
    reads up to the current ends (the LSO for read_committed)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": f"read-{uuid.uuid4()}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        tps = [TopicPartition(t, p, 0) for t, n in topics for p in range(n)]
        ends = {}
        for tp in tps:
            _, high = c.get_watermark_offsets(tp, timeout=10)
            ends[(tp.topic, tp.partition)] = high
        c.assign(tps)
        out: list[str] = []
        position = {k: 0 for k in ends}
        deadline = time.monotonic() + CONSUME_S
        while any(position[k] < ends[k] for k in ends) and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                # Control records take offsets but are never delivered: the
                # consumer's position passes them.
                for tp in c.position([TopicPartition(t, p) for t, p in ends]):
                    if tp.offset >= 0:
                        position[(tp.topic, tp.partition)] = max(position[(tp.topic, tp.partition)], tp.offset)
                continue
            assert m.error() is None, m.error()
            out.append(bytes(m.value() or b"").decode())
            position[(str(m.topic()), int(m.partition() or 0))] = int(m.offset() or 0) + 1
        return out
    finally:
        c.close()


@pytest.mark.timeout(240)
def test_committed_and_aborted_transactions_read_as_kafka_would(cluster: ClusterThread) -> None:
    p = _producer(cluster, "txn-commit-abort")
    p.begin_transaction()
    _send(p, "committed", 20)
    p.commit_transaction(30)
    p.begin_transaction()
    _send(p, "aborted", 20)
    # Sent and written before the abort: librdkafka purges what it has not sent.
    assert p.flush(30) == 0
    p.abort_transaction(30)
    p.begin_transaction()
    _send(p, "again", 10)
    p.commit_transaction(30)

    topics = [(TOPIC, PARTITIONS), (OTHER_TOPIC, 2)]
    committed = _read_all(cluster, "read_committed", topics)
    assert sorted(committed) == sorted(
        [f"committed-{i}" for i in range(20)] + [f"committed-o{i}" for i in range(20)]
        + [f"again-{i}" for i in range(10)] + [f"again-o{i}" for i in range(10)]
    )  # fmt: skip
    uncommitted = _read_all(cluster, "read_uncommitted", topics)
    assert {v for v in uncommitted if v.startswith("aborted")} == {
        *(f"aborted-{i}" for i in range(20)),
        *(f"aborted-o{i}" for i in range(20)),
    }
    # The coordinator's metrics: markers written, ids by state.
    from prometheus_client import generate_latest

    scraped = b"".join(
        generate_latest(n.kafka.metrics.registry) for n in cluster.cluster.nodes.values() if n.kafka is not None
    )
    written = sum(
        float(line.split()[-1]) for line in scraped.decode().splitlines()
        if line.startswith("partlog_kafka_txn_markers_written_total")
    )  # fmt: skip
    assert written >= 3 * 6  # three transactions over 6 partitions
    assert b'partlog_kafka_transactional_ids{state="CompleteCommit"}' in scraped


@pytest.mark.timeout(240)
def test_a_newer_producer_fences_the_older_one(cluster: ClusterThread) -> None:
    from confluent_kafka import KafkaException

    old = _producer(cluster, "txn-fence")
    old.begin_transaction()
    old.produce(TOPIC, value=b"zombie", partition=0)
    old.flush(30)
    new = _producer(cluster, "txn-fence")  # aborts the old one's open transaction
    with pytest.raises(KafkaException) as e:
        old.produce(TOPIC, value=b"zombie-2", partition=0)
        old.commit_transaction(30)
    assert e.value.args[0].fatal() or e.value.args[0].txn_requires_abort(), e.value
    new.begin_transaction()
    new.produce(TOPIC, value=b"fenced-winner", partition=0)
    new.commit_transaction(30)
    values = _read_all(cluster, "read_committed", [(TOPIC, PARTITIONS)])
    assert "fenced-winner" in values
    assert "zombie" not in values and "zombie-2" not in values


@pytest.mark.timeout(240)
def test_offsets_sent_in_a_transaction_commit_with_it(cluster: ClusterThread) -> None:
    """Consume-transform-produce: the group's offsets become visible only
    when the transaction commits, and not at all when it aborts."""
    from confluent_kafka import Consumer, TopicPartition

    group = "txn-ctp"
    p = _producer(cluster, "txn-ctp")
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "enable.auto.commit": False,
                  "isolation.level": "read_committed", "auto.offset.reset": "earliest"})  # fmt: skip
    try:
        tp = TopicPartition(OTHER_TOPIC, 1)
        c.assign([tp])
        meta = c.consumer_group_metadata()
        p.begin_transaction()
        p.produce(TOPIC, value=b"derived-aborted", partition=1)
        p.send_offsets_to_transaction([TopicPartition(OTHER_TOPIC, 1, 3)], meta, 30)
        p.abort_transaction(30)
        [got] = c.committed([TopicPartition(OTHER_TOPIC, 1)], timeout=30)
        assert got.offset < 0  # nothing committed
        p.begin_transaction()
        p.produce(TOPIC, value=b"derived", partition=1)
        p.send_offsets_to_transaction([TopicPartition(OTHER_TOPIC, 1, 5)], meta, 30)
        p.commit_transaction(30)
        [got] = c.committed([TopicPartition(OTHER_TOPIC, 1)], timeout=30)
        assert got.offset == 5
    finally:
        c.close()


AIOKAFKA_SCRIPT = r"""
import asyncio, json, sys
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

async def read_all(bootstrap, topic, isolation):
    c = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, isolation_level=isolation,
                         auto_offset_reset="earliest", enable_auto_commit=False)
    await c.start()
    out = []
    try:
        for _ in range(20):
            for recs in (await c.getmany(timeout_ms=500)).values():
                out += [r.value.decode() for r in recs]
    finally:
        await c.stop()
    return out

async def main(bootstrap, topic):
    p = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id="aiokafka-txn")
    await p.start()
    try:
        async with p.transaction():
            for i in range(4):
                await p.send(topic, f"aio-commit-{i}".encode(), partition=i % 2)
            await p.send_offsets_to_transaction({TopicPartition(topic, 0): 9}, "aiokafka-ctp")
        await p.begin_transaction()
        for i in range(3):
            await p.send(topic, f"aio-abort-{i}".encode(), partition=i % 2)
        await p.abort_transaction()
    finally:
        await p.stop()
    committed = await read_all(bootstrap, topic, "read_committed")
    uncommitted = await read_all(bootstrap, topic, "read_uncommitted")
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets("aiokafka-ctp")
    finally:
        await admin.close()
    print(json.dumps({"committed": committed, "uncommitted": uncommitted,
                      "offset": offsets[TopicPartition(topic, 0)].offset}))

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""

JS_DIR = Path(__file__).parent / "js"


def _client_run(cluster: ClusterThread, argv: list[str], topic: str, cwd: Path | None = None) -> dict[str, Any]:
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for f in admin.create_topics([NewTopic(topic, 2, 3)]).values():
        f.result(30)
    out = subprocess.run([*argv, cluster.bootstrap, topic], capture_output=True, text=True, timeout=180, cwd=cwd)
    assert out.returncode == 0, out.stderr[-4000:]
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def _check_client_result(result: dict[str, Any], prefix: str, offset: int) -> None:
    assert sorted(result["committed"]) == [f"{prefix}-commit-{i}" for i in range(4)]
    assert sorted(result["uncommitted"]) == sorted(
        [f"{prefix}-commit-{i}" for i in range(4)] + [f"{prefix}-abort-{i}" for i in range(3)]
    )
    assert result["offset"] == offset


@pytest.mark.timeout(300)
def test_aiokafka_transactions_with_offsets(cluster: ClusterThread) -> None:
    pytest.importorskip("aiokafka")
    result = _client_run(cluster, [sys.executable, "-c", AIOKAFKA_SCRIPT], "txn-aiokafka")
    _check_client_result(result, "aio", 9)


@pytest.mark.timeout(300)
def test_kafkajs_transactions_with_offsets(cluster: ClusterThread) -> None:
    if shutil.which("node") is None or not (JS_DIR / "node_modules" / "kafkajs").is_dir():
        pytest.skip("node or kafkajs missing (scripts/test installs kafkajs with npm)")
    result = _client_run(cluster, ["node", str(JS_DIR / "txn.js")], "txn-kafkajs", cwd=JS_DIR)
    _check_client_result(result, "kjs", 7)
