"""``partlog cluster``: a local multi-AZ cluster on loopback, producers in
every AZ, everything consumed back and verified; or, with ``serve_until``,
a cluster that serves outside Kafka clients.

The run is built from four parts: the in-process cluster and its walmgr
(:mod:`partlog.tools.local_cluster`), the load and its verification
(:mod:`partlog.tools.cluster_load`), the faults while the load runs
(:mod:`partlog.tools.cluster_faults`) and the report
(:mod:`partlog.tools.cluster_report`).  The options and their bounds are
:class:`partlog.tools.cluster_options.ClusterOptions`.

With ``orphan_rate`` a share of WAL files has its commits dropped after the
upload (the batches are answered with a retriable error and produced
again), so walmgr has orphans to delete.  The report says how many were
created and deleted, and how many deleted objects a broker still
referenced (always 0).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import shutil
import tempfile
import time
from collections.abc import Callable
from typing import Any

from partlog.runtime import SYSTEM_CLOCK
from partlog.tools.cluster_census import CensusSampler, summarize
from partlog.tools.cluster_faults import fault_effects
from partlog.tools.cluster_load import produce_load, verify
from partlog.tools.cluster_options import ClusterOptions
from partlog.tools.cluster_report import report
from partlog.tools.local_cluster import WALMGR_CYCLE_MS, LocalCluster, start_walmgr
from partlog.wal.localdir_store import LocalDirStore
from partlog.wal.objectstore import ObjectStore
from partlog.wal.store_url import open_store
from walmgr.daemon import Walmgr
from walmgr.model import State

# After producing, walmgr gets this many cycles past the age gate to delete
# the orphans.
WALMGR_FINAL_CYCLES = 3


async def run(
    opts: ClusterOptions,
    progress: Callable[[str], None] | None = None,
    *,
    ready: Callable[[str, str, dict[str, str]], None] | None = None,
    serve_until: asyncio.Event | None = None,
) -> dict[str, Any]:
    """Run the cluster, produce, verify; the report.  Without ``data_dir``
    everything lives in a temporary directory, removed at the end.

    ``ready`` is called with the Kafka bootstrap servers (the first
    listener's), the brokers' RPC addresses (partlog's own client) and
    each listener's bootstrap servers by name, once every listener accepts.
    With ``serve_until`` the cluster runs no load of its own: it serves
    outside clients until the event is set, then stops."""
    temporary = opts.data_dir is None
    data_dir = opts.data_dir or tempfile.mkdtemp(prefix="partlog-cluster-")
    try:
        result = await _run_in(opts, data_dir, progress, ready, serve_until)
    finally:
        if temporary:
            shutil.rmtree(data_dir, ignore_errors=True)
    result["data_kept"] = not temporary
    return result


async def _run_in(
    opts: ClusterOptions,
    data_dir: str,
    progress: Callable[[str], None] | None,
    ready: Callable[[str, str, dict[str, str]], None] | None = None,
    serve_until: asyncio.Event | None = None,
) -> dict[str, Any]:
    objects: ObjectStore = (
        open_store(opts.store_url) if opts.store_url else LocalDirStore(os.path.join(data_dir, "objects"))
    )
    # Fail fast on a wrong store: producers would otherwise retry uploads
    # until their delivery timeout.
    objects.list_page("", max_keys=1)
    cluster = LocalCluster(opts, data_dir, objects)
    mgr: Walmgr | None = None
    try:
        if opts.walmgr:
            mgr = await start_walmgr(opts, data_dir, objects)
            cluster.walmgr_address = f"127.0.0.1:{mgr.port}"
        await cluster.start()
        if mgr is not None:
            mgr.metadata = cluster.admin
        if ready is not None and cluster.kafka_ports:
            ready(
                cluster.kafka_bootstrap(),
                ",".join(f"{h}:{p}" for h, p in cluster.bootstrap()),
                cluster.kafka_bootstraps(),
            )
        if serve_until is not None:
            runner = asyncio.ensure_future(mgr.run()) if mgr is not None else None
            await serve_until.wait()
            if runner is not None:
                runner.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await runner
            return {"served": True, "brokers": len(cluster.brokers), "bootstrap": cluster.kafka_bootstrap()}
        return await _run(cluster, opts, data_dir, objects, progress, mgr)
    finally:
        if mgr is not None:
            await mgr.stop()
        await cluster.stop()


async def _walmgr_finish(cluster: LocalCluster, mgr: Walmgr, runner: asyncio.Task[None]) -> dict[str, int]:
    """Stop the daemon loop, give walmgr cycles until every orphan is past
    the gate and deleted (or WALMGR_FINAL_CYCLES cycles past it), then count
    what it deleted against what the brokers still reference."""
    runner.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await runner
    orphans = set(cluster.all_orphans())
    gate_s = mgr.config.age_gate_ms / 1000
    deadline = time.monotonic() + gate_s + WALMGR_FINAL_CYCLES * WALMGR_CYCLE_MS / 1000
    reg = mgr.registry
    assert reg is not None

    def deleted_keys() -> set[str]:
        return {r.key for r in reg.records({State.DELETED})}

    while True:
        await mgr.cycle()
        if orphans <= deleted_keys() or time.monotonic() > deadline:
            break
        await asyncio.sleep(WALMGR_CYCLE_MS / 1000)
    deleted = deleted_keys()
    referenced = {k for b in cluster.brokers.values() for k in b.store.file_usage()}
    return {
        "orphans_created": len(orphans),
        "orphans_deleted": len(orphans & deleted),
        "objects_deleted": len(deleted),
        "objects_deleted_referenced": len(deleted & referenced),
    }


async def _run(
    cluster: LocalCluster,
    opts: ClusterOptions,
    data_dir: str,
    objects: ObjectStore,
    progress: Callable[[str], None] | None,
    mgr: Walmgr | None = None,
) -> dict[str, Any]:
    walmgr_runner = asyncio.ensure_future(mgr.run()) if mgr is not None else None
    # The brokers run on the system clock: their keys' created_ms is its wall time.
    sampler = CensusSampler(objects, SYSTEM_CLOCK.wall_ms)
    census = asyncio.ensure_future(sampler.run())
    # One generator for the partition choices and the broker kills, as seeded.
    rng = random.Random(opts.seed)
    tps = cluster.partitions()
    try:
        load = await produce_load(cluster, opts, tps, rng, progress)
    finally:
        sampler.stop()
        await census
    check = await verify(cluster, tps, load.acked)
    etcd_faults = fault_effects(load.fault_events, load.ack_times)
    walmgr_result: dict[str, int] = {}
    if mgr is not None and walmgr_runner is not None:
        if progress:
            progress("walmgr: deleting orphans past the age gate")
        walmgr_result = await _walmgr_finish(cluster, mgr, walmgr_runner)
    result = report(cluster, opts, load, check, etcd_faults, walmgr_result, data_dir=data_dir, store=objects.describe())
    result.update(summarize(sampler.samples, opts.tiering_segment_ms))
    result["tiering_segment_ms"] = opts.tiering_segment_ms
    for p in load.producers:
        await p.close()
    return result
