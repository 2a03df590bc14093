"""``partlog metadata topics|object`` (partlog/tools/metadata_tool.py) on real
stores and a real walmgr registry, every number checked against values
computed by hand from the batches committed.

The layout (``<data>/brokers/<id>/meta``, ``<data>/walmgr``):

* broker 0 is the leader store, broker 1 a replica with the same content,
  broker 2 a replica that lags (replicated up to O2 only) and alone holds a
  third topic;
* topic T1 (2 partitions), T2 (1 partition), T3 (1 partition, broker 2 only);
* objects (one commit each; F* their file sizes)::

      O0: T2p0 z          O3: T2p0 e
      O1: T1p0 a, T2p0 b  O4: T1p1 f, T2p0 g
      O2: T1p0 c, T1p1 d  O5: T3p0 h  (committed on broker 2)

* then DeleteRecords on T2p0 past z and b (leader, replicated to broker 1):
  O1 lives on for T1 while T2 no longer references it; O0 is referenced only
  by the lagging broker 2.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest

from partlog.kafka.errors import Errors
from partlog.kafka.records import CreateTopicAndPartitionsRequest, DeleteRecordsRequest, TopicIdPartition
from partlog.store import LogRead, MetadataStore, OffsetOutOfRangeError, ReplicatedEntry
from partlog.tools import metadata_tool
from partlog.tools.cli import main
from partlog.tools.cluster_options import ClusterOptions
from partlog.tools.cluster_run import run
from partlog.tools.metadata_tool import PartitionView, Replica, iter_log, open_sources
from tests.batches import build_batch, request, wal_key
from tests.clock import Clock
from walmgr.model import ObjectRecord, Source, State
from walmgr.registry import Registry

REPO = Path(__file__).resolve().parent.parent
T0 = 1_700_000_000_000
T1 = uuid.UUID(int=0x11)
T2 = uuid.UUID(int=0x22)
T3 = uuid.UUID(int=0x33)
T1P0, T1P1, T2P0, T3P0 = (
    TopicIdPartition(T1, 0),
    TopicIdPartition(T1, 1),
    TopicIdPartition(T2, 0),
    TopicIdPartition(T3, 0),
)


def batch(records: int, value_bytes: int) -> bytes:
    return build_batch(records, timestamp_ms=T0, value_bytes=value_bytes)


# name -> the batch; records and value sizes all differ so a wrong sum shows.
B = {
    "z": batch(2, 10),
    "a": batch(1, 20),
    "b": batch(3, 30),
    "c": batch(2, 40),
    "d": batch(3, 50),
    "e": batch(1, 60),
    "f": batch(1, 70),
    "g": batch(4, 80),
    "h": batch(5, 90),
}
S = {name: len(b) for name, b in B.items()}


@dataclass
class Fixture:
    data: Path
    keys: dict[str, str]  # O0.. -> object key
    sizes: dict[str, int]  # O0.. -> file size


def open_store(path: Path, clock: Clock, *, auto_high_watermark: bool) -> MetadataStore:
    return MetadataStore.open(
        path, sync=False, clock=clock, map_size_bytes=1 << 24, auto_high_watermark=auto_high_watermark
    )


def commit(store: MetadataStore, key: str, items: Sequence[tuple[TopicIdPartition, str]], file_size: int) -> None:
    reqs = []
    off = 0
    for i, (tp, name) in enumerate(items):
        reqs.append(request(tp, B[name], byte_offset=off, request_id=i))
        off += S[name]
    assert off <= file_size
    for r in store.commit_file(key, 0, file_size, reqs):
        assert r.errors == Errors.NONE, r


def replicate(leader: MetadataStore, follower: MetadataStore, tp: TopicIdPartition) -> None:
    """A follower's fetch rounds, one entry at a time, until caught up."""
    while True:
        read = leader.read_log(tp, follower.log_end_offset(tp), 0, 1)
        follower.append_replicated(
            tp, read.entries, leader_high_watermark=read.high_watermark, leader_log_start_offset=read.log_start_offset
        )
        if not read.entries:
            return


