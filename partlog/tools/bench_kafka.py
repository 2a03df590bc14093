"""``partlog bench kafka``: the Kafka front end against partlog's own client.

One cluster (a controller and three ``partlog broker`` processes, one per
AZ, replication factor 3, durable commits) serves both sides of each
measure, with the same records (``value_bytes`` random bytes), the
same partitions, acks=all with idempotence, and the same linger:

1. throughput: as many records as the client accepts for ``seconds``;
   records/s and MiB/s of acknowledged record values;
2. latency: records paced at half the slower side's throughput for
   ``seconds``; p50/p99 from send to acknowledgement;
   and again at a light load (``LIGHT_RATE_PER_S``);
3. consumer read rate: kcat (or, without it, a confluent-kafka consumer)
   reads everything produced, twice (the second read is served from the
   brokers' warm range caches); MiB/s per broker.

``run_rotation`` (``--rotation``, issue 30) instead compares WAL rotation
rules in one run, a fresh cluster for each: the interval-only rule (the
brokers' ``--rotation-grace-ms`` set to the commit interval) and the
load-following rule at each PUT budget asked for; for each, librdkafka's
end-to-end latency (send to acknowledgement, librdkafka's own measure) at
``ROTATION_RATE_PER_S`` and each broker's WAL PUTs/s by rotation reason
(``partlog_wal_puts``), with ratios against the interval-only rule.

The front end's side is confluent-kafka (librdkafka, C threads); the own
client is partlog's asyncio producer (Python).  Verdicts are computed from
the numbers against the issue's targets.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from partlog.tools.cluster_report import percentile

TARGET_RATIO = 0.8
TARGET_P99_SLACK_MS = 150.0
TARGET_READ_MIB_PER_S = 100.0
# A pause before each latency and read phase: the brokers finish the work
# the previous phase left (checkpoints, replication).
SETTLE_S = 2.0
# The light load of the second latency measure (records/s, one producer).
LIGHT_RATE_PER_S = 1000
TOPIC = "bench"
STARTUP_TIMEOUT_S = 60.0
# The latency loops sleep to the next record due, at least this long: a
# librdkafka poll with a sub-millisecond timeout returns at once (the
# timeout is whole milliseconds), so pacing by poll spun a core.
PACE_TICK_S = 0.001
# Issue 30's load and targets: librdkafka, idempotent, acks=all, RF 3.
ROTATION_RATE_PER_S = 1000
TARGET_ROTATION_P50_MS = 40.0
TARGET_ROTATION_P99_MS = 90.0
# The producer's first second (its id, metadata, connections: up to 600 ms
# for the first records) is paced but not counted.
LATENCY_WARMUP_S = 1.0


class _Load(NamedTuple):
    """The same load for both sides."""

    value: bytes
    partitions: int
    seconds: float
    linger_ms: int


class BenchCluster:
    """A controller and three ``partlog broker`` processes (one per AZ),
    each with its RPC and Kafka ports, durable commits, and a topic of
    ``partitions`` partitions with replication factor 3."""

    def __init__(
        self, data_dir: str, partitions: int, commit_interval_ms: int, broker_args: tuple[str, ...] = ()
    ) -> None:
        from partlog.tools.local_cluster import free_ports

        ctl, *ports = free_ports(10)
        self.procs: list[subprocess.Popen[bytes]] = []
        store = "file://" + os.path.join(data_dir, "objects")
        self._spawn(["controller", "--data-dir", os.path.join(data_dir, "controller"), "--port", str(ctl)])
        _wait_port(ctl, self.procs[-1])
        rpc, kafka, metrics = ports[:3], ports[3:6], ports[6:9]
        for i in range(3):
            self._spawn(["broker", "--controller", f"127.0.0.1:{ctl}", "--id", str(i + 1), "--az", f"az{i + 1}",
                         "--port", str(rpc[i]), "--kafka-port", str(kafka[i]), "--data-dir", data_dir,
                         "--store", store, "--commit-interval-ms", str(commit_interval_ms),
                         "--metrics-port", str(metrics[i]), *broker_args])  # fmt: skip
        for i in range(3):
            _wait_port(kafka[i], self.procs[1 + i])
        self.bootstrap = ",".join(f"127.0.0.1:{p}" for p in kafka)
        self.rpc = [("127.0.0.1", p) for p in rpc]
        # Each broker's Prometheus metrics (http://127.0.0.1:<port>/metrics).
        self.metrics_ports = list(metrics)
        from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        wait_registered(admin, 3)
        admin.create_topics([NewTopic(TOPIC, num_partitions=partitions, replication_factor=3)])[TOPIC].result(60)
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            t = admin.list_topics(TOPIC, timeout=10).topics.get(TOPIC)
            if t is not None and t.error is None and all(p.leader >= 0 for p in t.partitions.values()):
                break
            time.sleep(0.1)

    def _spawn(self, args: list[str]) -> None:
        self.procs.append(spawn_partlog(args))

    def close(self) -> None:
        stop_processes(self.procs)


def spawn_partlog(args: list[str]) -> subprocess.Popen[bytes]:
    """``partlog ARGS`` in a process of its own, its output discarded."""
    return subprocess.Popen([sys.executable, "-m", "partlog", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)  # fmt: skip


def stop_processes(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM, newest first; SIGKILL what has not exited 30 s later."""
    for p in reversed(procs):
        p.terminate()
    for p in procs:
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def wait_registered(admin: Any, brokers: int) -> None:
    """Until the cluster lists ``brokers`` brokers: a broker binds its
    ports before it registers, so a topic of RF 3 created as soon as the
    third port listens may find fewer (INVALID_REPLICATION_FACTOR)."""
    from confluent_kafka import KafkaException

    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while True:
        try:
            # A broker still starting holds the request unanswered: ask again.
            if len(admin.list_topics(timeout=10).brokers) >= brokers:
                return
        except KafkaException:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"fewer than {brokers} brokers registered after {STARTUP_TIMEOUT_S:g} s")
        time.sleep(0.1)


