"""``partlog bench latency``: where a produce request's time goes, stage by
stage (issue 30).

Issue 30's shape: a controller and three ``partlog broker`` processes (one
per AZ, replication factor 3, the local-directory store, durable commits;
:class:`partlog.tools.bench_kafka.BenchCluster`).  For each client and each
``acks`` asked for, on the same cluster in turn: records paced at ``rate``
for ``seconds`` (after a warm-up second of the same pace, not counted by the
client), librdkafka (confluent-kafka; idempotent with acks=all, plain with
acks=1: idempotence needs acks=all) and partlog's own client
(``partlog.client``), both with linger ``linger_ms``.  Around each run the
brokers' ``partlog_produce_stage_seconds`` histograms are scraped; the
difference of the bucket counts is that run's histogram, summed over the
three brokers, and p50/p99 per stage are read from it as Prometheus'
``histogram_quantile`` reads them (:func:`quantile_from_buckets`: linear
within the bucket, so a quantile is as fine as the buckets are).  End to
end is the client's own measure, send to acknowledgement (librdkafka's
``msg.latency()``).  The broker stages include the warm-up second.

The stages' cost (the histograms are always on) is measured in the same
run: one ``observe()`` in nanoseconds, and the sans-IO produce pipeline
driven in-process with and without the observations the broker makes per
request, file and commit (no I/O, so the share is an upper bound of what
the histograms take from the broker's produce path).

Bounded: the cluster's startup, then per case SETTLE_S + 1 s of warm-up +
``seconds`` + the producer's flush.  Numbers only: verdicts against the
issue's targets are printed, never asserted.
"""

from __future__ import annotations

import asyncio
import bisect
import math
import os
import shutil
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from partlog.broker.metrics import PRODUCE_STAGES, BrokerMetrics
from partlog.kafka.errors import Errors
from partlog.kafka.record_batch import build_record_batch
from partlog.kafka.records import CommitBatchResponse, TopicIdPartition
from partlog.produce.pipeline import ProduceConfig, ProducePipeline, Reply, SendCommit, Upload
from partlog.tools.bench_kafka import (
    LATENCY_WARMUP_S,
    SETTLE_S,
    BenchCluster,
    _broker_puts,
    _confluent_latency,
    _Load,
    _own_latency,
)
from partlog.tools.cluster_report import percentile

CLIENTS = ("librdkafka", "partlog.client")
ACKS = ("all", "1")
RATE_PER_S_DEFAULT = 1000
# Issue 30's targets (librdkafka, idempotent, acks=all, 1,000 records/s), ms.
TARGET_ANSWER_P50_MS = 15.0
TARGET_REPLICATION_P50_MS = 3.0
TARGET_REPLICATION_P99_MS = 10.0
TARGET_E2E_P50_MS = 40.0
TARGET_E2E_P99_MS = 90.0
# The cost measures: observations timed in one go, and produce requests
# driven through the pipeline per repetition (the best of OVERHEAD_REPEATS).
OBSERVES = 200_000
PIPELINE_REQUESTS = 10_000
OVERHEAD_REPEATS = 5
# Produce requests per WAL file in the pipeline measure (a client's burst).
REQUESTS_PER_FILE = 5
STAGE_METRIC = "partlog_produce_stage_seconds_bucket"


def quantile_from_buckets(buckets: Sequence[tuple[float, float]], q: float) -> float | None:
    """The ``q`` quantile of a Prometheus histogram, as ``histogram_quantile``
    computes it: ``buckets`` are (upper bound, cumulative count) in bound
    order, the last one +Inf; linear interpolation within the bucket the
    rank falls in (from 0 for the first); a rank in the +Inf bucket gives
    the highest finite bound.  None when the histogram is empty."""
    assert 0.0 <= q <= 1.0, q
    if not buckets or buckets[-1][1] <= 0:
        return None
    assert math.isinf(buckets[-1][0]), "the last bucket must be +Inf"
    rank = q * buckets[-1][1]
    counts = [c for _, c in buckets]
    i = bisect.bisect_left(counts, rank)
    if i == len(buckets) - 1:
        return buckets[-2][0] if len(buckets) > 1 else None
    lower, below = (0.0, 0.0) if i == 0 else buckets[i - 1]
    upper, count = buckets[i]
    if count == below:
        return upper
    return lower + (upper - lower) * (rank - below) / (count - below)


