"""The report's section on tiering (issue 31), printed by ``python -m
simulations tiering`` and by ``report``: both designs, tiering off and on,
over partition counts, with verdicts computed against stated bounds and the
model checked against the real planner (:mod:`simulations.tiering_check`).
"""

from __future__ import annotations

from collections.abc import Sequence

from simulations.scenario import load_scenario
from simulations.tiering import (
    FLAT_FRACTION,
    FLAT_FROM_S,
    RLMM_EVENTS_PER_SEGMENT,
    SEGMENT_OBJECTS,
    STORAGE_USD_PER_GB_MONTH,
    BuildSource,
    TieringConfig,
    TieringRun,
    sweep,
)
from simulations.tiering_check import CROSS_CHECK_TOLERANCE, CheckCase, CrossCheck, cross_check
from simulations.verdicts import Check, Comparison

TIERING_SCENARIO = "tiering-3az"
PARTITIONS = (1000, 3000, 10000)
# The bound on the oldest live WAL object: segment.ms + 2 minutes.
OLDEST_MARGIN_S = 120.0
# The planner cross-checks: one case closed by segment.ms, one by segment.bytes.
CHECK_CASES = (CheckCase(), CheckCase(segment_bytes=40 * 16384, segment_ms=3_600_000, batches_per_s=0.5))


def runs_for(
    seed: int,
    cfg: TieringConfig,
    partitions: Sequence[int] = PARTITIONS,
    scenario: str = TIERING_SCENARIO,
    sources: Sequence[BuildSource] = tuple(BuildSource),
    period_s: float | None = None,
) -> list[tuple[int, list[TieringRun]]]:
    scenarios = [(n, load_scenario(scenario, {"partitions": n})) for n in partitions]
    return sweep(scenarios, cfg, seed, period_s, sources)


def _n(x: float, digits: int = 0) -> str:
    return f"{x:,.{digits}f}"


def _mode(r: TieringRun) -> str:
    return f"on ({r.config.build_source.value})" if r.config.tiering else "off"


def _age(seconds: float) -> str:
    if seconds >= 86_400:
        return f"{seconds / 86_400:.1f} d"
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 60:.1f} min"


