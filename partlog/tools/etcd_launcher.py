"""A local etcd cluster of N members on 127.0.0.1, for tests, benchmarks and
``partlog cluster --metadata etcd``.

The ``etcd`` binary is Debian's (``apt-get install etcd-server``, etcd 3.4);
there is no etcdctl, so everything here talks to the members over plain HTTP:
``GET /health`` for readiness and the grpc-gateway's
``POST /v3/maintenance/status`` to find the raft leader.

Each member ``m{i}`` has its own data directory ``<data_dir>/m{i}``, its own
log ``<data_dir>/m{i}.log`` (stdout and stderr go there, so Go panics are
kept too and nothing floods the terminal) and a client and a peer port picked
free on 127.0.0.1 once, up front: a killed member is restarted on the same
ports and data directory and rejoins the cluster as the same member.

Members run in their own sessions (``start_new_session=True``) so a test's
Ctrl-C does not reach them; :meth:`EtcdCluster.close` (also run by
``__exit__`` and an ``atexit`` hook) kills them all.
"""

from __future__ import annotations

import atexit
import contextlib
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
import uuid
from typing import IO, Any, NoReturn

ETCD_MEMBERS_DEFAULT = 3
ETCD_START_TIMEOUT_S = 30.0
# One member's answer to /health or /status; a member without a quorum can
# take about a second to say "no", and the wait loops retry anyway.
ETCD_PROBE_TIMEOUT_S = 1.0
ETCD_POLL_INTERVAL_S = 0.05
# etcd's default 2 GiB quota is far more than any test writes; 1 GiB keeps a
# runaway benchmark from filling the disk before etcd raises its NOSPACE alarm.
ETCD_QUOTA_BACKEND_BYTES = 1 << 30
# A SIGKILLed process is gone within milliseconds; this bounds a wedged reap.
ETCD_KILL_WAIT_S = 10.0
ETCD_LOG_TAIL_LINES = 20
# zap writes one JSON object per line; the tail is for error messages, so
# read only the end of a possibly large log.
ETCD_LOG_TAIL_BYTES = 64 * 1024

_HOST = "127.0.0.1"


class EtcdNotInstalledError(RuntimeError):
    """The ``etcd`` binary is not on ``$PATH``."""


class EtcdStartError(RuntimeError):
    """etcd members did not become healthy in time (the message has the log tail)."""


def find_etcd_binary() -> str:
    """The path of ``etcd`` on ``$PATH``; :class:`EtcdNotInstalledError` if there is none."""
    path = shutil.which("etcd")
    if path is None:
        raise EtcdNotInstalledError(
            "etcd binary not found on PATH: install Debian's etcd-server package (apt-get install etcd-server)"
        )
    return path


def _free_ports(n: int) -> list[int]:
    """``n`` distinct ports free on 127.0.0.1.

    All sockets stay bound until every port is chosen, so the kernel cannot
    hand out the same port twice.
    """
    socks: list[socket.socket] = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            socks.append(s)
            s.bind((_HOST, 0))
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def _http_json(url: str, body: bytes | None = None) -> Any:
    """The decoded JSON answer to a GET (``body`` None) or POST; raises on any failure."""
    req = urllib.request.Request(url, data=body, method="GET" if body is None else "POST")
    if body is not None:
        req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=ETCD_PROBE_TIMEOUT_S) as resp:
        return json.loads(resp.read())


# What a member that is down, starting or without a quorum can make _http_json
# raise: refused/reset connections and 503s (OSError), truncated answers
# (HTTPException), non-JSON bodies (ValueError).
_PROBE_ERRORS = (OSError, http.client.HTTPException, ValueError)


def _log_tail(path: str) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - ETCD_LOG_TAIL_BYTES))
            text = f.read().decode("utf-8", "replace")
    except OSError as e:
        return f"(no log: {e})"
    lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    return "\n".join(lines[-ETCD_LOG_TAIL_LINES:]) or "(etcd wrote nothing)"


