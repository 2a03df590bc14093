"""The Kafka front end against real Kafka clients (confluent-kafka with its
bundled librdkafka, kafka-python) and hand-built frames, on loopback."""

from __future__ import annotations

import io
import socket
import struct
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.serial import entity_reader, entity_writer

from partlog.kafka_front.apis import SUPPORTED_VERSIONS
from partlog.kafka_front.codec import FrameError, FrameReader, build, error_body, parse_request, response_class
from partlog.kafka_front.handler import client_az
from partlog.tools.local_cluster import TOPIC
from tests.kafka_helpers import API_VERSIONS_V0, ClusterThread, kio_answer, kio_request, raw_request, read_frame

confluent_kafka = pytest.importorskip("confluent_kafka")


def load_response_schema(api_key: int, version: int) -> Any:
    return response_class(api_key, version)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterThread]:
    c = ClusterThread(str(tmp_path_factory.mktemp("kafka")), brokers_per_az=2, partitions=6)
    try:
        yield c
    finally:
        c.close()


# ------------------------------------------------------------------- codec


def test_client_az_is_read_from_the_client_id() -> None:
    assert client_az("diskless_az=az2") == "az2"
    assert client_az("app-1,diskless_az=use1-az3") == "use1-az3"
    assert client_az("mydiskless_az=az2") is None
    assert client_az(None) is None
    assert client_az("diskless_az=") is None


@pytest.mark.parametrize("api_key", sorted(SUPPORTED_VERSIONS))
def test_every_served_version_has_an_error_answer_that_kio_reads_back(api_key: int) -> None:
    lo, hi = SUPPORTED_VERSIONS[api_key]
    for version in range(lo, hi + 1):
        cls = response_class(api_key, version)
        body = error_body(cls, 35)
        out = io.BytesIO()
        entity_writer(cls)(out, body)
        back, used = entity_reader(cls)(out.getvalue(), 0)
        assert used == len(out.getvalue())
        assert back == body


def test_build_drops_fields_a_version_lacks_and_keeps_defaults() -> None:
    data = {
        "throttle_time": 5,
        "brokers": [{"node_id": 1, "host": "h", "port": 9092, "rack": "az1"}],
        "cluster_id": "c",
        "controller_id": 1,
        "topics": [],
    }
    v0 = build(load_response_schema(3, 0), data)
    assert not hasattr(v0, "cluster_id")
    v12 = build(load_response_schema(3, 12), data)
    assert v12.cluster_id == "c" and v12.brokers[0].rack == "az1"


def test_frame_reader_refuses_sizes_out_of_bounds_before_buffering() -> None:
    r = FrameReader(request_bytes_max=100)
    r.feed(struct.pack(">i", 101))
    with pytest.raises(FrameError, match=r"socket\.request\.max\.bytes"):
        r.next_frame()
    r = FrameReader(request_bytes_max=100)
    r.feed(struct.pack(">i", -5))
    with pytest.raises(FrameError):
        r.next_frame()


def test_an_api_versions_request_of_an_unknown_version_is_answered_in_v0() -> None:
    frame = raw_request(18, 99, 7, b"")[4:]
    req = parse_request(frame, SUPPORTED_VERSIONS)
    assert req.unsupported is not None and req.correlation_id == 7


# ------------------------------------------------------- raw connections