def table(by_n: Sequence[tuple[int, Sequence[TieringRun]]]) -> list[str]:
    out = [
        "| partitions | design | tiering | WAL objects alive | segment objects alive | oldest WAL object "
        "| PUT/s (WAL + segments) | GET/s builds / catch-up / footers | LIST/s | DeleteObjects/s | TB stored "
        "| per-batch entries (M) | segment + file rows (M) | tiering metadata writes/s | requests $/month "
        "| storage $/month |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for n, runs in by_n:
        for r in runs:
            q = r.rates
            out.append(
                f"| {n:,} | {r.label} | {_mode(r)} | {_n(r.wal_objects)} | {_n(r.segment_objects)} "
                f"| {_age(r.oldest_wal_s)} | {_n(q.wal_puts, 1)} + {_n(q.segment_puts, 1)} "
                f"| {_n(q.build_gets, 1)} / {_n(q.catchup_gets, 1)} / {_n(q.footer_gets, 1)} | {_n(q.lists, 2)} "
                f"| {_n(q.deletes, 2)} | {_n(r.bytes_stored / 1e12, 2)} | {_n(r.batch_entries / 1e6, 1)} "
                f"| {_n((r.segment_rows + r.file_rows) / 1e6, 1)} | {_n(r.tiering_writes_per_s, 1)} "
                f"| {_n(r.request_usd_per_month)} "
                f"| {_n(r.storage_usd_per_month)} |"
            )
    return out


def _metadata(r: TieringRun) -> float:
    return r.batch_entries + r.segment_rows + r.file_rows


def verdicts(by_n: Sequence[tuple[int, Sequence[TieringRun]]]) -> list[tuple[str, str, str]]:
    """(question, where, verdict) rows; tiering on means segments built from
    WAL reads (what partlog builds)."""
    rows: list[tuple[str, str, str]] = []
    for n, runs in by_n:
        where = f"{n:,} partitions"
        on = [r for r in runs if r.config.tiering and r.config.build_source is BuildSource.WAL]
        off = {r.load.design: r for r in runs if not r.config.tiering}
        for r in on:
            cfg = r.config
            rows += [
                (
                    f"{r.label}: live WAL objects flat with tiering on (growth from day {FLAT_FROM_S / 86_400:g} to "
                    f"the end <= {FLAT_FRACTION:.0%})",
                    where,
                    Check("growth", 100 * r.wal_growth_after_day_one, 100 * FLAT_FRACTION, unit="%").sentence(),
                ),
                (
                    f"{r.label}: oldest live WAL object <= segment.ms + 2 min with tiering on",
                    where,
                    Check(
                        "oldest", r.oldest_wal_s / 60, (cfg.segment_ms / 1000 + OLDEST_MARGIN_S) / 60, unit=" min"
                    ).sentence(),
                ),
                (
                    f"{r.label}: one builder loop per broker keeps up (segments/s its leaders need <= what it builds)",
                    where,
                    Check("builder", r.shape.demand_per_broker, r.shape.capacity_per_broker, unit="/s").sentence(),
                ),
                (
                    f"{r.label}: objects alive (WAL + segment objects), tiering on against off",
                    where,
                    Comparison("objects", "on", r.objects, "off", off[r.load.design].objects).sentence(),
                ),
                (
                    f"{r.label}: object-store requests/s, tiering on against off",
                    where,
                    Comparison("requests", "on", r.rates.total, "off", off[r.load.design].rates.total, "/s").sentence(),
                ),
            ]
        by = {r.load.design: r for r in on}
        p, c = by["partlog"], by["coordinator"]
        for what, attr, unit in (
            ("objects alive", lambda r: r.objects, ""),
            ("object-store requests/s", lambda r: r.rates.total, "/s"),
            ("metadata entries and rows kept (every copy)", _metadata, ""),
            ("metadata writes/s tiering adds (every copy)", lambda r: r.tiering_writes_per_s, "/s"),
            ("requests + storage $/month", lambda r: r.request_usd_per_month + r.storage_usd_per_month, " $"),
        ):
            rows.append(
                (
                    f"Tiering on, {what}: partlog against the coordinator",
                    where,
                    Comparison(what, "partlog", attr(p), "coordinator", attr(c), unit).sentence(),
                )
            )
    return rows


def check_lines(checks: Sequence[CrossCheck]) -> list[str]:
    out = [
        "| case | figure | model | planner | agrees |",
        "| --- | --- | --- | --- | --- |",
    ]
    for ch in checks:
        c = ch.case
        case = (
            f"{c.partitions} partitions x {c.batches_per_s:g} batches/s of {c.batch_bytes // 1024} KiB, "
            f"segment.ms {c.segment_ms / 60_000:g} min, segment.bytes {c.segment_bytes:,}"
        )
        for f in ch.figures:
            ok = ("yes" if f.ok else "**no**") + (" (a bound)" if f.bound else "")
            out.append(f"| {case} | {f.name} | {_n(f.model, 3)} | {_n(f.planner, 3)} | {ok} |")
    return out


def _losses(rows: Sequence[tuple[str, str, str]]) -> str:
    """Which design loses each design comparison, and which checks fail."""
    parts = []
    for q, where, v in rows:
        if q.startswith("Tiering on,") and v.startswith("**"):
            winner = v[2:].split("**", 1)[0]
            loser = "coordinator" if winner == "partlog" else "partlog"
            parts.append(f"{loser} at {where} on {q.split(',', 1)[1].split(':')[0].strip()}")
    fails = [f"{q.split(':')[0]} at {where}: {q.split(': ', 1)[1]}" for q, where, v in rows if "**fails**" in v]
    text = "Where each design loses (tiering on): " + ("; ".join(parts) if parts else "nowhere beyond a tie") + "."
    if fails:
        text += " Checks that fail: " + "; ".join(fails) + "."
    return text


def break_even(by_n: Sequence[tuple[int, Sequence[TieringRun]]]) -> str:
    """The segment.ms above which tiering keeps fewer objects alive than no
    tiering: segment objects alive are about SEGMENT_OBJECTS x partitions x
    retention / segment cycle (the cycle is segment.ms plus the wait for the
    next batch), against the WAL objects alive without tiering."""
    parts = []
    for n, runs in by_n:
        off = next(r for r in runs if not r.config.tiering and r.load.design == "partlog")
        cfg = off.config
        cycle_s = SEGMENT_OBJECTS * n * (cfg.retention_s + cfg.retention_check_s / 2) / off.wal_objects
        parts.append(f"{n:,} partitions: segment.ms above about {_age(cycle_s - 1 / off.shape.batch_rate)}")
    return (
        "Segments alive grow with partitions x retention / segment.ms, WAL objects without tiering with the "
        "files written a second: tiering keeps fewer objects alive than no tiering (partlog's load) for "
        + "; ".join(parts)
        + " (while segments roll by time)."
    )


def tiering_lines(
    seed: int,
    cfg: TieringConfig | None = None,
    partitions: Sequence[int] = PARTITIONS,
    *,
    checks: Sequence[CrossCheck] | None = None,
) -> list[str]:
    cfg = cfg or TieringConfig()
    by_n = runs_for(seed, cfg, partitions)
    rows = verdicts(by_n)
    checks = [cross_check(c) for c in CHECK_CASES] if checks is None else checks
    first = by_n[0][1][0]
    load = first.load
    scenario = load_scenario(TIERING_SCENARIO)
    out = [
        "## Tiering: files, requests and objects alive (issue 31, the thread's first concern)",
        "",
        f"`python -m simulations tiering` (`simulations/tiering.py`, `simulations/tiering_report.py`; seed {seed}): "
        f"`{TIERING_SCENARIO}` ({len(scenario.cluster.azs)} AZs x {min(scenario.cluster.brokers_per_az)} brokers, "
        f"RF {scenario.cluster.replication_factor}, {load.produce_bytes_per_s / 1e6:g} MB/s in "
        f"{load.batches_per_s:,.0f} batches/s) over {', '.join(f'{n:,}' for n in partitions)} partitions, "
        f"{cfg.retention_s / 86_400:g} days' retention, segment.ms {cfg.segment_ms / 60_000:g} min, segment.bytes "
        f"{cfg.segment_bytes:,} (a build holds at most {cfg.build_bytes_max >> 20} MiB), simulated for "
        f"{first.period_s / 86_400:g} days of steady produce from empty. Both designs get the same segment rules, "
        "builder loop, load, deletion gate and prices; each design's WAL files/s come from the aggregate mode "
        "(partlog with AZ representatives, the coordinator with any-broker routing). Tiering on builds segments "
        "from ranged GETs of the WAL objects, as `partlog/broker/tiering.py` does (`wal`), or from a local log "
        "the replica already downloaded, KIP-1163's leader (`local-log`: no GET). partlog's GC lists the bucket "
        "and reads a footer per WAL object, and with tiering on lists the tiered prefix hourly (its segment "
        "gate, designed, not built); the coordinator knows its files and RLMM its segments. partlog keeps one "
        "metadata entry per batch in retention on every replica, tiered or not (the swap repoints it); the "
        f"coordinator forgets a batch once tiered and keeps RLMM rows per segment, on "
        f"{cfg.metadata_replication_factor} replicas. Tiering's metadata writes: partlog's swap on every "
        f"replica; the coordinator's {RLMM_EVENTS_PER_SEGMENT} RLMM events and one commit dropping the tiered "
        f"batches per segment, on every replica. A segment is {SEGMENT_OBJECTS} objects. Catch-up reads: "
        f"{cfg.catchup_fraction:.0%} of the bytes produced are read again from history. Storage at "
        f"${STORAGE_USD_PER_GB_MONTH}/GB-month. The produce path's own GETs (replicas reading new WAL objects) "
        "are the fan-out model's above and do not change with tiering. Figures at the end of the period:",
        "",
        *table(by_n),
        "",
        "Verdicts (computed against the bound or threshold each states; a comparison names the lower side or "
        "a tie within 5%):",
        "",
        "| question | where | verdict |",
        "| --- | --- | --- |",
        *(f"| {q} | {w} | {v} |" for q, w, v in rows),
        "",
        _losses(rows),
        "",
        break_even(by_n),
        "",
        f"**The model against the real planner** (`simulations/tiering_check.py`, `python -m simulations tiering "
        f"--cross-check`): a synthetic log whose segments `partlog.tiered.planner.plan_segment` closes at every "
        f"pass; means within {CROSS_CHECK_TOLERANCE:.0%}, the model's largest age a bound:",
        "",
        *check_lines(checks),
        "",
    ]
    return out
