"""A whole run: every design of a scenario with one seed, side by side, and
its JSON form.

The designs run one after the other, each on its own virtual clock, with
the same producer streams (same sends, same partitions).  ``wall_s`` and
``speedup`` are the only fields that differ between two runs with one seed;
:func:`to_json` leaves them out with ``timing=False`` so outputs can be
compared byte for byte.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

from simulations.metrics import DesignResult
from simulations.scenario import Design, Routing, Scenario
from simulations.simulation import simulate

# Significant digits kept in JSON floats: enough for any comparison a
# report makes, few enough that the output stays readable.
JSON_DIGITS = 6


@dataclass(frozen=True, slots=True)
class RunResult:
    scenario: Scenario
    seed: int
    designs: tuple[DesignResult, ...]
    wall_s: float

    @property
    def simulated_s(self) -> float:
        return self.scenario.duration_s

    @property
    def speedup(self) -> float:
        """Simulated seconds per wall second for the whole run (all designs,
        one after the other)."""
        return self.simulated_s / self.wall_s if self.wall_s > 0 else float("inf")

    def design(self, design: str, routing: str | None = None) -> DesignResult:
        for d in self.designs:
            if d.design == design and (routing is None or d.routing == routing):
                return d
        raise KeyError(f"no design {design!r} routing {routing!r} in this run")


def design_runs(scenario: Scenario) -> list[tuple[Design, Routing]]:
    """What one run simulates: partlog once per routing policy, then the others."""
    out: list[tuple[Design, Routing]] = []
    for d in scenario.designs:
        if d is Design.PARTLOG:
            out += [(d, r) for r in scenario.routings]
        elif d is Design.COORDINATOR:
            out.append((d, Routing.ANY_BROKER))
        else:
            out.append((d, Routing.LEADER_ONLY))
    return out


def run_scenario(
    scenario: Scenario,
    seed: int,
    progress: Callable[[int, float], None] | None = None,
    *,
    jobs: int = 1,
) -> RunResult:
    """Simulate every design; ``progress(design index, virtual ms)``.

    With ``jobs`` > 1 the designs run in that many processes at once (each
    design is independent and seeded alike, so the results are the same as
    one after the other); progress is then reported per finished design."""
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    runs = design_runs(scenario)
    start = time.perf_counter()
    if jobs == 1 or len(runs) == 1:
        results = []
        for i, (design, routing) in enumerate(runs):
            cb = None if progress is None else (lambda ms, i=i: progress(i, ms))
            results.append(simulate(scenario, design, routing, seed, cb))
    else:
        with ProcessPoolExecutor(min(jobs, len(runs))) as pool:
            futures = [pool.submit(simulate, scenario, design, routing, seed) for design, routing in runs]
            for i, f in enumerate(futures):
                f.result()
                if progress is not None:
                    progress(i, scenario.duration_s * 1000)
            results = [f.result() for f in futures]
    return RunResult(scenario, seed, tuple(results), time.perf_counter() - start)


def _f(x: float | None) -> float | None:
    if x is None:
        return None
    return float(f"{x:.{JSON_DIGITS}g}")


def design_json(d: DesignResult, *, timing: bool) -> dict[str, Any]:
    has_files = d.design != Design.CLASSIC.value
    out: dict[str, Any] = {
        "design": d.design,
        "routing": d.routing,
        "wal_files": d.files if has_files else None,
        "commit_rpcs_per_file": (
            {
                "local_mean": _f(d.commit_local_mean),
                "same_az_mean": _f(d.commit_same_az_mean),
                "cross_az_mean": _f(d.commit_cross_az_mean),
                "remote_mean": _f(d.commit_remote_mean),
                "remote_max": d.commit_remote_max,
                "distinct_leader_brokers_mean": _f(d.distinct_leaders_mean),
                "remote_histogram": {str(k): v for k, v in d.commit_remote_histogram.items()},
            }
            if has_files
            else None
        ),
        # Commit RPCs received over the network (network_*: from other nodes)
        # and commits a broker makes to its own store in-process (local_*).
        "commit_rpcs_per_s": (
            {
                "network_received_per_broker_mean": _f(d.network_commit_rpcs_per_s_per_broker_mean),
                "network_received_per_broker_max": _f(d.network_commit_rpcs_per_s_per_broker_max),
                "local_per_broker_mean": _f(d.local_commits_per_s_per_broker_mean),
                "local_per_broker_max": _f(d.local_commits_per_s_per_broker_max),
                "coordinator": _f(d.commit_rpcs_per_s_coordinator),
            }
            if has_files
            else None
        ),
        # The commit targets' stores (simulations/commit_server.py).
        "commit_store": (
            {
                "utilization_max": _f(d.commit_store_utilization_max),
                "utilization_mean": _f(d.commit_store_utilization_mean),
                "queue_wait_ms": {"p50": _f(d.commit_queue_wait_ms_p50), "p99": _f(d.commit_queue_wait_ms_p99)},
                "group_commits_per_s": _f(d.group_commits_per_s),
            }
            if has_files
            else None
        ),
        # Requests all nodes receive per second: total = the three below.
        "requests_per_s": {
            "total": _f(d.requests_per_s_total),
            "produce": _f(d.produce_requests_per_s),
            "network_commit_rpcs": _f(d.network_commit_rpcs_per_s),
            "replica_fetches": _f(d.replica_fetches_per_s),
        },
        "wal_files_per_s_busiest_broker": _f(d.files_per_s_per_broker_max) if has_files else None,
        "produce_bytes_per_s": _f(d.produce_bytes_per_s),
        "cross_az_bytes_per_s": {
            "data": _f(d.cross_az_data_bytes_per_s),
            "metadata": _f(d.cross_az_metadata_bytes_per_s),
        },
        # metadata = commit_rpcs + replication
        "cross_az_metadata_bytes_per_s": {
            "commit_rpcs": _f(d.cross_az_commit_bytes_per_s),
            "replication": _f(d.cross_az_replication_bytes_per_s),
        },
        # Per produce request (a producer's request to one broker).
        "produce_latency_ms": {"p50": _f(d.latency_ms_p50), "p99": _f(d.latency_ms_p99), "p999": _f(d.latency_ms_p999)},
        # Per producer send (every produce request of the send answered).
        "send_latency_ms": {
            "p50": _f(d.send_latency_ms_p50),
            "p99": _f(d.send_latency_ms_p99),
            "p999": _f(d.send_latency_ms_p999),
        },
        "commit_ms": {"p50": _f(d.commit_ms_p50), "p99": _f(d.commit_ms_p99)} if has_files else None,
        # Record producers only: per batch from its oldest record, as partlog's client measures.
        "batch_latency_ms": (
            {"p50": _f(d.batch_latency_ms_p50), "p99": _f(d.batch_latency_ms_p99), "batches": d.batches_acked}
            if d.batches_acked
            else None
        ),
        "replication_lag_ms": {"p50": _f(d.replication_lag_ms_p50), "p99": _f(d.replication_lag_ms_p99)},
        "object_requests_per_s": {"put": _f(d.puts_per_s), "get": _f(d.gets_per_s)},
        # Why each WAL file closed (partlog/produce/rotation.py), PUTs/s by reason.
        "puts_per_s_by_reason": {k: _f(v) for k, v in d.puts_per_s_by_reason.items()},
        "monthly_cost_usd": _f(d.cost.total_usd),
        "monthly_cost_breakdown_usd": {
            "put": _f(d.cost.put_usd),
            "get": _f(d.cost.get_usd),
            "cross_az": _f(d.cost.cross_az_usd),
        },
        "sends": d.sends,
        "sends_failed": d.sends_failed,
        "sends_failed_live_producers": d.sends_failed_live,
        # Unanswered at the end: in send_latency_ms with their age then (a lower bound).
        "sends_pending_at_end": d.sends_pending_at_end,
        "produce_requests": d.produce_requests,
        "produce_requests_failed": d.produce_requests_failed,
        "batches_failed": d.batches_failed,
        "produce_requests_retried": d.produce_requests_retried,
        "failures_by_window": [
            {
                "from_s": _f(w.from_ms / 1000),
                "to_s": _f(w.to_ms / 1000),
                "after": w.after,
                "produce_requests_failed": w.produce_requests_failed,
                "batches_failed": w.batches_failed,
                "retried": w.produce_requests_retried,
                "by_reason": w.produce_requests_failed_by_reason,
            }
            for w in d.failure_windows
        ],
        "per_broker": [
            {
                "broker": b.broker_id,
                "az": b.az,
                "wal_files": b.files,
                "local_mean": _f(b.local_mean),
                "remote_mean": _f(b.remote_mean),
                "remote_min": b.remote_min,
                "remote_max": b.remote_max,
                "network_commit_rpcs_received_per_s": _f(b.network_commit_rpcs_received_per_s),
                "local_commits_per_s": _f(b.local_commits_per_s),
            }
            for b in d.per_broker
        ]
        if has_files
        else [],
        "timeline": {
            "remote_commit_rpcs_per_file_mean": [_f(x) for x in d.timeline_remote_mean] if has_files else [],
            "produce_latency_ms_p99": [_f(x) for x in d.timeline_latency_ms_p99],
        },
    }
    if timing:
        out["wall_s"] = _f(d.wall_s)
        out["speedup"] = _f(d.simulated_s / d.wall_s) if d.wall_s > 0 else None
    return out


def to_json(r: RunResult, *, timing: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {
        "scenario": r.scenario.name,
        "seed": r.seed,
        "simulated_s": _f(r.simulated_s),
        "commit_cost": {
            "leader": r.scenario.commit.leader.describe(),
            "coordinator": r.scenario.commit.coordinator.describe(),
        },
        "events": [{"at_s": _f(ms / 1000), "what": what} for ms, what in (r.designs[0].events if r.designs else ())],
        "designs": [design_json(d, timing=timing) for d in r.designs],
    }
    if timing:
        out["wall_s"] = _f(r.wall_s)
        out["speedup"] = _f(r.speedup)
    return out
