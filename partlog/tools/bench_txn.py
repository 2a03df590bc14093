"""``partlog bench kafka --transactions``: transactional producers against
idempotent ones, on one cluster, in one run.

The cluster is ``bench kafka``'s (a controller and three ``partlog broker``
processes, one per AZ, RF 3, durable commits).  Both sides are librdkafka
producers (confluent-kafka) with acks=all, the same records, partitions and
linger; the transactional side commits every ``records_per_txn`` records.
Each measure runs in A-B-B-A order, each half as long, after a settle pause,
so neither side always runs right after the other's load.

1. throughput: records/s acknowledged (idempotent) or committed
   (transactional) over ``seconds``;
2. latency: the p99 of an idempotent produce (send to acknowledgement)
   against the p99 of a transaction's commit (``commit_transaction`` call
   to its return: the flush of its last records, EndTxn, the markers);
3. reads: the whole topic read with read_committed and read_uncommitted
   (kcat when installed, else a confluent-kafka consumer), MiB/s.

Verdicts against issue 28's thresholds: transactional throughput >= 0.7 of
idempotent, read_committed >= 0.9 of read_uncommitted, transaction commit
p99 <= 2 x the idempotent produce p99.

Fairness: both sides run at the same count of producers (one thread each)
with the same records, partitions, linger and acks.  An idempotent producer
keeps up to 5 requests in flight and is bound by the brokers' throughput; a
transactional one runs one transaction at a time and is bound by its latency
(AddPartitionsToTxn, the records, EndTxn, then the markers and Complete*
before the next AddPartitionsToTxn is answered), so the throughput ratio
grows with the producer count: ``producers`` may list several counts (a
sweep), each measured as 1-2 above on the same cluster.  Per count the
coordinators' side (means per step, scraped from the brokers' metrics) is
reported too.  Bounded: about ``3 x seconds + 12 s`` per count, plus startup
and the reads.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from partlog.tools.bench_kafka import SETTLE_S, TOPIC, BenchCluster
from partlog.tools.cluster_report import percentile

TARGET_THROUGHPUT_RATIO = 0.7
TARGET_READ_RATIO = 0.9
TARGET_COMMIT_P99_RATIO = 2.0
RECORDS_PER_TXN_DEFAULT = 100
# Producers per side, each in its own thread: a transactional producer is
# closed-loop (one transaction at a time), so the sides are compared at the
# same number of producers.
PRODUCERS_DEFAULT = 4
# How long one flush or commit may take before the run gives up on it.
CALL_TIMEOUT_S = 60.0


def _idempotent(
    bootstrap: str, value: bytes, partitions: int, seconds: float, linger_ms: int, rate: float | None = None
) -> dict[str, Any]:
    """Records acknowledged in ``seconds`` (as fast as the client accepts
    them, or paced at ``rate`` records/s) and each one's send-to-ack time."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                  "linger.ms": linger_ms, "client.id": "bench-idem,diskless_az=az1"})  # fmt: skip
    lat: list[float] = []
    errors = 0

    def cb(sent: float) -> Callable[[Any, Any], None]:
        def done(err: Any, msg: Any) -> None:
            nonlocal errors
            if err is None:
                lat.append((time.monotonic() - sent) * 1000)
            else:
                errors += 1

        return done

    start = time.monotonic()
    i = 0
    while time.monotonic() - start < seconds:
        if rate is not None:
            due = start + i / rate
            now = time.monotonic()
            if due > now:
                p.poll(min(due - now, 0.01))
                continue
        try:
            p.produce(TOPIC, value=value, partition=i % partitions, on_delivery=cb(time.monotonic()))
            i += 1
        except BufferError:
            p.poll(0.005)
        if i % 1000 == 0:
            p.poll(0)
    p.flush(CALL_TIMEOUT_S)
    return {"records": len(lat), "errors": errors, "seconds": time.monotonic() - start, "latency_ms": lat}


