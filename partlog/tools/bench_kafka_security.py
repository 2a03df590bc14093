"""``partlog bench kafka --security sasl_ssl``: produce throughput of
librdkafka over a SASL_SSL listener (TLS and SCRAM-SHA-512) against the
same brokers' PLAINTEXT listener, and the produce latency authorization
adds, in one run.

One cluster (a controller and three ``partlog broker`` processes, one per
AZ, replication factor 3, durable commits), each broker with both
listeners; a SCRAM user added with ``partlog users``; a test CA and a
server certificate for 127.0.0.1 made with the ``openssl`` command in a
temporary directory.  The two throughput sides run one after the other
with the same load (acks=all, idempotent); the verdict is the issue's
target: SASL_SSL at least 0.8 of PLAINTEXT in MiB/s.

Authorization ("p99 added by authorization <= 1 ms"), two figures:

* end to end: produce latency p50/p99 over SASL_SSL as the SCRAM user at a
  fixed modest rate (``LATENCY_RATE_PER_S``, so latency is not queueing),
  acks=all and idempotent, on that cluster (no authorizer) and then on a
  second cluster of the same shape whose brokers run ``--authorizer`` with
  ACLs granting the user exactly what it needs (WRITE and DESCRIBE on the
  topic, IDEMPOTENT_WRITE on the cluster);
* the authorizer's own decision time: :class:`partlog.acl.Authorizer`
  deciding a produce request's checks (WRITE on its topic; InitProducerId's
  IDEMPOTENT_WRITE on the cluster) among ``MICRO_ACLS`` ACLs, p50/p99 in us.

The verdict uses the decision time times the decisions a one-topic produce
request makes (one): that check, inline on the event loop, is all the
request path gains with an authorizer, while the end-to-end difference on
a shared 2-core machine (two clusters of four processes, run one after the
other) moves by more than 1 ms from run to run without any code change;
both are printed.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from partlog.acl import CLUSTER_NAME, AclBinding, AclOperation, AclPermission, PatternType, ResourceType
from partlog.acl.authorizer import AclSet, Authorizer, AuthorizerConfig
from partlog.tools.bench_kafka import (
    TOPIC,
    _confluent_throughput,
    _Load,
    _wait_port,
    spawn_partlog,
    stop_processes,
    wait_registered,
)
from partlog.tools.loopback_certs import make_ca, make_signed

TARGET_RATIO = 0.8
# The target: p99 produce latency added by authorization.
TARGET_AUTHZ_P99_MS = 1.0
USER, PASSWORD = "bench", "bench-password"
PRINCIPAL = f"User:{USER}"
# Records/s of the latency measure: modest, so that latency is not queueing.
LATENCY_RATE_PER_S = 200
# ACLs in the authorizer's microbenchmark, and the decisions it times.
MICRO_ACLS = 1_000
MICRO_DECISIONS = 20_000
# How long the ACLs may take to reach the brokers (they follow the controller).
ACLS_SETTLE_S = 30.0
# The ACLs the bench user needs to produce idempotently (and nothing else).
BENCH_ACLS = (("topic", TOPIC, "write"), ("topic", TOPIC, "describe"), ("cluster", CLUSTER_NAME, "idempotent-write"))
# The brokers' RPC has no TLS here, so each broker is User:ANONYMOUS to the
# others and needs CLUSTER_ACTION under the authorizer (docs/security.md, "The
# broker RPC under the authorizer"): granted by ACL, not as a super user.
BROKER_ACL = ("User:ANONYMOUS", "cluster", CLUSTER_NAME, "cluster-action")


def make_certs(d: str) -> None:
    """ca.crt, server.crt and server.key in ``d`` (CertError, a RuntimeError, without openssl)."""
    make_ca(Path(d), "ca.crt", "ca.key", "partlog bench CA")
    make_signed(Path(d), "server.crt", "server.key", "partlog bench broker", ca=("ca.crt", "ca.key"), serial=2)


class SecureBenchCluster:
    """A controller and three brokers, each with a SASL_SSL and a PLAINTEXT
    listener; ``authorizer``: the brokers run ``--authorizer`` and the bench
    user is granted :data:`BENCH_ACLS`, the brokers' own RPC :data:`BROKER_ACL`
    (PLAINTEXT's User:ANONYMOUS nothing else)."""

    def __init__(self, data_dir: str, partitions: int, commit_interval_ms: int, authorizer: bool = False) -> None:
        from partlog.tools.local_cluster import free_ports

        ctl, *ports = free_ports(10)
        self.procs: list[subprocess.Popen[bytes]] = []
        self._spawn(["controller", "--data-dir", os.path.join(data_dir, "controller"), "--port", str(ctl)])
        _wait_port(ctl, self.procs[-1])
        rpc, sasl, plain = ports[:3], ports[3:6], ports[6:9]
        store = "file://" + os.path.join(data_dir, "objects")
        for i in range(3):
            self._spawn(["broker", "--controller", f"127.0.0.1:{ctl}", "--id", str(i + 1), "--az", f"az{i + 1}",
                         "--port", str(rpc[i]), "--data-dir", data_dir, "--store", store,
                         "--commit-interval-ms", str(commit_interval_ms),
                         "--listeners", f"SASL_SSL://127.0.0.1:{sasl[i]},PLAINTEXT://127.0.0.1:{plain[i]}",
                         "--kafka-ssl-cert", os.path.join(data_dir, "server.crt"),
                         "--kafka-ssl-key", os.path.join(data_dir, "server.key"),
                         *(["--authorizer"] if authorizer else [])])  # fmt: skip
        for i in range(3):
            _wait_port(sasl[i], self.procs[1 + i])
            _wait_port(plain[i], self.procs[1 + i])
        from confluent_kafka.admin import AdminClient

        wait_registered(AdminClient({"bootstrap.servers": ",".join(f"127.0.0.1:{p}" for p in plain)}), 3)
        controller = ["--controller", f"127.0.0.1:{ctl}"]
        self._partlog(["users", "add", USER, *controller, "--mechanism", "SCRAM-SHA-512"], PASSWORD)
        self._partlog(["topics", "create", TOPIC, *controller, "--partitions", str(partitions),
                       "--replication-factor", "3"])  # fmt: skip
        if authorizer:
            for principal, rtype, name, op in [BROKER_ACL, *((PRINCIPAL, *acl) for acl in BENCH_ACLS)]:
                self._partlog(["acls", "add", *controller, "--resource-type", rtype, "--name", name,
                               "--principal", principal, "--operation", op])  # fmt: skip
        self.plain = ",".join(f"127.0.0.1:{p}" for p in plain)
        self.sasl_ssl = ",".join(f"127.0.0.1:{p}" for p in sasl)
        self.sasl_conf = {
            "security.protocol": "SASL_SSL",
            "sasl.mechanisms": "SCRAM-SHA-512",
            "sasl.username": USER,
            "sasl.password": PASSWORD,
            "ssl.ca.location": os.path.join(data_dir, "ca.crt"),
        }

    def _partlog(self, args: list[str], stdin: str = "") -> None:
        subprocess.run([sys.executable, "-m", "partlog", *args], input=stdin.encode(), check=True,
                       capture_output=True, timeout=60)  # fmt: skip

    def _spawn(self, args: list[str]) -> None:
        self.procs.append(spawn_partlog(args))

    def wait_writable(self) -> None:
        """Until one record of the bench user is acknowledged (the brokers
        follow the controller's ACLs and topics a moment later)."""
        from confluent_kafka import Producer

        deadline = time.monotonic() + ACLS_SETTLE_S
        while True:
            p = Producer({"bootstrap.servers": self.sasl_ssl, "enable.idempotence": True, "acks": "all",
                          "message.timeout.ms": 5000, **self.sasl_conf})  # fmt: skip
            errors: list[Any] = []
            p.produce(TOPIC, b"ready", on_delivery=functools.partial(_collect, errors))
            p.flush(10)
            if errors == [None]:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the bench user cannot produce after {ACLS_SETTLE_S:g} s: {errors}")
            time.sleep(0.2)

    def close(self) -> None:
        stop_processes(self.procs)


def _collect(into: list[Any], err: Any, _msg: Any) -> None:
    into.append(err)


def produce_latency(bootstrap: str, conf: dict[str, Any], load: _Load, rate: float) -> dict[str, Any]:
    """Produce latency (ms, send to acknowledgement) of one librdkafka
    producer sending ``rate`` records/s for ``load.seconds``: count, p50, p99."""
    from confluent_kafka import Producer

    value, partitions, seconds, linger_ms = load
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                  "linger.ms": linger_ms, "client.id": "bench-authz,diskless_az=az1", **conf})  # fmt: skip
    lat: list[float] = []
    errors = 0

    def cb(sent: float) -> Callable[[Any, Any], None]:
        def done(err: Any, _msg: Any) -> None:
            nonlocal errors
            if err is None:
                lat.append((time.monotonic() - sent) * 1000)
            else:
                errors += 1

        return done

    start = time.monotonic()
    i = 0
    while time.monotonic() - start < seconds:
        due = start + i / rate
        now = time.monotonic()
        if due > now:
            p.poll(min(due - now, 0.01))
            continue
        p.produce(TOPIC, value=value, partition=i % partitions, on_delivery=cb(time.monotonic()))
        i += 1
        p.poll(0)
    p.flush(120)
    return {"records": len(lat), "errors": errors, **_percentiles(lat, 1.0)}


