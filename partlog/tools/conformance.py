"""``scripts/conformance``: librdkafka's own test suite against a local
partlog cluster (issue 33; docs/design/conformance.md).

The contract:

* The source is librdkafka |RDKAFKA_VERSION|, as bundled by the npm package
  :data:`NPM_PACKAGE` (no registry we can reach ships the source of the
  installed client's 2.16.0).  The tarball is fetched with ``npm pack`` (or
  taken from ``--tarball``), checked against the pinned sha512
  (:data:`NPM_INTEGRITY`, npm's ``dist.integrity``) and unpacked into
  ``${XDG_CACHE_HOME:-~/.cache}/partlog/librdkafka-<version>``.  The library
  and the ``tests/test-runner`` are built there once (``./configure`` with
  what the machine has, never ``--install-deps``; ``make -j2``) and reused.
* One ``partlog cluster --serve`` (3 AZs x 1 broker, ``--num-partitions 4``
  as the suite's default scenario) serves every test; the suite's
  ``test.conf`` names its bootstrap servers and ``TEST_KAFKA_VERSION`` is the
  Kafka version partlog's ApiVersions matches (:data:`KAFKA_VERSION`).  The
  tests that call Kafka's ``bin/kafka-topics.sh`` get a stand-in
  (``$KAFKA_PATH``, partlog.tools.kafka_topics_shim).
* Each broker-backed test number runs alone (``TESTS=NNNN ./test-runner -p1
  -L``) under ``--cap-s`` seconds; a test over its cap is killed and fails.
* The table has one row per test of ``tests/test.c``: pass, fail or n/a with
  the reason (the suite's own skip or flag, or :data:`NOT_APPLICABLE`:
  features partlog leaves out on purpose).  Exit 1 if an applicable test
  failed, 2 on a usage or setup error (one line; ``--debug``: traceback).
"""

from __future__ import annotations

import argparse
import base64
import functools
import hashlib
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import IO

from partlog.tools.conformance_rows import (
    CAP_MARK,
    Row,
    SuiteTest,
    number_rows,
)
from partlog.tools.conformance_security import SECURE_SCENARIOS, SecuritySetupError, prepare, secure_bootstrap

logger = logging.getLogger(__name__)

RDKAFKA_VERSION = "2.15.1"
NPM_PACKAGE = "@confluentinc/kafka-javascript@1.10.1"
NPM_TARBALL = "confluentinc-kafka-javascript-1.10.1.tgz"
NPM_INTEGRITY = "sha512-KVePUBn21EqCVP9mfxzEuM3SYJHHEF7X+iiC2e43QQgDSyEaksInmCGooT3w5q+cNAdkSCrK71j0ICfqoSqZLw=="
TARBALL_PREFIX = "package/deps/librdkafka/"
# The Kafka release partlog's ApiVersions matches (the suite gates tests on
# it): Kafka 4.0's least versions (KIP-896: no Produce v0-2, Fetch v0-3,
# ListOffsets v0, so no pre-0.10 message formats).
KAFKA_VERSION = "4.0.0"
# The suite's default scenario (tests/scenarios/default.json).
AUTO_CREATE_PARTITIONS = 4
BROKERS = 3
BUILD_JOBS = 2
CAP_S_DEFAULT = 180
# Numbers whose own waits need more than the default cap, whatever --cap-s
# asks: 0113's 30-odd cooperative-rebalance sub-tests each wait out session
# timeouts, max.poll.interval.ms and rebalances (5 to 48 s each; over 8
# minutes in all against partlog, every sub-test passing); 0081: see
# TIMEOUT_MULTIPLIER.
CAP_S_MIN: dict[str, float] = {"0113": 900.0, "0081": 900.0}
# The suite's own per-test timeout (180 s) scaled for numbers whose waits
# alone pass it (its ``test.timeout.multiplier``; the suite's CI runs every
# test at 3): 0081 runs its 30-odd admin sub-tests twice (as a producer and
# as a consumer), joining classic groups that each wait out Kafka's 3 s
# group.initial.rebalance.delay.ms, besides DeleteAcls' and DeleteGroups'
# sleeps: about 190 s a pass against partlog (over 290 s under load).
TIMEOUT_MULTIPLIER: dict[str, float] = {"0081": 3.0}
# The test.timeout.multiplier of every other number: what trivup, the
# suite's own harness, writes in every test.conf (LibrdkafkaTestApp.py; the
# runner adds 2 more where CI is set, as in partlog's CI).  It scales the
# suite's timeouts and tolerances, e.g. 0127's 30 ms per fetch beyond
# fetch.queue.backoff.ms to 60 ms.
SUITE_TIMEOUT_MULTIPLIER = 2.0
TOTAL_S_DEFAULT = 4 * 3600
CLUSTER_START_S_MAX = 60
BUILT_MARKER = ".partlog-built"

