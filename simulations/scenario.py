"""Scenarios: what cluster, what load, what happens.  Loaded from TOML
(``simulations/scenarios/*.toml``) and validated; every error names the file
and the key.

A scenario file::

    name = "balanced-3az"
    description = "..."
    duration_s = 60
    designs = ["partlog", "coordinator", "classic"]
    routings = ["az-representative"]       # partlog's routing policies to compare

    [cluster]
    azs = ["az1", "az2", "az3"]
    brokers_per_az = 2                     # or one number per AZ: [3, 1]
    partitions = 60
    replication_factor = 3
    coordinator_az = "az1"                 # design (b): where the coordinator sits

    [[producers]]
    az = "az1"
    count = 1
    sends_per_s = 25                       # Poisson, per producer
    partitions_per_send = 3
    batch_bytes = 4096
    acks = "all"                           # or "1"
    skew = 0                               # Zipf exponent of partition choice (0: uniform)
    retries = true                         # Kafka's retries: retry_backoff_ms 100, retry_backoff_max_ms 1000,
                                           # delivery_timeout_ms 120000, request_timeout_ms 30000
    # or, instead of sends_per_s: records as partlog's client sends them
    # records_per_s = 500, record_bytes = 100, linger_ms = 5

    [buffer]        commit_interval_ms, buffer_bytes_max, inflight_bytes_max, uploads_inflight_max,
                    rotation_grace_ms (default 2; >= commit_interval_ms: the interval-only rule),
                    wal_puts_per_s_max (early closes a second per broker; default one per
                    commit interval): the rotation rule, docs/design/rotation.md
    [network]       rtt_same_az_ms_p50/_p99, rtt_cross_az_ms_p50/_p99
    [object_store]  put_ms_p50/_p99, put_usd_per_1000, get_usd_per_1000,
                    put_mb_per_s, get_mode ("per-az-cache", "per-broker", "shared-cache"),
                    gets_per_file (overrides get_mode; 0 means none), put_error_rate
    [commit]        apply_ms_p50/_p99, apply_us_per_batch, profile (a file: the leader's
                    store), coordinator_ms_p50/_p99, coordinator_us_per_batch,
                    coordinator_profile (unset: the leader's store), follower_apply_ms_p50/_p99,
                    coordinator_replication_factor, commit_rpc_timeout_ms
    [metadata]      broker_propagation_ms, client_propagation_ms, session_timeout_ms,
                    coordinator_failover_ms (unset: the session timeout)
    [cost]          cross_az_usd_per_gb

    [[events]]
    at_s = 20
    kind = "move-leaders"                  # partitions = N moved to their next replica
    # kind = "broker-failure", broker = 3, mode = "refuse" (default) or "blackhole"
    # kind = "az-loss", az = "az3", mode = "blackhole" (default) or "refuse"
    # kind = "coordinator-failure", mode = ..., failover_ms = (default coordinator_failover_ms)
    # kind = "slow-broker", broker = 3, factor = 5, duration_s = 10 (0: to the end)
    # kind = "slow-az", az = "az2", factor = 5, duration_s = 10
    # kind = "network-degradation", az = "az2" (unset: every cross-AZ link), factor = 3, duration_s = 10
"""

from __future__ import annotations

import copy
import json
import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from partlog.broker.server import COMMIT_RPC_TIMEOUT_MS_DEFAULT
from partlog.produce.pipeline import (
    BUFFER_BYTES_MAX_DEFAULT,
    COMMIT_INTERVAL_MS_DEFAULT,
    INFLIGHT_BYTES_MAX_DEFAULT,
    UPLOADS_INFLIGHT_MAX_DEFAULT,
    ProduceConfig,
)
from partlog.produce.rotation import ROTATION_GRACE_MS_DEFAULT
from simulations.latency import LatencyDist

SCENARIOS_DIR = Path(__file__).parent / "scenarios"

