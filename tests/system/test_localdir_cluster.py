"""``partlog cluster`` (a subprocess) on a data directory reached through a symlink
(issue 13, item 9): every upload used to be refused, and the run hung."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent


@pytest.mark.timeout(180)
def test_partlog_cluster_runs_on_a_data_dir_reached_through_a_symlink(tmp_path: Path) -> None:
    """The main job on a symlinked data directory: every upload used to be
    refused, and the run hung until its producers gave up."""
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    proc = subprocess.run(
        [str(BIN / "partlog"), "cluster", "--duration", "1", "--azs", "1", "--brokers-per-az", "1",
         "--replication-factor", "1", "--producers-per-az", "1", "--rate", "50", "--data-dir", str(link)],
        capture_output=True, text=True, timeout=150,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "lost 0" in proc.stdout and (real / "objects").is_dir()