# The suite's scenarios (tests/scenarios/*.json) and the ``partlog cluster``
# flags that make one: each has 4 partitions per auto-created topic and 3
# replicas; "noautocreate" turns auto.create.topics.enable off.
SCENARIOS: dict[str, tuple[str, ...]] = {
    "default": (),
    "noautocreate": ("--no-auto-create",),
    # partlog's own, not the suite's: the default scenario on a cluster that
    # commits WAL files every 50 ms, for the tests in LOW_LATENCY.
    "lowlatency": ("--commit-interval-ms=50",),
    # partlog's own too, as trivup's --ssl and --sasl runs of the suite: the
    # tests get an SSL listener (certificates in SSL_* variables) or a
    # SASL_PLAINTEXT one and a SCRAM user (partlog.tools.conformance_security).
    "ssl": (),
    "sasl": (),
}
# Tests whose timeouts assume Kafka's produce round trip of a millisecond or
# so: 0129 sends 112 requests one at a time within 30 s, while an acks=all
# answer waits for its WAL file's upload and commit, early closes capped at
# one per commit interval (4 a second at partlog cluster's 250 ms).  They
# run in the suite's default scenario, on a cluster committing every 50 ms.
LOW_LATENCY: frozenset[str] = frozenset({"0129"})
# Tests that need an SSL or SASL listener: they run in the suite's default
# scenario on a cluster of that partlog scenario.
SECURITY_TESTS: dict[str, str] = {"0097": "ssl", "0135": "sasl", "0142": "sasl"}
# The suite scenario a partlog scenario runs the tests in (TEST_SCENARIO).
SUITE_SCENARIO = {"lowlatency": "default", "ssl": "default", "sasl": "default"}
# Share groups (KIP-932): out of scope.
SHARE_GROUP_TESTS = "0170 0171 0172 0173 0174 0175 0176 0177 0178 0179 0180 0181 0184 0185 0186 0190"
# Broker-backed tests that need what partlog leaves out on purpose (the
# suite's own skips, SSL/SASL/version gates, come from the runner itself).
NOT_APPLICABLE: dict[str, str] = {
    "0098": "needs Kafka's Java client: the test builds a Java transactional producer against $KAFKA_PATH/libs",
    "0126": "needs SASL/OAUTHBEARER with an OIDC token endpoint (KIP-768): partlog's SASL is PLAIN and SCRAM "
    "(issue 29's scope; docs/security.md)",
    "0055": "diskless by design: an acks=all produce waits for its WAL file's upload and commit "
    "(partlog cluster's --commit-interval-ms 250), the test wants < 10 ms",
    **dict.fromkeys(SHARE_GROUP_TESTS.split(), "share groups (KIP-932): out of scope"),
}

# The CI subset: quick tests that cover produce, consume, groups, offsets
# and admin (docs/design/conformance.md gives their times).
SUBSETS: dict[str, tuple[str, ...]] = {
    "ci": ("0001", "0002", "0003", "0005", "0007", "0008", "0011", "0012", "0013", "0014", "0017", "0019",
           "0021", "0022", "0029", "0031", "0034", "0035", "0036", "0039", "0040", "0044", "0048", "0097", "0135"),
}  # fmt: skip


# Kafka's broker.session.timeout.ms default.
BROKER_SESSION_TIMEOUT_MS = 9_000


class ConformanceError(Exception):
    """A setup step failed: printed as one line."""


