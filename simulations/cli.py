"""``python -m simulations run|sweep|report|calibrate``.

* ``run SCENARIO [--seed N] [--json] [--no-timing] [--out DIR] [--duration-s S]``:
  simulate every design of a scenario (a name in ``simulations/scenarios``
  or a path); print a table, or with ``--json`` one JSON object; with
  ``--out`` also write ``result.json`` and PNG plots there.
* ``sweep SCENARIO --param KEY=V1,V2,... [--metric PATH] [--out DIR]``: one
  run per value; a table and, with ``--out``, ``sweep.json`` and a plot.
* ``report [--out FILE]``: regenerate ``simulations/REPORT.md`` from the
  shipped scenarios.
* ``calibrate [--json] [--duration-s S]``: a real ``partlog cluster`` and
  the simulator on the same shape and load, predicted against measured.
* ``tiering [--partitions N,...] [--segment-ms MS] ...``: the storage model
  with tiering off and on for both designs (simulations/tiering.py).

``wall_s`` and ``speedup`` are the only outputs that vary between runs with
one seed; ``--no-timing`` leaves them out (byte-for-byte comparisons).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from simulations.runner import design_runs, run_scenario, to_json
from simulations.scenario import Design, ScenarioError, load_scenario, shipped_scenarios
from simulations.sweep import DEFAULT_METRIC, parse_param, run_sweep
from simulations.table import format_table

DEFAULT_SEED = 1
DEFAULT_JOBS = os.cpu_count() or 1


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


@contextmanager
def _progress(total_s: float, enabled: bool, what: str) -> Iterator[Callable[[float], None] | None]:
    """A tqdm bar on stderr counting simulated seconds; ``report(done_s)``.
    Off when stderr is not a terminal (logs, tests, CI) or when disabled."""
    if not enabled or not sys.stderr.isatty():
        yield None
        return
    from tqdm import tqdm

    bar = tqdm(total=round(total_s), unit="sim-s", desc=what, file=sys.stderr, leave=False)
    done = [0]

    def report(done_s: float) -> None:
        n = int(done_s)
        if n > done[0]:
            bar.update(n - done[0])
            done[0] = n

    try:
        yield report
    finally:
        bar.close()


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    return {"duration_s": args.duration_s} if args.duration_s is not None else {}


class UsageError(Exception):
    """A command cannot run as asked (a missing optional package)."""


def _need_plots(wanted: object, option: str) -> None:
    """Plots need matplotlib (the ``sim`` extra): say so before simulating."""
    import importlib.util

    if wanted and importlib.util.find_spec("matplotlib") is None:
        raise UsageError(f"{option} writes PNG plots with matplotlib: pip install 'partlog[sim]'")


def cmd_run(args: argparse.Namespace) -> int:
    _need_plots(args.out, "--out")
    scenario = load_scenario(args.scenario, _overrides(args))
    n = len(design_runs(scenario))
    with _progress(n * scenario.duration_s, not args.json, scenario.name) as report:
        cb = None if report is None else (lambda i, ms: report(i * scenario.duration_s + ms / 1000))
        result = run_scenario(scenario, args.seed, cb, jobs=args.jobs)
    timing = not args.no_timing
    doc = to_json(result, timing=timing)
    if args.out:
        from simulations.plots import write_plots

        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "result.json").write_text(json.dumps(doc, indent=2) + "\n")
        written = write_plots(result, out)
        if not args.json:
            print(f"wrote {out / 'result.json'} and {len(written)} plots in {out}", file=sys.stderr)
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        print(format_table(result, timing=timing))
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    _need_plots(args.out, "--out")
    param, values = parse_param(args.param)
    first = load_scenario(args.scenario, _overrides(args))
    n = len(design_runs(first))
    with _progress(len(values) * n * first.duration_s, not args.json, f"sweep {param}") as report:
        cb = None
        if report is not None:
            per_value = n * first.duration_s
            cb = lambda vi, di, ms: report(vi * per_value + di * first.duration_s + ms / 1000)  # noqa: E731
        sweep = run_sweep(args.scenario, param, values, args.metric, args.seed, _overrides(args), cb, jobs=args.jobs)
    doc = {
        "scenario": first.name,
        "seed": args.seed,
        "param": param,
        "values": list(sweep.values),
        "metric": args.metric,
        "series": sweep.series,
    }
    if args.out:
        from simulations.plots import write_sweep_plot

        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "sweep.json").write_text(json.dumps(doc, indent=2) + "\n")
        points = {k: [(float(x), y) for x, y in zip(values, v, strict=True)] for k, v in sweep.series.items()}
        if all(isinstance(x, int | float) for x in values):
            write_sweep_plot(first.name, param, args.metric, points, out / f"sweep_{param.replace('.', '_')}.png")
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        print(f"{first.name}: {args.metric} by {param}")
        width = max(len(k) for k in sweep.series) if sweep.series else 10
        print(" " * width + "".join(f"{v!s:>12}" for v in values))
        for k, ys in sweep.series.items():
            print(k.ljust(width) + "".join(f"{'-' if y is None else f'{y:.3f}':>12}" for y in ys))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from simulations.report import write_report

    _need_plots(True, "report")
    path = write_report(Path(args.out), args.seed, plots_dir=Path(args.plots) if args.plots else None, jobs=args.jobs)
    print(f"wrote {path}", file=sys.stderr)
    return 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    from simulations.calibrate import Shape, calibrate, format_table

    if args.duration_s is not None and not 1 <= args.duration_s <= 600:
        raise UsageError(f"--duration-s must be in [1, 600], got {args.duration_s:g}")
    shape = Shape() if args.duration_s is None else Shape(duration_s=args.duration_s)
    quiet = args.json

    def progress(msg: str) -> None:
        if not quiet:
            print(msg, file=sys.stderr)

    try:
        result = calibrate(shape, args.seed, progress)
    except RuntimeError as e:
        raise UsageError(str(e)) from e
    if args.save:
        from simulations.calibrate import MEASURED_PATH
        from simulations.storage import measure_store_writes

        progress("measuring the pages a durable store writes per commit")
        result["pages_per_commit"] = round(measure_store_writes(), 3)
        result["measured_on"] = time.strftime("%Y-%m-%d")
        MEASURED_PATH.write_text(json.dumps(result, indent=2) + "\n")
        progress(f"wrote {MEASURED_PATH} (REPORT.md's calibration table and storage model read it)")
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(format_table(result))
    return 0


def cmd_aggregate(args: argparse.Namespace) -> int:
    from simulations import aggregate as agg

    overrides = _overrides(args)
    for spec in args.set or ():
        key, values = parse_param(spec)
        overrides[key] = values if len(values) > 1 else values[0]
    scenario = load_scenario(args.scenario, overrides)
    runs = [(d, r) for d, r in design_runs(scenario) if d is not Design.CLASSIC]
    out = []
    for design, routing in runs:
        a = agg.aggregate(scenario, design, routing, args.seed)
        doc: dict[str, Any] = agg.to_json(a)
        if args.compare:
            from simulations.simulation import simulate

            e = simulate(scenario, design, routing, args.seed)
            doc["event_level"] = {
                name: {"aggregate": x, "event": y, "difference": (x - y) / y if y else None}
                for name, x, y in agg.compare_rows(a, e)
            }
        out.append(doc)
    result = {"scenario": scenario.name, "seed": args.seed, "mode": "aggregate", "designs": out}
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(
        f"scenario {scenario.name} (aggregate mode), {scenario.cluster.brokers} brokers, "
        f"{scenario.cluster.partitions} partitions"
    )
    for doc in out:
        c = doc["commit_rpcs_per_file"]
        print(
            f"{doc['design']}/{doc['routing']}: {doc['wal_files_per_s']:.1f} WAL files/s, commit RPCs/file local "
            f"{c['local_mean']:.2f} same-AZ {c['same_az_mean']:.2f} cross-AZ {c['cross_az_mean']:.2f}, "
            f"{doc['network_commit_rpcs_per_s']:.1f} network commit RPCs/s (busiest broker "
            f"{doc['network_commit_rpcs_per_s_per_broker_max']:.1f}), ${doc['monthly_cost_usd']:,.0f}/month"
        )
        for name, row in doc.get("event_level", {}).items():
            diff = "-" if row["difference"] is None else f"{100 * row['difference']:+.1f}%"
            print(f"    {name:<28} aggregate {row['aggregate']:10.2f}  event-level {row['event']:10.2f}  {diff}")
    return 0


def cmd_tiering(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from simulations.tiering import BuildSource, TieringConfig
    from simulations.tiering_check import CHECK_TOLERANCE_NOTE, cross_check
    from simulations.tiering_report import CHECK_CASES, check_lines, runs_for, table, tiering_lines, verdicts

    if args.cross_check:
        checks = [cross_check(c) for c in CHECK_CASES]
        if args.json:
            print(json.dumps([{"case": asdict(c.case), "figures": [asdict(f) | {"ok": f.ok} for f in c.figures]}
                              for c in checks], indent=2))  # fmt: skip
        else:
            print(CHECK_TOLERANCE_NOTE)
            print("\n".join(check_lines(checks)))
        return 0 if all(c.ok for c in checks) else 1
    try:
        partitions = [int(x) for x in args.partitions.split(",")]
        cfg = TieringConfig(
            retention_s=args.retention_s,
            segment_ms=args.segment_ms,
            segment_bytes=args.segment_bytes,
            interval_s=args.interval_s,
            catchup_fraction=args.catchup_fraction,
        )
    except ValueError as e:
        raise UsageError(str(e)) from e
    if min(partitions) < 1:
        raise UsageError(f"--partitions must be >= 1, got {args.partitions}")
    if args.json:
        by_n = runs_for(args.seed, cfg, partitions, args.scenario, tuple(BuildSource), args.period_s)
        doc = {
            "scenario": args.scenario,
            "seed": args.seed,
            "runs": [
                {
                    "partitions": n,
                    "design": r.load.design,
                    "routing": r.load.routing,
                    "tiering": r.config.tiering,
                    "build_source": r.config.build_source.value,
                    "wal_objects": r.wal_objects,
                    "segment_objects": r.segment_objects,
                    "oldest_wal_s": r.oldest_wal_s,
                    "requests_per_s": asdict(r.rates),
                    "bytes_stored": r.bytes_stored,
                    "batch_entries": r.batch_entries,
                    "segment_rows": r.segment_rows,
                    "file_rows": r.file_rows,
                    "request_usd_per_month": r.request_usd_per_month,
                    "storage_usd_per_month": r.storage_usd_per_month,
                    "builder_keeps_up": r.builder_keeps_up,
                    "series": [asdict(x) for x in r.samples] if args.series else None,
                }
                for n, runs in by_n
                for r in runs
            ],
            "verdicts": [{"question": q, "where": w, "verdict": v} for q, w, v in verdicts(by_n)],
        }
        print(json.dumps(doc, indent=2))
        return 0
    if args.scenario != "tiering-3az" or args.period_s is not None or args.series:
        by_n = runs_for(args.seed, cfg, partitions, args.scenario, tuple(BuildSource), args.period_s)
        print("\n".join(table(by_n)))
        if args.series:
            for n, runs in by_n:
                for r in runs:
                    mode = f"on ({r.config.build_source.value})" if r.config.tiering else "off"
                    print(f"\n{n:,} partitions, {r.label}, tiering {mode}: t (h), WAL objects, segment objects, "
                          "oldest WAL object (min)")  # fmt: skip
                    for x in r.samples[:: max(1, round(args.series_every_h))]:
                        print(f"{x.t_s / 3600:8.1f} {x.wal_objects:14,.0f} {x.segment_objects:14,.0f} "
                              f"{x.oldest_wal_s / 60:12.1f}")  # fmt: skip
        return 0
    print("\n".join(tiering_lines(args.seed, cfg, partitions)))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m simulations",
        description="Deterministic simulations of multi-AZ commit fan-out on partlog's real produce pipeline and "
        "metadata stores, side by side with a central batch coordinator (KIP-1164) and classic replication. "
        "Scenarios are TOML files (simulations/scenarios/).",
    )
    sub = p.add_subparsers(dest="command", required=True)
    known = ", ".join(shipped_scenarios())

    def jobs_arg(sp: argparse.ArgumentParser) -> None:
        sp.add_argument(
            "--jobs",
            type=_positive_int,
            default=DEFAULT_JOBS,
            help=f"designs simulated at once, one process each (default: the CPU count, {DEFAULT_JOBS}); "
            "the results do not depend on it",
        )

    def common(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("scenario", help=f"a shipped scenario ({known}) or a path to a .toml file")
        sp.add_argument("--seed", type=int, default=DEFAULT_SEED, help=f"random seed (default {DEFAULT_SEED})")
        sp.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
        sp.add_argument("--out", help="directory for the JSON and PNG plots")
        sp.add_argument("--duration-s", type=float, help="simulated seconds (overrides the scenario's)")
        jobs_arg(sp)

    run = sub.add_parser("run", help="simulate every design of a scenario")
    common(run)
    run.add_argument("--no-timing", action="store_true", help="leave out wall_s and speedup (comparable output)")
    run.set_defaults(fn=cmd_run)

    ag = sub.add_parser(
        "aggregate",
        help="steady-state rates from expectations, no events: for 1,000+ brokers and 100k partitions",
        description="The aggregate mode: WAL files/s, commit RPCs per file by kind, requests/s, GETs and cost "
        "from expectations over the same topology, routing and load as the event-level simulator (no latency, "
        "no failures: those need `run`). --compare also runs the event-level mode and prints the differences.",
    )
    ag.add_argument("scenario", help=f"a shipped scenario ({known}) or a path to a .toml file")
    ag.add_argument("--seed", type=int, default=DEFAULT_SEED, help=f"random seed (default {DEFAULT_SEED})")
    ag.add_argument("--json", action="store_true", help="print one JSON object instead of lines")
    ag.add_argument("--duration-s", type=float, help="simulated seconds of the --compare run (the scenario's)")
    ag.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="override a scenario key, e.g. --set brokers_per_az=334,333,333 --set partitions=100000",
    )
    ag.add_argument("--compare", action="store_true", help="also run the event-level mode and compare")
    ag.set_defaults(fn=cmd_aggregate)

    sweep = sub.add_parser("sweep", help="one run per value of a parameter")
    common(sweep)
    sweep.add_argument("--param", required=True, help="KEY=V1,V2,... e.g. brokers_per_az=1,2,4,8")
    sweep.add_argument("--metric", default=DEFAULT_METRIC, help=f"dotted path in a design's JSON ({DEFAULT_METRIC})")
    sweep.set_defaults(fn=cmd_sweep)

    report = sub.add_parser("report", help="regenerate simulations/REPORT.md from the shipped scenarios")
    report.add_argument("--seed", type=int, default=DEFAULT_SEED, help=f"random seed (default {DEFAULT_SEED})")
    report.add_argument(
        "--out", default=str(Path(__file__).parent / "REPORT.md"), help="(default: simulations/REPORT.md)"
    )
    report.add_argument(
        "--plots", help="directory for the report's PNG plots (default: report/ beside --out), referenced from it"
    )
    jobs_arg(report)
    report.set_defaults(fn=cmd_report)

    cal = sub.add_parser(
        "calibrate",
        help="run a real partlog cluster and the simulator on the same shape and load; predicted vs measured",
        description="Runs a real `partlog cluster` (3 AZs x 2 brokers, 12 partitions, RF 3, 2 producers per AZ at "
        "500 records/s of 100 B, loopback, local object store, fsync on), then the simulator on the same shape "
        "and load with the PUT latency measured in the run, and prints each figure predicted against measured, "
        "within 20% or not, and why a row misses.",
    )
    cal.add_argument("--seed", type=int, default=DEFAULT_SEED, help=f"simulator seed (default {DEFAULT_SEED})")
    cal.add_argument("--duration-s", type=float, help="seconds of producing in the real cluster (default 10)")
    cal.add_argument(
        "--json", action="store_true", help='print {"rows": [{"metric", "predicted", "measured", ...}], ...}'
    )
    cal.add_argument(
        "--save",
        action="store_true",
        help="also measure the pages a durable store writes per commit, and write both to "
        "simulations/measured.json for the report",
    )
    cal.set_defaults(fn=cmd_calibrate)

    from simulations.tiering import CATCHUP_FRACTION_DEFAULT, SEGMENT_MS_MODEL_DEFAULT, TieringConfig

    d = TieringConfig()
    ti = sub.add_parser(
        "tiering",
        help="the storage model with tiering off and on, for both designs: objects alive, requests/s, metadata",
        description="Steady produce from empty over retention plus a day: WAL objects and segment objects alive, "
        "the oldest live WAL object, object-store requests/s by kind (WAL and segment PUTs, segment builds' and "
        "catch-up GETs, walmgr's LISTs and footer GETs, DeleteObjects), bytes stored, metadata entries kept and "
        "their monthly cost, for partlog (AZ representatives) and the central coordinator (KIP-1164), tiering "
        "off, on with segments built from WAL reads and on with segments built from a local log; then verdicts "
        "against stated bounds and the model checked against partlog's planner (simulations/tiering.py). "
        "Without --json, --series, --period-s or another --scenario it prints the report's tiering section (with "
        "verdicts and the cross-check): REPORT.md's at the defaults.",
    )
    ti.add_argument("--scenario", default="tiering-3az", help=f"a shipped scenario ({known}) or a .toml path "
                    "(default tiering-3az); its partition count is replaced by --partitions")  # fmt: skip
    ti.add_argument("--seed", type=int, default=DEFAULT_SEED, help=f"random seed (default {DEFAULT_SEED})")
    ti.add_argument("--partitions", default="1000,3000,10000", help="partition counts, comma-separated "
                    "(default 1000,3000,10000)")  # fmt: skip
    ti.add_argument("--retention-s", type=float, default=d.retention_s, help=f"retention.ms in seconds "
                    f"(default {d.retention_s:g}: 7 days)")  # fmt: skip
    ti.add_argument("--segment-ms", type=int, default=SEGMENT_MS_MODEL_DEFAULT,
                    help=f"segment.ms (default {SEGMENT_MS_MODEL_DEFAULT}: 10 min)")  # fmt: skip
    ti.add_argument("--segment-bytes", type=int, default=d.segment_bytes, help=f"segment.bytes (default "
                    f"{d.segment_bytes}; a build holds at most {d.build_bytes_max})")  # fmt: skip
    ti.add_argument("--interval-s", type=float, default=d.interval_s, help=f"the builder loop's interval "
                    f"(default {d.interval_s:g} s)")  # fmt: skip
    ti.add_argument("--catchup-fraction", type=float, default=CATCHUP_FRACTION_DEFAULT, help="share of the "
                    f"bytes produced read again from history (default {CATCHUP_FRACTION_DEFAULT})")  # fmt: skip
    ti.add_argument("--period-s", type=float, help="simulated seconds (default: retention plus a day)")
    ti.add_argument("--series", action="store_true", help="also print objects alive over time")
    ti.add_argument("--series-every-h", type=float, default=12.0, help="hours between printed samples (12)")
    ti.add_argument("--json", action="store_true", help="print one JSON object (runs, verdicts; --series adds "
                    "the samples)")  # fmt: skip
    ti.add_argument("--cross-check", action="store_true", help="only check the model against partlog's "
                    "planner on a synthetic log; exit 1 if a figure disagrees")  # fmt: skip
    ti.set_defaults(fn=cmd_tiering)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        rc: int = args.fn(args)
    except (ScenarioError, UsageError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return rc
