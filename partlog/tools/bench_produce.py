"""``partlog bench produce``: one broker's ingest rate and produce latency.

The broker runs as its own process (``partlog broker``), so the load
generator does not share its interpreter.  The generator sends pre-built
Kafka v2 batches over the broker RPC (building records in Python would
measure the generator, not the broker):

1. throughput: ``concurrency`` produce requests in flight for ``seconds``;
   MiB/s of acknowledged batch bytes;
2. latency: the same requests paced at half that rate; p50/p99 of
   request-to-acknowledgement time.

The baseline measured in the same run is the object store's own put rate
for segment-sized objects (what uploads alone could sustain), so the ratio
says how much of the store's speed the broker keeps.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from partlog.controller.cluster_meta import StaticMetadata
from partlog.kafka.record_batch import build_record_batch
from partlog.rpc.client import RpcClient
from partlog.rpc.wire import enc_tp
from partlog.tools.cluster_report import percentile
from partlog.wal.localdir_store import LocalDirStore
from partlog.wal.objectstore import ObjectStore
from partlog.wal.store_url import open_store

TARGET_MIB_PER_S = 100.0
PARTITIONS = 8


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _batch(records: int, value_bytes: int) -> bytes:
    now = time.time_ns() // 1_000_000
    return build_record_batch([(None, os.urandom(value_bytes), now) for _ in range(records)])


def measure_put_rate(store: ObjectStore, object_bytes: int, seconds: float) -> float:
    """MiB/s of sequential puts of ``object_bytes`` objects (the baseline)."""
    data = os.urandom(object_bytes)
    start = time.monotonic()
    n = 0
    keys = []
    while time.monotonic() - start < seconds:
        key = f"bench-baseline/{n:08d}"
        store.put(key, data)
        keys.append(key)
        n += 1
    elapsed = time.monotonic() - start
    for i in range(0, len(keys), 1000):
        store.delete_many(keys[i : i + 1000])
    return n * object_bytes / elapsed / (1 << 20)


async def _load(
    port: int, batches: list[list[Any]], seconds: float, concurrency: int, rate_mib_s: float | None
) -> dict[str, float]:
    clients = [await RpcClient.connect("127.0.0.1", port) for _ in range(concurrency)]
    request_bytes = sum(len(b[2]) for b in batches)
    acked = 0
    errors = 0
    latencies: list[float] = []
    start = time.monotonic()
    interval = request_bytes / (rate_mib_s * (1 << 20)) if rate_mib_s else 0.0
    next_send = [start]

    async def worker(client: RpcClient) -> None:
        nonlocal acked, errors
        while time.monotonic() - start < seconds:
            if interval:
                # Paced: each request takes the next slot of a shared schedule.
                slot = next_send[0]
                next_send[0] = max(slot, time.monotonic() - interval) + interval
                delay = slot - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
            t0 = time.monotonic()
            body = await client.call("produce", {"batches": batches, "timeout_ms": 30_000}, timeout_ms=60_000)
            latencies.append((time.monotonic() - t0) * 1000)
            if all(r[0] == 0 for r in body["results"]):
                acked += request_bytes
            else:
                errors += 1

    await asyncio.gather(*(worker(c) for c in clients))
    elapsed = time.monotonic() - start
    for c in clients:
        await c.close()
    return {
        "mib_per_s": acked / elapsed / (1 << 20),
        "latency_ms_p50": percentile(latencies, 0.5),
        "latency_ms_p99": percentile(latencies, 0.99),
        "requests": float(len(latencies)),
        "errors": float(errors),
    }


def cluster_toml(meta: StaticMetadata, port: int) -> str:
    """The static cluster file of the bench's one broker (id 1, az1, on
    ``port``) leading every partition of ``meta``'s one topic.  It names the
    cluster: a broker refuses a cluster file without ``cluster_id``."""
    [topic] = meta.topics()
    return (
        f'cluster_id = "{meta.cluster_id}"\n'
        f'[[brokers]]\nid = 1\naz = "az1"\nport = {port}\n'
        f'[[topics]]\nname = "{topic.name}"\nid = "{topic.topic_id}"\nleaders = {[1] * topic.num_partitions}\n'
    )


def run_case(
    store_url: str,
    *,
    seconds: float,
    concurrency: int,
    batch_bytes: int,
    commit_interval_ms: int,
    progress: Callable[[str], None],
) -> dict[str, Any]:
    data_dir = tempfile.mkdtemp(prefix="partlog-bench-produce-")
    port = _free_port()
    cluster_file = os.path.join(data_dir, "cluster.toml")
    with open(cluster_file, "w") as f:
        meta = StaticMetadata.generate(azs=1, brokers_per_az=1, topics={"bench": PARTITIONS})
        f.write(cluster_toml(meta, port))
    [topic] = meta.topics()
    proc = subprocess.Popen(
        [sys.executable, "-m", "partlog.tools.cli", "broker", "--cluster", cluster_file, "--id", "1",
         "--data-dir", data_dir, "--store", store_url, "--commit-interval-ms", str(commit_interval_ms)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    out = proc.stdout.read().decode() if proc.stdout and proc.poll() is not None else ""
                    raise RuntimeError(f"broker did not start: {out[-2000:]}") from None
                time.sleep(0.1)
        value_bytes = 1000
        records = max(1, batch_bytes // (value_bytes + 10))
        batches = [[*enc_tp(tp), _batch(records, value_bytes)] for tp in _tps(topic.topic_id)]
        progress(f"throughput: {concurrency} requests in flight for {seconds:g} s")
        full = asyncio.run(_load(port, batches, seconds, concurrency, None))
        half = full["mib_per_s"] / 2
        progress(f"latency: paced at {half:.1f} MiB/s for {seconds:g} s")
        paced = asyncio.run(_load(port, batches, seconds, concurrency, half))
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
    return {
        "store": store_url.split("?")[0],
        "mib_per_s": full["mib_per_s"],
        "latency_ms_p50_at_full": full["latency_ms_p50"],
        "latency_ms_p99_at_full": full["latency_ms_p99"],
        "half_load_mib_per_s": paced["mib_per_s"],
        "latency_ms_p50_at_half": paced["latency_ms_p50"],
        "latency_ms_p99_at_half": paced["latency_ms_p99"],
        "latency_ms_p99_target": commit_interval_ms + 100,
        "errors": full["errors"] + paced["errors"],
        "request_bytes": sum(len(b[2]) for b in batches),
    }


def _tps(topic_id: Any) -> list[Any]:
    from partlog.kafka.records import TopicIdPartition

    return [TopicIdPartition(topic_id, p) for p in range(PARTITIONS)]


def run(
    *,
    store_urls: list[str] | None = None,
    seaweedfs: bool = False,
    seconds: float = 10.0,
    concurrency: int = 8,
    batch_bytes: int = 256 * 1024,
    commit_interval_ms: int = 250,
    progress: Callable[[str], None] = lambda m: None,
) -> dict[str, Any]:
    urls = list(store_urls or [])
    if not urls:
        urls.append("file://" + tempfile.mkdtemp(prefix="partlog-bench-objects-"))
    server = None
    if seaweedfs:
        from partlog.util.seaweedfs import ACCESS_KEY_ID, SECRET_ACCESS_KEY, s3_client, start_seaweedfs

        progress("starting SeaweedFS on 127.0.0.1")
        server = start_seaweedfs()
        s3_client(server.endpoint_url).create_bucket(Bucket="partlog-bench")
        # The broker process finds credentials through boto3's standard chain.
        os.environ.setdefault("AWS_ACCESS_KEY_ID", ACCESS_KEY_ID)
        os.environ.setdefault("AWS_SECRET_ACCESS_KEY", SECRET_ACCESS_KEY)
        urls.append(f"s3://partlog-bench?endpoint={server.endpoint_url}")
    try:
        return {"results": _run_all(urls, seconds, concurrency, batch_bytes, commit_interval_ms, progress)}
    finally:
        if server is not None:
            server.stop()


def _run_all(
    urls: list[str],
    seconds: float,
    concurrency: int,
    batch_bytes: int,
    commit_interval_ms: int,
    progress: Callable[[str], None],
) -> list[dict[str, Any]]:
    results = []
    for url in urls:
        progress(f"baseline: {url.split('?')[0]} puts of 4 MiB objects")
        store = open_store(url) if not url.startswith("file://") else LocalDirStore(url[len("file://") :])
        baseline = measure_put_rate(store, 4 << 20, min(seconds, 5.0))
        case = run_case(
            url,
            seconds=seconds,
            concurrency=concurrency,
            batch_bytes=batch_bytes,
            commit_interval_ms=commit_interval_ms,
            progress=progress,
        )
        case["baseline_put_mib_per_s"] = baseline
        case["ratio_to_baseline"] = case["mib_per_s"] / baseline if baseline else 0.0
        case["target_mib_per_s"] = TARGET_MIB_PER_S
        results.append(case)
    return results
