"""The Spark scan job's command line refuses bad arguments before it starts
Spark (the scans on Spark are in tests/system/test_spark_scan.py)."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (walmgr's Spark engine is optional)")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--store", "file:///s"], "give --config FILE, or --store URL and --registry DIR"),
        (["--store", "file:///s", "--known", "k"], "Parquet-only mode takes --store, --known and --out"),
        (["--store", "file:///s", "--known", "k", "--out", "o", "--registry", "r"], "no --registry or --config"),
        (["--store", "gs://b", "--known", "k", "--out", "o"], "--store: store URL 'gs://b': scheme"),
        (["--store", "s3://b/one", "--known", "k", "--out", "o", "--prefix", "two"], "disagrees with the store URL"),
        (["--store", "file:///s", "--registry", "r", "--positions", "{"], "--positions: not JSON"),
        (["--store", "file:///s", "--registry", "r", "--positions", '{"00": 1}'], "--positions: a JSON object"),
    ],
)
def test_scan_job_refuses_bad_arguments_before_starting_spark(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from spark import submit

    with pytest.raises(SystemExit) as e:
        submit.main(argv)
    assert e.value.code == 2
    assert message in capsys.readouterr().err
