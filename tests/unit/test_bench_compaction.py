"""partlog bench compaction at CI scale: it runs through the CLI, leaves
one record per key, and refuses options outside its bounds."""

from __future__ import annotations

import json

import pytest

from partlog.tools import cli
from partlog.tools.bench_compaction import CompactionBenchOptions, run


def test_small_run_leaves_one_record_per_key(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["bench", "compaction", "--records", "5000", "--keys", "50", "--batch-records", "37", "--json"]
    assert cli.main(argv) == 0
    r = json.loads(capsys.readouterr().out)
    assert (r["records"], r["keys"], r["records_out"]) == (5000, 50, 50)
    assert 0 < r["bytes_out"] < r["bytes_in"]
    assert r["cleaner_mib_per_s"] > 0 and r["baseline_mib_per_s"] > 0


def test_tombstones_stay_on_a_first_clean() -> None:
    r = run(CompactionBenchOptions(records=2000, keys=20, tombstone_ratio=0.5, seed=3))
    assert r["records_out"] == 20  # the latest per key, tombstone or not (their horizon is stamped)


@pytest.mark.parametrize(
    "argv",
    [
        ["--records", "0"],
        ["--keys", "10", "--records", "5"],
        ["--tombstone-ratio", "2"],
        ["--value-bytes", "-1"],
    ],
)
def test_bounds(argv: list[str]) -> None:
    # Refused before anything runs: argparse's types, or the options' own checks.
    try:
        code = cli.main(["bench", "compaction", *argv])
    except SystemExit as e:
        code = int(e.code or 0)
    assert code == 2