# ---------------------------------------------------------------- defaults
# Round trips inside one AZ and across AZs: typical of AWS/GCP regions
# (sub-millisecond inside an AZ, 1-2 ms across; tails from queueing).
RTT_SAME_AZ_MS_P50 = 0.25
RTT_SAME_AZ_MS_P99 = 1.0
RTT_CROSS_AZ_MS_P50 = 1.0
RTT_CROSS_AZ_MS_P99 = 3.0
# KIP-1163, "Append latency": upload p50 ~100 ms, p99 200-400 ms.
PUT_MS_P50 = 100.0
PUT_MS_P99 = 300.0
# One S3 PUT stream's bandwidth: AWS's performance guidelines give 85-90
# MB/s per connection; a PUT takes its latency sample plus size / this.
PUT_MB_PER_S = 85.0
# S3 Standard, us-east-1: $0.005 per 1,000 PUT, $0.0004 per 1,000 GET.
PUT_USD_PER_1000 = 0.005
GET_USD_PER_1000 = 0.0004
# AWS inter-AZ transfer: $0.01/GB out plus $0.01/GB in.
CROSS_AZ_USD_PER_GB = 0.02
# The commit cost of a metadata store, calibrated from ``partlog bench
# commit`` (docs/measurements/commit-path.md, the 2026-11-26 run, 64
# batches per commit): durable with 1 committer p50 0.94 / p99 4.77 ms per
# commit, sync off p50 0.66 ms.  :func:`commit_cost_from_bench` splits that
# into a fixed part per group commit (the sync: p50 0.28 / p99 4.11 ms) and
# CPU per batch (10.3 us).  Both designs get it unless a scenario says
# otherwise ("the same store on both sides").
BENCH_COMMIT_BATCHES = 64
BENCH_COMMIT_DURABLE_MS_P50 = 0.94
BENCH_COMMIT_DURABLE_MS_P99 = 4.77
BENCH_COMMIT_NO_SYNC_MS_P50 = 0.66
# KIP-1163's own figure for its coordinator's commit ("Batch Coordinates
# Commit: P99 ~20-50ms, P50 ~10ms"): a scenario may give it to the
# coordinator (``coordinator_ms_p50`` / ``_p99``) to compare that store.
KIP1163_COORDINATOR_MS_P50 = 10.0
KIP1163_COORDINATOR_MS_P99 = 35.0
# A profile file (``[commit] profile``) is read whole; beyond these it is
# not a measurement but a mistake.
PROFILE_BYTES_MAX = 16 << 20
PROFILE_SAMPLES_MAX = 1_000_000
# KIP-1164's coordinator keeps its state in a replicated topic; Kafka's usual RF.
COORDINATOR_REPLICATION_FACTOR = 3
# Metadata reaches brokers quickly (KRaft pushes); clients learn on their
# next refresh, sooner when a response carries a leader hint (KIP-951).
BROKER_PROPAGATION_MS = 50
CLIENT_PROPAGATION_MS = 1000
# Kafka's broker.session.timeout.ms.
SESSION_TIMEOUT_MS = 9000

# Limits: a scenario beyond these is a typo, not a cluster.
LATENCY_MS_MAX = 3_600_000.0  # any latency input: an hour
LATENCY_MS_MIN = 0.001  # a p50 that is not 0: a microsecond at least
LATENCY_SPREAD_MAX = 10_000.0  # p99 / p50 of a latency input
US_PER_BATCH_MAX = 1e6  # a commit's CPU per batch: a second
PRICE_USD_MAX = 1e6  # any price per unit
BROKERS_MAX = 10_000
PARTITIONS_MAX = 1_000_000
DURATION_S_MAX = 24 * 3600


class ScenarioError(ValueError):
    """A scenario file is missing, unreadable, or has a wrong key or value."""


class Routing(StrEnum):
    """Where producers send a partition's batches (partlog design)."""

    ANY_BROKER = "any-broker"  # any broker of the producer's AZ (KIP-1163's rule)
    LEADER_ONLY = "leader-only"  # the partition's leader, wherever it is
    AZ_REPRESENTATIVE = "az-representative"  # rep(leader, producer AZ): design.md, "The design in one page", item 4


class Design(StrEnum):
    PARTLOG = "partlog"  # (a) commits to each partition's leader
    COORDINATOR = "coordinator"  # (b) KIP-1164's central batch coordinator
    CLASSIC = "classic"  # (c) classic Kafka replication


class EventKind(StrEnum):
    MOVE_LEADERS = "move-leaders"
    BROKER_FAILURE = "broker-failure"
    AZ_LOSS = "az-loss"
    COORDINATOR_FAILURE = "coordinator-failure"  # design (b) only; others ignore it
    SLOW_BROKER = "slow-broker"  # its commit store `factor` times slower
    SLOW_AZ = "slow-az"  # every commit store in the AZ, the coordinator's too
    NETWORK_DEGRADATION = "network-degradation"  # cross-AZ round trips `factor` times longer


class FailureMode(StrEnum):
    """How a dead node looks to the nodes that talk to it."""

    # The process died on a live host: connections are refused or reset at
    # once (one network round trip), as after kill -9.
    REFUSE = "refuse"
    # The host or its network is gone: nothing answers; callers wait for
    # their timeout (commit_rpc_timeout_ms, the producer's request_timeout_ms).
    BLACKHOLE = "blackhole"


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    azs: tuple[str, ...]
    brokers_per_az: tuple[int, ...]
    partitions: int
    replication_factor: int
    coordinator_az: str

    @property
    def brokers(self) -> int:
        return sum(self.brokers_per_az)


@dataclass(frozen=True, slots=True)
class ProducerSpec:
    az: str
    count: int
    sends_per_s: float
    partitions_per_send: int
    batch_bytes: int
    acks_all: bool
    # Partition choice: Zipf exponent over the partitions (0: uniform; 1:
    # partition 0 is hot, about 1/H(n) of the sends name it).
    skew: float = 0.0
    # Kafka's producer: failed batches are sent again after
    # retry.backoff.ms, doubling up to retry.backoff.max.ms with 20% jitter
    # (KIP-580), until delivery.timeout.ms from the first attempt.
    retries: bool = True
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 1000
    delivery_timeout_ms: int = 120_000
    request_timeout_ms: int = 30_000
    # Record producers (simulations/record_producers.py) when > 0: records
    # of record_bytes at this rate, batched as partlog's client does,
    # instead of sends_per_s Poisson sends.
    records_per_s: float = 0.0
    record_bytes: int = 100
    linger_ms: int = 5


