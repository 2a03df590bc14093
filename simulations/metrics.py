"""What one simulated design records while it runs, and the summary made
from it afterwards.

Recording is on the hot path, so the recorder only appends to lists and
bumps counters; every derived number (means, percentiles, rates, per-broker
breakdowns) is computed once in :func:`summarize`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from simulations.cost import MonthlyCost, monthly_cost
from simulations.scenario import Scenario

MS_PER_S = 1000.0


@dataclass(frozen=True, slots=True)
class FileCommits:
    """The commit RPCs of one WAL file, as its uploader sent them."""

    at_ms: float
    broker_id: int
    local: int
    same_az: int
    cross_az: int
    # Distinct partitions in the file (its footer).
    partitions: int
    # Distinct leader brokers among the file's partitions when its commits
    # were released (partlog: one commit RPC each; the coordinator design
    # sends one RPC whatever this is).
    distinct_leaders: int

    @property
    def remote(self) -> int:
        return self.same_az + self.cross_az

    @property
    def total(self) -> int:
        return self.local + self.same_az + self.cross_az


@dataclass(slots=True)
class Recorder:
    files: list[FileCommits] = field(default_factory=list)
    # node id -> [commit RPCs received from itself, from other nodes]
    commits_received: dict[int, list[int]] = field(default_factory=dict)
    # (send time, latency) of each answered produce request, both ms
    latencies: list[tuple[float, float]] = field(default_factory=list)
    produce_requests: int = 0
    produce_requests_failed: int = 0
    batches_failed: int = 0
    cross_az_data_bytes: int = 0
    cross_az_metadata_bytes: int = 0
    puts: int = 0
    puts_failed: int = 0
    bytes_uploaded: int = 0
    # One sample per commit with followers: when the slowest follower has it.
    replication_lag_ms: list[float] = field(default_factory=list)

    def commit_received(self, node_id: int, remote: bool) -> None:
        counts = self.commits_received.get(node_id)
        if counts is None:
            counts = self.commits_received[node_id] = [0, 0]
        counts[remote] += 1


@dataclass(frozen=True, slots=True)
class BrokerFanout:
    broker_id: int
    az: str
    files: int
    local_mean: float
    remote_mean: float
    remote_min: int
    remote_max: int
    commit_rpcs_received_per_s: float


@dataclass(frozen=True, slots=True)
class DesignResult:
    design: str
    routing: str
    files: int
    commit_local_mean: float
    commit_local_max: int
    commit_same_az_mean: float
    commit_cross_az_mean: float
    commit_remote_mean: float
    commit_remote_max: int
    distinct_leaders_mean: float
    # remote commit RPCs per file -> number of files
    commit_remote_histogram: dict[int, int]
    commit_rpcs_per_s_per_broker_mean: float
    commit_rpcs_per_s_per_broker_max: float
    commit_rpcs_per_s_coordinator: float | None
    cross_az_data_bytes_per_s: float
    cross_az_metadata_bytes_per_s: float
    latency_ms_p50: float | None
    latency_ms_p99: float | None
    latency_ms_p999: float | None
    puts_per_s: float
    gets_per_s: float
    cost: MonthlyCost
    replication_lag_ms_p50: float | None
    replication_lag_ms_p99: float | None
    produce_requests: int
    produce_requests_failed: int
    batches_failed: int
    per_broker: tuple[BrokerFanout, ...]
    # Per simulated second: mean remote commit RPCs per file, latency p99.
    timeline_remote_mean: tuple[float | None, ...]
    timeline_latency_ms_p99: tuple[float | None, ...]
    # (virtual ms, what happened) from the scenario's events.
    events: tuple[tuple[float, str], ...]
    simulated_s: float
    wall_s: float
    # Every WAL file's commits, for checks beyond the summary (not in JSON).
    file_commits: tuple[FileCommits, ...] = ()


def percentile(sorted_values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile of already sorted values (None when empty)."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def _mean(values: Sequence[int] | Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def summarize(
    scenario: Scenario,
    design: str,
    routing: str,
    rec: Recorder,
    broker_azs: dict[int, str],
    coordinator_id: int | None,
    events: list[tuple[float, str]],
    wall_s: float,
) -> DesignResult:
    duration_s = scenario.duration_s
    files = rec.files
    remote = [f.remote for f in files]
    hist: dict[int, int] = {}
    for r in remote:
        hist[r] = hist.get(r, 0) + 1
    per_broker = []
    for b, az in sorted(broker_azs.items()):
        mine = [f for f in files if f.broker_id == b]
        received = sum(rec.commits_received.get(b, [0, 0]))
        per_broker.append(
            BrokerFanout(
                b,
                az,
                len(mine),
                _mean([f.local for f in mine]),
                _mean([f.remote for f in mine]),
                min((f.remote for f in mine), default=0),
                max((f.remote for f in mine), default=0),
                received / duration_s,
            )
        )
    broker_rates = [pb.commit_rpcs_received_per_s for pb in per_broker]
    coordinator_rate = None
    if coordinator_id is not None:
        coordinator_rate = sum(rec.commits_received.get(coordinator_id, [0, 0])) / duration_s
    lat = sorted(latency for _, latency in rec.latencies)
    lag = sorted(rec.replication_lag_ms)
    puts_per_s = rec.puts / duration_s
    gets_per_s = (rec.puts - rec.puts_failed) * scenario.gets_per_file / duration_s if rec.puts else 0.0
    data_per_s = rec.cross_az_data_bytes / duration_s
    metadata_per_s = rec.cross_az_metadata_bytes / duration_s
    seconds = max(1, math.ceil(duration_s))
    by_second_files: list[list[int]] = [[] for _ in range(seconds)]
    for f in files:
        by_second_files[min(seconds - 1, int(f.at_ms / MS_PER_S))].append(f.remote)
    by_second_lat: list[list[float]] = [[] for _ in range(seconds)]
    for sent, latency in rec.latencies:
        by_second_lat[min(seconds - 1, int(sent / MS_PER_S))].append(latency)
    return DesignResult(
        design=design,
        routing=routing,
        files=len(files),
        commit_local_mean=_mean([f.local for f in files]),
        commit_local_max=max((f.local for f in files), default=0),
        commit_same_az_mean=_mean([f.same_az for f in files]),
        commit_cross_az_mean=_mean([f.cross_az for f in files]),
        commit_remote_mean=_mean(remote),
        commit_remote_max=max(remote, default=0),
        distinct_leaders_mean=_mean([f.distinct_leaders for f in files]),
        commit_remote_histogram=dict(sorted(hist.items())),
        commit_rpcs_per_s_per_broker_mean=_mean(broker_rates),
        commit_rpcs_per_s_per_broker_max=max(broker_rates, default=0.0),
        commit_rpcs_per_s_coordinator=coordinator_rate,
        cross_az_data_bytes_per_s=data_per_s,
        cross_az_metadata_bytes_per_s=metadata_per_s,
        latency_ms_p50=percentile(lat, 50),
        latency_ms_p99=percentile(lat, 99),
        latency_ms_p999=percentile(lat, 99.9),
        puts_per_s=puts_per_s,
        gets_per_s=gets_per_s,
        cost=monthly_cost(scenario, puts_per_s, gets_per_s, data_per_s + metadata_per_s),
        replication_lag_ms_p50=percentile(lag, 50),
        replication_lag_ms_p99=percentile(lag, 99),
        produce_requests=rec.produce_requests,
        produce_requests_failed=rec.produce_requests_failed,
        batches_failed=rec.batches_failed,
        per_broker=tuple(per_broker),
        timeline_remote_mean=tuple(_mean(v) if v else None for v in by_second_files),
        timeline_latency_ms_p99=tuple(percentile(sorted(v), 99) for v in by_second_lat),
        events=tuple(events),
        simulated_s=duration_s,
        wall_s=wall_s,
        file_commits=tuple(files),
    )
