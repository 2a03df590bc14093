"""``partlog bench latency`` runs end to end on a tiny load: its output's
shape, never its timings."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from partlog.broker.metrics import PRODUCE_STAGES


@pytest.mark.timeout(300)
def test_a_tiny_run_prints_every_stage_for_each_client_and_acks() -> None:
    pytest.importorskip("confluent_kafka")
    out = subprocess.run(
        [sys.executable, "-m", "partlog", "bench", "latency", "--rate", "100", "--seconds", "1", "--acks", "both",
         "--wal-puts-per-s-max", "40", "--json"],
        capture_output=True, timeout=280, check=True, text=True,
    )  # fmt: skip
    r = json.loads(out.stdout)
    assert [(c["client"], c["acks"]) for c in r["cases"]] == [
        ("librdkafka", "all"), ("librdkafka", "1"), ("partlog.client", "all"), ("partlog.client", "1"),
    ]  # fmt: skip
    for c in r["cases"]:
        assert set(c["stages"]) == set(PRODUCE_STAGES)
        assert c["end_to_end"]["records"] > 0
        assert c["broker_cpu_us_per_request"] > 0 and c["observations_per_request"] > 0
        assert c["puts_per_s_busiest_broker"] > 0
        # Every request the brokers answered went through these stages.
        for stage in ("queue", "file_open", "upload", "commit_rpc", "leader_commit", "answer"):
            assert c["stages"][stage]["count"] > 0, (c["client"], c["acks"], stage)
        # Replication is measured for acks=all commits only.
        assert (c["stages"]["replication"]["count"] > 0) == (c["acks"] == "all")
    assert set(r["verdicts"]) and set(r["overhead"]) >= {"observe_ns", "pipeline_cost_share"}
    assert r["setup"]["wal_puts_per_s_max"] == 40
