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
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        rc: int = args.fn(args)
    except (ScenarioError, UsageError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return rc
