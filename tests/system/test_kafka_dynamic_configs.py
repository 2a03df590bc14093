"""Dynamic BROKER and GROUP configs (partlog.kafka.dynamic_config) with
confluent-kafka's AdminClient, on the embedded controller and on etcd, as
librdkafka's 0081_admin drives them: kept by the cluster, described with
Kafka's sources, applied where partlog has the setting (a broker's
``log.*`` topic defaults in every store, a KIP-848 group's heartbeat
interval in the coordinator's answers), and refused with Kafka's codes."""

from __future__ import annotations

import shutil
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from partlog.kafka.dynamic_config import invalid_resource
from partlog.kafka.errors import Errors
from partlog.kafka.topic_config import TopicConfig
from partlog.tools.local_cluster import TOPIC
from tests.kafka_helpers import QUICK_FENCING_MS, ClusterThread, kio_answer, kio_request, read_frame

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import KafkaException  # noqa: E402
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # noqa: E402
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
)

WAIT_S = 30.0
BROKER = ConfigResource.Type.BROKER
GROUP = ConfigResource.Type.GROUP
SET, DELETE = AlterConfigOpType.SET, AlterConfigOpType.DELETE
APPEND, SUBTRACT = AlterConfigOpType.APPEND, AlterConfigOpType.SUBTRACT
# Kafka's ConfigSource codes.
DYNAMIC_BROKER, DYNAMIC_DEFAULT_BROKER, DEFAULT, GROUP_CONFIG = 2, 3, 5, 8
SESSION_TIMEOUT = "consumer.session.timeout.ms"


@pytest.fixture(scope="module", params=["embedded", "etcd"])
def cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterThread]:
    if request.param == "etcd" and shutil.which("etcd") is None:
        pytest.skip("etcd is not installed (scripts/test installs Debian's etcd-server)")
    c = ClusterThread(
        str(tmp_path_factory.mktemp(f"dynamic-{request.param}")),
        metadata="etcd" if request.param == "etcd" else "",
        azs=2,
        brokers_per_az=1,
        broker_session_timeout_ms=QUICK_FENCING_MS,
        replication_factor=2,
        partitions=1,
    )
    try:
        yield c
    finally:
        c.close()


_ADMINS: dict[str, Any] = {}


def _admin(c: ClusterThread) -> Any:
    """One client per cluster, kept: a dropped client fails its futures."""
    if c.bootstrap not in _ADMINS:
        _ADMINS[c.bootstrap] = AdminClient({"bootstrap.servers": c.bootstrap})
    return _ADMINS[c.bootstrap]


def _alter(c: ClusterThread, rtype: Any, name: str, *entries: tuple[str, str | None, Any]) -> None:
    ops = [ConfigEntry(k, v, incremental_operation=op) for k, v, op in entries]
    [(_, fut)] = _admin(c).incremental_alter_configs([ConfigResource(rtype, name, incremental_configs=ops)]).items()
    fut.result(WAIT_S)


def _refused(c: ClusterThread, rtype: Any, name: str, *entries: tuple[str, str | None, Any]) -> tuple[int, str]:
    with pytest.raises(KafkaException) as e:
        _alter(c, rtype, name, *entries)
    err = e.value.args[0]
    return err.code(), err.str()


def _ask(c: ClusterThread, key: int, version: int, body: dict[str, Any]) -> Any:
    with socket.create_connection(("127.0.0.1", c.kafka_port(min(c.cluster.kafka_ports))), timeout=WAIT_S) as s:
        s.sendall(kio_request(key, version, 1, body))
        frame = read_frame(s)
    assert frame is not None
    return kio_answer(key, version, frame)


def _alter_default(c: ClusterThread, name: str, value: str | None, op: int) -> None:
    """The cluster's default (BROKER ""), which confluent-kafka cannot name."""
    configs = [{"name": name, "config_operation": op, "value": value}]
    body = {"resources": [{"resource_type": 4, "resource_name": "", "configs": configs}], "validate_only": False}
    assert int(_ask(c, 44, 1, body).responses[0].error_code) == Errors.NONE


