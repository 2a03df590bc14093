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