_ENTRY = re.compile(r"_TEST\((\d{4}_\w+)\s*,\s*([^,)]*)")
_SCENARIO = re.compile(r'\.scenario\s*=\s*"([^"]*)"')


def parse_suite(test_c: str) -> list[SuiteTest]:
    """The entries of test.c's ``struct test tests[]`` (each ``_TEST(NAME,
    FLAGS, ...)`` up to its closing parenthesis)."""
    start = test_c.index("struct test tests[]")
    out: list[SuiteTest] = []
    for m in _ENTRY.finditer(test_c, start):
        depth, i = 0, m.start() + len("_TEST")
        while True:
            c = test_c[i]
            depth += (c == "(") - (c == ")")
            i += 1
            if depth == 0:
                break
        body = test_c[m.start() : i]
        flags = m.group(2)
        sc = _SCENARIO.search(body)
        name = m.group(1)
        out.append(
            SuiteTest(
                name=name,
                number=name[:4],
                local="TEST_F_LOCAL" in flags,
                manual="TEST_F_MANUAL" in flags,
                known_issue="TEST_F_KNOWN_ISSUE" in flags and "_WIN32" not in flags and "_OSX" not in flags,
                scenario=sc.group(1) if sc else "default",
            )
        )
    return out


def cap_for(number: str, cap_s: float, left_s: float) -> float:
    """Seconds one test number may run: ``cap_s``, at least its CAP_S_MIN,
    at most what the whole run has left (and at least a second)."""
    return min(max(cap_s, CAP_S_MIN.get(number, 0.0)), max(1.0, left_s))


def conf_for(number: str, conf: Path) -> Path:
    """The test.conf one test number runs with: ``conf`` (which holds
    SUITE_TIMEOUT_MULTIPLIER), or beside it a copy with the number's
    TIMEOUT_MULTIPLIER instead."""
    if number not in TIMEOUT_MULTIPLIER:
        return conf
    out = conf.with_name(f"{conf.stem}-{number}.conf")
    kept = [line for line in conf.read_text().splitlines() if not line.startswith("test.timeout.multiplier=")]
    out.write_text("\n".join([*kept, f"test.timeout.multiplier={TIMEOUT_MULTIPLIER[number]:g}"]) + "\n")
    return out


def scenario_of(t: SuiteTest) -> str | None:
    """The first of a test's scenarios a partlog cluster can be started for
    (``lowlatency`` for a default-scenario test in LOW_LATENCY)."""
    found = next((sc for sc in t.scenario.split(",") if sc in SCENARIOS and sc not in SUITE_SCENARIO), None)
    if found == "default" and t.number in SECURITY_TESTS:
        return SECURITY_TESTS[t.number]
    return "lowlatency" if found == "default" and t.number in LOW_LATENCY else found


def static_reason(t: SuiteTest) -> str | None:
    """Why a test is not run against the cluster, from its entry alone."""
    if t.local:
        return "local-only or mock cluster (no broker)"
    if t.manual:
        return "manual test"
    if scenario_of(t) is None:
        return f"needs scenario {t.scenario}"
    if t.known_issue:
        return "known issue upstream (the suite skips it by default)"
    return NOT_APPLICABLE.get(t.number)


# --- source and build ------------------------------------------------------


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "partlog"


def _sri_sha512(path: Path) -> str:
    h = hashlib.sha512()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return "sha512-" + base64.b64encode(h.digest()).decode()


