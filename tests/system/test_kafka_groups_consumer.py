"""KIP-848 consumer groups (``group.protocol=consumer``) with a real client:
librdkafka's next-generation consumer through ConsumerGroupHeartbeat, and
the classic protocol still served beside it."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from partlog.tools.local_cluster import TOPIC
from tests.kafka_helpers import ClusterThread

confluent_kafka = pytest.importorskip("confluent_kafka")

PARTITIONS = 6
RECORDS = 300
DEADLINE_S = 90


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterThread]:
    c = ClusterThread(str(tmp_path_factory.mktemp("kip848")), partitions=PARTITIONS)
    try:
        yield c
    finally:
        c.close()


def _produce(cluster: ClusterThread, n: int, tag: str) -> set[tuple[int, int]]:
    p = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True,
                                  "linger.ms": 5})  # fmt: skip
    acked: set[tuple[int, int]] = set()

    def done(err: Any, msg: Any) -> None:
        assert err is None, err
        acked.add((msg.partition(), msg.offset()))

    for i in range(n):
        p.produce(TOPIC, value=f"{tag}-{i}".encode(), partition=i % PARTITIONS, on_delivery=done)
    assert p.flush(60) == 0
    return acked


def _consumer(cluster: ClusterThread, group: str, **extra: Any) -> Any:
    c = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                                  "group.protocol": "consumer", "auto.offset.reset": "earliest",
                                  "enable.auto.commit": False, **extra})  # fmt: skip
    c.subscribe([TOPIC])
    return c


def _poll_until(consumers: list[Any], reads: list[Counter[tuple[int, int]]], done: Any) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not done() and time.monotonic() < deadline:
        for c, got in zip(consumers, reads, strict=True):
            m = c.poll(0.05)
            if m is not None and not m.error():
                got[(m.partition(), m.offset())] += 1
    assert done(), "not done within the deadline"


def test_two_next_generation_consumers_share_then_one_takes_all(cluster: ClusterThread) -> None:
    first = _produce(cluster, RECORDS, "a")
    group = "g-kip848"
    c1, c2 = _consumer(cluster, group), _consumer(cluster, group)
    reads: list[Counter[tuple[int, int]]] = [Counter(), Counter()]
    try:
        _poll_until([c1, c2], reads, lambda: first <= set(reads[0]) | set(reads[1])
                    and len(c1.assignment()) + len(c2.assignment()) == PARTITIONS)  # fmt: skip
        a1 = {tp.partition for tp in c1.assignment()}
        a2 = {tp.partition for tp in c2.assignment()}
        assert a1 and a2 and not a1 & a2 and a1 | a2 == set(range(PARTITIONS)), (a1, a2)
        assert not set(reads[0]) & set(reads[1]), "a record read by both members"
        c1.commit(asynchronous=False)
        c2.commit(asynchronous=False)
        c1.close()  # leaves the group (member epoch -1)
        second = _produce(cluster, RECORDS, "b")
        _poll_until([c2], reads[1:], lambda: second <= set(reads[0]) | set(reads[1])
                    and len(c2.assignment()) == PARTITIONS)  # fmt: skip
        every = reads[0] + reads[1]
        assert set(every) == first | second
        assert max(every.values()) == 1, "a record read twice"
        c2.commit(asynchronous=False)
        committed = c2.committed([confluent_kafka.TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=10)
        ends = {p: max(o for q, o in first | second if q == p) + 1 for p in range(PARTITIONS)}
        assert {tp.partition: tp.offset for tp in committed} == ends
    finally:
        c2.close()


def test_the_classic_protocol_still_works_beside_it(cluster: ClusterThread) -> None:
    acked = _produce(cluster, 60, "c")
    c = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "g-classic-beside",
                                  "auto.offset.reset": "earliest"})  # fmt: skip
    c.subscribe([TOPIC])
    reads: list[Counter[tuple[int, int]]] = [Counter()]
    try:
        _poll_until([c], reads, lambda: acked <= set(reads[0]))
    finally:
        c.close()
