"""``partlog controller``, ``partlog broker --listeners`` (SASL_SSL and
PLAINTEXT) and ``partlog users`` as processes: a user added with the CLI
produces and consumes over SASL_SSL with SCRAM-SHA-512 (confluent-kafka),
and each listener's clients are told that listener's port."""

from __future__ import annotations

import socket
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.cluster_helpers import free_ports, stop_processes, wait_listening
from tests.kafka_helpers import kio_answer, kio_request, read_frame

confluent_kafka = pytest.importorskip("confluent_kafka")


def _partlog(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "partlog", *args], input=stdin, capture_output=True, text=True,
                          timeout=60)  # fmt: skip


@pytest.mark.timeout(180)
def test_users_added_with_the_cli_use_a_sasl_ssl_listener(tmp_path: Path, certs: Path) -> None:
    ctl, rpc, sasl, plain = free_ports(4)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with open(tmp_path / "ctl.log", "wb") as log:
            procs.append(subprocess.Popen([sys.executable, "-m", "partlog", "controller", "--data-dir",
                                           str(tmp_path / "ctl"), "--port", str(ctl)], stdout=log,
                                          stderr=subprocess.STDOUT))  # fmt: skip
        wait_listening(ctl, procs[0])
        broker = [
            "broker", "--controller", f"127.0.0.1:{ctl}", "--id", "1", "--az", "az1", "--port", str(rpc),
            "--data-dir", str(tmp_path / "data"),
            "--listeners", f"SASL_SSL://127.0.0.1:{sasl},PLAINTEXT://127.0.0.1:{plain}",
            "--kafka-ssl-cert", str(certs / "server.crt"), "--kafka-ssl-key", str(certs / "server.key"),
        ]  # fmt: skip
        with open(tmp_path / "broker.log", "wb") as log:
            procs.append(subprocess.Popen([sys.executable, "-m", "partlog", *broker], stdout=log,
                                          stderr=subprocess.STDOUT))  # fmt: skip
        wait_listening(sasl, procs[1])
        wait_listening(plain, procs[1])
        added = _partlog("users", "add", "alice", "--controller", f"127.0.0.1:{ctl}", stdin="s3cret-pw\n")
        assert added.returncode == 0, added.stderr
        assert added.stdout.strip() == "user alice added: SCRAM-SHA-256, SCRAM-SHA-512"
        listed = _partlog("users", "list", "--controller", f"127.0.0.1:{ctl}")
        assert listed.stdout.strip() == "alice: SCRAM-SHA-256 iterations=4096, SCRAM-SHA-512 iterations=4096"
        missing = _partlog("users", "delete", "bob", "--controller", f"127.0.0.1:{ctl}")
        assert missing.returncode == 1 and len(missing.stderr.strip().splitlines()) == 1
        assert "RESOURCE_NOT_FOUND" in missing.stderr
        made = _partlog("topics", "create", "secure", "--controller", f"127.0.0.1:{ctl}", "--partitions", "1",
                        "--replication-factor", "1")  # fmt: skip
        assert made.returncode == 0, made.stderr

        from confluent_kafka import Consumer, Producer
        from confluent_kafka.admin import AdminClient

        conf: dict[str, Any] = {
            "bootstrap.servers": f"127.0.0.1:{sasl}",
            "security.protocol": "SASL_SSL",
            "sasl.mechanisms": "SCRAM-SHA-512",
            "sasl.username": "alice",
            "sasl.password": "s3cret-pw",
            "ssl.ca.location": str(certs / "ca.crt"),
        }
        p = Producer(conf)
        sent = [uuid.uuid4().hex.encode() for _ in range(10)]
        for v in sent:
            p.produce("secure", v)
        assert p.flush(30) == 0
        c = Consumer({**conf, "group.id": "g", "auto.offset.reset": "earliest"})
        c.subscribe(["secure"])
        got: list[bytes] = []
        for _ in range(300):
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                got.append(m.value() or b"")
            if len(got) >= len(sent):
                break
        c.close()
        assert got == sent
        # Each listener's clients learn that listener's port.
        for port, extra in ((sasl, conf), (plain, {"bootstrap.servers": f"127.0.0.1:{plain}"})):
            md = AdminClient({**extra, "bootstrap.servers": f"127.0.0.1:{port}"}).list_topics(timeout=10)
            assert [b.port for b in md.brokers.values()] == [port]
    finally:
        stop_processes(procs)


@pytest.mark.timeout(120)
def test_named_listeners_advertise_their_own_addresses(tmp_path: Path) -> None:
    """listener.security.protocol.map names two PLAINTEXT listeners;
    advertised.listeners tells EXTERNAL's clients another host: Metadata
    and FindCoordinator answer each client with its listener's address."""
    ctl, rpc, internal, external = free_ports(4)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with open(tmp_path / "ctl.log", "wb") as log:
            procs.append(subprocess.Popen([sys.executable, "-m", "partlog", "controller", "--data-dir",
                                           str(tmp_path / "ctl"), "--port", str(ctl)], stdout=log,
                                          stderr=subprocess.STDOUT))  # fmt: skip
        wait_listening(ctl, procs[0])
        broker = [
            "broker", "--controller", f"127.0.0.1:{ctl}", "--id", "1", "--az", "az1", "--port", str(rpc),
            "--data-dir", str(tmp_path / "data"),
            "--listeners", f"INTERNAL://127.0.0.1:{internal},EXTERNAL://127.0.0.1:{external}",
            "--listener-security-protocol-map", "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
            "--advertised-listeners", f"EXTERNAL://localhost:{external}",
        ]  # fmt: skip
        with open(tmp_path / "broker.log", "wb") as log:
            procs.append(subprocess.Popen([sys.executable, "-m", "partlog", *broker], stdout=log,
                                          stderr=subprocess.STDOUT))  # fmt: skip
        wait_listening(internal, procs[1])
        wait_listening(external, procs[1])
        from confluent_kafka.admin import AdminClient

        for port, host in ((internal, "127.0.0.1"), (external, "localhost")):
            md = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"}).list_topics(timeout=10)
            assert [(str(b.host), b.port) for b in md.brokers.values()] == [(host, port)]
            with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
                s.sendall(kio_request(10, 3, 1, {"key": "g", "key_type": 0}))
                frame = read_frame(s)
            assert frame is not None
            found = kio_answer(10, 3, frame)
            assert (found.error_code, found.host, found.port) == (0, host, port)
    finally:
        stop_processes(procs)


def test_listener_flags_that_do_not_fit_are_one_line(tmp_path: Path) -> None:
    base = ["broker", "--controller", "127.0.0.1:1", "--id", "1", "--az", "az1", "--port", "1",
            "--data-dir", str(tmp_path)]  # fmt: skip
    for flags, what in (
        (["--listeners", "INTERNAL://127.0.0.1:1"], "unknown listener name"),
        (["--listeners", "PLAINTEXT://127.0.0.1:1", "--advertised-listeners", "SSL://h:2"], "no listener named SSL"),
        (["--advertised-listeners", "PLAINTEXT://h:2"], "need --listeners"),
        (["--listeners", "A://127.0.0.1:1", "--listener-security-protocol-map", "A:NOPE"], "unknown protocol"),
    ):
        p = _partlog(*base, *flags)
        assert p.returncode == 2, p.stderr
        assert len(p.stderr.strip().splitlines()) == 1 and what in p.stderr, p.stderr