def fetch_source(cache: Path, tarball: Path | None, say: IO[str]) -> Path:
    """The unpacked librdkafka source under ``cache`` (fetched, verified and
    unpacked on first use)."""
    src = cache / f"librdkafka-{RDKAFKA_VERSION}"
    if (src / "tests" / "test.c").is_file():
        return src
    cache.mkdir(parents=True, exist_ok=True)
    tgz = tarball if tarball is not None else cache / NPM_TARBALL
    if not tgz.is_file():
        if shutil.which("npm") is None:
            raise ConformanceError(f"npm is needed to fetch {NPM_PACKAGE} (or give --tarball)")
        print(f"conformance: fetching {NPM_PACKAGE} (librdkafka {RDKAFKA_VERSION} source)", file=say, flush=True)
        r = subprocess.run(
            ["npm", "pack", NPM_PACKAGE, "--pack-destination", str(cache)], capture_output=True, text=True, check=False
        )
        if r.returncode != 0 or not tgz.is_file():
            raise ConformanceError(f"npm pack {NPM_PACKAGE} failed: {r.stderr.strip().splitlines()[-1:]}")
    got = _sri_sha512(tgz)
    if got != NPM_INTEGRITY:
        raise ConformanceError(f"{tgz}: integrity {got} is not the pinned {NPM_INTEGRITY}")
    tmp = Path(tempfile.mkdtemp(prefix="librdkafka-", dir=cache))
    try:
        with tarfile.open(tgz) as tf:
            members = [m for m in tf.getmembers() if m.name.startswith(TARBALL_PREFIX)]
            if not members:
                raise ConformanceError(f"{tgz} holds no {TARBALL_PREFIX}")
            tf.extractall(tmp, members=members, filter="tar")
        (tmp / TARBALL_PREFIX).rename(src)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return src


def _has_header(name: str, language: str = "c") -> bool:
    compiler = "g++" if language == "c++" else "gcc"
    r = subprocess.run(
        [compiler, "-E", "-x", language, "-"], input=f"#include <{name}>\n", capture_output=True, text=True, check=False
    )
    return r.returncode == 0


def configure_flags() -> list[str]:
    """``./configure`` flags for what this machine has: no downloads, and the
    optional libraries off when their headers are missing."""
    flags = ["--no-download", "--disable-curl", "--disable-gssapi"]
    for header, flag in (
        ("zstd.h", "--disable-zstd"),
        ("openssl/ssl.h", "--disable-ssl"),
        ("zlib.h", "--disable-zlib"),
    ):
        if not _has_header(header):
            flags.append(flag)
    return flags


def build(src: Path, log: Path, say: IO[str]) -> float:
    """Builds the library and the test runner once (again when the machine
    gained or lost an optional library); seconds spent (0: reused)."""
    flags = configure_flags()
    # RapidJSON is found by configure itself; a newly installed one rebuilds.
    stamp = f"{RDKAFKA_VERSION} {' '.join(flags)} rapidjson={_has_header('rapidjson/schema.h', 'c++')}\n"
    marker = src / BUILT_MARKER
    if marker.is_file() and marker.read_text() == stamp and (src / "tests" / "test-runner").is_file():
        return 0.0
    for tool in ("gcc", "g++", "make"):
        if shutil.which(tool) is None:
            raise ConformanceError(f"{tool} is needed to build librdkafka's test runner")
    t0 = time.monotonic()
    steps = [
        ["./configure", *flags],
        ["make", f"-j{BUILD_JOBS}", "libs"],
        ["make", f"-j{BUILD_JOBS}", "-C", "tests", "build"],
    ]
    with log.open("w") as out:
        for cmd in steps:
            print(f"conformance: {' '.join(cmd)} (in {src}; log {log})", file=say, flush=True)
            if subprocess.run(cmd, cwd=src, stdout=out, stderr=subprocess.STDOUT, check=False).returncode != 0:
                raise ConformanceError(f"{' '.join(cmd)} failed; see {log}")
    marker.write_text(stamp)
    return time.monotonic() - t0


# --- the cluster -------------------------------------------------------------