def _transactional(
    bootstrap: str, value: bytes, partitions: int, seconds: float, linger_ms: int, per_txn: int, txn_id: str
) -> dict[str, Any]:
    """Records committed in ``seconds`` (whole transactions of ``per_txn``
    records) and each commit_transaction call's duration."""
    from confluent_kafka import KafkaException, Producer

    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "acks": "all",
                  "linger.ms": linger_ms, "client.id": "bench-txn,diskless_az=az1"})  # fmt: skip
    p.init_transactions(CALL_TIMEOUT_S)
    commits: list[float] = []
    committed = 0
    aborted = 0
    start = time.monotonic()
    i = 0
    while time.monotonic() - start < seconds:
        p.begin_transaction()
        for _ in range(per_txn):
            while True:
                try:
                    p.produce(TOPIC, value=value, partition=i % partitions)
                    break
                except BufferError:
                    p.poll(0.005)
            i += 1
        t0 = time.monotonic()
        try:
            p.commit_transaction(CALL_TIMEOUT_S)
        except KafkaException:
            aborted += 1
            p.abort_transaction(CALL_TIMEOUT_S)
            continue
        commits.append((time.monotonic() - t0) * 1000)
        committed += per_txn
    return {"records": committed, "aborted_txns": aborted, "seconds": time.monotonic() - start, "commit_ms": commits}


def _one_transactional(
    bootstrap: str, value: bytes, partitions: int, seconds: float, linger_ms: int, per_txn: int, phase: int, i: int
) -> dict[str, Any]:
    """Producer ``i`` of a transactional phase, with its own transactional id."""
    return _transactional(bootstrap, value, partitions, seconds, linger_ms, per_txn, f"bench-{phase}-{i}")


def _parallel(n: int, fn: Callable[[int], dict[str, Any]]) -> dict[str, Any]:
    """``fn(i)`` for i in range(n) in n threads (librdkafka's calls release
    the GIL): counts summed, lists joined, the longest run's seconds."""
    with ThreadPoolExecutor(n) as pool:
        results = list(pool.map(fn, range(n)))
    out: dict[str, Any] = {}
    for r in results:
        for k, v in r.items():
            if isinstance(v, list):
                out.setdefault(k, []).extend(v)
            elif k == "seconds":
                out[k] = max(out.get(k, 0.0), v)
            else:
                out[k] = out.get(k, 0) + v
    return out


def _scrape(ports: list[int]) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the brokers' Prometheus metrics, summed over brokers."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for port in ports:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
            text = resp.read().decode()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                key = (sample.name, tuple(sorted(sample.labels.items())))
                out[key] = out.get(key, 0.0) + sample.value
    return out


def _timeline(before: dict[Any, float], after: dict[Any, float], commits: int) -> dict[str, Any]:
    """The coordinators' side of the transactional phases (metrics after
    minus before): per step its count and mean ms, CONCURRENT_TRANSACTIONS
    answers per committed transaction, WAL files and early closes."""

    def delta(name: str, **labels: str) -> float:
        key = (name, tuple(sorted(labels.items())))
        return after.get(key, 0.0) - before.get(key, 0.0)

    steps: dict[str, dict[str, float]] = {}
    for step in sorted({dict(k[1]).get("step", "") for k in after if k[0] == "partlog_kafka_txn_step_seconds_count"}):
        n = delta("partlog_kafka_txn_step_seconds_count", step=step)
        if n:
            total = delta("partlog_kafka_txn_step_seconds_sum", step=step)
            steps[step] = {"count": n, "mean_ms": total / n * 1000}
    return {
        "steps": steps,
        "concurrent_transactions_per_txn": delta("partlog_kafka_txn_concurrent_transactions_total") / commits
        if commits
        else float("nan"),
        "wal_files": delta("partlog_uploads_total"),
        "wal_early_closes": delta("partlog_wal_early_closes_total"),
    }


