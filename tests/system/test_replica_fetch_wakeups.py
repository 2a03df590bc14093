"""A parked replica fetch that an append wakes reads again only the
partitions that moved: on a leader of many idle partitions, each append to
one of them must not read every other again (a loaded cluster of ~1,000
topics spent most of a core on those reads, and transactions timed out)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.kafka_helpers import ClusterThread, admin_client

confluent_kafka = pytest.importorskip("confluent_kafka")

IDLE = 30
RECORDS = 60


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ClusterThread]:
    c = ClusterThread(str(tmp_path), partitions=1)
    try:
        yield c
    finally:
        c.close()


def test_a_woken_fetch_reads_only_the_partitions_that_moved(cluster: ClusterThread) -> None:
    from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

    admin = admin_client(cluster)
    # Broker 1 leads every partition; 2 and 3 follow them all.
    topics = [
        NewTopic("hot", 1, replica_assignment=[[1, 2, 3]]),
        NewTopic("idle", IDLE, replica_assignment=[[1, 2, 3]] * IDLE),
    ]
    for f in admin.create_topics(topics).values():
        f.result(30)
    producer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 0})
    producer.produce("hot", b"warm-up", partition=0)
    assert producer.flush(30) == 0
    stats = cluster.cluster.brokers[1].replicas.stats
    wakeups, again, served = (
        stats.replica_fetch_wakeups,
        stats.replica_partitions_served_again,
        stats.replica_partitions_served,
    )
    deadline = time.monotonic() + 60
    for i in range(RECORDS):  # one append at a time: each wakes the parked fetches
        producer.produce("hot", f"r{i}".encode(), partition=0)
        assert producer.flush(30) == 0
        if time.monotonic() > deadline:
            break
    wakeups = stats.replica_fetch_wakeups - wakeups
    again = stats.replica_partitions_served_again - again
    served = stats.replica_partitions_served - served
    assert wakeups > 0, "no parked fetch was woken: the test measures nothing"
    # Each wake reads the hot partition (and, rarely, one the HWM moved on
    # too), never the 30 idle ones: before, every wake read all 31.
    assert again <= 3 * wakeups, (again, wakeups, served)
    assert served > again  # the first serve of each fetch still reads them all