def _wait_port(port: int, proc: subprocess.Popen[bytes]) -> None:
    import socket

    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r}: exited with {proc.returncode} before listening")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {STARTUP_TIMEOUT_S:g} s")


def _confluent_throughput(bootstrap: str, load: _Load, conf: dict[str, Any] | None = None) -> dict[str, Any]:
    """``conf``: more producer settings (bench_kafka_security's SASL_SSL)."""
    value, partitions, seconds, linger_ms = load
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                  "linger.ms": linger_ms, "client.id": "bench,diskless_az=az1", **(conf or {})})  # fmt: skip
    acked = 0
    errors = 0

    def done(err: Any, msg: Any) -> None:
        nonlocal acked, errors
        if err is None:
            acked += 1
        else:
            errors += 1

    start = time.monotonic()
    i = 0
    while time.monotonic() - start < seconds:
        try:
            p.produce(TOPIC, value=value, partition=i % partitions, on_delivery=done)
            i += 1
        except BufferError:
            p.poll(0.005)
        if i % 1000 == 0:
            p.poll(0)
    p.flush(120)
    elapsed = time.monotonic() - start
    return {"records": acked, "errors": errors, "seconds": elapsed}


def _confluent_latency(
    bootstrap: str, load: _Load, rate: float, warmup_s: float = 0.0, acks: str = "all"
) -> list[float]:
    """Latencies (ms) of records paced at ``rate`` for ``seconds``, after
    ``warmup_s`` of the same pace whose records are not counted (the
    producer's id, metadata and connections come first); ``acks``: "all", or
    "1" (then not idempotent: idempotence needs acks=all, in Kafka as here)."""
    value, partitions, seconds, linger_ms = load
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": acks == "all", "acks": acks,
                  "linger.ms": linger_ms, "client.id": "bench-lat,diskless_az=az1"})  # fmt: skip
    lat: list[float] = []

    def done(err: Any, msg: Any) -> None:
        # librdkafka's own measure, produce() to acknowledgement: not
        # delayed by when this loop polls.
        latency = msg.latency() if err is None else None
        if latency is not None:
            lat.append(latency * 1000)

    def warming(err: Any, msg: Any) -> None:
        pass

    start = time.monotonic()
    counted = start + warmup_s
    i = 0
    while (now := time.monotonic()) - counted < seconds:
        while start + i / rate <= now:
            p.produce(TOPIC, value=value, partition=i % partitions, on_delivery=done if now >= counted else warming)
            i += 1
        p.poll(0)
        time.sleep(max(start + i / rate - time.monotonic(), PACE_TICK_S))
    p.flush(120)
    return lat


