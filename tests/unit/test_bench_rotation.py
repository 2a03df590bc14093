"""``partlog bench kafka --rotation``'s rules and report, without a cluster."""

from __future__ import annotations

import io

from partlog.tools.bench_kafka import _rotation_rules, print_rotation_report


def test_the_interval_only_rule_is_the_baseline_then_each_budget() -> None:
    rules = _rotation_rules(50, (None, 200))
    assert rules == [
        ("interval-only", ("--rotation-grace-ms", "50")),
        ("load-following, default budget", ()),
        ("load-following, 200 PUTs/s", ("--wal-puts-per-s-max", "200")),
    ]


def test_the_report_prints_ratios_puts_by_reason_and_verdicts() -> None:
    broker = {
        "puts_per_s": 20.0,
        "puts_per_s_by_reason": {"interval": 20.0},
        "budget_waits_per_s": 0.0,
        "upload_mean_ms": 2.0,
        "commit_mean_ms": 9.0,
    }
    idle = {"puts_per_s": 0.0, "puts_per_s_by_reason": {}, "budget_waits_per_s": 0.0,
            "upload_mean_ms": 0.0, "commit_mean_ms": 0.0}  # fmt: skip
    point = {"rule": "interval-only", "p50_ms": 80.0, "p99_ms": 120.0, "p50_ratio": 1.0, "p99_ratio": 1.0,
             "puts_per_s_max_broker": 20.0, "puts_ratio": 1.0, "brokers": [broker, idle, idle]}  # fmt: skip
    setup = {"rate_per_s": 1000, "seconds": 10, "partitions": 6, "replication_factor": 3, "value_bytes": 1024,
             "linger_ms": 5, "commit_interval_ms": 50}  # fmt: skip
    result = {
        "setup": setup,
        "rules": [point],
        "verdicts": {"interval-only: p50 <= 40 ms and p99 <= 90 ms": False},
    }
    out = io.StringIO()
    print_rotation_report(result, out)
    text = out.getvalue()
    assert "interval 20.0" in text and "b1 upload 2.0 / commit 9.0" in text and "MISS" in text
