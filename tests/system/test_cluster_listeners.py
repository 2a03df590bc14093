"""``partlog cluster --serve --kafka-protocols``: one Kafka listener per
protocol on every broker, each one's bootstrap servers printed, as
scripts/conformance's ssl and sasl scenarios use them
(partlog.tools.conformance_security).  Real clients: confluent-kafka, a
SCRAM user made through the PLAINTEXT listener with AlterUserScramCredentials,
a producer over SASL_PLAINTEXT and a consumer over SSL with a client
certificate (ssl.client.auth=required); an unknown user is refused."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from partlog.tools.conformance_security import SASL_MECHANISM, make_suite_certs, make_user

confluent_kafka = pytest.importorskip("confluent_kafka")

START_S_MAX = 60.0
WAIT_S = 30.0
TOPIC = "listeners"


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[dict[str, str], dict[str, str]]]:
    """The cluster's bootstrap lines (``bootstrap`` and each protocol's) and
    the certificates' SSL_* variables."""
    certs = make_suite_certs(tmp_path / "certs", "pw-0097")
    d = tmp_path / "certs"
    cmd = [sys.executable, "-m", "partlog", "cluster", "--serve", "--azs=1", "--brokers-per-az=1",
           "--replication-factor=1", "--no-walmgr", f"--data-dir={tmp_path / 'data'}",
           "--kafka-protocols=PLAINTEXT,SASL_PLAINTEXT,SSL", f"--kafka-sasl-mechanisms={SASL_MECHANISM}",
           f"--kafka-ssl-cert={d / 'broker.pem'}", f"--kafka-ssl-key={d / 'broker-plain.key'}",
           f"--kafka-ssl-ca={d / 'ca.pem'}", "--kafka-ssl-client-auth=required"]  # fmt: skip
    log = (tmp_path / "cluster.log").open("w")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True, start_new_session=True)
    try:
        lines: dict[str, str] = {}
        deadline = time.monotonic() + START_S_MAX
        assert proc.stdout is not None
        while "rpc" not in lines and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            head, _, value = line.partition(": ")
            lines[head] = value.strip()
        assert "rpc" in lines, (tmp_path / "cluster.log").read_text()[-3000:]
        yield lines, certs
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)
        log.close()


def test_each_protocol_gets_a_listener_and_its_printed_bootstrap(served: tuple[dict[str, str], dict[str, str]]) -> None:
    lines, certs = served
    assert lines["bootstrap"] == lines["bootstrap PLAINTEXT"]  # the first protocol's
    ports = {p: lines[f"bootstrap {p}"] for p in ("PLAINTEXT", "SASL_PLAINTEXT", "SSL")}
    assert len(set(ports.values())) == 3, ports

    make_user(ports["PLAINTEXT"], "alice", "alice-secret")
    sasl = {"bootstrap.servers": ports["SASL_PLAINTEXT"], "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": SASL_MECHANISM, "sasl.username": "alice", "sasl.password": "alice-secret"}  # fmt: skip
    p = confluent_kafka.Producer({**sasl, "acks": "all", "message.timeout.ms": int(WAIT_S * 1000)})
    acked: list[object] = []
    p.produce(TOPIC, b"over sasl", on_delivery=lambda err, _m: acked.append(err))
    assert p.flush(WAIT_S) == 0 and acked == [None], acked

    ssl = {"bootstrap.servers": ports["SSL"], "security.protocol": "SSL", "ssl.ca.location": certs["SSL_ca_pem"],
           "ssl.certificate.location": certs["SSL_pub_pem"], "ssl.key.location": certs["SSL_priv_pem"],
           "ssl.key.password": certs["SSL_password"]}  # fmt: skip
    c = confluent_kafka.Consumer({**ssl, "group.id": "g", "auto.offset.reset": "earliest"})
    try:
        c.subscribe([TOPIC])
        deadline = time.monotonic() + WAIT_S
        got = None
        while got is None and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got = m.value()
        assert got == b"over sasl"
    finally:
        c.close()

    # A user nobody made is refused on the SASL listener.
    errors: list[object] = []
    bad = confluent_kafka.Producer({**sasl, "sasl.username": "mallory", "error_cb": errors.append})
    deadline = time.monotonic() + WAIT_S
    while not errors and time.monotonic() < deadline:
        bad.poll(0.2)
    assert any(e.code() == confluent_kafka.KafkaError._AUTHENTICATION for e in errors), errors  # type: ignore[attr-defined]