async def _own_throughput(rpc: list[tuple[str, int]], load: _Load) -> dict[str, Any]:
    value, partitions, seconds, linger_ms = load
    from partlog.client.producer import Producer

    p = Producer(rpc, az="az1", linger_ms=linger_ms)
    await p.start()
    tps = p.view.partitions(TOPIC)[:partitions]
    acked = 0
    errors = 0
    outstanding: set[asyncio.Future[Any]] = set()

    def done(f: asyncio.Future[Any]) -> None:
        nonlocal acked, errors
        outstanding.discard(f)
        if f.cancelled() or f.exception() is not None:
            errors += 1
        else:
            acked += 1

    start = time.monotonic()
    i = 0
    while time.monotonic() - start < seconds:
        # The same bound on queued records as librdkafka's default
        # queue.buffering.max.messages (100,000).
        if len(outstanding) >= 100_000:
            await asyncio.sleep(0.005)
            continue
        f = p.send(tps[i % len(tps)], value)
        outstanding.add(f)
        f.add_done_callback(done)
        i += 1
        if i % 1000 == 0:
            await asyncio.sleep(0)
    await p.flush()
    elapsed = time.monotonic() - start
    await p.close()
    return {"records": acked, "errors": errors, "seconds": elapsed}


async def _own_latency(
    rpc: list[tuple[str, int]], load: _Load, rate: float, warmup_s: float = 0.0, acks: int = -1
) -> list[float]:
    """As :func:`_confluent_latency`, for partlog's client (``acks`` -1 or 1)."""
    value, partitions, seconds, linger_ms = load
    from partlog.client.producer import Producer

    p = Producer(rpc, az="az1", linger_ms=linger_ms, acks=acks, idempotent=acks == -1)
    await p.start()
    tps = p.view.partitions(TOPIC)[:partitions]
    lat: list[float] = []

    def cb(sent: float) -> Callable[[asyncio.Future[Any]], None]:
        def done(f: asyncio.Future[Any]) -> None:
            if sent >= counted and not f.cancelled() and f.exception() is None:
                lat.append((time.monotonic() - sent) * 1000)

        return done

    start = time.monotonic()
    counted = start + warmup_s
    i = 0
    while time.monotonic() - counted < seconds:
        due = start + i / rate
        now = time.monotonic()
        if due > now:
            await asyncio.sleep(due - now)
        p.send(tps[i % len(tps)], value).add_done_callback(cb(time.monotonic()))
        i += 1
    await p.flush()
    await p.close()
    return lat


def _read_with_kcat(kcat: str, bootstrap: str, value_bytes: int) -> dict[str, Any]:
    """Everything in the topic, read by kcat (librdkafka in C: the client
    side costs little, so the brokers' read path is what is measured)."""
    start = time.monotonic()
    out = subprocess.run(
        [kcat, "-C", "-b", bootstrap, "-t", TOPIC, "-e", "-o", "beginning", "-q", "-f", "%o\\n",
         "-X", "fetch.max.bytes=52428800"],
        capture_output=True,
        timeout=600,
        check=True,
    )  # fmt: skip
    elapsed = time.monotonic() - start
    n = out.stdout.count(b"\n")
    return {"client": "kcat", "records": n, "mib": n * value_bytes / 2**20, "seconds": elapsed}


