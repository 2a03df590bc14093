"""What one simulated design records while it runs, and the summary made
from it afterwards.

Recording is on the hot path, so the recorder only appends to lists and
bumps counters; every derived number (means, percentiles, rates, per-broker
breakdowns) is computed once in :func:`summarize`.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from simulations.cost import MonthlyCost, monthly_cost
from simulations.scenario import GetMode, Scenario

if TYPE_CHECKING:
    from simulations.commit_server import CommitServer

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
    # Brokers, and their AZs, holding a replica of any of the file's
    # partitions: who may read it (GETs by get_mode).
    replica_brokers: int = 0
    replica_azs: int = 0

    @property
    def remote(self) -> int:
        return self.same_az + self.cross_az

    @property
    def total(self) -> int:
        return self.local + self.same_az + self.cross_az


@dataclass(slots=True)
class Recorder:
    files: list[FileCommits] = field(default_factory=list)
    # node id -> [commits it made to itself (in-process calls), commit RPCs
    # received over the network from other nodes]
    commits_received: dict[int, list[int]] = field(default_factory=dict)
    # (send time, latency) of each answered produce request, both ms
    latencies: list[tuple[float, float]] = field(default_factory=list)
    # (send time, latency) of each producer send whose produce requests were
    # all answered without error: the latency of its slowest request
    send_latencies: list[tuple[float, float]] = field(default_factory=list)
    # send id -> [produce requests not answered yet, send time, slowest latency so far]
    sends_pending: dict[int, list[float]] = field(default_factory=dict)
    sends: int = 0
    sends_failed: int = 0
    # ... of which the producer was alive (not lost with its AZ)
    sends_failed_live: int = 0
    produce_requests: int = 0
    produce_bytes: int = 0
    # (virtual ms, produce requests, batches, why) of each failure, when it
    # happened (for a produce request: when its broker answered it or died)
    failures: list[tuple[float, int, int, str]] = field(default_factory=list)
    cross_az_data_bytes: int = 0
    # Cross-AZ metadata: commit RPCs (requests and answers) and metadata-log
    # replication (followers' fetches of the entries; the coordinator's replicas).
    cross_az_commit_bytes: int = 0
    cross_az_replication_bytes: int = 0
    puts: int = 0
    puts_failed: int = 0
    # (virtual ms, broker, rotation reason) of each PUT: why its file closed
    # (partlog.produce.rotation), for PUTs/s by reason and the budget check.
    put_log: list[tuple[float, int, str]] = field(default_factory=list)
    # One sample per commit with followers: when the slowest follower has
    # appended it (one-way to it plus its apply).
    replication_lag_ms: list[float] = field(default_factory=list)
    # Fetches by followers (coordinator replicas) that carried new entries:
    # one per follower per commit (classic: per produce request).
    replica_fetches: int = 0
    # Per batch, from its oldest record's send() to the acknowledgement, as
    # partlog's client measures (record producers only: record_producers.py)
    batch_latencies: list[float] = field(default_factory=list)
    # Each commit's time from its send to its answer (local ones included).
    commit_rpc_ms: list[float] = field(default_factory=list)
    # (virtual ms, batches, why) of each produce request the producer retried
    retries: list[tuple[float, int, str]] = field(default_factory=list)

    @property
    def cross_az_metadata_bytes(self) -> int:
        return self.cross_az_commit_bytes + self.cross_az_replication_bytes

    @property
    def produce_requests_failed(self) -> int:
        return sum(f[1] for f in self.failures)

    @property
    def batches_failed(self) -> int:
        return sum(f[2] for f in self.failures)

    def commit_received(self, node_id: int, remote: bool) -> None:
        counts = self.commits_received.get(node_id)
        if counts is None:
            counts = self.commits_received[node_id] = [0, 0]
        counts[remote] += 1

    def send_started(self, sent_ms: float, requests: int) -> int:
        """A producer send split into ``requests`` produce requests; its id."""
        send_id = self.sends
        self.sends += 1
        if requests:
            self.sends_pending[send_id] = [float(requests), sent_ms, 0.0]
        return send_id

    def answered(self, send_id: int, sent_ms: float, latency_ms: float) -> None:
        """One produce request answered without error ``latency_ms`` after it was sent."""
        self.latencies.append((sent_ms, latency_ms))
        s = self.sends_pending.get(send_id)
        if s is None:
            return  # the send already failed
        s[0] -= 1
        if latency_ms > s[2]:
            s[2] = latency_ms
        if s[0] == 0:
            del self.sends_pending[send_id]
            self.send_latencies.append((sent_ms, s[2]))

    def retried(self, now_ms: float, send_id: int, batches: int, why: str) -> None:
        """A failed produce request's ``batches`` will be sent again."""
        self.retries.append((now_ms, batches, why))

    def requests_replaced(self, send_id: int, requests: int) -> None:
        """A retry sends a failed request's batches as ``requests`` requests."""
        s = self.sends_pending.get(send_id)
        if s is not None:
            s[0] += requests - 1
            if s[0] == 0:  # (nothing was sent again: cannot happen with requests >= 1)
                del self.sends_pending[send_id]

    def failed(self, now_ms: float, send_id: int | None, requests: int, batches: int, why: str) -> None:
        """``requests`` produce requests (``batches`` batches) of one send
        failed at ``now_ms``; ``why``: a Kafka error name in lower case, or
        broker_dead (refused by a dead broker), broker_died (held by a broker
        when it died), overloaded, no_leader (the producer knew no leader)."""
        self.failures.append((now_ms, requests, batches, why))
        if send_id is not None and self.sends_pending.pop(send_id, None) is not None:
            self.sends_failed += 1
            if why != "producer_gone":
                self.sends_failed_live += 1


