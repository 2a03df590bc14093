"""The SASL handshake on the wire, as Kafka's SaslServerAuthenticator
answers it (hand-built frames against an in-process broker with a
SASL_PLAINTEXT and a PLAINTEXT listener), and Metadata advertising each
listener's own ports.  Real clients: tests/system/test_kafka_security.py."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from partlog.kafka.scram_credential import ScramCredential
from partlog.kafka_front.listeners import ListenerSecurity
from partlog.kafka_front.scram import StaticCredentials
from tests.kafka_helpers import API_VERSIONS_V0, ClusterThread, kio_answer, kio_request, read_frame

_CREDS = StaticCredentials({("bob", "SCRAM-SHA-512"): ScramCredential.from_password("SCRAM-SHA-512", "pw", b"s", 4096)})
METADATA = kio_request(3, 9, 7, {"topics": None, "allow_auto_topic_creation": False,
                                 "include_cluster_authorized_operations": False,
                                 "include_topic_authorized_operations": False})  # fmt: skip


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterThread]:
    security = ListenerSecurity(sasl_mechanisms=("PLAIN", "SCRAM-SHA-512"), credentials=_CREDS, auth_deadline_ms=1500)
    c = ClusterThread(str(tmp_path_factory.mktemp("sasl")), azs=1, brokers_per_az=2, partitions=2,
                      kafka_protocol="SASL_PLAINTEXT,PLAINTEXT", kafka_security=security)  # fmt: skip
    try:
        yield c
    finally:
        c.close()


def _ports(c: ClusterThread, broker_id: int) -> dict[str, int]:
    return {s.name: s.port for s in c.cluster.kafka_listeners[broker_id]}


def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=10)


def _closed(s: socket.socket) -> bool:
    return read_frame(s) is None


def _handshake(s: socket.socket, mechanism: str) -> int:
    s.sendall(kio_request(17, 1, 2, {"mechanism": mechanism}))
    frame = read_frame(s)
    assert frame is not None
    return int(kio_answer(17, 1, frame).error_code)


def _authenticate(s: socket.socket, token: bytes) -> tuple[int, str | None, bytes]:
    s.sendall(kio_request(36, 2, 3, {"auth_bytes": token}))
    frame = read_frame(s)
    assert frame is not None
    a = kio_answer(36, 2, frame)
    return int(a.error_code), a.error_message, bytes(a.auth_bytes)


def test_requests_before_the_handshake_close_the_connection_unanswered(cluster: ClusterThread) -> None:
    with _connect(_ports(cluster, 1)["SASL_PLAINTEXT"]) as s:
        s.sendall(API_VERSIONS_V0)  # allowed
        assert read_frame(s) is not None
        s.sendall(METADATA)
        assert _closed(s)
    with _connect(_ports(cluster, 1)["SASL_PLAINTEXT"]) as s:
        s.sendall(kio_request(36, 2, 3, {"auth_bytes": b"\0bob\0pw"}))  # SaslAuthenticate before the handshake
        assert _closed(s)


def test_an_unsupported_mechanism_is_answered_then_closed(cluster: ClusterThread) -> None:
    with _connect(_ports(cluster, 1)["SASL_PLAINTEXT"]) as s:
        s.sendall(kio_request(17, 1, 2, {"mechanism": "GSSAPI"}))
        frame = read_frame(s)
        assert frame is not None
        a = kio_answer(17, 1, frame)
        assert a.error_code == 33 and list(a.mechanisms) == ["PLAIN", "SCRAM-SHA-512"]
        assert _closed(s)


def test_a_wrong_password_is_sasl_authentication_failed_then_closed(cluster: ClusterThread) -> None:
    with _connect(_ports(cluster, 1)["SASL_PLAINTEXT"]) as s:
        assert _handshake(s, "PLAIN") == 0
        code, message, _ = _authenticate(s, b"\0bob\0wrong")
        assert code == 58
        assert (
            message
            == "Authentication failed during authentication due to invalid credentials with SASL mechanism PLAIN"
        )
        assert _closed(s)


def test_another_request_during_authentication_is_illegal_sasl_state_then_closed(cluster: ClusterThread) -> None:
    with _connect(_ports(cluster, 1)["SASL_PLAINTEXT"]) as s:
        assert _handshake(s, "SCRAM-SHA-512") == 0
        s.sendall(METADATA)
        frame = read_frame(s)
        assert frame is not None
        assert kio_answer(3, 9, frame).topics == ()  # an error answer: no topics
        assert _closed(s)


def test_after_plain_every_request_is_served_and_a_second_handshake_is_illegal(cluster: ClusterThread) -> None:
    with _connect(_ports(cluster, 1)["SASL_PLAINTEXT"]) as s:
        assert _handshake(s, "PLAIN") == 0
        assert _authenticate(s, b"\0bob\0pw")[0] == 0
        s.sendall(METADATA)
        frame = read_frame(s)
        assert frame is not None
        brokers = {b.node_id: b.port for b in kio_answer(3, 9, frame).brokers}
        # Each broker's port of the listener this client came in on.
        assert brokers == {b: _ports(cluster, b)["SASL_PLAINTEXT"] for b in (1, 2)}
        assert _handshake(s, "PLAIN") == 34  # ILLEGAL_SASL_STATE; the connection stays
        s.sendall(API_VERSIONS_V0)
        assert read_frame(s) is not None


def test_the_plaintext_listener_advertises_its_own_ports_and_refuses_sasl(cluster: ClusterThread) -> None:
    with _connect(_ports(cluster, 2)["PLAINTEXT"]) as s:
        s.sendall(METADATA)
        frame = read_frame(s)
        assert frame is not None
        brokers = {b.node_id: b.port for b in kio_answer(3, 9, frame).brokers}
        assert brokers == {b: _ports(cluster, b)["PLAINTEXT"] for b in (1, 2)}
        assert _handshake(s, "PLAIN") == 34


def test_a_client_that_never_finishes_the_handshake_is_closed_at_the_deadline(cluster: ClusterThread) -> None:
    node = cluster.cluster.nodes[1]
    assert node.kafka is not None
    before = node.kafka.metrics.auth_deadline_closed._value.get()
    with _connect(_ports(cluster, 1)["SASL_PLAINTEXT"]) as s:
        assert _handshake(s, "SCRAM-SHA-512") == 0
        assert _closed(s)  # nothing more sent: closed at auth_deadline_ms
    assert node.kafka.metrics.auth_deadline_closed._value.get() == before + 1


def test_an_oversized_frame_before_authentication_closes_the_connection(cluster: ClusterThread) -> None:
    with _connect(_ports(cluster, 1)["SASL_PLAINTEXT"]) as s:
        assert _handshake(s, "PLAIN") == 0
        s.sendall(kio_request(36, 2, 3, {"auth_bytes": b"\0bob\0" + b"x" * 100_000}))
        assert _closed(s)


def test_scram_sha_512_by_hand(cluster: ClusterThread, tmp_path: Path) -> None:
    import base64
    import hashlib
    import hmac

    with _connect(_ports(cluster, 1)["SASL_PLAINTEXT"]) as s:
        assert _handshake(s, "SCRAM-SHA-512") == 0
        code, _, first = _authenticate(s, b"n,,n=bob,r=abc")
        assert code == 0
        attrs = dict(a.split("=", 1) for a in first.decode().split(","))
        assert attrs["r"].startswith("abc") and attrs["i"] == "4096"
        salted = hashlib.pbkdf2_hmac("sha512", b"pw", base64.b64decode(attrs["s"]), 4096)
        client_key = hmac.digest(salted, b"Client Key", "sha512")
        final = f"c=biws,r={attrs['r']}"
        auth = f"n=bob,r=abc,{first.decode()},{final}".encode()
        sig = hmac.digest(hashlib.sha512(client_key).digest(), auth, "sha512")
        proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, sig, strict=True))).decode()
        code, _, last = _authenticate(s, f"{final},p={proof}".encode())
        assert code == 0
        server_key = hmac.digest(salted, b"Server Key", "sha512")
        assert last == b"v=" + base64.b64encode(hmac.digest(server_key, auth, "sha512"))
        s.sendall(METADATA)
        assert read_frame(s) is not None


@settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mechanism=st.sampled_from(["PLAIN", "SCRAM-SHA-512"]), tokens=st.lists(st.binary(max_size=600), min_size=1,
                                                                              max_size=3))  # fmt: skip
def test_hostile_sasl_tokens_cost_their_connection_only(cluster: ClusterThread, mechanism: str,
                                                        tokens: list[bytes]) -> None:  # fmt: skip
    port = _ports(cluster, 1)["SASL_PLAINTEXT"]
    with _connect(port) as s:
        assert _handshake(s, mechanism) == 0
        for t in tokens:
            s.sendall(kio_request(36, 2, 3, {"auth_bytes": t}))
            frame = read_frame(s)
            if frame is None:
                break
            if kio_answer(36, 2, frame).error_code == 58:
                assert _closed(s)
                break
    # Another client is served as before.
    with _connect(port) as s:
        s.sendall(API_VERSIONS_V0)
        assert read_frame(s) is not None