@dataclass(frozen=True, slots=True)
class NetworkSpec:
    rtt_same_az: LatencyDist
    rtt_cross_az: LatencyDist


class GetMode(StrEnum):
    """Who reads a WAL file from the object store (its GETs per file)."""

    # One read cache per AZ: one GET per AZ holding a replica of any of the
    # file's partitions (consumers read from replicas in their AZ, KIP-392).
    PER_AZ_CACHE = "per-az-cache"
    # No shared cache: one GET per broker holding a replica of any of its partitions.
    PER_BROKER = "per-broker"
    # One cache for the whole cluster: one GET per file.
    SHARED_CACHE = "shared-cache"


@dataclass(frozen=True, slots=True)
class ObjectStoreSpec:
    put: LatencyDist
    put_usd_per_1000: float
    get_usd_per_1000: float
    # GETs per WAL file: None (not in the file) counts them by ``get_mode``.
    gets_per_file: float | None
    put_error_rate: float
    get_mode: GetMode = GetMode.PER_AZ_CACHE
    # A PUT takes its latency sample plus size / this (one stream's bandwidth).
    put_bytes_per_s: float = 0.0


@dataclass(frozen=True, slots=True)
class CommitCost:
    """What one group commit of a store costs (simulations/commit_server.py):
    ``fixed`` (or, measured, ``samples_ms``) per group, plus ``us_per_batch``
    per batch in it.  ``source`` says where the figures came from."""

    fixed: LatencyDist
    us_per_batch: float
    source: str
    samples_ms: tuple[float, ...] = ()

    def describe(self) -> str:
        if self.samples_ms:
            body = f"{len(self.samples_ms)} measured samples"
        else:
            body = f"p50 {self.fixed.ms_p50:g} / p99 {self.fixed.ms_p99:g} ms"
        return f"{body} per group commit + {self.us_per_batch:g} us per batch ({self.source})"


@dataclass(frozen=True, slots=True)
class CommitSpec:
    # A partlog leader's store: every commit RPC it takes (commit_server.py).
    leader: CommitCost
    # A follower's append of fetched metadata-log entries (replication lag
    # and acks=all waits include it).
    follower_apply: LatencyDist
    # The coordinator's store (design b); by default the leader's.
    coordinator: CommitCost
    coordinator_replication_factor: int
    # A commit RPC to a dead or unreachable node is answered REQUEST_TIMED_OUT
    # after this long (partlog/broker/server.py's commit_rpc_timeout_ms).
    commit_rpc_timeout_ms: int


@dataclass(frozen=True, slots=True)
class MetadataSpec:
    broker_propagation_ms: int
    client_propagation_ms: int
    session_timeout_ms: int
    # A dead coordinator's replica takes over after this long (KIP-1164's
    # coordinator is a partition leader: by default the same detection,
    # the session timeout, as a partlog leader's failover).
    coordinator_failover_ms: int


@dataclass(frozen=True, slots=True)
class EventSpec:
    at_s: float
    kind: EventKind
    broker: int = 0
    az: str = ""
    partitions: int = 0
    mode: FailureMode = FailureMode.REFUSE
    # coordinator-failure: how long until a replica in the next AZ takes over
    failover_ms: int = 0
    # slow-*, network-degradation: how much slower, and for how long (0: to the end)
    factor: float = 1.0
    duration_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    description: str
    source: str
    duration_s: float
    designs: tuple[Design, ...]
    routings: tuple[Routing, ...]
    cluster: ClusterSpec
    producers: tuple[ProducerSpec, ...]
    buffer: ProduceConfig
    network: NetworkSpec
    object_store: ObjectStoreSpec
    commit: CommitSpec
    metadata: MetadataSpec
    cross_az_usd_per_gb: float
    events: tuple[EventSpec, ...]


# ------------------------------------------------------------------ loading


def scenario_path(name_or_path: str) -> Path:
    """A shipped scenario's name (``balanced-3az``) or a path to a file."""
    p = Path(name_or_path)
    if p.suffix == ".toml" or p.exists():
        return p
    return SCENARIOS_DIR / f"{name_or_path}.toml"


def shipped_scenarios() -> list[str]:
    return sorted(p.stem for p in SCENARIOS_DIR.glob("*.toml"))


def read_scenario_doc(name_or_path: str) -> tuple[dict[str, Any], str]:
    """The raw TOML document and the path it came from."""
    path = scenario_path(name_or_path)
    try:
        with open(path, "rb") as f:
            return tomllib.load(f), str(path)
    except FileNotFoundError as e:
        known = ", ".join(shipped_scenarios())
        raise ScenarioError(f"{path}: no such scenario file (shipped scenarios: {known})") from e
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ScenarioError(f"{path}: {e}") from e


def load_scenario(name_or_path: str, overrides: Mapping[str, Any] | None = None) -> Scenario:
    """Load and validate a scenario; ``overrides`` maps keys (``duration_s``,
    ``cluster.brokers_per_az`` or just ``brokers_per_az`` when one section has
    it) to values replacing the file's."""
    doc, where = read_scenario_doc(name_or_path)
    if overrides:
        doc = apply_overrides(doc, overrides, where)
    return parse_scenario(doc, where)