def _read_all(bootstrap: str, partitions: int) -> dict[str, Any]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{time.monotonic_ns()}",
                  "enable.auto.commit": False, "fetch.max.bytes": 50 * 1024 * 1024})  # fmt: skip
    tps = [TopicPartition(TOPIC, p) for p in range(partitions)]
    high = {t.partition: c.get_watermark_offsets(t, timeout=10)[1] for t in tps}
    total = sum(high.values())
    c.assign([TopicPartition(TOPIC, p, 0) for p in range(partitions)])
    n = 0
    nbytes = 0
    start = time.monotonic()
    deadline = start + 300
    while n < total and time.monotonic() < deadline:
        for m in c.consume(10_000, 0.5):
            if not m.error():
                n += 1
                nbytes += len(m.value() or b"")
    elapsed = time.monotonic() - start
    c.close()
    return {"client": "confluent-kafka (Python)", "records": n, "mib": nbytes / 2**20, "seconds": elapsed}


def run(
    *,
    seconds: float = 10.0,
    value_bytes: int = 1024,
    partitions: int = 6,
    linger_ms: int = 5,
    commit_interval_ms: int = 50,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    say = progress or (lambda _m: None)
    value = os.urandom(value_bytes)
    data_dir = tempfile.mkdtemp(prefix="partlog-bench-kafka-")
    cluster = BenchCluster(data_dir, partitions, commit_interval_ms)
    try:
        say(f"cluster up: {cluster.bootstrap}")
        say(f"throughput, Kafka front end (confluent-kafka), {seconds:g} s")
        load = _Load(value, partitions, seconds, linger_ms)
        front = _confluent_throughput(cluster.bootstrap, load)
        say(f"throughput, own client, {seconds:g} s")
        own = asyncio.run(_own_throughput(cluster.rpc, load))
        for r in (front, own):
            r["records_per_s"] = r["records"] / r["seconds"]
            r["mib_per_s"] = r["records"] * value_bytes / 2**20 / r["seconds"]
        rate = max(1.0, min(front["records_per_s"], own["records_per_s"]) / 2)
        # Latency in A-B-B-A order, each half as long, after a settle pause:
        # neither side always runs right after the other's load.
        half = load._replace(seconds=seconds / 2)

        def both(rate: float) -> tuple[list[float], list[float]]:
            front_lat: list[float] = []
            own_lat: list[float] = []
            for first in (True, False):
                for is_front in (first, not first):
                    time.sleep(SETTLE_S)
                    # Both sides pace a warm-up second they do not count:
                    # librdkafka's own measure starts at produce(), before
                    # its producer id and metadata exist, while ours starts
                    # after start() fetched them.  Counted, the first made
                    # the front end's p99 about 500 ms at any rate.
                    if is_front:
                        front_lat += _confluent_latency(cluster.bootstrap, half, rate, warmup_s=LATENCY_WARMUP_S)
                    else:
                        own_lat += asyncio.run(_own_latency(cluster.rpc, half, rate, warmup_s=LATENCY_WARMUP_S))
            return front_lat, own_lat

        say(f"latency at {rate:.0f} records/s, both sides (A-B-B-A)")
        front_lat, own_lat = both(rate)
        for r, lat in ((front, front_lat), (own, own_lat)):
            r["latency_rate_per_s"] = rate
            r["p50_ms"] = percentile(lat, 0.50)
            r["p99_ms"] = percentile(lat, 0.99)
            r["latency_samples"] = len(lat)
        say(f"latency at a light {LIGHT_RATE_PER_S} records/s, both sides")
        front_light, own_light = both(LIGHT_RATE_PER_S)
        for r, lat in ((front, front_light), (own, own_light)):
            r["light_p50_ms"] = percentile(lat, 0.50)
            r["light_p99_ms"] = percentile(lat, 0.99)
        # kcat when installed: a Python consumer spends ~8 us per record
        # itself and would measure the client, not the brokers.
        kcat = shutil.which("kcat")
        say(f"consumer read rate with {'kcat' if kcat else 'confluent-kafka'} (cold, then warm cache)")
        time.sleep(SETTLE_S)
        if kcat:
            cold = _read_with_kcat(kcat, cluster.bootstrap, value_bytes)
            warm = _read_with_kcat(kcat, cluster.bootstrap, value_bytes)
        else:
            cold = _read_all(cluster.bootstrap, partitions)
            warm = _read_all(cluster.bootstrap, partitions)
        brokers = 3
        for r in (cold, warm):
            r["mib_per_s_per_broker"] = r["mib"] / r["seconds"] / brokers if r["seconds"] else 0.0
    finally:
        cluster.close()
        shutil.rmtree(data_dir, ignore_errors=True)
    ratio = front["mib_per_s"] / own["mib_per_s"] if own["mib_per_s"] else 0.0
    return {
        "setup": {
            "processes": "controller + 3 broker processes",
            "brokers": 3,
            "azs": 3,
            "replication_factor": 3,
            "partitions": partitions,
            "value_bytes": value_bytes,
            "linger_ms": linger_ms,
            "commit_interval_ms": commit_interval_ms,
            "seconds": seconds,
            "acks": "all",
            "idempotent": True,
        },
        "front_end": front,
        "own_client": own,
        "read_cold": cold,
        "read_warm": warm,
        "ratio_mib_per_s": ratio,
        "verdicts": {
            f"front end >= {TARGET_RATIO} x own client MiB/s": ratio >= TARGET_RATIO,
            f"front end p99 <= linger + {TARGET_P99_SLACK_MS:g} ms at half throughput": front["p99_ms"]
            <= linger_ms + TARGET_P99_SLACK_MS,
            f"front end p99 <= linger + {TARGET_P99_SLACK_MS:g} ms at {LIGHT_RATE_PER_S} records/s": front[
                "light_p99_ms"
            ]
            <= linger_ms + TARGET_P99_SLACK_MS,
            f"warm read >= {TARGET_READ_MIB_PER_S:g} MiB/s per broker": warm["mib_per_s_per_broker"]
            >= TARGET_READ_MIB_PER_S,
        },
    }


def print_report(r: dict[str, Any], out: Any = sys.stdout) -> None:
    s = r["setup"]
    print(
        f"partlog bench kafka: {s['brokers']} brokers in {s['azs']} AZs, RF {s['replication_factor']}, "
        f"{s['partitions']} partitions, {s['value_bytes']} B values, acks=all idempotent, linger {s['linger_ms']} ms, "
        f"commit interval {s['commit_interval_ms']} ms",
        file=out,
    )
    rate = r["front_end"]["latency_rate_per_s"]
    print(f"{'':28}{'records/s':>12}{'MiB/s':>8}   p50/p99 ms at {rate:,.0f}/s   p50/p99 ms at {LIGHT_RATE_PER_S}/s",
          file=out)  # fmt: skip
    for name, key in (("Kafka front end (librdkafka)", "front_end"), ("own client (partlog.client)", "own_client")):
        x = r[key]
        heavy = f"{x['p50_ms']:.1f} / {x['p99_ms']:.1f}"
        light = f"{x['light_p50_ms']:.1f} / {x['light_p99_ms']:.1f}"
        print(f"{name:28}{x['records_per_s']:>12,.0f}{x['mib_per_s']:>8.1f}   {heavy:>21}   {light:>21}", file=out)
    print(f"front end / own client MiB/s: {r['ratio_mib_per_s']:.2f}", file=out)
    for name in ("read_cold", "read_warm"):
        x = r[name]
        print(f"consumer {name[5:]:4} read ({x['client']}): {x['mib']:.1f} MiB in {x['seconds']:.2f} s, "
              f"{x['mib_per_s_per_broker']:.1f} MiB/s per broker", file=out)  # fmt: skip
    for verdict, ok in r["verdicts"].items():
        print(f"  {'PASS' if ok else 'MISS'}  {verdict}", file=out)


# ------------------------------------------------------------ rotation


def _rotation_rules(commit_interval_ms: int, budgets: tuple[int | None, ...]) -> list[tuple[str, tuple[str, ...]]]:
    """(name, broker flags): the interval-only rule first (the baseline),
    then the load-following rule at each budget (None: the brokers' default)."""
    rules: list[tuple[str, tuple[str, ...]]] = [("interval-only", ("--rotation-grace-ms", str(commit_interval_ms)))]
    for budget in budgets:
        if budget is None:
            rules.append(("load-following, default budget", ()))
        else:
            rules.append((f"load-following, {budget} PUTs/s", ("--wal-puts-per-s-max", str(budget))))
    return rules


def _broker_puts(ports: list[int]) -> list[dict[str, float]]:
    """Per broker: WAL PUTs by reason (keyed by the reason), budget waits,
    and the upload and commit histograms' sums and counts, now."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    wanted = {"partlog_wal_budget_waits_total", "partlog_upload_seconds_sum", "partlog_upload_seconds_count",
              "partlog_commit_seconds_sum", "partlog_commit_seconds_count"}  # fmt: skip
    out = []
    for port in ports:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
            text = resp.read().decode()
        row: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == "partlog_wal_puts_total":
                    row[sample.labels["reason"]] = sample.value
                elif sample.name in wanted:
                    row[sample.name] = sample.value
        out.append(row)
    return out


def _rotation_point(
    name: str, flags: tuple[str, ...], load: _Load, rate: float, commit_interval_ms: int, say: Callable[[str], None]
) -> dict[str, Any]:
    data_dir = tempfile.mkdtemp(prefix="partlog-bench-rotation-")
    cluster = BenchCluster(data_dir, load.partitions, commit_interval_ms, flags)
    try:
        say(f"{name}: latency at {rate:g} records/s for {load.seconds:g} s")
        time.sleep(SETTLE_S)
        # The PUT counts include the warm-up's second (the same pace).
        before = _broker_puts(cluster.metrics_ports)
        start = time.monotonic()
        lat = _confluent_latency(cluster.bootstrap, load, rate, warmup_s=LATENCY_WARMUP_S)
        elapsed = time.monotonic() - start
        after = _broker_puts(cluster.metrics_ports)
    finally:
        cluster.close()
        shutil.rmtree(data_dir, ignore_errors=True)
    brokers: list[dict[str, Any]] = []
    for b, a in zip(before, after, strict=True):
        delta = {k: a.get(k, 0.0) - b.get(k, 0.0) for k in a}
        reasons = {k: v / elapsed for k, v in delta.items() if not k.startswith("partlog_") and v}
        uploads = delta.get("partlog_upload_seconds_count", 0.0)
        commits = delta.get("partlog_commit_seconds_count", 0.0)
        brokers.append({
            "puts_per_s": sum(reasons.values()),
            "puts_per_s_by_reason": reasons,
            "budget_waits_per_s": delta.get("partlog_wal_budget_waits_total", 0.0) / elapsed,
            "upload_mean_ms": 1000 * delta.get("partlog_upload_seconds_sum", 0.0) / uploads if uploads else 0.0,
            "commit_mean_ms": 1000 * delta.get("partlog_commit_seconds_sum", 0.0) / commits if commits else 0.0,
        })  # fmt: skip
    return {
        "rule": name,
        "broker_flags": list(flags),
        "records": len(lat),
        "seconds": elapsed,
        "p50_ms": percentile(lat, 0.50),
        "p99_ms": percentile(lat, 0.99),
        "brokers": brokers,
        "puts_per_s_max_broker": max(float(b["puts_per_s"]) for b in brokers),
    }


def run_rotation(
    *,
    seconds: float = 10.0,
    rate: float = ROTATION_RATE_PER_S,
    value_bytes: int = 1024,
    partitions: int = 6,
    linger_ms: int = 5,
    commit_interval_ms: int = 50,
    budgets: tuple[int | None, ...] = (None,),
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """The rotation rules compared (see the module docstring).  Bounded: per
    rule, a cluster's startup, SETTLE_S, LATENCY_WARMUP_S and ``seconds``."""
    say = progress or (lambda _m: None)
    load = _Load(os.urandom(value_bytes), partitions, seconds, linger_ms)
    points = [
        _rotation_point(name, flags, load, rate, commit_interval_ms, say)
        for name, flags in _rotation_rules(commit_interval_ms, budgets)
    ]
    base = points[0]
    for pt in points:
        pt["p50_ratio"] = pt["p50_ms"] / base["p50_ms"] if base["p50_ms"] else 0.0
        pt["p99_ratio"] = pt["p99_ms"] / base["p99_ms"] if base["p99_ms"] else 0.0
        top = base["puts_per_s_max_broker"]
        pt["puts_ratio"] = pt["puts_per_s_max_broker"] / top if top else 0.0
    best = points[1:] or points
    return {
        "setup": {
            "processes": "controller + 3 broker processes",
            "replication_factor": 3,
            "partitions": partitions,
            "value_bytes": value_bytes,
            "linger_ms": linger_ms,
            "commit_interval_ms": commit_interval_ms,
            "rate_per_s": rate,
            "seconds": seconds,
            "acks": "all",
            "idempotent": True,
            "store": "local directory",
        },
        "rules": points,
        "verdicts": {
            f"{pt['rule']}: p50 <= {TARGET_ROTATION_P50_MS:g} ms and p99 <= {TARGET_ROTATION_P99_MS:g} ms": (
                pt["p50_ms"] <= TARGET_ROTATION_P50_MS and pt["p99_ms"] <= TARGET_ROTATION_P99_MS
            )
            for pt in best
        },
    }


def print_rotation_report(r: dict[str, Any], out: Any = sys.stdout) -> None:
    s = r["setup"]
    print(
        f"partlog bench kafka --rotation: librdkafka at {s['rate_per_s']:,.0f} records/s for {s['seconds']:g} s, "
        f"{s['partitions']} partitions RF {s['replication_factor']}, {s['value_bytes']} B values, acks=all "
        f"idempotent, linger {s['linger_ms']} ms, commit interval {s['commit_interval_ms']} ms, local store",
        file=out,
    )
    print(f"{'rule':34}{'p50 ms':>8}{'p99 ms':>8}{'x p50':>7}{'x p99':>7}{'PUTs/s':>8}{'x PUTs':>7}"
          f"   PUTs/s per broker (by reason), budget waits/s", file=out)  # fmt: skip
    for pt in r["rules"]:
        per = "; ".join(
            f"{b['puts_per_s']:.1f} ("
            + ", ".join(f"{k} {v:.1f}" for k, v in sorted(b["puts_per_s_by_reason"].items()))
            + f"), waits {b['budget_waits_per_s']:.1f}"
            for b in pt["brokers"]
        )
        print(f"{pt['rule']:34}{pt['p50_ms']:>8.1f}{pt['p99_ms']:>8.1f}{pt['p50_ratio']:>7.2f}{pt['p99_ratio']:>7.2f}"
              f"{pt['puts_per_s_max_broker']:>8.1f}{pt['puts_ratio']:>7.2f}   {per}", file=out)  # fmt: skip
        stages = ", ".join(
            f"b{i + 1} upload {b['upload_mean_ms']:.1f} / commit {b['commit_mean_ms']:.1f}"
            for i, b in enumerate(pt["brokers"])
            if b["puts_per_s"]
        )
        print(f"{'':34}mean ms: {stages}", file=out)
    print("PUTs/s: the busiest broker's; x: ratio to the interval-only rule", file=out)
    for verdict, ok in r["verdicts"].items():
        print(f"  {'PASS' if ok else 'MISS'}  {verdict}", file=out)


__all__ = ["BenchCluster", "print_report", "print_rotation_report", "run", "run_rotation"]
