"""KIP-848 consumer groups (``group.protocol=consumer``) with a real client:
librdkafka's next-generation consumer through ConsumerGroupHeartbeat, and
the classic protocol still served beside it."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from partlog.kafka.errors import Errors
from partlog.tools.local_cluster import TOPIC
from tests.integration.test_kafka_group_errors import _call as _ask
from tests.kafka_helpers import QUICK_FENCING_MS, ClusterThread

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


def _join(group: str, member: str, topics: tuple[str, ...] = (TOPIC,)) -> dict[str, Any]:
    return {"group_id": group, "member_id": member, "member_epoch": 0, "rebalance_timeout": 30_000,
            "subscribed_topic_names": list(topics), "topic_partitions": []}  # fmt: skip


def test_the_wire_answers(cluster: ClusterThread) -> None:
    """ConsumerGroupHeartbeat, ConsumerGroupDescribe and the classic APIs'
    answers about a KIP-848 group, request by request."""
    versions = _ask(cluster.kafka_port(1), 18, 3, {"client_software_name": "t", "client_software_version": "1"})
    served = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in versions.api_keys}
    assert served[68] == (0, 1) and served[69] == (0, 1) and served[8][1] == 9
    group = "g-wire"
    found = _ask(cluster.kafka_port(1), 10, 3, {"key": group, "key_type": 0})
    assert found.error_code == 0
    port, other = found.port, next(p for b, p in cluster.cluster.kafka_ports.items() if b != found.node_id)
    assert _ask(other, 68, 1, _join(group, "m1")).error_code == Errors.NOT_COORDINATOR
    hb = _ask(port, 68, 1, _join(group, "m1"))
    assert (hb.error_code, hb.member_id, hb.member_epoch, int(hb.heartbeat_interval.total_seconds())) == (0, "m1", 1, 5)
    [tp] = hb.assignment.topic_partitions
    assert sorted(tp.partitions) == list(range(PARTITIONS))
    assert _ask(port, 68, 1, {**_join(group, "m2"), "server_assignor": "sticky"}).error_code == 112
    assert _ask(port, 68, 1, {**_join(group, "m2"), "member_epoch": 5}).error_code == Errors.UNKNOWN_MEMBER_ID
    assert _ask(port, 68, 1, {**_join(group, "m1"), "member_epoch": 9}).error_code == 110  # FENCED_MEMBER_EPOCH
    assert _ask(port, 68, 1, {**_join(group, "m2"), "member_epoch": -3}).error_code == Errors.INVALID_REQUEST
    # The classic protocol is refused for it, and sees it as Kafka 4 does.
    classic = {"group_id": group, "session_timeout": 10_000, "rebalance_timeout": 10_000, "member_id": "",
               "group_instance_id": None, "protocol_type": "consumer",
               "protocols": [{"name": "range", "metadata": b""}]}  # fmt: skip
    assert _ask(port, 11, 5, classic).error_code == Errors.INCONSISTENT_GROUP_PROTOCOL
    listed = _ask(port, 16, 4, {"states_filter": []})
    assert {(g.group_id, g.protocol_type) for g in listed.groups} >= {(group, "consumer")}
    listed = _ask(port, 16, 5, {"states_filter": [], "types_filter": ["Consumer"]})
    assert {(g.group_id, g.group_type) for g in listed.groups} == {(group, "consumer")}
    listed = _ask(port, 16, 5, {"states_filter": [], "types_filter": ["classic"]})
    assert group not in {g.group_id for g in listed.groups}
    [d] = _ask(port, 15, 5, {"groups": [group], "include_authorized_operations": False}).groups
    assert (d.error_code, d.group_state) == (0, "Dead")
    [d] = _ask(port, 15, 6, {"groups": [group], "include_authorized_operations": False}).groups
    assert (d.error_code, d.error_message, d.group_state) == (69, f"Group {group} is not a classic group.", "Dead")
    # ConsumerGroupDescribe.
    [g] = _ask(port, 69, 1, {"group_ids": [group], "include_authorized_operations": False}).groups
    assert (g.error_code, g.group_state, g.group_epoch, g.assignment_epoch, g.assignor_name) == (
        0, "Stable", 1, 1, "uniform")  # fmt: skip
    [m] = g.members
    assert (m.member_id, m.member_epoch, list(m.subscribed_topic_names)) == ("m1", 1, [TOPIC])
    assert m.assignment.topic_partitions[0].topic_name == TOPIC
    at = _ask(port, 10, 3, {"key": "g-none", "key_type": 0}).port
    [none] = _ask(at, 69, 1, {"group_ids": ["g-none"], "include_authorized_operations": False}).groups
    assert (none.error_code, none.error_message) == (Errors.GROUP_ID_NOT_FOUND, "Group g-none not found.")
    # OffsetCommit: v9 with the member epoch; v8 refused for such a member.
    offset = {"partition_index": 0, "committed_offset": 3, "committed_leader_epoch": -1, "committed_metadata": None}
    commit = {"group_id": group, "generation_id_or_member_epoch": 1, "member_id": "m1", "group_instance_id": None,
              "topics": [{"name": TOPIC, "partitions": [offset]}]}  # fmt: skip
    assert _ask(port, 8, 9, commit).topics[0].partitions[0].error_code == 0
    stale = {**commit, "generation_id_or_member_epoch": 0}
    assert _ask(port, 8, 9, stale).topics[0].partitions[0].error_code == 113  # STALE_MEMBER_EPOCH
    old = {**commit, "generation_id": 1}
    del old["generation_id_or_member_epoch"]
    assert _ask(port, 8, 8, old).topics[0].partitions[0].error_code == Errors.UNSUPPORTED_VERSION
    fetched = _ask(port, 9, 7, {"group_id": group, "topics": [{"name": TOPIC, "partition_indexes": [0]}],
                                "require_stable": False})  # fmt: skip
    assert fetched.topics[0].partitions[0].committed_offset == 3
    # OffsetFetch v9: the member's epoch, as Kafka's validateOffsetFetch.
    topics = [{"name": TOPIC, "partition_indexes": [0]}]
    for member, epoch, error in (("m1", 1, 0), (None, -1, 0), ("m1", 0, 113), ("m9", 1, Errors.UNKNOWN_MEMBER_ID)):
        ask = {"group_id": group, "member_id": member, "member_epoch": epoch, "topics": topics}
        [fg] = _ask(port, 9, 9, {"groups": [ask], "require_stable": False}).groups
        assert fg.error_code == error, (member, epoch)
        assert not error or not fg.topics
        assert error or fg.topics[0].partitions[0].committed_offset == 3
    # Leaving: the group is empty, a classic member may take the id over.
    left = _ask(port, 68, 1, {**_join(group, "m1"), "member_epoch": -1})
    assert (left.error_code, left.member_epoch) == (0, -1)
    [g] = _ask(port, 69, 1, {"group_ids": [group], "include_authorized_operations": False}).groups
    assert (g.group_state, g.members) == ("Empty", ())
    assert uuid.UUID(int=0) != tp.topic_id


def test_a_classic_group_with_members_refuses_the_new_protocol(cluster: ClusterThread) -> None:
    group = "g-classic-busy"
    c = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                                  "auto.offset.reset": "earliest"})  # fmt: skip
    c.subscribe([TOPIC])
    try:
        deadline = time.monotonic() + DEADLINE_S
        while not c.assignment() and time.monotonic() < deadline:
            c.poll(0.1)
        assert c.assignment()
        port = _ask(cluster.kafka_port(1), 10, 3, {"key": group, "key_type": 0}).port
        assert _ask(port, 68, 1, _join(group, "m1")).error_code == Errors.GROUP_ID_NOT_FOUND
    finally:
        c.close()


def test_members_join_the_new_coordinator_after_it_moves(tmp_path: Any) -> None:
    """Membership is in memory: the coordinator's broker dies, the new one
    answers UNKNOWN_MEMBER_ID, the member joins it at epoch 0 and reads on."""
    c = ClusterThread(str(tmp_path), partitions=PARTITIONS, broker_session_timeout_ms=QUICK_FENCING_MS)
    try:
        group = "g-moved"
        first = _produce(c, 60, "m")
        consumer = _consumer(c, group, **{"enable.auto.commit": True, "auto.commit.interval.ms": 200})
        reads: list[Counter[tuple[int, int]]] = [Counter()]
        try:
            _poll_until([consumer], reads, lambda: first <= set(reads[0]))
            ports = dict(c.cluster.kafka_ports)
            old = _ask(next(iter(ports.values())), 10, 3, {"key": group, "key_type": 0}).node_id
            c.kill(old)
            live = next(p for b, p in ports.items() if b != old)
            second = _produce(c, 60, "n")

            def rejoined() -> bool:
                found = _ask(live, 10, 3, {"key": group, "key_type": 0})
                if found.error_code or found.node_id == old:
                    return False
                [g] = _ask(found.port, 69, 1, {"group_ids": [group], "include_authorized_operations": False}).groups
                return g.error_code == 0 and g.group_state == "Stable" and len(g.members) == 1

            _poll_until([consumer], reads, lambda: second <= set(reads[0]) and rejoined())
        finally:
            consumer.close()
    finally:
        c.close()