def _read(bootstrap: str, partitions: int, isolation: str) -> dict[str, Any]:
    """The whole topic read with ``isolation``: records, MiB, seconds."""
    kcat = shutil.which("kcat")
    start = time.monotonic()
    if kcat:
        out = subprocess.run(
            [kcat, "-C", "-b", bootstrap, "-t", TOPIC, "-e", "-o", "beginning", "-q", "-f", "%S\\n",
             "-X", f"isolation.level={isolation}", "-X", "fetch.max.bytes=52428800"],
            capture_output=True, timeout=600, check=True,
        )  # fmt: skip
        sizes = [int(x) for x in out.stdout.split()]
        return {"client": "kcat", "records": len(sizes), "mib": sum(sizes) / 2**20,
                "seconds": time.monotonic() - start}  # fmt: skip
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{time.monotonic_ns()}",
                  "enable.auto.commit": False, "isolation.level": isolation,
                  "fetch.max.bytes": 50 * 1024 * 1024})  # fmt: skip
    tps = [TopicPartition(TOPIC, p, 0) for p in range(partitions)]
    ends = {t.partition: c.get_watermark_offsets(t, timeout=10)[1] for t in tps}
    c.assign(tps)
    n = nbytes = 0
    deadline = start + 300
    done: set[int] = set()
    while len(done) < partitions and time.monotonic() < deadline:
        for m in c.consume(10_000, 0.5):
            if not m.error():
                n += 1
                nbytes += len(m.value() or b"")
        for tp in c.position([TopicPartition(TOPIC, p) for p in range(partitions)]):
            if tp.offset >= ends[tp.partition]:
                done.add(tp.partition)
    c.close()
    return {"client": "confluent-kafka (Python)", "records": n, "mib": nbytes / 2**20,
            "seconds": time.monotonic() - start}  # fmt: skip


def _sweep_point(
    cluster: BenchCluster,
    value: bytes,
    partitions: int,
    seconds: float,
    linger_ms: int,
    records_per_txn: int,
    producers: int,
    say: Callable[[str], None],
) -> dict[str, Any]:
    """Both sides at ``producers`` producers each: throughput (A-B-B-A),
    then idempotent producers paced at the transactional rate (latency)."""
    boot = cluster.bootstrap
    idem: dict[str, Any] = {"records": 0, "errors": 0, "seconds": 0.0, "latency_ms": []}
    txn: dict[str, Any] = {"records": 0, "aborted_txns": 0, "seconds": 0.0, "commit_ms": []}
    paced: list[float] = []
    scraped: list[dict[Any, float]] = []
    half = seconds / 2
    for n, is_txn in enumerate((False, True, True, False)):
        time.sleep(SETTLE_S)
        say(f"{producers} {'transactional' if is_txn else 'idempotent'} producers, {half:g} s")
        if n in (1, 3):  # around the transactional phases
            scraped.append(_scrape(cluster.metrics_ports))
        if is_txn:
            # Transactional ids unique per run: a sweep's later point must
            # not wait on (or fence) an earlier point's ids.
            r = _parallel(producers, functools.partial(_one_transactional, boot, value, partitions, half,
                                                       linger_ms, records_per_txn, producers * 10 + n))  # fmt: skip
            for k in ("records", "aborted_txns"):
                txn[k] += r[k]
            txn["seconds"] += r["seconds"]
            txn["commit_ms"] += r.get("commit_ms", [])
        else:
            r = _parallel(producers, lambda _i: _idempotent(boot, value, partitions, half, linger_ms))
            for k in ("records", "errors"):
                idem[k] += r[k]
            idem["seconds"] += r["seconds"]
            idem["latency_ms"] += r.get("latency_ms", [])
    # The same load for the latency comparison: idempotent producers
    # paced at the record rate the transactional ones reached.
    rate = max(1.0, txn["records"] / txn["seconds"]) if txn["seconds"] else 1.0
    for _ in range(2):
        time.sleep(SETTLE_S)
        say(f"{producers} idempotent producers paced at {rate:,.0f} records/s in all, {half:g} s")
        r = _parallel(producers, lambda _i: _idempotent(boot, value, partitions, half, linger_ms, rate / producers))
        paced += r.get("latency_ms", [])
    for side in (idem, txn):
        side["records_per_s"] = side["records"] / side["seconds"] if side["seconds"] else 0.0
    lat = idem.pop("latency_ms")
    idem["p50_ms"] = percentile(lat, 0.50) if lat else float("nan")
    idem["p99_ms"] = percentile(lat, 0.99) if lat else float("nan")
    idem["paced_rate_per_s"] = rate
    idem["paced_p50_ms"] = percentile(paced, 0.50) if paced else float("nan")
    idem["paced_p99_ms"] = percentile(paced, 0.99) if paced else float("nan")
    commit_ms = txn.pop("commit_ms")
    txn["commits"] = len(commit_ms)
    txn["commit_p50_ms"] = percentile(commit_ms, 0.50) if commit_ms else float("nan")
    txn["commit_p99_ms"] = percentile(commit_ms, 0.99) if commit_ms else float("nan")
    txn["coordinators"] = _timeline(scraped[0], scraped[1], len(commit_ms))
    return {
        "producers": producers,
        "idempotent": idem,
        "transactional": txn,
        "ratios": {
            "throughput": txn["records_per_s"] / idem["records_per_s"] if idem["records_per_s"] else 0.0,
            # NaN (no sample) compares false: a MISS, never a PASS.
            "commit_p99": txn["commit_p99_ms"] / idem["paced_p99_ms"] if paced else float("nan"),
        },
    }


