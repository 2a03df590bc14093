"""The walmgr command line without a cycle: config errors, every
subcommand's --help, the bench's arguments and generator, the Spark
engine's packaging (the commands that run cycles are in
tests/integration/test_walmgr_cli_cycles.py), in-process through
``walmgr.cli.main``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from partlog.wal.localdir_store import LocalDirStore
from walmgr import cli


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