def apply_overrides(doc: Mapping[str, Any], overrides: Mapping[str, Any], where: str) -> dict[str, Any]:
    out = copy.deepcopy(dict(doc))
    for key, value in overrides.items():
        section, _, name = key.rpartition(".")
        if not section and name not in _TOP_KEYS:
            owners = [s for s, keys in _SECTION_KEYS.items() if name in keys]
            if len(owners) != 1:
                raise ScenarioError(f"{where}: override {key!r}: name it as section.key (sections: {owners or 'none'})")
            section = owners[0]
        if not section:
            out[name] = value
            continue
        if section not in _SECTION_KEYS or name not in _SECTION_KEYS[section]:
            raise ScenarioError(f"{where}: override {key!r}: no such key")
        sub = out.setdefault(section, {})
        if not isinstance(sub, dict):
            raise ScenarioError(f"{where}: override {key!r}: [{section}] is not a table")
        sub[name] = value
    return out


class _Table:
    """Typed access to one TOML table; remembers which keys were read so
    unknown ones (typos) are reported."""

    def __init__(self, doc: Mapping[str, Any], where: str, section: str) -> None:
        self.doc, self.where, self.section = doc, where, section
        self.used: set[str] = set()

    def _name(self, key: str) -> str:
        return f"{self.where}: {self.section}{key}" if self.section else f"{self.where}: {key}"

    def error(self, key: str, msg: str) -> ScenarioError:
        return ScenarioError(f"{self._name(key)}: {msg}")

    def get(self, key: str, default: Any = None) -> Any:
        self.used.add(key)
        if key not in self.doc:
            if default is None:
                raise self.error(key, "missing")
            return default
        return self.doc[key]

    def number(self, key: str, default: float | None = None, *, lo: float = 0.0, hi: float = float("inf")) -> float:
        v = self.get(key, default)
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise self.error(key, f"must be a number, got {v!r}")
        if not lo <= v <= hi:
            raise self.error(key, f"must be in [{lo}, {hi}], got {v}")
        return float(v)

    def integer(self, key: str, default: int | None = None, *, lo: int = 0, hi: int = 2**62) -> int:
        v = self.get(key, default)
        if isinstance(v, bool) or not isinstance(v, int):
            raise self.error(key, f"must be an integer, got {v!r}")
        if not lo <= v <= hi:
            raise self.error(key, f"must be in [{lo}, {hi}], got {v}")
        return v

    def text(self, key: str, default: str | None = None) -> str:
        v = self.get(key, default)
        if not isinstance(v, str):
            raise self.error(key, f"must be a string, got {v!r}")
        return v

    def latency(self, prefix: str, p50: float, p99: float) -> LatencyDist:
        a = self.number(f"{prefix}_ms_p50", p50, hi=LATENCY_MS_MAX)
        b = self.number(f"{prefix}_ms_p99", p99, hi=LATENCY_MS_MAX)
        # A lognormal from a p50 near zero and a large p99 has an enormous
        # sigma: its samples overflow to inf.  Bound both.
        if 0 < a < LATENCY_MS_MIN:
            raise self.error(f"{prefix}_ms_p50", f"must be 0 or at least {LATENCY_MS_MIN} ms, got {a}")
        if a > 0 and b / a > LATENCY_SPREAD_MAX:
            raise self.error(f"{prefix}_ms_p99", f"at most {LATENCY_SPREAD_MAX:g} x the p50 ({a}), got {b}")
        try:
            return LatencyDist(a, b)
        except ValueError as e:
            raise self.error(f"{prefix}_ms_p50", str(e)) from e

    def done(self) -> None:
        unknown = sorted(set(self.doc) - self.used)
        if unknown:
            raise self.error(unknown[0], f"unknown key (known: {', '.join(sorted(self.used))})")


def _table(doc: Mapping[str, Any], where: str, name: str) -> _Table:
    sub = doc.get(name, {})
    if not isinstance(sub, dict):
        raise ScenarioError(f"{where}: [{name}] must be a table")
    return _Table(sub, where, f"{name}.")


def _boolean(t: _Table, key: str, default: bool) -> bool:
    v = t.get(key, default)
    if not isinstance(v, bool):
        raise t.error(key, f"must be true or false, got {v!r}")
    return v


def _enum_list(
    t: _Table, key: str, enum: type[StrEnum], default: list[str] | str, *, single: bool = False
) -> tuple[Any, ...]:
    raw = t.get(key, default)
    if single:
        if not isinstance(raw, str):
            raise t.error(key, f"must be one of {[e.value for e in enum]}, got {raw!r}")
        raw = [raw]
    if not isinstance(raw, list) or not raw:
        raise t.error(key, f"must be a non-empty list of {[e.value for e in enum]}")
    out = []
    for v in raw:
        try:
            out.append(enum(v))
        except ValueError as e:
            raise t.error(key, f"{v!r} is not one of {[e.value for e in enum]}") from e
    if len(set(out)) != len(out):
        raise t.error(key, "has duplicates")
    return tuple(out)


