"""``partlog bench kafka --security sasl_ssl``: produce throughput of
librdkafka over a SASL_SSL listener (TLS and SCRAM-SHA-512) against the
same brokers' PLAINTEXT listener, in one run.

One cluster (a controller and three ``partlog broker`` processes, one per
AZ, replication factor 3, durable commits), each broker with both
listeners; a SCRAM user added with ``partlog users``; a test CA and a
server certificate for 127.0.0.1 made with the ``openssl`` command in a
temporary directory.  The two sides run one after the other with the same
load (acks=all, idempotent); the verdict is the issue's target: SASL_SSL
at least 0.8 of PLAINTEXT in MiB/s.  No authorizer runs yet, so the
issue's "p99 added by authorization" is not measured.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from typing import Any

from partlog.tools.bench_kafka import TOPIC, _confluent_throughput, _Load, _wait_port

TARGET_RATIO = 0.8
USER, PASSWORD = "bench", "bench-password"
_EXT = """[req]
distinguished_name = dn
[dn]
[ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign
[server]
basicConstraints = critical, CA:FALSE
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1
"""


def make_certs(d: str) -> None:
    """ca.crt, server.crt and server.key in ``d`` (RuntimeError without openssl)."""
    if shutil.which("openssl") is None:
        raise RuntimeError("the openssl command is needed to make the benchmark's certificates")
    with open(os.path.join(d, "openssl.cnf"), "w") as f:
        f.write(_EXT)

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)

    key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl("req", "-x509", "-config", "openssl.cnf", "-extensions", "ca", *key, "-keyout", "ca.key",
            "-out", "ca.crt", "-days", "1", "-subj", "/CN=partlog bench CA")  # fmt: skip
    openssl("req", "-new", "-config", "openssl.cnf", *key, "-keyout", "server.key", "-out", "server.csr",
            "-subj", "/CN=partlog bench broker")  # fmt: skip
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-set_serial", "2",
            "-days", "1", "-extfile", "openssl.cnf", "-extensions", "server", "-out", "server.crt")  # fmt: skip


class SecureBenchCluster:
    """A controller and three brokers, each with a SASL_SSL and a PLAINTEXT listener."""

    def __init__(self, data_dir: str, partitions: int, commit_interval_ms: int) -> None:
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
                         "--kafka-ssl-key", os.path.join(data_dir, "server.key")])  # fmt: skip
        for i in range(3):
            _wait_port(sasl[i], self.procs[1 + i])
            _wait_port(plain[i], self.procs[1 + i])
        subprocess.run([sys.executable, "-m", "partlog", "users", "add", USER, "--controller", f"127.0.0.1:{ctl}",
                        "--mechanism", "SCRAM-SHA-512"], input=PASSWORD.encode(), check=True,
                       capture_output=True, timeout=60)  # fmt: skip
        self.plain = ",".join(f"127.0.0.1:{p}" for p in plain)
        self.sasl_ssl = ",".join(f"127.0.0.1:{p}" for p in sasl)
        self.sasl_conf = {
            "security.protocol": "SASL_SSL",
            "sasl.mechanisms": "SCRAM-SHA-512",
            "sasl.username": USER,
            "sasl.password": PASSWORD,
            "ssl.ca.location": os.path.join(data_dir, "ca.crt"),
        }
        from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

        admin = AdminClient({"bootstrap.servers": self.plain})
        admin.create_topics([NewTopic(TOPIC, num_partitions=partitions, replication_factor=3)])[TOPIC].result(60)

    def _spawn(self, args: list[str]) -> None:
        self.procs.append(subprocess.Popen([sys.executable, "-m", "partlog", *args], stdout=subprocess.DEVNULL,
                                           stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL))  # fmt: skip

    def close(self) -> None:
        for p in reversed(self.procs):
            p.terminate()
        for p in self.procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


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
    try:
        make_certs(data_dir)
        say("starting a controller and 3 brokers with SASL_SSL and PLAINTEXT listeners")
        cluster = SecureBenchCluster(data_dir, partitions, commit_interval_ms)
        try:
            load = _Load(os.urandom(value_bytes), partitions, seconds, linger_ms)
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
        finally:
            cluster.close()
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    ratio = sides["sasl_ssl"]["mib_per_s"] / sides["plaintext"]["mib_per_s"] if sides["plaintext"]["mib_per_s"] else 0
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
        },
        **sides,
        "ratio_mib_per_s": ratio,
        "verdicts": {f"SASL_SSL >= {TARGET_RATIO} x PLAINTEXT MiB/s": ratio >= TARGET_RATIO},
    }


def print_report(r: dict[str, Any], out: Any = sys.stdout) -> None:
    s = r["setup"]
    print(f"partlog bench kafka --security sasl_ssl: {s['brokers']} brokers, RF {s['replication_factor']}, "
          f"{s['partitions']} partitions, {s['value_bytes']} B values, acks=all idempotent, "
          f"linger {s['linger_ms']} ms; {s['sasl']}", file=out)  # fmt: skip
    for name in ("plaintext", "sasl_ssl"):
        x = r[name]
        print(f"  {name.upper():10}{x['records_per_s']:>12,.0f} records/s{x['mib_per_s']:>8.1f} MiB/s", file=out)
    print(f"SASL_SSL / PLAINTEXT MiB/s: {r['ratio_mib_per_s']:.2f}", file=out)
    for verdict, ok in r["verdicts"].items():
        print(f"  {'PASS' if ok else 'MISS'}  {verdict}", file=out)


__all__ = ["SecureBenchCluster", "make_certs", "print_report", "run"]
