"""CreateTopics with real Kafka clients against a running three-broker
cluster, on the embedded controller and on etcd: manual replica
assignments (confluent-kafka's ``NewTopic(replica_assignment=...)``) give
the topic those replicas, led by the first; bad ones get Kafka's codes;
1,000 topics in one request (kafka-python, 60 s) are created; a request
whose timeout_ms is <= 0 times out before the controller runs it, as
Kafka's.  The pure rules are unit-tested in tests/unit/test_topic_create.py;
a controller too slow for the request's timeout in
tests/system/test_kafka_create_topics_slow.py."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from partlog.kafka.errors import Errors
from tests.kafka_helpers import BACK_ENDS, ClusterThread, admin_client, cluster_on_back_end

confluent_kafka = pytest.importorskip("confluent_kafka")


@pytest.fixture(scope="module", params=BACK_ENDS)
def cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterThread]:
    yield from cluster_on_back_end(request, tmp_path_factory, "create", partitions=3)


def _admin(cluster: ClusterThread) -> Any:
    return admin_client(cluster)


def _replicas(admin: Any, name: str) -> dict[int, tuple[int, list[int]]]:
    """Partition -> (leader, replicas) once Metadata shows the topic."""
    deadline = time.monotonic() + 30
    while True:
        t = admin.list_topics(topic=name, timeout=10).topics.get(name)
        if t is not None and t.error is None and t.partitions:
            return {p.id: (p.leader, list(p.replicas)) for p in t.partitions.values()}
        assert time.monotonic() < deadline, f"{name} never showed in Metadata"
        time.sleep(0.2)


def _error(admin: Any, topic: Any, **options: Any) -> int:
    try:
        admin.create_topics([topic], operation_timeout=30, **options)[topic.topic].result(30)
    except confluent_kafka.KafkaException as e:
        return int(e.args[0].code())
    return 0


def test_manual_assignment_gives_those_replicas(cluster: ClusterThread) -> None:
    from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

    admin = _admin(cluster)
    a, b, c = sorted(admin.list_topics(timeout=10).brokers)
    asked = [[c, a], [a, b], [b, c]]
    # librdkafka wants the count beside the assignment and sends -1, -1 (Kafka's rule).
    topic = NewTopic("placed", num_partitions=len(asked), replica_assignment=asked)
    assert _error(admin, topic) == 0
    got = _replicas(admin, "placed")
    assert got == {i: (r[0], r) for i, r in enumerate(asked)}


@pytest.mark.parametrize(
    ("assignment", "code"),
    [
        ([[1, 2], [2]], Errors.INVALID_REPLICA_ASSIGNMENT),  # replica counts differ
        ([[1, 1]], Errors.INVALID_REPLICA_ASSIGNMENT),  # a broker twice
        ([[1, 77]], Errors.INVALID_REPLICA_ASSIGNMENT),  # no broker 77
        ([[-1]], Errors.INVALID_REPLICA_ASSIGNMENT),  # a negative id
    ],
)
def test_bad_assignments_get_kafkas_codes(cluster: ClusterThread, assignment: list[list[int]], code: Errors) -> None:
    from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

    admin = _admin(cluster)
    name = f"bad-{abs(hash(str(assignment))) % 10_000}"
    assert _error(admin, NewTopic(name, len(assignment), replica_assignment=assignment)) == int(code)
    assert name not in admin.list_topics(timeout=10).topics


def test_assignment_with_a_shape_is_invalid_request(cluster: ClusterThread) -> None:
    """Kafka's rule: with assignments, num_partitions and replication_factor
    are -1 (confluent-kafka refuses it locally, so the request is raw)."""
    import socket

    from tests.integration.test_kafka_front import _ask  # noqa: F401 (raw requests below)
    from tests.kafka_helpers import kio_answer, kio_request

    host, port = cluster.bootstrap.split(",")[0].rsplit(":", 1)
    topic = {"name": "shaped", "num_partitions": 1, "replication_factor": -1,
             "assignments": [{"partition_index": 0, "broker_ids": [1]}], "configs": []}  # fmt: skip
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(kio_request(19, 5, 1, {"topics": [topic], "timeout": 30_000, "validate_only": False}))
        from tests.kafka_helpers import read_frame

        frame = read_frame(s)
    assert frame is not None
    row = kio_answer(19, 5, frame).topics[0]
    assert row.error_code == Errors.INVALID_REQUEST
    assert "numPartitions was not set to -1" in (row.error_message or "")


def test_a_thousand_topics_in_one_request(cluster: ClusterThread) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=70_000)
    try:
        names = [f"many-{i}" for i in range(1_000)]
        out = admin.create_topics([NewTopic(n, 1, 1) for n in names], timeout_ms=60_000)
        errors = {e for _, e, *_ in out.topic_errors if e != 0} if hasattr(out, "topic_errors") else set()
        assert not errors
        assert set(names) <= set(admin.list_topics())
    finally:
        admin.close()


def test_zero_timeout_times_out_before_the_controller(cluster: ClusterThread) -> None:
    """Kafka's controller takes now + timeout_ms as the deadline: at <= 0 the
    write is timed out before it runs, and nothing is created."""
    import socket

    from tests.kafka_helpers import kio_answer, kio_request, read_frame

    host, port = cluster.bootstrap.split(",")[0].rsplit(":", 1)
    topic = {"name": "never", "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(kio_request(19, 5, 1, {"topics": [topic], "timeout": 0, "validate_only": False}))
        frame = read_frame(s)
    assert frame is not None
    assert kio_answer(19, 5, frame).topics[0].error_code == Errors.REQUEST_TIMED_OUT
    assert "never" not in _admin(cluster).list_topics(timeout=10).topics


def test_cli_replica_assignment(cluster: ClusterThread, capsys: pytest.CaptureFixture[str]) -> None:
    """``partlog topics create --replica-assignment``, as kafka-topics.sh takes it."""
    from partlog.tools.cli import main

    c = cluster.cluster
    target = ["--controller", f"127.0.0.1:{c.controller.port}"] if c.controller else ["--metadata", c.etcd_url]
    a, b, _ = sorted(_admin(cluster).list_topics(timeout=10).brokers)
    # On etcd a broker whose lease lapsed under load is unregistered until it
    # registers again (CI saw "no such broker is registered" once): retry that.
    deadline = time.monotonic() + 30
    while (code := main(["topics", "create", "cli-placed", "--replica-assignment", f"{b}:{a},{a}:{b}", *target])) != 0:
        err = capsys.readouterr().err
        assert "no such broker is registered" in err and time.monotonic() < deadline, err
        time.sleep(0.5)
    assert code == 0
    assert capsys.readouterr().out.startswith("topic cli-placed")
    assert _replicas(_admin(cluster), "cli-placed") == {0: (b, [b, a]), 1: (a, [a, b])}
    assert main(["topics", "create", "cli-bad", "--replica-assignment", f"{a}:{a}", *target]) == 1
    assert "INVALID_REPLICA_ASSIGNMENT" in capsys.readouterr().err
    assert main(["topics", "create", "cli-both", "--partitions", "1", "--replica-assignment", f"{a}", *target]) == 2
