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

    [buffer]        commit_interval_ms, buffer_bytes_max, inflight_bytes_max, uploads_inflight_max
    [network]       rtt_same_az_ms_p50/_p99, rtt_cross_az_ms_p50/_p99
    [object_store]  put_ms_p50/_p99, put_usd_per_1000, get_usd_per_1000,
                    gets_per_file (unset: one per AZ; 0 means none), put_error_rate
    [commit]        apply_ms_p50/_p99, follower_apply_ms_p50/_p99, coordinator_ms_p50/_p99,
                    coordinator_replication_factor, commit_rpc_timeout_ms
    [metadata]      broker_propagation_ms, client_propagation_ms, session_timeout_ms
    [cost]          cross_az_usd_per_gb

    [[events]]
    at_s = 20
    kind = "move-leaders"                  # partitions = N moved to their next replica
    # kind = "broker-failure", broker = 3
    # kind = "az-loss", az = "az3"
"""

from __future__ import annotations

import copy
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
# S3 Standard, us-east-1: $0.005 per 1,000 PUT, $0.0004 per 1,000 GET.
PUT_USD_PER_1000 = 0.005
GET_USD_PER_1000 = 0.0004
# AWS inter-AZ transfer: $0.01/GB out plus $0.01/GB in.
CROSS_AZ_USD_PER_GB = 0.02
# A partlog leader's append: one LMDB write transaction and fsync
# (design.md measures 0.4-1.5 ms per fsync).
APPLY_MS_P50 = 1.0
APPLY_MS_P99 = 5.0
# A follower appending the entries it fetched: the same kind of LMDB write
# transaction as the leader's append, so by default the same distribution.
FOLLOWER_APPLY_MS_P50 = APPLY_MS_P50
FOLLOWER_APPLY_MS_P99 = APPLY_MS_P99
# KIP-1163, "Batch Coordinates Commit: P99 ~20-50ms, P50 ~10ms".
COORDINATOR_MS_P50 = 10.0
COORDINATOR_MS_P99 = 35.0
# KIP-1164's coordinator keeps its state in a replicated topic; Kafka's usual RF.
COORDINATOR_REPLICATION_FACTOR = 3
# Metadata reaches brokers quickly (KRaft pushes); clients learn on their
# next refresh, sooner when a response carries a leader hint (KIP-951).
BROKER_PROPAGATION_MS = 50
CLIENT_PROPAGATION_MS = 1000
# Kafka's broker.session.timeout.ms.
SESSION_TIMEOUT_MS = 9000

# Limits: a scenario beyond these is a typo, not a cluster.
BROKERS_MAX = 10_000
PARTITIONS_MAX = 1_000_000
DURATION_S_MAX = 24 * 3600


class ScenarioError(ValueError):
    """A scenario file is missing, unreadable, or has a wrong key or value."""


class Routing(StrEnum):
    """Where producers send a partition's batches (partlog design)."""

    ANY_BROKER = "any-broker"  # any broker of the producer's AZ (KIP-1163's rule)
    LEADER_ONLY = "leader-only"  # the partition's leader, wherever it is
    AZ_REPRESENTATIVE = "az-representative"  # rep(leader, producer AZ), design brief item 4


class Design(StrEnum):
    PARTLOG = "partlog"  # (a) commits to each partition's leader
    COORDINATOR = "coordinator"  # (b) KIP-1164's central batch coordinator
    CLASSIC = "classic"  # (c) classic Kafka replication


class EventKind(StrEnum):
    MOVE_LEADERS = "move-leaders"
    BROKER_FAILURE = "broker-failure"
    AZ_LOSS = "az-loss"


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


@dataclass(frozen=True, slots=True)
class NetworkSpec:
    rtt_same_az: LatencyDist
    rtt_cross_az: LatencyDist


@dataclass(frozen=True, slots=True)
class ObjectStoreSpec:
    put: LatencyDist
    put_usd_per_1000: float
    get_usd_per_1000: float
    # GETs per WAL file; None (not in the file): one per AZ that reads it.
    gets_per_file: float | None
    put_error_rate: float


@dataclass(frozen=True, slots=True)
class CommitSpec:
    apply: LatencyDist
    # A follower's append of fetched metadata-log entries (replication lag
    # and acks=all waits include it).
    follower_apply: LatencyDist
    coordinator: LatencyDist
    coordinator_replication_factor: int
    # A commit RPC to a dead or unreachable node is answered REQUEST_TIMED_OUT
    # after this long (partlog/broker/server.py's commit_rpc_timeout_ms).
    commit_rpc_timeout_ms: int


@dataclass(frozen=True, slots=True)
class MetadataSpec:
    broker_propagation_ms: int
    client_propagation_ms: int
    session_timeout_ms: int


