"""Authorized operations (KIP-430) with a real client: confluent-kafka's
describe_topics, describe_cluster and describe_consumer_groups with
``include_authorized_operations`` get Kafka's bit field of what the caller's
ACLs allow (DESCRIBE implied by READ and ALTER), and nothing when not asked
(librdkafka's 0081 checks all three)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from partlog.acl import AuthorizerConfig
from partlog.kafka_front.apis import FrontConfig
from partlog.tools.local_cluster import TOPIC
from tests.kafka_helpers import ClusterThread

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, TopicCollection, TopicPartition  # noqa: E402
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # noqa: E402
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

ANON = "User:ANONYMOUS"
GROUP = "ops-group"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterThread]:
    c = ClusterThread(str(tmp_path_factory.mktemp("ops")), azs=1, brokers_per_az=1, partitions=1,
                      replication_factor=1,
                      front=FrontConfig(authorizer=AuthorizerConfig(allow_everyone_if_no_acl_found=True)))  # fmt: skip
    try:
        yield c
    finally:
        c.close()


def _acl(rtype: Any, name: str, op: Any) -> Any:
    return AclBinding(rtype, name, ResourcePatternType.LITERAL, ANON, "*", op, AclPermissionType.ALLOW)


def _ops(admin: Any, *, asked: bool = True) -> tuple[set[Any], set[Any], set[Any]]:
    """What describe_topics, describe_cluster and describe_consumer_groups answer."""
    [topic] = admin.describe_topics(TopicCollection([TOPIC]), include_authorized_operations=asked).values()
    described = admin.describe_cluster(include_authorized_operations=asked).result(20)
    [group] = admin.describe_consumer_groups([GROUP], include_authorized_operations=asked).values()
    return (set(topic.result(20).authorized_operations or ()), set(described.authorized_operations or ()),
            set(group.result(20).authorized_operations or ()))  # fmt: skip


def test_authorized_operations_are_what_the_acls_allow(cluster: ClusterThread) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": GROUP, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(TOPIC, 0, 0)], asynchronous=False)  # the group exists
    finally:
        consumer.close()
    # No ACL names anything: everything each type supports (Kafka's
    # AclEntry.supportedOperations), as librdkafka's 0081 expects.
    topic_ops, cluster_ops, group_ops = _ops(admin)
    assert len(topic_ops) == 8 and AclOperation.ALTER_CONFIGS in topic_ops
    assert len(cluster_ops) == 7 and AclOperation.IDEMPOTENT_WRITE in cluster_ops
    assert group_ops == {AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE,
                         AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}  # fmt: skip
    assert _ops(admin, asked=False) == (set(), set(), set())

    acls = [_acl(ResourceType.BROKER, "kafka-cluster", AclOperation.ALTER),
            _acl(ResourceType.TOPIC, TOPIC, AclOperation.READ),
            _acl(ResourceType.GROUP, GROUP, AclOperation.READ)]  # fmt: skip
    for f in admin.create_acls(acls).values():
        f.result(20)
    # The broker follows the controller's ACLs (a long-poll).
    want = ({AclOperation.READ, AclOperation.DESCRIBE}, {AclOperation.ALTER, AclOperation.DESCRIBE},
            {AclOperation.READ, AclOperation.DESCRIBE})  # fmt: skip
    deadline = time.monotonic() + 20
    while (got := _ops(admin)) != want and time.monotonic() < deadline:
        time.sleep(0.2)
    assert got == want