def scrape_stages(ports: Sequence[int]) -> dict[str, dict[float, float]]:
    """The stage histograms of the brokers at ``ports``, summed: stage ->
    upper bound -> cumulative count."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, dict[float, float]] = {}
    for port in ports:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
            text = resp.read().decode()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == STAGE_METRIC:
                    le = float(sample.labels["le"])
                    row = out.setdefault(sample.labels["stage"], {})
                    row[le] = row.get(le, 0.0) + sample.value
    return out


def stage_table(before: dict[str, dict[float, float]], after: dict[str, dict[float, float]]) -> dict[str, Any]:
    """Per stage, what happened between the two scrapes: count, p50 and p99
    in ms (None without observations)."""
    table: dict[str, Any] = {}
    for stage in PRODUCE_STAGES:
        now, then = after.get(stage, {}), before.get(stage, {})
        buckets = sorted((le, now[le] - then.get(le, 0.0)) for le in now)
        p50 = quantile_from_buckets(buckets, 0.50)
        p99 = quantile_from_buckets(buckets, 0.99)
        table[stage] = {
            "count": int(buckets[-1][1]) if buckets else 0,
            "p50_ms": None if p50 is None else p50 * 1000,
            "p99_ms": None if p99 is None else p99 * 1000,
        }
    return table


def _brokers_cpu_s(cluster: BenchCluster) -> float:
    """CPU seconds (user + system) the broker processes used so far (Linux /proc)."""
    total = 0
    for proc in cluster.procs[1:]:  # the first is the controller
        with open(f"/proc/{proc.pid}/stat") as f:
            # Fields 14 and 15 (utime, stime), counted after the command's ")".
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def _puts(row: dict[str, float]) -> float:
    """WAL PUTs of every reason in one broker's row of ``_broker_puts``
    (its other keys are metric names)."""
    return sum(v for k, v in row.items() if not k.startswith("partlog_"))


def _case(cluster: BenchCluster, client: str, acks: str, load: _Load, rate: float) -> dict[str, Any]:
    time.sleep(SETTLE_S)
    before = scrape_stages(cluster.metrics_ports)
    puts_before = _broker_puts(cluster.metrics_ports)
    start = time.monotonic()
    cpu = _brokers_cpu_s(cluster)
    if client == "librdkafka":
        lat = _confluent_latency(cluster.bootstrap, load, rate, warmup_s=LATENCY_WARMUP_S, acks=acks)
    else:
        lat = asyncio.run(
            _own_latency(cluster.rpc, load, rate, warmup_s=LATENCY_WARMUP_S, acks=-1 if acks == "all" else 1)
        )
    cpu = _brokers_cpu_s(cluster) - cpu
    elapsed_s = time.monotonic() - start
    after = scrape_stages(cluster.metrics_ports)
    # WAL PUTs (every reason) of the busiest broker, per second of the case.
    puts = [_puts(a) - _puts(b) for b, a in zip(puts_before, _broker_puts(cluster.metrics_ports), strict=True)]
    stages = stage_table(before, after)
    requests = stages["answer"]["count"]
    return {
        "client": client,
        "acks": acks,
        "idempotent": acks == "all",
        "stages": stages,
        # The brokers' CPU per produce request, and the stage observations
        # made per request (both brokers' sides): their product with one
        # observe()'s cost is the histograms' share of the real path.
        "broker_cpu_us_per_request": 1e6 * cpu / requests if requests else None,
        "observations_per_request": sum(st["count"] for st in stages.values()) / requests if requests else None,
        "puts_per_s_busiest_broker": max(puts) / elapsed_s,
        "end_to_end": {
            "records": len(lat),
            "p50_ms": percentile(lat, 0.50) if lat else None,
            "p99_ms": percentile(lat, 0.99) if lat else None,
        },
    }


# ------------------------------------------------------------ the cost


def _metrics() -> BrokerMetrics:
    return BrokerMetrics(1, lambda: 0.0, 1, lambda: 0.0, 1, lambda: 0.0)


def observe_ns(n: int = OBSERVES) -> float:
    """Nanoseconds of one stage observation (the best of OVERHEAD_REPEATS)."""
    m = _metrics()
    best = math.inf
    for _ in range(OVERHEAD_REPEATS):
        start = time.perf_counter_ns()
        for _ in range(n):
            m.stage("commit_rpc", 0.0012)
        best = min(best, (time.perf_counter_ns() - start) / n)
    return best


def pipeline_rate(requests: int, observe: bool) -> float:
    """Produce requests/s through the sans-IO pipeline, a WAL file per
    REQUESTS_PER_FILE requests, uploaded and committed at once; with
    ``observe`` the broker's stage observations (and clock reads) too."""
    tps = [TopicIdPartition(uuid.UUID(int=1), i) for i in range(REQUESTS_PER_FILE)]
    batch = build_record_batch([(None, b"x" * 100, 0)])
    pipe = ProducePipeline(1, ProduceConfig(), leader_of=lambda tp: 1, rand_hex=lambda: "0" * 16)
    stage, clock = _metrics().stage, time.monotonic
    accepted = 0.0
    start = time.perf_counter()
    for first in range(0, requests, REQUESTS_PER_FILE):
        actions: list[Any] = []
        for j in range(REQUESTS_PER_FILE):
            if observe:
                accepted = clock()
                stage("queue", clock() - accepted)
            actions += pipe.produce(first + j, [(tps[j], batch)], 0)
        actions += pipe.flush(0)
        while actions:
            a = actions.pop(0)
            if isinstance(a, Upload):
                if observe:
                    stage("file_open", (a.closed_ms - a.opened_ms) / 1000)
                    stage("upload", clock() - accepted)
                actions += pipe.upload_done(a.segment_id, 0)
            elif isinstance(a, SendCommit):
                sent = clock() if observe else 0.0
                answers = [CommitBatchResponse(Errors.NONE, 0, 0, 0, False, r) for r in a.requests]
                if observe:
                    stage("leader_commit", clock() - sent)
                    stage("replication", clock() - sent)
                    stage("commit_rpc", clock() - sent)
                actions += pipe.commit_done(a.segment_id, a.leader_broker_id, answers, 0)
            elif observe:
                assert isinstance(a, Reply)
                answered = clock()
                stage("reply", clock() - answered)
                stage("answer", clock() - accepted)
    return requests / (time.perf_counter() - start)


