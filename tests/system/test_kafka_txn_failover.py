"""Transactions through broker failures, with librdkafka: the transaction
coordinator's broker killed right after EndTxn was answered (its markers
in flight or not yet sent), and a partition leader killed while a
transaction is open on it.  Either way the transaction completes, and a
read_committed consumer sees all of it or none of it, never half."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from partlog.kafka_front.group_coordinator import partition_for
from partlog.kafka_front.txn_coordinator import TXN_STATE_PARTITIONS_DEFAULT, TXN_STATE_TOPIC
from tests.kafka_helpers import QUICK_FENCING_MS, ClusterThread

confluent_kafka = pytest.importorskip("confluent_kafka")

TOPIC = "txn-failover"
PARTITIONS = 3
RECORDS = 30
CONSUME_S = 90


@pytest.fixture
def cluster(tmp_path: Any) -> Iterator[ClusterThread]:
    c = ClusterThread(str(tmp_path), broker_session_timeout_ms=QUICK_FENCING_MS)
    try:
        from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

        admin = AdminClient({"bootstrap.servers": c.bootstrap})
        for f in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)]).values():
            f.result(30)
        yield c
    finally:
        c.close()


def _leader(cluster: ClusterThread, topic: str, partition: int) -> int:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        t = admin.list_topics(topic, timeout=10).topics.get(topic)
        if t is not None and t.error is None and partition in t.partitions and t.partitions[partition].leader > 0:
            return int(t.partitions[partition].leader)
        time.sleep(0.1)
    raise AssertionError(f"{topic}[{partition}] has no leader")


def _producer(cluster: ClusterThread, txn_id: str) -> Any:
    p = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": txn_id,
                                  "linger.ms": 5, "transaction.timeout.ms": 60_000})  # fmt: skip
    p.init_transactions(60)
    return p


def _read_committed(cluster: ClusterThread, want: int, max_s: float = CONSUME_S) -> list[str]:
    """Values a read_committed consumer reads from TOPIC, waiting until it
    has ``want`` or ``max_s`` passed (then whatever it has)."""
    c = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"rc-{uuid.uuid4()}",
                                  "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                                  "enable.auto.commit": False})  # fmt: skip
    try:
        c.subscribe([TOPIC])
        out: list[str] = []
        deadline = time.monotonic() + max_s
        quiet_until = None
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                out.append(bytes(m.value() or b"").decode())
            if len(out) >= want and quiet_until is None:
                quiet_until = time.monotonic() + 2  # anything more would show up now
            if quiet_until is not None and time.monotonic() > quiet_until:
                break
        return out
    finally:
        c.close()


@pytest.mark.serial
@pytest.mark.timeout(300)
def test_the_coordinator_killed_after_end_txn_completes_the_transaction(cluster: ClusterThread) -> None:
    txn_id = "txn-coordinator-crash"
    p = _producer(cluster, txn_id)
    coordinator = _leader(cluster, TXN_STATE_TOPIC, partition_for(txn_id, TXN_STATE_PARTITIONS_DEFAULT))
    p.begin_transaction()
    for i in range(RECORDS):
        p.produce(TOPIC, value=f"c-{i}".encode(), partition=i % PARTITIONS)
    p.commit_transaction(60)  # answered once PrepareCommit is durable; the markers follow
    cluster.kill(coordinator)
    try:
        # The new coordinator loads PrepareCommit and sends the markers: the
        # LSO of every partition passes the transaction.
        got = _read_committed(cluster, RECORDS)
        assert sorted(got) == sorted(f"c-{i}" for i in range(RECORDS))
        # The producer goes on with its next transaction at the new coordinator.
        p.begin_transaction()
        p.produce(TOPIC, value=b"after", partition=0)
        p.commit_transaction(60)
        assert "after" in _read_committed(cluster, RECORDS + 1)
    finally:
        cluster.restart(coordinator)


@pytest.mark.serial
@pytest.mark.timeout(300)
def test_a_leader_killed_with_a_transaction_open_keeps_it_whole(cluster: ClusterThread) -> None:
    p = _producer(cluster, "txn-leader-crash")
    leader = _leader(cluster, TOPIC, 0)
    p.begin_transaction()
    for i in range(RECORDS):
        p.produce(TOPIC, value=f"l-{i}".encode(), partition=i % PARTITIONS)
    assert p.flush(60) == 0  # written (and replicated: acks=all) before the crash
    cluster.kill(leader)
    try:
        # Half a transaction is never visible: the open one holds the LSO.
        assert _read_committed(cluster, 1, max_s=5) == []
        # The new leader has the open transaction from its replica of the
        # log; the commit's marker goes to it.
        p.commit_transaction(60)
        got = _read_committed(cluster, RECORDS)
        assert sorted(got) == sorted(f"l-{i}" for i in range(RECORDS))
    finally:
        cluster.restart(leader)
