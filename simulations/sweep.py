"""Run one scenario for each value of a parameter and follow a metric."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from simulations.runner import RunResult, design_json, run_scenario
from simulations.scenario import ScenarioError, load_scenario

DEFAULT_METRIC = "commit_rpcs_per_file.remote_mean"
# Values one sweep may try: each is a full run.
SWEEP_VALUES_MAX = 64


@dataclass(frozen=True, slots=True)
class SweepResult:
    scenario: str
    param: str
    metric: str
    values: tuple[Any, ...]
    # "design/routing" -> metric per value (None: not defined for the design)
    series: dict[str, list[float | None]]
    runs: tuple[RunResult, ...]


def parse_param(spec: str) -> tuple[str, list[Any]]:
    """``brokers_per_az=1,2,4`` -> ("brokers_per_az", [1, 2, 4])."""
    key, sep, raw = spec.partition("=")
    if not sep or not key or not raw:
        raise ScenarioError(f"--param {spec!r}: expected KEY=V1,V2,...")
    values: list[Any] = []
    for v in raw.split(","):
        v = v.strip()
        try:
            values.append(int(v))
        except ValueError:
            try:
                values.append(float(v))
            except ValueError:
                values.append(v)
    if len(values) > SWEEP_VALUES_MAX:
        raise ScenarioError(f"--param {spec!r}: at most {SWEEP_VALUES_MAX} values")
    return key.strip(), values


def metric_of(design: dict[str, Any], path: str) -> float | None:
    """A dotted path into one design's JSON (``produce_latency_ms.p99``)."""
    node: Any = design
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return float(node) if isinstance(node, int | float) and not isinstance(node, bool) else None


def run_sweep(
    scenario: str,
    param: str,
    values: list[Any],
    metric: str,
    seed: int,
    extra_overrides: dict[str, Any] | None = None,
    progress: Callable[[int, int, float], None] | None = None,
    *,
    jobs: int = 1,
) -> SweepResult:
    """``progress(value index, design index, virtual ms)``."""
    series: dict[str, list[float | None]] = {}
    runs = []
    for vi, value in enumerate(values):
        s = load_scenario(scenario, {**(extra_overrides or {}), param: value})
        cb = None if progress is None else (lambda di, ms, vi=vi: progress(vi, di, ms))
        r = run_scenario(s, seed, cb, jobs=jobs)
        runs.append(r)
        for d in r.designs:
            series.setdefault(f"{d.design}/{d.routing}", []).append(metric_of(design_json(d, timing=False), metric))
    return SweepResult(scenario, param, metric, tuple(values), series, tuple(runs))
