"""``partlog bench replication``: what replicating the metadata logs costs.

Three in-process brokers on loopback (one per AZ), a topic with replication
factor 3, the local-directory object store:

1. commits/s: ``concurrency`` produce requests of one small batch each kept
   in flight through every broker for ``seconds``, first with acks=1, then
   with acks=all, on the same cluster; the ratio acks=all / acks=1 is the
   number to read (target >= 0.5).
2. HWM propagation delay with no new data: one batch is appended (acks=1)
   to an idle partition; the delay is from the moment the leader's HWM
   covers it to the moment each follower's HWM does.  Measured on a cluster
   whose followers send their HWM in fetches (KIP-1166) and on one whose
   followers do not; without the field the follower learns the HWM only
   when its parked fetch expires (replica.fetch.wait.max.ms, 500 ms).
3. A follower store applying fetch responses (``partitions`` partitions,
   one batch each), with sync on, while another thread commits as leader
   on the same store (a broker leads some partitions and follows others):
   the time to apply one fetch response, one store write per partition
   through the exclusive path (as before the follower's appends went
   through the journal) against :meth:`MetadataStore.append_replicated_fetch`,
   in the same run.
4. The acks=all replication stage: ms from the leader's store append to
   the HWM passing it (the ack wait ``ReplicaManager.commit`` returns), at
   ``STAGE_RATE_PER_S`` single-batch produce requests a second, sync on,
   min.insync.replicas 2 (issue 30's target: p50 <= 3 ms, p99 <= 10 ms;
   the three brokers here share one process and one event loop).
"""

from __future__ import annotations

import asyncio
import functools
import os
import random
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from partlog.broker.server import Broker, BrokerConfig, start_brokers
from partlog.controller.cluster_meta import StaticMetadata
from partlog.kafka.errors import Errors
from partlog.kafka.record_batch import build_record_batch
from partlog.kafka.records import (
    CommitBatchRequest,
    CreateTopicAndPartitionsRequest,
    TimestampType,
    TopicIdPartition,
)
from partlog.produce.pipeline import ProduceConfig
from partlog.replication.config import REPLICA_FETCH_WAIT_MAX_MS_DEFAULT, ReplicationConfig
from partlog.store import MetadataStore, ReplicaAppend
from partlog.store.replication import check_replicated
from partlog.store.staged import Staged
from partlog.tools.bench_commit import BATCH_BYTES, RECORDS_PER_BATCH, _header
from partlog.wal.key import make_wal_key
from partlog.wal.localdir_store import LocalDirStore

TARGET_RATIO = 0.5
PARTITIONS = 6
POLL_S = 0.001
# The follower-store micro-benchmark: fetch responses applied per path.
FOLLOWER_FETCHES = 300
# The replication stage: produce requests a second, for how long.
STAGE_RATE_PER_S = 300
STAGE_SECONDS = 5.0


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


async def _cluster(
    root: str, name: str, replication: ReplicationConfig, commit_interval_ms: int, *, sync: bool = False
) -> tuple[list[Broker], list[TopicIdPartition]]:
    meta = StaticMetadata.generate(azs=3, brokers_per_az=1, topics={"bench": PARTITIONS}, replication_factor=3)
    objects = LocalDirStore(os.path.join(root, name, "objects"))
    configs = [
        BrokerConfig(
            b.broker_id,
            b.az,
            os.path.join(root, name, f"broker-{b.broker_id}"),
            produce=ProduceConfig(commit_interval_ms=commit_interval_ms),
            sync=sync,
            replication=replication,
        )
        for b in meta.brokers()
    ]
    brokers, meta = await start_brokers(configs, meta, objects)
    [topic] = meta.topics()
    return brokers, [TopicIdPartition(topic.topic_id, p) for p in range(topic.num_partitions)]


