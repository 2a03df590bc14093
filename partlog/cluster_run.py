"""``partlog cluster``: a local multi-AZ cluster on loopback, producers in
every AZ, everything consumed back and verified.

Each record's value starts with ``<producer>:<sequence>:``, so the verifier
knows what every acknowledged record was: it must be read back exactly once,
at the offset its acknowledgement gave, and one producer's records to one
partition must appear in the order they were sent.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from partlog.broker import BrokerConfig, start_brokers
from partlog.client import Consumer, Producer, RecordMetadata
from partlog.cluster_meta import StaticMetadata
from partlog.objectstore import LocalDirStore, ObjectStore, open_store
from partlog.produce_pipeline import ProduceConfig
from partlog.records import TopicIdPartition

log = logging.getLogger(__name__)

TOPIC = "partlog-cluster"
# How long the final consume may take before unread records count as lost.
VERIFY_TIMEOUT_S = 120.0


@dataclass(frozen=True, slots=True)
class ClusterOptions:
    azs: int = 3
    brokers_per_az: int = 2
    partitions: int = 12
    producers_per_az: int = 2
    rate_per_producer: int = 500  # records/s
    message_bytes: int = 100
    duration_s: float = 10.0
    data_dir: str | None = None
    store_url: str | None = None
    commit_interval_ms: int = 250
    buffer_bytes_max: int = 4 * 1024 * 1024
    sync: bool = True
    seed: int = 0


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


async def run(opts: ClusterOptions, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    data_dir = opts.data_dir or tempfile.mkdtemp(prefix="partlog-cluster-")
    objects: ObjectStore = (
        open_store(opts.store_url) if opts.store_url else LocalDirStore(os.path.join(data_dir, "objects"))
    )
    # Fail fast on a wrong store: producers would otherwise retry uploads
    # until their delivery timeout.
    objects.list_page("", max_keys=1)
    meta = StaticMetadata.generate(azs=opts.azs, brokers_per_az=opts.brokers_per_az, topics={TOPIC: opts.partitions})
    produce_cfg = ProduceConfig(commit_interval_ms=opts.commit_interval_ms, buffer_bytes_max=opts.buffer_bytes_max)
    configs = [
        BrokerConfig(
            b.broker_id,
            b.az,
            os.path.join(data_dir, "brokers", str(b.broker_id), "meta"),
            produce=produce_cfg,
            sync=opts.sync,
        )
        for b in meta.brokers()
    ]
    brokers, meta = await start_brokers(configs, meta, objects)
    rng = random.Random(opts.seed)
    [topic] = meta.topics()
    tps = [TopicIdPartition(topic.topic_id, p) for p in range(topic.num_partitions)]
    producers: list[Producer] = []
    for az in meta.azs():
        local = meta.brokers_in(az)
        for i in range(opts.producers_per_az):
            entry = meta.broker(local[i % len(local)])
            assert entry is not None
            producers.append(Producer((entry.host, entry.port), az=az))
    for p in producers:
        await p.start()

    acked: dict[tuple[int, int], RecordMetadata] = {}
    sent = 0
    failed = 0
    futures: list[asyncio.Future[RecordMetadata]] = []
    start = time.monotonic()
    pad = b"x" * max(0, opts.message_bytes - 24)

    def on_done(key: tuple[int, int]) -> Callable[[asyncio.Future[RecordMetadata]], None]:
        def cb(f: asyncio.Future[RecordMetadata]) -> None:
            nonlocal failed
            if f.cancelled() or f.exception() is not None:
                failed += 1
            else:
                acked[key] = f.result()

        return cb

    seqs = [0] * len(producers)
    tick_s = 0.01
    next_report = start + 1.0
    while (now := time.monotonic()) - start < opts.duration_s:
        elapsed = now - start
        for pi, p in enumerate(producers):
            due = int(opts.rate_per_producer * elapsed) - seqs[pi]
            for _ in range(due):
                seq = seqs[pi]
                seqs[pi] += 1
                tp = tps[rng.randrange(len(tps))]
                fut = p.send(tp, f"{pi}:{seq}:".encode() + pad)
                fut.add_done_callback(on_done((pi, seq)))
                futures.append(fut)
                sent += 1
        if progress and now >= next_report:
            next_report += 1.0
            progress(f"{elapsed:5.1f}s produced {sent:,} acked {len(acked):,} failed {failed:,}")
        await asyncio.sleep(tick_s)
    for p in producers:
        await p.flush()
    await asyncio.gather(*futures, return_exceptions=True)
    produce_s = time.monotonic() - start
    if progress:
        progress(f"produced {sent:,} acked {len(acked):,} failed {failed:,}; consuming back")

    # Consume everything back.
    first = meta.brokers()[0]
    consumer = Consumer((first.host, first.port), max_wait_ms=100)
    await consumer.start()
    consumer.assign(tps)
    seen: dict[tuple[int, int], list[tuple[TopicIdPartition, int]]] = {}
    expected_end = {tp: 0 for tp in tps}
    for md in acked.values():
        expected_end[md.topic_id_partition] = max(expected_end[md.topic_id_partition], md.offset + 1)
    deadline = time.monotonic() + VERIFY_TIMEOUT_S
    while time.monotonic() < deadline:
        if all(consumer.positions[tp] >= expected_end[tp] for tp in tps):
            break
        for rec in await consumer.poll():
            pi_s, seq_s, _ = (rec.value or b"").split(b":", 2)
            seen.setdefault((int(pi_s), int(seq_s)), []).append((rec.topic_id_partition, rec.offset))
    await consumer.close()

    verified = lost = duplicated = misplaced = 0
    for key, md in acked.items():
        where = seen.get(key, [])
        if not where:
            lost += 1
        elif (md.topic_id_partition, md.offset) not in where:
            misplaced += 1
        else:
            verified += 1
    duplicated = sum(len(w) - 1 for w in seen.values() if len(w) > 1)
    # Order: per (producer, partition), offsets increase with sequence.
    order_violations = 0
    last: dict[tuple[int, TopicIdPartition], tuple[int, int]] = {}
    for (pi, seq), where in sorted(seen.items()):
        tp, off = where[0]
        prev = last.get((pi, tp))
        if prev is not None and off < prev[1]:
            order_violations += 1
        last[(pi, tp)] = (seq, off)

    fanout = [f for br in brokers for f in br.stats.fanout]
    latencies = [lat for p in producers for lat in p.latencies_ms]
    acked_bytes = len(acked) * opts.message_bytes
    result: dict[str, Any] = {
        "azs": opts.azs,
        "brokers": len(brokers),
        "partitions": opts.partitions,
        "producers": len(producers),
        "records_produced": sent,
        "records_acked": len(acked),
        "records_failed": failed,
        "records_verified": verified,
        "records_lost": lost + misplaced,
        "records_duplicated": duplicated,
        "order_violations": order_violations,
        "wal_files": sum(br.stats.uploads - br.stats.upload_errors for br in brokers),
        "commit_rpcs_per_file": {
            "local_mean": statistics.fmean([f[0] for f in fanout]) if fanout else 0.0,
            "same_az_mean": statistics.fmean([f[1] for f in fanout]) if fanout else 0.0,
            "cross_az_mean": statistics.fmean([f[2] for f in fanout]) if fanout else 0.0,
            "remote_max": max((f[1] + f[2] for f in fanout), default=0),
        },
        "produce_latency_ms": {"p50": _percentile(latencies, 0.5), "p99": _percentile(latencies, 0.99)},
        "mib_per_s": acked_bytes / produce_s / (1 << 20),
        "duration_s": produce_s,
        "data_dir": data_dir,
        "store": objects.describe(),
    }
    for p in producers:
        await p.close()
    for br in brokers:
        await br.stop()
    return result


def print_report(r: dict[str, Any], out: Any = sys.stdout) -> None:
    c = r["commit_rpcs_per_file"]
    lines = [
        f"cluster: {r['azs']} AZs, {r['brokers']} brokers, {r['partitions']} partitions, {r['producers']} producers",
        f"records: produced {r['records_produced']:,}  acked {r['records_acked']:,}  failed {r['records_failed']:,}",
        f"verify:  verified {r['records_verified']:,}  lost {r['records_lost']:,}  "
        f"duplicated {r['records_duplicated']:,}  order violations {r['order_violations']:,}",
        f"WAL files: {r['wal_files']:,}; commit RPCs per file: local {c['local_mean']:.2f}, "
        f"same-AZ {c['same_az_mean']:.2f}, cross-AZ {c['cross_az_mean']:.2f}, remote max {c['remote_max']}",
        f"produce latency: p50 {r['produce_latency_ms']['p50']:.0f} ms, p99 {r['produce_latency_ms']['p99']:.0f} ms; "
        f"{r['mib_per_s']:.2f} MiB/s",
        f"data: {r['data_dir']} ({r['store']})",
    ]
    print("\n".join(lines), file=out)
