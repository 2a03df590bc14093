"""Real Kafka clients over the listener's security protocols (issue 29):
confluent-kafka (librdkafka) over SASL_SSL with SCRAM-SHA-512 and over
SASL_PLAINTEXT with PLAIN, kafka-python and aiokafka over SASL_SSL with
SCRAM, SSL with a client certificate whose subject is mapped to the
principal; a wrong password gets Kafka's SASL error."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from partlog.kafka.scram_credential import ScramCredential
from partlog.kafka_front.listeners import ClientAuth, ListenerSecurity, ListenerTls
from partlog.kafka_front.scram import StaticCredentials
from partlog.tools.local_cluster import TOPIC
from tests.kafka_helpers import ClusterThread

confluent_kafka = pytest.importorskip("confluent_kafka")

USER, PASSWORD = "alice", "alice-secret"


def _credentials() -> StaticCredentials:
    return StaticCredentials(
        {
            (USER, m): ScramCredential.from_password(m, PASSWORD, f"salt-{m}".encode(), 4096)
            for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")
        }
    )


def _security(certs: Path, mechanisms: tuple[str, ...], client_auth: ClientAuth = ClientAuth.NONE) -> ListenerSecurity:
    return ListenerSecurity(
        tls=ListenerTls(str(certs / "server.crt"), str(certs / "server.key"), str(certs / "ca.crt"), client_auth),
        principal_rules="RULE:^CN=partlog test (.*)$/$1/U,DEFAULT",
        sasl_mechanisms=mechanisms,
        credentials=_credentials(),
    )


def _cluster(tmp: Path, protocol: str, security: ListenerSecurity) -> ClusterThread:
    return ClusterThread(str(tmp), azs=1, brokers_per_az=1, partitions=2, kafka_protocol=protocol,
                         kafka_security=security)  # fmt: skip


@pytest.fixture(scope="module")
def sasl_ssl(tmp_path_factory: pytest.TempPathFactory, certs: Path) -> Iterator[ClusterThread]:
    mechanisms = ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN")
    c = _cluster(tmp_path_factory.mktemp("sasl_ssl"), "SASL_SSL", _security(certs, mechanisms))
    try:
        yield c
    finally:
        c.close()


def _confluent(cluster: ClusterThread, extra: dict[str, Any]) -> dict[str, Any]:
    return {"bootstrap.servers": cluster.bootstrap, **extra}


def _produce_consume(conf: dict[str, Any], topic: str = TOPIC) -> list[bytes]:
    from confluent_kafka import Consumer, Producer

    p = Producer({**conf, "enable.idempotence": True, "acks": "all", "linger.ms": 5})
    sent = [f"m{i}-{uuid.uuid4().hex[:6]}".encode() for i in range(20)]
    errors: list[object] = []
    for v in sent:
        p.produce(topic, v, on_delivery=lambda err, _msg: errors.append(err) if err is not None else None)
    assert p.flush(30) == 0 and not errors, errors
    c = Consumer({**conf, "group.id": f"g-{uuid.uuid4().hex[:8]}", "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got: list[bytes] = []
    try:
        for _ in range(300):
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                got.append(m.value() or b"")
            if set(sent) <= set(got):
                c.commit(asynchronous=False)
                break
    finally:
        c.close()
    assert set(sent) <= set(got)
    return got


def _sasl_ssl_conf(certs: Path, mechanism: str, password: str = PASSWORD) -> dict[str, Any]:
    return {
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": mechanism,
        "sasl.username": USER,
        "sasl.password": password,
        "ssl.ca.location": str(certs / "ca.crt"),
    }


def test_confluent_over_sasl_ssl_with_scram_sha_512_produces_consumes_and_commits(
    sasl_ssl: ClusterThread, certs: Path
) -> None:
    _produce_consume(_confluent(sasl_ssl, _sasl_ssl_conf(certs, "SCRAM-SHA-512")))


def test_a_wrong_password_gets_kafkas_sasl_error(sasl_ssl: ClusterThread, certs: Path) -> None:
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient

    errors: list[Any] = []
    conf: dict[str, Any] = _confluent(sasl_ssl, _sasl_ssl_conf(certs, "SCRAM-SHA-256", password="wrong"))
    conf["error_cb"] = errors.append
    admin = AdminClient(conf)
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=5)
    admin.poll(1)  # error_cb runs in poll
    assert any(err.code() == KafkaError._AUTHENTICATION for err in errors), errors
    assert any("invalid credentials with SASL mechanism SCRAM-SHA-256" in err.str() for err in errors), errors


def test_kafka_python_over_sasl_ssl_with_scram(sasl_ssl: ClusterThread, certs: Path) -> None:
    import kafka

    conf: dict[str, Any] = {
        "bootstrap_servers": sasl_ssl.bootstrap,
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-256",
        "sasl_plain_username": USER,
        "sasl_plain_password": PASSWORD,
        "ssl_cafile": str(certs / "ca.crt"),
    }
    p = kafka.KafkaProducer(**conf)
    sent = [f"kp-{uuid.uuid4().hex}".encode() for _ in range(5)]
    for v in sent:
        p.send(TOPIC, v).get(timeout=30)
    p.close()
    c = kafka.KafkaConsumer(TOPIC, group_id=f"kp-{uuid.uuid4().hex[:6]}", auto_offset_reset="earliest",
                            consumer_timeout_ms=10_000, **conf)  # fmt: skip
    got = set()
    for m in c:
        got.add(m.value)
        if set(sent) <= got:
            break
    c.commit()
    c.close()
    assert set(sent) <= got


def test_aiokafka_over_sasl_ssl_with_scram(sasl_ssl: ClusterThread, certs: Path) -> None:
    aiokafka = pytest.importorskip("aiokafka")
    import ssl

    async def run() -> set[bytes]:
        conf: dict[str, Any] = {
            "bootstrap_servers": sasl_ssl.bootstrap,
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_plain_username": USER,
            "sasl_plain_password": PASSWORD,
            "ssl_context": ssl.create_default_context(cafile=str(certs / "ca.crt")),
        }
        p = aiokafka.AIOKafkaProducer(**conf)
        await p.start()
        try:
            for v in sent:
                await p.send_and_wait(TOPIC, v)
        finally:
            await p.stop()
        c = aiokafka.AIOKafkaConsumer(TOPIC, group_id=f"ak-{uuid.uuid4().hex[:6]}", auto_offset_reset="earliest",
                                      **conf)  # fmt: skip
        await c.start()
        got: set[bytes] = set()
        try:
            async with asyncio.timeout(30):
                async for m in c:
                    got.add(m.value)
                    if set(sent) <= got:
                        break
            await c.commit()
        finally:
            await c.stop()
        return got

    sent = [f"ak-{uuid.uuid4().hex}".encode() for _ in range(5)]
    assert set(sent) <= asyncio.run(run())


def test_confluent_over_sasl_plaintext_with_plain(tmp_path: Path, certs: Path) -> None:
    c = _cluster(tmp_path, "SASL_PLAINTEXT", _security(certs, ("PLAIN",)))
    try:
        conf = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN", "sasl.username": USER,
                "sasl.password": PASSWORD}  # fmt: skip
        _produce_consume(_confluent(c, conf))
        node = c.cluster.nodes[1]
        assert node.kafka is not None
        assert node.kafka.metrics.auth_failed.labels("SASL_PLAINTEXT")._value.get() == 0
        # A client before KIP-152: SaslHandshake v0, then the token raw.
        assert _raw_plain_login(c, PASSWORD) is True
        assert _raw_plain_login(c, "wrong") is False
        assert node.kafka.metrics.auth_failed.labels("SASL_PLAINTEXT")._value.get() == 1
    finally:
        c.close()


def _raw_plain_login(c: ClusterThread, password: str) -> bool:
    """SaslHandshake v0 with PLAIN, the token raw (size-prefixed), then a
    Metadata request: True when it is answered, False when the broker
    closed the connection (Kafka's answer to a bad raw token)."""
    import socket
    import struct

    from tests.kafka_helpers import kio_answer, kio_request, read_frame

    host, port = c.bootstrap.split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(kio_request(17, 0, 1, {"mechanism": "PLAIN"}))
        frame = read_frame(s)
        assert frame is not None and kio_answer(17, 0, frame).error_code == 0
        token = f"\0{USER}\0{password}".encode()
        s.sendall(struct.pack(">i", len(token)) + token)
        head = s.recv(4)
        if not head:
            return False
        assert head == b"\0\0\0\0"  # PLAIN's empty answer, size-prefixed
        s.sendall(kio_request(3, 1, 2, {"topics": None}))
        frame = read_frame(s)
        assert frame is not None and kio_answer(3, 1, frame).brokers
        return True


def test_ssl_with_a_client_certificate_maps_the_subject_to_the_principal(tmp_path: Path, certs: Path) -> None:
    c = _cluster(tmp_path, "SSL", _security(certs, ("SCRAM-SHA-512",), ClientAuth.REQUIRED))
    try:
        conf = {
            "security.protocol": "SSL",
            "ssl.ca.location": str(certs / "ca.crt"),
            "ssl.certificate.location": str(certs / "client.crt"),
            "ssl.key.location": str(certs / "client.key"),
        }
        seen: list[str] = []
        node = c.cluster.nodes[1]
        assert node.kafka is not None
        apis = node.kafka.apis
        original = apis.handlers[3]

        async def metadata(req: Any, body: Any, session: Any) -> Any:
            seen.append(session.principal)
            return await original(req, body, session)

        apis.handlers[3] = metadata
        _produce_consume(_confluent(c, conf))
        # "CN=partlog test client" by RULE:^CN=partlog test (.*)$/$1/U
        assert seen and set(seen) == {"User:CLIENT"}
    finally:
        c.close()


def test_an_authenticated_principal_is_what_the_authorizer_judges(tmp_path: Path, certs: Path) -> None:
    """SASL and ACLs together: over SASL_PLAINTEXT, User:alice (a super user)
    grants WRITE on the topic to User:bob through the Kafka API; bob can
    then produce, and an unauthenticated principal could never have been
    him.  Without the grant bob's produce is refused."""
    from confluent_kafka import KafkaException, Producer
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AclBinding,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
        ResourceType,
    )

    from partlog.acl import AuthorizerConfig
    from partlog.kafka_front.apis import FrontConfig

    creds = StaticCredentials(
        {
            (user, "SCRAM-SHA-256"): ScramCredential.from_password("SCRAM-SHA-256", pw, b"salt-" + user.encode(), 4096)
            for user, pw in ((USER, PASSWORD), ("bob", "bob-secret"))
        }
    )
    security = ListenerSecurity(sasl_mechanisms=("PLAIN",), credentials=creds)
    front = FrontConfig(authorizer=AuthorizerConfig(super_users=frozenset({f"User:{USER}"})))
    c = ClusterThread(str(tmp_path), azs=1, brokers_per_az=1, partitions=1, kafka_protocol="SASL_PLAINTEXT",
                      kafka_security=security, front=front)  # fmt: skip
    try:

        def conf(user: str, pw: str) -> dict[str, Any]:
            return {"bootstrap.servers": c.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                    "sasl.mechanisms": "PLAIN", "sasl.username": user, "sasl.password": pw}  # fmt: skip

        def bob_produces() -> str | None:
            p = Producer({**conf("bob", "bob-secret"), "acks": "all", "message.timeout.ms": 10_000})
            errors: list[str] = []
            p.produce(TOPIC, b"from-bob", on_delivery=lambda err, _m: errors.append(err.name()) if err else None)
            p.flush(20)
            return errors[0] if errors else None

        assert bob_produces() == "TOPIC_AUTHORIZATION_FAILED"
        admin = AdminClient(conf(USER, PASSWORD))
        grant = AclBinding(ResourceType.TOPIC, TOPIC, ResourcePatternType.LITERAL, "User:bob", "*",
                           AclOperation.WRITE, AclPermissionType.ALLOW)  # fmt: skip
        try:
            admin.create_acls([grant])[grant].result(20)
        except KafkaException as e:  # pragma: no cover - shown on failure
            raise AssertionError(e) from e
        deadline = 30
        while bob_produces() is not None and deadline > 0:  # brokers poll the ACLs
            deadline -= 1
        assert bob_produces() is None
    finally:
        c.close()


