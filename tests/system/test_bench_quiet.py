"""``partlog bench quiet-topics`` end to end at a small size: its output's
shape and that every transaction ran, never its timings."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


@pytest.mark.timeout(300)
def test_a_small_run_measures_three_phases() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "partlog", "bench", "quiet-topics", "--topics", "5", "--partitions-per-topic", "2",
         "--idle-seconds", "1", "--txns", "2", "--records-per-txn", "10", "--settle-seconds", "1", "--json"],
        capture_output=True, timeout=280, text=True,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-4000:]
    r = json.loads(out.stdout)
    assert r["quiet_partitions"] == 10
    for phase in r["phases"].values():
        assert len(phase["txn_s"]) == 2 and phase["idle_cores"] >= 0
    assert {r["txn_verdict"], r["idle_verdict"]} <= {"pass", "fail"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--topics", "10000", "--partitions-per-topic", "3"], "at most 20,000"),
        (["--txns", "1001"], "--txns: must be in [1, 1000]"),
        (["--idle-seconds", "601"], "--idle-seconds: must be in [1, 600]"),
        (["--records-per-txn", "0"], "--records-per-txn: must be > 0"),
    ],
)
def test_the_run_is_bounded(args: list[str], message: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "partlog", "bench", "quiet-topics", *args], capture_output=True, timeout=60, text=True
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and message in done.stderr
