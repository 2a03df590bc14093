"""The Spark scan engine against the in-process scanner: on the same bucket
(LocalDirStore and SeaweedFS) both give the same records, GONE marks,
revivals and positions, and a second Spark scan with everything known adds
nothing; walmgr's daemon runs its full scans on Spark when configured; the
job runs under spark-submit with partlog shipped as a zip.  Spark runs
local[2], UI off, one session for the module.  Skipped when pyspark is not
importable."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (walmgr's Spark engine is optional)")

from partlog.kafka.records import TopicIdPartition
from partlog.wal.key import make_wal_key, shard_of
from partlog.wal.localdir_store import LocalDirStore
from partlog.wal.objectstore import ObjectStore
from partlog.wal.segment import WalSegmentBuilder
from tests.batches import build_batch
from tests.clock import Clock
from tests.s3server import ACCESS_KEY_ID, SECRET_ACCESS_KEY
from tests.walmgr_helpers import TEST_CLUSTER_ID
from walmgr.listing import GONE_AGE_MS_DEFAULT
from walmgr.model import State
from walmgr.registry import Registry
from walmgr.scanner import Scanner, ScanReport
from walmgr.spark_scan import get_session, package_zip, spark_scan, stop_session

pytestmark = pytest.mark.timeout(300)

if shutil.which("java") is None:
    pytest.skip("no java on PATH (Spark needs a JVM)", allow_module_level=True)

T0 = 1_700_000_000_000
NOW = T0 + 3_600_000
TPS = [TopicIdPartition(uuid.UUID(int=1), 0), TopicIdPartition(uuid.UUID(int=2), 3)]


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    # Executors open S3 stores through boto3's standard chain: the test
    # SeaweedFS's credentials reach their Python workers as executor env.
    conf = {"spark.executorEnv.AWS_ACCESS_KEY_ID": ACCESS_KEY_ID,
            "spark.executorEnv.AWS_SECRET_ACCESS_KEY": SECRET_ACCESS_KEY}  # fmt: skip
    session = get_session("local[2]", conf)
    yield session
    stop_session()


@pytest.fixture(params=["local", "seaweedfs"])
def bucket(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[ObjectStore, str]:
    """A store filled by build_bucket and its URL for the executors: a
    local directory, or a bucket on SeaweedFS (a real S3 server: its listing
    order and long start-after keys are what the gap listings meet)."""
    store: Any
    if request.param == "local":
        store = LocalDirStore(tmp_path / "store", fsync=False)
        url = (tmp_path / "store").as_uri()
    else:
        store = request.getfixturevalue("s3_bucket")
        url = f"s3://{store.config.bucket}?endpoint={store.config.endpoint_url}"
    build_bucket(store)
    return store, url


def segment(created_ms: int, broker_id: int) -> bytes:
    builder = WalSegmentBuilder(broker_id, created_ms, TEST_CLUSTER_ID)
    for tp in TPS:
        builder.add(tp, build_batch(2))
    return builder.build().data


def put_wal(
    store: ObjectStore, created_ms: int, broker_id: int, *, prefix: str = "wal", data: bytes | None = None
) -> str:
    key = str(make_wal_key(prefix, created_ms, broker_id, uuid.uuid4().hex[:12]))
    store.put(key, segment(created_ms, broker_id) if data is None else data)
    return key


def put_wal_last_in_its_shard(store: ObjectStore, created_ms: int, broker_id: int) -> str:
    """A new WAL object whose key sorts after every key already in its
    shard, so that an incremental scan (which lists each shard after its
    position) must find it.  Regression: a random key that hashed to shard
    00, where the fixture's 'wal/00/garbage' sorts after every digit, was
    behind that shard's position and found by neither scanner (a CI flake,
    about 1 run in 256)."""
    keys: list[str] = []
    after = ""
    while True:
        page = store.list_page("wal/", start_after=after)
        keys += [o.key for o in page.objects]
        if not page.is_truncated or not page.objects:
            break
        after = page.objects[-1].key
    for n in range(10_000):
        key = make_wal_key("wal", created_ms, broker_id, f"{n:012x}")
        if all(k < str(key) for k in keys if k.startswith(f"wal/{key.shard}/")):
            store.put(str(key), segment(created_ms, broker_id))
            return str(key)
    raise AssertionError("no key sorts last in its shard")


def edge_shard_key(shard: str, created_ms: int) -> str:
    """A WAL key that hashes to ``shard`` (the first and last shards bound
    the gap listings)."""
    for n in range(100_000):
        key = make_wal_key("wal", created_ms, 1, f"{n:012x}")
        if key.shard == shard:
            return str(key)
    raise AssertionError(f"no key for shard {shard}")


def build_bucket(store: ObjectStore) -> None:
    for i in range(38):  # several shards (most of the 256 stay empty)
        put_wal(store, T0 + i * 1000, i % 3)
    for shard in ("00", "ff"):  # the edges, so no other gap covers the outer ones
        store.put(edge_shard_key(shard, T0 + 50_000), segment(T0 + 50_000, 1))
    put_wal(store, T0 + 99_000, 1, data=b"not a segment at all" * 10)  # corrupt segment
    put_wal(store, T0 + 98_000, 2, data=segment(T0 + 98_000, 7))  # footer disagrees with the key
    good = make_wal_key("wal", T0, 1, "abc")
    wrong = "00" if good.shard != "00" else "01"
    store.put(f"wal/{wrong}/{good.name}", segment(T0, 1))  # not the hash shard
    store.put("wal/00/garbage", b"x")  # non-WAL key in a shard
    store.put("wal/readme.txt", b"hello")  # non-shard keys under the prefix
    store.put("wal/zz/notes", b"hello")
    store.put("wal/0", b"x")
    store.put("wal/sub/" + str(good)[4:], segment(T0, 1))  # a WAL key of another prefix
    store.put("wal/zz/" + "a" * 200 + "/" + "b" * 200 + "/" + "c" * 200, b"x")  # too long to record
    put_wal(store, T0, 1, prefix="wal-old")  # siblings: never listed
    put_wal(store, T0, 1, prefix="wal2")
    store.put("walx", b"x")
    assert shard_of(good.name) == good.shard


def records(reg: Registry) -> set[tuple[Any, ...]]:
    return {
        (r.key, r.size, r.created_ms, r.broker_id, r.partitions, r.state, r.note, r.source, r.first_seen_ms)
        for r in reg.records()
    }


def summary(rep: ScanReport) -> tuple[Any, ...]:
    return (rep.keys_listed, rep.new_objects, sorted(rep.invalid), rep.bytes_new, rep.invalid_count, rep.gone)


def test_spark_full_scan_matches_in_process(spark: Any, bucket: tuple[ObjectStore, str], tmp_path: Path) -> None:
    store, url = bucket
    clock = Clock(NOW)
    with (
        Registry(tmp_path / "reg-local", sync=False) as local_reg,
        Registry(tmp_path / "reg-spark", sync=False) as spark_reg,
    ):
        expected = Scanner(store, local_reg, "wal", clock=clock).full()
        got = spark_scan(url, spark_reg, "wal", clock=clock, spark=spark)
        assert records(spark_reg) == records(local_reg)
        assert summary(got) == summary(expected)
        assert expected.new_objects == 40 and expected.invalid_count == 9
        assert spark_reg.check() == []

        # Everything known: nothing added (the too-long key is reported again).
        before = records(spark_reg)
        clock.now += 60_000
        again = spark_scan(url, spark_reg, "wal", clock=clock, spark=spark)
        assert records(spark_reg) == before
        assert again.new_objects == 0 and again.bytes_new == 0 and again.invalid_count == 1


def test_spark_incremental_matches_in_process(spark: Any, bucket: tuple[ObjectStore, str], tmp_path: Path) -> None:
    store, url = bucket
    clock = Clock(NOW)
    with (
        Registry(tmp_path / "reg-local", sync=False) as local_reg,
        Registry(tmp_path / "reg-spark", sync=False) as spark_reg,
    ):
        expected = Scanner(store, local_reg, "wal", clock=clock).incremental()
        got = spark_scan(url, spark_reg, "wal", clock=clock, spark=spark, full=False)
        assert records(spark_reg) == records(local_reg)
        assert summary(got) == summary(expected)
        assert spark_reg.shard_positions() == local_reg.shard_positions()

        # A new object behind nothing: found; positions advance like the scanner's.
        new = put_wal_last_in_its_shard(store, T0 + 500_000, 1)
        Scanner(store, local_reg, "wal", clock=clock).incremental()
        again = spark_scan(url, spark_reg, "wal", clock=clock, spark=spark, full=False)
        assert again.new_objects == 1 and spark_reg.get(new) is not None
        assert records(spark_reg) == records(local_reg)
        assert spark_reg.shard_positions() == local_reg.shard_positions()

        # A new object in shard 00, sorting before the fixture's
        # 'wal/00/garbage': found by both (a shard's position is a WAL key,
        # never the garbage after it).
        behind = next(
            str(k) for n in range(100_000) if (k := make_wal_key("wal", T0 + 600_000, 1, f"{n:012x}")).shard == "00"
        )
        store.put(behind, segment(T0 + 600_000, 1))
        assert behind < "wal/00/garbage"
        Scanner(store, local_reg, "wal", clock=clock).incremental()
        third = spark_scan(url, spark_reg, "wal", clock=clock, spark=spark, full=False)
        assert third.new_objects == 1 and spark_reg.get(behind) is not None and local_reg.get(behind) is not None
        assert records(spark_reg) == records(local_reg)
        assert spark_reg.shard_positions() == local_reg.shard_positions()


def test_walmgr_scan_engine_spark_lists_what_the_local_engine_lists(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``walmgr scan --engine spark`` (the session of this module is reused)
    against ``--engine local`` on the same bucket, fresh registries."""
    import json

    from walmgr import cli

    store = LocalDirStore(tmp_path / "store", fsync=False)
    build_bucket(store)
    url = "file://" + str(tmp_path / "store")
    out = {}
    for engine in ("local", "spark"):
        capsys.readouterr()
        argv = ["scan", "--engine", engine, "--master", "local[2]", "--json", "--store", url]
        assert cli.main([*argv, "--registry", str(tmp_path / f"reg-{engine}")]) == 0
        doc = json.loads(capsys.readouterr().out)
        out[engine] = {
            (o["key"], o["size"], o["created_ms"], tuple(o["partitions"]), o["status"]) for o in doc["objects"]
        }
    assert out["spark"] == out["local"] and out["local"]


