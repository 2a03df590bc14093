"""The report of a ``partlog cluster`` run: one flat JSON-able dict (what
``--json`` prints, and what ``python -m simulations calibrate`` reads) and
its table."""

from __future__ import annotations

import statistics
import sys
from typing import TYPE_CHECKING, Any

from partlog.tools.cluster_census import WAL_FLAT_RATIO_MAX
from partlog.tools.cluster_faults import ETCD_FAULT_WINDOW_S

if TYPE_CHECKING:
    from partlog.tools.cluster_load import Load, Verification
    from partlog.tools.cluster_options import ClusterOptions
    from partlog.tools.local_cluster import LocalCluster


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (nearest rank; 0.0 for none)."""
    if not values:
        return 0.0
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def report(
    cluster: LocalCluster,
    opts: ClusterOptions,
    load: Load,
    check: Verification,
    etcd_faults: list[dict[str, Any]],
    walmgr_result: dict[str, int],
    *,
    data_dir: str,
    store: str,
) -> dict[str, Any]:
    """The run's figures, read from the live cluster after the load."""
    brokers = list(cluster.brokers.values())
    fanout = [f for br in brokers for f in br.stats.fanout]
    latencies = [lat for p in load.producers for lat in p.latencies_ms]
    acked_bytes = len(load.acked) * opts.message_bytes
    result: dict[str, Any] = {
        "azs": opts.azs,
        "brokers": len(brokers),
        "partitions": opts.partitions,
        "replication_factor": min(opts.replication_factor, len(brokers)),
        "metadata": "embedded controller" if cluster.controller is not None else cluster.etcd_url,
        "leader_elections": cluster.leader_elections,
        "controller_elections": cluster.controller_elections,
        "etcd_faults": etcd_faults,
        "truncations": cluster.replication_total("truncations"),
        "brokers_killed": cluster.killed,
        "entries_replicated": cluster.replication_total("entries_replicated"),
        "producers": len(load.producers),
        "records_produced": load.sent,
        "records_acked": len(load.acked),
        "records_failed": load.failed,
        "records_verified": check.verified,
        "records_lost": check.lost + check.misplaced,
        "records_lost_examples": check.lost_examples,
        "records_duplicated": check.duplicated,
        "order_violations": check.order_violations,
        "wal_files": sum(br.stats.uploads - br.stats.upload_errors for br in brokers),
        "commit_rpcs_per_file": {
            "local_mean": statistics.fmean([f[0] for f in fanout]) if fanout else 0.0,
            "same_az_mean": statistics.fmean([f[1] for f in fanout]) if fanout else 0.0,
            "cross_az_mean": statistics.fmean([f[2] for f in fanout]) if fanout else 0.0,
            "remote_max": max((f[1] + f[2] for f in fanout), default=0),
        },
        "produce_latency_ms": {"p50": percentile(latencies, 0.5), "p99": percentile(latencies, 0.99)},
        # What the brokers handled (for `python -m simulations calibrate`).
        "produce_requests": sum(br.stats.produce_requests for br in brokers),
        "commit_rpcs_remote": sum(br.stats.commits_remote for br in brokers),
        "commits_local": sum(br.stats.commits_local for br in brokers),
        "commit_ms": {
            "p50": percentile([x for br in brokers for x in br.stats.commit_ms], 0.5),
            "p99": percentile([x for br in brokers for x in br.stats.commit_ms], 0.99),
        },
        "upload_ms": {
            "p50": percentile([x for br in brokers for x in br.stats.upload_ms], 0.5),
            "p99": percentile([x for br in brokers for x in br.stats.upload_ms], 0.99),
        },
        "mib_per_s": acked_bytes / load.produce_s / (1 << 20),
        "duration_s": load.produce_s,
        "data_dir": data_dir,
        "store": store,
        **walmgr_result,
    }
    return result


def print_report(r: dict[str, Any], out: Any = sys.stdout) -> None:
    c = r["commit_rpcs_per_file"]
    lines = [
        f"cluster: {r['azs']} AZs, {r['brokers']} brokers, {r['partitions']} partitions "
        f"(replication factor {r['replication_factor']}), {r['producers']} producers",
        f"records: produced {r['records_produced']:,}  acked {r['records_acked']:,}  failed {r['records_failed']:,}",
        f"verify:  verified {r['records_verified']:,}  lost {r['records_lost']:,}  "
        f"duplicated {r['records_duplicated']:,}  order violations {r['order_violations']:,}",
        f"WAL files: {r['wal_files']:,}; commit RPCs per file: local {c['local_mean']:.2f}, "
        f"same-AZ {c['same_az_mean']:.2f}, cross-AZ {c['cross_az_mean']:.2f}, remote max {c['remote_max']}",
        f"produce latency: p50 {r['produce_latency_ms']['p50']:.0f} ms, p99 {r['produce_latency_ms']['p99']:.0f} ms; "
        f"{r['mib_per_s']:.2f} MiB/s",
        f"replication: {r['entries_replicated']:,} entries replicated, {r['leader_elections']} leader elections, "
        f"{r['truncations']} truncations, {r['brokers_killed']} brokers killed",
        f"metadata: {r['metadata']}"
        + (
            f", {r['controller_elections']} acting-controller elections"
            if r["metadata"] != "embedded controller"
            else ""
        ),
        *(
            f"etcd fault: {f['fault']} at {f['at_s']:.1f} s: produce paused at most {f['produce_pause_s']:.2f} s "
            f"(before any fault: {f['produce_pause_before_faults_s']:.2f} s), "
            f"{f['acks_during'] if 'for_s' in f else f['acks_in_window']:,} acks "
            + ("while it lasted" if "for_s" in f else f"in the {ETCD_FAULT_WINDOW_S:g} s after")
            + (f"; etcd elected a new leader in {f['etcd_election_s']:.2f} s" if f.get("etcd_election_s") else "")
            for f in r.get("etcd_faults", [])
        ),
        f"data: {r['data_dir']} ({r['store']})"
        if r.get("data_kept", True)
        else "data: a temporary directory, removed at exit (--data-dir DIR keeps it)",
    ]
    if "census_samples" in r:
        line = (
            f"objects: WAL {r['wal_objects_last']:,} at the end (most in the first half "
            f"{r['wal_objects_max_first_half']:,}, second half {r['wal_objects_max_second_half']:,}), "
            f"oldest WAL object {r['oldest_wal_age_ms_max'] / 1000:.1f} s (second half's most); "
            f"segments {r['segments_last']:,} ({r['segment_bytes_last'] / (1 << 20):.1f} MiB)"
        )
        if r.get("tiering_segment_ms"):
            line += (
                f"; oldest WAL <= segment.ms + 2 min ({r['oldest_wal_bound_ms'] / 1000:.0f} s): "
                f"{'met' if r['oldest_wal_within_bound'] else 'MISSED'}, WAL count flat (second half <= "
                f"{WAL_FLAT_RATIO_MAX:g} x first): {'met' if r['wal_objects_flat'] else 'MISSED'}"
            )
        lines.insert(-1, line)
    if "orphans_created" in r:
        lines.insert(
            -1,
            f"walmgr: orphans created {r['orphans_created']:,}, deleted {r['orphans_deleted']:,}; objects deleted "
            f"{r['objects_deleted']:,}, of them still referenced {r['objects_deleted_referenced']}",
        )
    print("\n".join(lines), file=out)
