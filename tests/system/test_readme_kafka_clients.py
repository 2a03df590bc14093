"""The README's "Kafka clients" and "Transactions" snippets run as written against a cluster."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.readme import section_code


@pytest.mark.parametrize(("section", "printed"), [("Kafka clients", "consumed 100"), ("Transactions", "committed 10")])
def test_the_snippet_runs_against_a_cluster(tmp_path: Path, section: str, printed: str) -> None:
    from tests.kafka_helpers import ClusterThread

    cluster = ClusterThread(str(tmp_path / "cluster"))
    try:
        proc = subprocess.run(
            [sys.executable, "-c", section_code(section), cluster.bootstrap],
            capture_output=True,
            text=True,
            timeout=180,
            cwd=tmp_path,
        )
    finally:
        cluster.close()
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == printed


def test_the_sasl_ssl_snippet_runs_against_a_sasl_ssl_listener(tmp_path: Path, certs: Path) -> None:
    from partlog.kafka.scram_credential import ScramCredential
    from partlog.kafka_front.listeners import ListenerSecurity, ListenerTls
    from partlog.kafka_front.scram import StaticCredentials
    from tests.kafka_helpers import ClusterThread

    cred = ScramCredential.from_password("SCRAM-SHA-512", "alice-secret", b"salt", 4096)
    security = ListenerSecurity(
        tls=ListenerTls(str(certs / "server.crt"), str(certs / "server.key")),
        credentials=StaticCredentials({("alice", "SCRAM-SHA-512"): cred}),
    )
    cluster = ClusterThread(str(tmp_path / "cluster"), kafka_protocol="SASL_SSL", kafka_security=security)
    try:
        proc = subprocess.run(
            [sys.executable, "-c", section_code("Kafka over TLS and SASL"), cluster.bootstrap,
             str(certs / "ca.crt"), "alice", "alice-secret"],
            capture_output=True, text=True, timeout=180, cwd=tmp_path,
        )  # fmt: skip
    finally:
        cluster.close()
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "consumed 10"
