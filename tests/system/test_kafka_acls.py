"""Authorization with real clients (confluent-kafka) on loopback: a broker
with ``--authorizer`` and no ACLs refuses User:ANONYMOUS everything with
Kafka's codes (produce, read, commit, create and delete topics, learn topic
names); ACLs added through the Kafka API (``create_acls``) let it; the
``partlog acls`` command manages ACLs through the controller; super.users
pass whatever the ACLs say."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from partlog.acl import AuthorizerConfig
from partlog.kafka_front.apis import FrontConfig
from partlog.tools.local_cluster import TOPIC
from tests.kafka_helpers import ClusterThread

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # noqa: E402
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

ANON = "User:ANONYMOUS"
GROUP = "acl-group"


def _cluster(tmp_path_factory: pytest.TempPathFactory, name: str, config: AuthorizerConfig) -> ClusterThread:
    return ClusterThread(
        str(tmp_path_factory.mktemp(name)),
        front=FrontConfig(authorizer=config),
        azs=1,
        brokers_per_az=1,
        partitions=1,
        replication_factor=1,
    )


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterThread]:
    c = _cluster(tmp_path_factory, "acls", AuthorizerConfig())
    try:
        yield c
    finally:
        c.close()


def _admin(c: ClusterThread) -> Any:
    return AdminClient({"bootstrap.servers": c.bootstrap})


def _produce_error(c: ClusterThread, topic: str = TOPIC) -> Any:
    """The delivery error of one record (None: delivered)."""
    p = Producer({"bootstrap.servers": c.bootstrap, "message.timeout.ms": 5000})
    errors: list[Any] = []
    p.produce(topic, b"v", on_delivery=lambda err, _msg: errors.append(err))
    p.flush(10)
    assert len(errors) == 1
    return errors[0]


def _group_error(c: ClusterThread) -> Any:
    """The error a subscribed consumer polls (FindCoordinator's answer)."""
    consumer = Consumer({"bootstrap.servers": c.bootstrap, "group.id": GROUP})
    try:
        consumer.subscribe([TOPIC])
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            m = consumer.poll(0.2)
            error = m.error() if m is not None else None
            if error is not None:
                return error.code()
        return None
    finally:
        consumer.close()


def _commit_error(c: ClusterThread) -> Any:
    consumer = Consumer({"bootstrap.servers": c.bootstrap, "group.id": GROUP, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(TOPIC, 0, 0)], asynchronous=False)
    except KafkaException as e:
        return e.args[0].code()
    finally:
        consumer.close()
    return None


def _read(c: ClusterThread) -> list[bytes | None]:
    consumer = Consumer({"bootstrap.servers": c.bootstrap, "group.id": GROUP, "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([TOPIC])
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            m = consumer.poll(0.2)
            if m is None:
                continue
            error = m.error()
            if error is None:
                consumer.commit(message=m, asynchronous=False)
                return [m.value()]
            if error.code() != KafkaError._PARTITION_EOF:
                raise KafkaException(error)
        return []
    finally:
        consumer.close()


def _cli(c: ClusterThread, *args: str) -> subprocess.CompletedProcess[str]:
    assert c.cluster.controller is not None
    return subprocess.run(
        [sys.executable, "-m", "partlog", "acls", *args, "--controller", f"127.0.0.1:{c.cluster.controller.port}"],
        capture_output=True,
        text=True,
        timeout=60,
    )


def _topic_acl(op: Any, name: str = TOPIC) -> Any:
    return AclBinding(ResourceType.TOPIC, name, ResourcePatternType.LITERAL, ANON, "*", op, AclPermissionType.ALLOW)


def test_without_rights_nothing_then_acls_grant(cluster: ClusterThread) -> None:
    admin = _admin(cluster)
    # Produce, commit, create, delete, learn names: all refused.
    assert _produce_error(cluster).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert _group_error(cluster) == KafkaError.GROUP_AUTHORIZATION_FAILED
    assert TOPIC not in admin.list_topics(timeout=10).topics
    named = admin.list_topics(topic=TOPIC, timeout=10).topics[TOPIC]
    assert named.error is not None and named.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    with pytest.raises(KafkaException) as e:
        admin.create_topics([NewTopic("new-topic", 1, 1)])["new-topic"].result(10)
    assert e.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    with pytest.raises(KafkaException) as e:
        admin.delete_topics([TOPIC])[TOPIC].result(10)
    assert e.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # Nor may it grant itself rights.
    with pytest.raises(KafkaException) as e:
        admin.create_acls([_topic_acl(AclOperation.WRITE)])[_topic_acl(AclOperation.WRITE)].result(10)
    assert e.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED

    # An operator grants ALTER on the cluster through the controller.
    r = _cli(cluster, "add", "--resource-type", "cluster", "--principal", ANON, "--operation", "alter")
    assert r.returncode == 0, r.stderr
    listed = _cli(cluster, "list", "--principal", ANON)
    assert listed.returncode == 0 and "ALLOW User:ANONYMOUS from * ALTER on CLUSTER" in listed.stdout
    # DESCRIBE on the group finds its coordinator; committing needs READ.
    r = _cli(
        cluster, "add", "--resource-type", "group", "--name", GROUP, "--principal", ANON, "--operation", "describe"
    )
    assert r.returncode == 0, r.stderr
    deadline = time.monotonic() + 15
    while (error := _commit_error(cluster)) != KafkaError.GROUP_AUTHORIZATION_FAILED and time.monotonic() < deadline:
        time.sleep(0.1)
    assert error == KafkaError.GROUP_AUTHORIZATION_FAILED
    deadline = time.monotonic() + 15
    acls = [
        _topic_acl(AclOperation.WRITE),
        _topic_acl(AclOperation.READ),
        AclBinding(ResourceType.TOPIC, "new-", ResourcePatternType.PREFIXED, ANON, "*", AclOperation.CREATE,
                   AclPermissionType.ALLOW),
        AclBinding(ResourceType.GROUP, GROUP, ResourcePatternType.LITERAL, ANON, "*", AclOperation.READ,
                   AclPermissionType.ALLOW),
    ]  # fmt: skip
    while True:  # the broker follows the controller's ACLs (a long-poll)
        try:
            for f in admin.create_acls(acls).values():
                f.result(10)
            break
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)

    assert _produce_error(cluster) is None
    assert _read(cluster) == [b"v"]
    assert TOPIC in admin.list_topics(timeout=10).topics
    admin.create_topics([NewTopic("new-topic", 1, 1)])["new-topic"].result(10)
    # DescribeAcls shows them, DeleteAcls removes them.
    anything: Any = None  # confluent-kafka's stubs type the filter's "any" strings as str
    every_topic_acl = AclBindingFilter(ResourceType.TOPIC, anything, ResourcePatternType.ANY, anything, anything,
                                       AclOperation.ANY, AclPermissionType.ANY)  # fmt: skip
    found = admin.describe_acls(every_topic_acl).result(10)
    assert set(found) >= {acls[0], acls[1], acls[2]}
    write_only = AclBindingFilter(ResourceType.TOPIC, TOPIC, ResourcePatternType.LITERAL, ANON, "*",
                                  AclOperation.WRITE, AclPermissionType.ALLOW)  # fmt: skip
    assert admin.delete_acls([write_only])[write_only].result(10) == [acls[0]]
    assert _produce_error(cluster).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


@pytest.fixture(scope="module")
def super_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterThread]:
    c = _cluster(tmp_path_factory, "acls-super", AuthorizerConfig(super_users=frozenset({ANON})))
    try:
        yield c
    finally:
        c.close()


def test_super_users_pass_a_deny(super_cluster: ClusterThread) -> None:
    r = _cli(super_cluster, "add", "--resource-type", "topic", "--name", "*", "--principal", "User:*",
             "--operation", "all", "--deny")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert _produce_error(super_cluster) is None
    assert TOPIC in _admin(super_cluster).list_topics(timeout=10).topics
    bad = _cli(super_cluster, "add", "--resource-type", "topic", "--name", "t", "--principal", "alice",
               "--operation", "read")  # fmt: skip
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "Type:name" in bad.stderr


def test_kafka_python_manages_acls(super_cluster: ClusterThread) -> None:
    kafka_admin = pytest.importorskip("kafka.admin")
    admin = kafka_admin.KafkaAdminClient(bootstrap_servers=super_cluster.bootstrap)
    try:
        pattern = kafka_admin.ResourcePattern(
            kafka_admin.ResourceType.TOPIC, "bobs", kafka_admin.ACLResourcePatternType.PREFIXED
        )
        acl = kafka_admin.ACL(
            "User:bob", "*", kafka_admin.ACLOperation.READ, kafka_admin.ACLPermissionType.ALLOW, pattern
        )
        assert admin.create_acls([acl])["failed"] == []
        bobs = kafka_admin.ACLFilter(
            "User:bob",
            None,
            kafka_admin.ACLOperation.ANY,
            kafka_admin.ACLPermissionType.ANY,
            kafka_admin.ResourcePatternFilter(
                kafka_admin.ResourceType.ANY, None, kafka_admin.ACLResourcePatternType.ANY
            ),
        )
        found, error = admin.describe_acls(bobs)
        assert error.errno == 0 and [a.resource_pattern.resource_name for a in found] == ["bobs"]
        [(_, deleted, error)] = admin.delete_acls([bobs])
        assert error.errno == 0 and len(deleted) == 1
        assert admin.describe_acls(bobs)[0] == []
    finally:
        admin.close()