def test_spark_full_scan_marks_gone_and_revives_like_in_process(spark: Any, tmp_path: Path) -> None:
    store = LocalDirStore(tmp_path / "store", fsync=False)
    build_bucket(store)
    url = (tmp_path / "store").as_uri()
    clock = Clock(NOW)
    with (
        Registry(tmp_path / "reg-local", sync=False) as local_reg,
        Registry(tmp_path / "reg-spark", sync=False) as spark_reg,
    ):
        scanner = Scanner(store, local_reg, "wal", clock=clock)
        scanner.full()
        spark_scan(url, spark_reg, "wal", clock=clock, spark=spark)
        assert spark_reg.meta_get("last_full_scan_ms") == local_reg.meta_get("last_full_scan_ms") == NOW

        # Someone else deletes three old objects; a young one appears and
        # vanishes before any scan lists it (never gone: too young).
        old = sorted(r.key for r in local_reg.records({State.TRACKED}))[:3]
        for key in old:
            store.delete_many([key])
        clock.now += 1000
        young = put_wal(store, clock.now, 2)
        for reg in (local_reg, spark_reg):
            Scanner(store, reg, "wal", clock=clock).incremental([young.split("/")[1]])
        store.delete_many([young])
        expected = scanner.full()
        got = spark_scan(url, spark_reg, "wal", clock=clock, spark=spark)
        assert expected.gone == got.gone == 3
        assert records(spark_reg) == records(local_reg)
        assert spark_reg.meta_get("last_full_scan_ms") == local_reg.meta_get("last_full_scan_ms") == clock.now
        young_rec = spark_reg.get(young)
        assert young_rec is not None and young_rec.state == State.TRACKED

        # One comes back (a restore): TRACKED again on both engines.
        store.put(old[0], segment(T0, 1))
        clock.now += 1000
        expected = scanner.full()
        got = spark_scan(url, spark_reg, "wal", clock=clock, spark=spark)
        assert expected.revived == got.revived == 1 and got.gone == 0
        assert records(spark_reg) == records(local_reg)

        # The young one, once past the gone age, is gone on both.
        clock.now += GONE_AGE_MS_DEFAULT
        assert scanner.full().gone == 1
        assert spark_scan(url, spark_reg, "wal", clock=clock, spark=spark).gone == 1
        assert records(spark_reg) == records(local_reg)
        assert spark_reg.check() == []