@dataclass(frozen=True, slots=True)
class BrokerFanout:
    broker_id: int
    az: str
    files: int
    local_mean: float
    remote_mean: float
    remote_min: int
    remote_max: int
    # Commit RPCs other nodes sent it over the network, per second.
    network_commit_rpcs_received_per_s: float
    # Commits it made to its own store (in-process calls, no RPC), per second.
    local_commits_per_s: float


@dataclass(frozen=True, slots=True)
class FailureWindow:
    """Failures from one event (or the start) to the next event (or the end)."""

    from_ms: float
    to_ms: float
    # The event that opens the window ("start" for the first).
    after: str
    produce_requests_failed: int
    batches_failed: int
    # why -> produce requests (batches when no request failed: no_leader)
    produce_requests_failed_by_reason: dict[str, int]
    # Failed produce requests the producers sent again (not failures yet).
    produce_requests_retried: int = 0


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
    # Commit RPCs received over the network per broker and second (the
    # coordinator design: brokers receive none).
    network_commit_rpcs_per_s_per_broker_mean: float
    network_commit_rpcs_per_s_per_broker_max: float
    # A broker's commits to its own store (in-process, not RPCs) per second.
    local_commits_per_s_per_broker_mean: float
    local_commits_per_s_per_broker_max: float
    commit_rpcs_per_s_coordinator: float | None
    # WAL files one broker writes per second, for the busiest broker.
    files_per_s_per_broker_max: float
    produce_bytes_per_s: float
    cross_az_data_bytes_per_s: float
    cross_az_metadata_bytes_per_s: float
    cross_az_commit_bytes_per_s: float
    cross_az_replication_bytes_per_s: float
    # Per produce request (one producer -> one broker).
    latency_ms_p50: float | None
    latency_ms_p99: float | None
    latency_ms_p999: float | None
    # Per producer send (all of its produce requests answered).
    send_latency_ms_p50: float | None
    send_latency_ms_p99: float | None
    send_latency_ms_p999: float | None
    sends: int
    sends_failed: int
    puts_per_s: float
    gets_per_s: float
    cost: MonthlyCost
    replication_lag_ms_p50: float | None
    replication_lag_ms_p99: float | None
    produce_requests: int
    produce_requests_failed: int
    batches_failed: int
    # Failed produce requests the producers sent again (Kafka's retries).
    produce_requests_retried: int
    failure_windows: tuple[FailureWindow, ...]
    per_broker: tuple[BrokerFanout, ...]
    # Per simulated second: mean remote commit RPCs per file, latency p99.
    timeline_remote_mean: tuple[float | None, ...]
    timeline_latency_ms_p99: tuple[float | None, ...]
    # (virtual ms, what happened) from the scenario's events.
    events: tuple[tuple[float, str], ...]
    simulated_s: float
    wall_s: float
    # The commit targets' stores (commit_server.py): the busiest one's
    # share of time busy, and each commit's wait in a store's queue.
    commit_store_utilization_max: float = 0.0
    commit_store_utilization_mean: float = 0.0
    commit_queue_wait_ms_p50: float | None = None
    commit_queue_wait_ms_p99: float | None = None
    # Group commits per second over all commit targets.
    group_commits_per_s: float = 0.0
    # Sends that failed while their producer lived (not lost with its AZ).
    sends_failed_live: int = 0
    # Sends unanswered at the end (in the send latencies with their age then).
    sends_pending_at_end: int = 0
    # Commit time, send to answer (every commit, local ones included).
    commit_ms_p50: float | None = None
    commit_ms_p99: float | None = None
    # Per batch from its oldest record (record producers only).
    batch_latency_ms_p50: float | None = None
    batch_latency_ms_p99: float | None = None
    batches_acked: int = 0
    # Requests nodes receive, per second, over the whole cluster: produce
    # requests from clients, commit RPCs over the network, replica fetches.
    produce_requests_per_s: float = 0.0
    network_commit_rpcs_per_s: float = 0.0
    replica_fetches_per_s: float = 0.0
    # PUTs/s by rotation reason (why each file closed), and each PUT as
    # (virtual ms, broker, reason): the PUT budget's check.
    puts_per_s_by_reason: dict[str, float] = field(default_factory=dict)
    put_log: tuple[tuple[float, int, str], ...] = ()

    @property
    def puts_per_s_busiest_broker(self) -> float:
        counts = Counter(broker for _, broker, _ in self.put_log)
        return max(counts.values(), default=0) / self.simulated_s if self.simulated_s else 0.0

    @property
    def requests_per_s_total(self) -> float:
        return self.produce_requests_per_s + self.network_commit_rpcs_per_s + self.replica_fetches_per_s

    # Every WAL file's commits, for checks beyond the summary (not in JSON).
    file_commits: tuple[FileCommits, ...] = ()


