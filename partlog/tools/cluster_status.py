"""``partlog status``'s core: the cluster's health at a glance, from one
metadata view (docs/design/status.md).  Sans-IO: the command
(:mod:`partlog.tools.cmd.status`) reads the metadata, probes the brokers'
ports and reads walmgr; :func:`summarize` turns what it got into a
:class:`ClusterStatus`, which renders as one aligned table
(:func:`render_table`) or as JSON with stable keys (:func:`to_json`).

What counts as unhealthy (exit status 1, :data:`EXIT_UNHEALTHY`): a broker
named in some partition's replicas that is not alive (fenced, or never
registered), a broker whose RPC or Kafka port did not accept a connection,
a partition without a leader (offline), an ISR smaller than the replicas
(under-replicated), and a walmgr source that could not be read or whose
registry is bound to another cluster.  A reassignment in progress is
reported, not unhealthy.  A metadata source that does not answer is exit
status 2 (:data:`EXIT_UNREACHABLE`), decided by the command.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from partlog.controller.cluster_meta import NO_LEADER, BrokerInfo, PartitionInfo, TopicInfo, kafka_listener_addresses
from partlog.tools.walmgr_status import WalmgrStatus

EXIT_HEALTHY = 0
EXIT_UNHEALTHY = 1
EXIT_UNREACHABLE = 2

# Partitions listed per kind (under-replicated, offline, ...) by default.
LIST_MAX_DEFAULT = 20
# Kafka's min.insync.replicas default: the brokers' own setting is not in
# the metadata, so the command takes it as a flag.
MIN_INSYNC_REPLICAS_DEFAULT = 1

# Probe outcomes (None: not probed, or nothing to probe).
PROBE_OK = "ok"
PROBE_REFUSED = "refused"
PROBE_TIMEOUT = "timeout"
PROBE_UNREACHABLE = "unreachable"


@dataclass(frozen=True, slots=True)
class ControllerStatus:
    kind: str  # "embedded" or "etcd"
    address: str  # HOST:PORT, or the etcd URL
    answered: bool
    metadata_version: int | None = None  # the snapshot version, or etcd's revision
    cluster_id: str | None = None
    acting_broker: int | None = None  # etcd: the broker acting as controller (None: none, or embedded)
    error: str = ""


@dataclass(frozen=True, slots=True)
class BrokerStatus:
    broker_id: int
    alive: bool
    az: str | None  # None: the metadata does not say (a fenced broker of the embedded controller)
    host: str | None
    port: int | None
    kafka_port: int | None
    led: int
    followed: int
    rpc: str | None  # a PROBE_* outcome, None when not probed
    kafka: str | None


@dataclass(frozen=True, slots=True)
class PartitionRow:
    topic: str
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class PartitionCounts:
    """How many partitions are of a kind, and the first ``list_max`` of them."""

    count: int
    first: tuple[PartitionRow, ...]


@dataclass(frozen=True, slots=True)
class ClusterStatus:
    controller: ControllerStatus
    brokers: tuple[BrokerStatus, ...]
    partitions: int
    under_replicated: PartitionCounts
    offline: PartitionCounts
    under_min_isr: PartitionCounts
    reassigning: PartitionCounts
    min_insync_replicas: int
    walmgr: tuple[WalmgrStatus, ...]
    problems: tuple[str, ...]
    now_ms: int

    @property
    def exit_status(self) -> int:
        return EXIT_UNHEALTHY if self.problems else EXIT_HEALTHY


def reassignment_of(p: PartitionInfo) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(adding, removing) of a partition being reassigned, () when not."""
    return p.adding, p.removing


def kafka_address(b: BrokerInfo) -> tuple[str, int] | None:
    """Where the broker's first Kafka listener is, None when it has none."""
    if b.kafka_listeners:
        try:
            name = next(iter(kafka_listener_addresses(b.kafka_listeners)))
        except ValueError:
            return None
        return b.kafka_address_of(name)
    return (b.host, b.kafka_port) if b.kafka_port else None


