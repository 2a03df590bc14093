"""``walmgr bench``: scan and deletion throughput against SeaweedFS (or any store).

1. Fill a bucket with ``objects`` small, valid WAL segments (a thread pool of
   puts; not measured), under keys spread over the 256 shards.
2. Baselines, measured in the same run on the same store: raw listing of
   the prefix (keys/s) and raw DeleteObjects of a separate set of objects
   (files/s, batches of 1000, one at a time).
3. walmgr's full scan into an empty registry: every key listed and every
   footer read (one suffix GET each) and recorded: keys/s; then an
   incremental scan with everything known (listing only): keys/s.
4. One walmgr cycle deletes them all (their topic no longer exists, so no
   leader needs asking): plan, then DeleteObjects batches: files/s, with the
   default batch size and with 1000.

Ratios against the baselines say how much of the store's speed walmgr keeps.
The issue's target: >= 2,000 files/s deleted.

``walmgr bench scan --engines local,spark`` measures full scans only, each
into an empty registry over the same objects: the in-process engine, then
Spark in local mode with 1 and with 2 executor cores (a fresh SparkSession
each, its start-up timed apart), with the Spark engine's stage times
(snapshot, listing, footers, gone, merge) and the 2-core/1-core ratio.
"""

from __future__ import annotations

import os
import secrets
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

from partlog.controller.cluster_meta import StaticMetadata
from partlog.kafka.record_batch import build_record_batch
from partlog.kafka.records import TopicIdPartition
from partlog.rpc.methods import BROKER_SCHEMAS
from partlog.rpc.server import RpcServer
from partlog.runtime import SYSTEM_CLOCK
from partlog.wal.key import make_wal_key
from partlog.wal.objectstore import ObjectStore
from partlog.wal.s3_store import S3Config, S3Store, obstore_client
from partlog.wal.segment import WalSegmentBuilder
from partlog.wal.store_url import open_store
from walmgr.config import WalmgrConfig, split_store_url
from walmgr.deleter import execute_plan
from walmgr.model import State
from walmgr.registry import Registry
from walmgr.scanner import Scanner

TARGET_DELETE_FILES_PER_S = 2_000.0
PREFIX = "wal"
BASELINE_DELETE_OBJECTS = 10_000
# The bench's objects belong to a cluster of their own (walmgr records only
# objects whose footer names a cluster).
BENCH_CLUSTER_ID = uuid.UUID("be0c0000-0000-4000-8000-00000000be0c")
PUT_THREADS = 16
FILL_WINDOW = 10_000  # PUTs the generator submits at a time
# The most objects a bench makes: the generator holds their keys (about 100
# bytes each) and a registry takes about 535 bytes each on disk.
OBJECTS_MAX = 20_000_000
# The bench's objects hold one partition of a topic no cluster has: nothing
# references them (the soak's metadata lists the topic as deleted).
BENCH_TOPIC = TopicIdPartition(uuid.UUID(int=0xDEAD), 0)


async def _references_nothing(body: Any) -> Any:
    return {"referenced": []}


async def empty_broker(meta: StaticMetadata, port: int = 0) -> tuple[RpcServer, StaticMetadata]:
    """A server on a loopback port (``port``, 0 for any) answering walmgr's
    sweep as the one broker of ``meta`` would with an empty store ("nothing
    referenced"), and ``meta`` with that broker's port: for worlds where no
    broker holds data (the soak's objects belong to a deleted topic).  It
    answers nothing else.  Close it when done."""
    [info] = meta.brokers()
    server = RpcServer(
        {"keys_referenced": _references_nothing}, port=port, schemas=BROKER_SCHEMAS, cluster_id=meta.cluster_id
    )
    await server.start()
    return server, meta.with_ports({info.broker_id: server.port})


