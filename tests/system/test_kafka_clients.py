"""Real Kafka clients (confluent-kafka, kafka-python, kcat) against partlog's
Kafka front end: an in-process cluster (and one ``partlog broker``
subprocess on a static cluster file).  Raw requests against the listener
are in tests/integration/test_kafka_front.py."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from partlog.tools.local_cluster import TOPIC
from tests.integration.test_kafka_front import _ask
from tests.kafka_helpers import ClusterThread, kio_answer, kio_request

confluent_kafka = pytest.importorskip("confluent_kafka")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterThread]:
    c = ClusterThread(str(tmp_path_factory.mktemp("kafka")), brokers_per_az=2, partitions=6)
    try:
        yield c
    finally:
        c.close()


def _az_of(cluster: ClusterThread, broker_id: int) -> str:
    info = cluster.cluster.layout.broker(broker_id)
    assert info is not None
    return info.az


def test_confluent_idempotent_producer_in_one_az_sends_only_to_that_az_and_reads_back_in_order(
    cluster: ClusterThread,
) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    before = cluster.produce_requests()
    p = Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "client.id": "test,diskless_az=az2",
        }
    )
    acked: dict[int, list[tuple[int, bytes]]] = {}
    errors: list[object] = []

    def done(err: object, msg: Any) -> None:
        if err is not None:
            errors.append(err)
        else:
            acked.setdefault(msg.partition(), []).append((msg.offset(), msg.value()))

    n = 3000
    for i in range(n):
        p.produce(TOPIC, value=f"v{i}".encode(), key=str(i).encode(), on_delivery=done)
        if i % 500 == 0:
            p.poll(0)
    assert p.flush(60) == 0
    assert errors == []
    assert sum(len(v) for v in acked.values()) == n
    after = cluster.produce_requests()
    sent_to = {bid for bid in after if after[bid] > before.get(bid, 0)}
    assert sent_to and all(_az_of(cluster, bid) == "az2" for bid in sent_to), sent_to

    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "g-read", "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(TOPIC, part, 0) for part in acked])
    got: dict[int, list[tuple[int, bytes]]] = {}
    deadline = time.monotonic() + 60
    while sum(len(v) for v in got.values()) < n and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None or m.error():
            continue
        got.setdefault(m.partition() or 0, []).append((m.offset() or 0, m.value() or b""))
    c.close()
    for part, records in acked.items():
        mine = sorted(records)
        # Exactly once and in order: what was acknowledged, at its offsets.
        assert [r for r in got.get(part, []) if r in set(mine)] == mine
        offsets = [o for o, _ in got.get(part, [])]
        assert offsets == sorted(set(offsets))


def test_kafka_python_produces_and_consumes(cluster: ClusterThread) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    p = KafkaProducer(bootstrap_servers=cluster.bootstrap.split(","), acks="all", linger_ms=5)
    futures = [p.send(TOPIC, value=f"kp{i}".encode(), partition=i % 2) for i in range(200)]
    p.flush(30)
    metas = [f.get(timeout=30) for f in futures]
    p.close()
    assert all(m.offset >= 0 for m in metas)
    c = KafkaConsumer(
        bootstrap_servers=cluster.bootstrap.split(","), enable_auto_commit=False, consumer_timeout_ms=5000
    )
    tps = [TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)]
    c.assign(tps)
    for tp in tps:
        c.seek(tp, min(m.offset for m in metas if m.partition == tp.partition))
    seen = {(r.partition, r.offset): r.value for r in c}
    c.close()
    for i, m in enumerate(metas):
        assert seen.get((m.partition, m.offset)) == f"kp{i}".encode()


def test_acks_zero_gets_no_answer_and_the_connection_goes_on(cluster: ClusterThread) -> None:
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=cluster.bootstrap.split(","), acks=0)
    for i in range(50):
        p.send(TOPIC, value=f"a0-{i}".encode(), partition=0)
    p.flush(30)
    # A request after the unanswered ones is answered: the connection works.
    assert p.partitions_for(TOPIC)
    p.close()


def test_watermarks_and_offsets_for_times(cluster: ClusterThread) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    p = Producer({"bootstrap.servers": cluster.bootstrap})
    t0 = int(time.time() * 1000)
    for i in range(10):
        p.produce(TOPIC, value=b"w", partition=5, timestamp=t0 + i)
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "g-w"})
    low, high = c.get_watermark_offsets(TopicPartition(TOPIC, 5), timeout=10)
    assert low == 0 and high >= 10
    [found] = c.offsets_for_times([TopicPartition(TOPIC, 5, t0 + 3)], timeout=10)
    assert found.offset == high - 10 + 3
    c.close()


def test_list_offsets_finds_the_record_not_the_batch(cluster: ClusterThread) -> None:
    """librdkafka's 0081 ListOffsets: three records in one batch, stamped
    +100, +400, +250: the max timestamp is record 1 (Kafka's
    offsetOfMaxTimestamp), a lookup by time the first record at or after it."""
    from confluent_kafka import Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("max-ts", num_partitions=1, replication_factor=1)])["max-ts"].result(30)
    p = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 100})
    base = 10_000_000
    for stamp in (base + 100, base + 400, base + 250):
        p.produce("max-ts", value=b"m", partition=0, timestamp=stamp)
    assert p.flush(30) == 0
    tp = TopicPartition("max-ts", 0)
    spec_of: Any = OffsetSpec  # untyped in confluent-kafka's stubs
    for spec, (offset, stamp) in [(spec_of.earliest(), (0, -1)), (spec_of.latest(), (3, -1)),
                                  (spec_of.max_timestamp(), (1, base + 400)),
                                  (OffsetSpec.for_timestamp(base + 50), (0, base + 100)),
                                  (OffsetSpec.for_timestamp(base + 300), (1, base + 400)),
                                  (OffsetSpec.for_timestamp(base + 150), (1, base + 400))]:  # fmt: skip
        got = admin.list_offsets({tp: spec})[tp].result(30)
        assert (got.offset, got.timestamp) == (offset, stamp), spec


def test_admin_creates_topics_and_metadata_lists_them(cluster: ClusterThread) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    a = AdminClient({"bootstrap.servers": cluster.bootstrap})
    fs = a.create_topics([NewTopic("made-by-admin", num_partitions=4, replication_factor=3)])
    fs["made-by-admin"].result(30)
    md = a.list_topics(timeout=10)
    t = md.topics["made-by-admin"]
    assert len(t.partitions) == 4
    assert all(len(p.replicas) == 3 for p in t.partitions.values())
    # Another shape of an existing topic is refused, as Kafka does.
    fs = a.create_topics([NewTopic("made-by-admin", num_partitions=5, replication_factor=3)])
    with pytest.raises(confluent_kafka.KafkaException, match="TOPIC_ALREADY_EXISTS"):
        fs["made-by-admin"].result(30)


def _kcat() -> str:
    import os
    import shutil

    path = shutil.which("kcat")
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("kcat is missing: scripts/test installs it from Debian")
        pytest.skip("kcat is not installed (scripts/test installs it)")
    return path


def test_kcat_produces_and_consumes_a_file_byte_for_byte(cluster: ClusterThread, tmp_path: Any) -> None:
    import random
    import subprocess

    kcat = _kcat()
    data = random.Random(3).randbytes(300_000)
    src = tmp_path / "blob.bin"
    src.write_bytes(data)
    topic = "kcat-blob"
    # One message per file (-P with a file argument), to a topic kcat's
    # metadata request creates.
    subprocess.run([kcat, "-P", "-b", cluster.bootstrap, "-t", topic, "-p", "0", str(src)], check=True, timeout=60)
    out = subprocess.run(
        [kcat, "-C", "-b", cluster.bootstrap, "-t", topic, "-p", "0", "-o", "beginning", "-c", "1", "-e", "-f", "%s"],
        check=True,
        timeout=60,
        capture_output=True,
    )
    assert out.stdout == data
    lines = b"".join(f"line {i}\n".encode() for i in range(500))
    subprocess.run([kcat, "-P", "-b", cluster.bootstrap, "-t", topic, "-p", "0"], input=lines, check=True, timeout=60)
    out = subprocess.run(
        [kcat, "-C", "-b", cluster.bootstrap, "-t", topic, "-p", "0", "-o", "1", "-e", "-q"],
        check=True,
        timeout=60,
        capture_output=True,
    )
    assert out.stdout == lines


def test_describe_configs_delete_records_and_offset_for_leader_epoch(cluster: ClusterThread) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, ConfigResource  # type: ignore[attr-defined]

    a = AdminClient({"bootstrap.servers": cluster.bootstrap})
    [(_, fut)] = a.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, TOPIC)]).items()
    configs = fut.result(30)
    assert configs["retention.ms"].value == str(7 * 24 * 3600 * 1000)
    [(_, fut)] = a.describe_configs([ConfigResource(ConfigResource.Type.BROKER, "1")]).items()
    assert fut.result(30)["message.max.bytes"].value == "1048588"

    p = Producer({"bootstrap.servers": cluster.bootstrap})
    for i in range(20):
        p.produce(TOPIC, value=f"dr{i}".encode(), partition=4)
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "g-dr"})
    _, high = c.get_watermark_offsets(TopicPartition(TOPIC, 4), timeout=10)
    fs = a.delete_records([TopicPartition(TOPIC, 4, high - 5)])
    [(_, fut)] = fs.items()
    deleted = fut.result(30)
    assert deleted.low_watermark == high - 5
    assert c.get_watermark_offsets(TopicPartition(TOPIC, 4), timeout=10) == (high - 5, high)
    c.close()


def test_delete_topics_drops_the_topic_everywhere_and_its_file_references(cluster: ClusterThread) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    a = AdminClient({"bootstrap.servers": cluster.bootstrap})
    a.create_topics([NewTopic("short-lived", num_partitions=2, replication_factor=3)])["short-lived"].result(30)
    p = Producer({"bootstrap.servers": cluster.bootstrap})
    for i in range(50):
        p.produce("short-lived", value=b"x" * 100, partition=i % 2)
    assert p.flush(30) == 0
    admin = cluster.cluster.admin
    assert admin is not None
    topic = admin.topic("short-lived")
    assert topic is not None
    brokers = list(cluster.cluster.brokers.values())
    keys = {k for b in brokers for k in b.store.file_usage()}
    assert keys

    fs = a.delete_topics(["short-lived", "never-was"], operation_timeout=30)
    fs["short-lived"].result(30)
    with pytest.raises(confluent_kafka.KafkaException, match="UNKNOWN_TOPIC"):
        fs["never-was"].result(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(topic.topic_id in b.store.topics() for b in brokers):
        time.sleep(0.1)
    assert admin.topic_deleted(topic.topic_id)
    assert all(topic.topic_id not in b.store.topics() for b in brokers)
    # Nothing of the topic is referenced any more: walmgr may delete objects
    # that held only its batches.
    tps = {(topic.topic_id, p) for p in range(2)}
    for b in brokers:
        assert not any((tp.topic_id, tp.partition) in tps for tp in b.store.partitions())
    # Internal topics are refused.
    fs = a.delete_topics(["__consumer_offsets"], operation_timeout=30)
    with pytest.raises(confluent_kafka.KafkaException):
        fs["__consumer_offsets"].result(30)


def test_partlog_broker_on_a_static_cluster_file_serves_kafka_on_its_kafka_port(tmp_path: Any) -> None:
    import subprocess
    import sys
    import uuid as uuid_

    from partlog.tools.local_cluster import free_ports
    from tests.cluster_helpers import stop_processes, wait_listening

    rpc_port, kafka_port = free_ports(2)
    cluster_file = tmp_path / "cluster.toml"
    cluster_file.write_text(
        f'cluster_id = "{uuid_.uuid4()}"\n'
        f'[[brokers]]\nid = 1\naz = "az1"\nport = {rpc_port}\nkafka_port = {kafka_port}\n'
        '[[topics]]\nname = "static"\nleaders = [1, 1]\n'
        # Consumer groups on a static cluster: the file names the offsets topic.
        '[[topics]]\nname = "__consumer_offsets"\nleaders = [1, 1, 1]\n'
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "partlog", "broker", "--cluster", str(cluster_file), "--id", "1",
         "--data-dir", str(tmp_path / "data"), "--no-sync"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_listening(kafka_port, proc)
        from confluent_kafka import Consumer, Producer, TopicPartition

        p = Producer({"bootstrap.servers": f"127.0.0.1:{kafka_port}"})
        p.produce("static", value=b"hello", partition=1)
        assert p.flush(30) == 0
        c = Consumer({"bootstrap.servers": f"127.0.0.1:{kafka_port}", "group.id": "g-static"})
        c.assign([TopicPartition("static", 1, 0)])
        m = None
        deadline = time.monotonic() + 30
        while m is None and time.monotonic() < deadline:
            m = c.poll(0.5)
        assert m is not None and m.value() == b"hello"
        c.commit(message=m, asynchronous=False)
        [committed] = c.committed([TopicPartition("static", 1)], timeout=10)
        assert committed.offset == (m.offset() or 0) + 1
        c.close()
    finally:
        stop_processes([proc])


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batches_pass_through_untouched(cluster: ClusterThread, codec: str) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    p = Producer({"bootstrap.servers": cluster.bootstrap, "compression.type": codec, "enable.idempotence": True,
                  "linger.ms": 20})  # fmt: skip
    acked: list[tuple[int, bytes]] = []

    def done(err: Any, msg: Any) -> None:
        assert err is None, err
        acked.append((msg.offset(), msg.value()))

    values = [f"{codec}-{i}-".encode() * 20 for i in range(300)]
    for v in values:
        p.produce(TOPIC, value=v, partition=3, on_delivery=done)
    assert p.flush(30) == 0
    start = min(o for o, _ in acked)
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"g-{codec}"})
    c.assign([TopicPartition(TOPIC, 3, start)])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < len(values) and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.append(m.value() or b"")
    c.close()
    assert got[: len(values)] == values


def test_clients_cannot_write_or_truncate_the_offsets_topic(cluster: ClusterThread) -> None:
    from confluent_kafka import Consumer, Producer

    from partlog.kafka_front.group_coordinator import OFFSETS_TOPIC

    # Make the offsets topic exist (a group's first FindCoordinator).
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "g-internal"})
    c.list_topics(timeout=10)
    c.close()
    port = cluster.kafka_port(1)
    asked = {
        "topics": [{"topic_id": uuid.UUID(int=0), "name": OFFSETS_TOPIC}],
        "allow_auto_topic_creation": True,
        "include_topic_authorized_operations": False,
    }
    answer = kio_answer(3, 12, _ask(port, kio_request(3, 12, 1, asked)))
    [t] = answer.topics
    assert t.is_internal and len(t.partitions) == 12  # made by the coordinator, not as 1 partition
    # Not compacted: retention must never drop a group's last commit.
    for b in cluster.cluster.brokers.values():
        assert b.store.topic_config(t.topic_id).retention_ms == -1
    p = Producer({"bootstrap.servers": cluster.bootstrap, "message.timeout.ms": 10_000})
    errors: list[Any] = []
    p.produce(OFFSETS_TOPIC, value=b"forged", partition=0, on_delivery=lambda e, m: errors.append(e))
    p.flush(30)
    assert errors and errors[0] is not None and errors[0].code() == 17  # INVALID_TOPIC_EXCEPTION
    body = {"topics": [{"name": OFFSETS_TOPIC, "partitions": [{"partition_index": 0, "offset": -1}]}], "timeout": 5000}
    answer = kio_answer(21, 2, _ask(port, kio_request(21, 2, 2, body)))
    assert answer.topics[0].partitions[0].error_code == 17  # INVALID_TOPIC_EXCEPTION
