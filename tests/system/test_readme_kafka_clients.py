"""The README's "Kafka clients" and "Transactions" snippets run as written against a cluster."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.readme import section_code


def test_the_kafka_clients_snippet_runs_against_a_cluster(tmp_path: Path) -> None:
    from tests.kafka_helpers import ClusterThread

    cluster = ClusterThread(str(tmp_path / "cluster"))
    try:
        proc = subprocess.run(
            [sys.executable, "-c", section_code("Kafka clients"), cluster.bootstrap],
            capture_output=True,
            text=True,
            timeout=180,
            cwd=tmp_path,
        )
    finally:
        cluster.close()
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "consumed 100"


def test_the_transactions_snippet_runs_against_a_cluster(tmp_path: Path) -> None:
    from tests.kafka_helpers import ClusterThread

    cluster = ClusterThread(str(tmp_path / "cluster"))
    try:
        proc = subprocess.run(
            [sys.executable, "-c", section_code("Transactions"), cluster.bootstrap],
            capture_output=True,
            text=True,
            timeout=180,
            cwd=tmp_path,
        )
    finally:
        cluster.close()
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "committed 10"
