"""KIP-890 part 1 with a real client: a produce delayed past its
transaction's end (issue 28, "Hanging transaction").

librdkafka commits a transaction; then a Produce of the same transactional
id, producer id and epoch arrives, as a request stuck in the network would,
built with the repo's Kafka codec.  The partition's leader verifies with the
coordinator (the transaction is over: the partition is in no open one) and
refuses it with INVALID_TXN_STATE, so it starts no transaction: the LSO
moves past the next committed transaction and a read_committed consumer
reads it.  Without verification the late batch would open a transaction no
marker ever ends, and the consumer would stall at it."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from partlog.kafka.errors import Errors
from partlog.kafka.record_batch import build_record_batch
from partlog.tools.local_cluster import TOPIC
from tests.kafka_helpers import ClusterThread, kio_answer, kio_request, read_frame

confluent_kafka = pytest.importorskip("confluent_kafka")

TXN_ID = "late-produce"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterThread]:
    c = ClusterThread(str(tmp_path_factory.mktemp("verify")))
    try:
        yield c
    finally:
        c.close()


def _ask(port: int, frame: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(frame)
        answer = read_frame(s)
    assert answer is not None
    return answer


def _coordinator(cluster: ClusterThread, transactional_id: str) -> int:
    found = kio_answer(10, 4, _ask(cluster.kafka_port(1), kio_request(10, 4, 1, {
        "key": "", "key_type": 1, "coordinator_keys": [transactional_id]})))  # fmt: skip
    [c] = found.coordinators
    assert c.error_code == 0, c
    return int(c.node_id)


def _completed_producer(cluster: ClusterThread, transactional_id: str, timeout_s: float) -> tuple[int, int]:
    """(producer id, epoch) of ``transactional_id`` once its coordinator
    completed the commit (the markers are written), bounded by ``timeout_s``."""
    coordinator = _coordinator(cluster, transactional_id)
    deadline = time.monotonic() + timeout_s
    while True:
        described = kio_answer(65, 0, _ask(cluster.kafka_port(coordinator), kio_request(65, 0, 2, {
            "transactional_ids": [transactional_id]})))  # fmt: skip
        [state] = described.transaction_states
        assert state.error_code == 0, state
        if state.transaction_state == "CompleteCommit" or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert state.transaction_state == "CompleteCommit", state
    return int(state.producer_id), int(state.producer_epoch)


def _committed_values(cluster: ClusterThread, partition: int, wanted: bytes, timeout_s: float) -> list[bytes]:
    """What a read_committed consumer of ``partition`` reads from the start,
    until it has read ``wanted`` or ``timeout_s`` passed."""
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": cluster.bootstrap,
        "group.id": f"verify-{time.monotonic_ns()}",
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
    })  # fmt: skip
    got: list[bytes] = []
    try:
        consumer.assign([confluent_kafka.TopicPartition(TOPIC, partition, confluent_kafka.OFFSET_BEGINNING)])
        deadline = time.monotonic() + timeout_s
        while wanted not in got and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
    finally:
        consumer.close()
    return got


def test_a_produce_delayed_past_its_transactions_end_is_refused(cluster: ClusterThread) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": TXN_ID})
    producer.init_transactions(30)
    # A partition led by another broker than the coordinator: the leader asks
    # it with the verify_txn RPC.
    coordinator = _coordinator(cluster, TXN_ID)
    [topic] = [t for t in cluster.cluster.brokers[1].metadata.topics() if t.name == TOPIC]
    partition, leader = next((i, p.leader) for i, p in enumerate(topic.partitions) if p.leader != coordinator)
    producer.begin_transaction()
    producer.produce(TOPIC, b"in-txn", partition=partition)
    producer.commit_transaction(30)
    pid, epoch = _completed_producer(cluster, TXN_ID, 30)

    # The late request: the same transactional id, producer id and epoch, the
    # sequence that follows the committed batch (so only verification refuses it).
    late = build_record_batch([(None, b"late", int(time.time() * 1000))], producer_id=pid, producer_epoch=epoch,
                              base_sequence=1, transactional=True)  # fmt: skip
    body = {"transactional_id": TXN_ID, "acks": -1, "timeout": 10_000,
            "topic_data": [{"name": TOPIC, "partition_data": [{"index": partition, "records": late}]}]}  # fmt: skip
    answer = kio_answer(0, 7, _ask(cluster.kafka_port(2), kio_request(0, 7, 3, body)))
    [p] = answer.responses[0].partition_responses
    assert p.error_code == Errors.INVALID_TXN_STATE, Errors(p.error_code)
    counted = cluster.cluster.brokers[leader].metrics.txn_verifications.labels("INVALID_TXN_STATE")
    assert counted._value.get() >= 1  # the leader asked, and counted the answer

    # The same producer's next transaction commits; read_committed consumers
    # read it: the refused batch left no transaction open (the LSO moved past).
    producer.begin_transaction()
    producer.produce(TOPIC, b"after", partition=partition)
    producer.commit_transaction(30)
    got = _committed_values(cluster, partition, b"after", 30)
    assert b"late" not in got
    assert got[-2:] == [b"in-txn", b"after"] or got == [b"in-txn", b"after"], got


def test_transactional_records_without_a_transactional_id_are_refused(cluster: ClusterThread) -> None:
    """Review finding: a Produce carrying transactional batches but no
    transactional id skipped both the leaders' verification (nothing to ask
    with) and the WRITE check on the id, and its first batch opened a
    transaction no coordinator knew, holding the LSO.  Kafka refuses such a
    request whole with TRANSACTIONAL_ID_AUTHORIZATION_FAILED, authorizer or
    not; so do we, and nothing is appended."""
    stray = build_record_batch([(None, b"stray", int(time.time() * 1000))], producer_id=999_999, producer_epoch=0,
                               base_sequence=0, transactional=True)  # fmt: skip
    body = {"transactional_id": None, "acks": -1, "timeout": 10_000,
            "topic_data": [{"name": TOPIC, "partition_data": [{"index": 0, "records": stray}]}]}  # fmt: skip
    answer = kio_answer(0, 7, _ask(cluster.kafka_port(1), kio_request(0, 7, 9, body)))
    [p] = answer.responses[0].partition_responses
    assert p.error_code == Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, Errors(p.error_code)