def summarize(
    controller: ControllerStatus,
    registered: Iterable[tuple[BrokerInfo, bool]],
    topics: Iterable[TopicInfo],
    probes: Mapping[int, tuple[str | None, str | None]],
    walmgr: Sequence[WalmgrStatus],
    *,
    min_insync_replicas: int = MIN_INSYNC_REPLICAS_DEFAULT,
    list_max: int = LIST_MAX_DEFAULT,
    now_ms: int,
) -> ClusterStatus:
    """The status of a cluster whose metadata answered.

    ``registered``: each broker the metadata knows, with whether it is alive
    (accepted by the controller, not fenced); a broker named only in
    replicas is fenced, its address unknown.  ``probes``: per broker id the
    outcome of connecting to its (RPC, Kafka) ports."""
    assert min_insync_replicas >= 1 and list_max >= 0
    known = {b.broker_id: (b, alive) for b, alive in registered}
    led: dict[int, int] = {}
    followed: dict[int, int] = {}
    kinds: dict[str, list[PartitionRow]] = {"under_replicated": [], "offline": [], "under_min_isr": [], "moving": []}
    counts = dict.fromkeys(kinds, 0)
    total = 0

    def note(kind: str, row: PartitionRow) -> None:
        counts[kind] += 1
        if len(kinds[kind]) < list_max:
            kinds[kind].append(row)

    for t in topics:
        for i, p in enumerate(t.partitions):
            total += 1
            adding, removing = reassignment_of(p)
            row = PartitionRow(t.name, i, p.leader, p.replicas, p.isr, adding, removing)
            for r in p.replicas:
                if r == p.leader:
                    led[r] = led.get(r, 0) + 1
                else:
                    followed[r] = followed.get(r, 0) + 1
            if p.leader == NO_LEADER:
                note("offline", row)
            # Kafka's replication factor during a move: the replicas
            # without those being added (which join the ISR as they catch up).
            if len(p.isr) < len(p.replicas) - len(adding):
                note("under_replicated", row)
            # KIP-966's effective minimum: a minimum above the replicas is allowed.
            if len(p.isr) < min(min_insync_replicas, len(p.replicas)):
                note("under_min_isr", row)
            if adding or removing:
                note("moving", row)
    brokers = []
    for bid in sorted(set(known) | set(led) | set(followed)):
        info, alive = known.get(bid, (None, False))
        rpc, kafka = probes.get(bid, (None, None))
        brokers.append(
            BrokerStatus(
                bid,
                alive,
                info.az if info else None,
                info.host if info else None,
                info.port if info else None,
                info.kafka_port if info else None,
                led.get(bid, 0),
                followed.get(bid, 0),
                rpc,
                kafka,
            )
        )
    problems = [f"broker {b.broker_id} fenced" for b in brokers if not b.alive]
    for b in brokers:
        for port, outcome in (("rpc", b.rpc), ("kafka", b.kafka)):
            if outcome not in (None, PROBE_OK):
                problems.append(f"broker {b.broker_id} {port} port {outcome}")
    for kind, what in (("offline", "offline"), ("under_replicated", "under-replicated"),
                       ("under_min_isr", "under min ISR")):  # fmt: skip
        if counts[kind]:
            problems.append(f"{counts[kind]} partition{'s' if counts[kind] != 1 else ''} {what}")
    for w in walmgr:
        if w.error:
            problems.append(f"walmgr {w.where}: {w.error}")
        elif w.cluster_id is not None and controller.cluster_id is not None and w.cluster_id != controller.cluster_id:
            problems.append(f"walmgr {w.where} belongs to cluster {w.cluster_id}")

    def of(kind: str) -> PartitionCounts:
        return PartitionCounts(counts[kind], tuple(kinds[kind]))

    return ClusterStatus(
        controller,
        tuple(brokers),
        total,
        of("under_replicated"),
        of("offline"),
        of("under_min_isr"),
        of("moving"),
        min_insync_replicas,
        tuple(walmgr),
        tuple(problems),
        now_ms,
    )


# ------------------------------------------------------------------- JSON


def _row_json(r: PartitionRow) -> dict[str, Any]:
    return {"topic": r.topic, "partition": r.partition, "leader": r.leader, "replicas": list(r.replicas),
            "isr": list(r.isr), "adding": list(r.adding), "removing": list(r.removing)}  # fmt: skip