async def _commits_per_s(
    brokers: list[Broker], tps: list[TopicIdPartition], acks: int, seconds: float, concurrency: int
) -> dict[str, float]:
    batch = build_record_batch([(None, b"v" * 100, int(time.time() * 1000))])
    done = errors = 0
    stop = time.monotonic() + seconds

    async def worker(i: int) -> None:
        nonlocal done, errors
        b = brokers[i % len(brokers)]
        n = i
        while time.monotonic() < stop:
            n += concurrency
            [r] = await b.produce([(tps[n % len(tps)], batch)], acks=acks)
            if r.error == Errors.NONE:
                done += 1
            else:
                errors += 1

    start = time.monotonic()
    await asyncio.gather(*(worker(i) for i in range(concurrency)))
    elapsed = time.monotonic() - start
    return {"commits_per_s": done / elapsed, "errors": errors}


async def _hwm_delays(brokers: list[Broker], tp: TopicIdPartition, rounds: int, seed: int) -> list[float]:
    """Per round and follower: ms from the leader's HWM covering a fresh
    append to the follower's HWM covering it."""
    rng = random.Random(seed)
    leader = next(b for b in brokers if b.replicas.is_leader(tp))
    followers = [b for b in brokers if b is not leader]
    delays: list[float] = []
    for _ in range(rounds):
        # Idle first: every parked fetch is at rest, HWMs equal.
        await asyncio.sleep(0.05 + rng.random() * 0.1)
        batch = build_record_batch([(None, b"h", int(time.time() * 1000))])
        [r] = await leader.produce([(tp, batch)], acks=1)
        if r.error != Errors.NONE:
            continue
        target = r.base_offset + 1
        deadline = time.monotonic() + 10
        while leader.store.high_watermark(tp) < target and time.monotonic() < deadline:
            await asyncio.sleep(POLL_S)
        t_leader = time.monotonic()
        pending = set(range(len(followers)))
        while pending and time.monotonic() < deadline:
            for i in list(pending):
                if followers[i].store.high_watermark(tp) >= target:
                    delays.append((time.monotonic() - t_leader) * 1000)
                    pending.discard(i)
            await asyncio.sleep(POLL_S)
    return delays


def _commit_requests(tps: Sequence[TopicIdPartition], now_ms: int) -> list[CommitBatchRequest]:
    """One plain batch per partition, back to back in one WAL object."""
    reqs = []
    for i, tp in enumerate(tps):
        header = _header(0, -1, -1, -1, now_ms)
        reqs.append(
            CommitBatchRequest(
                i,
                tp,
                1 + i * BATCH_BYTES,
                BATCH_BYTES,
                0,
                RECORDS_PER_BATCH - 1,
                now_ms + RECORDS_PER_BATCH - 1,
                TimestampType.CREATE_TIME,
                -1,
                -1,
                -1,
                -1,
                header,
            )
        )
    return reqs


def _commit(store: MetadataStore, tps: Sequence[TopicIdPartition], uploader: int) -> None:
    now = int(time.time() * 1000)
    key = str(make_wal_key("bench", now, uploader, uuid.uuid4().hex[:16]))
    store.commit_file(key, uploader, 1 + len(tps) * BATCH_BYTES + 7, _commit_requests(tps, now))


def _old_path(store: MetadataStore, appends: list[ReplicaAppend]) -> None:
    """The follower's apply as it ran before its appends went through the
    journal: one exclusive store write (pipeline drained, journal applied,
    a synced LMDB transaction) per partition (white-box: that path is now
    taken only by appends that start a leader epoch or move the log start)."""
    for a in appends:
        store._write(functools.partial(_old_append, store, a))


def _old_append(store: MetadataStore, a: ReplicaAppend, s: Staged) -> int:
    tp = a.topic_id_partition
    items = list(a.entries)
    headers = [check_replicated(tp, e) for e in items]
    return store._follower.append(s, tp, items, headers, a.leader_high_watermark, a.leader_log_start_offset)