def _connect(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    return s


def _api_versions_ok(port: int) -> bool:
    with _connect(port) as s:
        s.sendall(API_VERSIONS_V0)
        frame = read_frame(s)
    if frame is None:
        return False
    (cid,) = struct.unpack_from(">i", frame)
    body, _ = entity_reader(load_response_schema(18, 0))(frame, 4)
    return cid == 1 and body.error_code == 0 and any(k.api_key == 0 for k in body.api_keys)


def test_api_versions_v3_answer_has_a_v0_header(cluster: ClusterThread) -> None:
    port = cluster.kafka_port(1)
    # ApiVersions v3: compact strings client_software_name/version, tagged fields.
    body = b"\x05kcat\x041.0\x00"
    with _connect(port) as s:
        s.sendall(raw_request(18, 3, 42, body, flexible=True))
        frame = read_frame(s)
    assert frame is not None
    (cid,) = struct.unpack_from(">i", frame)
    assert cid == 42
    # Header v0: the body starts right after the correlation id.
    answer, used = entity_reader(load_response_schema(18, 3))(frame, 4)
    assert answer.error_code == 0 and 4 + used == len(frame)
    assert {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys} == SUPPORTED_VERSIONS


def test_unknown_api_versions_version_gets_unsupported_version_with_the_api_list(cluster: ClusterThread) -> None:
    with _connect(cluster.kafka_port(1)) as s:
        s.sendall(raw_request(18, 99, 3, b"", flexible=True))
        frame = read_frame(s)
        assert frame is not None
        answer, _ = entity_reader(load_response_schema(18, 0))(frame, 4)
        assert answer.error_code == 35
        assert any(k.api_key == 18 for k in answer.api_keys)
        # The connection stays usable.
        s.sendall(API_VERSIONS_V0)
        assert read_frame(s) is not None


def test_an_api_kafka_has_but_we_do_not_serve_is_refused_with_unsupported_version(cluster: ClusterThread) -> None:
    # DescribeCluster (60) v0: include_cluster_authorized_operations, tagged fields.
    with _connect(cluster.kafka_port(1)) as s:
        s.sendall(raw_request(60, 0, 9, b"\x00\x00", flexible=True))
        frame = read_frame(s)
        assert frame is not None
        (cid,) = struct.unpack_from(">i", frame)
        assert cid == 9
        answer, _ = entity_reader(load_response_schema(60, 0))(frame, 5)
        assert answer.error_code == 35
        s.sendall(API_VERSIONS_V0)
        assert read_frame(s) is not None


def test_an_oversized_request_closes_only_its_connection(cluster: ClusterThread) -> None:
    port = cluster.kafka_port(2)
    with _connect(port) as bystander, _connect(port) as bad:
        bad.sendall(struct.pack(">i", 1 << 30))
        assert read_frame(bad) is None
        bystander.sendall(API_VERSIONS_V0)
        assert read_frame(bystander) is not None


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    api_key=st.sampled_from([0, 1, 2, 3, 18, 19, 22, 60, 999, -1]),
    version=st.integers(-2, 20),
    body=st.binary(max_size=200),
    cut=st.integers(0, 8),
)
def test_malformed_requests_never_take_the_listener_down(
    cluster: ClusterThread, api_key: int, version: int, body: bytes, cut: int
) -> None:
    port = cluster.kafka_port(3)
    frame = raw_request(api_key, version, 1, body, flexible=True)
    frame = frame[: len(frame) - cut] if cut < len(frame) - 4 else frame
    with _connect(port) as s:
        s.sendall(frame)
        s.shutdown(socket.SHUT_WR)
        s.settimeout(10)
        while True:
            try:
                if read_frame(s) is None:
                    break
            except (TimeoutError, ConnectionError):
                break
    assert _api_versions_ok(port)
    node = cluster.cluster.nodes[3]
    assert node.kafka is not None and _budget_drains(node.kafka)


# ------------------------------------------------------------ real clients


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


def test_a_failed_commit_rpc_reaches_kafka_clients_as_a_retriable_timeout() -> None:
    # Regression: NETWORK_EXCEPTION (13) in a produce answer is fatal to
    # librdkafka's idempotent producer; the failover test lost 42 deliveries.
    from partlog.kafka.errors import Errors
    from partlog.kafka_front.handler import kafka_error as _kafka_error

    assert _kafka_error(Errors.NETWORK_EXCEPTION) == Errors.REQUEST_TIMED_OUT
    assert _kafka_error(Errors.COMMIT_DEADLINE_EXCEEDED) == Errors.REQUEST_TIMED_OUT
    assert _kafka_error(Errors.NOT_LEADER_OR_FOLLOWER) == Errors.NOT_LEADER_OR_FOLLOWER


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


def test_offset_for_leader_epoch_is_answered_by_the_leader_through_any_broker(cluster: ClusterThread) -> None:
    # OffsetForLeaderEpoch v4 by hand: replica_id -1, one topic, partition 0,
    # current leader epoch -1 (unchecked), leader epoch 0.
    import struct as st_

    def compact_str(s: str) -> bytes:
        return bytes([len(s) + 1]) + s.encode()

    body = st_.pack(">i", -1) + b"\x02" + compact_str(TOPIC) + b"\x02" + st_.pack(">iii", 0, -1, 0) + b"\x00\x00\x00"
    for broker_id in sorted(cluster.cluster.brokers):
        with _connect(cluster.kafka_port(broker_id)) as s:
            s.sendall(raw_request(23, 4, 5, body, flexible=True))
            frame = read_frame(s)
        assert frame is not None
        answer, _ = entity_reader(load_response_schema(23, 4))(frame, 5)
        [part] = answer.topics[0].partitions
        assert part.error_code == 0 and part.leader_epoch == 0 and part.end_offset >= 0


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


@pytest.fixture
def tight_listener(cluster: ClusterThread) -> Iterator[Any]:
    """A second Kafka listener on broker 1 with a 1,000-byte request budget
    and a 3 s frame deadline."""
    from partlog.kafka_front.server import KafkaListener, ListenerLimits

    broker = cluster.cluster.brokers[1]
    limits = ListenerLimits(request_bytes_in_flight_max=1000, frame_deadline_ms=3000)

    async def start() -> KafkaListener:
        listener = KafkaListener(broker, limits=limits)
        await listener.start()
        return listener

    listener = cluster.call(start())
    try:
        yield listener
    finally:
        cluster.call(listener.close())


def _budget_drains(listener: Any) -> bool:
    deadline = time.monotonic() + 10
    while listener.request_bytes and time.monotonic() < deadline:
        time.sleep(0.02)
    return bool(listener.request_bytes == 0)