def _describe_default(c: ClusterThread) -> dict[str, tuple[str, int]]:
    body = {"resources": [{"resource_type": 4, "resource_name": "", "configuration_keys": None}],
            "include_synonyms": False, "include_documentation": False}  # fmt: skip
    [r] = _ask(c, 32, 4, body).results
    return {e.name: (e.value, int(e.config_source)) for e in r.configs}


def _describe(c: ClusterThread, rtype: Any, name: str) -> dict[str, Any]:
    [(_, fut)] = _admin(c).describe_configs([ConfigResource(rtype, name)]).items()
    out: dict[str, Any] = fut.result(WAIT_S)
    return out


def _until(what: str, ok: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not ok():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def _store(c: ClusterThread, broker_id: int) -> TopicConfig:
    broker = c.cluster.brokers[broker_id]
    tid = broker.topic_index[TOPIC][0]
    return broker.store.topic_config(tid)


def test_broker_configs_are_kept_described_and_the_log_defaults_applied(cluster: ClusterThread) -> None:
    first, second = sorted(cluster.cluster.brokers)
    # librdkafka 0081's alteration of one broker: SET and APPEND, then DELETE and SUBTRACT.
    _alter(cluster, BROKER, str(first), ("background.threads", "9", SET), ("log.cleanup.policy", "compact", APPEND))
    got = _describe(cluster, BROKER, str(first))
    assert (got["background.threads"].value, got["background.threads"].source) == ("9", DYNAMIC_BROKER)
    assert got["log.cleanup.policy"].value == "delete,compact"
    # Applied: that broker's topics without an override compact; the other's do not.
    _until("first broker compacts", lambda: _store(cluster, first).compact)
    assert not _store(cluster, second).compact
    topic = _admin(cluster).describe_configs([ConfigResource(ConfigResource.Type.TOPIC, TOPIC)])
    [(_, fut)] = topic.items()
    policy = fut.result(WAIT_S)["cleanup.policy"]
    # Described by whichever broker answered: its own store and source.
    assert (policy.value, policy.source) in (("compact,delete", DYNAMIC_BROKER), ("delete", DEFAULT))

    _alter(cluster, BROKER, str(first), ("background.threads", "", DELETE), ("log.cleanup.policy", "compact", SUBTRACT))
    got = _describe(cluster, BROKER, str(first))
    assert "background.threads" not in got
    assert got["log.cleanup.policy"].value == "delete"
    _until("first broker deletes again", lambda: not _store(cluster, first).compact)

    # The cluster's default reaches every broker; a broker's own value wins over it.
    _alter_default(cluster, "log.retention.ms", "3600000", 0)
    _alter(cluster, BROKER, str(second), ("log.retention.ms", "7200000", SET))
    _until("retention defaults", lambda: (_store(cluster, first).retention_ms, _store(cluster, second).retention_ms)
           == (3_600_000, 7_200_000))  # fmt: skip
    assert _describe_default(cluster) == {"log.retention.ms": ("3600000", DYNAMIC_DEFAULT_BROKER)}
    _alter_default(cluster, "log.retention.ms", None, 1)
    _alter(cluster, BROKER, str(second), ("log.retention.ms", "", DELETE), ("log.cleanup.policy", "", DELETE))
    _alter(cluster, BROKER, str(first), ("log.cleanup.policy", "", DELETE))
    _until("defaults back", lambda: _store(cluster, first).retention_ms == _store(cluster, second).retention_ms
           == TopicConfig().retention_ms)  # fmt: skip


def test_broker_configs_survive_a_broker_restart(cluster: ClusterThread) -> None:
    second = max(cluster.cluster.brokers)
    _alter(cluster, BROKER, str(second), ("log.segment.bytes", "2097152", SET))
    _until("applied", lambda: _store(cluster, second).segment_bytes == 2_097_152)
    cluster.kill(second)
    cluster.restart(second)
    _until("applied after a restart", lambda: _store(cluster, second).segment_bytes == 2_097_152)
    _alter(cluster, BROKER, str(second), ("log.segment.bytes", "", DELETE))
    _until("removed", lambda: _store(cluster, second).segment_bytes == TopicConfig().segment_bytes)


def test_bad_broker_configs_are_refused(cluster: ClusterThread) -> None:
    first = min(cluster.cluster.brokers)
    code, why = _refused(cluster, BROKER, str(first), ("broker.id", "7", SET))
    assert code == Errors.INVALID_REQUEST and "Cannot update these configs dynamically" in why
    # Kafka's broker checks BROKER resources: INVALID_REQUEST for bad values too (KAFKA-13609).
    code, why = _refused(cluster, BROKER, str(first), ("log.retention.ms", "soon", SET))
    assert code == Errors.INVALID_REQUEST and "log.retention.ms" in why
    code, why = _refused(cluster, BROKER, str(first), ("background.threads", "0", SET))
    assert code == Errors.INVALID_REQUEST and "at least 1" in why
    code, _ = _refused(cluster, BROKER, str(first), ("background.threads", "2", APPEND))
    assert code == Errors.INVALID_REQUEST
    assert "background.threads" not in _describe(cluster, BROKER, str(first))


def _heartbeat_interval(c: ClusterThread, group: str) -> int:
    """A KIP-848 join's heartbeat interval, from the group's coordinator."""
    body = {"group_id": group, "member_id": "", "member_epoch": 0, "rebalance_timeout": 10_000,
            "subscribed_topic_names": [TOPIC], "server_assignor": None, "topic_partitions": []}  # fmt: skip
    deadline = time.monotonic() + WAIT_S
    while int(_ask(c, 10, 4, {"key_type": 0, "coordinator_keys": [group]}).coordinators[0].error_code) != 0:
        assert time.monotonic() < deadline, "no coordinator found"
        time.sleep(0.1)
    while True:
        for b in sorted(c.cluster.kafka_ports):
            with socket.create_connection(("127.0.0.1", c.kafka_port(b)), timeout=WAIT_S) as s:
                s.sendall(kio_request(68, 0, 1, body))
                frame = read_frame(s)
            assert frame is not None
            answer = kio_answer(68, 0, frame)
            if int(answer.error_code) == Errors.NONE:
                return int(answer.heartbeat_interval.total_seconds() * 1000)
            assert int(answer.error_code) in (Errors.NOT_COORDINATOR, Errors.COORDINATOR_LOAD_IN_PROGRESS), answer
        assert time.monotonic() < deadline, "no coordinator answered"
        time.sleep(0.1)


def test_group_configs_are_kept_described_and_applied(cluster: ClusterThread) -> None:
    # librdkafka 0081: a group that does not exist is described with its defaults.
    got = _describe(cluster, GROUP, "dyn-nonexistent")
    assert {k: (e.value, e.source) for k, e in got.items()} == {
        "consumer.session.timeout.ms": ("45000", DEFAULT),
        "consumer.heartbeat.interval.ms": ("5000", DEFAULT),
    }
    _alter(cluster, GROUP, "dyn-g", ("consumer.session.timeout.ms", "50000", SET),
           ("consumer.heartbeat.interval.ms", "6000", SET))  # fmt: skip
    got = _describe(cluster, GROUP, "dyn-g")
    assert (got["consumer.session.timeout.ms"].value, got["consumer.session.timeout.ms"].source) == (
        "50000",
        GROUP_CONFIG,
    )
    # Applied by the group's coordinator (every broker follows the change).
    _until("interval applied", lambda: _heartbeat_interval(cluster, "dyn-g") == 6000)
    assert _heartbeat_interval(cluster, "dyn-other") == 5000
    _alter(cluster, GROUP, "dyn-g", ("consumer.heartbeat.interval.ms", "", DELETE))
    _until("interval back", lambda: _heartbeat_interval(cluster, "dyn-g") == 5000)
    assert _describe(cluster, GROUP, "dyn-g")["consumer.session.timeout.ms"].value == "50000"
    # Every broker's metrics count what it holds.
    from prometheus_client import generate_latest

    for broker in cluster.cluster.brokers.values():
        text = generate_latest(broker.metrics.registry).decode()
        held = len(broker.dynamic_configs.configs.resources)
        assert held >= 1 and f"partlog_dynamic_config_resources {float(held)}" in text


def test_bad_group_configs_are_refused_with_kafkas_messages(cluster: ClusterThread) -> None:
    code, why = _refused(cluster, GROUP, "dyn-bad", ("consumer.session.timeout.ms", "5000", SET))
    assert (code, why) == (
        Errors.INVALID_CONFIG,
        "consumer.session.timeout.ms must be greater than or equal to group.consumer.min.session.timeout.ms",
    )
    code, why = _refused(cluster, GROUP, "dyn-bad", ("consumer.heartbeat.interval.ms", "50000", SET))
    assert code == Errors.INVALID_CONFIG and "group.consumer.max.heartbeat.interval.ms" in why
    code, why = _refused(cluster, GROUP, "dyn-bad", ("share.record.lock.duration.ms", "30000", SET))
    assert (code, why) == (Errors.INVALID_CONFIG, "Unknown group config name: share.record.lock.duration.ms")
    got = _describe(cluster, GROUP, "dyn-bad")
    assert {e.source for e in got.values()} == {DEFAULT}


_NAMES = st.sampled_from(
    [
        "background.threads",
        "log.retention.ms",
        "log.cleanup.policy",
        "broker.id",
        "consumer.session.timeout.ms",
        "consumer.heartbeat.interval.ms",
    ]
) | st.text(max_size=300)
_VALUES = st.none() | st.sampled_from(["1", "50000", "compact", "-1", ""]) | st.text(max_size=1_200)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    resources=st.lists(
        st.fixed_dictionaries({
            "resource_type": st.sampled_from([4, 32, 2, 99, -1]),
            "resource_name": st.sampled_from(["", "1", "2", "99", "dyn-h"]) | st.text(max_size=300),
            "configs": st.lists(st.fixed_dictionaries({"name": _NAMES, "config_operation": st.integers(-1, 5),
                                                       "value": _VALUES}), max_size=70),
        }),
        max_size=5,
    ),
    validate_only=st.booleans(),
)  # fmt: skip
def test_hostile_alterations_fail_alone_and_keep_only_valid_configs(
    cluster: ClusterThread, resources: list[dict[str, Any]], validate_only: bool
) -> None:
    body = {"resources": resources, "validate_only": validate_only}
    answer = _ask(cluster, 44, 1, body)
    assert len(answer.responses) == len(resources)
    for r in answer.responses:
        assert int(r.error_code) in {e.value for e in Errors}, r
    # Every broker holds only what the rules allow, and still answers.
    for broker in cluster.cluster.brokers.values():
        for (t, n), configs in broker.dynamic_configs.configs.resources.items():
            assert invalid_resource(t, n, configs) is None, (t, n, configs)
    assert _describe(cluster, GROUP, "dyn-h") is not None


def test_a_delete_with_a_value_is_a_delete(cluster: ClusterThread) -> None:
    # librdkafka 0081 sends DELETE compression.type=lz4: Kafka ignores the
    # value; partlog's controller refused it (INVALID_REQUEST).
    _alter(cluster, ConfigResource.Type.TOPIC, TOPIC, ("compression.type", "lz4", SET))
    _alter(cluster, ConfigResource.Type.TOPIC, TOPIC, ("compression.type", "lz4", DELETE))
    _alter(cluster, GROUP, "dyn-d", (SESSION_TIMEOUT, "50000", SET))
    _alter(cluster, GROUP, "dyn-d", (SESSION_TIMEOUT, "50000", DELETE))
    assert _describe(cluster, GROUP, "dyn-d")[SESSION_TIMEOUT].source == DEFAULT
