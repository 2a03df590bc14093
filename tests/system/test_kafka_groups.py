"""Consumer groups through the Kafka front end, with real clients:
confluent-kafka (librdkafka) and aiokafka, members and coordinators killed."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from partlog.tools.local_cluster import TOPIC
from tests.kafka_helpers import QUICK_FENCING_MS, ClusterThread

confluent_kafka = pytest.importorskip("confluent_kafka")

PARTITIONS = 6
RECORDS = 1200
# Kafka's group.min.session.timeout.ms: the shortest a member may ask for.
SESSION_MS = 6000
# How often a bounded wait looks again at what it waits for (records read,
# offsets committed): short, so a wait ends soon after the thing happened.
POLL_S = 0.02

AIOKAFKA_CONSUMER_SCRIPT = r"""
import asyncio, sys
from aiokafka import AIOKafkaConsumer
async def main():
    c = AIOKafkaConsumer(sys.argv[3], bootstrap_servers=sys.argv[1], group_id=sys.argv[2],
                         auto_offset_reset="earliest", session_timeout_ms=6000, heartbeat_interval_ms=500,
                         enable_auto_commit=True, auto_commit_interval_ms=200)
    await c.start()
    while True:
        for recs in (await c.getmany(timeout_ms=200)).values():
            for r in recs:
                print(r.partition, r.offset, flush=True)
asyncio.run(main())
"""

CONSUMER_SCRIPT = r"""
import sys
from confluent_kafka import Consumer
c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2], "auto.offset.reset": "earliest",
              "session.timeout.ms": 6000, "heartbeat.interval.ms": 500, "enable.auto.commit": True,
              "auto.commit.interval.ms": 200})
c.subscribe([sys.argv[3]])
while True:
    m = c.poll(0.2)
    if m is not None and not m.error():
        print(m.partition(), m.offset(), flush=True)
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterThread]:
    c = ClusterThread(
        str(tmp_path_factory.mktemp("groups")), partitions=PARTITIONS, broker_session_timeout_ms=QUICK_FENCING_MS
    )
    try:
        yield c
    finally:
        c.close()


def _produce(cluster: ClusterThread, n: int, tag: str) -> dict[tuple[int, int], bytes]:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True, "linger.ms": 5})
    acked: dict[tuple[int, int], bytes] = {}

    def done(err: Any, msg: Any) -> None:
        assert err is None, err
        acked[(msg.partition(), msg.offset())] = msg.value()

    for i in range(n):
        p.produce(TOPIC, value=f"{tag}-{i}".encode(), partition=i % PARTITIONS, on_delivery=done)
    assert p.flush(60) == 0
    return acked


def _spawn_consumer(cluster: ClusterThread, group: str, script: str = CONSUMER_SCRIPT) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", script, cluster.bootstrap, group, TOPIC],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )


def _reader(proc: subprocess.Popen[str], out: list[tuple[int, int]]) -> threading.Thread:
    def run() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            p, o = line.split()
            out.append((int(p), int(o)))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


@pytest.mark.parametrize("client", ["confluent-kafka", "aiokafka"])
def test_a_group_of_three_survives_a_member_killed_and_reads_everything(cluster: ClusterThread, client: str) -> None:
    script = CONSUMER_SCRIPT if client == "confluent-kafka" else AIOKAFKA_CONSUMER_SCRIPT
    acked = _produce(cluster, RECORDS, f"k-{client}")
    group = f"g-kill-{client}"
    procs = [_spawn_consumer(cluster, group, script) for _ in range(3)]
    outs: list[list[tuple[int, int]]] = [[] for _ in procs]
    for p, out in zip(procs, outs, strict=True):
        _reader(p, out)
    try:
        deadline = time.monotonic() + 90
        first = set(acked)
        while not first <= {r for out in outs for r in out} and time.monotonic() < deadline:
            time.sleep(POLL_S)
        # Wait until the group's auto-commits cover the first records.
        _wait_committed(cluster, group, {p: max(o for q, o in first if q == p) + 1 for p, _ in first}, deadline)
        # kill -9: no LeaveGroup; the coordinator notices by the session timeout.
        os.kill(procs[0].pid, signal.SIGKILL)
        procs[0].wait()
        more = _produce(cluster, RECORDS, "after")
        acked.update(more)
        want = set(acked)
        while time.monotonic() < deadline:
            seen = {r for out in outs for r in out}
            if want <= seen:
                break
            time.sleep(POLL_S)
        seen_counts = Counter(r for out in outs for r in out)
        missing = want - set(seen_counts)
        assert not missing, f"{len(missing)} acknowledged records never consumed, e.g. {sorted(missing)[:5]}"
        duplicates = sum(n - 1 for n in seen_counts.values())
        print(f"records {len(want)}, delivered twice {duplicates}")
        # At-least-once: what was committed before the kill is never read again.
        assert all(seen_counts[r] == 1 for r in first)
        # The survivors now share every partition.
        assert {p for p, _ in more} <= {p for out in outs[1:] for p, _ in out}
    finally:
        for p in procs:
            p.kill()
            p.wait()