def _fill(
    store: ObjectStore,
    prefix: str,
    n: int,
    created_ms: int,
    progress: Callable[[str], None],
    *,
    keep_keys: bool = False,
) -> list[str]:
    """Put ``n`` small WAL segments under ``prefix``, ``FILL_WINDOW`` at a
    time (so the generator's memory does not grow with ``n``, which the
    soak measures); their keys when ``keep_keys``, else []."""
    builder = WalSegmentBuilder(1, created_ms, BENCH_CLUSTER_ID)
    builder.add(BENCH_TOPIC, build_record_batch([(None, b"bench", created_ms)]))
    data = builder.build().data
    put: Callable[[str], Any] = lambda k: store.put(k, data)  # noqa: E731
    if isinstance(store, S3Store):
        # The generator's PUTs through obstore: about 1,500 a second here
        # against boto3's 270, so a bucket of 1M objects fills in minutes.
        import obstore

        client = obstore_client(store.config)
        put = lambda k: obstore.put(client, k, data)  # noqa: E731
    kept: list[str] = []
    step = max(1, n // 10)
    with ThreadPoolExecutor(PUT_THREADS) as pool:
        for start in range(0, n, FILL_WINDOW):
            window = [
                str(make_wal_key(prefix, created_ms + i // 1000, 1, secrets.token_hex(6)))
                for i in range(start, min(n, start + FILL_WINDOW))
            ]
            for _ in pool.map(put, window):
                pass
            if keep_keys:
                kept += window
            done = start + len(window)
            if done // step > start // step or done == n:
                progress(f"  filled {done:,}/{n:,}")
    return kept


def _list_rate(store: ObjectStore, prefix: str) -> tuple[int, float]:
    start = time.monotonic()
    n, after = 0, ""
    while True:
        page = store.list_page(prefix + "/", after)
        n += len(page.objects)
        if not page.is_truncated or not page.objects:
            break
        after = page.objects[-1].key
    return n, time.monotonic() - start


def _delete_rate(store: ObjectStore, keys: list[str]) -> float:
    start = time.monotonic()
    for i in range(0, len(keys), 1000):
        store.delete_many(keys[i : i + 1000])
    return len(keys) / (time.monotonic() - start)


@contextmanager
def _seaweedfs(progress: Callable[[str], None]) -> Iterator[S3Store]:
    from partlog.util.seaweedfs import ACCESS_KEY_ID, SECRET_ACCESS_KEY, s3_client, start_seaweedfs

    progress("starting SeaweedFS on 127.0.0.1")
    server = start_seaweedfs()
    try:
        s3_client(server.endpoint_url).create_bucket(Bucket="walmgr-bench")
        # walmgr's own S3 settings (walmgr.config.S3_URL_DEFAULTS).
        yield S3Store(
            S3Config(
                "walmgr-bench",
                endpoint_url=server.endpoint_url,
                access_key_id=ACCESS_KEY_ID,
                secret_access_key=SECRET_ACCESS_KEY,
                reader="obstore",
                retry_mode="adaptive",
            )
        )
    finally:
        server.stop()


ENGINES = ("local", "spark")
WHATS = ("all", "scan", "soak")
SPARK_CORES = (1, 2)


def run(
    *,
    objects: int = 100_000,
    store_url: str | None = None,
    progress: Callable[[str], None] = print,
    what: str = "all",
    engines: tuple[str, ...] = ("local",),
) -> dict[str, Any]:
    """``what="all"``: scans and deletions (the in-process engine);
    ``what="scan"``: full scans with each of ``engines``."""
    if not 0 < objects <= OBJECTS_MAX:
        raise ValueError(f"objects must be in [1, {OBJECTS_MAX:,}], got {objects}")
    if what not in WHATS:
        raise ValueError(f"what must be one of {WHATS}, got {what!r}")
    bad = [e for e in engines if e not in ENGINES]
    if bad or not engines:
        raise ValueError(f"engines must be among {ENGINES}, got {list(engines)}")
    bench = {"all": _run, "scan": _run_scans, "soak": _run_soak}[what]
    if store_url:
        url = split_store_url(store_url)[0]  # with walmgr's S3 defaults (obstore reads, adaptive retries)
        return bench(open_store(url), url, objects, progress, engines)
    with _seaweedfs(progress) as store:
        url = f"s3://walmgr-bench?endpoint={store.config.endpoint_url}&reader=obstore&retry=adaptive"
        if "spark" in engines:
            # Spark's executors open the store from the URL: credentials
            # through boto3's standard chain (the environment).
            os.environ["AWS_ACCESS_KEY_ID"] = store.config.access_key_id or ""
            os.environ["AWS_SECRET_ACCESS_KEY"] = store.config.secret_access_key or ""
        return bench(store, url, objects, progress, engines)


def _run_scans(
    store: ObjectStore, where: str, objects: int, progress: Callable[[str], None], engines: tuple[str, ...]
) -> dict[str, Any]:
    created_ms = int(time.time() * 1000) - 3_600_000
    progress(f"filling {objects:,} WAL objects under {PREFIX!r}")
    _fill(store, PREFIX, objects, created_ms, progress)
    listed, list_s = _list_rate(store, PREFIX)
    out: dict[str, Any] = {
        "store": where,
        "objects": objects,
        "engines": list(engines),
        "baseline_list_keys_per_s": listed / list_s,
        "baseline_list_seconds": list_s,
    }

    with tempfile.TemporaryDirectory(prefix="walmgr-bench-") as tmp:
        if "local" in engines:
            progress("local engine: full scan (list + one footer GET per object)")
            with Registry(os.path.join(tmp, "registry-local"), sync=False) as reg:
                full = Scanner(store, reg, PREFIX, clock=SYSTEM_CLOCK).full()
            out["local"] = {
                "keys_per_s": full.keys_listed / full.seconds,
                "seconds": full.seconds,
                "new_objects": full.new_objects,
                # The listing alone is the baseline's time; the rest is footers and registry writes.
                "stages": {"listing": list_s, "footers": max(0.0, full.seconds - list_s)},
            }
        if "spark" in engines:
            _spark_scans(where, tmp, out, progress, local_keys_per_s=out.get("local", {}).get("keys_per_s"))
    return out


def _spark_scans(
    where: str, tmp: str, out: dict[str, Any], progress: Callable[[str], None], *, local_keys_per_s: float | None
) -> None:
    """Full scans on Spark local[1] and local[2], each into an empty registry
    (a fresh SparkSession each, its start-up timed apart): ``out`` gets
    ``spark_<n>_cores`` and the ratios."""
    from walmgr import spark_scan as sp

    for cores in SPARK_CORES:
        progress(f"spark engine, local[{cores}]: start-up, then a full scan")
        sp.stop_session()
        session = sp.get_session(f"local[{cores}]")
        startup_s = sp.last_startup_s
        with Registry(os.path.join(tmp, f"registry-spark-{cores}"), sync=False) as reg:
            rep = sp.spark_scan(where, reg, PREFIX, clock=SYSTEM_CLOCK, spark=session, work_dir=tmp)
        stages = dict(rep.stages)
        stages["startup"] = startup_s
        out[f"spark_{cores}_cores"] = {
            "keys_per_s": rep.keys_listed / rep.seconds,
            "keys_per_s_with_startup": rep.keys_listed / (rep.seconds + startup_s),
            "seconds": rep.seconds,
            "new_objects": rep.new_objects,
            "stages": stages,
        }
    sp.stop_session()
    one, two = out["spark_1_cores"]["keys_per_s"], out["spark_2_cores"]["keys_per_s"]
    out["ratio_spark_2_to_1_cores"] = two / one
    if local_keys_per_s:
        out["ratio_spark_2_cores_to_local"] = two / local_keys_per_s


def report_scans(r: dict[str, Any]) -> str:
    lines = [
        f"walmgr bench scan: {r['objects']:,} WAL objects on {r['store']}",
        f"  raw listing baseline            {r['baseline_list_keys_per_s']:10.0f} keys/s "
        f"({r['baseline_list_seconds']:.1f} s)",
    ]
    labels = (("local", "local engine"), ("spark_1_cores", "spark local[1]"), ("spark_2_cores", "spark local[2]"))
    for name, label in labels:
        if name not in r:
            continue
        e = r[name]
        stages = ", ".join(f"{k} {v:.1f}s" for k, v in e["stages"].items())
        lines.append(f"  full scan, {label:<20} {e['keys_per_s']:10.0f} keys/s ({e['seconds']:.1f} s: {stages})")
    if "ratio_spark_2_to_1_cores" in r:
        lines.append(f"  spark 2 cores / 1 core          {r['ratio_spark_2_to_1_cores']:10.2f}")
    if "ratio_spark_2_cores_to_local" in r:
        lines.append(f"  spark 2 cores / local engine    {r['ratio_spark_2_cores_to_local']:10.2f}")
    return "\n".join(lines)


def _run(
    store: ObjectStore, where: str, objects: int, progress: Callable[[str], None], engines: tuple[str, ...] = ("local",)
) -> dict[str, Any]:
    if "local" not in engines:
        raise ValueError("the bench of scans and deletions runs the local engine (engines must include 'local')")
    created_ms = int(time.time() * 1000) - 3_600_000  # an hour old: past any age gate
    progress(f"baseline: {BASELINE_DELETE_OBJECTS:,} objects under 'bench-baseline' for raw DeleteObjects")
    base_keys = _fill(store, "bench-baseline", BASELINE_DELETE_OBJECTS, created_ms, progress, keep_keys=True)
    raw_delete = _delete_rate(store, base_keys)
    progress(f"filling {objects:,} WAL objects under {PREFIX!r}")
    _fill(store, PREFIX, objects, created_ms, progress)
    listed, list_s = _list_rate(store, PREFIX)
    raw_list = listed / list_s
    out: dict[str, Any] = {
        "store": where,
        "objects": objects,
        "baseline_list_keys_per_s": raw_list,
        "baseline_delete_files_per_s": raw_delete,
        "target_delete_files_per_s": TARGET_DELETE_FILES_PER_S,
    }
    with tempfile.TemporaryDirectory(prefix="walmgr-bench-") as tmp:
        for batch_size in (250, 1000):
            reg_dir = os.path.join(tmp, f"registry-{batch_size}")
            with Registry(reg_dir, sync=False) as reg:
                scanner = Scanner(store, reg, PREFIX, clock=SYSTEM_CLOCK)
                if batch_size == 250:
                    progress("walmgr full scan (list + one footer GET per object)")
                    full = scanner.full()
                    out["full_scan_keys_per_s"] = full.keys_listed / full.seconds
                    out["full_scan_seconds"] = full.seconds
                    inc = scanner.incremental()
                    out["incremental_scan_keys_per_s"] = inc.keys_listed / inc.seconds if inc.seconds else 0.0
                    if "spark" in engines:
                        # The same objects, before anything is deleted.
                        _spark_scans(where, tmp, out, progress, local_keys_per_s=out["full_scan_keys_per_s"])
                else:
                    # The same objects again: refill what the first pass deleted.
                    progress(f"refilling {objects:,} objects for batch size {batch_size}")
                    _fill(store, PREFIX, objects, created_ms, progress)
                    scanner.full()
                cfg = WalmgrConfig.for_cli("file:///unused", reg_dir, delete_batch_size=batch_size)
                recs = [r for r in reg.records({State.TRACKED})]
                reg.plan(recs)
                progress(f"deleting {len(recs):,} objects, DeleteObjects batches of {batch_size}")
                report = execute_plan(store, reg, PREFIX, batch_size=cfg.delete_batch_size, clock=SYSTEM_CLOCK)
                rate = report.deleted_files / report.seconds if report.seconds else 0.0
                out[f"delete_files_per_s_batch_{batch_size}"] = rate
                out[f"deleted_batch_{batch_size}"] = report.deleted_files
                out[f"delete_failures_batch_{batch_size}"] = len(report.failed)
    out["ratio_full_scan_to_list"] = out["full_scan_keys_per_s"] / raw_list
    # Each figure as a share of LIST alone (the baseline measured in the same run).
    out["full_scan_ratio_to_list"] = out["ratio_full_scan_to_list"]
    out["incremental_scan_ratio_to_list"] = out["incremental_scan_keys_per_s"] / raw_list
    out["delete_ratio_to_list"] = out["delete_files_per_s_batch_250"] / raw_list
    out["ratio_delete_to_raw"] = out["delete_files_per_s_batch_250"] / raw_delete
    for cores in SPARK_CORES:
        if f"spark_{cores}_cores" in out:
            out[f"spark_{cores}_cores_ratio_to_list"] = out[f"spark_{cores}_cores"]["keys_per_s"] / raw_list
    out["reader"] = getattr(store, "reads_with", "local")
    return out


def report(r: dict[str, Any]) -> str:
    spark = []
    for cores in SPARK_CORES:
        e = r.get(f"spark_{cores}_cores")
        if e:
            stages = ", ".join(f"{k} {v:.1f}s" for k, v in e["stages"].items())
            spark.append(
                f"  scan, full on spark local[{cores}] {e['keys_per_s']:7.0f} keys/s "
                f"({r[f'spark_{cores}_cores_ratio_to_list']:.2f} of raw listing; {stages})"
            )
    if "ratio_spark_2_to_1_cores" in r:
        spark.append(f"  spark 2 cores / 1 core        {r['ratio_spark_2_to_1_cores']:10.2f}")
        spark.append(f"  spark 2 cores / local engine  {r['ratio_spark_2_cores_to_local']:10.2f}")
    return "\n".join(
        [
            f"walmgr bench: {r['objects']:,} WAL objects on {r['store']} (GETs through {r.get('reader', '?')})",
            f"  scan, full (list + footers)   {r['full_scan_keys_per_s']:10.0f} keys/s "
            f"({r['ratio_full_scan_to_list']:.2f} of raw listing)",
            *spark,
            f"  scan, incremental (all known) {r['incremental_scan_keys_per_s']:10.0f} keys/s "
            f"({r['incremental_scan_ratio_to_list']:.2f} of raw listing)",
            f"  raw listing baseline          {r['baseline_list_keys_per_s']:10.0f} keys/s",
            f"  delete, batches of 250        {r['delete_files_per_s_batch_250']:10.0f} files/s "
            f"({r['ratio_delete_to_raw']:.2f} of raw DeleteObjects; target >= {r['target_delete_files_per_s']:.0f})",
            f"  delete, batches of 1000       {r['delete_files_per_s_batch_1000']:10.0f} files/s",
            f"  raw DeleteObjects baseline    {r['baseline_delete_files_per_s']:10.0f} files/s (batches of 1000)",
        ]
    )


# ------------------------------------------------------------------ soak

# The soak's stated bound on walmgr's private memory (RssAnon) while it
# learns and deletes a bucket of 1M orphans: the registry lives in LMDB
# (file-backed pages), and what grows in the heap is the cycle's lists of
# candidates and planned keys, about 200 bytes per object.
SOAK_RSS_ANON_BOUND_MIB = 1024


def _run_soak(
    store: ObjectStore, where: str, objects: int, progress: Callable[[str], None], engines: tuple[str, ...]
) -> dict[str, Any]:
    """Fill ``objects`` orphans (their topic deleted), then run the daemon's
    own cycle (full scan, decision, deletion from the persisted plan) until
    none is left, sampling walmgr's private memory every second."""
    import asyncio
    import threading

    from partlog.util.proc_stats import rss_anon_bytes, rss_bytes
    from walmgr.daemon import Walmgr

    if engines != ("local",):
        raise ValueError("the soak runs the local engine only")
    created_ms = int(time.time() * 1000) - 3_600_000  # past any age gate
    progress(f"soak: filling {objects:,} orphan WAL objects under {PREFIX!r}")
    fill_start = time.monotonic()
    _fill(store, PREFIX, objects, created_ms, progress)
    fill_s = time.monotonic() - fill_start
    generated = StaticMetadata.generate(azs=1, brokers_per_az=1, topics={"t": 1}, cluster_id=BENCH_CLUSTER_ID)
    meta = StaticMetadata(generated.brokers(), generated.topics(), [BENCH_TOPIC.topic_id], cluster_id=BENCH_CLUSTER_ID)
    peak = [rss_anon_bytes(), rss_bytes()]
    base = peak[0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(1.0):
            peak[0] = max(peak[0], rss_anon_bytes())
            peak[1] = max(peak[1], rss_bytes())

    sampler = threading.Thread(target=sample, name="soak-rss", daemon=True)
    sampler.start()
    cycles: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="walmgr-soak-") as tmp:
        cfg = WalmgrConfig.for_cli(
            "file:///unused",
            os.path.join(tmp, "registry"),
            cluster_id=str(BENCH_CLUSTER_ID),
            delete_batch_size=1000,
        )

        async def soak() -> None:
            # The cluster's one broker holds no data (its topic is deleted):
            # it answers walmgr's sweep with "nothing referenced", as a real
            # broker with an empty store would.
            broker, with_port = await empty_broker(meta)
            mgr = Walmgr(cfg, store=store, metadata=with_port)
            await mgr.start()
            try:
                for i in range(3):  # one cycle should do; a second finds nothing
                    start = time.monotonic()
                    rep = await mgr.cycle(full_scan=True, scan_errors_fatal=True)
                    seconds = time.monotonic() - start
                    scans = [x for x in (rep.incremental, rep.full) if x is not None]
                    cycles.append(
                        {
                            "seconds": seconds,
                            # The incremental scan runs first and learns what
                            # is new; the full scan then lists everything.
                            "keys_listed": rep.full.keys_listed if rep.full else 0,
                            "new_objects": sum(x.new_objects for x in scans),
                            "incremental_scan_seconds": rep.incremental.seconds if rep.incremental else 0.0,
                            "full_scan_seconds": rep.full.seconds if rep.full else 0.0,
                            "scan_seconds": sum(x.seconds for x in scans),
                            "deleted_files": rep.deleted.deleted_files if rep.deleted else 0,
                        }
                    )
                    progress(
                        f"  cycle {i + 1}: listed {cycles[-1]['keys_listed']:,}, "
                        f"deleted {cycles[-1]['deleted_files']:,} in {seconds:.0f} s"
                    )
                    if cycles[-1]["deleted_files"] == 0:
                        break
            finally:
                await mgr.stop()
                await broker.close()

        asyncio.run(soak())
    stop.set()
    sampler.join()
    peak[0] = max(peak[0], rss_anon_bytes())
    left, _ = _list_rate(store, PREFIX)
    deleted = sum(c["deleted_files"] for c in cycles)
    first = cycles[0]
    return {
        "store": where,
        "objects": objects,
        "fill_seconds": fill_s,
        "cycles": cycles,
        "deleted_files": deleted,
        "objects_left": left,
        # Keys learned (listed, footer read, recorded) a second by the first
        # cycle's scans.
        "learn_keys_per_s": first["new_objects"] / first["scan_seconds"] if first["scan_seconds"] else 0.0,
        "cycle_files_per_s": deleted / sum(c["seconds"] for c in cycles),
        "rss_anon_start_mib": base / 2**20,
        "rss_anon_peak_mib": peak[0] / 2**20,
        "rss_anon_growth_mib": (peak[0] - base) / 2**20,
        "rss_anon_bound_mib": SOAK_RSS_ANON_BOUND_MIB,
        "rss_peak_mib": peak[1] / 2**20,  # LMDB's file-backed pages included
        "within_bound": peak[0] / 2**20 <= SOAK_RSS_ANON_BOUND_MIB,
        "all_deleted": left == 0 and deleted == objects,
    }


def report_soak(r: dict[str, Any]) -> str:
    lines = [
        f"walmgr bench soak: {r['objects']:,} orphan WAL objects on {r['store']} (filled in {r['fill_seconds']:.0f} s)",
    ]
    for i, c in enumerate(r["cycles"], 1):
        lines.append(
            f"  cycle {i}: {c['seconds']:.0f} s (scans {c['incremental_scan_seconds']:.0f} s incremental + "
            f"{c['full_scan_seconds']:.0f} s full, {c['keys_listed']:,} keys listed, {c['new_objects']:,} learned); "
            f"deleted {c['deleted_files']:,}"
        )
    lines += [
        f"  learned at {r['learn_keys_per_s']:.0f} keys/s; learned and deleted at {r['cycle_files_per_s']:.0f} files/s",
        f"  objects left under the prefix: {r['objects_left']:,} (all deleted: {r['all_deleted']})",
        f"  walmgr private memory (RssAnon): start {r['rss_anon_start_mib']:.0f} MiB, peak "
        f"{r['rss_anon_peak_mib']:.0f} MiB (bound {r['rss_anon_bound_mib']} MiB: "
        f"{'within' if r['within_bound'] else 'EXCEEDED'}); all resident pages at the peak "
        f"{r['rss_peak_mib']:.0f} MiB",
    ]
    return "\n".join(lines)
