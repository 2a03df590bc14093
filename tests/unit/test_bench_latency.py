"""``partlog bench latency``'s quantiles from histogram buckets, the stage
table from two scrapes, and the stage collector, without a cluster."""

from __future__ import annotations

import io
import math

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from partlog.broker.metrics import PRODUCE_STAGES, STAGE_BUCKETS, BrokerMetrics
from partlog.tools.bench_latency import overhead, print_report, quantile_from_buckets, stage_table

INF = math.inf


def test_a_quantile_interpolates_within_its_bucket_as_prometheus_does() -> None:
    buckets = [(0.001, 0.0), (0.002, 50.0), (0.004, 100.0), (INF, 100.0)]
    assert quantile_from_buckets(buckets, 0.5) == pytest.approx(0.002)
    assert quantile_from_buckets(buckets, 0.25) == pytest.approx(0.0015)
    assert quantile_from_buckets(buckets, 0.75) == pytest.approx(0.003)
    # The first bucket interpolates from 0.
    assert quantile_from_buckets([(0.01, 10.0), (INF, 10.0)], 0.5) == pytest.approx(0.005)


def test_a_rank_past_every_bound_gives_the_highest_finite_bound_and_empty_gives_none() -> None:
    assert quantile_from_buckets([(0.01, 1.0), (0.1, 1.0), (INF, 100.0)], 0.99) == 0.1
    assert quantile_from_buckets([(0.01, 0.0), (INF, 0.0)], 0.5) is None
    assert quantile_from_buckets([], 0.5) is None


def _scrape(m: BrokerMetrics) -> dict[str, dict[float, float]]:
    out: dict[str, dict[float, float]] = {}
    for family in text_string_to_metric_families(generate_latest(m.registry).decode()):
        for s in family.samples:
            if s.name == "partlog_produce_stage_seconds_bucket":
                out.setdefault(s.labels["stage"], {})[float(s.labels["le"])] = s.value
    return out


def test_the_table_is_the_difference_of_two_scrapes_per_stage() -> None:
    m = BrokerMetrics(1, lambda: 0.0, 1, lambda: 0.0, 1, lambda: 0.0)
    m.stage("answer", 5.0)  # before the run: not counted
    before = _scrape(m)
    for _ in range(10):
        m.stage("answer", 0.0025)
    m.upload_finished(0.0015, 10, ok=True)
    m.upload_finished(9.0, 10, ok=False)  # failures are not a stage's
    table = stage_table(before, _scrape(m))
    assert set(table) == set(PRODUCE_STAGES)
    assert table["answer"]["count"] == 10
    assert 2.0 <= table["answer"]["p50_ms"] <= 3.0 and table["answer"]["p99_ms"] <= 3.0
    assert table["upload"]["count"] == 1
    assert table["replication"] == {"count": 0, "p50_ms": None, "p99_ms": None}


def test_the_collector_renders_a_cumulative_histogram_with_every_bound() -> None:
    m = BrokerMetrics(1, lambda: 0.0, 1, lambda: 0.0, 1, lambda: 0.0)
    m.stage("queue", STAGE_BUCKETS[0])  # on a bound: that bucket (le)
    m.stage("queue", 60.0)
    row = _scrape(m)["queue"]
    assert sorted(row) == [*STAGE_BUCKETS, INF]
    assert row[STAGE_BUCKETS[0]] == 1 and row[STAGE_BUCKETS[-1]] == 1 and row[INF] == 2


def test_the_report_has_a_row_per_stage_end_to_end_the_cost_and_verdicts() -> None:
    cost = overhead(requests=50, observes=100)
    assert set(cost) == {"observe_ns", "pipeline_requests_per_s_without", "pipeline_requests_per_s_with",
                         "pipeline_cost_share"}  # fmt: skip
    stages = {s: {"count": 3, "p50_ms": 1.0, "p99_ms": 2.0} for s in PRODUCE_STAGES}
    case = {"client": "librdkafka", "acks": "all", "idempotent": True, "stages": stages,
            "end_to_end": {"records": 3, "p50_ms": 30.0, "p99_ms": 80.0},
            "broker_cpu_us_per_request": 900.0, "observations_per_request": 8.0,
            "puts_per_s_busiest_broker": 19.5}  # fmt: skip
    r = {
        "setup": {"rate_per_s": 1000, "seconds": 1, "partitions": 6, "replication_factor": 3, "value_bytes": 1024,
                  "linger_ms": 5, "commit_interval_ms": 50, "wal_puts_per_s_max": None, "processes": "p",
                  "store": "s"},
        "cases": [case], "overhead": cost, "verdicts": {"end to end p50 <= 40 ms": True},
    }  # fmt: skip
    out = io.StringIO()
    print_report(r, out)
    text = out.getvalue()
    for line in ("replication (appended -> HWM)", "broker answer in all", "end to end (client)", "per observe()",
                 "PASS  librdkafka acks=all: end to end p50 <= 40 ms", "librdkafka acks=all", "8.0 x",
                 "PUT budget default", "19.5"):  # fmt: skip
        assert line in text
