"""Transactions through the Kafka front end with a real client:
confluent-kafka (librdkafka) producing transactionally over several
partitions of two topics, committing and aborting, fenced by a newer
producer, and consuming with read_committed and read_uncommitted."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
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
        from confluent_kafka.admin import AdminClient, NewTopic

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
            out.append(m.value().decode())
            position[(m.topic(), m.partition())] = m.offset() + 1
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
