"""``python -m simulations report``: regenerate ``simulations/REPORT.md``
from the shipped scenarios, answering the concerns raised on the Kafka dev
list against this design (RPC amplification, request rate, cross-AZ
traffic, latency, leadership changes, imbalance) with the numbers of one
seed.

Timings (wall_s, speed-up) are left out of the report so that it only
changes when the code or the scenarios do.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from simulations.aggregate import aggregate, compare_rows
from simulations.calibrate import MEASURED_PATH
from simulations.crossover import Sweep, run_sweeps
from simulations.crossover import markdown as crossover_markdown
from simulations.crossover import write_plots as write_crossover_plots
from simulations.metrics import DesignResult
from simulations.rotation_report import (
    ROTATION_SCENARIOS,
    budget_bound,
    early_closes_max,
    rotation_lines,
    rule_runs,
)
from simulations.runner import RunResult, design_runs, run_scenario
from simulations.scenario import (
    KIP1163_COORDINATOR_MS_P50,
    KIP1163_COORDINATOR_MS_P99,
    Design,
    Routing,
    Scenario,
    load_scenario,
    parse_scenario,
    read_scenario_doc,
)
from simulations.storage import figures as storage_figures
from simulations.sweep import run_sweep
from simulations.tiering_report import tiering_lines
from simulations.verdicts import Check, Comparison, compare

# The sweep of the balanced cluster: shorter than the scenario's minute, the
# fan-out settles within seconds.
SWEEP_DURATION_S = 20
SWEEP_BROKERS_PER_AZ = (1, 2, 4, 8)
# The load sweep (cost): every producer's send rate times these.
LOAD_FACTORS = (1, 2, 4, 8, 16)


def _n(x: float | None, digits: int = 2) -> str:
    if x is None:
        return "-"
    return f"{x:,.{digits}f}"


def _label(d: DesignResult) -> str:
    return f"{d.design} ({d.routing})"


def _design_table(r: RunResult) -> list[str]:
    lines = [
        "| design | WAL files | commit RPCs/file local / remote (max) | distinct leaders/file "
        "| network commit RPCs/s received per broker mean (max) / local commits/s per broker / coordinator "
        "| cross-AZ B/s data / metadata | latency ms per produce request p50 / p99 / p99.9 "
        "| latency ms per send p50 / p99 | replication lag ms p50 / p99 | PUT/s | GET/s "
        "| request + transfer $/month |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for d in r.designs:
        files = d.design != "classic"
        lines.append(
            "| "
            + " | ".join(
                [
                    _label(d),
                    str(d.files) if files else "-",
                    f"{_n(d.commit_local_mean)} / {_n(d.commit_remote_mean)} ({d.commit_remote_max})" if files else "-",
                    _n(d.distinct_leaders_mean) if files else "-",
                    (
                        f"{_n(d.network_commit_rpcs_per_s_per_broker_mean, 1)} "
                        f"({_n(d.network_commit_rpcs_per_s_per_broker_max, 1)}) / "
                        f"{_n(d.local_commits_per_s_per_broker_mean, 1)} / {_n(d.commit_rpcs_per_s_coordinator, 1)}"
                        if files
                        else "-"
                    ),
                    f"{_n(d.cross_az_data_bytes_per_s, 0)} / {_n(d.cross_az_metadata_bytes_per_s, 0)}",
                    f"{_n(d.latency_ms_p50, 1)} / {_n(d.latency_ms_p99, 1)} / {_n(d.latency_ms_p999, 1)}",
                    f"{_n(d.send_latency_ms_p50, 1)} / {_n(d.send_latency_ms_p99, 1)}",
                    f"{_n(d.replication_lag_ms_p50)} / {_n(d.replication_lag_ms_p99)}",
                    _n(d.puts_per_s, 1),
                    _n(d.gets_per_s, 1),
                    _n(d.cost.total_usd, 0),
                ]
            )
            + " |"
        )
    return lines


def _failure_table(r: RunResult) -> list[str]:
    """Failed produce requests per design and event window."""
    if not r.designs or not r.designs[0].events:
        return []
    windows = r.designs[0].failure_windows
    heads = [f"{w.from_ms / 1000:g}-{w.to_ms / 1000:g} s (after {w.after})" for w in windows]
    lines = [
        "Failed produce requests per window, from each event to the next; in brackets why "
        "(broker_dead: sent to a dead broker; broker_died: held by a broker when it died; "
        "request_timed_out: its commit went to a dead leader and timed out; not_leader_or_follower: sent to "
        "a broker that no longer leads the partition):",
        "",
        "| design | " + " | ".join(heads) + " |",
        "| --- | " + " | ".join("---" for _ in heads) + " |",
    ]
    for d in r.designs:
        cells = []
        for w in d.failure_windows:
            why = w.produce_requests_failed_by_reason
            detail = ", ".join(f"{k} {v}" for k, v in why.items()) if len(why) > 1 else "".join(why)
            cells.append(f"{w.produce_requests_failed}" + (f" ({detail})" if detail else ""))
        lines.append(f"| {_label(d)} | " + " | ".join(cells) + " |")
    return lines


def _section(r: RunResult) -> list[str]:
    s = r.scenario
    out = [
        f"### `{s.name}`",
        "",
        s.description.strip().replace("\n", " "),
        "",
        f"{s.cluster.brokers} brokers in {len(s.cluster.azs)} AZs {list(s.cluster.brokers_per_az)}, "
        f"{s.cluster.partitions} partitions, RF {s.cluster.replication_factor}; "
        f"{s.duration_s:g} simulated s, seed {r.seed}.",
        "",
        *_design_table(r),
    ]
    if r.designs and r.designs[0].events:
        out += ["", "Events: " + "; ".join(f"{ms / 1000:g} s: {what}" for ms, what in r.designs[0].events) + "."]
        out += ["", *_failure_table(r)]
    return [*out, ""]


def _window(d: DesignResult, lo_ms: float, hi_ms: float) -> tuple[float, int, int]:
    files = [f for f in d.file_commits if lo_ms <= f.at_ms < hi_ms]
    if not files:
        return 0.0, 0, 0
    return sum(f.remote for f in files) / len(files), max(f.remote for f in files), len(files)


def _scaled_load(name: str, factor: float, duration_s: float) -> Scenario:
    """``name`` with every producer group's send rate times ``factor``,
    partlog (its first routing) and classic only."""
    doc, where = read_scenario_doc(name)
    doc = dict(doc)
    doc["producers"] = [{**p, "sends_per_s": p["sends_per_s"] * factor} for p in doc["producers"]]
    doc["duration_s"] = duration_s
    doc["designs"] = ["partlog", "classic"]
    doc["routings"] = doc.get("routings", ["az-representative"])[:1]
    return parse_scenario(doc, where)


def _verdict_rows(runs: dict[str, RunResult]) -> list[tuple[str, str, str]]:
    """(question, scenario, verdict) rows, each computed from the numbers
    against the bound or threshold it states (simulations/verdicts.py)."""
    rows: list[tuple[str, str, str]] = []
    bal, imb, jun, fail, loss, big = (
        runs["balanced-3az"],
        runs["imbalanced-2az"],
        runs["jun-100x100"],
        runs["broker-failure"],
        runs["coordinator-az-loss"],
        runs["kip1163-1gib"],
    )
    azs = len(bal.scenario.cluster.azs)
    bal_p = bal.design("partlog", "az-representative")
    rows.append(
        (
            "A WAL file costs at most AZs - 1 remote commit RPCs with AZ representatives (equal AZs)",
            "balanced-3az",
            Check("remote max", bal_p.commit_remote_max, azs - 1).sentence(),
        )
    )
    lone = next(
        b for b in imb.design("partlog", "az-representative").per_broker if b.az == imb.scenario.cluster.azs[-1]
    )
    rows.append(
        (
            "The lone broker of a small AZ needs between 1 and 3 remote commit RPCs per file",
            "imbalanced-2az",
            f"min {Check('min', lone.remote_min, 1, at_least=True).sentence()}; "
            f"max {Check('max', lone.remote_max, 3).sentence()}",
        )
    )
    jun_any = jun.design("partlog", "any-broker")
    jun_rep = jun.design("partlog", "az-representative")
    rows.append(
        (
            "The feared amplification is real with any-broker routing (>= 10 remote commit RPCs per file)",
            "jun-100x100",
            Check("remote mean", jun_any.commit_remote_mean, 10, at_least=True).sentence(),
        )
    )
    rows.append(
        (
            "Representatives cap it (remote max <= 3 with 34/33/33 brokers)",
            "jun-100x100",
            Check("remote max", jun_rep.commit_remote_max, 3).sentence(),
        )
    )
    for name, r in (("balanced-3az", bal), ("jun-100x100", jun), ("kip1163-1gib", big)):
        p, c = r.design("partlog", "az-representative"), r.design("coordinator")
        for q, attr in (("p50", "send_latency_ms_p50"), ("p99", "send_latency_ms_p99")):
            rows.append(
                (
                    f"Per-send latency {q}: partlog (representatives) against the coordinator",
                    name,
                    compare(q, "partlog", getattr(p, attr), "coordinator", getattr(c, attr), " ms"),
                )
            )
    bal_any, bal_c = bal.design("partlog", "any-broker"), bal.design("coordinator")
    rows.append(
        (
            "Per-request latency p99 at equal routing (any-broker): the commit path alone",
            "balanced-3az",
            compare("p99", "partlog", bal_any.latency_ms_p99, "coordinator", bal_c.latency_ms_p99, " ms"),
        )
    )
    for name, r in (("balanced-3az", bal), ("jun-100x100", jun)):
        p, c = r.design("partlog", "az-representative"), r.design("coordinator")
        rows.append(
            (
                "Requests/s all nodes receive (produce + commit RPCs + replica fetches)",
                name,
                Comparison(
                    "requests", "partlog", p.requests_per_s_total, "coordinator", c.requests_per_s_total, "/s"
                ).sentence(),
            )
        )
    for name, r in (("balanced-3az", bal), ("jun-100x100", jun), ("kip1163-1gib", big)):
        p, c, k = r.design("partlog", "az-representative"), r.design("coordinator"), r.design("classic")
        rows.append(
            (
                "Request + transfer cost per month: partlog (representatives) against the coordinator",
                name,
                Comparison("cost", "partlog", p.cost.total_usd, "coordinator", c.cost.total_usd, " $").sentence(),
            )
        )
        rows.append(
            (
                "Request + transfer cost per month: partlog (representatives) against classic replication",
                name,
                Comparison("cost", "partlog", p.cost.total_usd, "classic", k.cost.total_usd, " $").sentence(),
            )
        )
    big_p, big_c = big.design("partlog", "az-representative"), big.design("coordinator")
    rows.append(
        (
            "Busiest commit store's utilization at 1 GiB/s (the same store on both sides)",
            "kip1163-1gib",
            Comparison(
                "utilization",
                "partlog",
                100 * big_p.commit_store_utilization_max,
                "coordinator",
                100 * big_c.commit_store_utilization_max,
                "%",
            ).sentence(),
        )
    )
    for name, r in (("broker-failure", fail), ("coordinator-az-loss", loss)):
        for d in r.designs:
            rows.append(
                (
                    f"No send of a live producer fails after Kafka's retries: {_label(d)}",
                    name,
                    Check("sends failed", d.sends_failed_live, 0).sentence(),
                )
            )
        p, c = r.design("partlog", "az-representative"), r.design("coordinator")
        rows.append(
            (
                "Per-send latency p99 through the failure",
                name,
                compare("p99", "partlog", p.send_latency_ms_p99, "coordinator", c.send_latency_ms_p99, " ms"),
            )
        )
    kip = runs["balanced-3az-kip1163-coordinator"].design("coordinator")
    rows.append(
        (
            "Per-send latency p99 if the coordinator's store is KIP-1163's (commit p50 "
            f"{KIP1163_COORDINATOR_MS_P50:g} / p99 {KIP1163_COORDINATOR_MS_P99:g} ms), partlog's the measured one",
            "balanced-3az",
            compare("p99", "partlog", bal_p.send_latency_ms_p99, "coordinator", kip.send_latency_ms_p99, " ms"),
        )
    )
    for name in ROTATION_SCENARIOS:
        r = runs[name]
        budget = r.scenario.buffer.puts_per_s_max()
        for d in (r.design("partlog", "az-representative"), r.design("coordinator")):
            rows.append(
                (
                    f"Early closes per broker in any 1 s stay within the PUT budget (burst + {budget}/s): {_label(d)}",
                    name,
                    Check("max in 1 s", early_closes_max(d, 1000), budget_bound(budget, 1000)).sentence(),
                )
            )
    lead_p = runs["leadership-change"].design("partlog")
    rows.append(
        (
            "A leadership change loses no batch (representatives forward to the leader they know now)",
            "leadership-change",
            Check("batches failed", lead_p.batches_failed, 0).sentence(),
        )
    )
    return rows


def _calibration_lines(measured: dict[str, Any] | None) -> list[str]:
    out = ["## Calibration against a real cluster", ""]
    if measured is None:
        return [
            *out,
            "Not measured yet: `python -m simulations calibrate --save` writes `simulations/measured.json`.",
            "",
        ]
    shape = measured["shape"]
    inputs = measured["inputs"]
    out += [
        f"`python -m simulations calibrate --save` ({measured.get('measured_on', '?')}): a real `partlog cluster` "
        f"({shape['azs']} AZs x {shape['brokers_per_az']} brokers, {shape['partitions']} partitions, RF "
        f"{shape['replication_factor']}, {shape['producers_per_az']} producers per AZ at {shape['rate_per_producer']} "
        f"records/s of {shape['message_bytes']} B, {shape['duration_s']:g} s, loopback, local object store, fsync "
        "on) and the simulator on the same shape and load, with partlog's client modelled "
        "(`simulations/record_producers.py`). Inputs: PUT p50 / p99 "
        f"{inputs['put_ms']['p50']:.1f} / {inputs['put_ms']['p99']:.1f} ms measured in the run; network round trip "
        f"p50 / p99 {inputs['network_rtt_ms']['p50']} / {inputs['network_rtt_ms']['p99']} ms assumed (loopback "
        f"through Python's RPC stack); commit cost {inputs['commit_cost']}. Target: within "
        f"{measured['tolerance']:.0%} on every row; {measured['within']} of {measured['of']} rows are.",
        "",
        "| metric | predicted | measured | predicted / measured | within | why not |",
        "| --- | --- | --- | --- | --- | --- |",
    ]

    def table(rows: list[dict[str, Any]]) -> list[str]:
        lines = []
        for r in rows:
            ratio = "-" if r["ratio"] is None else f"{r['ratio']:.2f}"
            lines.append(
                f"| {r['metric']} | {r['predicted']:,.2f} | {r['measured']:,.2f} | {ratio} | "
                f"{'yes' if r['within_tolerance'] else '**no**'} | {r['why']} |"
            )
        return lines

    out += table(measured["rows"])
    fitted = measured.get("rows_given_measured_commit_time")
    if fitted:
        fa = measured["fitted_follower_apply_ms"]
        out += [
            "",
            "The misses have one cause, the commit time: the real cluster runs its 6 brokers, 6 clients and the "
            "controller in one Python process on 2 cores, so every commit also waits for the event loop and the "
            "shared thread pool, which the model does not have. Fitting that one input (the followers' append "
            f"time, to p50 {fa['p50']:.1f} / p99 {fa['p99']:.1f} ms, so that the simulated commit time matches "
            "the measured one) and predicting the rest: "
            f"{measured['within_given_measured_commit_time']} of {measured['of_given_measured_commit_time']} rows "
            "within the target.",
            "",
            "| metric | predicted | measured | predicted / measured | within | why not |",
            "| --- | --- | --- | --- | --- | --- |",
            *table([r for r in fitted if not r["metric"].startswith("commit time")]),
        ]
    return [*out, ""]


def _storage_lines(runs: dict[str, RunResult], pages_per_commit: float | None) -> list[str]:
    out = [
        "## Storage and garbage collection (the thread's concerns 1 and 3)",
        "",
        "Per design, from each run's counts (`simulations/storage.py`): metadata writes and fsyncs per second "
        "(a group commit or a follower's append is one journal write and one fdatasync; classic Kafka appends "
        "without fsync), files open per broker for metadata (partlog: one LMDB environment and one journal for "
        "all partitions; classic: log, offset and time index per partition replica), WAL objects alive at 7 "
        "days' retention, and what garbage collection costs: walmgr's LISTs (256 shards every 30 s cycle, every "
        "object once an hour), footer GETs (one per object) and DeleteObjects requests (250 objects each), and "
        "walmgr's sweep (every broker asked about the keys it deletes: RPCs and MB per hour, inside the cluster). "
        "The coordinator design knows every file it committed: no LIST or footer read for those. Pages written "
        + (
            f"per commit: {pages_per_commit:.2f} (measured from a durable `MetadataStore`)."
            if pages_per_commit is not None
            else "per commit: not measured (`calibrate --save`)."
        ),
        "",
        "| scenario | design | metadata writes/s | fsyncs/s | metadata files open per broker (coordinator) "
        "| pages written/s | WAL objects alive | GC LIST/h | GC GET/h | GC DeleteObjects/h | GC $/month "
        "| sweep RPCs/h (MB/h) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name in ("balanced-3az", "jun-100x100", "kip1163-1gib"):
        r = runs[name]
        for d in r.designs:
            if d.design == "partlog" and d.routing != "az-representative":
                continue
            f = storage_figures(d, r.scenario, pages_per_commit or 0.0)
            out.append(
                f"| `{name}` | {_label(d)} | {_n(f.metadata_writes_per_s, 1)} | {_n(f.fsyncs_per_s, 1)} | "
                f"{_n(f.open_files_per_broker, 0)} ({_n(f.open_files_coordinator, 0)}) | "
                f"{_n(f.pages_written_per_s, 0) if pages_per_commit is not None else '-'} | "
                f"{_n(f.wal_objects_alive, 0)} | {_n(f.gc_lists_per_hour, 0)} | {_n(f.gc_gets_per_hour, 0)} | "
                f"{_n(f.gc_deletes_per_hour, 0)} | {_n(f.gc_usd_per_month, 0)} | "
                f"{_n(f.gc_sweep_rpcs_per_hour, 0)} ({_n(f.gc_sweep_bytes_per_hour / 1e6, 1)}) |"
            )
    return [*out, ""]


SCALE_SHAPES: tuple[tuple[str, dict[str, Any]], ...] = (
    ("100 brokers, 1,000 partitions", {}),
    ("1,000 brokers, 100,000 partitions", {"brokers_per_az": [334, 333, 333], "partitions": 100_000}),
)


def _scale_lines(seed: int, bal: RunResult) -> list[str]:
    """The aggregate mode at Jun's shape and ten times it, and its agreement
    with the event-level mode on balanced-3az."""
    out = [
        "## Scale: 1,000 brokers (aggregate mode)",
        "",
        "`python -m simulations aggregate` computes the steady-state rates from expectations over the same "
        "topology, routing and load (`simulations/aggregate.py`; no latency, no failures). `jun-100x100`'s load "
        "(66 sends/s of 100 partitions x 16 KiB) on its own shape and on 1,000 brokers with 100,000 partitions:",
        "",
        "| shape | design | WAL files/s | commit RPCs/file local / same AZ / cross AZ | network commit RPCs/s "
        "(busiest broker) | request + transfer $/month |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for label, over in SCALE_SHAPES:
        scenario = load_scenario("jun-100x100", over)
        for design, routing in design_runs(scenario):
            if design is Design.CLASSIC:
                continue
            a = aggregate(scenario, design, routing, seed)
            out.append(
                f"| {label} | {a.design} ({a.routing}) | {_n(a.files_per_s, 1)} | {_n(a.commit_local_mean)} / "
                f"{_n(a.commit_same_az_mean)} / {_n(a.commit_cross_az_mean)} | {_n(a.network_commit_rpcs_per_s, 0)} "
                f"({_n(a.network_commit_rpcs_per_s_per_broker_max, 1)}) | {_n(a.cost.total_usd, 0)} |"
            )
    out += [
        "",
        "Agreement with the event-level mode on `balanced-3az` (the run above; target: within 10%):",
        "",
        "| design | figure | aggregate | event-level | difference |",
        "| --- | --- | --- | --- | --- |",
    ]
    worst = 0.0
    for d in bal.designs:
        if d.design == "classic":
            continue
        a = aggregate(bal.scenario, Design(d.design), Routing(d.routing), seed)
        for name, x, y in compare_rows(a, d):
            diff = (x - y) / y if y else 0.0
            worst = max(worst, abs(diff))
            out.append(f"| {_label(d)} | {name} | {_n(x)} | {_n(y)} | {100 * diff:+.1f}% |")
    out += ["", f"Largest difference: {100 * worst:.1f}%.", ""]
    return out


def _load_measured() -> dict[str, Any] | None:
    try:
        doc = json.loads(MEASURED_PATH.read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and "rows" in doc else None


def _model_lines(s: Scenario) -> list[str]:
    c = s.commit
    same = "the same store on both sides" if c.leader == c.coordinator else "different stores, as the scenario states"
    return [
        "**The model, the same for both designs** (docs/design/fanout-model.md). Every commit target (a partlog "
        "partition leader, or the coordinator) is a FIFO group-commit server: a group costs a fixed part "
        "plus CPU per batch, calibrated from `partlog bench commit` "
        f"(partlog leaders: {c.leader.describe()}; coordinator: {c.coordinator.describe()}; {same}). An "
        "acks=all commit waits for its slowest follower's (the coordinator's slowest replica's) round trip "
        "and append on both sides. Both designs run the real `ProducePipeline` and real `MetadataStore` "
        "sequencing, the same producers (Poisson sends, Kafka's retries with KIP-580 backoff), the same "
        "network (lognormal round trips, FIFO per connection), the same object store (PUT latency plus size "
        f"over {s.object_store.put_bytes_per_s / 1e6:g} MB/s; GETs by `get_mode`, here `{s.object_store.get_mode}`), "
        "Kafka's rack-aware replica assignment drawn from the seed, and the same faults: a dead node refuses "
        "connections at once or black-holes them until the caller's timeout, and a dead coordinator fails over "
        "after the same detection time as a partlog leader (the session timeout).",
    ]


def build_report(seed: int, *, jobs: int = 1, plots: Sequence[str] = (), sweeps: Sequence[Sweep] = ()) -> str:
    runs = {name: run_scenario(load_scenario(name), seed, jobs=jobs) for name in _SCENARIOS}
    # A stated difference of stores: the coordinator with KIP-1163's own figure.
    runs["balanced-3az-kip1163-coordinator"] = run_scenario(
        load_scenario(
            "balanced-3az",
            {
                "designs": ["coordinator"],
                "coordinator_ms_p50": KIP1163_COORDINATOR_MS_P50,
                "coordinator_ms_p99": KIP1163_COORDINATOR_MS_P99,
            },
        ),
        seed,
        jobs=jobs,
    )
    sweep = run_sweep(
        "balanced-3az",
        "brokers_per_az",
        list(SWEEP_BROKERS_PER_AZ),
        "commit_rpcs_per_file.remote_mean",
        seed,
        {"duration_s": SWEEP_DURATION_S, "designs": ["partlog", "coordinator"], "routings": ["az-representative"]},
        jobs=jobs,
    )
    load_runs = [run_scenario(_scaled_load("balanced-3az", f, SWEEP_DURATION_S), seed, jobs=jobs) for f in LOAD_FACTORS]
    rotation = {name: rule_runs(name, runs[name], seed, jobs=jobs) for name in ROTATION_SCENARIOS}
    bal = runs["balanced-3az"]
    jun = runs["jun-100x100"]
    imb = runs["imbalanced-2az"]
    lead = runs["leadership-change"]
    fail = runs["broker-failure"]
    loss = runs["coordinator-az-loss"]
    big = runs["kip1163-1gib"]

    jun_any = jun.design("partlog", "any-broker")
    jun_rep = jun.design("partlog", "az-representative")
    jun_leader = jun.design("partlog", "leader-only")
    jun_coord = jun.design("coordinator")
    jun_classic = jun.design("classic")
    bal_p = bal.design("partlog", "az-representative")
    bal_any = bal.design("partlog", "any-broker")
    bal_c = bal.design("coordinator")
    bal_k = bal.design("classic")
    imb_p = imb.design("partlog", "az-representative")
    imb_any = imb.design("partlog", "any-broker")
    imb_c = imb.design("coordinator")
    jun_produce_per_s = jun_rep.produce_requests / jun.simulated_s
    jun_sends_per_s = sum(p.count * p.sends_per_s for p in jun.scenario.producers)
    buffer = bal.scenario.buffer

    lone = next(b for b in imb_p.per_broker if b.az == imb.scenario.cluster.azs[-1])
    lead_p = lead.design("partlog")
    move_ms = lead.scenario.events[0].at_s * 1000
    settle_ms = move_ms + lead.scenario.metadata.client_propagation_ms + lead.scenario.metadata.broker_propagation_ms
    before = _window(lead_p, 0, move_ms)
    during = _window(lead_p, move_ms, settle_ms)
    after = _window(lead_p, settle_ms + 1000, lead.simulated_s * 1000)

    # Throughput: where (if anywhere) partlog's request + transfer cost meets classic's.
    load_p = [r.design("partlog") for r in load_runs]
    load_k = [r.design("classic") for r in load_runs]
    cross = next(
        (f for f, p, k in zip(LOAD_FACTORS, load_p, load_k, strict=True) if p.cost.total_usd < k.cost.total_usd),
        None,
    )
    if cross is None:
        cross_text = (
            f"In this range (up to {LOAD_FACTORS[-1]}x, {_n(load_p[-1].produce_bytes_per_s / 1e6)} MB/s) partlog's "
            "request + transfer cost stays above classic's."
        )
    else:
        i = LOAD_FACTORS.index(cross)
        prev = (
            f"; it is still above it at {LOAD_FACTORS[i - 1]}x ({_n(load_p[i - 1].produce_bytes_per_s / 1e6)} MB/s: "
            f"${_n(load_p[i - 1].cost.total_usd, 0)} vs ${_n(load_k[i - 1].cost.total_usd, 0)})"
            if i > 0
            else ""
        )
        cross_text = (
            f"Partlog's request + transfer cost falls below classic's at {cross}x the load "
            f"({_n(load_p[i].produce_bytes_per_s / 1e6)} MB/s: ${_n(load_p[i].cost.total_usd, 0)} vs "
            f"${_n(load_k[i].cost.total_usd, 0)}){prev}. Partlog's PUTs stop growing once every broker "
            f"spends its PUT budget ({buffer.puts_per_s_max()} PUTs/s each, one per commit interval), while "
            "classic's cross-AZ bytes grow with the data."
        )

    def cmp(what: str, a: DesignResult, b: DesignResult, attr: str, unit: str = " ms") -> str:
        def value(d: DesignResult) -> float | None:
            return d.cost.total_usd if attr == "cost" else getattr(d, attr)

        return compare(what, _label(a), value(a), _label(b), value(b), unit)

    leader_cross_share = jun_leader.cross_az_data_bytes_per_s / jun_leader.produce_bytes_per_s
    verdicts = _verdict_rows(runs)
    failed_verdicts = [v for v in verdicts if "**fails**" in v[2]]

    lines = [
        "# Commit fan-out, simulated",
        "",
        "Generated by `python -m simulations report` (seed "
        f"{seed}); do not edit by hand. The designs: **partlog** (commits to each partition's "
        "leader, the routing policy in brackets), **coordinator** (KIP-1164: one commit per "
        "WAL file to a central coordinator in one AZ) and **classic** (Kafka replication; "
        "cross-AZ bytes and a first-order latency only). Costs are object-store requests plus cross-AZ "
        'transfer per month ("request + transfer"); storage is not priced.',
        "",
        *_model_lines(bal.scenario),
        "",
        "## Verdicts",
        "",
        "Each row is computed from this run's numbers against the bound or threshold it states: a comparison "
        "names the better side (lower is better unless it says otherwise) or a tie within 5%; a check holds "
        f"or fails. {len(verdicts)} rows; {len(failed_verdicts)} checks fail"
        + (": " + "; ".join(f"{q} ({n})" for q, n, _ in failed_verdicts) if failed_verdicts else "")
        + ".",
        "",
        "| question | scenario | verdict |",
        "| --- | --- | --- |",
        *(f"| {q} | `{n}` | {v} |" for q, n, v in verdicts),
        "",
        "## The thread's concerns, answered",
        "",
        '**RPC amplification** ("if a produce request has 100 partitions, in a cluster with 100 brokers, '
        'each produce request could generate 100 more RPC requests"). In `jun-100x100` with producers '
        f"sending to any broker of their AZ, a WAL file holds partitions of {_n(jun_any.distinct_leaders_mean, 1)} "
        f"leaders on average and costs {_n(jun_any.commit_remote_mean, 1)} remote commit RPCs (max "
        f"{jun_any.commit_remote_max}). With AZ representatives "
        f"the same load costs {_n(jun_rep.commit_local_mean)} local and {_n(jun_rep.commit_remote_mean)} "
        f"remote commit RPCs per file (max {jun_rep.commit_remote_max}); the max is above 2 because "
        "100 brokers split 34/33/33 and the first broker of each smaller AZ represents two leaders of the "
        "larger one (the imbalance exception in miniature). Sending to leaders only gives "
        f"{_n(jun_leader.commit_remote_mean)} remote commits per file but moves the produce data of every "
        f"partition led in another AZ across AZs: {_n(jun_leader.cross_az_data_bytes_per_s / 1e6)} of "
        f"{_n(jun_leader.produce_bytes_per_s / 1e6)} MB/s ({_n(100 * leader_cross_share, 0)}%). The coordinator "
        "is 1 RPC per file by construction. The price of representatives is files: a send is split over "
        f"~33 brokers of the producer's AZ, so the cluster writes {_n(jun_rep.puts_per_s, 0)} WAL files/s "
        f"instead of {_n(jun_any.puts_per_s, 0)} (PUT cost ${_n(jun_rep.cost.put_usd, 0)} vs "
        f"${_n(jun_any.cost.put_usd, 0)} a month).",
        "",
        "**Request rate.** A commit RPC is per WAL *file*, not per produce request. In `jun-100x100` "
        f"({_n(jun_sends_per_s, 0)} producer sends/s of 100 partitions, split into {_n(jun_produce_per_s, 0)} "
        "produce requests/s by representative routing) a broker receives "
        f"{_n(jun_rep.network_commit_rpcs_per_s_per_broker_mean, 1)} commit RPCs/s over the network on average, "
        f"the busiest {_n(jun_rep.network_commit_rpcs_per_s_per_broker_max, 1)}; with any-broker routing "
        f"{_n(jun_any.network_commit_rpcs_per_s_per_broker_mean, 1)}. The central coordinator receives "
        f"{_n(jun_coord.commit_rpcs_per_s_coordinator, 1)} RPCs/s, all on one node. Counting everything nodes "
        "receive (produce requests, commit RPCs, replica fetches carrying new entries), the cluster handles "
        f"{_n(jun_rep.requests_per_s_total, 0)} requests/s with representatives, {_n(jun_any.requests_per_s_total, 0)} "
        f"with any-broker routing and {_n(jun_coord.requests_per_s_total, 0)} with the coordinator: "
        + cmp("requests", jun_rep, jun_coord, "requests_per_s_total", "/s")
        + ". Representatives split each send into one produce request per destination broker, and each "
        "leader's followers fetch its entries, where the coordinator has one log and its replicas.",
        "",
        "**Cross-AZ traffic.** Partlog and the coordinator move no produce data across AZs (producers write "
        "to a broker in their AZ, data goes through the object store); only metadata crosses: in "
        f"`balanced-3az` {_n(bal_p.cross_az_metadata_bytes_per_s / 1e3, 1)} kB/s for partlog "
        f"({_n(bal_p.cross_az_commit_bytes_per_s / 1e3, 1)} kB/s commit RPCs, "
        f"{_n(bal_p.cross_az_replication_bytes_per_s / 1e3, 1)} kB/s followers fetching the metadata-log entries) "
        f"and {_n(bal_c.cross_az_metadata_bytes_per_s / 1e3, 1)} kB/s for the coordinator "
        f"({_n(bal_c.cross_az_commit_bytes_per_s / 1e3, 1)} kB/s commits from other AZs, "
        f"{_n(bal_c.cross_az_replication_bytes_per_s / 1e3, 1)} kB/s its replicas fetching the same entries), "
        f"against {_n(bal_k.cross_az_data_bytes_per_s / 1e6, 2)} MB/s of record data for classic replication.",
        "",
        "**Cost** (request + transfer; storage not priced). At `balanced-3az`'s "
        f"{_n(bal_p.produce_bytes_per_s / 1e6)} MB/s: partlog ${_n(bal_p.cost.total_usd, 0)} a month "
        f"(${_n(bal_p.cost.put_usd, 0)} PUT + ${_n(bal_p.cost.get_usd, 0)} GET + "
        f"${_n(bal_p.cost.cross_az_usd, 0)} cross-AZ), the coordinator ${_n(bal_c.cost.total_usd, 0)}, classic "
        f"${_n(bal_k.cost.total_usd, 0)}; against classic: "
        + cmp("cost", bal_p, bal_k, "cost", " $")
        + f". In `jun-100x100`: partlog with representatives ${_n(jun_rep.cost.total_usd, 0)} "
        f"(its {_n(jun_rep.puts_per_s, 0)} files/s), with any-broker routing ${_n(jun_any.cost.total_usd, 0)}, "
        f"the coordinator ${_n(jun_coord.cost.total_usd, 0)}, classic ${_n(jun_classic.cost.total_usd, 0)}. "
        f"At 1 GiB/s (`kip1163-1gib`): partlog ${_n(big.design('partlog', 'az-representative').cost.total_usd, 0)}, "
        f"the coordinator ${_n(big.design('coordinator').cost.total_usd, 0)}, classic "
        f"${_n(big.design('classic').cost.total_usd, 0)}. GETs: {bal.scenario.object_store.get_mode} "
        "(one GET per file per AZ holding a replica of its partitions; `get_mode` also offers per-broker "
        "reads and a shared cache). `balanced-3az` with every producer's send rate scaled "
        f"({SWEEP_DURATION_S} s each):",
        "",
        "| load factor | " + " | ".join(f"{f}x" for f in LOAD_FACTORS) + " |",
        "| --- | " + " | ".join("---" for _ in LOAD_FACTORS) + " |",
        "| produce MB/s | " + " | ".join(_n(p.produce_bytes_per_s / 1e6) for p in load_p) + " |",
        "| partlog WAL files/s | " + " | ".join(_n(p.puts_per_s, 1) for p in load_p) + " |",
        "| partlog $/month total | " + " | ".join(_n(p.cost.total_usd, 0) for p in load_p) + " |",
        "| classic $/month total | " + " | ".join(_n(k.cost.total_usd, 0) for k in load_k) + " |",
        "",
        cross_text,
        "",
        "**Latency.** Produce latency is dominated by the upload (PUT p50 "
        f"{_n(bal.scenario.object_store.put.ms_p50, 0)} ms) and the wait for the file to close: the round "
        f"before it, a token of the PUT budget ({buffer.puts_per_s_max()} a second per broker) or the commit "
        f"interval ({buffer.commit_interval_ms} ms); see the rotation rule's section below. Per send "
        "(a producer's send is answered when all its "
        "produce requests are), `balanced-3az` p50 / p99: partlog (az-representative) "
        f"{_n(bal_p.send_latency_ms_p50, 0)} / {_n(bal_p.send_latency_ms_p99, 0)} ms, partlog (any-broker) "
        f"{_n(bal_any.send_latency_ms_p50, 0)} / {_n(bal_any.send_latency_ms_p99, 0)} ms, coordinator "
        f"{_n(bal_c.send_latency_ms_p50, 0)} / {_n(bal_c.send_latency_ms_p99, 0)} ms. At p50: "
        + cmp("p50", bal_p, bal_c, "send_latency_ms_p50")
        + "; at p99: "
        + cmp("p99", bal_p, bal_c, "send_latency_ms_p99")
        + ". A send split by representatives waits for the slowest of its requests. At equal routing "
        "(any-broker) the commit paths compare per request: "
        + cmp("p99", bal_any, bal_c, "latency_ms_p99")
        + f". In `jun-100x100` per send: partlog {_n(jun_rep.send_latency_ms_p50, 0)} / "
        f"{_n(jun_rep.send_latency_ms_p99, 0)} ms, coordinator {_n(jun_coord.send_latency_ms_p50, 0)} / "
        f"{_n(jun_coord.send_latency_ms_p99, 0)} ms ("
        + cmp("p99", jun_rep, jun_coord, "send_latency_ms_p99")
        + f"). In `imbalanced-2az` at equal routing: partlog {_n(imb_any.latency_ms_p50, 0)} / "
        f"{_n(imb_any.latency_ms_p99, 0)} ms, coordinator {_n(imb_c.latency_ms_p50, 0)} / "
        f"{_n(imb_c.latency_ms_p99, 0)} ms per request.",
        "",
        "**Metadata-log replication lag** is modelled, not run: a follower (a coordinator replica for design "
        "b, a record follower for classic) has an entry one network one-way after the leader appended it, "
        f"plus its own append (`follower_apply_ms`, p50 {bal.scenario.commit.follower_apply.ms_p50:g} / p99 "
        f"{bal.scenario.commit.follower_apply.ms_p99:g} ms). In `balanced-3az` p50 / p99: partlog "
        f"{_n(bal_p.replication_lag_ms_p50)} / {_n(bal_p.replication_lag_ms_p99)} ms, coordinator "
        f"{_n(bal_c.replication_lag_ms_p50)} / {_n(bal_c.replication_lag_ms_p99)} ms.",
        "",
        "**Leadership changes** (exception 2). In `leadership-change`, "
        f"{lead.scenario.events[0].partitions} of {lead.scenario.cluster.partitions} partitions change leader "
        f"at {move_ms / 1000:g} s; brokers learn it after {lead.scenario.metadata.broker_propagation_ms} ms, "
        f"producers after {lead.scenario.metadata.client_propagation_ms} ms. Remote commit RPCs per file: "
        f"before {_n(before[0])} (max {before[1]}), during the propagation window {_n(during[0])} (max "
        f"{during[1]}), after {_n(after[0])} (max {after[1]}); {lead_p.batches_failed} batches failed.",
        "",
        "**Imbalance** (exception 1). In `imbalanced-2az` (3 brokers vs 1) the lone broker's WAL files "
        f"need at least {lone.remote_min} and at most {lone.remote_max} remote commit RPCs (mean "
        f"{_n(lone.remote_mean)}); the other brokers need at most "
        f"{max(b.remote_max for b in imb_p.per_broker if b.broker_id != lone.broker_id)}.",
        "",
        *_failure_prose(fail, loss),
        "",
        f"**Scaling the cluster.** `balanced-3az` with more brokers per AZ ({SWEEP_DURATION_S} s each): "
        "remote commit RPCs per file (mean, and the max over every file) stay at or below AZs - 1.",
        "",
        "| brokers per AZ | " + " | ".join(str(v) for v in sweep.values) + " |",
        "| --- | " + " | ".join("---" for _ in sweep.values) + " |",
    ]
    for label, ys in sweep.series.items():
        lines.append(f"| {label} remote commits/file (mean) | " + " | ".join(_n(y) for y in ys) + " |")
    maxes = [r.design("partlog").commit_remote_max for r in sweep.runs]
    lines.append("| partlog/az-representative remote commits/file (max) | " + " | ".join(str(m) for m in maxes) + " |")
    rates = [r.design("partlog").network_commit_rpcs_per_s_per_broker_max for r in sweep.runs]
    lines.append(
        "| partlog network commit RPCs/s received, busiest broker | " + " | ".join(_n(x, 1) for x in rates) + " |"
    )
    measured = _load_measured()
    pages = measured.get("pages_per_commit") if measured else None
    lines += [
        "",
        *rotation_lines(rotation),
        *_storage_lines(runs, float(pages) if isinstance(pages, int | float) else None),
        *tiering_lines(seed),
        *_calibration_lines(measured),
        *_scale_lines(seed, bal),
        *crossover_markdown(sweeps, plots),
        "## Scenarios",
        "",
    ]
    for name in _SCENARIOS:
        lines += _section(runs[name])
    lines += [
        "## What the model leaves out",
        "",
        "- Replication of the metadata logs is modelled (lag = one network one-way to the slowest "
        "follower plus its append; acks=all waits its round trip plus its append), not run; a follower's "
        "append does not queue. Leaders' stores are real for sequencing; their time is the commit-cost model.",
        "- CPU and network bandwidth queueing are not modelled; a PUT's time grows with its size, GETs are "
        "counted, not timed (no consumer model).",
        "- Classic Kafka's latency is first-order (network, an append, replication round trip and append).",
        "- Clients learn new metadata `client_propagation_ms` after a change, also after NOT_LEADER (real "
        "clients refresh at once).",
        "- Replica fetches are counted one per follower per commit; a real follower's long-poll carries every "
        "commit since its last fetch, so partlog's requests/s (many small commits) are overcounted more than "
        "the coordinator's. Followers and coordinator replicas do not queue, which favours the coordinator "
        "(each of its replicas appends every commit) at high load.",
        "- Producers: no `request.timeout.ms` on a live broker, no expiry of in-flight batches at "
        "`delivery.timeout.ms`, and no skip of the backoff after a leader change.",
        "- Storage at rest is not priced; the storage figures are computed from the runs' counts, not "
        "simulated (no disk queueing).",
        "",
    ]
    return "\n".join(lines)


def _failure_prose(fail: RunResult, loss: RunResult) -> list[str]:
    out = []
    for r, what in (
        (fail, "a broker dies (refused at once), then an AZ is lost (black hole)"),
        (loss, "the coordinator's AZ is lost (black hole)"),
    ):
        parts = []
        for d in r.designs:
            windows = "; ".join(
                f"{w.from_ms / 1000:g}-{w.to_ms / 1000:g} s {w.produce_requests_retried} retried / "
                f"{w.produce_requests_failed} failed"
                for w in d.failure_windows
            )
            parts.append(
                f"{_label(d)}: {windows}; per-send p99 {_n(d.send_latency_ms_p99, 0)} ms, sends of live producers "
                f"failed {d.sends_failed_live} (lost with their AZ {d.sends_failed - d.sends_failed_live}), unanswered "
                f"at the end {d.sends_pending_at_end} (in the p99 with their age then)"
            )
        out += [
            f"**Failures** (`{r.scenario.name}`: {what}; per window from each event to the next). "
            + ". ".join(parts)
            + "."
        ]
        out.append("")
    out.append(
        "Producers retry with Kafka's defaults (retry.backoff.ms 100 doubling to 1 s, delivery.timeout.ms 120 s), "
        "so a failure shows as retries and latency rather than loss. A refused request is learnt at once; a "
        "black-holed one waits its request timeout (30 s), and a black-holed commit the commit RPC timeout "
        f"({fail.scenario.commit.commit_rpc_timeout_ms / 1000:g} s). Representatives pin each partition of a "
        "producer's AZ to one broker until the dead broker is fenced, where any-broker routing picks another "
        "broker on the retry; the coordinator stops every commit until it fails over."
    )
    return out


_SCENARIOS = (
    "balanced-3az",
    "imbalanced-2az",
    "leadership-change",
    "jun-100x100",
    "kip1163-1gib",
    "broker-failure",
    "coordinator-az-loss",
)


def write_report(path: Path, seed: int, plots_dir: Path | None = None, *, jobs: int = 1) -> Path:
    """Write REPORT.md at ``path``; its crossover plots (PNG) go to
    ``plots_dir`` (default: ``report/`` beside it), referenced relative to it."""
    plots_dir = plots_dir if plots_dir is not None else path.parent / "report"
    sweeps = run_sweeps(seed, jobs=jobs)
    written = write_crossover_plots(sweeps, plots_dir)
    rel = [os.path.relpath(p, path.parent) for p in written]
    text = build_report(seed, jobs=jobs, plots=rel, sweeps=sweeps)
    path.write_text(text)
    return path