def _counts_json(c: PartitionCounts) -> dict[str, Any]:
    return {"count": c.count, "first": [_row_json(r) for r in c.first]}


def _broker_json(b: BrokerStatus) -> dict[str, Any]:
    return {
        "id": b.broker_id,
        "alive": b.alive,
        "az": b.az,
        "host": b.host,
        "port": b.port,
        "kafka_port": b.kafka_port,
        "led": b.led,
        "followed": b.followed,
        "rpc": b.rpc,
        "kafka": b.kafka,
    }


def controller_json(c: ControllerStatus) -> dict[str, Any]:
    return {"kind": c.kind, "address": c.address, "answered": c.answered, "metadata_version": c.metadata_version,
            "cluster_id": c.cluster_id, "acting_broker": c.acting_broker, "error": c.error}  # fmt: skip


def walmgr_json(w: WalmgrStatus, now_ms: int) -> dict[str, Any]:
    return {
        "source": w.source,
        "where": w.where,
        "error": w.error,
        "last_cycle_ms": w.last_cycle_ms,
        "last_cycle": _iso(w.last_cycle_ms),
        "last_cycle_age_s": None if w.last_cycle_ms is None else round((now_ms - w.last_cycle_ms) / 1000, 3),
        "last_full_scan_ms": w.last_full_scan_ms,
        "cluster_id": w.cluster_id,
        # What the counts cover: the registry's are of all time, the metrics' since walmgr started.
        "counts_since": "registry created" if w.source == "registry" else "walmgr started",
        "cycles": w.cycles,
        "deleted_files": w.deleted_files,
        "kept_referenced": w.kept_referenced,
        "kept_doubt": w.kept_doubt,
        "cycle_errors": w.cycle_errors,
        "scan_errors": w.scan_errors,
        "delete_failures": w.delete_failures,
        "metadata_errors": w.metadata_errors,
        "tracked": w.tracked,
        "planned": w.planned,
        "last_cycle_counts": w.last_cycle,
    }


def unreachable_json(controller: ControllerStatus) -> dict[str, Any]:
    """The JSON of a metadata source that did not answer: the same keys, nothing known."""
    return {
        "health": {"exit_status": EXIT_UNREACHABLE, "status": "unreachable", "problems": [controller.error]},
        "controller": controller_json(controller),
        "brokers": None,
        "partitions": None,
        "reassignments": None,
        "walmgr": None,
    }


def to_json(s: ClusterStatus) -> dict[str, Any]:
    return {
        "health": {
            "exit_status": s.exit_status,
            "status": "healthy" if s.exit_status == EXIT_HEALTHY else "unhealthy",
            "problems": list(s.problems),
        },
        "controller": controller_json(s.controller),
        "brokers": [_broker_json(b) for b in s.brokers],
        "partitions": {
            "total": s.partitions,
            "min_insync_replicas": s.min_insync_replicas,
            "under_replicated": _counts_json(s.under_replicated),
            "offline": _counts_json(s.offline),
            "under_min_isr": _counts_json(s.under_min_isr),
        },
        "reassignments": _counts_json(s.reassigning),
        "walmgr": [walmgr_json(w, s.now_ms) for w in s.walmgr],
    }


# ------------------------------------------------------------------ table


def _iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _aligned(rows: Sequence[Sequence[str]], indent: str = "") -> list[str]:
    widths = [max(len(r[i]) for r in rows if i < len(r)) for i in range(max(len(r) for r in rows))]
    return [indent + "  ".join(c.ljust(widths[i]) for i, c in enumerate(r)).rstrip() for r in rows]


def _ids(ids: Iterable[int]) -> str:
    return "[" + ",".join(map(str, ids)) + "]"


def controller_line(c: ControllerStatus) -> str:
    if not c.answered:
        return f"{c.kind} {c.address}: no answer ({c.error})"
    acting = f", acting controller broker {c.acting_broker}" if c.acting_broker is not None else ""
    if c.kind == "etcd" and c.acting_broker is None:
        acting = ", no acting controller"
    return f"{c.kind} {c.address}: answered, metadata version {c.metadata_version}, cluster {c.cluster_id}{acting}"