def parse_scenario(doc: Mapping[str, Any], where: str) -> Scenario:
    top = _Table(doc, where, "")
    for section in _SECTION_KEYS:
        top.used.add(section)
    top.used |= {"producers", "events"}
    name = top.text("name", Path(where).stem)
    description = top.text("description", "")
    duration_s = top.number("duration_s", 60.0, lo=0.001, hi=DURATION_S_MAX)
    designs = _enum_list(top, "designs", Design, [d.value for d in Design])
    routings = _enum_list(top, "routings", Routing, [Routing.AZ_REPRESENTATIVE.value])
    top.done()

    c = _table(doc, where, "cluster")
    azs_raw = c.get("azs", ["az1", "az2", "az3"])
    if not isinstance(azs_raw, list) or not azs_raw or not all(isinstance(a, str) for a in azs_raw):
        raise c.error("azs", f"must be a non-empty list of AZ names, got {azs_raw!r}")
    if len(set(azs_raw)) != len(azs_raw):
        raise c.error("azs", "has duplicates")
    azs = tuple(azs_raw)
    bpa = c.get("brokers_per_az", 1)
    if isinstance(bpa, int) and not isinstance(bpa, bool):
        bpa = [bpa] * len(azs)
    if (
        not isinstance(bpa, list)
        or len(bpa) != len(azs)
        or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in bpa)
    ):
        raise c.error("brokers_per_az", f"must be an integer >= 1 or one per AZ ({len(azs)}), got {bpa!r}")
    if sum(bpa) > BROKERS_MAX:
        raise c.error("brokers_per_az", f"{sum(bpa)} brokers: at most {BROKERS_MAX}")
    partitions = c.integer("partitions", lo=1, hi=PARTITIONS_MAX)
    rf = c.integer("replication_factor", 1, lo=1, hi=sum(bpa))
    coordinator_az = c.text("coordinator_az", azs[0])
    if coordinator_az not in azs:
        raise c.error("coordinator_az", f"{coordinator_az!r} is not one of {list(azs)}")
    c.done()
    cluster = ClusterSpec(azs, tuple(bpa), partitions, rf, coordinator_az)

    raw_producers = doc.get("producers", [])
    if not isinstance(raw_producers, list) or not raw_producers:
        raise ScenarioError(f"{where}: [[producers]]: at least one producer group is needed")
    producers = []
    for i, raw in enumerate(raw_producers):
        if not isinstance(raw, dict):
            raise ScenarioError(f"{where}: producers[{i}] must be a table")
        p = _Table(raw, where, f"producers[{i}].")
        az = p.text("az")
        if az not in azs:
            raise p.error("az", f"{az!r} is not one of {list(azs)}")
        acks = p.text("acks", "all")
        if acks not in ("all", "1"):
            raise p.error("acks", f"must be 'all' or '1', got {acks!r}")
        records = "records_per_s" in p.doc
        producers.append(
            ProducerSpec(
                az=az,
                count=p.integer("count", 1, lo=1, hi=100_000),
                sends_per_s=0.0 if records else p.number("sends_per_s", lo=0.001, hi=1e6),
                partitions_per_send=p.integer("partitions_per_send", 1, lo=1, hi=partitions),
                batch_bytes=p.integer("batch_bytes", 1024, lo=100, hi=1 << 20),
                acks_all=acks == "all",
                skew=p.number("skew", 0.0, hi=10.0),
                retries=_boolean(p, "retries", True),
                retry_backoff_ms=p.integer("retry_backoff_ms", 100, hi=3_600_000),
                retry_backoff_max_ms=p.integer("retry_backoff_max_ms", 1000, hi=3_600_000),
                delivery_timeout_ms=p.integer("delivery_timeout_ms", 120_000, lo=1, hi=DURATION_S_MAX * 1000),
                request_timeout_ms=p.integer("request_timeout_ms", 30_000, lo=1, hi=3_600_000),
                records_per_s=p.number("records_per_s", lo=0.001, hi=1e6) if records else 0.0,
                record_bytes=p.integer("record_bytes", 100, lo=1, hi=1 << 20),
                linger_ms=p.integer("linger_ms", 5, lo=0, hi=3_600_000),
            )
        )
        p.done()

    b = _table(doc, where, "buffer")
    try:
        buffer = ProduceConfig(
            commit_interval_ms=b.integer("commit_interval_ms", COMMIT_INTERVAL_MS_DEFAULT, lo=1),
            buffer_bytes_max=b.integer("buffer_bytes_max", BUFFER_BYTES_MAX_DEFAULT, lo=1),
            inflight_bytes_max=b.integer("inflight_bytes_max", INFLIGHT_BYTES_MAX_DEFAULT, lo=1),
            uploads_inflight_max=b.integer("uploads_inflight_max", UPLOADS_INFLIGHT_MAX_DEFAULT, lo=1),
            # The brokers' rotation rule and PUT budget (docs/design/rotation.md),
            # the same for every design's brokers; a grace of at least the
            # interval selects the interval-only rule (KIP-1163's) to compare.
            rotation_grace_ms=b.integer("rotation_grace_ms", ROTATION_GRACE_MS_DEFAULT, hi=3_600_000),
            wal_puts_per_s_max=b.integer("wal_puts_per_s_max", lo=1, hi=1_000_000)
            if "wal_puts_per_s_max" in b.doc
            else None,
        )
    except ValueError as e:
        raise ScenarioError(f"{where}: [buffer]: {e}") from e
    b.done()

    n = _table(doc, where, "network")
    network = NetworkSpec(
        n.latency("rtt_same_az", RTT_SAME_AZ_MS_P50, RTT_SAME_AZ_MS_P99),
        n.latency("rtt_cross_az", RTT_CROSS_AZ_MS_P50, RTT_CROSS_AZ_MS_P99),
    )
    n.done()

    o = _table(doc, where, "object_store")
    object_store = ObjectStoreSpec(
        put=o.latency("put", PUT_MS_P50, PUT_MS_P99),
        put_usd_per_1000=o.number("put_usd_per_1000", PUT_USD_PER_1000, hi=PRICE_USD_MAX),
        get_usd_per_1000=o.number("get_usd_per_1000", GET_USD_PER_1000, hi=PRICE_USD_MAX),
        gets_per_file=o.number("gets_per_file", hi=1000.0) if "gets_per_file" in o.doc else None,
        put_error_rate=o.number("put_error_rate", 0.0, hi=1.0),
        get_mode=_enum_list(o, "get_mode", GetMode, GetMode.PER_AZ_CACHE.value, single=True)[0],
        put_bytes_per_s=o.number("put_mb_per_s", PUT_MB_PER_S, lo=0.001, hi=1e6) * 1e6,
    )
    o.done()

    m = _table(doc, where, "commit")
    leader = _commit_cost(m, "apply", "profile", DEFAULT_COMMIT_COST)
    coordinator_keys = {"coordinator_ms_p50", "coordinator_ms_p99", "coordinator_us_per_batch", "coordinator_profile"}
    coordinator = (
        _commit_cost(m, "coordinator", "coordinator_profile", leader) if coordinator_keys & set(m.doc) else leader
    )
    commit = CommitSpec(
        leader=leader,
        follower_apply=m.latency("follower_apply", DEFAULT_COMMIT_COST.fixed.ms_p50, DEFAULT_COMMIT_COST.fixed.ms_p99),
        coordinator=coordinator,
        coordinator_replication_factor=m.integer(
            "coordinator_replication_factor", COORDINATOR_REPLICATION_FACTOR, lo=1, hi=len(azs) * 100
        ),
        commit_rpc_timeout_ms=m.integer("commit_rpc_timeout_ms", COMMIT_RPC_TIMEOUT_MS_DEFAULT, lo=1, hi=3_600_000),
    )
    m.done()

    md = _table(doc, where, "metadata")
    session_timeout_ms = md.integer("session_timeout_ms", SESSION_TIMEOUT_MS, hi=3_600_000)
    metadata = MetadataSpec(
        broker_propagation_ms=md.integer("broker_propagation_ms", BROKER_PROPAGATION_MS, hi=3_600_000),
        client_propagation_ms=md.integer("client_propagation_ms", CLIENT_PROPAGATION_MS, hi=3_600_000),
        session_timeout_ms=session_timeout_ms,
        coordinator_failover_ms=md.integer("coordinator_failover_ms", session_timeout_ms, hi=3_600_000),
    )
    md.done()

    co = _table(doc, where, "cost")
    cross_az_usd_per_gb = co.number("cross_az_usd_per_gb", CROSS_AZ_USD_PER_GB, hi=PRICE_USD_MAX)
    co.done()

    events = _parse_events(doc.get("events", []), where, cluster, metadata.coordinator_failover_ms)
    return Scenario(
        name=name,
        description=description,
        source=where,
        duration_s=duration_s,
        designs=designs,
        routings=routings,
        cluster=cluster,
        producers=tuple(producers),
        buffer=buffer,
        network=network,
        object_store=object_store,
        commit=commit,
        metadata=metadata,
        cross_az_usd_per_gb=cross_az_usd_per_gb,
        events=events,
    )


