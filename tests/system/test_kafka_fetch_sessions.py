"""Incremental fetch sessions (KIP-227) with a real client: kafka-python
2.x/3.x keeps one session per broker (its ``FetchSessionHandler``);
confluent-kafka (librdkafka) and aiokafka send sessionless fetches (id 0,
epoch -1), which tests/system/test_kafka_clients.py covers.

A consumer of 50 partitions reads every record exactly once through
incremental fetches; one whose session is evicted gets
FETCH_SESSION_ID_NOT_FOUND and goes on with a full fetch; a broker restart
in the middle of a session loses nothing.  The size of an idle fetch's
answer, 200 partitions, with and without a session, is printed (``-s``).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest

from partlog.kafka_front.apis import FrontConfig
from partlog.tools.local_cluster import TOPIC
from tests.kafka_helpers import QUICK_FENCING_MS, ClusterThread, kio_answer, kio_request, read_frame

kafka = pytest.importorskip("kafka")

PARTITIONS = 50
PER_PARTITION = 10
READ_S = 60.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterThread]:
    c = ClusterThread(
        str(tmp_path_factory.mktemp("fsess")), partitions=PARTITIONS, broker_session_timeout_ms=QUICK_FENCING_MS
    )
    try:
        yield c
    finally:
        c.close()


def _stats(cluster: ClusterThread) -> dict[str, int]:
    total: dict[str, int] = {}
    for node in cluster.cluster.nodes.values():
        assert node.kafka is not None
        for k, v in node.kafka.apis.fetches.sessions.stats.items():
            total[k] = total.get(k, 0) + v
    return total


def _produce(cluster: ClusterThread, tag: str, partitions: range) -> set[tuple[int, bytes]]:
    p = kafka.KafkaProducer(bootstrap_servers=cluster.bootstrap.split(","), acks="all", linger_ms=5)
    futures = [p.send(TOPIC, value=f"{tag}-{i}-{n}".encode(), partition=i) for i in partitions
               for n in range(PER_PARTITION)]  # fmt: skip
    p.flush(30)
    for f in futures:
        f.get(timeout=30)
    p.close()
    return {(i, f"{tag}-{i}-{n}".encode()) for i in partitions for n in range(PER_PARTITION)}


def _consumer(cluster: ClusterThread, partitions: range, **kw: Any) -> Any:
    c = kafka.KafkaConsumer(bootstrap_servers=cluster.bootstrap.split(","), enable_auto_commit=False,
                            fetch_max_wait_ms=100, **kw)  # fmt: skip
    c.assign([kafka.TopicPartition(TOPIC, i) for i in partitions])
    c.seek_to_end()
    for i in partitions:
        c.position(kafka.TopicPartition(TOPIC, i))  # resolved now: records sent later are read
    return c


def _read(c: Any, want: set[tuple[int, bytes]], seen: list[tuple[int, int, bytes]]) -> None:
    deadline = time.monotonic() + READ_S
    while not want <= {(p, v) for p, _, v in seen} and time.monotonic() < deadline:
        for recs in c.poll(timeout_ms=200).values():
            seen.extend((r.partition, r.offset, r.value) for r in recs)
    assert want <= {(p, v) for p, _, v in seen}, f"{len(want - {(p, v) for p, _, v in seen})} records not read"


def _exactly_once(seen: list[tuple[int, int, bytes]]) -> None:
    keys = [(p, o) for p, o, _ in seen]
    assert len(keys) == len(set(keys)), "a record was read twice"


def test_a_consumer_of_50_partitions_reads_everything_once_through_incremental_fetches(
    cluster: ClusterThread,
) -> None:
    before = _stats(cluster)
    c = _consumer(cluster, range(PARTITIONS))
    seen: list[tuple[int, int, bytes]] = []
    _read(c, _produce(cluster, "a", range(PARTITIONS)), seen)
    made = _stats(cluster)
    assert made["created"] > before["created"]
    # Waves b and c are read within the sessions made: incremental fetches
    # only (a full one would make a new session).
    for wave in ("b", "c"):
        _read(c, _produce(cluster, wave, range(PARTITIONS)), seen)
    c.close()
    _exactly_once(seen)
    assert len(seen) == 3 * PARTITIONS * PER_PARTITION
    after = _stats(cluster)
    assert after["incremental"] > made["incremental"], (made, after)
    for k in ("created", "not_found", "invalid_epoch"):
        assert after[k] == made[k], (made, after)


def test_a_broker_restart_in_the_middle_of_a_session_loses_nothing(cluster: ClusterThread) -> None:
    c = _consumer(cluster, range(PARTITIONS))
    seen: list[tuple[int, int, bytes]] = []
    _read(c, _produce(cluster, "r1", range(PARTITIONS)), seen)
    victim = max(cluster.cluster.brokers)
    cluster.kill(victim)
    cluster.restart(victim)
    want = _produce(cluster, "r2", range(PARTITIONS))
    _read(c, want, seen)
    c.close()
    _exactly_once(seen)


def test_an_evicted_session_is_found_missing_and_the_client_goes_on(tmp_path: Any) -> None:
    # One slot, and a session unused for a millisecond is stale: the two
    # consumers take the slot from each other, and the one that lost it is
    # refused its next incremental fetch and goes on with a full one.
    front = FrontConfig(fetch_session_cache_slots=1, fetch_session_eviction_ms=0)
    cluster = ClusterThread(str(tmp_path), front=front, partitions=20, azs=1)
    try:
        small = _consumer(cluster, range(5))
        seen_small: list[tuple[int, int, bytes]] = []
        _read(small, _produce(cluster, "s1", range(5)), seen_small)
        assert _stats(cluster)["created"] >= 1
        large = _consumer(cluster, range(20))
        seen_large: list[tuple[int, int, bytes]] = []
        _read(large, _produce(cluster, "l1", range(5, 20)), seen_large)
        _read(small, _produce(cluster, "s2", range(5)), seen_small)
        stats = _stats(cluster)
        assert stats["evictions"] >= 1 and stats["not_found"] >= 1, stats
        _read(large, _produce(cluster, "l2", range(5, 20)), seen_large)
        small.close()
        large.close()
        _exactly_once(seen_small)
        _exactly_once(seen_large)
    finally:
        cluster.close()


def _fetch_bytes(port: int, session_id: int, epoch: int, partitions: range, correlation: int,
                 forget: range = range(0)) -> tuple[int, Any]:  # fmt: skip
    named = [{"partition": i, "fetch_offset": 0, "partition_max_bytes": 1024 * 1024, "current_leader_epoch": -1,
              "last_fetched_epoch": -1, "log_start_offset": -1} for i in partitions]  # fmt: skip
    body = {"replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 50 * 1024 * 1024, "isolation_level": 0,
            "session_id": session_id, "session_epoch": epoch, "rack_id": "",
            "forgotten_topics_data": [{"topic": TOPIC, "partitions": list(forget)}] if forget else [],
            "topics": [{"topic": TOPIC, "partitions": named}] if named else []}  # fmt: skip
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(kio_request(1, 12, correlation, body))
        frame = read_frame(s)
    assert frame is not None
    return len(frame) + 4, kio_answer(1, 12, frame)


def test_idle_fetch_answers_of_200_partitions_with_and_without_a_session(tmp_path: Any) -> None:
    parts = range(200)
    cluster = ClusterThread(str(tmp_path), partitions=len(parts), azs=1)
    try:
        port = cluster.kafka_port(min(cluster.cluster.brokers))
        full, answer = _fetch_bytes(port, 0, 0, parts, 1)
        sid = int(answer.session_id)
        assert sid != 0 and sum(len(t.partitions) for t in answer.responses) == len(parts)
        sessionless, _ = _fetch_bytes(port, 0, -1, parts, 2)
        incremental, answer = _fetch_bytes(port, sid, 1, range(0), 3)
        assert int(answer.error_code) == 0 and answer.responses == ()
        _, answer = _fetch_bytes(port, sid, 1, range(0), 4)
        assert int(answer.error_code) == 71  # INVALID_FETCH_SESSION_EPOCH: epoch 1 was used
        _, answer = _fetch_bytes(port, sid, 2, range(0), 5, forget=range(100))
        assert int(answer.error_code) == 0 and int(answer.session_id) == sid
        node = cluster.cluster.nodes[min(cluster.cluster.brokers)]
        assert node.kafka is not None
        held = node.kafka.apis.fetches.sessions.get(sid)
        assert held is not None and sorted(held.partitions) == [(TOPIC, i) for i in range(100, 200)]
        print(f"\nidle fetch of {len(parts)} partitions: {sessionless} bytes sessionless, {full} full, "
              f"{incremental} incremental: {sessionless / incremental:.0f}x smaller")  # fmt: skip
        assert incremental * 20 < sessionless
    finally:
        cluster.close()
