"""Partition reassignment with real Kafka clients against a running cluster
(docs/design/reassignment.md): kafkajs's admin moves a partition, leader
included, while confluent-kafka produces to it with acks=all, and every
record acknowledged is read back once; ListPartitionReassignments shows the
move while it runs; refusals carry Kafka's codes (AlterPartitionReassignments
and ListPartitionReassignments over kio, where kafkajs cannot send them);
``partlog topics drain`` empties a broker.  On the embedded controller and
on etcd.  The controllers' rules are tested in tests/unit and
tests/integration; the broker side (a replica joining, one dropping its log)
in tests/integration too."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from partlog.kafka.errors import Errors
from tests.integration.test_kafka_front import _ask
from tests.kafka_helpers import (
    BACK_ENDS,
    QUICK_FENCING_MS,
    ClusterThread,
    admin_client,
    cluster_on_back_end,
    kio_answer,
    kio_request,
)

confluent_kafka = pytest.importorskip("confluent_kafka")

_ETCD = pytest.mark.skipif(shutil.which("etcd") is None, reason="etcd is not installed")
JS_DIR = Path(__file__).parent / "js"
# Records the producer sends during a move (bounded: the test's load), of
# 2 KiB each, one every 2 ms: about 1 MiB/s, the load for a move.
_RECORDS_MAX = 3_000
_VALUE_BYTES = 2_048


@pytest.fixture(scope="module", params=BACK_ENDS)
def cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterThread]:
    yield from cluster_on_back_end(request, tmp_path_factory, "move", azs=2, brokers_per_az=2, partitions=1,
                                  broker_session_timeout_ms=QUICK_FENCING_MS)  # fmt: skip


def _admin(cluster: ClusterThread) -> Any:
    return admin_client(cluster)


def _create(admin: Any, name: str, partitions: int, rf: int) -> None:
    from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

    admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=rf)])[name].result(30)


def _replicas(admin: Any, name: str) -> dict[int, list[int]]:
    t = admin.list_topics(name, timeout=10).topics[name]
    return {p.id: list(p.replicas) for p in t.partitions.values()}


def _settled(admin: Any, name: str, want: dict[int, list[int]], timeout_s: float = 30) -> dict[int, list[int]]:
    """The topic's replicas once the broker asked shows ``want`` (a broker's
    view follows the controller's a little later), or what it shows then."""
    deadline = time.monotonic() + timeout_s
    got = _replicas(admin, name)
    while got != want and time.monotonic() < deadline:
        time.sleep(0.1)
        got = _replicas(admin, name)
    return got


def _alter(cluster: ClusterThread, version: int, topics: list[dict[str, Any]], **extra: Any) -> Any:
    body = {"timeout": 30_000, "topics": topics, **extra}
    return kio_answer(45, version, _ask(cluster.kafka_port(1), kio_request(45, version, 5, body)))


def _codes(answer: Any) -> list[tuple[str, int, int, str | None]]:
    return [(t.name, p.partition_index, p.error_code, p.error_message) for t in answer.responses for p in t.partitions]


def _list(cluster: ClusterThread, topics: list[dict[str, Any]] | None) -> Any:
    body = {"timeout": 5_000, "topics": topics}
    return kio_answer(46, 0, _ask(cluster.kafka_port(1), kio_request(46, 0, 6, body)))


def test_kafkajs_moves_a_partition_and_its_leader_under_load_with_nothing_lost(cluster: ClusterThread) -> None:
    from confluent_kafka import Consumer, Producer

    if shutil.which("node") is None or not (JS_DIR / "node_modules" / "kafkajs").is_dir():
        pytest.skip("node or kafkajs missing (scripts/test installs kafkajs with npm)")
    admin = _admin(cluster)
    _create(admin, "move", 1, 2)
    before = _replicas(admin, "move")[0]
    free = sorted(set(cluster.cluster.brokers) - set(before))
    target = [free[0], before[1]]  # the leader (first) moves to a broker that held nothing
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5, "topic.metadata.refresh.interval.ms": 500})  # fmt: skip
    acked: list[bytes] = []
    stop = threading.Event()

    def produce() -> None:
        def done(err: Any, msg: Any) -> None:
            value = msg.value()
            if err is None and value is not None:
                acked.append(value)

        i = 0
        while not stop.is_set() and i < _RECORDS_MAX:
            producer.produce("move", f"r{i}:".encode().ljust(_VALUE_BYTES, b"."), partition=0, on_delivery=done)
            producer.poll(0)
            i += 1
            time.sleep(0.002)
        producer.flush(60)

    load = threading.Thread(target=produce, daemon=True)
    load.start()
    time.sleep(0.5)
    argv = ["node", str(JS_DIR / "reassign.js"), cluster.bootstrap, "move", "0", ",".join(map(str, target))]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=180, cwd=JS_DIR)
    stop.set()
    load.join(120)
    assert out.returncode == 0, out.stderr[-4000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["errors"] == {
        "unregistered": "INVALID_REPLICA_ASSIGNMENT",
        "duplicate": "INVALID_REPLICA_ASSIGNMENT",
        "unknown_partition": "UNKNOWN_TOPIC_OR_PARTITION",
    }
    for s in result["seen"]:  # while it ran: the union, target first, as Kafka lists it
        assert s["replicas"] == [*target, before[0]] and s["addingReplicas"] == [free[0]]
        assert s["removingReplicas"] == [before[0]]
    assert _settled(admin, "move", {0: target}) == {0: target}
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "g-move",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})  # fmt: skip
    consumer.subscribe(["move"])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(got) < len(acked) and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        value = None if m is None or m.error() is not None else m.value()
        if value is not None:
            got.append(value)
    consumer.close()
    assert acked, "the producer got no acknowledgement"
    assert sorted(set(got)) == sorted(got), "a record was read twice"
    assert set(acked) <= set(got), f"{len(set(acked) - set(got))} acknowledged records lost"
    mib = len(acked) * _VALUE_BYTES / 2**20
    print(
        f"\nmoved move/0 {before} -> {target} in {result['ms']} ms under load "
        f"({len(acked)} records, {mib:.1f} MiB acked)"
    )