def percentile(sorted_values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile of already sorted values (None when empty)."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def gets_per_file(scenario: Scenario, f: FileCommits) -> float:
    """The GETs that read file ``f``: ``gets_per_file`` when the scenario
    gives it, else by its ``get_mode``."""
    o = scenario.object_store
    if o.gets_per_file is not None:
        return o.gets_per_file
    if o.get_mode is GetMode.SHARED_CACHE:
        return 1.0
    if o.get_mode is GetMode.PER_BROKER:
        return float(f.replica_brokers)
    return float(f.replica_azs)


def _mean(values: Sequence[int] | Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def failure_windows(
    failures: Sequence[tuple[float, int, int, str]],
    events: Sequence[tuple[float, str]],
    end_ms: float,
    retries: Sequence[tuple[float, int, str]] = (),
) -> tuple[FailureWindow, ...]:
    """Failures counted per window: from the start to the first event, from
    each event to the next, from the last to ``end_ms``."""
    bounds = [(0.0, "start"), *((ms, what) for ms, what in events if ms < end_ms)]
    out = []
    for i, (lo, what) in enumerate(bounds):
        hi = bounds[i + 1][0] if i + 1 < len(bounds) else end_ms
        last = i + 1 == len(bounds)
        inside = [f for f in failures if lo <= f[0] < hi or (last and f[0] == hi)]
        why: dict[str, int] = {}
        for _, n, b, reason in inside:
            why[reason] = why.get(reason, 0) + (n or b)
        retried = sum(1 for r in retries if lo <= r[0] < hi or (last and r[0] == hi))
        out.append(
            FailureWindow(
                lo, hi, what, sum(f[1] for f in inside), sum(f[2] for f in inside), dict(sorted(why.items())), retried
            )
        )
    return tuple(out)


def summarize(
    scenario: Scenario,
    design: str,
    routing: str,
    rec: Recorder,
    broker_azs: dict[int, str],
    coordinator_id: int | None,
    events: list[tuple[float, str]],
    wall_s: float,
    servers: Mapping[int, CommitServer] | None = None,
) -> DesignResult:
    duration_s = scenario.duration_s
    servers = servers or {}
    utilization = [sv.utilization(duration_s * MS_PER_S) for sv in servers.values()]
    waits = sorted(w for sv in servers.values() for w in sv.wait_ms)
    files = rec.files
    remote = [f.remote for f in files]
    hist: dict[int, int] = {}
    for r in remote:
        hist[r] = hist.get(r, 0) + 1
    per_broker = []
    for b, az in sorted(broker_azs.items()):
        mine = [f for f in files if f.broker_id == b]
        local, received = rec.commits_received.get(b, [0, 0])
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
                local / duration_s,
            )
        )
    broker_rates = [pb.network_commit_rpcs_received_per_s for pb in per_broker]
    local_rates = [pb.local_commits_per_s for pb in per_broker]
    coordinator_rate = None
    if coordinator_id is not None:
        coordinator_rate = sum(rec.commits_received.get(coordinator_id, [0, 0])) / duration_s
    lat = sorted(latency for _, latency in rec.latencies)
    # A send still unanswered at the end counts with its age then, a lower
    # bound: leaving it out would hide exactly the sends a failure stalls.
    end_ms = duration_s * MS_PER_S
    send_lat = sorted(
        [latency for _, latency in rec.send_latencies] + [end_ms - p[1] for p in rec.sends_pending.values()]
    )
    batch_lat = sorted(rec.batch_latencies)
    commit_ms = sorted(rec.commit_rpc_ms)
    lag = sorted(rec.replication_lag_ms)
    puts_per_s = rec.puts / duration_s
    gets_per_s = sum(gets_per_file(scenario, f) for f in files) / duration_s
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
        network_commit_rpcs_per_s_per_broker_mean=_mean(broker_rates),
        network_commit_rpcs_per_s_per_broker_max=max(broker_rates, default=0.0),
        local_commits_per_s_per_broker_mean=_mean(local_rates),
        local_commits_per_s_per_broker_max=max(local_rates, default=0.0),
        commit_rpcs_per_s_coordinator=coordinator_rate,
        files_per_s_per_broker_max=max((pb.files for pb in per_broker), default=0) / duration_s,
        produce_bytes_per_s=rec.produce_bytes / duration_s,
        cross_az_data_bytes_per_s=data_per_s,
        cross_az_metadata_bytes_per_s=metadata_per_s,
        cross_az_commit_bytes_per_s=rec.cross_az_commit_bytes / duration_s,
        cross_az_replication_bytes_per_s=rec.cross_az_replication_bytes / duration_s,
        latency_ms_p50=percentile(lat, 50),
        latency_ms_p99=percentile(lat, 99),
        latency_ms_p999=percentile(lat, 99.9),
        send_latency_ms_p50=percentile(send_lat, 50),
        send_latency_ms_p99=percentile(send_lat, 99),
        send_latency_ms_p999=percentile(send_lat, 99.9),
        sends=rec.sends,
        sends_failed=rec.sends_failed,
        puts_per_s=puts_per_s,
        gets_per_s=gets_per_s,
        cost=monthly_cost(scenario, puts_per_s, gets_per_s, data_per_s + metadata_per_s),
        replication_lag_ms_p50=percentile(lag, 50),
        replication_lag_ms_p99=percentile(lag, 99),
        produce_requests=rec.produce_requests,
        produce_requests_failed=rec.produce_requests_failed,
        batches_failed=rec.batches_failed,
        failure_windows=failure_windows(rec.failures, events, duration_s * MS_PER_S, rec.retries),
        produce_requests_retried=len(rec.retries),
        per_broker=tuple(per_broker),
        timeline_remote_mean=tuple(_mean(v) if v else None for v in by_second_files),
        timeline_latency_ms_p99=tuple(percentile(sorted(v), 99) for v in by_second_lat),
        events=tuple(events),
        simulated_s=duration_s,
        wall_s=wall_s,
        commit_store_utilization_max=max(utilization, default=0.0),
        commit_store_utilization_mean=_mean(utilization),
        commit_queue_wait_ms_p50=percentile(waits, 50),
        commit_queue_wait_ms_p99=percentile(waits, 99),
        group_commits_per_s=sum(sv.groups for sv in servers.values()) / duration_s,
        sends_failed_live=rec.sends_failed_live,
        sends_pending_at_end=len(rec.sends_pending),
        produce_requests_per_s=rec.produce_requests / duration_s,
        commit_ms_p50=percentile(commit_ms, 50),
        commit_ms_p99=percentile(commit_ms, 99),
        batch_latency_ms_p50=percentile(batch_lat, 50),
        batch_latency_ms_p99=percentile(batch_lat, 99),
        batches_acked=len(batch_lat),
        network_commit_rpcs_per_s=sum(c[1] for c in rec.commits_received.values()) / duration_s,
        replica_fetches_per_s=rec.replica_fetches / duration_s,
        file_commits=tuple(files),
        puts_per_s_by_reason={
            reason: n / duration_s for reason, n in sorted(Counter(r for _, _, r in rec.put_log).items())
        },
        put_log=tuple(rec.put_log),
    )
