"""Topic configs the controller keeps (docs/design/topic-configs.md),
driven by confluent-kafka's AdminClient against running clusters, on the
embedded controller and on etcd: CreateTopics with configs,
IncrementalAlterConfigs, AlterConfigs, DescribeConfigs' sources and
synonyms, and the change reaching every broker's store without a restart
(and a restarted broker's).  Error codes row by row are in
tests/system/test_kafka_error_codes.py; the ops against a reference model
in tests/unit/test_topic_configs.py."""

from __future__ import annotations

import asyncio
import shutil
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from partlog.kafka.topic_config import TopicConfig
from tests.integration.test_kafka_front import _ask
from tests.kafka_helpers import QUICK_FENCING_MS, ClusterThread, kio_answer, kio_request

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import KafkaException  # noqa: E402
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # noqa: E402
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
)

WAIT_S = 30.0
DYNAMIC = ConfigSource.DYNAMIC_TOPIC_CONFIG.value
DEFAULT = ConfigSource.DEFAULT_CONFIG.value
DAY_MS = 24 * 3600 * 1000


@pytest.fixture(scope="module", params=["embedded", "etcd"])
def cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterThread]:
    if request.param == "etcd" and shutil.which("etcd") is None:
        pytest.skip("etcd is not installed (scripts/test installs Debian's etcd-server)")
    c = ClusterThread(
        str(tmp_path_factory.mktemp(f"configs-{request.param}")),
        metadata="etcd" if request.param == "etcd" else "",
        partitions=1,
        broker_session_timeout_ms=QUICK_FENCING_MS,
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


def _topic_id(c: ClusterThread, name: str) -> uuid.UUID:
    """The topic's id, once the cluster tool's own view has it (etcd's watch may lag)."""
    admin = c.cluster.admin
    assert admin is not None
    deadline = time.monotonic() + WAIT_S
    while (t := admin.topic(name)) is None:
        assert time.monotonic() < deadline, f"{name} never reached the view"
        time.sleep(0.05)
    return t.topic_id


def _every_store(c: Any, name: str, holds: Callable[[TopicConfig], bool]) -> None:
    """Wait until every broker's store holds a config of ``name`` that ``holds``."""
    tid = _topic_id(c, name)
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            configs = {bid: b.store.topic_config(tid) for bid, b in c.cluster.brokers.items()}
        except KeyError:  # a broker has not created the topic yet
            configs = {}
        if configs and all(holds(x) for x in configs.values()):
            return
        assert time.monotonic() < deadline, configs
        time.sleep(0.05)


def _describe(c: ClusterThread, name: str, **kw: Any) -> dict[str, Any]:
    [(_, fut)] = _admin(c).describe_configs([ConfigResource(ConfigResource.Type.TOPIC, name)], **kw).items()
    out: dict[str, Any] = fut.result(WAIT_S)
    return out


def _incremental(c: ClusterThread, name: str, *entries: ConfigEntry, **kw: Any) -> None:
    resource = ConfigResource(ConfigResource.Type.TOPIC, name, incremental_configs=list(entries))
    [(_, fut)] = _admin(c).incremental_alter_configs([resource], **kw).items()
    fut.result(WAIT_S)


def _op(name: str, value: str | None, op: AlterConfigOpType) -> ConfigEntry:
    return ConfigEntry(name, value, incremental_operation=op)


def test_create_alter_incrementally_and_whole_describe_and_every_store_follows(cluster: ClusterThread) -> None:
    a = _admin(cluster)
    new = NewTopic("cfg-a", num_partitions=2, replication_factor=3,
                   config={"retention.ms": str(DAY_MS), "cleanup.policy": "compact"})  # fmt: skip
    a.create_topics([new])["cfg-a"].result(WAIT_S)
    got = _describe(cluster, "cfg-a")
    assert (got["retention.ms"].value, got["retention.ms"].source) == (str(DAY_MS), DYNAMIC)
    assert got["cleanup.policy"].source == DYNAMIC
    assert got["segment.ms"].source == DEFAULT and not got["segment.ms"].is_read_only
    assert got["min.insync.replicas"].is_read_only
    assert set(got) >= {"cleanup.policy", "delete.retention.ms", "max.compaction.lag.ms", "min.compaction.lag.ms",
                        "min.cleanable.dirty.ratio", "min.insync.replicas", "message.timestamp.type",
                        "retention.bytes", "segment.bytes", "remote.storage.enable", "max.message.bytes"}  # fmt: skip
    _every_store(cluster, "cfg-a", lambda x: x.retention_ms == DAY_MS and x.compact and not x.delete)

    _incremental(
        cluster,
        "cfg-a",
        _op("retention.ms", str(2 * DAY_MS), AlterConfigOpType.SET),
        _op("cleanup.policy", "delete", AlterConfigOpType.APPEND),
        _op("segment.ms", None, AlterConfigOpType.DELETE),  # not set: nothing to delete
    )
    got = _describe(cluster, "cfg-a")
    assert got["cleanup.policy"].value == "compact,delete" and got["retention.ms"].value == str(2 * DAY_MS)
    _every_store(cluster, "cfg-a", lambda x: x.retention_ms == 2 * DAY_MS and x.compact and x.delete)

    _incremental(cluster, "cfg-a", _op("cleanup.policy", "compact", AlterConfigOpType.SUBTRACT))
    _every_store(cluster, "cfg-a", lambda x: x.delete and not x.compact)

    # validate_only changes nothing.
    _incremental(cluster, "cfg-a", _op("retention.ms", "1", AlterConfigOpType.SET), validate_only=True)
    assert _describe(cluster, "cfg-a")["retention.ms"].value == str(2 * DAY_MS)

    # AlterConfigs replaces the whole set: what it does not name is back to its default.
    resource = ConfigResource(ConfigResource.Type.TOPIC, "cfg-a", set_config={"segment.ms": "3600000"})
    with warnings.catch_warnings():  # deprecated in clients, served all the same
        warnings.simplefilter("ignore", DeprecationWarning)
        [(_, fut)] = a.alter_configs([resource]).items()
    fut.result(WAIT_S)
    got = _describe(cluster, "cfg-a")
    assert got["retention.ms"].source == DEFAULT
    assert got["retention.ms"].value == str(TopicConfig().retention_ms)
    assert got["cleanup.policy"].value == "delete" and got["segment.ms"].value == "3600000"
    _every_store(cluster, "cfg-a", lambda x: x.retention_ms == TopicConfig().retention_ms and x.segment_ms == 3600000)

    # Synonyms: the override, then the broker default it falls back to.
    got = _describe(cluster, "cfg-a")  # (librdkafka asks for synonyms)
    syn = got["segment.ms"].synonyms
    assert [(s.name, s.source) for s in syn.values()] == [
        ("segment.ms", DYNAMIC),
        ("log.roll.ms", DEFAULT),
    ]


def test_bad_configs_are_refused_with_kafkas_codes_and_messages(cluster: ClusterThread) -> None:
    a = _admin(cluster)
    for config, says in (
        ({"retention.ms": "soon"}, "Not a number of type LONG"),
        ({"no.such.config": "1"}, "Unknown topic config name: no.such.config"),
        ({"segment.bytes": str(1 << 40)}, "Value must be no more than"),
        ({"cleanup.policy": "compact,compact"}, "must not be duplicated"),
    ):
        for validate_only in (False, True):
            fut = a.create_topics([NewTopic("cfg-bad", 1, 1, config=config)], validate_only=validate_only)["cfg-bad"]
            with pytest.raises(KafkaException) as e:
                fut.result(WAIT_S)
            assert e.value.args[0].name() == "INVALID_CONFIG" and says in e.value.args[0].str()
    assert "cfg-bad" not in a.list_topics(timeout=WAIT_S).topics
    with pytest.raises(KafkaException) as e:
        _incremental(cluster, "cfg-missing", _op("retention.ms", "1", AlterConfigOpType.SET))
    assert e.value.args[0].name() == "UNKNOWN_TOPIC_OR_PART"
    a.create_topics([NewTopic("cfg-h", 1, 1)])["cfg-h"].result(WAIT_S)
    for entry, code in (
        (_op("retention.ms", "9" * 5000, AlterConfigOpType.SET), "INVALID_CONFIG"),  # huge
        (_op("retention.ms", str(2**63), AlterConfigOpType.SET), "INVALID_CONFIG"),  # past a LONG
        (_op("retention.ms", "1", AlterConfigOpType.APPEND), "INVALID_CONFIG"),  # not a LIST
        (_op("cleanup.policy", "delete", AlterConfigOpType.SUBTRACT), "INVALID_CONFIG"),  # nothing left
        (_op("min.insync.replicas", "2", AlterConfigOpType.SET), "INVALID_CONFIG"),  # a broker config here
    ):
        with pytest.raises(KafkaException) as e:
            _incremental(cluster, "cfg-h", entry)
        assert e.value.args[0].name() == code, entry
    assert _describe(cluster, "cfg-h")["retention.ms"].source == DEFAULT
    # A resource named twice, raw (clients refuse to send it): both refused, nothing changed.
    one = {"resource_type": 2, "resource_name": "cfg-h",
           "configs": [{"name": "retention.ms", "config_operation": 0, "value": "5"}]}  # fmt: skip
    frame = kio_request(44, 1, 9, {"resources": [one, one], "validate_only": False})
    answer = kio_answer(44, 1, _ask(cluster.kafka_port(1), frame))
    assert [(r.error_code, r.error_message) for r in answer.responses] == [
        (42, "Each resource must appear at most once.")
    ] * 2
    assert _describe(cluster, "cfg-h")["retention.ms"].source == DEFAULT
    # A static broker config does not change at run time (dynamic ones:
    # tests/system/test_kafka_dynamic_configs.py).
    resource = ConfigResource(ConfigResource.Type.BROKER, "1",
                              incremental_configs=[_op("broker.id", "5", AlterConfigOpType.SET)])  # fmt: skip
    [(_, fut)] = a.incremental_alter_configs([resource]).items()
    with pytest.raises(KafkaException) as e:
        fut.result(WAIT_S)
    assert e.value.args[0].name() == "INVALID_REQUEST" and "dynamically" in e.value.args[0].str()


def test_describe_filters_by_name_and_the_apis_are_advertised(cluster: ClusterThread) -> None:
    keys = ["retention.ms", "no.such", "cleanup.policy"]
    body = {"resources": [{"resource_type": 2, "resource_name": "cfg-h", "configuration_keys": keys}],
            "include_synonyms": False, "include_documentation": False}  # fmt: skip
    _admin(cluster).create_topics([NewTopic("cfg-h", 1, 1)])  # (the test above may not have run)
    deadline = time.monotonic() + WAIT_S
    while True:
        answer = kio_answer(32, 4, _ask(cluster.kafka_port(1), kio_request(32, 4, 3, body)))
        if answer.results[0].error_code == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert sorted(c.name for c in answer.results[0].configs) == ["cleanup.policy", "retention.ms"]
    versions = kio_answer(18, 3, _ask(cluster.kafka_port(1), kio_request(18, 3, 4, {
        "client_software_name": "t", "client_software_version": "1"})))  # fmt: skip
    served = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
    assert served[33] == (0, 2) and served[44] == (0, 1)


def test_retention_set_by_the_controller_deletes_on_a_running_broker(cluster: ClusterThread) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    a = _admin(cluster)
    a.create_topics([NewTopic("cfg-r", 1, 3)])["cfg-r"].result(WAIT_S)
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(20):
        p.produce("cfg-r", value=f"r{i}".encode(), partition=0, timestamp=int(time.time() * 1000) - DAY_MS)
    assert p.flush(WAIT_S) == 0
    _incremental(cluster, "cfg-r", _op("retention.ms", "1000", AlterConfigOpType.SET))
    _every_store(cluster, "cfg-r", lambda x: x.retention_ms == 1000)
    for b in list(cluster.cluster.brokers.values()):  # the retention timer's pass, now
        cluster.call(asyncio.to_thread(b.store.enforce_retention))
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "g-cfg-r"})
    deadline = time.monotonic() + WAIT_S
    while c.get_watermark_offsets(TopicPartition("cfg-r", 0), timeout=10)[0] < 20:
        assert time.monotonic() < deadline, "records older than retention.ms were kept"
        time.sleep(0.1)
    c.close()