def test_kcat_over_sasl_ssl_produces_and_consumes_in_a_group(sasl_ssl: ClusterThread, certs: Path) -> None:
    """kcat (Debian's, librdkafka 2.0.2) over SASL_SSL with PLAIN.  Its SCRAM
    client repeats the client nonce in client-final (r=cnonce+cnonce+snonce),
    which partlog refuses as Kafka's ScramSaslServer does since it compares
    the nonce whole (RFC 5802); SCRAM is covered by confluent-kafka's newer
    librdkafka above."""
    import shutil
    import subprocess

    kcat = shutil.which("kcat")
    if kcat is None:
        pytest.skip("kcat is not installed (scripts/test installs it)")
    sec = [f"{k}={v}" for k, v in _sasl_ssl_conf(certs, "PLAIN").items()]
    flags = ["-b", sasl_ssl.bootstrap, *(x for s in sec for x in ("-X", s))]
    topic = f"kcat-{uuid.uuid4().hex[:6]}"
    lines = [f"record {i}" for i in range(50)]
    subprocess.run([kcat, "-P", *flags, "-t", topic], input="".join(f"{v}\n" for v in lines).encode(), check=True,
                   timeout=60)  # fmt: skip
    # A balanced consumer group (-G): JoinGroup, SyncGroup, OffsetCommit over SASL_SSL.
    out = subprocess.run([kcat, "-G", f"kc-{topic}", *flags, "-X", "auto.offset.reset=earliest", "-c", str(len(lines)),
                          "-q", "-f", "%s\n", topic], check=True, timeout=90, capture_output=True)  # fmt: skip
    assert sorted(out.stdout.decode().split("\n")[:-1]) == sorted(lines)