def _walmgr_line(w: WalmgrStatus, now_ms: int) -> str:
    if w.error:
        return f"{w.source} {w.where}: unreadable: {w.error}"
    if w.last_cycle_ms is None:
        last = "no cycle completed yet"
    else:
        last = f"last cycle ended {_iso(w.last_cycle_ms)} ({max(0, now_ms - w.last_cycle_ms) // 1000} s ago)"
    if w.last_cycle is not None:
        c = w.last_cycle
        last += (f" (candidates {c['candidates']}, deleted {c['deleted_files']}, kept referenced "
                 f"{c['kept_referenced']}, kept on doubt {c['kept_doubt']}, delete failures {c['delete_failures']}"
                 f"{', scan error: ' + str(c['scan_error']) if c['scan_error'] else ''})")  # fmt: skip
    parts = [f"{w.source} {w.where}: {last}"]
    since = "in all" if w.source == "registry" else "since start"
    for name, v in (("cycles", w.cycles), ("deleted", w.deleted_files), ("kept referenced", w.kept_referenced),
                    ("kept on doubt", w.kept_doubt), ("cycle errors", w.cycle_errors), ("scan errors", w.scan_errors),
                    ("delete failures", w.delete_failures), ("metadata errors", w.metadata_errors)):  # fmt: skip
        if v is not None:
            parts.append(f"{name} {v}")
    if w.tracked is not None:
        parts.append(f"tracked now {w.tracked}")
    return ", ".join(parts[:1]) + (f"; {since}: " + ", ".join(parts[1:]) if len(parts) > 1 else "")


def render_table(s: ClusterStatus, *, verbose: bool = False) -> str:
    """One aligned table: a row per section, the brokers' own columns
    under theirs, and with ``verbose`` the first partitions of each kind."""
    pad = len("REASSIGNMENTS") + 2  # the longest section's name
    alive = sum(b.alive for b in s.brokers)
    out = [
        "CONTROLLER".ljust(pad) + controller_line(s.controller),
        "BROKERS".ljust(pad) + f"{len(s.brokers)}: {alive} alive, {len(s.brokers) - alive} fenced",
    ]
    if s.brokers:
        table = [["id", "az", "address", "state", "led", "followed", "rpc", "kafka"]]
        for b in s.brokers:
            address = f"{b.host}:{b.port}" if b.host is not None else "-"
            table.append([str(b.broker_id), b.az or "-", address, "alive" if b.alive else "fenced", str(b.led),
                          str(b.followed), b.rpc or "-", b.kafka or "-"])  # fmt: skip
        out += _aligned(table, indent="  ")
    kinds = (("under-replicated", s.under_replicated), ("offline", s.offline),
             ("under min ISR", s.under_min_isr))  # fmt: skip
    summary = ", ".join(f"{c.count} {what}" for what, c in kinds)
    out.append("PARTITIONS".ljust(pad) + f"{s.partitions} in all: {summary} (min.insync.replicas "
               f"{s.min_insync_replicas})")  # fmt: skip
    if verbose:
        out += _partition_rows([(what, c) for what, c in kinds])
    out.append("REASSIGNMENTS".ljust(pad) + f"{s.reassigning.count} in progress")
    if verbose:
        out += _partition_rows([("moving", s.reassigning)])
    if not s.walmgr:
        out.append("WALMGR".ljust(pad) + "unknown (no --walmgr)")
    for w in s.walmgr:
        out.append("WALMGR".ljust(pad) + _walmgr_line(w, s.now_ms))
    health = "healthy" if not s.problems else f"unhealthy: {'; '.join(s.problems)}"
    out.append("HEALTH".ljust(pad) + health)
    return "\n".join(out)


def _partition_rows(kinds: Sequence[tuple[str, PartitionCounts]]) -> list[str]:
    table = [
        [what, f"{r.topic}-{r.partition}", f"leader {r.leader}", f"replicas {_ids(r.replicas)}", f"isr {_ids(r.isr)}"]
        + ([f"adding {_ids(r.adding)}", f"removing {_ids(r.removing)}"] if r.adding or r.removing else [])
        for what, c in kinds
        for r in c.first
    ]
    more = [f"  ... {c.count - len(c.first)} more {what}" for what, c in kinds if c.count > len(c.first)]
    return (_aligned(table, indent="  ") if table else []) + more
