"""The tiering storage model (simulations/tiering.py): properties over
random loads and configs, a golden small case, the cross-check against the
real planner, and the CLI."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulations.aggregate import aggregate
from simulations.cli import main
from simulations.scenario import Design, Routing, load_scenario
from simulations.tiering import (
    FLAT_FROM_S,
    SEGMENT_OBJECTS,
    BuildSource,
    Load,
    TieringConfig,
    TieringRun,
    load_from_scenario,
    run,
)
from simulations.tiering_check import CheckCase, cross_check

PRICES = load_scenario("balanced-3az")


def _load(design: str = "partlog", **kw: object) -> Load:
    base = Load(
        design=design,
        routing="az-representative" if design == "partlog" else "any-broker",
        azs=3,
        brokers=6,
        partitions=600,
        replication_factor=3,
        produce_bytes_per_s=6e6,
        batches_per_s=400.0,
        wal_files_per_s=24.0,
        spread=1,
        put_ms=100.0,
        get_ms=100.0,
        put_bytes_per_s=85e6,
        prices=PRICES,
    )
    return dataclasses.replace(base, **kw)  # type: ignore[arg-type]


loads = st.builds(
    lambda design, azs, per_az, partitions, rate, batch, files, spread: _load(
        design,
        azs=azs,
        brokers=azs * per_az,
        partitions=partitions,
        produce_bytes_per_s=rate,
        batches_per_s=rate / batch,
        wal_files_per_s=files,
        spread=min(spread, per_az),
    ),
    st.sampled_from(["partlog", "coordinator"]),
    st.integers(1, 3),
    st.integers(1, 20),
    st.integers(1, 20_000),
    st.floats(1e4, 1e9),
    st.floats(256, 1 << 20),
    st.floats(0.5, 200),
    st.integers(1, 20),
)
configs = st.builds(
    lambda retention_h, segment_s, interval_s, source, catchup: TieringConfig(
        retention_s=retention_h * 3600.0,
        segment_ms=int(segment_s * 1000),
        interval_s=interval_s,
        build_source=source,
        catchup_fraction=catchup,
    ),
    st.integers(1, 24 * 8),
    st.floats(1, 7 * 86_400),
    st.floats(0.1, 60),
    st.sampled_from(list(BuildSource)),
    st.floats(0, 1),
)


# Cohorts of WAL objects this far apart in the property tests (fast enough).
COHORT_S = 120.0


def _both(load: Load, cfg: TieringConfig, period_s: float) -> tuple[TieringRun, TieringRun]:
    return (
        run(load, dataclasses.replace(cfg, tiering=False), period_s, sample_s=period_s / 24, cohort_s=COHORT_S),
        run(load, dataclasses.replace(cfg, tiering=True), period_s, sample_s=period_s / 24, cohort_s=COHORT_S),
    )


@settings(max_examples=40, deadline=None)
@given(loads, configs, st.floats(3600, 4 * 86_400))
def test_objects_alive_never_negative_and_tiering_never_keeps_more_wal(
    load: Load, cfg: TieringConfig, period_s: float
) -> None:
    off, on = _both(load, cfg, period_s)
    for a, b in zip(off.samples, on.samples, strict=True):
        assert a.t_s == b.t_s
        for x in (a, b):
            assert x.wal_objects >= 0 and x.segment_objects >= 0 and x.backlog_s >= 0
            assert 0 <= x.oldest_wal_s <= x.t_s
        assert a.segment_objects == 0
        # The same load: tiering on never has more live WAL objects than off.
        assert b.wal_objects <= a.wal_objects * (1 + 1e-9)
        assert b.oldest_wal_s <= a.oldest_wal_s
    assert not math.isnan(on.segment_objects) and not math.isnan(on.wal_objects)


@settings(max_examples=40, deadline=None)
@given(loads, configs)
def test_request_counts_conserve_bytes(load: Load, cfg: TieringConfig) -> None:
    off, on = _both(load, cfg, cfg.retention_s + 86_400)
    s = on.shape
    catchup = cfg.catchup_fraction * load.produce_bytes_per_s
    for r in (off, on):
        q = r.rates
        # Every byte produced goes into a WAL object once.
        assert q.wal_put_bytes == pytest.approx(load.produce_bytes_per_s)
        assert q.wal_puts == pytest.approx(load.wal_files_per_s)
        assert q.catchup_get_bytes == pytest.approx(catchup)
    # From WAL objects a catch-up read costs one GET per partition range.
    assert off.rates.catchup_gets * s.range_bytes == pytest.approx(catchup)
    assert off.rates.segment_puts == off.rates.build_gets == 0
    q = on.rates
    built = q.segment_puts / SEGMENT_OBJECTS
    assert q.segment_put_bytes == pytest.approx(built * s.segment_bytes)
    if on.builder_keeps_up:
        # Every byte produced is built into a segment once.
        assert q.segment_put_bytes == pytest.approx(load.produce_bytes_per_s)
    else:
        assert q.segment_put_bytes < load.produce_bytes_per_s
    if cfg.build_source is BuildSource.WAL:
        assert q.build_get_bytes == pytest.approx(q.segment_put_bytes)
        assert q.build_gets * s.range_bytes == pytest.approx(q.build_get_bytes)
    else:
        assert q.build_gets == q.build_get_bytes == 0
    # From segments: at most one GET per fetch_get_bytes plus an index a segment.
    assert q.catchup_gets == pytest.approx(
        catchup / min(cfg.fetch_get_bytes, s.segment_bytes) + catchup / s.segment_bytes
    )


@settings(max_examples=40, deadline=None)
@given(loads, configs)
def test_metadata_and_oldest_wal_object(load: Load, cfg: TieringConfig) -> None:
    off, on = _both(load, cfg, cfg.retention_s + 86_400)
    assert off.tiering_writes_per_s == 0 <= on.tiering_writes_per_s
    if load.design == "partlog":
        # The swap repoints entries, it never drops one.
        assert on.batch_entries == pytest.approx(off.batch_entries)
    else:
        assert on.batch_entries <= off.batch_entries * (1 + 1e-9)
    if on.builder_keeps_up:
        s = on.shape
        bound = max(s.close_s_max + s.delay_s_max, cfg.gate_s) + cfg.cycle_s
        assert on.oldest_wal_s <= bound + COHORT_S
        if on.oldest_wal_s < FLAT_FROM_S - COHORT_S:
            # WAL objects die before day one: their count is flat from then.
            assert on.wal_growth_after_day_one <= 1e-9


def test_golden_small_case() -> None:
    """6 brokers, 600 partitions, 6 MB/s in 400 batches/s, 24 WAL files/s, two
    days with the defaults (7 days' retention, segment.ms 10 min)."""
    got = {}
    for design in ("partlog", "coordinator"):
        for on in (False, True):
            r = run(_load(design), TieringConfig(tiering=on), period_s=2 * 86_400.0, sample_s=3600.0)
            got[(design, on)] = (
                round(r.wal_objects),
                round(r.segment_objects),
                r.oldest_wal_s,
                round(r.rates.total, 2),
                round(r.batch_entries),
                round(r.request_usd_per_month),
            )
    assert got == {
        ("partlog", False): (4147200, 0, 172800.0, 96.76, 207360000, 503),
        ("partlog", True): (14640, 515309, 630.0, 451.24, 207360000, 893),
        ("coordinator", False): (4147200, 0, 172800.0, 63.01, 207360000, 351),
        ("coordinator", True): (14640, 515309, 630.0, 418.42, 360907, 753),
    }


def test_builder_behind_makes_wal_objects_grow() -> None:
    """10x the segments one loop builds: WAL objects grow by the hour, and
    the oldest one is far past segment.ms."""
    load = _load(partitions=60_000)
    r = run(load, TieringConfig(), period_s=2 * 86_400.0)
    assert not r.builder_keeps_up
    assert r.shape.demand_per_broker > r.shape.capacity_per_broker
    assert r.wal_growth_after_day_one > 0.5
    assert r.oldest_wal_s > 3600
    fast = run(load, TieringConfig(build_source=BuildSource.LOCAL_LOG, interval_s=0.1), period_s=2 * 86_400.0)
    assert fast.shape.capacity_per_broker > r.shape.capacity_per_broker


def test_load_from_scenario_takes_the_aggregate_files() -> None:
    sc = load_scenario("tiering-3az", {"partitions": 2000})
    for design, routing in ((Design.PARTLOG, Routing.AZ_REPRESENTATIVE), (Design.COORDINATOR, Routing.ANY_BROKER)):
        load = load_from_scenario(sc, design, routing, 1)
        assert load.wal_files_per_s == aggregate(sc, design, routing, 1).files_per_s
        assert load.partitions == 2000 and load.brokers == 9
        assert load.spread == (1 if design is Design.PARTLOG else 3)
        assert load.batches_per_s == 1500


@pytest.mark.parametrize(
    "case", [CheckCase(), CheckCase(segment_bytes=40 * 16384, segment_ms=3_600_000, batches_per_s=0.5)]
)
def test_model_agrees_with_the_planner(case: CheckCase) -> None:
    check = cross_check(case)
    assert check.segments > 100 and check.files > 1000
    assert check.ok, check.figures


def test_cli_tiering(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tiering", "--cross-check"]) == 0
    assert "| yes |" in capsys.readouterr().out
    assert main(["tiering", "--partitions", "500", "--period-s", "86400", "--json", "--series"]) == 0
    doc = json.loads(capsys.readouterr().out)
    modes = {(r["design"], r["tiering"], r["build_source"]) for r in doc["runs"]}
    assert len(modes) == 6
    assert all(r["series"] for r in doc["runs"]) and doc["verdicts"]
    assert main(["tiering", "--partitions", "0"]) == 2
    assert main(["tiering", "--catchup-fraction", "2"]) == 2


def test_report_section_is_the_models() -> None:
    """REPORT.md's tiering section is what ``python -m simulations tiering``
    prints now: regenerate it (that command, or ``report``) after a change."""
    from simulations.tiering_report import tiering_lines
    from tests.paths import REPO

    text = (REPO / "simulations" / "REPORT.md").read_text()
    section = "\n".join(tiering_lines(1)) + "\n"
    assert section in text
