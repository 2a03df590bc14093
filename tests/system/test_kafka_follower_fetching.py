"""Fetch from the nearest replica (KIP-392, KIP-1163's read path) with the
rack-aware selector on (the default): a Fetch naming an AZ is answered by a broker
outside it with ``preferred_read_replica`` (the in-sync replica there) and
no records, and by that replica with the records; librdkafka's
``client.rack`` consumer, bootstrapped elsewhere, reads everything through
the redirect.  The rule itself: tests/unit/test_read_replica.py."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from partlog.controller.cluster_meta import TopicInfo
from partlog.kafka_front.apis import FrontConfig
from tests.integration.test_kafka_front import _ask
from tests.kafka_helpers import ClusterThread, kio_answer, kio_request

confluent_kafka = pytest.importorskip("confluent_kafka")

TOPIC = "near"
RECORDS = 200


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterThread]:
    front = FrontConfig()  # the selector is on by default
    c = ClusterThread(str(tmp_path_factory.mktemp("near")), front=front, azs=3, brokers_per_az=1, partitions=1)
    try:
        yield c
    finally:
        c.close()


def _fetch(rack: str) -> dict[str, Any]:
    part = {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0, "last_fetched_epoch": -1,
            "log_start_offset": -1, "partition_max_bytes": 1 << 20}  # fmt: skip
    return {"replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "topics": [{"topic": TOPIC, "partitions": [part]}],
            "forgotten_topics_data": [], "rack_id": rack}  # fmt: skip


def _answer(cluster: ClusterThread, broker: int, rack: str) -> Any:
    body = kio_answer(1, 11, _ask(cluster.kafka_port(broker), kio_request(1, 11, 3, _fetch(rack))))
    return body.responses[0].partitions[0]


def test_a_client_is_sent_to_the_replica_in_its_az(cluster: ClusterThread) -> None:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(TOPIC, num_partitions=1, replication_factor=3)])[TOPIC].result(30)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(RECORDS):
        producer.produce(TOPIC, f"n{i}".encode(), partition=0)
    assert producer.flush(30) == 0
    view = next(iter(cluster.cluster.brokers.values())).metadata
    topic = next(t for t in view.topics() if t.name == TOPIC)
    assert isinstance(topic, TopicInfo)
    p = topic.partitions[0]
    near = next(r for r in p.isr if r != p.leader)
    near_az = view.broker(near).az  # type: ignore[union-attr]
    deadline = time.monotonic() + 30  # the replica's HWM follows the leader's
    while len(_answer(cluster, near, near_az).records or b"") == 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    redirected = _answer(cluster, p.leader, near_az)
    assert redirected.preferred_read_replica == near and not redirected.records and redirected.error_code == 0
    served = _answer(cluster, near, near_az)
    assert served.preferred_read_replica == -1 and served.records
    assert _answer(cluster, p.leader, "no-such-az").preferred_read_replica == -1  # no replica there
    consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{cluster.kafka_port(p.leader)}", "group.id": "g-near",
                         "client.rack": near_az, "auto.offset.reset": "earliest"})  # fmt: skip
    consumer.subscribe([TOPIC])
    got: set[bytes] = set()
    deadline = time.monotonic() + 60
    while len(got) < RECORDS and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        value = None if m is None or m.error() is not None else m.value()
        if value is not None:
            got.add(value)
    consumer.close()
    assert got == {f"n{i}".encode() for i in range(RECORDS)}
