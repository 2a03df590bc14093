"""``partlog bench quiet-topics``'s arithmetic and report (the run itself:
tests/system/test_bench_quiet.py)."""

from __future__ import annotations

import io

import pytest

from partlog.tools.bench_quiet import TARGET_IDLE_CORES_PER_1000, TARGET_TXN_RATIO, print_report, summarize


def _phase(idle: float, median: float) -> dict[str, object]:
    return {"idle_cores": idle, "txn_s": [median], "txn_median_s": median, "txn_max_s": median}


def test_ratios_are_to_the_mean_of_both_a_phases() -> None:
    s = summarize(_phase(0.1, 0.2), _phase(0.9, 1.5), _phase(0.3, 0.4), 2000)
    assert s["txn_ratio"] == pytest.approx(1.5 / 0.3)
    assert s["idle_extra_cores"] == pytest.approx(0.7)
    assert s["idle_cores_per_1000_partitions"] == pytest.approx(0.35)
    assert s["a_drift_txn_ratio"] == pytest.approx(2.0)
    assert (s["txn_verdict"], s["idle_verdict"]) == ("fail", "fail")


def test_verdicts_at_the_thresholds_pass() -> None:
    base = _phase(0.1, 1.0)
    s = summarize(base, _phase(0.1 + TARGET_IDLE_CORES_PER_1000, TARGET_TXN_RATIO), base, 1000)
    assert (s["txn_verdict"], s["idle_verdict"]) == ("pass", "pass")


def test_the_report_names_every_phase_and_verdict() -> None:
    a, b = _phase(0.05, 0.25), _phase(0.8, 2.5)
    r = {"quiet_partitions": 2000, "topics": 500, "partitions_per_topic": 4, "create_s": 3.2, "txns": 10,
         "records_per_txn": 1000, "value_bytes": 100, "phases": {"a1": a, "b": b, "a2": a},
         **summarize(a, b, a, 2000)}  # fmt: skip
    out = io.StringIO()
    print_report(r, out)
    text = out.getvalue()
    assert "2,000 quiet partitions" in text and "B / A: 10.0x" in text
    assert text.count(": fail") == 2
    for label in ("A: no other topic", "B: with the quiet topics", "A again: deleted"):
        assert label in text