def test_refusals_carry_kafkas_codes(cluster: ClusterThread) -> None:
    admin = _admin(cluster)
    _create(admin, "refuse", 1, 2)
    reps = _replicas(admin, "refuse")[0]
    parts = [{"partition_index": 0, "replicas": reps}, {"partition_index": 0, "replicas": None}]
    assert [c[2] for c in _codes(_alter(cluster, 0, [{"name": "refuse", "partitions": parts}]))] == [
        Errors.INVALID_REQUEST, Errors.INVALID_REQUEST]  # fmt: skip
    cancel = _alter(cluster, 0, [{"name": "refuse", "partitions": [{"partition_index": 0, "replicas": None}]}])
    assert [c[2] for c in _codes(cancel)] == [Errors.NO_REASSIGNMENT_IN_PROGRESS]
    bad_name = _alter(cluster, 0, [{"name": "no/such", "partitions": [{"partition_index": 0, "replicas": reps}]}])
    assert [c[2] for c in _codes(bad_name)] == [Errors.UNKNOWN_TOPIC_OR_PARTITION]
    grow = [{"name": "refuse", "partitions": [{"partition_index": 0, "replicas": sorted(cluster.cluster.brokers)}]}]
    v1 = _alter(cluster, 1, grow, allow_replication_factor_change=False)
    assert v1.allow_replication_factor_change is False
    [(_, _, code, message)] = _codes(v1)
    assert code == Errors.INVALID_REPLICA_ASSIGNMENT and "replication factor" in (message or "")
    same = _alter(cluster, 0, [{"name": "refuse", "partitions": [{"partition_index": 0, "replicas": reps}]}])
    assert [c[2] for c in _codes(same)] == [Errors.NONE]  # the current replicas: nothing to do
    listed = _list(cluster, None)
    assert listed.error_code == 0 and all(t.name != "refuse" for t in listed.topics)


def test_partlog_topics_drain_empties_a_broker(cluster: ClusterThread) -> None:
    admin = _admin(cluster)
    _create(admin, "drain", 4, 2)
    before = _replicas(admin, "drain")
    drained = before[0][0]
    where = _metadata_flag(cluster)
    out = subprocess.run(
        [sys.executable, "-m", "partlog", "topics", "drain", "drain", *where, "--broker", str(drained), "--wait",
         "--timeout-ms", "60000"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert "done in" in out.stdout
    deadline = time.monotonic() + 30
    after = _replicas(admin, "drain")
    while any(drained in r for r in after.values()) and time.monotonic() < deadline:
        time.sleep(0.1)
        after = _replicas(admin, "drain")
    assert all(drained not in r for r in after.values()), after
    assert {p: len(r) for p, r in after.items()} == {p: 2 for p in before}


def _metadata_flag(cluster: ClusterThread) -> list[str]:
    c = cluster.cluster
    if c.controller is not None:
        return ["--controller", f"127.0.0.1:{c.controller.port}"]
    return ["--metadata", c.etcd_url]


def test_kafka_python_moves_lists_and_cancels(cluster: ClusterThread) -> None:
    """kafka-python's admin (AlterPartitionReassignments and
    ListPartitionReassignments): a move to a broker that is down stays in
    progress and is listed with Kafka's fields; a cancel reverts it; a
    second cancel is NO_REASSIGNMENT_IN_PROGRESS.  On etcd a broker that
    is down is not registered (its session key went with its lease), so
    the move is refused there (reassignment.md, "Registered")."""
    pytest.importorskip("kafka")
    from kafka import TopicPartition
    from kafka.admin import KafkaAdminClient
    from kafka.errors import InvalidReplicationAssignmentError, NoReassignmentInProgressError

    admin = _admin(cluster)
    _create(admin, "kp", 1, 1)
    [before] = _replicas(admin, "kp")[0]
    down = next(b for b in sorted(cluster.cluster.brokers) if b != before and b != 1)  # broker 1 answers the admin
    cluster.kill(down)
    deadline = time.monotonic() + 60  # fenced: the metadata no longer lists it, clients do not dial it
    while down in admin.list_topics(timeout=10).brokers and time.monotonic() < deadline:
        time.sleep(0.2)
    kp = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{cluster.kafka_port(1)}", request_timeout_ms=30_000)
    try:
        tp = TopicPartition("kp", 0)
        if cluster.cluster.controller is None:  # etcd
            assert kp.alter_partition_reassignments({tp: [down]}) == {tp: InvalidReplicationAssignmentError}
            assert kp.alter_partition_reassignments({tp: None}) == {tp: NoReassignmentInProgressError}
            return
        assert kp.alter_partition_reassignments({tp: [down]}) == {tp: None}
        listed = kp.list_partition_reassignments([tp])
        assert listed == {tp: {"replicas": [down, before], "adding_replicas": [down], "removing_replicas": [before]}}
        assert kp.alter_partition_reassignments({tp: None}) == {tp: None}
        assert kp.list_partition_reassignments() == {}
        assert kp.alter_partition_reassignments({tp: None}) == {tp: NoReassignmentInProgressError}
    finally:
        kp.close()
        cluster.restart(down)
    assert _settled(admin, "kp", {0: [before]}) == {0: [before]}
