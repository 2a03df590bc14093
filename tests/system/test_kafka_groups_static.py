"""Static membership (KIP-345) and DeleteGroups with real clients
(confluent-kafka / librdkafka) against a local cluster: a static consumer
that restarts keeps its partitions and the others see no rebalance; a
duplicate instance id is fenced (fatal in librdkafka); AdminClient's
delete_consumer_groups gets Kafka's per-group codes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.kafka_helpers import ClusterThread

confluent_kafka = pytest.importorskip("confluent_kafka")

PARTITIONS = 4
# Kafka's group.min.session.timeout.ms: the shortest a member may ask for.
SESSION_MS = 6000
WAIT_S = 60.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterThread]:
    c = ClusterThread(str(tmp_path_factory.mktemp("static")), partitions=PARTITIONS)
    try:
        yield c
    finally:
        c.close()


class _Member:
    """A librdkafka consumer and the rebalance callbacks it saw."""

    def __init__(self, cluster: ClusterThread, group: str, instance: str | None, **conf: Any) -> None:
        self.events: list[tuple[str, set[int]]] = []
        self.errors: list[Any] = []
        settings = {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": group,
            "session.timeout.ms": SESSION_MS,
            "heartbeat.interval.ms": 300,
            "auto.offset.reset": "earliest",
            "error_cb": self.errors.append,
            **conf,
        }
        if instance is not None:
            settings["group.instance.id"] = instance
        self.consumer = confluent_kafka.Consumer(settings)
        self.consumer.subscribe(
            ["t"],
            on_assign=lambda _c, ps: self.events.append(("assign", {p.partition for p in ps})),
            on_revoke=lambda _c, ps: self.events.append(("revoke", {p.partition for p in ps})),
        )

    def assigned(self) -> set[int]:
        return {p.partition for p in self.consumer.assignment()}


def _poll_until(members: list[_Member], done: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not done():
        assert time.monotonic() < deadline, [m.events for m in members]
        for m in members:
            msg = m.consumer.poll(0.05)
            if msg is not None and msg.error():
                m.errors.append(msg.error())  # librdkafka's fatal error comes as a message


def _ensure_topic(cluster: ClusterThread) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for f in admin.create_topics([NewTopic("t", PARTITIONS, 1)]).values():
        try:
            f.result(30)
        except confluent_kafka.KafkaException as e:
            assert e.args[0].code() == confluent_kafka.KafkaError.TOPIC_ALREADY_EXISTS


def test_a_restarted_static_consumer_keeps_its_partitions_and_nobody_rebalances(cluster: ClusterThread) -> None:
    _ensure_topic(cluster)
    a = _Member(cluster, "static-g", "a")
    b = _Member(cluster, "static-g", "b")
    _poll_until([a, b], lambda: len(a.assigned()) + len(b.assigned()) == PARTITIONS and bool(b.assigned()))
    # Past the first rebalances: what b sees from now on must be nothing.
    held, seen = a.assigned(), len(b.events)
    a.consumer.close()  # a static member's close sends no LeaveGroup (librdkafka)
    again = _Member(cluster, "static-g", "a")
    _poll_until([again, b], lambda: bool(again.assigned()))
    assert again.assigned() == held
    for _ in range(20):  # a few heartbeats of b: still no rebalance
        b.consumer.poll(0.1)
    assert b.events[seen:] == [], b.events
    again.consumer.close()
    b.consumer.close()


def test_a_duplicate_instance_id_fences_the_older_consumer(cluster: ClusterThread) -> None:
    _ensure_topic(cluster)
    first = _Member(cluster, "static-dup", "x")
    _poll_until([first], lambda: bool(first.assigned()))
    second = _Member(cluster, "static-dup", "x")
    fatal_code = confluent_kafka.KafkaError._FATAL
    _poll_until([first, second], lambda: any(e.code() == fatal_code for e in first.errors))
    fatal = [e for e in first.errors if e.code() == fatal_code]
    assert "fenced by other consumer with same group.instance.id" in str(fatal[0])
    _poll_until([second], lambda: second.assigned() == set(range(PARTITIONS)))
    second.consumer.close()


def test_delete_consumer_groups_answers_kafkas_codes(cluster: ClusterThread) -> None:
    from confluent_kafka.admin import AdminClient

    _ensure_topic(cluster)
    gone = _Member(cluster, "del-empty", None, **{"enable.auto.commit": False})
    _poll_until([gone], lambda: bool(gone.assigned()))
    gone.consumer.commit(offsets=[confluent_kafka.TopicPartition("t", 0, 1)], asynchronous=False)
    gone.consumer.close()  # a dynamic member leaves: the group is empty
    busy = _Member(cluster, "del-busy", None)
    _poll_until([busy], lambda: bool(busy.assigned()))
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    codes = {}
    for group, f in admin.delete_consumer_groups(["del-empty", "del-busy", "del-nobody"], request_timeout=30).items():
        try:
            f.result(30)
            codes[group] = confluent_kafka.KafkaError.NO_ERROR
        except confluent_kafka.KafkaException as e:
            codes[group] = e.args[0].code()
    assert codes == {
        "del-empty": confluent_kafka.KafkaError.NO_ERROR,
        "del-busy": confluent_kafka.KafkaError.NON_EMPTY_GROUP,
        "del-nobody": confluent_kafka.KafkaError.GROUP_ID_NOT_FOUND,
    }
    listed = {g.group_id for g in admin.list_consumer_groups().result(30).valid}
    assert "del-empty" not in listed and "del-busy" in listed
    busy.consumer.close()


def test_aiokafka_static_consumer_restarts_without_a_rebalance(cluster: ClusterThread) -> None:
    aiokafka = pytest.importorskip("aiokafka")
    from aiokafka import ConsumerRebalanceListener  # type: ignore[import-untyped]

    _ensure_topic(cluster)

    class Seen(ConsumerRebalanceListener):  # type: ignore[misc]
        def __init__(self) -> None:
            self.events: list[str] = []

        async def on_partitions_revoked(self, revoked: Any) -> None:
            self.events.append("revoke")

        async def on_partitions_assigned(self, assigned: Any) -> None:
            self.events.append("assign")

    def consumer(instance: str) -> Any:
        return aiokafka.AIOKafkaConsumer(bootstrap_servers=cluster.bootstrap, group_id="static-aio",
                                         group_instance_id=instance, session_timeout_ms=SESSION_MS,
                                         heartbeat_interval_ms=300)  # fmt: skip

    async def assigned(c: Any, others: list[Any]) -> set[int]:
        deadline = time.monotonic() + WAIT_S
        while not c.assignment() or any(not o.assignment() for o in others):
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        return {tp.partition for tp in c.assignment()}

    async def main() -> None:
        seen = Seen()
        a, b = consumer("a"), consumer("b")
        await a.start()
        await b.start()
        a.subscribe(["t"])
        b.subscribe(["t"], listener=seen)
        await assigned(a, [b])
        await asyncio.sleep(1)  # past the first rebalances
        held, before = {tp.partition for tp in a.assignment()}, list(seen.events)
        await a.stop()  # a static member's stop sends no LeaveGroup (aiokafka)
        again = consumer("a")
        await again.start()
        again.subscribe(["t"])
        assert await assigned(again, []) == held
        await asyncio.sleep(1)
        assert seen.events == before
        await again.stop()
        await b.stop()

    asyncio.run(main())
