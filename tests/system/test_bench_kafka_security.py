"""``partlog bench kafka --security sasl_ssl`` runs end to end (numbers not judged: no timing asserts)."""

from __future__ import annotations

import shutil

import pytest

from partlog.tools import bench_kafka_security


@pytest.mark.timeout(240)
@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl CLI needed for the certificates")
def test_the_sasl_ssl_bench_produces_over_both_listeners() -> None:
    pytest.importorskip("confluent_kafka")
    r = bench_kafka_security.run(seconds=1.0, value_bytes=100, partitions=1, linger_ms=5, commit_interval_ms=50)
    assert r["plaintext"]["records"] > 0 and r["sasl_ssl"]["records"] > 0
    assert r["plaintext"]["errors"] == 0 and r["sasl_ssl"]["errors"] == 0
    assert set(r["verdicts"]) == {"SASL_SSL >= 0.8 x PLAINTEXT MiB/s"}
