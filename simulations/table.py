"""The run's results as a plain-text table: one column per design."""

from __future__ import annotations

from collections.abc import Callable

from partlog.produce.rotation import EARLY_REASONS
from simulations.metrics import DesignResult
from simulations.runner import RunResult
from simulations.scenario import Design


def _num(x: float | None, digits: int = 2) -> str:
    """A cell: counts (ints) as integers with thousands separators, rates
    and means with ``digits`` decimals (k/M above 10^4/10^6)."""
    if x is None:
        return "-"
    if isinstance(x, int) and not isinstance(x, bool):
        return f"{x:,}"
    if abs(x) >= 1e6:
        return f"{x / 1e6:.{digits}f}M"
    if abs(x) >= 1e4:
        return f"{x / 1e3:.{digits}f}k"
    return f"{x:.{digits}f}"


def _speed(x: float) -> str:
    """Simulated over wall time: two significant digits below 10x (0.47x, not 0x)."""
    return f"{x:.0f}x" if x >= 10 else f"{x:.2g}x"


def _files(fn: Callable[[DesignResult], float | None]) -> Callable[[DesignResult], float | None]:
    return lambda d: None if d.design == Design.CLASSIC.value else fn(d)


ROWS: list[tuple[str, Callable[[DesignResult], float | None]]] = [
    ("WAL files", _files(lambda d: d.files)),
    ("commit RPCs/file: local", _files(lambda d: d.commit_local_mean)),
    ("commit RPCs/file: same AZ", _files(lambda d: d.commit_same_az_mean)),
    ("commit RPCs/file: cross AZ", _files(lambda d: d.commit_cross_az_mean)),
    ("commit RPCs/file: remote", _files(lambda d: d.commit_remote_mean)),
    ("commit RPCs/file: remote max", _files(lambda d: d.commit_remote_max)),
    ("distinct leaders/file", _files(lambda d: d.distinct_leaders_mean)),
    ("network commit RPCs/s recv/broker (mean)", _files(lambda d: d.network_commit_rpcs_per_s_per_broker_mean)),
    ("network commit RPCs/s recv/broker (max)", _files(lambda d: d.network_commit_rpcs_per_s_per_broker_max)),
    ("local commits/s per broker (mean)", _files(lambda d: d.local_commits_per_s_per_broker_mean)),
    ("commit RPCs/s at coordinator", lambda d: d.commit_rpcs_per_s_coordinator),
    ("commit store busy, busiest (%)", _files(lambda d: 100 * d.commit_store_utilization_max)),
    ("commit queue wait p99 ms", _files(lambda d: d.commit_queue_wait_ms_p99)),
    ("requests/s received, all nodes", lambda d: d.requests_per_s_total),
    ("  produce requests/s", lambda d: d.produce_requests_per_s),
    ("  network commit RPCs/s", _files(lambda d: d.network_commit_rpcs_per_s)),
    ("  replica fetches/s", lambda d: d.replica_fetches_per_s),
    ("cross-AZ data B/s", lambda d: d.cross_az_data_bytes_per_s),
    ("cross-AZ metadata B/s", lambda d: d.cross_az_metadata_bytes_per_s),
    ("produce latency p50 ms", lambda d: d.latency_ms_p50),
    ("produce latency p99 ms", lambda d: d.latency_ms_p99),
    ("produce latency p99.9 ms", lambda d: d.latency_ms_p999),
    ("send latency p50 ms", lambda d: d.send_latency_ms_p50),
    ("send latency p99 ms", lambda d: d.send_latency_ms_p99),
    ("metadata replication lag p99 ms", lambda d: d.replication_lag_ms_p99),
    ("object PUT/s", lambda d: d.puts_per_s),
    ("  PUT/s, early closes (idle, round_done)", _files(lambda d: _early(d))),
    ("object PUT/s, busiest broker", _files(lambda d: d.puts_per_s_busiest_broker)),
    ("object GET/s", lambda d: d.gets_per_s),
    ("monthly cost USD", lambda d: d.cost.total_usd),
    ("produce requests", lambda d: d.produce_requests),
    ("produce requests retried", lambda d: d.produce_requests_retried),
    ("produce requests failed", lambda d: d.produce_requests_failed),
]


def _early(d: DesignResult) -> float:
    return sum(v for k, v in d.puts_per_s_by_reason.items() if k in EARLY_REASONS)


def format_table(r: RunResult, *, timing: bool = True) -> str:
    heads = [f"{d.design}/{d.routing}" for d in r.designs]
    cells = [[_num(fn(d)) for d in r.designs] for _, fn in ROWS]
    w0 = max(len(name) for name, _ in ROWS)
    widths = [max(len(h), *(len(row[i]) for row in cells)) for i, h in enumerate(heads)]
    lines = [
        f"scenario {r.scenario.name}, seed {r.seed}, {r.simulated_s:g} simulated s",
        "  ".join([" " * w0, *(h.rjust(w) for h, w in zip(heads, widths, strict=True))]),
    ]
    for (name, _), row in zip(ROWS, cells, strict=True):
        lines.append("  ".join([name.ljust(w0), *(c.rjust(w) for c, w in zip(row, widths, strict=True))]))
    for ms, what in r.designs[0].events if r.designs else ():
        lines.append(f"event at {ms / 1000:g} s: {what}")
    if timing:
        per = ", ".join(f"{d.design}/{d.routing} {_speed(d.simulated_s / d.wall_s)}" for d in r.designs if d.wall_s > 0)
        lines.append(f"wall {r.wall_s:.2f} s, speed-up {_speed(r.speedup)} for the whole run ({per})")
    return "\n".join(lines)