def test_a_broker_down_during_a_change_applies_it_when_it_comes_back(cluster: ClusterThread) -> None:
    a = _admin(cluster)
    a.create_topics([NewTopic("cfg-d", 1, 3, config={"retention.bytes": "5000000"})])["cfg-d"].result(WAIT_S)
    _every_store(cluster, "cfg-d", lambda x: x.retention_bytes == 5_000_000)
    victim = max(cluster.cluster.brokers)
    cluster.kill(victim)
    try:
        _incremental(
            cluster,
            "cfg-d",
            _op("retention.bytes", None, AlterConfigOpType.DELETE),  # back to the default while it is down
            _op("segment.ms", "7200000", AlterConfigOpType.SET),
        )
    finally:
        cluster.restart(victim)
    _every_store(cluster, "cfg-d", lambda x: x.retention_bytes == -1 and x.segment_ms == 7_200_000)


def test_the_topics_cli_creates_with_configs_alters_and_prints_them(
    cluster: ClusterThread, capsys: pytest.CaptureFixture[str]
) -> None:
    from partlog.tools.cli import main

    c = cluster.cluster
    target = ["--controller", f"127.0.0.1:{c.controller.port}"] if c.controller else ["--metadata", c.etcd_url]
    assert main(["topics", "create", "cfg-cli", "--partitions", "1", "--replication-factor", "1",
                 "--config", "retention.ms=5000", *target]) == 0  # fmt: skip
    capsys.readouterr()
    assert main(["topics", "configs", "cfg-cli", "--set", "segment.ms=7000", "--append", "cleanup.policy=compact",
                 "--delete", "retention.ms", *target]) == 0  # fmt: skip
    assert capsys.readouterr().out.splitlines() == ["cleanup.policy=delete,compact", "segment.ms=7000"]
    assert main(["topics", "configs", "cfg-cli", "--set", "segment.ms=never", *target]) == 1
    err = capsys.readouterr().err
    assert "INVALID_CONFIG" in err and "Not a number of type LONG" in err
    assert main(["topics", "configs", "cfg-cli", *target]) == 0
    assert capsys.readouterr().out.splitlines() == ["cleanup.policy=delete,compact", "segment.ms=7000"]
    _every_store(cluster, "cfg-cli", lambda x: x.compact and x.segment_ms == 7000)


