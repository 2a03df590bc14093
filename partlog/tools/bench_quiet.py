"""``partlog bench quiet-topics``: what quiet partitions cost a cluster.

Every replica fetch names every partition its follower follows, so a
cluster's idle work and the latency of everything else grow with its
partitions even when they hold no traffic (librdkafka's suite leaves about
a thousand topics behind; its transaction test then missed its timeout).

The cluster is ``bench kafka``'s (a controller and three ``partlog broker``
processes, one per AZ, RF 3, durable commits).  Three phases on it, in
A-B-A order so a drift of the machine shows as a gap between the two A's:

- A: no other topic;
- B: ``topics`` more topics of ``partitions_per_topic`` partitions (RF 3),
  created, given a settle pause, never written;
- A again: those topics deleted.

Each phase measures, on the same topic, client and load:

1. idle CPU: the three broker processes' user + system time over
   ``idle_seconds`` with no client (cores);
2. transactions: ``txns`` transactions of ``records_per_txn`` records of
   ``value_bytes`` (confluent-kafka, acks=all, linger 5 ms), each timed
   from its first produce to the return of ``commit_transaction``.

Ratios are B over the mean of the two A's.  Verdicts: a transaction with
the quiet topics takes at most ``TARGET_TXN_RATIO`` times as long (median);
the quiet partitions add at most ``TARGET_IDLE_CORES_PER_1000`` cores of
idle CPU per 1,000 partitions.  Bounded: each phase about ``idle_seconds +
txns x CALL_TIMEOUT_S`` at worst, plus the creation and deletion.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from partlog.tools.bench_kafka import TOPIC, BenchCluster

TARGET_TXN_RATIO = 2.0
TARGET_IDLE_CORES_PER_1000 = 0.1
TOPICS_DEFAULT = 500
PARTITIONS_PER_TOPIC_DEFAULT = 4
# Topics per CreateTopics and DeleteTopics request.
ADMIN_BATCH_TOPICS = 50
# After creating or deleting the topics: elections, ISR, fetchers.
SETTLE_AFTER_ADMIN_S_DEFAULT = 10.0
# How long one admin call, produce flush or commit may take.
CALL_TIMEOUT_S = 60.0
# The benchmark topic's partitions (the transactions write all of them).
TXN_PARTITIONS = 4


def _broker_cpu_s(pids: list[int]) -> float:
    """User + system seconds the processes ``pids`` have used (Linux /proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            # Fields after the command (which may hold spaces): utime is the 14th field, stime the 15th.
            fields = f.read().rpartition(")")[2].split()
        total += int(fields[11]) + int(fields[12])
    return total / tick


def _idle_cores(pids: list[int], seconds: float) -> float:
    before = _broker_cpu_s(pids)
    time.sleep(seconds)
    return (_broker_cpu_s(pids) - before) / seconds


def _transactions(bootstrap: str, txns: int, records: int, value: bytes, tag: str) -> list[float]:
    """Seconds per transaction, first produce to commit_transaction's return."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"bench-quiet-{tag}", "acks": "all",
                  "linger.ms": 5, "client.id": "bench-quiet,diskless_az=az1"})  # fmt: skip
    p.init_transactions(CALL_TIMEOUT_S)
    out = []
    for _ in range(txns):
        p.begin_transaction()
        start = time.monotonic()
        for i in range(records):
            p.produce(TOPIC, value=value, partition=i % TXN_PARTITIONS)
            p.poll(0)
        p.commit_transaction(CALL_TIMEOUT_S)
        out.append(time.monotonic() - start)
    return out


def _admin_in_batches(call: Callable[[list[Any]], dict[str, Any]], items: list[Any]) -> None:
    for start in range(0, len(items), ADMIN_BATCH_TOPICS):
        for future in call(items[start : start + ADMIN_BATCH_TOPICS]).values():
            future.result(CALL_TIMEOUT_S)


def _phase(cluster: BenchCluster, opts: dict[str, Any], tag: str, value: bytes) -> dict[str, Any]:
    pids = [p.pid for p in cluster.procs[1:]]
    idle = _idle_cores(pids, opts["idle_seconds"])
    txn = _transactions(cluster.bootstrap, opts["txns"], opts["records_per_txn"], value, tag)
    return {"idle_cores": idle, "txn_s": txn, "txn_median_s": statistics.median(txn), "txn_max_s": max(txn)}


def summarize(a1: dict[str, Any], b: dict[str, Any], a2: dict[str, Any], partitions: int) -> dict[str, Any]:
    """Ratios of B to the mean of the A's, and the verdicts."""
    base_txn = (a1["txn_median_s"] + a2["txn_median_s"]) / 2
    base_idle = (a1["idle_cores"] + a2["idle_cores"]) / 2
    txn_ratio = b["txn_median_s"] / base_txn if base_txn > 0 else float("inf")
    idle_per_1000 = (b["idle_cores"] - base_idle) * 1000 / partitions if partitions else 0.0
    return {
        "txn_ratio": txn_ratio,
        "idle_extra_cores": b["idle_cores"] - base_idle,
        "idle_cores_per_1000_partitions": idle_per_1000,
        "a_drift_txn_ratio": a2["txn_median_s"] / a1["txn_median_s"] if a1["txn_median_s"] > 0 else float("inf"),
        "txn_verdict": "pass" if txn_ratio <= TARGET_TXN_RATIO else "fail",
        "idle_verdict": "pass" if idle_per_1000 <= TARGET_IDLE_CORES_PER_1000 else "fail",
    }


def run(
    *,
    topics: int = TOPICS_DEFAULT,
    partitions_per_topic: int = PARTITIONS_PER_TOPIC_DEFAULT,
    idle_seconds: float = 20.0,
    txns: int = 10,
    records_per_txn: int = 1000,
    value_bytes: int = 100,
    commit_interval_ms: int = 50,
    settle_s: float = SETTLE_AFTER_ADMIN_S_DEFAULT,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    say = progress or (lambda _m: None)
    opts = {"idle_seconds": idle_seconds, "txns": txns, "records_per_txn": records_per_txn}
    value = os.urandom(value_bytes)
    data_dir = tempfile.mkdtemp(prefix="partlog-bench-quiet-")
    cluster = BenchCluster(data_dir, TXN_PARTITIONS, commit_interval_ms)
    try:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        say(f"cluster up: {cluster.bootstrap}; phase A (no other topic)")
        a1 = _phase(cluster, opts, "a1", value)
        names = [f"quiet-{i}" for i in range(topics)]
        say(f"creating {topics} topics of {partitions_per_topic} partitions")
        started = time.monotonic()
        _admin_in_batches(
            admin.create_topics, [NewTopic(n, num_partitions=partitions_per_topic, replication_factor=3) for n in names]
        )
        create_s = time.monotonic() - started
        time.sleep(settle_s)
        say(f"phase B ({topics * partitions_per_topic} quiet partitions)")
        b = _phase(cluster, opts, "b", value)
        say("deleting them; phase A again")
        _admin_in_batches(admin.delete_topics, names)
        time.sleep(settle_s)
        a2 = _phase(cluster, opts, "a2", value)
    finally:
        cluster.close()
    partitions = topics * partitions_per_topic
    return {
        "topics": topics,
        "partitions_per_topic": partitions_per_topic,
        "quiet_partitions": partitions,
        "idle_seconds": idle_seconds,
        "txns": txns,
        "records_per_txn": records_per_txn,
        "value_bytes": value_bytes,
        "create_s": create_s,
        "phases": {"a1": a1, "b": b, "a2": a2},
        **summarize(a1, b, a2, partitions),
    }


def print_report(r: dict[str, Any], out: Any = sys.stdout) -> None:
    ph = r["phases"]
    print(
        f"{r['quiet_partitions']:,} quiet partitions ({r['topics']} topics x {r['partitions_per_topic']}, RF 3, "
        f"created in {r['create_s']:.1f} s); {r['txns']} transactions of {r['records_per_txn']:,} records of "
        f"{r['value_bytes']} B per phase",
        file=out,
    )
    print(f"{'phase':<28}{'idle CPU (cores)':>18}{'txn median (s)':>16}{'txn max (s)':>13}", file=out)
    for key, label in (("a1", "A: no other topic"), ("b", "B: with the quiet topics"), ("a2", "A again: deleted")):
        p = ph[key]
        print(f"{label:<28}{p['idle_cores']:>18.2f}{p['txn_median_s']:>16.2f}{p['txn_max_s']:>13.2f}", file=out)
    print(
        f"transaction median, B / A: {r['txn_ratio']:.1f}x (target <= {TARGET_TXN_RATIO:g}x): {r['txn_verdict']}",
        file=out,
    )
    print(
        f"idle CPU added: {r['idle_extra_cores']:.2f} cores, {r['idle_cores_per_1000_partitions']:.3f} per 1,000 "
        f"partitions (target <= {TARGET_IDLE_CORES_PER_1000:g}): {r['idle_verdict']}",
        file=out,
    )
    print(f"drift between the A phases (txn median A2 / A1): {r['a_drift_txn_ratio']:.2f}x", file=out)