def measure_follower_appends(root: str, fetches: int, partitions: int) -> dict[str, dict[str, float]]:
    """Part 3 of the module doc: ms per fetch response applied, p50/p99, per path."""
    topic = CreateTopicAndPartitionsRequest(uuid.uuid4(), "followed", partitions, {})
    led = CreateTopicAndPartitionsRequest(uuid.uuid4(), "led", partitions, {})
    tps = [TopicIdPartition(topic.topic_id, p) for p in range(partitions)]
    led_tps = [TopicIdPartition(led.topic_id, p) for p in range(partitions)]
    with MetadataStore.open(os.path.join(root, "leader"), sync=False) as leader:
        leader.create_topic_and_partitions([topic])
        for _ in range(fetches):
            _commit(leader, tps, 1)
        responses = [
            [
                ReplicaAppend(tp, read.entries, read.high_watermark, read.log_start_offset)
                for tp in tps
                for read in [leader.read_log(tp, i * RECORDS_PER_BATCH, 1 << 30, 1)]
            ]
            for i in range(fetches)
        ]
    out: dict[str, dict[str, float]] = {}
    paths: dict[str, Callable[[MetadataStore, list[ReplicaAppend]], object]] = {
        "per_partition_exclusive": _old_path,
        "one_write_per_fetch": lambda store, appends: store.append_replicated_fetch(appends),
    }
    for label, apply in paths.items():
        with MetadataStore.open(os.path.join(root, label), sync=True, auto_high_watermark=False) as store:
            store.create_topic_and_partitions([topic, led])
            stop = threading.Event()

            def lead(store: MetadataStore = store, stop: threading.Event = stop) -> None:
                while not stop.is_set():
                    _commit(store, led_tps, 2)

            committer = threading.Thread(target=lead, name="leader commits", daemon=True)
            committer.start()
            took = []
            try:
                for appends in responses:
                    start = time.perf_counter()
                    apply(store, appends)
                    took.append((time.perf_counter() - start) * 1000)
            finally:
                stop.set()
                committer.join()
        out[label] = {"p50_ms": _percentile(took, 0.5), "p99_ms": _percentile(took, 0.99), "samples": len(took)}
    return out


async def _append_to_hwm(
    brokers: list[Broker], tps: list[TopicIdPartition], rate: float, seconds: float
) -> list[float]:
    """Part 4 of the module doc: ms from each leader append with an acks=all
    batch to the HWM passing it, at ``rate`` requests a second."""
    delays: list[float] = []
    for b in brokers:
        commit = b.replicas.commit

        async def timed(*args: Any, commit: Callable[..., Any] = commit, **kwargs: Any) -> Any:
            answers, waiting = await commit(*args, **kwargs)
            if waiting is not None:
                start = time.perf_counter()
                waiting.add_done_callback(lambda _w: delays.append((time.perf_counter() - start) * 1000))
            return answers, waiting

        b.replicas.commit = timed  # type: ignore[method-assign]

    async def one(i: int) -> None:
        batch = build_record_batch([(None, b"v" * 100, int(time.time() * 1000))])
        await brokers[i % len(brokers)].produce([(tps[i % len(tps)], batch)], acks=-1)

    await asyncio.gather(*(one(i) for i in range(30)))  # warm up
    delays.clear()
    sent = []
    start = time.perf_counter()
    for i in range(int(rate * seconds)):
        await asyncio.sleep(max(0.0, start + i / rate - time.perf_counter()))
        sent.append(asyncio.ensure_future(one(i)))
    await asyncio.gather(*sent)
    return delays