def record(key: str, size: int, parts: Sequence[TopicIdPartition], state: State, deleted_ms: int = -1) -> ObjectRecord:
    return ObjectRecord(key, size, T0, 0, tuple(parts), Source.SCAN, state, T0, deleted_ms=deleted_ms)


@pytest.fixture
def fx(tmp_path: Path) -> Fixture:
    data = tmp_path / "data"
    clock = Clock(T0)
    keys = {f"O{i}": wal_key(T0, 0) for i in range(10)}
    # File sizes: the batches, then a footer of a size of our choosing.
    sizes = {
        "O0": S["z"] + 101,
        "O1": S["a"] + S["b"] + 102,
        "O2": S["c"] + S["d"] + 103,
        "O3": S["e"] + 104,
        "O4": S["f"] + S["g"] + 105,
        "O5": S["h"] + 106,
    }
    leader = open_store(data / "brokers" / "0" / "meta", clock, auto_high_watermark=True)
    same = open_store(data / "brokers" / "1" / "meta", clock, auto_high_watermark=False)
    lagging = open_store(data / "brokers" / "2" / "meta", clock, auto_high_watermark=False)
    topics = [CreateTopicAndPartitionsRequest(T1, "t1", 2, {}), CreateTopicAndPartitionsRequest(T2, "t2", 1, {})]
    for s in (leader, same, lagging):
        s.create_topic_and_partitions(topics)
    lagging.create_topic_and_partitions([CreateTopicAndPartitionsRequest(T3, "t3", 1, {})])
    commit(leader, keys["O0"], [(T2P0, "z")], sizes["O0"])
    commit(leader, keys["O1"], [(T1P0, "a"), (T2P0, "b")], sizes["O1"])
    commit(leader, keys["O2"], [(T1P0, "c"), (T1P1, "d")], sizes["O2"])
    for tp in (T1P0, T1P1, T2P0):
        replicate(leader, lagging, tp)
    commit(leader, keys["O3"], [(T2P0, "e")], sizes["O3"])
    commit(leader, keys["O4"], [(T1P1, "f"), (T2P0, "g")], sizes["O4"])
    commit(lagging, keys["O5"], [(T3P0, "h")], sizes["O5"])
    for tp in (T1P0, T1P1, T2P0):
        replicate(leader, same, tp)
    # T2p0 offsets: z [0, 2), b [2, 5), e [5, 6), g [6, 10); DeleteRecords to 5 drops z and b.
    [dr] = leader.delete_records([DeleteRecordsRequest(T2P0, 5)])
    assert dr.errors == Errors.NONE
    replicate(leader, same, T2P0)  # the follower's log start follows
    for s in (leader, same, lagging):
        assert s.check() == []
    assert same.partition_state(T2P0)["log_start_offset"] == 5
    assert lagging.partition_state(T2P0)["log_end_offset"] == 5
    for s in (leader, same, lagging):
        s.close()

    with Registry(data / "walmgr", sync=False) as reg:
        reg.put_many(
            [
                record(keys["O1"], sizes["O1"], [T1P0, T2P0], State.TRACKED),
                record(keys["O2"], sizes["O2"], [T1P0, T1P1], State.CANDIDATE),
                record(keys["O3"], sizes["O3"], [T2P0], State.TRACKED),
                record(keys["O4"], sizes["O4"], [T1P1, T2P0], State.TRACKED),
                record(keys["O5"], sizes["O5"], [T3P0], State.TRACKED),
                # Referenced by nobody, still stored (e.g. waiting for walmgr).
                record(keys["O6"], 5000, [T1P0, T2P0], State.TRACKED),
                # No longer stored, or never to be deleted: not counted.
                record(keys["O7"], 7000, [T1P0], State.DELETED, deleted_ms=T0 + 1),
                record(keys["O8"], 8000, [T2P0], State.GONE, deleted_ms=T0 + 2),
                record(keys["O9"], 9000, [T1P1], State.INVALID),
            ]
        )
        [planned] = reg.plan([record(keys["O3"], sizes["O3"], [T2P0], State.TRACKED)], now_ms=T0)
        assert planned.state == State.PLANNED
        assert reg.check() == []
    sizes.update(O6=5000, O7=7000)
    return Fixture(data, keys, sizes)


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    code = main(["metadata", *argv, "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def topics_by_name(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in doc["topics"]}


def partition_rows(t: dict[str, Any]) -> list[dict[str, Any]]:
    return cast(list[dict[str, Any]], t["partitions"])


# ------------------------------------------------------------------ topics


def expected_topics(fx: Fixture, *, registry: bool, source: str = "broker {}") -> list[dict[str, Any]]:
    F = fx.sizes

    def part(p: int, lso: int, hwm: int, leo: int, names: str, replicas: int, broker: int) -> dict[str, Any]:
        return {
            "partition": p,
            "log_start_offset": lso,
            "high_watermark": hwm,
            "log_end_offset": leo,
            "live_batches": len(names),
            "live_bytes": sum(S[n] for n in names),
            "replication_factor": None,  # no controller state in the fixture
            "stores": replicas,
            "source": source.format(broker),
        }

    def deleted(objects: int, nbytes: int) -> dict[str, Any]:
        return {
            "deleted_part_objects": objects if registry else None,
            "deleted_part_bytes": nbytes if registry else None,
        }

    return [
        {
            "name": "t1",
            "topic_id": str(T1),
            "partitions": [part(0, 0, 3, 3, "ac", 3, 0), part(1, 0, 4, 4, "df", 3, 0)],
            "live_batches": 4,
            "live_bytes": S["a"] + S["c"] + S["d"] + S["f"],
            "objects": 3,
            "objects_total_bytes": F["O1"] + F["O2"] + F["O4"],
            **deleted(1, 5000),  # O6 (O7 is deleted, O9 invalid)
        },
        {
            "name": "t2",
            "topic_id": str(T2),
            "partitions": [part(0, 5, 10, 10, "eg", 3, 0)],
            "live_batches": 2,
            "live_bytes": S["e"] + S["g"],
            "objects": 2,
            "objects_total_bytes": F["O3"] + F["O4"],
            # O1: its b went with DeleteRecords, T1's a keeps it; O6 too.
            # (O0 has no registry record, O8 is gone.)
            **deleted(2, F["O1"] + 5000),
        },
        {
            "name": "t3",
            "topic_id": str(T3),
            # Committed on a store whose HWM its owner drives: still 0.
            "partitions": [part(0, 0, 0, 5, "h", 1, 2)],
            "live_batches": 1,
            "live_bytes": S["h"],
            "objects": 1,
            "objects_total_bytes": F["O5"],
            **deleted(0, 0),
        },
    ]


def test_topics_from_the_data_dir(fx: Fixture, capsys: pytest.CaptureFixture[str]) -> None:
    doc = run_json(capsys, "topics", "--data-dir", str(fx.data))
    assert doc["topics"] == expected_topics(fx, registry=True)
    assert doc["registry"] == str(fx.data / "walmgr")
    assert doc["stores"] == [
        {"label": f"broker {i}", "path": str(fx.data / "brokers" / str(i) / "meta")} for i in range(3)
    ]


def test_each_partition_counts_once_however_many_replicas(fx: Fixture, capsys: pytest.CaptureFixture[str]) -> None:
    """One store, two, three: the totals never change (the lagging replica is
    never the chosen one where it lags)."""
    stores = [str(fx.data / "brokers" / str(i) / "meta") for i in range(3)]
    alone = topics_by_name(run_json(capsys, "topics", "--broker-dir", stores[0]))
    for extra in ([stores[1]], [stores[1], stores[2]], [stores[2], stores[1], stores[0]]):
        doc = topics_by_name(
            run_json(capsys, "topics", "--broker-dir", stores[0], *[a for s in extra for a in ("--broker-dir", s)])
        )
        for name in ("t1", "t2"):
            for field in ("live_bytes", "live_batches", "objects", "objects_total_bytes"):
                assert doc[name][field] == alone[name][field], (extra, name, field)
    # The lagging store given first still is not chosen where it lags (T1p1,
    # T2p0), and where it ties (T1p0) it is chosen as the first store given.
    doc = topics_by_name(run_json(capsys, "topics", "--broker-dir", stores[2], "--broker-dir", stores[0]))
    t1, t2 = partition_rows(doc["t1"]), partition_rows(doc["t2"])
    assert [p["source"] for p in t1] == [stores[2], stores[0]]
    assert t2[0]["source"] == stores[0]
    assert (t2[0]["log_start_offset"], t2[0]["log_end_offset"], t2[0]["live_bytes"]) == (5, 10, S["e"] + S["g"])
    # The same store twice is opened once.
    doc = run_json(capsys, "topics", "--broker-dir", stores[0], "--broker-dir", stores[0] + "/")
    assert len(doc["stores"]) == 1


def test_broker_dirs_with_and_without_a_registry(fx: Fixture, capsys: pytest.CaptureFixture[str]) -> None:
    stores = [str(fx.data / "brokers" / str(i) / "meta") for i in range(3)]
    dirs = [a for s in stores for a in ("--broker-dir", s)]
    doc = run_json(capsys, "topics", *dirs)
    assert doc["registry"] is None
    by_path = [(s, i) for i, s in enumerate(stores)]
    expected = expected_topics(fx, registry=False, source="{}")
    for t in expected:
        for p in t["partitions"]:
            p["source"] = next(s for s, i in by_path if p["source"] == str(i))
    assert doc["topics"] == expected
    doc = run_json(capsys, "topics", *dirs, "--registry", str(fx.data / "walmgr"))
    assert [t["deleted_part_bytes"] for t in doc["topics"]] == [5000, fx.sizes["O1"] + 5000, 0]


def test_no_registry_in_the_data_dir_is_unknown(fx: Fixture, capsys: pytest.CaptureFixture[str]) -> None:
    (fx.data / "walmgr").rename(fx.data / "walmgr.away")
    doc = run_json(capsys, "topics", "--data-dir", str(fx.data))
    assert doc["registry"] is None
    assert doc["topics"] == expected_topics(fx, registry=False)
    assert main(["metadata", "topics", "--data-dir", str(fx.data)]) == 0
    out = capsys.readouterr().out
    assert "deleted-part bytes unknown" in out
    assert "deleted parts still stored: unknown" in out


def test_topics_text(fx: Fixture, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["metadata", "topics", "--data-dir", str(fx.data)]) == 0
    out = capsys.readouterr().out
    assert f"topic t2 ({T2})" in out
    assert f"live: {S['e'] + S['g']:,} bytes in 2 batches" in out
    assert f"deleted parts still stored: {fx.sizes['O1'] + 5000:,} bytes in 2 objects" in out
    assert f"walmgr registry: {fx.data / 'walmgr'}" in out


def test_logs_are_streamed_in_pages(
    fx: Fixture, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int | None] = []
    real = MetadataStore.read_log

    def spy(
        self: MetadataStore, tp: TopicIdPartition, from_offset: int, max_bytes: int, max_entries: int | None = None
    ) -> LogRead:
        calls.append(max_entries)
        read = real(self, tp, from_offset, max_bytes, max_entries)
        assert max_entries is not None and len(read.entries) <= max_entries
        return read

    monkeypatch.setattr(MetadataStore, "read_log", spy)
    monkeypatch.setattr(metadata_tool, "PAGE_ENTRIES", 1)
    doc = run_json(capsys, "topics", "--data-dir", str(fx.data))
    assert doc["topics"] == expected_topics(fx, registry=True)
    # One page per entry of the chosen replicas: 2 + 2 + 2 + 1.
    assert calls == [1] * 7


# ------------------------------------------------------------------ object


def test_object_shared_by_two_topics(fx: Fixture, capsys: pytest.CaptureFixture[str]) -> None:
    k = fx.keys["O1"]
    doc = run_json(capsys, "object", k, "--data-dir", str(fx.data))
    assert doc == {
        "key": k,
        "total_bytes": fx.sizes["O1"],
        "total_bytes_from": "store",
        # b (T2p0) was deleted; the lagging broker 2 still holds it but is not T2p0's chosen replica.
        "used_bytes": S["a"],
        "used_batches": 1,
        "partitions": [
            {"topic": "t1", "topic_id": str(T1), "partition": 0, "batches": 1, "bytes": S["a"], "source": "broker 0"}
        ],
        "stores_referencing": ["broker 0", "broker 1", "broker 2"],
        "walmgr_state": "tracked",
        "registry": str(fx.data / "walmgr"),
    }


@pytest.mark.parametrize(
    ("name", "used", "state"),
    [
        ("O2", [("t1", T1, 0, "c"), ("t1", T1, 1, "d")], "candidate"),
        ("O3", [("t2", T2, 0, "e")], "planned"),
        ("O4", [("t1", T1, 1, "f"), ("t2", T2, 0, "g")], "tracked"),
    ],
)
def test_object_used_bytes_count_each_partition_once(
    fx: Fixture, capsys: pytest.CaptureFixture[str], name: str, used: list[tuple[str, uuid.UUID, int, str]], state: str
) -> None:
    doc = run_json(capsys, "object", fx.keys[name], "--data-dir", str(fx.data))
    assert doc["total_bytes"] == fx.sizes[name]
    assert doc["used_bytes"] == sum(S[b] for *_, b in used)
    assert doc["used_batches"] == len(used)
    assert doc["partitions"] == [
        {"topic": t, "topic_id": str(tid), "partition": p, "batches": 1, "bytes": S[b], "source": "broker 0"}
        for t, tid, p, b in used
    ]
    assert doc["walmgr_state"] == state


def test_object_held_only_by_a_lagging_replica(fx: Fixture, capsys: pytest.CaptureFixture[str]) -> None:
    doc = run_json(capsys, "object", fx.keys["O0"], "--data-dir", str(fx.data))
    assert (doc["total_bytes"], doc["total_bytes_from"]) == (fx.sizes["O0"], "store")
    assert (doc["used_bytes"], doc["used_batches"], doc["partitions"]) == (0, 0, [])
    assert doc["stores_referencing"] == ["broker 2"]
    assert doc["walmgr_state"] is None  # the registry has no record of it
    assert main(["metadata", "object", fx.keys["O0"], "--data-dir", str(fx.data)]) == 0
    out = capsys.readouterr().out
    assert f"total size: {fx.sizes['O0']:,} bytes (from the store)" in out
    assert "walmgr state: no record" in out
    assert "in the file index of: broker 2" in out


@pytest.mark.parametrize(("name", "state"), [("O6", "tracked"), ("O7", "deleted")])
def test_object_only_the_registry_knows(fx: Fixture, capsys: pytest.CaptureFixture[str], name: str, state: str) -> None:
    doc = run_json(capsys, "object", fx.keys[name], "--data-dir", str(fx.data))
    assert doc == {
        "key": fx.keys[name],
        "total_bytes": fx.sizes[name],
        "total_bytes_from": "registry",
        "used_bytes": 0,
        "used_batches": 0,
        "partitions": [],
        "stores_referencing": [],
        "walmgr_state": state,
        "registry": str(fx.data / "walmgr"),
    }


def test_object_text(fx: Fixture, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["metadata", "object", fx.keys["O4"], "--data-dir", str(fx.data)]) == 0
    out = capsys.readouterr().out
    assert f"object {fx.keys['O4']}" in out
    assert f"used: {S['f'] + S['g']:,} bytes in 2 live batches" in out
    assert "walmgr state: tracked" in out


def test_unknown_object_key(fx: Fixture, capsys: pytest.CaptureFixture[str]) -> None:
    missing = wal_key(T0, 0)
    assert main(["metadata", "object", missing, "--data-dir", str(fx.data)]) == 1
    err = capsys.readouterr().err
    assert f"unknown object {missing!r}" in err and "registry has no record" in err
    store = str(fx.data / "brokers" / "0" / "meta")
    for key in (missing, "", "x" * 2000):
        assert main(["metadata", "object", key, "--broker-dir", store, "--json"]) == 1
        captured = capsys.readouterr()
        assert captured.out == ""
        assert "no walmgr registry to ask" in captured.err


# ------------------------------------------------------------------ errors


def test_bad_directories_exit_2_naming_the_path(
    fx: Fixture, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "brokers" / "7").mkdir(parents=True)  # a broker directory without a store
    for d in (empty, tmp_path / "nope"):
        for cmd in (["topics"], ["object", fx.keys["O1"]]):
            assert main(["metadata", *cmd, "--data-dir", str(d)]) == 2
            err = capsys.readouterr().err
            assert str(d) in err, err
            assert "Traceback" not in err
    assert main(["metadata", "topics", "--data-dir", str(empty)]) == 2
    assert "no broker metadata stores here" in capsys.readouterr().err
    assert main(["metadata", "topics", "--broker-dir", str(empty)]) == 2
    assert f"{empty}: no metadata store here" in capsys.readouterr().err
    assert main(["metadata", "topics", "--broker-dir", str(tmp_path / "nope")]) == 2
    assert f"{tmp_path / 'nope'}: no such directory" in capsys.readouterr().err
    assert main(["metadata", "topics", "--data-dir", str(fx.data), "--registry", str(empty)]) == 2
    assert f"registry {empty}: no walmgr registry here" in capsys.readouterr().err
    with pytest.raises(SystemExit) as ei:
        main(["metadata", "topics"])  # neither --data-dir nor --broker-dir
    assert ei.value.code == 2
    with pytest.raises(SystemExit) as ei:
        main(["metadata", "topics", "--data-dir", str(fx.data), "--broker-dir", str(empty)])
    assert ei.value.code == 2


# ------------------------------------------------------- live stores, paging


def test_runs_beside_a_store_open_for_writing(fx: Fixture) -> None:
    """Another process (the tool) reads while this one holds the stores and the registry open for writing."""
    clock = Clock(T0)
    stores = [open_store(fx.data / "brokers" / str(i) / "meta", clock, auto_high_watermark=i == 0) for i in range(3)]
    try:
        with Registry(fx.data / "walmgr", sync=False):
            commit(stores[0], wal_key(T0, 0), [(T1P0, "h")], S["h"] + 1)
            proc = subprocess.run(
                [sys.executable, "-m", "partlog.tools.cli", "metadata", "topics", "--data-dir", str(fx.data), "--json"],
                cwd=REPO,
                capture_output=True,
                text=True,
                timeout=60,
            )
    finally:
        for s in stores:
            s.close()
    assert proc.returncode == 0, proc.stderr
    t1 = topics_by_name(json.loads(proc.stdout))["t1"]
    assert t1["live_bytes"] == S["a"] + S["c"] + S["d"] + S["f"] + S["h"]
    assert t1["partitions"][0]["log_end_offset"] == 8


class _ScriptedStore:
    """read_log of a store that changes between the tool's pages: each call
    takes the next step of ``script``, an error to raise or None to answer
    from ``entries``."""

    def __init__(self, entries: Sequence[ReplicatedEntry], script: Sequence[Exception | None]) -> None:
        self.entries = list(entries)
        self.script = list(script)
        self.calls: list[int] = []

    def read_log(
        self, tp: TopicIdPartition, from_offset: int, max_bytes: int, max_entries: int | None = None
    ) -> LogRead:
        self.calls.append(from_offset)
        step = self.script.pop(0)
        if step is not None:
            raise step
        page = tuple(e for e in self.entries if e.last_offset >= from_offset)[: max_entries or 1]
        return LogRead(page, 0, 10, 10, 0)


def test_iter_log_follows_a_store_that_changes_meanwhile(fx: Fixture) -> None:
    with MetadataStore.open(fx.data / "brokers" / "0" / "meta", readonly=True) as s:
        whole = s.read_log(T2P0, 5, 1 << 30).entries  # e [5], g [6, 10)
    assert [(e.base_offset, e.last_offset) for e in whole] == [(5, 5), (6, 9)]

    def stream(script: Sequence[Exception | None]) -> tuple[list[int], list[int]]:
        fake = _ScriptedStore(whole, script)
        view = PartitionView(T2P0, "t2", Replica("x", "x", cast(MetadataStore, fake)), 1, 0, 10, 10)
        return [e.base_offset for e in iter_log(view, page_entries=1)], fake.calls

    # Retention moved the log start (inside g) between two pages: go on there.
    moved = OffsetOutOfRangeError("moved", log_start_offset=7, log_end_offset=10)
    assert stream([None, moved, None]) == ([5, 6], [0, 6, 7])
    # Truncated below the reader: the stream ends.
    truncated = OffsetOutOfRangeError("truncated", log_start_offset=0, log_end_offset=3)
    assert stream([None, truncated]) == ([5], [0, 6])
    # The topic was deleted meanwhile: the stream ends.
    assert stream([None, KeyError("gone")]) == ([5], [0, 6])
    # No more read than the view's log end needs.
    assert stream([None, None]) == ([5, 6], [0, 6])


def test_store_topics_accessor_on_a_readonly_store(fx: Fixture) -> None:
    with MetadataStore.open(fx.data / "brokers" / "2" / "meta", readonly=True) as s:
        assert s.topics() == {T1: ("t1", 2), T2: ("t2", 1), T3: ("t3", 1)}


def test_open_sources_needs_exactly_one_kind_of_store_dir(fx: Fixture) -> None:
    with pytest.raises(metadata_tool.MetadataToolError):
        open_sources()
    with pytest.raises(metadata_tool.MetadataToolError):
        open_sources(data_dir=str(fx.data), broker_dirs=["x"])


# -------------------------------------------------------------- end to end


def all_wal_keys(objects: Path) -> Iterator[str]:
    for root, _, files in os.walk(objects):
        for f in files:
            if f.endswith(".wal") and ".partlog-tmp" not in root:
                yield os.path.relpath(os.path.join(root, f), objects)


def test_end_to_end_on_a_cluster_data_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "cluster"
    opts = ClusterOptions(
        duration_s=2,
        azs=1,
        brokers_per_az=1,
        partitions=2,
        producers_per_az=1,
        rate_per_producer=200,
        data_dir=str(data),
        sync=False,
        replication_factor=1,
    )
    result = asyncio.run(run(opts))
    assert result["records_lost"] == 0
    doc = run_json(capsys, "topics", "--data-dir", str(data))
    [t] = doc["topics"]
    assert t["name"] == "partlog-cluster"
    assert [p["partition"] for p in t["partitions"]] == [0, 1]
    assert t["objects_total_bytes"] > 0 and t["live_bytes"] > 0
    assert t["deleted_part_bytes"] == 0  # nothing deleted, a registry present
    assert doc["registry"] == str(data / "walmgr")
    assert result["records_acked"] > 0
    assert sum(p["log_end_offset"] for p in t["partitions"]) >= result["records_acked"]
    # Every object on disk, asked about one by one, adds up to the topic's numbers.
    used = total = referenced = 0
    for key in all_wal_keys(data / "objects"):
        o = run_json(capsys, "object", key, "--data-dir", str(data))
        used += o["used_bytes"]
        if o["used_bytes"]:
            referenced += 1
            total += o["total_bytes"]
            assert o["total_bytes"] == os.path.getsize(data / "objects" / key)
    assert (used, total, referenced) == (t["live_bytes"], t["objects_total_bytes"], t["objects"])


def test_topics_show_the_replication_factor_from_the_controller(tmp_path: Path) -> None:
    """Regression (issue 13, newcomer polish): the column said "replicas" and
    counted the stores holding a partition; the replication factor comes
    from the controller's state when the data directory has one."""
    from partlog.controller.core import Controller, ControllerConfig

    data = tmp_path / "data"
    with Controller(ControllerConfig(str(data / "controller")), now_ms=0) as c:
        for b in (1, 2, 3):
            c.register_broker(b, f"az{b}", "127.0.0.1", 9000 + b, 0)
        topic = c.create_topic("orders", 2, 3)
        assert not isinstance(topic, Errors)
    store = open_store(data / "brokers" / "1" / "meta", Clock(T0), auto_high_watermark=True)
    store.create_topic_and_partitions([CreateTopicAndPartitionsRequest(topic.topic_id, "orders", 2, {})])
    store.close()
    with metadata_tool.open_sources(data_dir=str(data)) as src:
        doc = metadata_tool.topics_report(src)
    [t] = doc["topics"]
    assert [(p["replication_factor"], p["stores"]) for p in t["partitions"]] == [(3, 1), (3, 1)]
