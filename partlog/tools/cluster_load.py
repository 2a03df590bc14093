"""The load of a ``partlog cluster`` run and its verification.

Producers in every AZ (idempotent, acks=all, routed to their AZ's
representative) send at a fixed rate for the run's duration, while the
faults of :mod:`partlog.tools.cluster_faults` happen.  Each record's value
starts with ``<producer>:<sequence>:``, so the verifier knows what every
acknowledged record was: it must be read back exactly once, at the offset
its acknowledgement gave (in its partition when that offset is unknown),
and one producer's records to one partition must appear in the order they
were sent.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from partlog.client import Consumer, Producer, RecordMetadata
from partlog.kafka.records import TopicIdPartition
from partlog.tools.cluster_faults import etcd_fault_loop, kill_loop

if TYPE_CHECKING:
    from partlog.tools.cluster_options import ClusterOptions
    from partlog.tools.local_cluster import LocalCluster

# How long the final consume may take before unread records count as lost.
VERIFY_TIMEOUT_S = 120.0
# Lost records the report names (the count is exact).
LOST_EXAMPLES_MAX = 10


@dataclass(frozen=True, slots=True)
class Load:
    """What the producers sent and what was acknowledged; the producers
    stay open for the report (their latencies), the caller closes them."""

    producers: list[Producer]
    acked: dict[tuple[int, int], RecordMetadata]  # (producer, sequence) -> where
    sent: int
    failed: int
    produce_s: float
    fault_events: list[dict[str, Any]]
    ack_times: list[float]  # seconds since the start, one per acknowledgement


@dataclass(frozen=True, slots=True)
class Verification:
    verified: int
    lost: int  # never read back
    misplaced: int  # read back, but not where acknowledged
    duplicated: int
    order_violations: int
    # The first few acknowledged records not read back where acknowledged:
    # (producer, sequence, partition, acknowledged offset, offsets seen).
    lost_examples: list[tuple[int, int, int, int, list[int]]]


async def produce_load(
    cluster: LocalCluster,
    opts: ClusterOptions,
    tps: list[TopicIdPartition],
    rng: random.Random,
    progress: Callable[[str], None] | None,
) -> Load:
    """Produce for ``opts.duration_s`` with the run's faults, then bring every
    broker back and wait for every record's answer."""
    meta = cluster.layout
    producers: list[Producer] = []
    for az in meta.azs():
        for _ in range(opts.producers_per_az):
            producers.append(Producer(cluster.bootstrap(az), az=az))
    for p in producers:
        await p.start()
    stop_killing = asyncio.Event()
    killer = (
        asyncio.ensure_future(kill_loop(cluster, opts, rng, stop_killing)) if opts.kill_broker_every_s > 0 else None
    )
    fault_events: list[dict[str, Any]] = []
    ack_times: list[float] = []

    acked: dict[tuple[int, int], RecordMetadata] = {}
    sent = 0
    failed = 0
    futures: list[asyncio.Future[RecordMetadata]] = []
    start = time.monotonic()
    pad = b"x" * max(0, opts.message_bytes - 24)
    faulter = None
    if opts.etcd_member_faults or opts.etcd_outage_s:
        faulter = asyncio.ensure_future(etcd_fault_loop(cluster, opts, start, fault_events))

    def on_done(key: tuple[int, int]) -> Callable[[asyncio.Future[RecordMetadata]], None]:
        def cb(f: asyncio.Future[RecordMetadata]) -> None:
            nonlocal failed
            if f.cancelled() or f.exception() is not None:
                failed += 1
            else:
                acked[key] = f.result()
                ack_times.append(time.monotonic() - start)

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
    if faulter is not None:
        # Finish the faults (every etcd member is back when it returns).
        await faulter
    if killer is not None:
        stop_killing.set()  # not cancel(): a kill or restart under way finishes first
        await killer
        # Bring every broker back, so all data is served again.
        for b in meta.brokers():
            if b.broker_id not in cluster.brokers:
                await cluster.start_broker(b.broker_id)
    for p in producers:
        await p.flush()
    await asyncio.gather(*futures, return_exceptions=True)
    produce_s = time.monotonic() - start
    if progress:
        progress(f"produced {sent:,} acked {len(acked):,} failed {failed:,}; consuming back")
    return Load(producers, acked, sent, failed, produce_s, fault_events, ack_times)


async def verify(
    cluster: LocalCluster, tps: list[TopicIdPartition], acked: dict[tuple[int, int], RecordMetadata]
) -> Verification:
    """Consume everything back and check every acknowledged record."""
    consumer = Consumer(cluster.bootstrap(), max_wait_ms=100)
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
    return judge(acked, seen)


def judge(
    acked: dict[tuple[int, int], RecordMetadata],
    seen: dict[tuple[int, int], list[tuple[TopicIdPartition, int]]],
) -> Verification:
    """Every acknowledged record against where it was read back.

    An acknowledgement with offset -1 is the producer's "written, offset
    unknown" (a retry the leader had passed, as Kafka's producer completes
    DUPLICATE_SEQUENCE_NUMBER): it is verified by being read back once in its
    partition.  Regression (CI, stop 42): such records counted as lost."""
    verified = lost = duplicated = misplaced = 0
    lost_examples: list[tuple[int, int, int, int, list[int]]] = []
    for key, md in acked.items():
        where = seen.get(key, [])
        tp = md.topic_id_partition
        if not where:
            lost += 1
        elif (tp, md.offset) in where or (md.offset < 0 and any(t == tp for t, _ in where)):
            verified += 1
            continue
        else:
            misplaced += 1
        if len(lost_examples) < LOST_EXAMPLES_MAX:
            lost_examples.append((key[0], key[1], tp.partition, md.offset, [o for _, o in where]))
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
    return Verification(verified, lost, misplaced, duplicated, order_violations, lost_examples)
