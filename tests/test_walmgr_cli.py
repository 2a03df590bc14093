"""The walmgr command line: gc (dry run and real), scan, status, inspect,
config errors, the daemon's SIGTERM, and every subcommand's --help.

In-process through ``walmgr.cli.main`` where possible; subprocesses only for
``walmgr run``.  Objects are real WAL segments in a LocalDirStore; the
cluster is a static TOML whose one broker is not running, so a check asked
of it fails (the object is kept on doubt), while partitions of a topic the
metadata does not have need no check at all.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from partlog.controller.cluster_meta import StaticMetadata
from partlog.kafka.records import TopicIdPartition
from partlog.wal.localdir_store import LocalDirStore
from tests.cluster_helpers import free_ports, topic_partitions, write_cluster_toml
from tests.walmgr_helpers import TEST_CLUSTER_ID, orphan
from walmgr import cli

WAIT_S = 30.0
OLD_MS = 3_600_000  # past the default age gate (30 s + 10 s + 60 s)


class Setup:
    """A bucket with orphans of a deleted topic (planned without asking), one
    orphan of topic "t" whose leader is down (kept on doubt), and a key under
    the prefix that is not a WAL key (reported, never deleted)."""

    def __init__(self, tmp_path: Path) -> None:
        self.objects = LocalDirStore(tmp_path / "objects", fsync=False)
        self.url = "file://" + str(tmp_path / "objects")
        self.registry = str(tmp_path / "registry")
        meta = StaticMetadata.generate(azs=1, brokers_per_az=1, topics={"t": 1}, cluster_id=TEST_CLUSTER_ID)
        [port] = free_ports(1)  # nothing listens there
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


def run_json(capsys: pytest.CaptureFixture[str], argv: list[str], code: int = 0) -> Any:
    capsys.readouterr()
    assert cli.main(argv) == code
    return json.loads(capsys.readouterr().out)


def test_gc_dry_run_prints_the_plan_and_deletes_nothing_then_gc_deletes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    s = Setup(tmp_path)
    before = s.listed()
    meta = ["--metadata", str(s.cluster)]
    dry = run_json(capsys, s.args("gc", "--once", "--dry-run", "--json", *meta))
    assert dry["dry_run"] is True
    assert dry["plan"] == s.unreferenced
    assert dry["deleted_files"] == 0
    assert set(dry["doubt"]) == {s.doubtful} and "unreachable" in dry["doubt"][s.doubtful]
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


@pytest.mark.parametrize(
    ("toml", "key"),
    [
        ("grace_msec = 1000\n", "grace_msec"),
        ("grace_ms = 10\nreader_cache_ttl_ms = 10\n", "grace_ms"),
        ("delete_batch_size = 1001\n", "delete_batch_size"),
        ('commit_deadline_ms = "30s"\n', "commit_deadline_ms"),
    ],
)
def test_bad_config_exits_2_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], toml: str, key: str
) -> None:
    path = tmp_path / "walmgr.toml"
    path.write_text(f'store = "file://{tmp_path}/objects"\nregistry = "{tmp_path}/registry"\n{toml}')
    for argv in (["status", "--config", str(path)], ["gc", "--once", "--config", str(path)]):
        capsys.readouterr()
        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert key in err and str(path) in err, err
    # No store or registry at all: refused too.
    assert cli.main(["status"]) == 2


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
        time.sleep(0.5)  # a few cycles (not asserted on)
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


@pytest.mark.parametrize(
    "sub",
    [
        [],
        ["run"],
        ["gc"],
        ["scan"],
        ["status"],
        ["inspect"],
        ["bench"],
        ["bench", "scan"],
        ["bench", "soak"],
        ["spark-package"],
    ],
)
def test_help_of_every_subcommand(sub: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        cli.main([*sub, "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: walmgr") and "--help" in out
    if sub and sub[0] not in ("bench", "spark-package"):
        assert "--store" in out and "--registry" in out and "--config" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["bench", "scan", "--engines", "local,flink"], "--engines: a comma-separated list of local, spark"),
        (["bench", "--engines", "spark"], "--engines: 'walmgr bench' (all) always runs the local engine"),
        (["bench", "registry", "--engines", "spark"], "--engines applies to 'walmgr bench' and 'walmgr bench scan'"),
        (["bench", "soak", "--engines", "local,spark"], "not to soak"),
        (["bench", "scan", "--objects", "0"], "--objects must be > 0"),
        (["bench", "soak", "--objects", "100000000000"], "at most 20,000,000"),
    ],
)
def test_bench_refuses_bad_arguments(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert e.value.code == 2
    assert message in capsys.readouterr().err


def test_spark_engine_without_pyspark_exits_2_naming_the_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "pyspark" else real(name, *a))
    argv = ["scan", "--engine", "spark", "--store", f"file://{tmp_path}/objects", "--registry", str(tmp_path / "r")]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "scan.engine: pyspark is not installed: pip install 'partlog[spark]'" in err, err


def test_spark_package_zips_the_project(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import zipfile

    out = tmp_path / "pkg.zip"
    assert cli.main(["spark-package", "--out", str(out)]) == 0
    names = set(zipfile.ZipFile(out).namelist())
    assert {"partlog/__init__.py", "walmgr/scanner.py", "spark/scan_job.py", "partlog/store/__init__.py"} <= names
    assert not any("__pycache__" in n or n.endswith(".pyc") for n in names)


def test_bench_soak_learns_and_deletes_every_orphan_within_its_memory_bound(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The soak at a small size on a local directory: the daemon's cycle
    deletes every orphan the generator made, and the report says so."""
    store = f"file://{tmp_path}/objects"
    assert cli.main(["bench", "soak", "--objects", "250", "--store", store, "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["objects"] == 250 and r["deleted_files"] == 250 and r["objects_left"] == 0
    assert r["all_deleted"] and r["within_bound"] and r["rss_anon_peak_mib"] > 0
    assert r["cycles"][0]["keys_listed"] == 250 and r["cycles"][-1]["deleted_files"] == 0


def test_the_bench_generator_fills_in_windows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from walmgr import bench

    monkeypatch.setattr(bench, "FILL_WINDOW", 7)
    store = LocalDirStore(tmp_path / "objects", fsync=False)
    said: list[str] = []
    keys = bench._fill(store, "wal", 20, 1_700_000_000_000, said.append, keep_keys=True)
    assert len(set(keys)) == 20
    assert {o.key for o in store.list_page("wal/", max_keys=1000).objects} == set(keys)
    assert said[-1] == "  filled 20/20"
    assert bench._fill(store, "wal", 3, 1_700_000_000_000, said.append) == []