class EtcdCluster:
    """``members`` etcd processes forming one cluster on 127.0.0.1.

    Ports are chosen in the constructor, so :meth:`endpoints` and :meth:`url`
    work before :meth:`start`.
    """

    def __init__(
        self,
        data_dir: str,
        members: int = ETCD_MEMBERS_DEFAULT,
        *,
        election_timeout_ms: int = 1000,
        heartbeat_interval_ms: int = 100,
    ) -> None:
        if members < 1:
            raise ValueError(f"an etcd cluster needs at least one member, got {members}")
        self._binary = find_etcd_binary()
        self.data_dir = os.path.abspath(data_dir)
        self.members = members
        self.election_timeout_ms = election_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        ports = _free_ports(2 * members)
        self.client_ports = ports[:members]
        self.peer_ports = ports[members:]
        # Unique per cluster so members of two clusters started by one test
        # run can never join each other, even if a port gets reused.
        self.token = f"partlog-{uuid.uuid4().hex}"
        self._procs: list[subprocess.Popen[bytes] | None] = [None] * members
        self._logs: list[IO[bytes] | None] = [None] * members
        self._closed = False

    # -- addresses ---------------------------------------------------------

    def name(self, i: int) -> str:
        return f"m{i}"

    def member_dir(self, i: int) -> str:
        return os.path.join(self.data_dir, self.name(i))

    def log_path(self, i: int) -> str:
        return os.path.join(self.data_dir, f"{self.name(i)}.log")

    def client_url(self, i: int) -> str:
        return f"http://{_HOST}:{self.client_ports[i]}"

    def endpoints(self) -> list[tuple[str, int]]:
        """(host, client port) of every member, in member order."""
        return [(_HOST, port) for port in self.client_ports]

    def url(self, prefix: str = "/partlog") -> str:
        """The metadata URL for partlog: ``etcd://host:port,host:port,.../prefix``."""
        if not prefix.startswith("/"):
            raise ValueError(f"etcd key prefix must start with '/', got {prefix!r}")
        hosts = ",".join(f"{host}:{port}" for host, port in self.endpoints())
        return f"etcd://{hosts}{prefix}"

    # -- lifecycle ---------------------------------------------------------

    def start(self) -> None:
        """Start every member and wait until a majority answers /health."""
        if self._closed:
            raise RuntimeError("EtcdCluster is closed")
        os.makedirs(self.data_dir, exist_ok=True)
        # Registered before the first spawn so no member can outlive the
        # interpreter; close() unregisters it.
        atexit.register(self.close)
        try:
            for i in range(self.members):
                self._spawn(i, "new")
            self._wait_healthy(range(self.members), self._majority())
        except BaseException:
            self.close()
            raise

    def kill(self, i: int) -> None:
        """SIGKILL member ``i`` and reap it (no-op if it is not running)."""
        proc = self._procs[i]
        if proc is not None:
            # Signal the group only while its leader is unreaped, so the
            # group id cannot belong to anyone else yet.
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=ETCD_KILL_WAIT_S)
        log = self._logs[i]
        if log is not None:
            log.close()
        self._procs[i] = None
        self._logs[i] = None

    def restart(self, i: int) -> None:
        """Start killed member ``i`` again on its data dir and ports and wait
        (up to ETCD_START_TIMEOUT_S) until it answers /health."""
        if self.alive(i):
            raise RuntimeError(f"etcd member {self.name(i)} is still running")
        self._spawn(i, "existing")
        self._wait_healthy([i], 1)

    def stop_all_members(self) -> None:
        """Kill every member (the cluster stays usable: see :meth:`restart_all`)."""
        for i in range(self.members):
            self.kill(i)

    def restart_all(self) -> None:
        """Start every member that is not running and wait for majority health."""
        # All first, then wait: no member is healthy until a quorum is back.
        for i in range(self.members):
            if not self.alive(i):
                self._spawn(i, "existing")
        self._wait_healthy(range(self.members), self._majority())

    def close(self) -> None:
        """Kill every member; idempotent."""
        self._closed = True
        self.stop_all_members()
        atexit.unregister(self.close)

    def __enter__(self) -> EtcdCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- state -------------------------------------------------------------

    def alive(self, i: int) -> bool:
        proc = self._procs[i]
        return proc is not None and proc.poll() is None

    def healthy(self, i: int) -> bool:
        """Whether member ``i`` answers /health with ``{"health": "true"}``."""
        if not self.alive(i):
            return False
        try:
            answer = _http_json(f"{self.client_url(i)}/health")
        except _PROBE_ERRORS:
            return False
        return isinstance(answer, dict) and answer.get("health") == "true"

    def leader(self) -> int | None:
        """The index of the raft leader among live members, or None.

        A member is taken as leader only if it says so itself (its status's
        ``leader`` is its own ``member_id``): a follower may still name a
        leader that was just killed.  If two claim it (an old leader that has
        not noticed yet), the higher raft term wins.
        """
        best: tuple[int, int] | None = None  # (raft term, index)
        for i in range(self.members):
            status = self._status(i)
            if status is None:
                continue
            try:
                header = status["header"]
                member_id = int(header["member_id"])
                leader_id = int(status["leader"])
                term = int(header.get("raft_term", 0))
            except (KeyError, TypeError, ValueError):
                continue
            if leader_id != 0 and leader_id == member_id and (best is None or term > best[0]):
                best = (term, i)
        return None if best is None else best[1]

    def _status(self, i: int) -> dict[str, Any] | None:
        if not self.alive(i):
            return None
        try:
            # etcd 3.4's grpc-gateway maps the Maintenance.Status RPC to a POST.
            answer = _http_json(f"{self.client_url(i)}/v3/maintenance/status", b"{}")
        except _PROBE_ERRORS:
            return None
        return answer if isinstance(answer, dict) else None

    # -- internals ---------------------------------------------------------

    def _majority(self) -> int:
        return self.members // 2 + 1

    def _initial_cluster(self) -> str:
        return ",".join(f"{self.name(i)}=http://{_HOST}:{self.peer_ports[i]}" for i in range(self.members))

    def _args(self, i: int, state: str) -> list[str]:
        client = f"http://{_HOST}:{self.client_ports[i]}"
        peer = f"http://{_HOST}:{self.peer_ports[i]}"
        return [
            self._binary,
            "--name",
            self.name(i),
            "--data-dir",
            self.member_dir(i),
            "--listen-client-urls",
            client,
            "--advertise-client-urls",
            client,
            "--listen-peer-urls",
            peer,
            "--initial-advertise-peer-urls",
            peer,
            "--initial-cluster",
            self._initial_cluster(),
            "--initial-cluster-state",
            state,
            "--initial-cluster-token",
            self.token,
            "--election-timeout",
            str(self.election_timeout_ms),
            "--heartbeat-interval",
            str(self.heartbeat_interval_ms),
            "--quota-backend-bytes",
            str(ETCD_QUOTA_BACKEND_BYTES),
            "--logger",
            "zap",
            # stderr is redirected to the member's log file (see _spawn).
            "--log-outputs",
            "stderr",
        ]

    def _spawn(self, i: int, state: str) -> None:
        # Append: a restarted member's log follows its earlier runs.
        log = open(self.log_path(i), "ab")  # noqa: SIM115 - closed by kill()
        try:
            proc = subprocess.Popen(
                self._args(i, state),
                cwd=self.data_dir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except BaseException:
            log.close()
            raise
        self._procs[i] = proc
        self._logs[i] = log

    def _wait_healthy(self, indices: range | list[int], need: int) -> None:
        """Wait until ``need`` of the members ``indices`` are healthy; on
        timeout or if too many exit, kill everything and raise EtcdStartError
        naming an unhealthy member with its log tail."""
        members = list(indices)
        deadline = time.monotonic() + ETCD_START_TIMEOUT_S
        while True:
            exited = [i for i in members if not self.alive(i)]
            unhealthy = [i for i in members if i in exited or not self.healthy(i)]
            if len(members) - len(unhealthy) >= need:
                return
            # A member that exited will not come back by itself: fail now
            # rather than after the whole timeout.
            if len(members) - len(exited) < need:
                self._fail(exited[0], "exited during startup")
            if time.monotonic() >= deadline:
                self._fail(unhealthy[0], f"not healthy after {ETCD_START_TIMEOUT_S:.0f} s")
            time.sleep(ETCD_POLL_INTERVAL_S)

    def _fail(self, i: int, why: str) -> NoReturn:
        proc = self._procs[i]
        code = proc.poll() if proc is not None else None
        exit_note = f" (exit code {code})" if code is not None else ""
        # Read the tail after close(): a killed member's last words are flushed.
        self.close()
        raise EtcdStartError(
            f"etcd member {self.name(i)} (client {self.client_url(i)}){exit_note} {why}; "
            f"last lines of {self.log_path(i)}:\n{_log_tail(self.log_path(i))}"
        )