def _percentiles(samples: list[float], scale: float) -> dict[str, float]:
    if not samples:
        return {"p50": 0.0, "p99": 0.0}
    xs = sorted(samples)
    return {"p50": xs[len(xs) // 2] * scale, "p99": xs[min(len(xs) - 1, int(len(xs) * 0.99))] * scale}


def micro_acls(n: int = MICRO_ACLS) -> AclSet:
    """``n`` ACLs shaped like a busy cluster's, pessimistic for the bench
    topic: other users' LITERAL and PREFIXED topic and group ACLs (prefixes
    of the bench topic's name among them), a quarter of them on the bench
    topic itself from other hosts (each is checked on its lookups), plus
    :data:`BENCH_ACLS`."""
    ops = {
        "write": AclOperation.WRITE,
        "describe": AclOperation.DESCRIBE,
        "idempotent-write": AclOperation.IDEMPOTENT_WRITE,
    }
    own = [
        AclBinding(ResourceType.TOPIC if rtype == "topic" else ResourceType.CLUSTER, name, PatternType.LITERAL,
                   PRINCIPAL, "*", ops[op], AclPermission.ALLOW)
        for rtype, name, op in BENCH_ACLS
    ]  # fmt: skip
    others: list[AclBinding] = []
    for i in range(n - len(own)):
        kind = i % 4
        who = f"User:app-{i % 97}"
        if kind == 0:
            b = AclBinding(ResourceType.TOPIC, f"topic-{i}", PatternType.LITERAL, who, "*", AclOperation.WRITE,
                           AclPermission.ALLOW)  # fmt: skip
        elif kind == 1:
            b = AclBinding(ResourceType.TOPIC, TOPIC[: 1 + i % len(TOPIC)] + f"-{i}"[: i % 2], PatternType.PREFIXED,
                           who, "*", AclOperation.READ, AclPermission.ALLOW)  # fmt: skip
        elif kind == 2:
            b = AclBinding(ResourceType.GROUP, f"group-{i}", PatternType.LITERAL, who, "*", AclOperation.READ,
                           AclPermission.ALLOW)  # fmt: skip
        else:
            b = AclBinding(ResourceType.TOPIC, TOPIC, PatternType.LITERAL, who, f"10.0.{i % 250}.1",
                           AclOperation.DESCRIBE, AclPermission.ALLOW if i % 8 else AclPermission.DENY)  # fmt: skip
        others.append(b)
    return AclSet([*own, *others])


def authorizer_decisions(decisions: int = MICRO_DECISIONS, acls: int = MICRO_ACLS) -> dict[str, Any]:
    """The authorizer's decision time (us) for a produce request's checks
    among ``acls`` ACLs: WRITE on the topic (every produce request) and
    IDEMPOTENT_WRITE on the cluster (InitProducerId), each timed alone."""
    a = Authorizer(AuthorizerConfig(), micro_acls(acls))
    checks = {
        "produce_write_topic": (AclOperation.WRITE, ResourceType.TOPIC, TOPIC),
        "init_idempotent_write_cluster": (AclOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, CLUSTER_NAME),
    }
    out: dict[str, Any] = {"acls": len(a.acls), "decisions": decisions}
    clock = time.perf_counter_ns
    for name, (op, rtype, resource) in checks.items():
        assert a.authorize(PRINCIPAL, "127.0.0.1", op, rtype, resource), name
        samples = []
        for _ in range(decisions):
            t0 = clock()
            a.authorize(PRINCIPAL, "127.0.0.1", op, rtype, resource)
            samples.append(clock() - t0)
        out[name] = _percentiles([float(x) for x in samples], 1e-3)
    return out


def run(
    *,
    seconds: float,
    value_bytes: int,
    partitions: int,
    linger_ms: int,
    commit_interval_ms: int,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    say = progress or (lambda _m: None)
    data_dir = tempfile.mkdtemp(prefix="partlog-bench-kafka-sasl-")
    load = _Load(os.urandom(value_bytes), partitions, seconds, linger_ms)
    latency: dict[str, dict[str, Any]] = {}
    try:
        make_certs(data_dir)
        say("starting a controller and 3 brokers with SASL_SSL and PLAINTEXT listeners")
        cluster = _start(data_dir, "open", partitions, commit_interval_ms, authorizer=False)
        try:
            cluster.wait_writable()
            say("warming up (PLAINTEXT)")
            _confluent_throughput(cluster.plain, load._replace(seconds=min(seconds, 2.0)))
            sides: dict[str, dict[str, Any]] = {}
            for name, bootstrap, conf in (
                ("plaintext", cluster.plain, {}),
                ("sasl_ssl", cluster.sasl_ssl, cluster.sasl_conf),
            ):
                say(f"throughput over {name.upper()} for {seconds:g} s")
                r = _confluent_throughput(bootstrap, load, conf)
                mib = r["records"] * value_bytes / (1 << 20)
                sides[name] = {**r, "records_per_s": r["records"] / r["seconds"], "mib_per_s": mib / r["seconds"]}
            say(f"produce latency over SASL_SSL at {LATENCY_RATE_PER_S}/s for {seconds:g} s, no authorizer")
            latency["no_authorizer"] = produce_latency(cluster.sasl_ssl, cluster.sasl_conf, load, LATENCY_RATE_PER_S)
        finally:
            cluster.close()
        say("the same cluster with --authorizer and the bench user's ACLs")
        cluster = _start(data_dir, "authz", partitions, commit_interval_ms, authorizer=True)
        try:
            cluster.wait_writable()
            say(f"produce latency over SASL_SSL at {LATENCY_RATE_PER_S}/s for {seconds:g} s, with the authorizer")
            latency["authorizer"] = produce_latency(cluster.sasl_ssl, cluster.sasl_conf, load, LATENCY_RATE_PER_S)
        finally:
            cluster.close()
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    say(f"the authorizer's decisions among {MICRO_ACLS} ACLs")
    micro = authorizer_decisions()
    ratio = sides["sasl_ssl"]["mib_per_s"] / sides["plaintext"]["mib_per_s"] if sides["plaintext"]["mib_per_s"] else 0
    e2e_added_ms = latency["authorizer"]["p99"] - latency["no_authorizer"]["p99"]
    # One decision per produce request of one topic (WRITE on it): see the module docstring.
    added_ms = micro["produce_write_topic"]["p99"] / 1000
    return {
        "setup": {
            "brokers": 3,
            "azs": 3,
            "replication_factor": 3,
            "partitions": partitions,
            "value_bytes": value_bytes,
            "linger_ms": linger_ms,
            "commit_interval_ms": commit_interval_ms,
            "sasl": "SCRAM-SHA-512 over TLS",
            "latency_rate_per_s": LATENCY_RATE_PER_S,
        },
        **sides,
        "ratio_mib_per_s": ratio,
        "latency": latency,
        "e2e_p99_added_ms": e2e_added_ms,
        "authorizer_us": micro,
        "authz_p99_added_ms": added_ms,
        "verdicts": {
            f"SASL_SSL >= {TARGET_RATIO} x PLAINTEXT MiB/s": ratio >= TARGET_RATIO,
            f"p99 added by authorization <= {TARGET_AUTHZ_P99_MS:g} ms (authorizer decision p99)": (
                added_ms <= TARGET_AUTHZ_P99_MS
            ),
        },
    }


def _start(
    data_dir: str, name: str, partitions: int, commit_interval_ms: int, *, authorizer: bool
) -> SecureBenchCluster:
    """A cluster in its own directory of ``data_dir`` (sharing the certificates)."""
    d = os.path.join(data_dir, name)
    os.makedirs(d)
    for f in ("ca.crt", "server.crt", "server.key"):
        shutil.copy(os.path.join(data_dir, f), d)
    return SecureBenchCluster(d, partitions, commit_interval_ms, authorizer)


def print_report(r: dict[str, Any], out: Any = sys.stdout) -> None:
    s = r["setup"]
    print(f"partlog bench kafka --security sasl_ssl: {s['brokers']} brokers, RF {s['replication_factor']}, "
          f"{s['partitions']} partitions, {s['value_bytes']} B values, acks=all idempotent, "
          f"linger {s['linger_ms']} ms; {s['sasl']}", file=out)  # fmt: skip
    for name in ("plaintext", "sasl_ssl"):
        x = r[name]
        print(f"  {name.upper():10}{x['records_per_s']:>12,.0f} records/s{x['mib_per_s']:>8.1f} MiB/s", file=out)
    print(f"SASL_SSL / PLAINTEXT MiB/s: {r['ratio_mib_per_s']:.2f}", file=out)
    print(f"produce latency over SASL_SSL at {s['latency_rate_per_s']} records/s (ms):", file=out)
    for name, label in (("no_authorizer", "no authorizer"), ("authorizer", "--authorizer")):
        x = r["latency"][name]
        print(f"  {label:15} p50 {x['p50']:7.2f}  p99 {x['p99']:7.2f}  ({x['records']} records)", file=out)
    print(f"  difference     p99 {r['e2e_p99_added_ms']:+7.2f} ms (end to end; noise of a shared machine)", file=out)
    m = r["authorizer_us"]
    print(f"authorizer decisions among {m['acls']} ACLs (us):", file=out)
    for name in ("produce_write_topic", "init_idempotent_write_cluster"):
        print(f"  {name:31} p50 {m[name]['p50']:6.2f}  p99 {m[name]['p99']:6.2f}", file=out)
    print(f"p99 added by authorization (decision p99 x 1 per produce request): {r['authz_p99_added_ms']:.4f} ms",
          file=out)  # fmt: skip
    for verdict, ok in r["verdicts"].items():
        print(f"  {'PASS' if ok else 'MISS'}  {verdict}", file=out)


__all__ = [
    "SecureBenchCluster",
    "authorizer_decisions",
    "make_certs",
    "micro_acls",
    "print_report",
    "produce_latency",
    "run",
]