def test_a_request_that_does_not_arrive_in_time_closes_its_connection_and_frees_its_bytes(tight_listener: Any) -> None:
    with _connect(tight_listener.port) as s:
        s.sendall(struct.pack(">i", 900) + b"\x00" * 10)
        s.settimeout(10)
        assert read_frame(s) is None  # closed by the frame deadline
    assert _budget_drains(tight_listener)
    assert _api_versions_ok(tight_listener.port)


def test_the_request_byte_budget_holds_back_a_request_until_room_is_freed(tight_listener: Any) -> None:
    hog = _connect(tight_listener.port)
    hog.sendall(struct.pack(">i", 900) + b"\x00\x12")  # 900 bytes reserved, trickling
    time.sleep(0.05)
    # A small request still fits beside it.
    assert _api_versions_ok(tight_listener.port)
    with _connect(tight_listener.port) as waiting:
        # 500 more would pass the budget: this one waits, unread.
        padded = raw_request(18, 0, 77, b"", client_id="x" * 470)
        waiting.sendall(padded)
        waiting.settimeout(0.2)
        with pytest.raises(TimeoutError):
            waiting.recv(1)  # not answered while the hog holds the budget
        waiting.settimeout(10)
        hog.close()  # the deadline would free it as well
        frame = read_frame(waiting)
        assert frame is not None and struct.unpack_from(">i", frame)[0] == 77
    assert _budget_drains(tight_listener)


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


def _ask(port: int, frame: bytes) -> bytes:
    with _connect(port) as s:
        s.sendall(frame)
        answer = read_frame(s)
    assert answer is not None
    return answer


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


def test_delete_records_refuses_negative_offsets_other_than_minus_one(cluster: ClusterThread) -> None:
    body = {"topics": [{"name": TOPIC, "partitions": [{"partition_index": 2, "offset": -2}]}], "timeout": 5000}
    answer = kio_answer(21, 2, _ask(cluster.kafka_port(1), kio_request(21, 2, 3, body)))
    assert answer.topics[0].partitions[0].error_code == 1  # OFFSET_OUT_OF_RANGE


def test_a_topic_named_twice_is_refused_and_not_created(cluster: ClusterThread) -> None:
    twice = {"name": "twice", "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}
    body = {"topics": [twice, twice], "timeout": 5000, "validate_only": False}
    answer = kio_answer(19, 7, _ask(cluster.kafka_port(1), kio_request(19, 7, 4, body)))
    assert [t.error_code for t in answer.topics] == [42, 42]  # INVALID_REQUEST
    admin = cluster.cluster.admin
    assert admin is not None and admin.topic("twice") is None


def test_a_large_request_of_a_small_api_is_refused_before_it_is_read(cluster: ClusterThread) -> None:
    port = cluster.kafka_port(2)
    with _connect(port) as bystander, _connect(port) as big:
        # Metadata of 2 MiB: past the 1 MiB limit of requests other than Produce and groups.
        big.sendall(struct.pack(">ihhi", 2 * 1024 * 1024, 3, 1, 9))
        big.settimeout(10)
        assert read_frame(big) is None
        bystander.sendall(API_VERSIONS_V0)
        assert read_frame(bystander) is not None


def test_a_connection_that_sends_one_byte_and_stops_is_closed(tight_listener: Any) -> None:
    with _connect(tight_listener.port) as s:
        s.sendall(b"\x00")
        s.settimeout(15)
        assert read_frame(s) is None  # the frame deadline (3 s here) closes it
    assert _budget_drains(tight_listener)


def test_pipelined_fetches_are_answered_in_order(cluster: ClusterThread) -> None:
    topic = [{"topic": TOPIC, "partitions": [{"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
                                             "last_fetched_epoch": -1, "log_start_offset": -1,
                                             "partition_max_bytes": 1024}]}]  # fmt: skip
    body = {"replica_id": -1, "max_wait": 200, "min_bytes": 1, "max_bytes": 4096, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "topics": topic, "forgotten_topics_data": [],
            "rack_id": ""}  # fmt: skip
    with _connect(cluster.kafka_port(1)) as s:
        s.sendall(b"".join(kio_request(1, 12, cid, body) for cid in range(10, 15)))
        cids = []
        for _ in range(5):
            frame = read_frame(s)
            assert frame is not None
            cids.append(struct.unpack_from(">i", frame)[0])
    assert cids == [10, 11, 12, 13, 14]


def test_frame_reader_knows_the_api_key_from_the_sixth_byte() -> None:
    # Regression: the key was read with the version (8 bytes), and a request
    # whose first 6 bytes arrived alone raised out of the read loop.
    r = FrameReader()
    r.feed(struct.pack(">ih", 100, 3))
    assert r.frame_size() == 100 and r.api_key() == 3
    r = FrameReader()
    r.feed(b"\x00\x00\x00")
    assert r.frame_size() is None and r.api_key() is None