def test_walmgr_daemon_runs_full_scans_on_spark_when_configured(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``[scan] engine = "spark"``: the daemon's full scans go through Spark
    (the module's local[2] session: same master, so it is reused), its
    incremental ones stay in-process."""
    import asyncio

    from walmgr import spark_scan as sp
    from walmgr.config import load_config
    from walmgr.daemon import Walmgr

    store = LocalDirStore(tmp_path / "store", fsync=False)
    build_bucket(store)
    conf = tmp_path / "walmgr.toml"
    conf.write_text(
        f'store = "{(tmp_path / "store").as_uri()}"\nregistry = "{tmp_path / "reg"}"\n'
        '[scan]\nengine = "spark"\nspark_master = "local[2]"\n'
    )
    cfg = load_config(conf)
    assert (cfg.scan_engine, cfg.scan_spark_master) == ("spark", "local[2]")
    calls: list[bool] = []
    real = sp.spark_scan

    def counting(*args: Any, **kwargs: Any) -> ScanReport:
        calls.append(kwargs["full"])
        return real(*args, **kwargs)

    async def cycle() -> Any:
        mgr = Walmgr(cfg, clock=Clock(NOW))
        await mgr.start()
        try:
            report = await mgr.cycle(dry_run=True, full_scan=True)
            assert mgr.metrics is not None
            listing_s = mgr.metrics.prom.get_sample_value("walmgr_full_scan_seconds", {"stage": "listing"})
            return report, {r.key for r in mgr._reg().records()}, listing_s
        finally:
            await mgr.stop()

    monkeypatch.setattr(sp, "spark_scan", counting)
    report, keys, listing_s = asyncio.run(cycle())
    assert calls == [True]
    assert report.full is not None and report.full.stages  # the Spark engine's stage times
    assert listing_s == report.full.stages["listing"] > 0  # and the metric of each stage
    with Registry(tmp_path / "reg-local", sync=False) as local_reg:
        Scanner(store, local_reg, "wal", clock=Clock(NOW)).full()
        assert keys == {r.key for r in local_reg.records()}


@pytest.mark.serial  # a JVM job under a 240 s bound: alone, not beside the parallel run (scripts/test)
def test_spark_submit_with_the_project_shipped_as_a_zip(tmp_path: Path) -> None:
    """``spark-submit --py-files walmgr_spark.zip spark/submit.py --store
    --registry``: in a Python that has the third-party packages but not
    partlog, walmgr or the job's package (a venv whose only path is the dev
    environment's site-packages, whose .pth files, partlog's editable
    install among them, are not processed)."""
    import os
    import subprocess
    import sys
    import sysconfig
    import venv

    import pyspark

    site = sysconfig.get_paths()["purelib"]
    bare = tmp_path / "bare"
    venv.EnvBuilder(with_pip=False).create(bare)
    bare_python = bare / "bin" / "python"
    bare_site = subprocess.run(
        [str(bare_python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    Path(bare_site, "deps.pth").write_text(site + "\n")
    probe = "import importlib.util as u; print([m for m in ('partlog', 'walmgr', 'spark') if u.find_spec(m)])"
    seen = subprocess.run([str(bare_python), "-c", probe], capture_output=True, text=True, check=True, cwd=tmp_path)
    assert seen.stdout.strip() == "[]", seen.stdout  # nothing of the project without the zip

    store = LocalDirStore(tmp_path / "store", fsync=False)
    build_bucket(store)
    job = tmp_path / "submit.py"
    import spark.submit

    job.write_bytes(Path(spark.submit.__file__).read_bytes())
    zip_path = package_zip(str(tmp_path / "walmgr_spark.zip"))
    env = dict(os.environ, PYSPARK_PYTHON=str(bare_python), PYSPARK_DRIVER_PYTHON=str(bare_python))
    env.pop("PYTHONPATH", None)
    submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    cmd = [
        str(submit), "--master", "local[2]", "--conf", "spark.ui.enabled=false", "--py-files", zip_path, str(job),
        "--store", (tmp_path / "store").as_uri(), "--registry", str(tmp_path / "reg"),
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=240)
    assert proc.returncode == 0, proc.stderr[-4000:]
    import json

    out = json.loads(proc.stdout.strip().splitlines()[-1])
    with (
        Registry(tmp_path / "reg", sync=False) as spark_reg,
        Registry(tmp_path / "reg-local", sync=False) as local_reg,
    ):
        expected = Scanner(store, local_reg, "wal", clock=Clock(NOW)).full()
        assert out["new_objects"] == expected.new_objects == 40
        strip = {(r.key, r.size, r.created_ms, r.broker_id, r.partitions, r.state, r.note) for r in local_reg.records()}
        assert {(r.key, r.size, r.created_ms, r.broker_id, r.partitions, r.state, r.note)
                for r in spark_reg.records()} == strip  # fmt: skip
    assert sys.executable != str(bare_python)


def test_a_failed_spark_job_is_a_scan_error_and_the_cycle_goes_on(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An executor that cannot open the store fails the job: SparkScanError
    naming the store, nothing merged; in the daemon it is the cycle's
    scan_error (retried next cycle) and the rest of the cycle still runs."""
    import asyncio

    from walmgr import spark_scan as sp
    from walmgr.config import WalmgrConfig
    from walmgr.daemon import Walmgr

    not_a_dir = tmp_path / "file"
    not_a_dir.write_bytes(b"x")
    with Registry(tmp_path / "reg-bad", sync=False) as reg:
        with pytest.raises(sp.SparkScanError, match=f"Spark scan of {not_a_dir.as_uri()} under wal/ failed"):
            spark_scan(not_a_dir.as_uri(), reg, "wal", clock=Clock(NOW), spark=spark)
        assert list(reg.records()) == [] and reg.meta_get("last_full_scan_ms") is None

    store = LocalDirStore(tmp_path / "store", fsync=False)
    build_bucket(store)
    cfg = WalmgrConfig.for_cli(
        (tmp_path / "store").as_uri(), str(tmp_path / "reg"), scan_engine="spark", scan_spark_master="local[2]"
    )

    def failing(*args: Any, **kwargs: Any) -> ScanReport:
        raise sp.SparkScanError("Spark scan failed: lost executor")

    monkeypatch.setattr(sp, "spark_scan", failing)

    async def cycle() -> Any:
        mgr = Walmgr(cfg, clock=Clock(NOW))
        await mgr.start()
        try:
            return await mgr.cycle(dry_run=True, full_scan=True)
        finally:
            await mgr.stop()

    report = asyncio.run(cycle())
    assert report.incremental is not None and report.incremental.new_objects == 40  # in-process, before
    assert report.full is None and "lost executor" in report.scan_error
