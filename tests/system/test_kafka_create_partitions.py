"""CreatePartitions with real Kafka clients (confluent-kafka's AdminClient,
producer and group consumer) against a running cluster, on the embedded
controller and on etcd: the topic grows, Metadata shows the new partitions,
a producer that refreshes its metadata spreads over them, a group consumer
gets them after its rebalance, and every refusal has Kafka's error code.
The controllers' decisions and the hostile-request bounds are unit-tested in
tests/unit/test_create_partitions.py."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from typing import Any

import pytest

from partlog.controller.cluster_meta import PartitionInfo
from partlog.kafka.errors import Errors
from tests.integration.test_kafka_front import _ask
from tests.kafka_helpers import BACK_ENDS, ClusterThread, admin_client, cluster_on_back_end, kio_answer, kio_request

confluent_kafka = pytest.importorskip("confluent_kafka")

_ETCD = pytest.mark.skipif(shutil.which("etcd") is None, reason="etcd is not installed")


@pytest.fixture(scope="module", params=BACK_ENDS)
def cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterThread]:
    yield from cluster_on_back_end(request, tmp_path_factory, "grow", partitions=3)


def _admin(cluster: ClusterThread) -> Any:
    return admin_client(cluster)


def _create(admin: Any, name: str, partitions: int, rf: int = 3) -> None:
    from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

    admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=rf)])[name].result(30)


def _grow(admin: Any, name: str, count: int, assignment: Any = None, validate_only: bool = False) -> None:
    from confluent_kafka.admin import NewPartitions  # type: ignore[attr-defined]

    asked = NewPartitions(name, count) if assignment is None else NewPartitions(name, count, assignment)
    admin.create_partitions([asked], validate_only=validate_only, operation_timeout=30)[name].result(30)


def _partitions(admin: Any, name: str, n: int | None = None) -> dict[int, list[int]]:
    """The topic's replicas by partition, once the broker asked shows ``n``
    partitions (each broker's view follows the controller's a little later)."""
    deadline = time.monotonic() + 30
    while True:
        t = admin.list_topics(name, timeout=10).topics[name]
        got = {p.id: list(p.replicas) for p in t.partitions.values()}
        if n is None or len(got) == n or time.monotonic() > deadline:
            return got
        time.sleep(0.1)


def test_a_grown_topic_is_produced_to_and_consumed_from_by_real_clients(cluster: ClusterThread) -> None:
    from confluent_kafka import Consumer, Producer

    admin = _admin(cluster)
    _create(admin, "grow", 2)
    refresh = {"topic.metadata.refresh.interval.ms": 500}
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "g-grow",
                         "auto.offset.reset": "earliest", **refresh})  # fmt: skip
    consumer.subscribe(["grow"])
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5, **refresh})
    acked: dict[int, set[bytes]] = {}

    def done(err: object, msg: Any) -> None:
        assert err is None, err
        acked.setdefault(msg.partition(), set()).add(msg.value())

    def produce(tag: str, n: int) -> None:
        for i in range(n):
            producer.produce("grow", key=f"{tag}{i}".encode(), value=f"{tag}{i}".encode(), on_delivery=done)
        assert producer.flush(60) == 0

    got: dict[int, set[bytes]] = {}

    def consume_until(done: Any) -> None:
        deadline = time.monotonic() + 60
        while not done() and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None and not m.error():
                got.setdefault(m.partition() or 0, set()).add(m.value() or b"")

    produce("a", 100)
    consume_until(lambda: sum(map(len, got.values())) >= 100)
    before = _partitions(admin, "grow")
    _grow(admin, "grow", 5)
    after = _partitions(admin, "grow", 5)
    assert sorted(after) == [0, 1, 2, 3, 4] and {p: after[p] for p in before} == before
    assert all(len(set(r)) == 3 for r in after.values())
    # The producer's default partitioner spreads keys over the new partitions
    # once its metadata refresh has seen them.
    deadline = time.monotonic() + 60
    while not {3, 4} <= acked.keys() and time.monotonic() < deadline:
        produce(f"b{time.monotonic()}-", 50)
        time.sleep(0.2)
    assert {3, 4} <= acked.keys(), sorted(acked)
    # The group rebalanced onto them: every acknowledged record is read.
    consume_until(lambda: all(acked[p] <= got.get(p, set()) for p in acked))
    consumer.close()
    assert {p: acked[p] - got.get(p, set()) for p in acked} == {p: set() for p in acked}


def test_manual_assignments_and_validate_only(cluster: ClusterThread) -> None:
    admin = _admin(cluster)
    _create(admin, "manual", 1, rf=2)
    _grow(admin, "manual", 3, validate_only=True)
    assert len(_partitions(admin, "manual")) == 1
    _grow(admin, "manual", 3, assignment=[[3, 1], [2, 3]])
    got = _partitions(admin, "manual", 3)
    assert got[1] == [3, 1] and got[2] == [2, 3]


def _raw(cluster: ClusterThread, topics: list[tuple[str, int, Any]], validate_only: bool = False) -> list[Any]:
    """CreatePartitions v3 as sent (the AdminClient checks some input itself)."""
    body = {
        "topics": [
            {"name": n, "count": c, "assignments": None if a is None else [{"broker_ids": r} for r in a]}
            for n, c, a in topics
        ],
        "timeout": 30_000,
        "validate_only": validate_only,
    }
    answer = kio_answer(37, 3, _ask(cluster.kafka_port(1), kio_request(37, 3, 7, body)))
    return [(r.name, r.error_code, r.error_message) for r in answer.results]


@pytest.mark.parametrize(
    ("count", "assignment", "error", "says"),
    [
        (2, None, 37, "Topic already has 2 partition(s)."),  # INVALID_PARTITIONS
        (1, None, 37, "The topic refused currently has 2 partition(s); 1 would not be an increase."),
        (4, [[1, 2]], 39, "Attempted to add 2 additional partition(s), but only 1 assignment(s) were specified."),
        (3, [[1, 99]], 39, "The manual partition assignment includes broker 99, but no such broker is registered."),
        (3, [[2, 2]], 39, "The manual partition assignment includes the broker 2 more than once."),
        (3, [[]], 39, "The manual partition assignment includes an empty replica list."),
        (
            3,
            [[1, 2, 3]],
            39,
            "The manual partition assignment includes a partition with 3 replica(s), but this is "
            "not consistent with previous partitions, which have 2 replica(s).",
        ),
    ],
)
def test_refusals(cluster: ClusterThread, count: int, assignment: Any, error: int, says: str) -> None:
    admin = _admin(cluster)
    if "refused" not in admin.list_topics(timeout=10).topics:
        _create(admin, "refused", 2, rf=2)
    assert _raw(cluster, [("refused", count, assignment)]) == [("refused", error, says)]
    assert len(_partitions(admin, "refused")) == 2


def test_the_admin_client_sees_the_error_codes(cluster: ClusterThread) -> None:
    admin = _admin(cluster)
    _create(admin, "codes", 2, rf=2)
    with pytest.raises(confluent_kafka.KafkaException, match="INVALID_PARTITIONS"):
        _grow(admin, "codes", 2)
    with pytest.raises(confluent_kafka.KafkaException, match="INVALID_REPLICA_ASSIGNMENT"):
        _grow(admin, "codes", 3, [[1, 99]])


def test_unknown_internal_and_duplicate_topics(cluster: ClusterThread) -> None:
    admin = _admin(cluster)
    with pytest.raises(confluent_kafka.KafkaException, match="UNKNOWN_TOPIC_OR_PART"):
        _grow(admin, "never-was", 3)
    with pytest.raises(confluent_kafka.KafkaException, match="INVALID_REQUEST"):
        _grow(admin, "__consumer_offsets", 100)
    # A topic named twice (the AdminClient refuses to send it).
    assert _raw(cluster, [("grow", 9, None), ("grow", 9, None)]) == [("grow", 42, "Duplicate topic name.")]


def test_the_topics_cli_adds_partitions(cluster: ClusterThread, capsys: pytest.CaptureFixture[str]) -> None:
    """``partlog topics add-partitions`` through the controller or etcd,
    whichever the cluster has."""
    from partlog.tools.cli import main

    admin = _admin(cluster)
    _create(admin, "by-cli", 1, rf=2)
    c = cluster.cluster
    port = c.controller.port if c.controller is not None else 0
    where = ["--metadata", c.etcd_url] if c.etcd_url else ["--controller", f"127.0.0.1:{port}"]
    assert main(["topics", "add-partitions", "by-cli", "--partitions", "3", "--validate-only", *where]) == 0
    assert "would have 3 partitions" in capsys.readouterr().out
    assert main(["topics", "add-partitions", "by-cli", "--partitions", "3", "--replica-assignment", "1:2,3:1",
                 *where]) == 0  # fmt: skip
    assert "has 3 partitions" in capsys.readouterr().out
    got = _partitions(admin, "by-cli", 3)
    assert got[1] == [1, 2] and got[2] == [3, 1]
    assert main(["topics", "add-partitions", "by-cli", "--partitions", "2", *where]) == 1
    assert "INVALID_PARTITIONS: The topic by-cli currently has 3 partition(s)" in capsys.readouterr().err


# ------------------------------------------------- etcd's compare-and-swap, no brokers


@_ETCD
def test_etcd_growth_races_and_keeps_written_partition_states(tmp_path: Any) -> None:
    """Two admins grow one topic at once: one transaction wins, the other
    decides again on the newer view and gets Kafka's answer; a partition
    whose ISR changed before the growth keeps its state after it."""
    import asyncio

    from partlog.controller.partition_admin import NewPartitions
    from partlog.controller.rules import Refused
    from partlog.kafka.records import TopicIdPartition
    from partlog.tools.etcd_launcher import EtcdCluster
    from tests.system.test_etcd_metadata import WAIT_S, Brokers, with_brokers

    async def body(b: Brokers) -> None:
        await b.start(3)
        await b.admin.create_topics({"t": (2, 3)})
        t = b.admin.topic("t")
        assert t is not None
        p = t.partitions[0]
        tp = TopicIdPartition(t.topic_id, 0)
        leader = b.sources[p.leader]
        assert await leader.wait_for(lambda: leader.partition(tp) is not None, WAIT_S)
        shrunk = await leader.alter_partition(p.leader, tp, p.leader_epoch, p.partition_epoch, (p.leader,))
        assert isinstance(shrunk, PartitionInfo), shrunk
        other = b.sources[p.replicas[-1]]
        assert await other.wait_for(lambda: other.partition(tp) == shrunk, WAIT_S)
        one, two = await asyncio.gather(
            b.admin.create_partitions({"t": NewPartitions(4)}, False),
            other.create_partitions({"t": NewPartitions(4)}, False),
        )
        answers = [one["t"], two["t"]]
        refused = [a for a in answers if isinstance(a, Refused)]
        assert len(refused) == 1, answers
        assert refused[0] == Refused(Errors.INVALID_PARTITIONS, "Topic already has 4 partition(s).")
        assert await b.admin.wait_for(lambda: b.admin.topic("t").num_partitions == 4, WAIT_S)  # type: ignore[union-attr]
        grown = b.admin.topic("t")
        assert grown is not None and grown.partitions[0] == shrunk and grown.partitions[1] == t.partitions[1]
        assert b.admin.view.refused == 0

    with EtcdCluster(str(tmp_path / "etcd")) as etcd:
        with_brokers(etcd, body)
