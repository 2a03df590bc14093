"""The Kafka front end's listener against hand-built frames on loopback, in
an in-process cluster (real Kafka clients: tests/system/test_kafka_clients.py;
the codec: tests/unit/test_kafka_front_codec.py)."""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.serial import entity_reader

from partlog.kafka_front.apis import SUPPORTED_VERSIONS
from partlog.tools.local_cluster import TOPIC
from tests.kafka_helpers import API_VERSIONS_V0, ClusterThread, kio_answer, kio_request, raw_request, read_frame
from tests.unit.test_kafka_front_codec import load_response_schema


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterThread]:
    c = ClusterThread(str(tmp_path_factory.mktemp("kafka")), brokers_per_az=2, partitions=6)
    try:
        yield c
    finally:
        c.close()


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
    api_key=st.sampled_from([*sorted(SUPPORTED_VERSIONS), 60, 999, -1]),
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


# ------------------------------------------------------------ admin requests


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
    deadline = time.monotonic() + 10
    while tight_listener.request_bytes < 900:  # the listener has read the size and reserved it
        assert time.monotonic() < deadline, "the hog's 900 bytes were never reserved"
        time.sleep(0.005)
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


def _ask(port: int, frame: bytes) -> bytes:
    with _connect(port) as s:
        s.sendall(frame)
        answer = read_frame(s)
    assert answer is not None
    return answer


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