def _parse_events(raw_events: Any, where: str, cluster: ClusterSpec, failover_ms_default: int) -> tuple[EventSpec, ...]:
    if not isinstance(raw_events, list):
        raise ScenarioError(f"{where}: [[events]] must be an array of tables")
    events = []
    for i, raw in enumerate(raw_events):
        if not isinstance(raw, dict):
            raise ScenarioError(f"{where}: events[{i}] must be a table")
        e = _Table(raw, where, f"events[{i}].")
        # Not bounded by the duration: a shortened run (--duration-s) just
        # never reaches the later events.
        at_s = e.number("at_s", hi=DURATION_S_MAX)
        kind_raw = e.text("kind")
        try:
            kind = EventKind(kind_raw)
        except ValueError as err:
            raise e.error("kind", f"{kind_raw!r} is not one of {[k.value for k in EventKind]}") from err
        events.append(_parse_event(e, at_s, kind, cluster, failover_ms_default))
        e.done()
    return tuple(sorted(events, key=lambda ev: ev.at_s))


def commit_cost_from_bench(
    durable_ms_p50: float, durable_ms_p99: float, no_sync_ms_p50: float, batches_per_commit: int, source: str
) -> CommitCost:
    """Split ``partlog bench commit``'s figures into the model's two parts:
    CPU per batch (the commit without sync, spread over its batches) and the
    group commit's fixed part (what the sync adds, at p50 and p99)."""
    us_per_batch = no_sync_ms_p50 * 1000 / batches_per_commit
    fixed_p50 = max(0.001, durable_ms_p50 - no_sync_ms_p50)
    fixed_p99 = max(fixed_p50, durable_ms_p99 - no_sync_ms_p50)
    return CommitCost(LatencyDist(round(fixed_p50, 3), round(fixed_p99, 3)), round(us_per_batch, 3), source)


