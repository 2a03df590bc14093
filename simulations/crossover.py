"""Where each design wins: sweeps of one cluster shape along AZ count,
brokers per AZ, partitions per send and commit cost, with both designs run
at every point under the same model, load and store, and the winner on
each metric computed (simulations/verdicts.py) rather than asserted.

The shape is generated, not read from a file: one producer group per AZ
sharing a fixed total send rate, so changing the AZ count does not change
the load.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simulations.metrics import DesignResult
from simulations.runner import RunResult, run_scenario
from simulations.scenario import DEFAULT_COMMIT_COST, Scenario, parse_scenario
from simulations.verdicts import Comparison

SHAPE_DURATION_S = 20
# The base point every sweep moves one parameter away from.
BASE: dict[str, float] = {"azs": 3, "brokers_per_az": 2, "partitions_per_send": 3, "commit_cost_x": 1}
SWEEPS: dict[str, tuple[float, ...]] = {
    "azs": (2, 3, 4, 5),
    "brokers_per_az": (1, 2, 4, 8),
    "partitions_per_send": (1, 3, 10, 30),
    "commit_cost_x": (1, 10, 30, 100),
}
PARAM_LABELS = {
    "azs": "AZs",
    "brokers_per_az": "brokers per AZ",
    "partitions_per_send": "partitions per send",
    "commit_cost_x": "commit cost (x the measured store, both sides)",
}
SENDS_PER_S_TOTAL = 90.0
BATCH_BYTES = 4096
PARTITIONS = 60
# The designs compared at every point: partlog with representatives and
# with any-broker routing (the coordinator's), and the coordinator.
LABELS = ("partlog/az-representative", "partlog/any-broker", "coordinator/any-broker")
# Metrics: (JSON-ish name, label, getter, lower is better)
METRICS: tuple[tuple[str, str, Callable[[DesignResult], float | None]], ...] = (
    ("send_p50", "per-send latency p50 ms", lambda d: d.send_latency_ms_p50),
    ("send_p99", "per-send latency p99 ms", lambda d: d.send_latency_ms_p99),
    ("requests", "requests/s received, all nodes", lambda d: d.requests_per_s_total),
    ("cost", "request + transfer $/month", lambda d: d.cost.total_usd),
)


def shape(
    azs: int, brokers_per_az: int, partitions_per_send: int, commit_cost_x: float, seed_duration_s: float
) -> Scenario:
    names = [f"az{i + 1}" for i in range(int(azs))]
    c = DEFAULT_COMMIT_COST
    doc: dict[str, Any] = {
        "name": f"shape-{int(azs)}az-{int(brokers_per_az)}b-{int(partitions_per_send)}pps-{commit_cost_x:g}x",
        "duration_s": seed_duration_s,
        "designs": ["partlog", "coordinator"],
        "routings": ["az-representative", "any-broker"],
        "cluster": {
            "azs": names,
            "brokers_per_az": int(brokers_per_az),
            "partitions": PARTITIONS,
            "replication_factor": min(3, int(azs) * int(brokers_per_az)),
        },
        "producers": [
            {
                "az": az,
                "sends_per_s": SENDS_PER_S_TOTAL / len(names),
                "partitions_per_send": int(partitions_per_send),
                "batch_bytes": BATCH_BYTES,
            }
            for az in names
        ],
        # The same store on both sides (the coordinator's is left unset).
        "commit": {
            "apply_ms_p50": c.fixed.ms_p50 * commit_cost_x,
            "apply_ms_p99": c.fixed.ms_p99 * commit_cost_x,
            "apply_us_per_batch": c.us_per_batch * commit_cost_x,
            "follower_apply_ms_p50": c.fixed.ms_p50 * commit_cost_x,
            "follower_apply_ms_p99": c.fixed.ms_p99 * commit_cost_x,
        },
    }
    return parse_scenario(doc, f"<generated shape {doc['name']}>")


@dataclass(frozen=True, slots=True)
class Sweep:
    param: str
    values: tuple[float, ...]
    runs: tuple[RunResult, ...]

    def series(self, getter: Callable[[DesignResult], float | None]) -> dict[str, list[float | None]]:
        return {label: [getter(_design(r, label)) for r in self.runs] for label in LABELS}

    def winners(self, getter: Callable[[DesignResult], float | None], a: str, b: str) -> list[str]:
        """Per value: the better of ``a`` and ``b`` (lower wins), or "tie"."""
        out = []
        for r in self.runs:
            x, y = getter(_design(r, a)), getter(_design(r, b))
            if x is None or y is None:
                out.append("-")
                continue
            w = Comparison("", a, x, b, y).winner
            out.append("tie" if w is None else w.split("/")[0])
        return out


def _design(r: RunResult, label: str) -> DesignResult:
    design, routing = label.split("/")
    return r.design(design, routing)


def run_sweeps(seed: int, *, jobs: int = 1, duration_s: float = SHAPE_DURATION_S) -> list[Sweep]:
    out = []
    for param, values in SWEEPS.items():
        runs = []
        for v in values:
            point = {**BASE, param: v}
            s = shape(
                int(point["azs"]),
                int(point["brokers_per_az"]),
                int(point["partitions_per_send"]),
                point["commit_cost_x"],
                duration_s,
            )
            runs.append(run_scenario(s, seed, jobs=jobs))
        out.append(Sweep(param, values, tuple(runs)))
    return out


def _cell(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:,.1f}"


def crossover_sentences(sweep: Sweep) -> list[str]:
    """Where the winner of partlog (representatives) against the
    coordinator changes along the sweep, for each metric."""
    a, b = LABELS[0], LABELS[2]
    out = []
    for _, label, getter in METRICS:
        w = sweep.winners(getter, a, b)
        changes = [
            f"from {w[i]} at {sweep.values[i]:g} to {w[i + 1]} at {sweep.values[i + 1]:g}"
            for i in range(len(w) - 1)
            if w[i] != w[i + 1]
        ]
        if changes:
            out.append(f"{label}: the winner changes " + "; ".join(changes))
        else:
            out.append(f"{label}: {w[0]} at every point")
    return out


def markdown(sweeps: Sequence[Sweep], plot_paths: Sequence[str] = ()) -> list[str]:
    lines = [
        "## Where each design wins",
        "",
        f"One generated shape ({BASE['azs']:g} AZs x {BASE['brokers_per_az']:g} brokers, {PARTITIONS} partitions, "
        f"RF 3, {SENDS_PER_S_TOTAL:g} sends/s of {BASE['partitions_per_send']:g} x {BATCH_BYTES} B split over the "
        f"AZs, acks=all, {SHAPE_DURATION_S} simulated s per point), moved along one parameter at a time. Both "
        "designs run at every point with the same store, network and load. A winner is the lower value of "
        "partlog with AZ representatives against the coordinator, a tie within 5% "
        "(`simulations/verdicts.py`).",
        "",
    ]
    for sw in sweeps:
        lines += [
            f"### {PARAM_LABELS[sw.param]}",
            "",
            "| metric | design | " + " | ".join(f"{v:g}" for v in sw.values) + " |",
            "| --- | --- | " + " | ".join("---" for _ in sw.values) + " |",
        ]
        for _, label, getter in METRICS:
            for design, ys in sw.series(getter).items():
                lines.append(f"| {label} | {design} | " + " | ".join(_cell(y) for y in ys) + " |")
            lines.append(f"| {label} | winner | " + " | ".join(sw.winners(getter, LABELS[0], LABELS[2])) + " |")
        lines += ["", *(f"- {s}." for s in crossover_sentences(sw)), ""]
    for p in plot_paths:
        lines += [f"![{Path(p).stem}]({p})", ""]
    return lines


def write_plots(sweeps: Sequence[Sweep], out_dir: Path) -> list[Path]:
    from simulations.plots import pyplot, save_figure

    plt = pyplot()
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for key, label, getter in METRICS:
        fig, axes = plt.subplots(1, len(sweeps), figsize=(4 * len(sweeps), 3.6))
        for ax, sw in zip(axes, sweeps, strict=True):
            for design, ys in sw.series(getter).items():
                ax.plot(sw.values, [float("nan") if y is None else y for y in ys], marker="o", label=design)
            ax.set_xlabel(PARAM_LABELS[sw.param])
            if sw.param == "commit_cost_x":
                ax.set_xscale("log")
            ax.set_title(label, fontsize="small")
        axes[0].legend(fontsize="x-small")
        fig.tight_layout()
        written.append(save_figure(fig, out_dir / f"crossover_{key}.png"))
    return written