class Cluster:
    """``partlog cluster --serve`` in its own process group."""

    def __init__(self, log_dir: Path, scenario: str, flags: Sequence[str] = ()) -> None:
        self.data_dir = Path(tempfile.mkdtemp(prefix="partlog-conformance-"))
        self.log = (log_dir / f"partlog-cluster-{scenario}.log").open("w")
        cmd = [
            sys.executable,
            "-m",
            "partlog",
            "cluster",
            "--serve",
            f"--azs={BROKERS}",
            "--brokers-per-az=1",
            f"--replication-factor={BROKERS}",
            f"--num-partitions={AUTO_CREATE_PARTITIONS}",
            f"--data-dir={self.data_dir}",
            # Kafka's default broker.session.timeout.ms: the suite kills no
            # broker, and ~1,000 topics' worth of work on 2 cores can stall
            # the cluster's loop past the demo's 3 s (a fenced broker then
            # fails every test after it).
            f"--broker-session-timeout-ms={BROKER_SESSION_TIMEOUT_MS}",
            # Kafka's authorizer, allowing what no ACL names (as the
            # suite's clusters: 0081, 0109, 0115, 0119 add ACLs).
            "--authorizer",
            "--allow-everyone-if-no-acl-found",
            *SCENARIOS[scenario],
            *flags,
        ]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.log, text=True, start_new_session=True)
        # The first listener's bootstrap servers, and each listener's by name.
        self.bootstraps: dict[str, str] = {}
        self.bootstrap = self._await_bootstrap()

    def _await_bootstrap(self) -> str:
        """Reads ``bootstrap: ...`` and ``bootstrap NAME: ...`` up to the
        ``rpc:`` line that follows them."""
        assert self.proc.stdout is not None
        deadline = time.monotonic() + CLUSTER_START_S_MAX
        first = ""
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            head, _, value = line.partition(": ")
            if head == "bootstrap":
                first = value.strip()
            elif head.startswith("bootstrap "):
                self.bootstraps[head.split(" ", 1)[1]] = value.strip()
            elif head == "rpc" and first:
                return first
        self.stop()
        raise ConformanceError(f"partlog cluster --serve printed no bootstrap servers; see {self.log.name}")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.data_dir, ignore_errors=True)


# --- running -----------------------------------------------------------------


def kafka_path(log_dir: Path) -> Path:
    """A directory standing in for a Kafka distribution: its
    ``bin/kafka-topics.sh`` and ``bin/kafka-acls.sh`` run
    partlog.tools.kafka_topics_shim and partlog.tools.kafka_acls_shim."""
    path = log_dir / "kafka"
    (path / "bin").mkdir(parents=True, exist_ok=True)
    for name, module in (("kafka-topics.sh", "kafka_topics_shim"), ("kafka-acls.sh", "kafka_acls_shim")):
        script = path / "bin" / name
        script.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m partlog.tools.{module} "$@"\n')
        script.chmod(0o755)
    return path


