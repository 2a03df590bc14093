"""KIP-368 re-authentication on a SASL listener with
connections.max.reauth.ms (partlog.kafka_front.authn): a real client
(confluent-kafka, whose librdkafka re-authenticates since 2.2) keeps its
connections through several session lifetimes while it produces and
consumes, re-authenticating on them and never being disconnected; a client
that does not re-authenticate (hand-built frames) is told the lifetime and
disconnected at its first request after the session expired; DescribeConfigs
shows the setting, as the suite's 0142 reads it."""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Iterator

import pytest

from partlog.kafka.scram_credential import ScramCredential
from partlog.kafka_front.listeners import ListenerSecurity
from partlog.kafka_front.scram import StaticCredentials
from tests.kafka_helpers import ClusterThread, kio_answer, kio_request, read_frame

confluent_kafka = pytest.importorskip("confluent_kafka")

USER, PASSWORD = "carol", "carol-secret"
REAUTH_MS = 1_500
RECORDS = 120
RATE_PER_S = 30  # 4 s of producing: two session lifetimes and more
WAIT_S = 30.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterThread]:
    creds = StaticCredentials(
        {
            (USER, m): ScramCredential.from_password(m, PASSWORD, b"salt", 4096)
            for m in ("SCRAM-SHA-512", "SCRAM-SHA-256")
        }
    )
    security = ListenerSecurity(
        sasl_mechanisms=("SCRAM-SHA-512", "PLAIN"), credentials=creds, connections_max_reauth_ms=REAUTH_MS
    )
    c = ClusterThread(str(tmp_path_factory.mktemp("reauth")), azs=1, brokers_per_az=1, partitions=1,
                      kafka_protocol="SASL_PLAINTEXT", kafka_security=security)  # fmt: skip
    try:
        yield c
    finally:
        c.close()


def _metrics(c: ClusterThread) -> tuple[float, float, float]:
    node = c.cluster.nodes[1]
    assert node.kafka is not None
    m = node.kafka.metrics
    return (
        m.reauthentications._value.get(),
        m.expired_sessions_closed._value.get(),
        m.auth_failed.labels("SASL_PLAINTEXT")._value.get(),
    )


def test_a_client_that_reauthenticates_keeps_its_connections(cluster: ClusterThread) -> None:
    conf = {"bootstrap.servers": cluster.bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": USER, "sasl.password": PASSWORD}  # fmt: skip
    before = _metrics(cluster)
    topic = f"reauth-{uuid.uuid4().hex[:8]}"
    p = confluent_kafka.Producer({**conf, "acks": "all", "enable.idempotence": True, "linger.ms": 5})
    errors: list[object] = []
    for i in range(RECORDS):
        p.produce(topic, f"r{i}".encode(), on_delivery=lambda err, _m: errors.append(err) if err else None)
        p.poll(0)
        time.sleep(1 / RATE_PER_S)
    assert p.flush(WAIT_S) == 0 and not errors, errors[:3]
    c = confluent_kafka.Consumer({**conf, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    got: set[bytes] = set()
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + WAIT_S
        while len(got) < RECORDS and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                got.add(m.value())
    finally:
        c.close()
    assert got == {f"r{i}".encode() for i in range(RECORDS)}
    reauths, expired, failed = (a - b for a, b in zip(_metrics(cluster), before, strict=True))
    assert reauths >= 2, "librdkafka re-authenticated on its connections"
    assert expired == 0 and failed == 0


def _authenticate(port: int) -> tuple[socket.socket, int]:
    """A PLAIN login with hand-built frames; the session lifetime answered."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(kio_request(17, 1, 1, {"mechanism": "PLAIN"}))
    frame = read_frame(s)
    assert frame is not None and int(kio_answer(17, 1, frame).error_code) == 0
    s.sendall(kio_request(36, 2, 2, {"auth_bytes": f"\0{USER}\0{PASSWORD}".encode()}))
    frame = read_frame(s)
    assert frame is not None
    answer = kio_answer(36, 2, frame)
    assert int(answer.error_code) == 0
    return s, int(answer.session_lifetime.total_seconds() * 1000)


def test_a_client_that_does_not_reauthenticate_is_closed_after_its_session(cluster: ClusterThread) -> None:
    port = int(cluster.bootstrap.split(":")[1])
    before = _metrics(cluster)
    s, lifetime_ms = _authenticate(port)
    with s:
        assert lifetime_ms == REAUTH_MS
        describe = {"resources": [{"resource_type": 4, "resource_name": "1",
                                   "configuration_keys": ["connections.max.reauth.ms"]}],
                    "include_synonyms": False, "include_documentation": False}  # fmt: skip
        s.sendall(kio_request(32, 4, 3, describe))  # served while the session lasts
        frame = read_frame(s)
        assert frame is not None
        [resource] = kio_answer(32, 4, frame).results
        assert [(c.name, c.value) for c in resource.configs] == [("connections.max.reauth.ms", str(REAUTH_MS))]
        time.sleep(REAUTH_MS / 1000 + 0.3)
        s.sendall(kio_request(32, 4, 4, describe))
        assert read_frame(s) is None, "a request after the session expired closes the connection, unanswered"
    reauths, expired, failed = (a - b for a, b in zip(_metrics(cluster), before, strict=True))
    assert (reauths, expired, failed) == (0, 1, 0)


def test_a_reauthentication_as_another_user_is_refused(cluster: ClusterThread) -> None:
    port = int(cluster.bootstrap.split(":")[1])
    s, _ = _authenticate(port)
    with s:
        s.sendall(kio_request(17, 1, 5, {"mechanism": "PLAIN"}))  # begins a re-authentication
        frame = read_frame(s)
        assert frame is not None and int(kio_answer(17, 1, frame).error_code) == 0
        s.sendall(kio_request(36, 2, 6, {"auth_bytes": b"\0mallory\0x"}))
        frame = read_frame(s)
        assert frame is not None
        answer = kio_answer(36, 2, frame)
        assert int(answer.error_code) == 58  # SASL_AUTHENTICATION_FAILED
        assert "during re-authentication" in (answer.error_message or "")
        assert read_frame(s) is None