def overhead(requests: int = PIPELINE_REQUESTS, observes: int = OBSERVES) -> dict[str, float]:
    """The histograms' cost, in this run: one observation, and the
    pipeline's rate without and with them (alternated, the best of each)."""
    without = with_ = 0.0
    for _ in range(OVERHEAD_REPEATS):
        without = max(without, pipeline_rate(requests, observe=False))
        with_ = max(with_, pipeline_rate(requests, observe=True))
    return {
        "observe_ns": observe_ns(observes),
        "pipeline_requests_per_s_without": without,
        "pipeline_requests_per_s_with": with_,
        "pipeline_cost_share": 1 - with_ / without,
    }


# ------------------------------------------------------------ run


def run(
    *,
    rate: float = RATE_PER_S_DEFAULT,
    seconds: float = 10.0,
    acks: Sequence[str] = ACKS,
    value_bytes: int = 1024,
    partitions: int = 6,
    linger_ms: int = 5,
    commit_interval_ms: int = 50,
    wal_puts_per_s_max: int | None = None,
    overhead_requests: int = PIPELINE_REQUESTS,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    say = progress or (lambda _m: None)
    assert acks and set(acks) <= set(ACKS), acks
    say("the histograms' cost: one observe(), the pipeline with and without")
    cost = overhead(overhead_requests)
    load = _Load(os.urandom(value_bytes), partitions, seconds, linger_ms)
    data_dir = tempfile.mkdtemp(prefix="partlog-bench-latency-")
    cases = []
    flags = () if wal_puts_per_s_max is None else ("--wal-puts-per-s-max", str(wal_puts_per_s_max))
    cluster = BenchCluster(data_dir, partitions, commit_interval_ms, flags)
    try:
        say(f"cluster up: {cluster.bootstrap}")
        for client in CLIENTS:
            for a in acks:
                say(f"{client} acks={a}: {rate:g} records/s for {seconds:g} s")
                cases.append(_case(cluster, client, a, load, rate))
    finally:
        cluster.close()
        shutil.rmtree(data_dir, ignore_errors=True)
    return {
        "setup": {
            "processes": "controller + 3 broker processes",
            "replication_factor": 3,
            "partitions": partitions,
            "value_bytes": value_bytes,
            "linger_ms": linger_ms,
            "commit_interval_ms": commit_interval_ms,
            "wal_puts_per_s_max": wal_puts_per_s_max,
            "rate_per_s": rate,
            "seconds": seconds,
            "acks": list(acks),
            "store": "local directory, durable",
        },
        "cases": cases,
        "overhead": cost,
        "verdicts": _verdicts(cases),
    }


def _verdicts(cases: list[dict[str, Any]]) -> dict[str, bool]:
    """Issue 30's targets, for the case they are set for."""
    case = next((c for c in cases if c["client"] == "librdkafka" and c["acks"] == "all"), None)
    if case is None:
        return {}
    st, e2e = case["stages"], case["end_to_end"]

    def at_most(value: float | None, target: float) -> bool:
        return value is not None and value <= target

    return {
        f"broker answer p50 <= {TARGET_ANSWER_P50_MS:g} ms": at_most(st["answer"]["p50_ms"], TARGET_ANSWER_P50_MS),
        f"replication p50 <= {TARGET_REPLICATION_P50_MS:g} ms": at_most(
            st["replication"]["p50_ms"], TARGET_REPLICATION_P50_MS
        ),
        f"replication p99 <= {TARGET_REPLICATION_P99_MS:g} ms": at_most(
            st["replication"]["p99_ms"], TARGET_REPLICATION_P99_MS
        ),
        f"end to end p50 <= {TARGET_E2E_P50_MS:g} ms": at_most(e2e["p50_ms"], TARGET_E2E_P50_MS),
        f"end to end p99 <= {TARGET_E2E_P99_MS:g} ms": at_most(e2e["p99_ms"], TARGET_E2E_P99_MS),
    }


# Row labels of the table.
_LABELS = {
    "queue": "queue (accepted -> in a file)",
    "file_open": "file open (first batch -> closed)",
    "upload": "upload (PUT)",
    "commit_rpc": "commit RPC (sent -> answered)",
    "leader_commit": "leader's store commit",
    "replication": "replication (appended -> HWM)",
    "reply": "reply (last answer -> returned)",
    "answer": "broker answer in all",
}


def _cell(p50: float | None, p99: float | None) -> str:
    return "-" if p50 is None or p99 is None else f"{p50:.1f} / {p99:.1f}"


def print_report(r: dict[str, Any], out: Any = sys.stdout) -> None:
    s = r["setup"]
    print(
        f"partlog bench latency: {s['rate_per_s']:,.0f} records/s for {s['seconds']:g} s per case, "
        f"{s['partitions']} partitions RF {s['replication_factor']}, {s['value_bytes']} B values, "
        f"linger {s['linger_ms']} ms, commit interval {s['commit_interval_ms']} ms, PUT budget "
        f"{'default' if s['wal_puts_per_s_max'] is None else s['wal_puts_per_s_max']}, {s['processes']}, {s['store']}",
        file=out,
    )
    width = 34
    heads = [f"{c['client']} acks={c['acks']}" for c in r["cases"]]
    print(f"{'stage, p50 / p99 ms':{width}}" + "".join(f"{h:>26}" for h in heads), file=out)
    for stage in PRODUCE_STAGES:
        cells = [_cell(c["stages"][stage]["p50_ms"], c["stages"][stage]["p99_ms"]) for c in r["cases"]]
        print(f"{_LABELS[stage]:{width}}" + "".join(f"{x:>26}" for x in cells), file=out)
    cells = [_cell(c["end_to_end"]["p50_ms"], c["end_to_end"]["p99_ms"]) for c in r["cases"]]
    print(f"{'end to end (client)':{width}}" + "".join(f"{x:>26}" for x in cells), file=out)
    counts = [f"{c['stages']['answer']['count']:,} / {c['end_to_end']['records']:,}" for c in r["cases"]]
    print(f"{'requests / records counted':{width}}" + "".join(f"{x:>26}" for x in counts), file=out)
    puts = [f"{c['puts_per_s_busiest_broker']:.1f}" for c in r["cases"]]
    print(f"{'WAL PUTs/s, busiest broker':{width}}" + "".join(f"{x:>26}" for x in puts), file=out)
    o = r["overhead"]
    shares = []
    for c in r["cases"]:
        cpu, n = c["broker_cpu_us_per_request"], c["observations_per_request"]
        if cpu and n:
            shares.append(f"{c['client']} acks={c['acks']} {n:.1f} x {o['observe_ns']:.0f} ns of {cpu:,.0f} us "
                          f"({100 * n * o['observe_ns'] / 1000 / cpu:.2f}%)")  # fmt: skip
    print(f"stage observations per request, against the brokers' CPU per request: {'; '.join(shares)}", file=out)
    print(
        f"stage histograms' cost: {o['observe_ns']:.0f} ns per observe(); sans-IO pipeline "
        f"{o['pipeline_requests_per_s_without']:,.0f} requests/s without, {o['pipeline_requests_per_s_with']:,.0f} "
        f"with ({100 * o['pipeline_cost_share']:.1f}% of the pipeline alone)",
        file=out,
    )
    for verdict, ok in r["verdicts"].items():
        print(f"  {'PASS' if ok else 'MISS'}  librdkafka acks=all: {verdict}", file=out)


__all__ = ["overhead", "print_report", "quantile_from_buckets", "run", "scrape_stages", "stage_table"]
