"""``partlog cluster --authorizer`` (a subprocess): the brokers' RPC then
needs CLUSTER_ACTION (issue 29), and the launcher allows its own brokers,
walmgr and load clients (all User:ANONYMOUS on its plain RPC) by itself:
the run replicates, verifies every record and logs no refusal."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent


@pytest.mark.timeout(180)
def test_partlog_cluster_with_an_authorizer_runs_its_own_brokers(tmp_path: Path) -> None:
    proc = subprocess.run(
        [str(BIN / "partlog"), "cluster", "--authorizer", "--super-users", "User:admin", "--duration", "2",
         "--azs", "2", "--brokers-per-az", "1", "--partitions", "2", "--replication-factor", "2",
         "--producers-per-az", "1", "--rate", "50", "--no-sync", "--data-dir", str(tmp_path), "--json"],
        capture_output=True, text=True, timeout=150,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert report["records_acked"] > 0 and report["records_failed"] == 0, report
    assert report["records_verified"] == report["records_acked"] and report["records_lost"] == 0, report
    assert "CLUSTER_ACTION" not in proc.stderr, proc.stderr[-2000:]
