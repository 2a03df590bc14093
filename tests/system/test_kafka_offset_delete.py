"""OffsetDelete (KIP-496) with real clients: kafka-python's
delete_group_offsets removes an empty group's committed offsets (gone for
confluent-kafka's list_consumer_group_offsets too, and after the
coordinator reloads), refuses a topic an active member subscribes to with
GROUP_SUBSCRIBED_TO_TOPIC, an unknown group with GROUP_ID_NOT_FOUND; and the
subscription decoder never fails on hostile bytes (librdkafka's 0081
DeleteConsumerGroupOffsets)."""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from partlog.kafka.errors import Errors
from partlog.kafka_front.offset_delete import subscription_topics
from partlog.tools.local_cluster import TOPIC
from tests.kafka_helpers import QUICK_FENCING_MS, ClusterThread, kio_answer, kio_request, read_frame

kafka = pytest.importorskip("kafka")
confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer  # noqa: E402
from confluent_kafka import TopicPartition as CTP  # noqa: E402
from kafka import KafkaAdminClient  # noqa: E402
from kafka import TopicPartition as KTP  # noqa: E402
from kafka.errors import GroupIdNotFoundError, NoError, UnknownTopicOrPartitionError  # noqa: E402


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterThread]:
    c = ClusterThread(str(tmp_path_factory.mktemp("odel")), azs=1, brokers_per_az=1, replication_factor=1,
        broker_session_timeout_ms=QUICK_FENCING_MS,
    )  # fmt: skip
    try:
        yield c
    finally:
        c.close()


def _committed(c: ClusterThread, group: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": c.bootstrap, "group.id": group})
    try:
        got = consumer.committed([CTP(TOPIC, p) for p in range(3)], timeout=20)
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in got if tp.offset >= 0}


def test_offsets_of_an_empty_group_are_deleted_and_stay_deleted(cluster: ClusterThread) -> None:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "od-empty"})
    consumer.commit(offsets=[CTP(TOPIC, p, 10 + p) for p in range(3)], asynchronous=False)
    consumer.close()
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap.split(","))
    try:
        got = admin.delete_group_offsets("od-empty", [KTP(TOPIC, 0), KTP(TOPIC, 1), KTP("nope", 0), KTP(TOPIC, 9)])
        # A partition out of range or of an unknown topic is refused; the
        # deleted ones are NONE.
        assert got == {KTP(TOPIC, 0): NoError, KTP(TOPIC, 1): NoError,
                       KTP("nope", 0): UnknownTopicOrPartitionError,
                       KTP(TOPIC, 9): UnknownTopicOrPartitionError}  # fmt: skip
        assert _committed(cluster, "od-empty") == {2: 12}
        # Asked again, the deleted partitions have no offset: left out (Kafka's coordinator).
        assert admin.delete_group_offsets("od-empty", [KTP(TOPIC, 0)]) == {}
        with pytest.raises(GroupIdNotFoundError):
            admin.delete_group_offsets("od-never", [KTP(TOPIC, 0)])
    finally:
        admin.close()
    # The tombstones are durable: a coordinator reloading the offsets partition drops them too.
    for broker_id in list(cluster.cluster.kafka_ports):
        cluster.kill(broker_id)
        cluster.restart(broker_id)
    deadline = time.monotonic() + 30
    while (got := _committed(cluster, "od-empty")) != {2: 12} and time.monotonic() < deadline:
        time.sleep(0.5)
    assert got == {2: 12}


def test_a_topic_an_active_member_subscribes_to_is_refused(cluster: ClusterThread) -> None:
    from kafka.errors import GroupSubscribedToTopicError

    consumer = Consumer(
        {"bootstrap.servers": cluster.bootstrap, "group.id": "od-active", "auto.offset.reset": "earliest"}
    )
    try:
        consumer.subscribe([TOPIC])
        deadline = time.monotonic() + 30
        while not consumer.assignment() and time.monotonic() < deadline:
            consumer.poll(0.2)
        assert consumer.assignment()
        consumer.commit(offsets=[CTP(TOPIC, 0, 5)], asynchronous=False)
        admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap.split(","))
        try:
            assert admin.delete_group_offsets("od-active", [KTP(TOPIC, 0)]) == {
                KTP(TOPIC, 0): GroupSubscribedToTopicError
            }
        finally:
            admin.close()
    finally:
        consumer.close()


def _subscription(topics: list[str], version: int = 1) -> bytes:
    out = struct.pack(">hi", version, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + b"\x00\x00\x00\x00"  # user data (null-ish), ignored


def test_subscription_topics_reads_kafkas_consumer_protocol() -> None:
    assert subscription_topics(_subscription(["a", "bb"])) == ["a", "bb"]
    assert subscription_topics(_subscription([])) == []
    assert subscription_topics(b"") is None
    assert subscription_topics(struct.pack(">hi", 0, 2**31 - 1)) is None  # a count past the bytes


@given(st.binary(max_size=200))
def test_hostile_subscription_bytes_never_raise(data: bytes) -> None:
    got = subscription_topics(data)
    assert got is None or all(isinstance(t, str) for t in got)
    assert got is None or len(got) <= len(data)


_ALLOWED = {0, int(Errors.NOT_COORDINATOR), int(Errors.GROUP_ID_NOT_FOUND), int(Errors.INVALID_GROUP_ID),
            int(Errors.UNKNOWN_TOPIC_OR_PARTITION), int(Errors.INVALID_REQUEST)}  # fmt: skip


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    group=st.sampled_from(["od-empty", "", "od-never", "x" * 300]),
    topics=st.lists(
        st.tuples(st.sampled_from([TOPIC, "nope", "", "bad name!"]),
                  st.lists(st.integers(-(2**31), 2**31 - 1) | st.integers(-2, 4), max_size=30)),
        max_size=6,
    ),
)  # fmt: skip
def test_hostile_requests_fail_only_themselves(
    cluster: ClusterThread, group: str, topics: list[tuple[str, list[int]]]
) -> None:
    """Negative, duplicate and huge partition indexes, topics named twice,
    empty and invalid names: each request is answered with Kafka's codes, and
    the connection serves the next request."""
    named = [{"name": n, "partitions": [{"partition_index": p} for p in ps]} for n, ps in topics]
    data = {"group_id": group, "topics": named}
    port = int(cluster.bootstrap.split(",")[0].rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        for correlation in (1, 2):  # twice on one connection
            sock.sendall(kio_request(47, 0, correlation, data))
            frame = read_frame(sock)
            assert frame is not None
            answer = kio_answer(47, 0, frame)
            assert int(answer.error_code) in _ALLOWED
            codes = {int(p.error_code) for t in answer.topics for p in t.partitions}
            assert codes <= _ALLOWED