DEFAULT_COMMIT_COST = commit_cost_from_bench(
    BENCH_COMMIT_DURABLE_MS_P50,
    BENCH_COMMIT_DURABLE_MS_P99,
    BENCH_COMMIT_NO_SYNC_MS_P50,
    BENCH_COMMIT_BATCHES,
    "partlog bench commit, docs/measurements/commit-path.md",
)


def _commit_cost(m: _Table, prefix: str, profile_key: str, default: CommitCost) -> CommitCost:
    """A store's commit cost from ``{prefix}_ms_p50/_p99`` and
    ``{prefix}_us_per_batch``, or from a profile file; unset keys keep
    ``default``'s."""
    if profile_key in m.doc:
        if {f"{prefix}_ms_p50", f"{prefix}_ms_p99", f"{prefix}_us_per_batch"} & set(m.doc):
            raise m.error(profile_key, f"give either a profile or {prefix}_ms_p50/_p99/_us_per_batch, not both")
        raw = m.text(profile_key)
        if not raw:
            raise m.error(profile_key, "must name a file")
        path = Path(raw)
        if not path.is_absolute():
            path = Path(m.where).parent / path
        try:
            return load_commit_profile(path)
        except ScenarioError as e:
            # Name the scenario's key as well as the profile file.
            raise m.error(profile_key, str(e)) from e
    fixed = m.latency(prefix, default.fixed.ms_p50, default.fixed.ms_p99)
    per_batch = m.number(f"{prefix}_us_per_batch", default.us_per_batch, hi=1e6)
    if fixed == default.fixed and per_batch == default.us_per_batch:
        return default
    return CommitCost(fixed, per_batch, f"scenario [commit] {prefix}_*")


