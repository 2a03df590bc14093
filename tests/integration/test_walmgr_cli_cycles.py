"""The walmgr command line running cycles: gc (dry run and real), scan, status,
inspect against a cluster whose one broker holds nothing and answers only
walmgr's sweep (``walmgr.bench.empty_broker``: a leader check asked of it
fails, and the object is kept on doubt), and ``walmgr run``'s SIGTERM (a
subprocess).

Objects are real WAL segments in a LocalDirStore; partitions of a topic the
metadata does not have need no check at all."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from partlog.controller.cluster_meta import StaticMetadata
from partlog.kafka.records import TopicIdPartition
from partlog.wal.localdir_store import LocalDirStore
from tests.cluster_helpers import free_ports, topic_partitions, write_cluster_toml
from tests.walmgr_helpers import TEST_CLUSTER_ID, orphan
from walmgr import cli
from walmgr.bench import empty_broker
from walmgr.registry import Registry, RegistryError

WAIT_S = 30.0


OLD_MS = 3_600_000  # past the default age gate (30 s + 10 s + 60 s)


class Setup:
    """A bucket with orphans of a deleted topic (planned without asking), one
    orphan of topic "t" whose leader is down (kept on doubt), and a key under
    the prefix that is not a WAL key (reported, never deleted)."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.objects = LocalDirStore(tmp_path / "objects", fsync=False)
        self.url = "file://" + str(tmp_path / "objects")
        self.registry = str(tmp_path / "registry")
        meta = StaticMetadata.generate(azs=1, brokers_per_az=1, topics={"t": 1}, cluster_id=TEST_CLUSTER_ID)
        [port] = free_ports(1)  # nothing listens there (see answering_sweeps)
        self.meta, self.port = meta, port
        self.cluster = tmp_path / "cluster.toml"
        gone = TopicIdPartition(uuid.uuid5(uuid.NAMESPACE_URL, "walmgr-cli/gone"), 0)
        # The cluster file says the topic was deleted: its partitions hold no reference.
        write_cluster_toml(self.cluster, meta, {1: port}, deleted_topics=[gone.topic_id])
        self.unreferenced = sorted(orphan(self.objects, [gone], time.time_ns() // 1_000_000 - OLD_MS) for _ in range(3))
        [tp] = topic_partitions(meta)
        self.doubtful = orphan(self.objects, [tp], time.time_ns() // 1_000_000 - OLD_MS)
        self.invalid = "wal/zz/readme.txt"
        self.objects.put(self.invalid, b"not a WAL object")

    def args(self, *extra: str) -> list[str]:
        return [*extra, "--store", self.url, "--registry", self.registry]

    def listed(self) -> set[str]:
        page = self.objects.list_page("")
        return {o.key for o in page.objects}


@contextlib.contextmanager
def answering_sweeps(s: Setup) -> Iterator[None]:
    """The cluster's broker, on its port, holding nothing: it answers the
    sweep (every listed broker asked before a deletion) and nothing else."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    server, _ = asyncio.run_coroutine_threadsafe(empty_broker(s.meta, s.port), loop).result(10)
    try:
        yield
    finally:
        asyncio.run_coroutine_threadsafe(server.close(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def run_json(capsys: pytest.CaptureFixture[str], argv: list[str], code: int = 0) -> Any:
    capsys.readouterr()
    assert cli.main(argv) == code
    return json.loads(capsys.readouterr().out)


def test_gc_dry_run_prints_the_plan_and_deletes_nothing_then_gc_deletes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    s = Setup(tmp_path)
    with answering_sweeps(s):
        _gc_dry_run_then_gc(s, capsys)


def _gc_dry_run_then_gc(s: Setup, capsys: pytest.CaptureFixture[str]) -> None:
    before = s.listed()
    meta = ["--metadata", str(s.cluster)]
    dry = run_json(capsys, s.args("gc", "--once", "--dry-run", "--json", *meta))
    assert dry["dry_run"] is True
    assert dry["plan"] == s.unreferenced
    assert dry["deleted_files"] == 0
    assert set(dry["doubt"]) == {s.doubtful} and "broker 1" in dry["doubt"][s.doubtful]
    assert [s.invalid, dry["scan"]["invalid"][0][1]] in dry["scan"]["invalid"]
    assert s.listed() == before, "a dry run deleted something"
    status = run_json(capsys, s.args("status", "--json"))
    assert status["states"]["planned"]["files"] == 0 and status["states"]["deleted"]["files"] == 0
    # The text form says what it would delete.
    capsys.readouterr()
    assert cli.main(s.args("gc", "--once", "--dry-run", *meta)) == 0
    text = capsys.readouterr().out
    assert "would delete 3" in text and all(k in text for k in s.unreferenced)
    assert s.listed() == before

    real = run_json(capsys, s.args("gc", "--once", "--json", *meta))
    assert real["dry_run"] is False and real["plan"] == s.unreferenced
    assert real["deleted_files"] == 3 and real["deleted_bytes"] > 0
    assert s.listed() == before - set(s.unreferenced)
    status = run_json(capsys, s.args("status", "--json"))
    assert status["states"]["deleted"]["files"] == 3
    assert status["states"]["candidate"]["files"] == 1  # the doubtful one, kept
    assert status["states"]["invalid"]["files"] == 1
    assert status["last_cycle_ms"] is not None and status["last_full_scan_ms"] is not None
    assert status["cluster_id"] == str(TEST_CLUSTER_ID)
    # The text form: the cluster, and times as ISO 8601 (UTC), not raw ms.
    capsys.readouterr()
    assert cli.main(s.args("status")) == 0
    text = capsys.readouterr().out
    assert f"cluster {TEST_CLUSTER_ID}" in text
    assert re.search(r"last cycle: \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ; last full scan: \d{4}-", text), text
    # Without --metadata nothing is known: every candidate is kept.
    again = run_json(capsys, s.args("gc", "--once", "--json"))
    assert again["plan"] == [] and set(again["doubt"]) == {s.doubtful}
    # gc without --once is refused.
    assert cli.main(s.args("gc")) == 2


def test_scan_status_and_inspect(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    s = Setup(tmp_path)
    scan = run_json(capsys, s.args("scan", "--json"))
    assert scan["keys_listed"] == 5 and scan["new_objects"] == 4
    assert [i["key"] for i in scan["invalid"]] == [s.invalid]
    objects = {o["key"]: o for o in scan["objects"]}
    assert set(objects) == set(s.unreferenced) | {s.doubtful, s.invalid}
    for o in objects.values():
        assert {"key", "size", "created_ms", "partitions", "status"} <= set(o)
    assert objects[s.invalid]["status"] == "invalid"
    assert objects[s.doubtful]["status"] == "tracked" and objects[s.doubtful]["size"] > 0
    assert len(objects[s.doubtful]["partitions"]) == 1
    assert objects[s.doubtful]["created_ms"] < time.time_ns() // 1_000_000 - OLD_MS + 60_000

    status = run_json(capsys, s.args("status", "--json"))
    assert status["registry"] == s.registry
    assert status["states"]["tracked"]["files"] == 4 and status["states"]["invalid"]["files"] == 1
    assert status["last_cycle_ms"] is None  # a scan is not a cycle

    rec = run_json(capsys, s.args("inspect", s.doubtful))
    assert rec["key"] == s.doubtful and rec["status"] == "tracked" and rec["partitions"]
    capsys.readouterr()
    assert cli.main(s.args("inspect", "wal/00/0000000000000-1-unknown.wal")) == 1
    assert "not in the registry" in capsys.readouterr().err
    # Text forms.
    assert cli.main(s.args("status")) == 0
    assert "tracked" in capsys.readouterr().out
    assert cli.main(s.args("scan")) == 0
    assert s.invalid in capsys.readouterr().out


def _a_cycle_ran(registry: Path) -> bool:
    """Whether the daemon holding ``registry`` has finished a cycle (a
    reader takes no lock; the registry may not be made yet)."""
    try:
        with Registry(registry, readonly=True) as reg:
            return reg.meta_get("last_cycle_ms") is not None
    except RegistryError:
        return False


@pytest.mark.timeout(60)
def test_run_stops_on_sigterm_with_exit_0(tmp_path: Path) -> None:
    objects = tmp_path / "objects"
    objects.mkdir()
    registry = tmp_path / "registry"
    config = tmp_path / "walmgr.toml"
    config.write_text(
        f'store = "file://{objects}"\nregistry = "{registry}"\nlisten = "127.0.0.1:0"\ncycle_interval_ms = 200\n'
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "walmgr.cli", "run", "--config", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )
    try:
        lock = registry / "LOCK"
        deadline = time.monotonic() + WAIT_S
        while not (lock.exists() and lock.read_text().strip() == str(proc.pid)):
            assert proc.poll() is None, f"walmgr run exited with {proc.returncode}"
            assert time.monotonic() < deadline, "walmgr run did not start"
            time.sleep(0.05)
        while not _a_cycle_ran(registry):  # (not asserted on)
            assert proc.poll() is None, f"walmgr run exited with {proc.returncode}"
            assert time.monotonic() < deadline, "walmgr run finished no cycle"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(WAIT_S) == 0
        assert proc.stderr is not None
        err = proc.stderr.read().decode()
        assert "walmgr started" in err and "stopping" in err, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        if proc.stderr is not None:
            proc.stderr.close()