def run(
    *,
    seconds: float = 10.0,
    value_bytes: int = 1024,
    partitions: int = 6,
    linger_ms: int = 5,
    commit_interval_ms: int = 50,
    records_per_txn: int = RECORDS_PER_TXN_DEFAULT,
    producers: Sequence[int] = (PRODUCERS_DEFAULT,),
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """One cluster; per count in ``producers`` (a sweep) both sides at that
    many producers; then the reads of everything written.  Bounded: about
    ``3 x seconds + 12 s`` per producer count, plus startup and the reads."""
    say = progress or (lambda _m: None)
    if not producers or min(producers) <= 0:
        raise ValueError(f"producers must be positive counts, got {list(producers)}")
    value = os.urandom(value_bytes)
    data_dir = tempfile.mkdtemp(prefix="partlog-bench-txn-")
    cluster = BenchCluster(data_dir, partitions, commit_interval_ms)
    points: list[dict[str, Any]] = []
    try:
        say(f"cluster up: {cluster.bootstrap}")
        for n in producers:
            points.append(_sweep_point(cluster, value, partitions, seconds, linger_ms, records_per_txn, n, say))
        reads: dict[str, dict[str, Any]] = {}
        for isolation in ("read_uncommitted", "read_committed", "read_committed", "read_uncommitted"):
            time.sleep(SETTLE_S)
            say(f"read the topic with {isolation}")
            r = _read(cluster.bootstrap, partitions, isolation)
            agg = reads.setdefault(isolation, {"client": r["client"], "records": 0, "mib": 0.0, "seconds": 0.0})
            for k in ("records", "mib", "seconds"):
                agg[k] += r[k]
    finally:
        cluster.close()
        shutil.rmtree(data_dir, ignore_errors=True)
    for r in reads.values():
        r["mib_per_s"] = r["mib"] / r["seconds"] if r["seconds"] else 0.0
    uncommitted = reads["read_uncommitted"]["mib_per_s"]
    read_ratio = reads["read_committed"]["mib_per_s"] / uncommitted if uncommitted else 0.0
    read_verdict = f"read_committed >= {TARGET_READ_RATIO} x read_uncommitted MiB/s"
    for point in points:
        ratios = point["ratios"]
        point["verdicts"] = {
            f"transactional throughput >= {TARGET_THROUGHPUT_RATIO} x idempotent": ratios["throughput"]
            >= TARGET_THROUGHPUT_RATIO,
            f"transaction commit p99 <= {TARGET_COMMIT_P99_RATIO:g} x idempotent produce p99 at the same rate": ratios[
                "commit_p99"
            ]
            <= TARGET_COMMIT_P99_RATIO,
        }
    return {
        "setup": {
            "processes": "controller + 3 broker processes",
            "replication_factor": 3,
            "partitions": partitions,
            "value_bytes": value_bytes,
            "linger_ms": linger_ms,
            "commit_interval_ms": commit_interval_ms,
            "seconds": seconds,
            "records_per_txn": records_per_txn,
            "producers": list(producers),
        },
        "points": points,
        "reads": reads,
        "read_ratio": read_ratio,
        "read_verdict": {read_verdict: read_ratio >= TARGET_READ_RATIO},
    }


def print_report(r: dict[str, Any], out: Any = sys.stdout) -> None:
    s = r["setup"]
    print(
        f"partlog bench kafka --transactions: 3 brokers in 3 AZs, RF {s['replication_factor']}, "
        f"{s['partitions']} partitions, {s['value_bytes']} B values, acks=all, linger {s['linger_ms']} ms, "
        f"{s['records_per_txn']} records per transaction, commit interval {s['commit_interval_ms']} ms, "
        f"producers per side: {', '.join(map(str, s['producers']))}",
        file=out,
    )
    for point in r["points"]:
        i, t = point["idempotent"], point["transactional"]
        print(f"-- {point['producers']} producers per side", file=out)
        print(f"idempotent:    {i['records_per_s']:>10,.0f} records/s   produce p50/p99 "
              f"{i['p50_ms']:.1f} / {i['p99_ms']:.1f} ms at full rate, {i['paced_p50_ms']:.1f} / "
              f"{i['paced_p99_ms']:.1f} ms at {i['paced_rate_per_s']:,.0f} records/s", file=out)  # fmt: skip
        print(f"transactional: {t['records_per_s']:>10,.0f} records/s   commit  p50/p99 "
              f"{t['commit_p50_ms']:.1f} / {t['commit_p99_ms']:.1f} ms   ({t['commits']} commits, "
              f"{t['aborted_txns']} aborted)", file=out)  # fmt: skip
        c = t["coordinators"]
        steps = ", ".join(f"{k} {v['mean_ms']:.1f} ms x{v['count']:.0f}" for k, v in c["steps"].items())
        print(f"coordinators (means): {steps}; CONCURRENT_TRANSACTIONS {c['concurrent_transactions_per_txn']:.1f} "
              f"per transaction; {c['wal_files']:.0f} WAL files, {c['wal_early_closes']:.0f} closed early",
              file=out)  # fmt: skip
        ratios = point["ratios"]
        print(f"ratios: throughput {ratios['throughput']:.2f}, commit p99 {ratios['commit_p99']:.2f}", file=out)
        for verdict, ok in point["verdicts"].items():
            print(f"  {'PASS' if ok else 'MISS'}  {verdict}", file=out)
    print("-- reads of everything written", file=out)
    for name, x in r["reads"].items():
        print(f"{name:17} ({x['client']}): {x['mib']:.1f} MiB in {x['seconds']:.2f} s, {x['mib_per_s']:.1f} MiB/s",
              file=out)  # fmt: skip
    print(f"ratio: read {r['read_ratio']:.2f}", file=out)
    for verdict, ok in r["read_verdict"].items():
        print(f"  {'PASS' if ok else 'MISS'}  {verdict}", file=out)


__all__ = ["print_report", "run"]