def _wait_committed(cluster: ClusterThread, group: str, offsets: dict[int, int], deadline: float) -> None:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group})
    try:
        while time.monotonic() < deadline:
            got = c.committed([TopicPartition(TOPIC, p) for p in offsets], timeout=10)
            if all(t.offset >= offsets[t.partition] for t in got):
                return
            time.sleep(POLL_S)
        raise AssertionError(f"group {group} did not commit {offsets}")
    finally:
        c.close()


def _coordinator(cluster: ClusterThread, group: str) -> int:
    async def find() -> int:
        any_broker = next(iter(cluster.cluster.nodes.values()))
        assert any_broker.kafka is not None
        error, broker_id = await any_broker.kafka.apis.groups.find_coordinator(group)
        assert error == 0
        return broker_id

    return cluster.call(find())


def test_committed_offsets_survive_the_coordinators_kill(cluster: ClusterThread) -> None:
    from confluent_kafka import Consumer, TopicPartition

    group = "g-durable"
    _produce(cluster, 60, "d")
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "enable.auto.commit": False})
    wanted = [TopicPartition(TOPIC, p, 3 + p) for p in range(PARTITIONS)]
    c.commit(offsets=wanted, asynchronous=False)
    c.close()
    coordinator = _coordinator(cluster, group)
    cluster.kill(coordinator)
    try:
        c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group})
        deadline = time.monotonic() + 60
        got: list[Any] = []
        while time.monotonic() < deadline:
            try:
                got = c.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=10)
                if all(t.offset >= 0 for t in got):
                    break
            except confluent_kafka.KafkaException:
                pass
            time.sleep(POLL_S)
        c.close()
        assert [(t.partition, t.offset) for t in got] == [(p, 3 + p) for p in range(PARTITIONS)]
        assert _coordinator(cluster, group) != coordinator
    finally:
        cluster.restart(coordinator)


def test_aiokafka_group_of_three_splits_the_partitions(cluster: ClusterThread) -> None:
    aiokafka = pytest.importorskip("aiokafka")
    acked = _produce(cluster, 300, "aio")

    async def main() -> tuple[list[set[int]], set[tuple[int, int]]]:
        consumers = [
            aiokafka.AIOKafkaConsumer(
                TOPIC,
                bootstrap_servers=cluster.bootstrap,
                group_id="g-aio",
                auto_offset_reset="earliest",
                session_timeout_ms=SESSION_MS,
                heartbeat_interval_ms=500,
            )
            for _ in range(3)
        ]
        for c in consumers:
            await c.start()
        seen: set[tuple[int, int]] = set()
        try:
            deadline = time.monotonic() + 60
            while not set(acked) <= seen and time.monotonic() < deadline:
                for c in consumers:
                    batches = await c.getmany(timeout_ms=200)
                    for recs in batches.values():
                        seen.update((r.partition, r.offset) for r in recs)
            # Once stable, the three members hold disjoint shares of all partitions.
            for _ in range(20):
                shares = [{tp.partition for tp in c.assignment()} for c in consumers]
                if sum(map(len, shares)) == PARTITIONS:
                    break
                for c in consumers:
                    await c.getmany(timeout_ms=200)
            return shares, seen
        finally:
            for c in consumers:
                await c.stop()

    shares, seen = asyncio.run(main())
    assert set(acked) <= seen
    assert set().union(*shares) == set(range(PARTITIONS))
    assert sum(map(len, shares)) == PARTITIONS and all(shares)