async def _run(seconds: float, concurrency: int, rounds: int, progress: Callable[[str], None]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="partlog-bench-repl-") as root:
        progress("starting 3 brokers, RF=3 ...")
        brokers, tps = await _cluster(root, "throughput", ReplicationConfig(), commit_interval_ms=5)
        try:
            # Warm up: connections, fetch sessions.
            await _commits_per_s(brokers, tps, 1, min(1.0, seconds), concurrency)
            progress(f"acks=1 for {seconds:g} s ...")
            acks1 = await _commits_per_s(brokers, tps, 1, seconds, concurrency)
            progress(f"acks=all for {seconds:g} s ...")
            acks_all = await _commits_per_s(brokers, tps, -1, seconds, concurrency)
        finally:
            for b in brokers:
                await b.stop()
        hwm: dict[str, dict[str, float]] = {}
        for label, sends in (("with_kip1166", True), ("without_kip1166", False)):
            progress(f"HWM propagation {label.replace('_', ' ')}: {rounds} rounds ...")
            brokers, tps = await _cluster(
                root, label, ReplicationConfig(fetch_sends_high_watermark=sends), commit_interval_ms=1
            )
            try:
                delays = await _hwm_delays(brokers, tps[0], rounds, seed=1)
            finally:
                for b in brokers:
                    await b.stop()
            hwm[label] = {
                "p50_ms": _percentile(delays, 0.5),
                "p99_ms": _percentile(delays, 0.99),
                "samples": len(delays),
            }
        progress(f"follower store: {FOLLOWER_FETCHES} fetch responses per path ...")
        follower = measure_follower_appends(root, FOLLOWER_FETCHES, PARTITIONS)
        progress(f"acks=all append -> HWM at {STAGE_RATE_PER_S}/s for {STAGE_SECONDS:g} s, sync on ...")
        brokers, tps = await _cluster(
            root, "stage", ReplicationConfig(min_insync_replicas=2), commit_interval_ms=5, sync=True
        )
        try:
            stage = await _append_to_hwm(brokers, tps, STAGE_RATE_PER_S, STAGE_SECONDS)
        finally:
            for b in brokers:
                await b.stop()
    ratio = acks_all["commits_per_s"] / acks1["commits_per_s"] if acks1["commits_per_s"] else 0.0
    return {
        "replication_factor": 3,
        "partitions": PARTITIONS,
        "concurrency": concurrency,
        "seconds": seconds,
        "acks1_commits_per_s": acks1["commits_per_s"],
        "acks_all_commits_per_s": acks_all["commits_per_s"],
        "acks_all_errors": acks_all["errors"],
        "ratio_acks_all_to_acks1": ratio,
        "target_ratio": TARGET_RATIO,
        "replica_fetch_wait_max_ms": REPLICA_FETCH_WAIT_MAX_MS_DEFAULT,
        "hwm_propagation": hwm,
        "follower_apply": follower,
        "append_to_hwm": {
            "p50_ms": _percentile(stage, 0.5),
            "p99_ms": _percentile(stage, 0.99),
            "samples": len(stage),
            "rate_per_s": STAGE_RATE_PER_S,
        },
    }


def run(
    *, seconds: float = 5.0, concurrency: int = 64, rounds: int = 30, progress: Callable[[str], None] = print
) -> dict[str, Any]:
    if seconds <= 0 or concurrency <= 0 or rounds <= 0:
        raise ValueError("seconds, concurrency and rounds must be > 0")
    return asyncio.run(_run(seconds, concurrency, rounds, progress))


def report(r: dict[str, Any]) -> str:
    lines = [
        f"commits/s, RF=3, {r['partitions']} partitions, {r['concurrency']} requests in flight, "
        f"{r['seconds']:g} s each:",
        f"  acks=1    {r['acks1_commits_per_s']:10.0f}",
        f"  acks=all  {r['acks_all_commits_per_s']:10.0f}   ratio {r['ratio_acks_all_to_acks1']:.2f} "
        f"(target >= {r['target_ratio']})",
        "HWM propagation to followers with no new data (ms from leader HWM to follower HWM):",
    ]
    for label, h in r["hwm_propagation"].items():
        lines.append(f"  {label:16s} p50 {h['p50_ms']:7.1f}  p99 {h['p99_ms']:7.1f}  ({h['samples']} samples)")
    lines.append(f"  (replica.fetch.wait.max.ms = {r['replica_fetch_wait_max_ms']})")
    f = r["follower_apply"]
    lines.append(f"follower store, ms to apply one fetch response of {r['partitions']} partitions, sync on:")
    for label, h in f.items():
        lines.append(f"  {label:24s} p50 {h['p50_ms']:7.2f}  p99 {h['p99_ms']:7.2f}  ({h['samples']} samples)")
    old, new = f["per_partition_exclusive"], f["one_write_per_fetch"]
    lines.append(f"  ratio new/old p50 {new['p50_ms'] / old['p50_ms']:.2f}  p99 {new['p99_ms'] / old['p99_ms']:.2f}")
    h = r["append_to_hwm"]
    lines.append(
        f"acks=all, leader append -> HWM at {h['rate_per_s']} requests/s, sync on: "
        f"p50 {h['p50_ms']:.1f}  p99 {h['p99_ms']:.1f} ms ({h['samples']} samples; target p50 <= 3, p99 <= 10)"
    )
    return "\n".join(lines)
