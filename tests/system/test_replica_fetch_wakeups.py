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


def test_quiet_partitions_are_answered_without_a_read(cluster: ClusterThread) -> None:
    """A follower's fetch of a partition where nothing moved since its last
    fetch gets that answer again, without reading the store."""
    from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

    admin = admin_client(cluster)
    admin.create_topics([NewTopic("quiet", IDLE, replica_assignment=[[1, 2, 3]] * IDLE)])["quiet"].result(30)
    producer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for p in range(IDLE):
        producer.produce("quiet", b"x", partition=p)
    assert producer.flush(30) == 0
    stats = cluster.cluster.brokers[1].replicas.stats
    time.sleep(1.0)  # the followers catch up and learn the HWM
    served, unchanged = stats.replica_partitions_served, stats.replica_partitions_unchanged
    omitted, incremental = stats.replica_rows_omitted, stats.replica_fetches_incremental
    not_sent, quiet = stats.replica_items_not_sent, stats.replica_partitions_quiet
    time.sleep(2.0)  # ~4 fetches per follower, each answering the 30 partitions
    served = stats.replica_partitions_served - served
    unchanged = stats.replica_partitions_unchanged - unchanged
    omitted = stats.replica_rows_omitted - omitted
    incremental = stats.replica_fetches_incremental - incremental
    not_sent = stats.replica_items_not_sent - not_sent
    quiet = stats.replica_partitions_quiet - quiet
    answered = served + quiet
    assert answered >= 2 * IDLE, (served, quiet)
    # Nothing was produced: all but a fetch's worth were answered unchanged
    # (most in the sessions' quiet lane, without even a serve), and left out
    # of the (sparse) answers, the followers knowing it all.
    assert quiet + unchanged >= answered - 2 * IDLE, (quiet, unchanged, served)
    assert quiet >= answered - 4 * IDLE, (quiet, served)
    assert answered >= omitted >= answered - 2 * IDLE, (omitted, answered)
    # The fetches were incremental (replica fetch sessions): the followers
    # named none of the quiet partitions, the leader served its copy.
    assert incremental >= 2, incremental
    assert not_sent >= IDLE * (incremental - 1), (not_sent, incremental)
    # The followers hold every record and the leader's HWM.
    tps = [tp for tp in cluster.cluster.brokers[1].store.partitions() if tp.topic_id == _topic_id(cluster, "quiet")]
    assert len(tps) == IDLE
    for b in (2, 3):
        store = cluster.cluster.brokers[b].store
        assert [(store.log_end_offset(tp), store.high_watermark(tp)) for tp in tps] == [(1, 1)] * IDLE


def _topic_id(cluster: ClusterThread, name: str) -> object:
    return next(tid for tid, (n, _) in cluster.cluster.brokers[1].store.topics().items() if n == name)
