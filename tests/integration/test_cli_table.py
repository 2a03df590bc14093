"""Bad invocations, as a table (issue 13, "Errors people can act on").

Each row runs the real command line in a subprocess and checks: the exit
status (2 for usage and configuration errors, 1 for runtime failures),
exactly one non-empty line on stderr, that it names what and where, no
traceback, and that the command ends within a stated bound
(``subprocess.run(timeout=...)``; a bound, not a timing assertion).

Regressions for items 4, 6, 7 and 9 of the issue: an empty secret file ran
without authentication; ``walmgr gc --once`` hung on a dead controller and
exited 0 on a dead store; ``partlog broker`` on a port in use registered and
died with a traceback; ports in use, bad paths, non-UTF-8 TOML, a missing
secret file and ``--message-bytes 1e8`` gave tracebacks or hangs.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from partlog.tools.local_cluster import free_ports

BIN = Path(sys.executable).parent
# Every row ends within this (the slowest waits 1 s for a dead controller).
ROW_TIMEOUT_S = 60.0
CLUSTER = "0c0ffee0-0000-4000-8000-000000000013"


@dataclass(frozen=True)
class Env:
    tmp: Path
    busy_port: int  # a port something listens on
    dead_port: int  # a port nothing listens on

    def write(self, name: str, data: bytes | str) -> str:
        path = self.tmp / name
        path.write_bytes(data.encode() if isinstance(data, str) else data)
        return str(path)

    def cluster_file(self, port: int, cluster_id: str = CLUSTER) -> str:
        return self.write(
            f"cluster-{port}-{cluster_id[:4]}.toml",
            f'cluster_id = "{cluster_id}"\n[[brokers]]\nid = 1\naz = "a"\nport = {port}\n'
            '[[topics]]\nname = "t"\nleaders = [1]\n',
        )

    def walmgr_config(self, name: str, **keys: object) -> str:
        doc = {"store": f"file://{self.tmp / 'objects'}", "registry": str(self.tmp / f"reg-{name}")} | keys
        lines = [f"{k} = {v!r}" if isinstance(v, int) else f'{k} = "{v}"' for k, v in doc.items()]
        return self.write(f"{name}.toml", "\n".join(lines) + "\n")


@dataclass(frozen=True)
class Row:
    name: str
    argv: Callable[[Env], list[str]]
    status: int
    says: str  # a piece of the one line: what and where


def _partlog(*args: str) -> list[str]:
    return [str(BIN / "partlog"), *args]


def _walmgr(*args: str) -> list[str]:
    return [str(BIN / "walmgr"), *args]


def _bound_registry(e: Env) -> str:
    """A registry already bound to another cluster than CLUSTER."""
    from walmgr.registry import Registry

    path = str(e.tmp / "reg-bound")
    with Registry(path) as reg:
        reg.bind_cluster(uuid.UUID(int=1))
    return path


ROWS = [
    # ---- partlog: flags
    Row("message bytes 1e8", lambda e: _partlog("cluster", "--message-bytes", "1e8"), 2, "--message-bytes"),
    Row("message bytes too big", lambda e: _partlog("cluster", "--message-bytes", "100000000"), 2, "at most"),
    Row("too many brokers", lambda e: _partlog("cluster", "--azs", "9", "--brokers-per-az", "9"), 2, "brokers"),
    Row(
        "port out of range",
        lambda e: _partlog("controller", "--data-dir", str(e.tmp / "c"), "--port", "70000"),
        2,
        "--port",
    ),
    Row("bad store URL", lambda e: _partlog("cluster", "--store", "x://nope"), 2, "x://nope"),
    Row("unknown flag", lambda e: _partlog("broker", "--id", "1", "--data-dir", "d", "--bogus"), 2, "--bogus"),
    Row(
        "zero min ISR",
        lambda e: _partlog("broker", "--id", "1", "--data-dir", "d", "--min-insync-replicas", "0"),
        2,
        "--min-insync-replicas",
    ),
    # ---- partlog: files and paths
    Row(
        "missing cluster file",
        lambda e: _partlog(
            "broker", "--cluster", str(e.tmp / "nope.toml"), "--id", "1", "--data-dir", str(e.tmp / "d")
        ),
        2,
        "nope.toml",
    ),
    Row(
        "cluster file not UTF-8",
        lambda e: _partlog(
            "broker", "--cluster", e.write("bin.toml", b"\xff\xfe"), "--id", "1", "--data-dir", str(e.tmp / "d")
        ),
        2,
        "not UTF-8",
    ),
    Row(
        "cluster file without cluster_id",
        lambda e: _partlog(
            "broker",
            "--cluster",
            e.write("noid.toml", '[[brokers]]\nid = 1\naz = "a"\nport = 1\n'),
            "--id",
            "1",
            "--data-dir",
            str(e.tmp / "d"),
        ),
        2,
        "cluster_id",
    ),
    Row(
        "data dir is a file",
        lambda e: _partlog(
            "broker", "--cluster", e.cluster_file(e.dead_port), "--id", "1", "--data-dir", e.write("plainfile", "x")
        ),
        2,
        "plainfile",
    ),
    Row(
        "missing secret file",
        lambda e: _partlog(
            "broker",
            "--cluster",
            e.cluster_file(e.dead_port),
            "--id",
            "1",
            "--data-dir",
            str(e.tmp / "d1"),
            "--secret-file",
            str(e.tmp / "nosecret"),
        ),
        2,
        "nosecret",
    ),
    Row(
        "empty secret file",
        lambda e: _partlog(
            "controller", "--data-dir", str(e.tmp / "c2"), "--secret-file", e.write("empty-secret", " \n")
        ),
        2,
        "empty",
    ),
    Row(
        "short secret",
        lambda e: _partlog(
            "controller", "--data-dir", str(e.tmp / "c3"), "--secret-file", e.write("short-secret", "hunter2")
        ),
        2,
        "at least 16",
    ),
    Row("wal dump of nothing", lambda e: _partlog("wal", "dump", str(e.tmp / "nope.wal")), 2, "nope.wal"),
    # ---- partlog: ports
    Row(
        "broker port in use",
        lambda e: _partlog(
            "broker", "--cluster", e.cluster_file(e.busy_port), "--id", "1", "--data-dir", str(e.tmp / "d2")
        ),
        2,
        "address already in use",
    ),
    Row(
        "controller port in use",
        lambda e: _partlog("controller", "--data-dir", str(e.tmp / "c4"), "--port", str(e.busy_port)),
        2,
        "address already in use",
    ),
    Row(
        "broker metrics port in use",
        lambda e: _partlog(
            "broker",
            "--cluster",
            e.cluster_file(e.dead_port),
            "--id",
            "1",
            "--data-dir",
            str(e.tmp / "d3"),
            "--metrics-port",
            str(e.busy_port),
        ),
        2,
        "metrics port 127.0.0.1:",
    ),
    # ---- partlog: runtime
    Row(
        "topics create, no controller",
        lambda e: _partlog(
            "topics",
            "create",
            "t",
            "--partitions",
            "1",
            "--controller",
            f"127.0.0.1:{e.dead_port}",
            "--timeout-ms",
            "500",
        ),
        1,
        "no snapshot within 500 ms",
    ),
    # ---- walmgr: config
    Row(
        "walmgr config missing", lambda e: _walmgr("gc", "--once", "--config", str(e.tmp / "none.toml")), 2, "none.toml"
    ),
    Row(
        "walmgr config not UTF-8",
        lambda e: _walmgr("gc", "--once", "--config", e.write("w.toml", b'x = "\xff"')),
        2,
        "not UTF-8",
    ),
    Row(
        "walmgr registry is a file",
        lambda e: _walmgr("gc", "--once", "--store", f"file://{e.tmp}/objects", "--registry", e.write("regfile", "x")),
        2,
        "regfile",
    ),
    Row(
        "walmgr status, no registry",
        lambda e: _walmgr("status", "--store", f"file://{e.tmp}/objects", "--registry", str(e.tmp / "noreg")),
        2,
        "noreg",
    ),
    Row(
        "walmgr empty secret",
        lambda e: _walmgr("gc", "--once", "--config", e.walmgr_config("sec", secret_file=e.write("esec", ""))),
        2,
        "esec",
    ),
    Row(
        "walmgr gc without --once",
        lambda e: _walmgr("gc", "--store", f"file://{e.tmp}/o", "--registry", str(e.tmp / "r")),
        2,
        "--once",
    ),
    Row(
        "walmgr listen port in use",
        lambda e: _walmgr("run", "--config", e.walmgr_config("listen", listen=f"127.0.0.1:{e.busy_port}")),
        2,
        "address already in use",
    ),
    Row(
        "walmgr metrics port in use",
        lambda e: _walmgr("run", "--config", e.walmgr_config("metrics", metrics_port=e.busy_port)),
        2,
        "metrics_port 127.0.0.1:",
    ),
    Row(
        "walmgr registry of another cluster",
        lambda e: _walmgr(
            "gc",
            "--once",
            "--store",
            f"file://{e.tmp}/objects",
            "--registry",
            _bound_registry(e),
            "--metadata",
            e.cluster_file(e.dead_port),
        ),
        2,
        f"cluster {uuid.UUID(int=1)}",
    ),
    # ---- walmgr: runtime
    Row(
        "walmgr gc, controller down",
        lambda e: _walmgr(
            "gc",
            "--once",
            "--config",
            e.walmgr_config("ctl", metadata=f"controller://127.0.0.1:{e.dead_port}", metadata_timeout_ms=1000),
        ),
        1,
        "no snapshot within 1000 ms",
    ),
    Row(
        "walmgr gc, store down",
        lambda e: _walmgr(
            "gc",
            "--once",
            "--store",
            f"s3://bucket?endpoint=http://127.0.0.1:{e.dead_port}",
            "--registry",
            str(e.tmp / "reg-s3"),
        ),
        1,
        "http://127.0.0.1:",
    ),
]


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    tmp = tmp_path_factory.mktemp("cli")
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    [dead] = free_ports(1)
    try:
        yield Env(tmp, busy.getsockname()[1], dead)
    finally:
        busy.close()


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_bad_invocation_is_one_line(env: Env, row: Row) -> None:
    argv = row.argv(env)
    proc = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=ROW_TIMEOUT_S,
        cwd=env.tmp,
        # Fake credentials so boto3 reaches the (dead) endpoint instead of
        # failing on missing ones.
        env=os.environ | {"AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x", "AWS_MAX_ATTEMPTS": "1"},
    )
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    assert len(lines) == 1, f"{argv}: stderr is not one line:\n{proc.stderr}"
    assert row.says in lines[0], lines[0]
    assert proc.returncode == row.status, (proc.returncode, lines[0])


def test_debug_shows_the_traceback(env: Env) -> None:
    proc = subprocess.run(
        _partlog("--debug", "broker", "--cluster", str(env.tmp / "nope.toml"), "--id", "1", "--data-dir", "d"),
        capture_output=True,
        text=True,
        timeout=ROW_TIMEOUT_S,
        cwd=env.tmp,
    )
    assert proc.returncode != 0 and "Traceback" in proc.stderr
