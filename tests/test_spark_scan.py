"""The Spark scan engine against the in-process scanner: on the same bucket
(LocalDirStore) both give the same records, and a second Spark scan with
everything known adds nothing.  Spark runs local[2], UI off, one session
for the module.  Skipped when pyspark is not importable."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (walmgr's Spark engine is optional)")

from partlog.objectstore import LocalDirStore, ObjectStore
from partlog.records import TopicIdPartition
from partlog.wal_key import make_wal_key, shard_of
from partlog.wal_segment import WalSegmentBuilder
from tests.batches import build_batch
from tests.clock import Clock
from walmgr.registry import Registry
from walmgr.scanner import Scanner, ScanReport
from walmgr.spark_scan import get_session, spark_scan

pytestmark = pytest.mark.timeout(300)

if shutil.which("java") is None:
    pytest.skip("no java on PATH (Spark needs a JVM)", allow_module_level=True)

T0 = 1_700_000_000_000
NOW = T0 + 3_600_000
TPS = [TopicIdPartition(uuid.UUID(int=1), 0), TopicIdPartition(uuid.UUID(int=2), 3)]


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    session = get_session("local[2]")
    yield session
    session.stop()


def segment(created_ms: int, broker_id: int) -> bytes:
    builder = WalSegmentBuilder(broker_id, created_ms)
    for tp in TPS:
        builder.add(tp, build_batch(2))
    return builder.build().data


def put_wal(
    store: ObjectStore, created_ms: int, broker_id: int, *, prefix: str = "wal", data: bytes | None = None
) -> str:
    key = str(make_wal_key(prefix, created_ms, broker_id, uuid.uuid4().hex[:12]))
    store.put(key, segment(created_ms, broker_id) if data is None else data)
    return key


def build_bucket(store: ObjectStore) -> None:
    for i in range(40):  # several shards (most of the 256 stay empty)
        put_wal(store, T0 + i * 1000, i % 3)
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


def test_spark_full_scan_matches_in_process(spark: Any, tmp_path: Path) -> None:
    store = LocalDirStore(tmp_path / "store", fsync=False)
    build_bucket(store)
    url = (tmp_path / "store").as_uri()
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


def test_spark_incremental_matches_in_process(spark: Any, tmp_path: Path) -> None:
    store = LocalDirStore(tmp_path / "store", fsync=False)
    build_bucket(store)
    url = (tmp_path / "store").as_uri()
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
        new = put_wal(store, T0 + 500_000, 1)
        Scanner(store, local_reg, "wal", clock=clock).incremental()
        again = spark_scan(url, spark_reg, "wal", clock=clock, spark=spark, full=False)
        assert again.new_objects == 1 and spark_reg.get(new) is not None
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