@dataclass(frozen=True, slots=True)
class EventSpec:
    at_s: float
    kind: EventKind
    broker: int = 0
    az: str = ""
    partitions: int = 0


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

    @property
    def gets_per_file(self) -> float:
        g = self.object_store.gets_per_file
        return float(len(self.cluster.azs)) if g is None else g


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
        a = self.number(f"{prefix}_ms_p50", p50)
        b = self.number(f"{prefix}_ms_p99", p99)
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


def _enum_list(t: _Table, key: str, enum: type[StrEnum], default: list[str]) -> tuple[Any, ...]:
    raw = t.get(key, default)
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
        producers.append(
            ProducerSpec(
                az=az,
                count=p.integer("count", 1, lo=1, hi=100_000),
                sends_per_s=p.number("sends_per_s", lo=0.001, hi=1e6),
                partitions_per_send=p.integer("partitions_per_send", 1, lo=1, hi=partitions),
                batch_bytes=p.integer("batch_bytes", 1024, lo=100, hi=1 << 20),
                acks_all=acks == "all",
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
        put_usd_per_1000=o.number("put_usd_per_1000", PUT_USD_PER_1000),
        get_usd_per_1000=o.number("get_usd_per_1000", GET_USD_PER_1000),
        gets_per_file=o.number("gets_per_file", hi=1000.0) if "gets_per_file" in o.doc else None,
        put_error_rate=o.number("put_error_rate", 0.0, hi=1.0),
    )
    o.done()

    m = _table(doc, where, "commit")
    commit = CommitSpec(
        apply=m.latency("apply", APPLY_MS_P50, APPLY_MS_P99),
        follower_apply=m.latency("follower_apply", FOLLOWER_APPLY_MS_P50, FOLLOWER_APPLY_MS_P99),
        coordinator=m.latency("coordinator", COORDINATOR_MS_P50, COORDINATOR_MS_P99),
        coordinator_replication_factor=m.integer(
            "coordinator_replication_factor", COORDINATOR_REPLICATION_FACTOR, lo=1, hi=len(azs) * 100
        ),
        commit_rpc_timeout_ms=m.integer("commit_rpc_timeout_ms", COMMIT_RPC_TIMEOUT_MS_DEFAULT, lo=1, hi=3_600_000),
    )
    m.done()

    md = _table(doc, where, "metadata")
    metadata = MetadataSpec(
        broker_propagation_ms=md.integer("broker_propagation_ms", BROKER_PROPAGATION_MS, hi=3_600_000),
        client_propagation_ms=md.integer("client_propagation_ms", CLIENT_PROPAGATION_MS, hi=3_600_000),
        session_timeout_ms=md.integer("session_timeout_ms", SESSION_TIMEOUT_MS, hi=3_600_000),
    )
    md.done()

    co = _table(doc, where, "cost")
    cross_az_usd_per_gb = co.number("cross_az_usd_per_gb", CROSS_AZ_USD_PER_GB)
    co.done()

    events = _parse_events(doc.get("events", []), where, cluster)
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


def _parse_events(raw_events: Any, where: str, cluster: ClusterSpec) -> tuple[EventSpec, ...]:
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
        if kind is EventKind.MOVE_LEADERS:
            events.append(EventSpec(at_s, kind, partitions=e.integer("partitions", lo=1, hi=cluster.partitions)))
        elif kind is EventKind.BROKER_FAILURE:
            events.append(EventSpec(at_s, kind, broker=e.integer("broker", lo=1, hi=cluster.brokers)))
        else:
            az = e.text("az")
            if az not in cluster.azs:
                raise e.error("az", f"{az!r} is not one of {list(cluster.azs)}")
            events.append(EventSpec(at_s, kind, az=az))
        e.done()
    return tuple(sorted(events, key=lambda ev: ev.at_s))


_TOP_KEYS = {"name", "description", "duration_s", "designs", "routings"}
_SECTION_KEYS: dict[str, set[str]] = {
    "cluster": {"azs", "brokers_per_az", "partitions", "replication_factor", "coordinator_az"},
    "buffer": {"commit_interval_ms", "buffer_bytes_max", "inflight_bytes_max", "uploads_inflight_max"},
    "network": {f"rtt_{w}_az_ms_{q}" for w in ("same", "cross") for q in ("p50", "p99")},
    "object_store": {
        "put_ms_p50",
        "put_ms_p99",
        "put_usd_per_1000",
        "get_usd_per_1000",
        "gets_per_file",
        "put_error_rate",
    },
    "commit": {
        *(f"{w}_ms_{q}" for w in ("apply", "follower_apply", "coordinator") for q in ("p50", "p99")),
        "coordinator_replication_factor",
        "commit_rpc_timeout_ms",
    },
    "metadata": {"broker_propagation_ms", "client_propagation_ms", "session_timeout_ms"},
    "cost": {"cross_az_usd_per_gb"},
}