def run_number(
    src: Path,
    number: str,
    scenario: str,
    conf: Path,
    bootstrap: str,
    cap_s: float,
    log: Path,
    extra_env: dict[str, str] | None = None,
    subtests: str | None = None,
) -> tuple[str, float]:
    """Runs every entry of one test number under ``cap_s`` seconds; its
    output and the seconds it took.  Over its cap the runner is killed and
    the output ends with :data:`CAP_MARK`."""
    env = dict(os.environ)
    env.update(
        {
            "TESTS": number,
            "TEST_KAFKA_VERSION": KAFKA_VERSION,
            "TEST_SCENARIO": SUITE_SCENARIO.get(scenario, scenario),
            "KAFKA_PATH": str(kafka_path(log.parent)),
            "BROKERS": bootstrap,
            "RDKAFKA_TEST_CONF": str(conf),
            "LD_LIBRARY_PATH": f"{src / 'src'}:{src / 'src-cpp'}",
            **(extra_env or {}),
        }
    )
    if subtests is not None:
        env["SUBTESTS"] = subtests
    t0 = time.monotonic()
    with log.open("w") as out:
        proc = subprocess.Popen(
            ["./test-runner", "-p1", "-L"],
            cwd=src / "tests",
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            proc.wait(timeout=cap_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            out.write(f"\n{CAP_MARK} {cap_s:g}s\n")
    return log.read_text(errors="replace"), time.monotonic() - t0


def _run_one(
    src: Path,
    number: str,
    scenario: str,
    conf: Path,
    bootstrap: str,
    env: dict[str, str] | None,
    stem: Path,
    cap_s: float,
    deadline: float,
    subtests: str | None,
    i: int,
) -> tuple[str, float]:
    """One run of a test number (``i``: which of its SUBTESTS filters), its
    log ``stem``.log (or -i.log), capped within the run's ``deadline``."""
    log = stem.with_name(f"{stem.name}.log" if i == 0 else f"{stem.name}-{i}.log")
    cap = cap_for(number, cap_s, deadline - time.monotonic())
    return run_number(src, number, scenario, conf, bootstrap, cap, log, env, subtests)


def _by_number(tests: Iterable[SuiteTest]) -> Iterator[tuple[str, list[SuiteTest]]]:
    numbers: dict[str, list[SuiteTest]] = {}
    for t in tests:
        numbers.setdefault(t.number, []).append(t)
    yield from numbers.items()


def run_suite(
    src: Path, tests: Sequence[SuiteTest], cap_s: float, total_s: float, keep_going: bool, log_dir: Path, say: IO[str]
) -> list[Row]:
    """Every test's row: n/a from its entry, else run against a cluster of
    its scenario (one cluster per scenario, started only when needed)."""
    rows = [Row(t.name, "n/a", 0.0, why) for t in tests if (why := static_reason(t)) is not None]
    deadline = time.monotonic() + total_s
    stop_reason = ""
    for scenario in SCENARIOS:
        todo = [
            (n, ts) for n, ts in _by_number(t for t in tests if static_reason(t) is None and scenario_of(t) == scenario)
        ]
        if not todo:
            continue
        if stop_reason:
            rows += [Row(t.name, "fail", 0.0, stop_reason) for _, ts in todo for t in ts]
            continue
        secure = prepare(scenario, log_dir / f"{scenario}-security") if scenario in SECURE_SCENARIOS else None
        cluster = Cluster(log_dir, scenario, secure.cluster_flags if secure else ())
        try:
            bootstrap = secure_bootstrap(cluster.bootstraps, secure) if secure else cluster.bootstrap
            conf = log_dir / f"test-{scenario}.conf"
            lines = [
                f"metadata.broker.list={bootstrap}",
                "broker.address.family=v4",
                f"test.timeout.multiplier={SUITE_TIMEOUT_MULTIPLIER:g}",
                *(secure.conf_lines if secure else ()),
            ]
            conf.write_text("\n".join(lines) + "\n")
            print(f"conformance: scenario {scenario}: partlog at {bootstrap}; logs in {log_dir}", file=say)
            for number, entries in todo:
                if not stop_reason and not cluster.alive():
                    stop_reason = "not run: the partlog cluster exited"
                if not stop_reason and time.monotonic() >= deadline:
                    stop_reason = "not run: --total-s spent"
                if stop_reason:
                    rows += [Row(t.name, "fail", 0.0, stop_reason) for t in entries]
                    continue
                stem = log_dir / (number if scenario == "default" else f"{number}-{scenario}")
                env = secure.env if secure else None
                at = (src, number, scenario, conf_for(number, conf), bootstrap, env, stem, cap_s, deadline)
                run = functools.partial(_run_one, *at)

                for row in number_rows(entries, number, run):
                    rows.append(row)
                    print(f"conformance: {row.test:<48} {row.result:<4} {row.seconds:7.1f}s {row.reason}", file=say)
                if not keep_going and any(r.result == "fail" for r in rows):
                    stop_reason = "not run: an earlier test failed (--keep-going runs on)"
        finally:
            cluster.stop()
    return sorted(rows, key=lambda r: r.test)


# --- command line ------------------------------------------------------------


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="scripts/conformance",
        description=f"Builds librdkafka {RDKAFKA_VERSION}'s test runner (source from the npm package {NPM_PACKAGE}, "
        "sha512-pinned, cached under ${XDG_CACHE_HOME:-~/.cache}/partlog), starts a local partlog cluster "
        f"({BROKERS} brokers on 127.0.0.1, auto-created topics with {AUTO_CREATE_PARTITIONS} partitions), runs "
        f"the suite's broker-backed tests one test number at a time with TEST_KAFKA_VERSION={KAFKA_VERSION} and "
        "prints a table: pass, fail, or n/a with the reason. Exits 1 if an applicable test failed, 2 on a setup "
        "error.",
    )
    p.add_argument("--tests", default="", help="comma-separated test numbers (e.g. 0001,0002; default: all)")
    p.add_argument("--subset", choices=sorted(SUBSETS), help="a named subset: ci (a few minutes)")
    p.add_argument(
        "--cap-s", type=float, default=CAP_S_DEFAULT, help=f"seconds per test number (default {CAP_S_DEFAULT})"
    )
    p.add_argument(
        "--total-s", type=float, default=TOTAL_S_DEFAULT, help=f"seconds for all tests (default {TOTAL_S_DEFAULT})"
    )
    p.add_argument("--keep-going", action="store_true", help="run on after a failed test (default: stop there)")
    p.add_argument("--tarball", type=Path, help=f"a local {NPM_TARBALL} instead of npm pack (its sha512 is checked)")
    p.add_argument("--log-dir", type=Path, help="where test.conf and the logs go (default: a new temp dir)")
    p.add_argument("--build-only", action="store_true", help="fetch and build, run nothing")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    p.add_argument("--debug", action="store_true", help="tracebacks on errors")
    args = p.parse_args(argv)
    if args.cap_s <= 0 or args.total_s <= 0:
        p.error("--cap-s and --total-s must be > 0")
    if args.tests and args.subset:
        p.error("give --tests or --subset, not both")
    return args


def select(tests: Sequence[SuiteTest], args: argparse.Namespace) -> list[SuiteTest]:
    wanted: set[str] | None = None
    if args.subset:
        wanted = set(SUBSETS[args.subset])
    elif args.tests:
        wanted = {n.strip() for n in args.tests.split(",") if n.strip()}
        bad = sorted(n for n in wanted if not re.fullmatch(r"\d{4}", n))
        if bad:
            raise ConformanceError(f"--tests takes 4-digit test numbers, got {','.join(bad)}")
        unknown = sorted(wanted - {t.number for t in tests})
        if unknown:
            raise ConformanceError(f"no such test in librdkafka {RDKAFKA_VERSION}: {','.join(unknown)}")
    return [t for t in tests if wanted is None or t.number in wanted]


def print_table(rows: Sequence[Row], out: IO[str]) -> None:
    print(f"{'test':<52} {'result':<6} {'seconds':>8}  reason", file=out)
    for r in rows:
        print(f"{r.test:<52} {r.result:<6} {r.seconds:8.1f}  {r.reason}", file=out)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.DEBUG if args.debug else logging.WARNING)
    say = sys.stderr
    try:
        src = fetch_source(cache_dir(), args.tarball, say)
        tests = select(parse_suite((src / "tests" / "test.c").read_text()), args)
        log_dir = args.log_dir or Path(tempfile.mkdtemp(prefix="conformance-logs-"))
        log_dir.mkdir(parents=True, exist_ok=True)
        build_s = build(src, log_dir / "build.log", say)
        if build_s:
            print(f"conformance: built librdkafka {RDKAFKA_VERSION} in {build_s:.0f}s", file=say, flush=True)
        if args.build_only:
            return 0
        t0 = time.monotonic()
        rows = run_suite(src, tests, args.cap_s, args.total_s, args.keep_going, log_dir, say)
        run_s = time.monotonic() - t0
    except (ConformanceError, SecuritySetupError, OSError) as e:
        if args.debug:
            raise
        print(f"scripts/conformance: {e}", file=sys.stderr)
        return 2
    counts = {k: sum(r.result == k for r in rows) for k in ("pass", "fail", "n/a")}
    head = f"librdkafka {RDKAFKA_VERSION} tests against partlog (TEST_KAFKA_VERSION={KAFKA_VERSION})"
    if args.json:
        summary = {"librdkafka": RDKAFKA_VERSION, "kafka_version": KAFKA_VERSION, "build_s": round(build_s, 1)}
        summary |= {"run_s": round(run_s, 1), "counts": counts, "logs": str(log_dir)}
        print(json.dumps(summary | {"tests": [asdict(r) for r in rows]}))
    else:
        print(head)
        print_table(rows, sys.stdout)
        print(f"{counts['pass']} pass, {counts['fail']} fail, {counts['n/a']} n/a in {run_s:.0f}s; logs in {log_dir}")
    return 1 if counts["fail"] else 0


if __name__ == "__main__":
    sys.exit(main())