def test_altering_needs_alter_configs_on_the_topic(tmp_path_factory: pytest.TempPathFactory) -> None:
    """With an authorizer: refused (TOPIC_AUTHORIZATION_FAILED) until an
    operator grants ALTER_CONFIGS on the topic, then served."""
    from partlog.acl import AuthorizerConfig
    from partlog.kafka_front.apis import FrontConfig
    from partlog.tools.cli import main
    from partlog.tools.local_cluster import TOPIC

    c = ClusterThread(str(tmp_path_factory.mktemp("configs-acl")), front=FrontConfig(authorizer=AuthorizerConfig()),
                      azs=1, partitions=1, replication_factor=1)  # fmt: skip
    try:
        assert c.cluster.controller is not None
        at = ["--controller", f"127.0.0.1:{c.cluster.controller.port}"]
        with pytest.raises(KafkaException) as e:
            _incremental(c, TOPIC, _op("retention.ms", "5000", AlterConfigOpType.SET))
        assert e.value.args[0].name() == "TOPIC_AUTHORIZATION_FAILED"
        for op in ("alter-configs", "describe"):
            assert main(["acls", "add", "--resource-type", "topic", "--name", TOPIC, "--principal",
                         "User:ANONYMOUS", "--operation", op, *at]) == 0  # fmt: skip
        deadline = time.monotonic() + WAIT_S
        while True:  # the broker follows the controller's ACLs (a long-poll)
            try:
                _incremental(c, TOPIC, _op("retention.ms", "5000", AlterConfigOpType.SET))
                break
            except KafkaException:
                assert time.monotonic() < deadline
                time.sleep(0.1)
        _every_store(c, TOPIC, lambda x: x.retention_ms == 5000)
    finally:
        c.close()