def load_commit_profile(path: Path) -> CommitCost:
    """A store's measured commit cost: the JSON that ``partlog bench commit
    --json`` prints (its durable and no-sync cases with 1 committer, plain
    batches), or ``{"samples_ms": [...], "us_per_batch": x}`` (any measured
    distribution of one group commit, e.g. a PostgreSQL coordinator's)."""
    where = str(path)
    if not path.is_file():
        raise ScenarioError(f"{where}: commit profile is not a regular file")
    try:
        with open(path, "rb") as f:
            raw = f.read(PROFILE_BYTES_MAX + 1)
    except OSError as e:
        raise ScenarioError(f"{where}: commit profile unreadable: {e}") from e
    if len(raw) > PROFILE_BYTES_MAX:
        raise ScenarioError(f"{where}: commit profile larger than {PROFILE_BYTES_MAX} bytes")

    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [k for k, _ in pairs]
        dup = next((k for k in keys if keys.count(k) > 1), None)
        if dup is not None:
            raise ValueError(f"duplicate key {dup!r}")
        return dict(pairs)

    try:
        doc = json.loads(raw, object_pairs_hook=no_duplicates)
    except (ValueError, RecursionError) as e:
        raise ScenarioError(f"{where}: commit profile is not JSON: {str(e)[:200]}") from e
    if not isinstance(doc, dict):
        raise ScenarioError(f"{where}: commit profile must be a JSON object")

    def num(v: Any, what: str, hi: float = 3_600_000.0) -> float:
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or not 0 <= v <= hi:
            raise ScenarioError(f"{where}: {what} must be a number in [0, {hi:g}], got {v!r}")
        return float(v)

    if "samples_ms" in doc:
        samples = doc["samples_ms"]
        if not isinstance(samples, list) or not samples or len(samples) > PROFILE_SAMPLES_MAX:
            raise ScenarioError(f"{where}: samples_ms must be a list of 1 to {PROFILE_SAMPLES_MAX} numbers")
        values = tuple(sorted(num(v, f"samples_ms[{i}]") for i, v in enumerate(samples)))
        per_batch = num(doc.get("us_per_batch", 0.0), "us_per_batch", 1e6)
        unknown = sorted(set(doc) - {"samples_ms", "us_per_batch"})
        if unknown:
            raise ScenarioError(f"{where}: unknown key {unknown[0]!r} (known: samples_ms, us_per_batch)")
        p50 = values[(len(values) - 1) // 2]
        p99 = values[min(len(values) - 1, math.ceil(0.99 * len(values)) - 1)]
        return CommitCost(LatencyDist(p50, max(p50, p99)), per_batch, f"measured, {path.name}", values)
    if doc.get("benchmark") != "commit":
        raise ScenarioError(f"{where}: neither samples_ms nor the output of `partlog bench commit --json`")
    batches = doc.get("batches_per_commit")
    if isinstance(batches, bool) or not isinstance(batches, int) or not 1 <= batches <= 1_000_000:
        raise ScenarioError(f"{where}: batches_per_commit must be an integer in [1, 1000000], got {batches!r}")
    results = doc.get("results")
    if not isinstance(results, list):
        raise ScenarioError(f"{where}: results must be a list")

    def case(sync: bool) -> dict[str, Any]:
        for r in results:
            if (
                isinstance(r, dict)
                and r.get("sync") is sync
                and type(r.get("committers")) is int
                and r.get("committers") == 1
                and r.get("idempotent") is False
            ):
                return r
        raise ScenarioError(f"{where}: no result with sync={sync}, committers=1, idempotent=false")

    durable, no_sync = case(True), case(False)
    if num(durable.get("latency_ms_p50"), "durable latency_ms_p50") < num(
        no_sync.get("latency_ms_p50"), "no-sync latency_ms_p50"
    ):
        raise ScenarioError(f"{where}: the durable case is faster than the no-sync one: not a usable measurement")
    cost = commit_cost_from_bench(
        num(durable.get("latency_ms_p50"), "durable latency_ms_p50"),
        num(durable.get("latency_ms_p99"), "durable latency_ms_p99"),
        num(no_sync.get("latency_ms_p50"), "no-sync latency_ms_p50"),
        batches,
        f"partlog bench commit, {path.name}",
    )
    if cost.us_per_batch > US_PER_BATCH_MAX:
        raise ScenarioError(f"{where}: {cost.us_per_batch:g} us per batch: more than {US_PER_BATCH_MAX:g}")
    return cost


def _failure_mode(e: _Table, default: FailureMode) -> FailureMode:
    raw = e.text("mode", default.value)
    try:
        return FailureMode(raw)
    except ValueError as err:
        raise e.error("mode", f"{raw!r} is not one of {[m.value for m in FailureMode]}") from err


def _event_az(e: _Table, cluster: ClusterSpec, *, required: bool = True) -> str:
    if not required and "az" not in e.doc:
        e.used.add("az")
        return ""
    az = e.text("az")
    if az not in cluster.azs:
        raise e.error("az", f"{az!r} is not one of {list(cluster.azs)}")
    return az


def _parse_event(e: _Table, at_s: float, kind: EventKind, cluster: ClusterSpec, failover_ms_default: int) -> EventSpec:
    if kind is EventKind.MOVE_LEADERS:
        return EventSpec(at_s, kind, partitions=e.integer("partitions", lo=1, hi=cluster.partitions))
    if kind is EventKind.BROKER_FAILURE:
        broker = e.integer("broker", lo=1, hi=cluster.brokers)
        return EventSpec(at_s, kind, broker=broker, mode=_failure_mode(e, FailureMode.REFUSE))
    if kind is EventKind.AZ_LOSS:
        return EventSpec(at_s, kind, az=_event_az(e, cluster), mode=_failure_mode(e, FailureMode.BLACKHOLE))
    if kind is EventKind.COORDINATOR_FAILURE:
        failover = e.integer("failover_ms", failover_ms_default, hi=3_600_000)
        return EventSpec(at_s, kind, mode=_failure_mode(e, FailureMode.REFUSE), failover_ms=failover)
    broker = e.integer("broker", lo=1, hi=cluster.brokers) if kind is EventKind.SLOW_BROKER else 0
    # slow-az names its AZ; network-degradation one AZ's links to the others, or (unset) every link.
    az = _event_az(e, cluster, required=kind is EventKind.SLOW_AZ) if kind is not EventKind.SLOW_BROKER else ""
    factor = e.number("factor", lo=1.0, hi=1e6)
    duration_s = e.number("duration_s", 0.0, hi=DURATION_S_MAX)
    return EventSpec(at_s, kind, broker=broker, az=az, factor=factor, duration_s=duration_s)


_TOP_KEYS = {"name", "description", "duration_s", "designs", "routings"}
_SECTION_KEYS: dict[str, set[str]] = {
    "cluster": {"azs", "brokers_per_az", "partitions", "replication_factor", "coordinator_az"},
    "buffer": {
        "commit_interval_ms",
        "buffer_bytes_max",
        "inflight_bytes_max",
        "uploads_inflight_max",
        "rotation_grace_ms",
        "wal_puts_per_s_max",
    },
    "network": {f"rtt_{w}_az_ms_{q}" for w in ("same", "cross") for q in ("p50", "p99")},
    "object_store": {
        "put_ms_p50",
        "put_ms_p99",
        "put_usd_per_1000",
        "get_usd_per_1000",
        "gets_per_file",
        "get_mode",
        "put_mb_per_s",
        "put_error_rate",
    },
    "commit": {
        *(f"{w}_ms_{q}" for w in ("apply", "follower_apply", "coordinator") for q in ("p50", "p99")),
        "apply_us_per_batch",
        "coordinator_us_per_batch",
        "profile",
        "coordinator_profile",
        "coordinator_replication_factor",
        "commit_rpc_timeout_ms",
    },
    "metadata": {"broker_propagation_ms", "client_propagation_ms", "session_timeout_ms", "coordinator_failover_ms"},
    "cost": {"cross_az_usd_per_gb"},
}
