"""walmgr's registry (real LMDB in tmp_path) and its config.

The registry keeps indexes (by state, tombstones by time, the plan) and
per-state counts beside the records; a stateful hypothesis test drives every
write against a dict model and checks counts, plan and ``check()`` after each
step, across reopens.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
import uuid
from pathlib import Path

import lmdb
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import walmgr.registry as registry_module
from partlog.kafka.records import TopicIdPartition
from partlog.wal.key import make_wal_key
from tests.paths import REPO
from walmgr.config import WalmgrConfig, WalmgrConfigError, load_config, split_store_url
from walmgr.model import ObjectRecord, Source, State
from walmgr.registry import (
    COUNTER_DELETED_BYTES,
    COUNTER_DELETED_FILES,
    MAP_SIZE_BYTES_MIN,
    Registry,
    RegistryCorruptError,
    RegistryError,
    RegistryLockedError,
)

T0 = 1_700_000_000_000
TP = TopicIdPartition(uuid.UUID(int=7), 3)


def wal_key(i: int, prefix: str = "wal") -> str:
    return str(make_wal_key(prefix, T0 + i, i % 5, f"{i:06x}"))


def rec(i: int, state: State = State.TRACKED, *, size: int = 100, deleted_ms: int = -1) -> ObjectRecord:
    return ObjectRecord(
        wal_key(i),
        size,
        T0 + i,
        i % 5,
        (TP, TopicIdPartition(uuid.UUID(int=i + 1), 0)),
        Source.SCAN,
        state,
        T0 + 1000,
        deleted_ms=deleted_ms,
    )


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], cwd=REPO, capture_output=True, text=True, timeout=60
    )


# ------------------------------------------------------------------- basics


def test_round_trip(tmp_path: Path) -> None:
    records = [
        rec(0),
        rec(1, State.CANDIDATE),
        rec(2, State.INVALID),
        rec(3, State.DELETED, deleted_ms=T0 + 5),
        rec(4, State.GONE, deleted_ms=T0 + 6),
        ObjectRecord(wal_key(5), 7, T0 + 5, 0, (), Source.NOTIFICATION, State.TRACKED, T0, 42, "why", -1),
    ]
    with Registry(tmp_path / "r") as reg:
        reg.put_many(records)
        for r in records:
            assert reg.get(r.key) == r
        assert reg.get(wal_key(99)) is None
        assert sorted(reg.records(), key=lambda r: r.key) == sorted(records, key=lambda r: r.key)
        assert list(reg.records({State.TRACKED})) == sorted([records[0], records[5]], key=lambda r: r.key)
        assert list(reg.records({State.DELETED, State.GONE})) == [records[3], records[4]]
        assert list(reg.records(key_prefix=records[2].key)) == [records[2]]
        assert list(reg.records({State.PLANNED})) == []
        assert reg.known([wal_key(0), wal_key(2), wal_key(99), "w/" + "x" * 600]) == {wal_key(0), wal_key(2)}
        assert reg.check() == []
    # And after reopening.
    with Registry(tmp_path / "r") as reg:
        assert [reg.get(r.key) for r in records] == records
        assert reg.counts()[State.TRACKED] == (2, 107)


def test_records_streams_in_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry_module, "RECORDS_PER_READ_TXN", 3)
    with Registry(tmp_path / "r", sync=False) as reg:
        reg.put_many(rec(i) for i in range(10))
        reg.put_many(rec(i, State.CANDIDATE) for i in range(10, 17))
        everything = sorted(wal_key(i) for i in range(17))
        assert [r.key for r in reg.records()] == everything
        assert [r.key for r in reg.records({State.CANDIDATE})] == sorted(wal_key(i) for i in range(10, 17))
        # Writes between chunks (no read transaction is held across yields);
        # records that do not change are seen exactly once.
        seen = []
        for r in reg.records({State.TRACKED}):
            seen.append(r.key)
            reg.put_many([rec(100 + len(seen), State.CANDIDATE)])
        assert seen == sorted(wal_key(i) for i in range(10))
        assert reg.check() == []


def test_shard_positions(tmp_path: Path) -> None:
    with Registry(tmp_path / "r") as reg:
        assert reg.shard_position("ab") == ""
        reg.set_shard_positions({"ab": "wal/ab/x", "00": "wal/00/y"})
        reg.put_new([rec(1)], shard_positions={"ab": "wal/ab/z"})
        assert reg.shard_positions() == {"00": "wal/00/y", "ab": "wal/ab/z"}
    with Registry(tmp_path / "r", readonly=True) as reg:
        assert reg.shard_position("ab") == "wal/ab/z"


def test_put_new_keeps_existing(tmp_path: Path) -> None:
    with Registry(tmp_path / "r") as reg:
        reg.put_many([rec(1, State.CANDIDATE)])
        added = reg.put_new([rec(1), rec(2)])
        assert [r.key for r in added] == [wal_key(2)]
        assert reg.get(wal_key(1)) == rec(1, State.CANDIDATE)


def test_plan_delete_lifecycle(tmp_path: Path) -> None:
    with Registry(tmp_path / "r") as reg:
        reg.put_many([rec(i, State.CANDIDATE, size=10 * i) for i in range(1, 6)] + [rec(9, State.GONE, deleted_ms=1)])
        planned = reg.plan([rec(i, State.CANDIDATE, size=10 * i) for i in (1, 2, 3, 9)], T0 + 2000)
        # 9 is GONE: skipped.
        assert [r.key for r in planned] == [wal_key(i) for i in (1, 2, 3)]
        assert {r.key for r in reg.planned(10)} == {wal_key(i) for i in (1, 2, 3)}
        assert len(reg.planned(2)) == 2
        assert reg.counts()[State.PLANNED] == (3, 60)
        # Planning again changes nothing.
        assert reg.plan([rec(1, State.CANDIDATE)], T0 + 3000) == []
        assert reg.unplan([wal_key(3), wal_key(4)], "leader changed") == 1
        assert reg.get(wal_key(3)) == rec(3, State.CANDIDATE, size=30).with_state(
            State.CANDIDATE, note="leader changed"
        )
        assert reg.record_deleted([wal_key(1), wal_key(2), wal_key(1)], T0 + 5000) == 2
        got = reg.get(wal_key(1))
        assert got is not None and got.state == State.DELETED and got.deleted_ms == T0 + 5000
        assert reg.planned(10) == []
        assert reg.meta_get(COUNTER_DELETED_FILES) == 2
        assert reg.meta_get(COUNTER_DELETED_BYTES) == 30
        # Deleting again (a retried batch) counts nothing.
        assert reg.record_deleted([wal_key(1)], T0 + 6000) == 0
        assert reg.meta_get(COUNTER_DELETED_FILES) == 2
        assert reg.counts()[State.DELETED] == (2, 30)
        assert reg.check() == []


def test_unplan_to_invalid_and_refusals(tmp_path: Path) -> None:
    with Registry(tmp_path / "r") as reg:
        reg.put_many([rec(1, State.CANDIDATE), rec(2, State.INVALID)])
        reg.plan([rec(1)], T0)
        assert reg.unplan([wal_key(1)], "refused: not under 'wal/'", state=State.INVALID) == 1
        got = reg.get(wal_key(1))
        assert got is not None and got.state == State.INVALID and got.note.startswith("refused")
        with pytest.raises(ValueError, match="unplan to deleted"):
            reg.unplan([wal_key(1)], "x", state=State.DELETED)
        with pytest.raises(ValueError, match="INVALID object"):
            reg.plan([rec(2)], T0)
        bad = ObjectRecord("wal/readme.txt", 1, -1, -1, (), Source.SCAN, State.CANDIDATE, T0)
        with pytest.raises(ValueError, match="non-WAL key"):
            reg.plan([bad], T0)
        with pytest.raises(ValueError, match=r"only Registry\.plan"):
            reg.put_many([rec(3, State.PLANNED)])
        with pytest.raises(ValueError, match="needs deleted_ms"):
            reg.put_many([rec(3, State.DELETED)])
        with pytest.raises(ValueError, match="not recordable"):
            too_long = ObjectRecord("w/" + "x" * 600, 1, 0, 0, (), Source.SCAN, State.INVALID, 0)
            reg.put_many([rec(3), too_long])
        # All or nothing: the failed call wrote nothing.
        assert reg.get(wal_key(3)) is None
        with pytest.raises(ValueError, match="maintained by the registry"):
            reg.meta_set(COUNTER_DELETED_FILES, 0)
        assert reg.check() == []


def test_plan_survives_reopen(tmp_path: Path) -> None:
    with Registry(tmp_path / "r") as reg:
        reg.put_many([rec(i, State.CANDIDATE) for i in range(4)])
        reg.plan([rec(i, State.CANDIDATE) for i in range(3)], T0 + 1)
    with Registry(tmp_path / "r") as reg:
        assert [r.key for r in reg.planned(100)] == sorted(wal_key(i) for i in range(3))
        assert all(r.state == State.PLANNED for r in reg.planned(100))
        assert reg.counts()[State.PLANNED] == (3, 300)
        reg.record_deleted([wal_key(0)], T0 + 2)
    with Registry(tmp_path / "r") as reg:
        assert [r.key for r in reg.planned(100)] == sorted(wal_key(i) for i in (1, 2))
        assert reg.check() == []


def test_mark_gone_and_purge(tmp_path: Path) -> None:
    with Registry(tmp_path / "r") as reg:
        reg.put_many([rec(0), rec(1, State.CANDIDATE), rec(2, State.INVALID), rec(50)])
        reg.put_many([rec(3, State.CANDIDATE)])
        reg.plan([rec(3)], T0)
        marked = reg.mark_gone([wal_key(i) for i in (0, 1, 2, 3, 50, 99)], T0 + 100, created_before_ms=T0 + 10)
        assert sorted(marked) == sorted(wal_key(i) for i in (0, 1, 3))  # INVALID stays; 50 is too young
        assert reg.planned(10) == []
        assert reg.counts()[State.GONE] == (3, 300)
        reg.put_many([rec(4, State.CANDIDATE)])
        reg.plan([rec(4)], T0)
        reg.record_deleted([wal_key(4)], T0 + 500)
        # Retention 1000 ms: at T0 + 1200 the GONE ones (noticed at T0 + 100) expire, the DELETED one not yet.
        assert reg.purge_tombstones(T0 + 1200, 1000) == 3
        assert reg.get(wal_key(0)) is None and reg.get(wal_key(4)) is not None
        assert reg.purge_tombstones(T0 + 1501, 1000) == 1
        assert reg.counts()[State.DELETED] == (0, 0) and reg.counts()[State.GONE] == (0, 0)
        # The deletion counters are cumulative: purging keeps them.
        assert reg.meta_get(COUNTER_DELETED_FILES) == 1
        assert reg.check() == []


def test_purge_in_several_transactions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry_module, "PURGE_PER_TXN", 4)
    with Registry(tmp_path / "r", sync=False) as reg:
        reg.put_many(rec(i, State.DELETED, deleted_ms=T0 + i) for i in range(11))
        assert reg.purge_tombstones(T0 + 1000, 0) == 11
        assert reg.counts()[State.DELETED] == (0, 0)
        assert reg.check() == []


def test_map_grows(tmp_path: Path) -> None:
    with Registry(tmp_path / "r", map_size_bytes=MAP_SIZE_BYTES_MIN, sync=False) as reg:
        reg.put_many(rec(i) for i in range(3000))
        assert reg.map_resizes > 0
        assert reg.counts()[State.TRACKED] == (3000, 300_000)
        assert reg.check() == []


def test_threads_write_and_read_while_the_map_grows(tmp_path: Path) -> None:
    failures: list[BaseException] = []
    with Registry(tmp_path / "r", map_size_bytes=MAP_SIZE_BYTES_MIN, sync=False) as reg:
        stop = threading.Event()

        def writer(w: int) -> None:
            try:
                for batch in range(20):
                    reg.put_many(rec(w * 10_000 + batch * 50 + i) for i in range(50))
            except BaseException as e:
                failures.append(e)

        def reader() -> None:
            try:
                while not stop.is_set():
                    assert sum(1 for _ in reg.records({State.TRACKED})) <= 4000
                    reg.counts()
            except BaseException as e:
                failures.append(e)

        readers = [threading.Thread(target=reader) for _ in range(2)]
        writers = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
        for t in readers + writers:
            t.start()
        for t in writers:
            t.join()
        stop.set()
        for t in readers:
            t.join()
        assert failures == []
        assert reg.map_resizes > 0
        assert reg.counts()[State.TRACKED] == (4000, 400_000)
        assert reg.check() == []


def test_meta(tmp_path: Path) -> None:
    with Registry(tmp_path / "r") as reg:
        assert reg.meta_get("last_full_scan_ms") is None
        assert reg.meta_get("x", 5) == 5
        reg.meta_set("last_full_scan_ms", T0)
        assert reg.meta_get("last_full_scan_ms") == T0


# ------------------------------------------------------------- lock, readonly


def test_lock_refuses_second_instance_in_process(tmp_path: Path) -> None:
    path = tmp_path / "r"
    with Registry(path):
        with pytest.raises(RegistryLockedError, match="another walmgr holds") as exc:
            Registry(path)
        assert str(path) in str(exc.value)
        assert f"pid {os.getpid()}" in str(exc.value)
    with Registry(path) as again:  # released on close
        assert again.counts()[State.TRACKED] == (0, 0)


def test_lock_refuses_second_instance_in_subprocess(tmp_path: Path) -> None:
    path = tmp_path / "r"
    with Registry(path):
        proc = run_python(
            f"""
            import sys
            from walmgr.registry import Registry, RegistryLockedError
            try:
                Registry({str(path)!r})
            except RegistryLockedError as e:
                print(e)
                sys.exit(3)
            """
        )
    assert proc.returncode == 3, proc.stderr
    assert "another walmgr holds" in proc.stdout and str(path) in proc.stdout


def test_readonly_while_locked(tmp_path: Path) -> None:
    path = tmp_path / "r"
    with Registry(path) as reg:
        reg.put_many([rec(1), rec(2, State.CANDIDATE)])
        reg.meta_set("last_cycle_ms", T0)
        proc = run_python(
            f"""
            from walmgr.registry import Registry, RegistryError
            from walmgr.model import State
            with Registry({str(path)!r}, readonly=True) as ro:
                print(ro.counts()[State.TRACKED], ro.counts()[State.CANDIDATE], ro.meta_get("last_cycle_ms"))
                print(ro.get({wal_key(1)!r}).state.value)
                try:
                    ro.put_many([])
                except RegistryError as e:
                    print("refused:", e)
            """
        )
        assert proc.returncode == 0, proc.stderr
        lines = proc.stdout.splitlines()
        assert lines[0] == f"(1, 100) (1, 100) {T0}"
        assert lines[1] == "tracked"
        assert "read-only" in lines[2]
        # The writer is unaffected.
        reg.put_many([rec(3)])
        assert reg.counts()[State.TRACKED] == (2, 200)


def test_readonly_of_missing_or_foreign_dir(tmp_path: Path) -> None:
    with pytest.raises(RegistryError, match="no walmgr registry"):
        Registry(tmp_path / "nothing", readonly=True)
    env = lmdb.open(str(tmp_path / "foreign"), max_dbs=2)
    env.close()
    with pytest.raises(RegistryError, match="not a walmgr registry"):
        Registry(tmp_path / "foreign", readonly=True)


def test_corrupt_record_names_key(tmp_path: Path) -> None:
    path = tmp_path / "r"
    key = wal_key(1)
    with Registry(path) as reg:
        reg.put_many([rec(1), rec(2)])
    env = lmdb.open(str(path), max_dbs=8)
    with env.begin(write=True) as txn:
        txn.put(key.encode(), b"\xc1garbage", db=env.open_db(b"objects", txn=txn))
    env.close()
    with Registry(path) as reg:
        with pytest.raises(RegistryCorruptError, match="corrupt") as exc:
            reg.get(key)
        assert exc.value.key == key and repr(key) in str(exc.value)
        with pytest.raises(RegistryCorruptError) as exc2:
            list(reg.records())
        assert exc2.value.key == key
        assert reg.get(wal_key(2)) == rec(2)


# ------------------------------------------------------------ stateful model

KEYS = 8


class RegistryModel(RuleBasedStateMachine):
    """Every write against a dict model: key -> record."""

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="walmgr-reg-")
        self.reg = Registry(self.dir, sync=False)
        self.model: dict[str, ObjectRecord] = {}
        self.now = T0
        self.deleted_files = 0

    def teardown(self) -> None:
        self.reg.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    @rule(
        i=st.integers(0, KEYS - 1),
        state=st.sampled_from([State.TRACKED, State.CANDIDATE, State.INVALID, State.DELETED, State.GONE]),
        size=st.integers(0, 1000),
    )
    def put(self, i: int, state: State, size: int) -> None:
        r = rec(i, state, size=size, deleted_ms=self.now if state in (State.DELETED, State.GONE) else -1)
        self.reg.put_many([r])
        self.model[r.key] = r

    @rule(i=st.integers(0, KEYS - 1), size=st.integers(0, 1000))
    def put_new(self, i: int, size: int) -> None:
        r = rec(i, size=size)
        added = self.reg.put_new([r])
        assert (added == [r]) == (r.key not in self.model)
        self.model.setdefault(r.key, r)

    @rule(keys=st.sets(st.integers(0, KEYS - 1)))
    def plan(self, keys: set[int]) -> None:
        # INVALID ones are refused outright (plan_invalid_is_refused).
        want = [
            self.model[wal_key(i)]
            for i in sorted(keys)
            if wal_key(i) in self.model and self.model[wal_key(i)].state != State.INVALID
        ]
        planned = self.reg.plan(want, self.now)
        expect = [r for r in want if r.state in (State.TRACKED, State.CANDIDATE)]
        assert [r.key for r in planned] == [r.key for r in expect]
        for r in planned:
            self.model[r.key] = r

    @rule(keys=st.sets(st.integers(0, KEYS - 1)))
    def record_deleted(self, keys: set[int]) -> None:
        ks = [wal_key(i) for i in sorted(keys)]
        n = self.reg.record_deleted(ks, self.now)
        changed = 0
        for k in ks:
            old = self.model.get(k)
            if old is not None and old.state != State.DELETED:
                self.model[k] = old.with_state(State.DELETED, deleted_ms=self.now)
                changed += 1
        assert n == changed
        self.deleted_files += changed

    @rule(keys=st.sets(st.integers(0, KEYS - 1)))
    def unplan(self, keys: set[int]) -> None:
        ks = [wal_key(i) for i in sorted(keys)]
        self.reg.unplan(ks, "again")
        for k in ks:
            old = self.model.get(k)
            if old is not None and old.state == State.PLANNED:
                self.model[k] = old.with_state(State.CANDIDATE, note="again")

    @rule(keys=st.sets(st.integers(0, KEYS - 1)), before=st.integers(0, KEYS))
    def mark_gone(self, keys: set[int], before: int) -> None:
        ks = [wal_key(i) for i in sorted(keys)]
        marked = self.reg.mark_gone(ks, self.now, created_before_ms=T0 + before)
        expect = [
            k
            for k in ks
            if k in self.model
            and self.model[k].state in (State.TRACKED, State.CANDIDATE, State.PLANNED)
            and self.model[k].created_ms < T0 + before
        ]
        assert marked == expect
        for k in expect:
            self.model[k] = self.model[k].with_state(
                State.GONE, note="no longer listed by a full scan", deleted_ms=self.now
            )

    @rule(advance=st.integers(0, 100), retention=st.integers(0, 200))
    def purge(self, advance: int, retention: int) -> None:
        self.now += advance
        n = self.reg.purge_tombstones(self.now, retention)
        expired = [
            k
            for k, r in self.model.items()
            if r.state in (State.DELETED, State.GONE) and r.deleted_ms < self.now - retention
        ]
        assert n == len(expired)
        for k in expired:
            del self.model[k]

    @rule()
    def reopen(self) -> None:
        self.reg.close()
        self.reg = Registry(self.dir, sync=False)

    @precondition(lambda self: any(r.state == State.INVALID for r in self.model.values()))
    @rule()
    def plan_invalid_is_refused(self) -> None:
        r = next(r for r in self.model.values() if r.state == State.INVALID)
        with pytest.raises(ValueError, match="INVALID"):
            self.reg.plan([r], self.now)

    @invariant()
    def agrees(self) -> None:
        expect: dict[State, tuple[int, int]] = {}
        for s in State:
            rs = [r for r in self.model.values() if r.state == s]
            expect[s] = (len(rs), sum(r.size for r in rs))
        assert self.reg.counts() == expect
        assert {r.key for r in self.reg.planned(100)} == {k for k, r in self.model.items() if r.state == State.PLANNED}
        assert {r.key: r for r in self.reg.records()} == self.model
        assert self.reg.meta_get(COUNTER_DELETED_FILES, 0) == self.deleted_files
        assert self.reg.check() == []


TestRegistryModel = RegistryModel.TestCase
TestRegistryModel.settings = settings(
    max_examples=40, stateful_step_count=25, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


# -------------------------------------------------------------------- config
# (walmgr/config.py has no test module of its own in this change.)


def test_config_defaults_and_age_gate(tmp_path: Path) -> None:
    cfg = WalmgrConfig.for_cli(f"file://{tmp_path}/s", str(tmp_path / "r"))
    assert cfg.prefix == "wal"
    assert cfg.age_gate_ms == 30_000 + 10_000 + 60_000
    assert cfg.delete_batch_size == 250 and cfg.tombstone_retention_ms == 7 * 86_400_000
    assert cfg.store_url == f"file://{tmp_path}/s"
    assert cfg.controller_address is None and cfg.cluster_file is None and cfg.listen_address is None


def test_config_s3_url_prefix() -> None:
    walmgr_s3 = "reader=obstore&retry=adaptive"  # walmgr's S3 defaults (S3_URL_DEFAULTS)
    assert split_store_url("s3://bkt/some/pre/?endpoint=http://h:1") == (
        f"s3://bkt?endpoint=http://h:1&{walmgr_s3}",
        "some/pre",
    )
    assert split_store_url("s3://bkt?region=r") == (f"s3://bkt?region=r&{walmgr_s3}", "")
    assert split_store_url("s3://bkt?reader=boto3") == ("s3://bkt?reader=boto3&retry=adaptive", "")
    assert split_store_url("/data/objects") == ("/data/objects", "")
    cfg = WalmgrConfig.for_cli("s3://bkt/walp?endpoint=http://h:1", "/r")
    assert cfg.prefix == "walp" and cfg.store_url == f"s3://bkt?endpoint=http://h:1&{walmgr_s3}"
    assert WalmgrConfig.for_cli("s3://bkt?endpoint=http://h:1", "/r", prefix="x/y/").prefix == "x/y"
    for bad_prefix in ("other", "wal"):  # an explicit prefix must agree, even the default
        with pytest.raises(WalmgrConfigError, match=r"prefix: .*disagrees"):
            WalmgrConfig.for_cli("s3://bkt/walp", "/r", prefix=bad_prefix)
    assert cfg.replace(grace_ms=1).grace_ms == 1
    with pytest.raises(WalmgrConfigError, match="disagrees"):
        cfg.replace(prefix="wal")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"grace_ms": 100, "reader_cache_ttl_ms": 51}, "grace_ms: 100 is below 2 \\* reader_cache_ttl_ms"),
        ({"delete_batch_size": 0}, "delete_batch_size: must be in \\[1, 1000\\]"),
        ({"delete_batch_size": 1001}, "delete_batch_size"),
        ({"commit_deadline_ms": 0}, "commit_deadline_ms: must be > 0"),
        ({"max_clock_skew_ms": -1}, "max_clock_skew_ms: must be >= 0"),
        ({"grace_ms": True}, "grace_ms: must be int, got bool"),
        ({"cycle_interval_ms": "30000"}, "cycle_interval_ms: must be int, got str"),
        ({"prefix": "/"}, "prefix: must not be empty"),
        ({"prefix": "a//b"}, "prefix: "),
        ({"metadata": "controller://host"}, "metadata: expected HOST:PORT"),
        ({"listen": "nope"}, "listen: expected HOST:PORT"),
        ({"metrics_port": 70000}, "metrics_port"),
        ({"bogus_ms": 1}, "unknown keys \\['bogus_ms'\\]"),
    ],
)
def test_config_refuses(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(WalmgrConfigError, match=message):
        WalmgrConfig.for_cli("file:///s", "/r", **overrides)


def test_config_grace_exactly_twice_the_cache_ttl_is_fine() -> None:
    cfg = WalmgrConfig.for_cli("file:///s", "/r", grace_ms=100, reader_cache_ttl_ms=50)
    assert cfg.age_gate_ms == 30_000 + 10_000 + 100


def test_config_addresses() -> None:
    cfg = WalmgrConfig.for_cli(
        "file:///s", "/r", metadata="controller://10.0.0.1:9093", listen="0.0.0.0:0", metrics_port=9100
    )
    assert cfg.controller_address == ("10.0.0.1", 9093)
    assert cfg.listen_address == ("0.0.0.0", 0)
    assert WalmgrConfig.for_cli("file:///s", "/r", metadata="/etc/cluster.toml").cluster_file == "/etc/cluster.toml"


def test_load_config(tmp_path: Path) -> None:
    path = tmp_path / "walmgr.toml"
    path.write_text(
        'store = "s3://bucket/wal?endpoint=http://127.0.0.1:8333"\n'
        f'registry = "{tmp_path / "reg"}"\n'
        "grace_ms = 120000\nreader_cache_ttl_ms = 60000\ndelete_batch_size = 1000\n"
        'metadata = "controller://127.0.0.1:9093"\n'
    )
    cfg = load_config(path)
    assert cfg.prefix == "wal"
    assert cfg.store_url == "s3://bucket?endpoint=http://127.0.0.1:8333&reader=obstore&retry=adaptive"
    assert cfg.grace_ms == 120_000 and cfg.age_gate_ms == 30_000 + 10_000 + 120_000

    path.write_text('store = "file:///s"\nregistry = "/r"\ngrace_msec = 5\n')
    with pytest.raises(WalmgrConfigError, match="grace_msec: unknown key") as exc:
        load_config(path)
    assert str(path) in str(exc.value) and exc.value.key == "grace_msec"

    path.write_text('store = "file:///s"\nregistry = "/r"\ngrace_ms = 10\nreader_cache_ttl_ms = 10\n')
    with pytest.raises(WalmgrConfigError, match="grace_ms: 10 is below") as exc:
        load_config(path)
    assert exc.value.path == str(path) and exc.value.key == "grace_ms"

    path.write_text('registry = "/r"\n')
    with pytest.raises(WalmgrConfigError, match="store: missing"):
        load_config(path)
    path.write_text('store = "gs://b"\nregistry = "/r"\n')
    with pytest.raises(WalmgrConfigError, match="store: store URL 'gs://b': scheme"):
        load_config(path)
    path.write_text('store = "s3://b/one"\nregistry = "/r"\nprefix = "wal"\n')
    with pytest.raises(WalmgrConfigError, match="prefix: 'wal' disagrees"):
        load_config(path)
    path.write_text("store = [\n")
    with pytest.raises(WalmgrConfigError, match="not valid TOML"):
        load_config(path)
    with pytest.raises(WalmgrConfigError, match="cannot read"):
        load_config(tmp_path / "missing.toml")


@pytest.mark.parametrize(
    ("scan_toml", "message"),
    [
        ('[scan]\nengine = "flink"\n', "scan.engine: must be one of local, spark, got 'flink'"),
        ('[scan]\nengin = "spark"\n', "scan.engin: unknown key"),
        ('[scan]\nspark_master = ""\n', "scan.spark_master: must name a Spark master"),
        ("[scan]\nspark_master = 7\n", "scan.spark_master: must be str, got int"),
        ('scan = "spark"\n', "scan: must be a table"),
        ('scan_engine = "spark"\n', "scan_engine: unknown key"),  # only the [scan] table spells it
    ],
)
def test_load_config_scan_table_errors(tmp_path: Path, scan_toml: str, message: str) -> None:
    path = tmp_path / "walmgr.toml"
    path.write_text('store = "file:///s"\nregistry = "/r"\n' + scan_toml)
    with pytest.raises(WalmgrConfigError, match=message) as exc:
        load_config(path)
    assert exc.value.path == str(path)


def test_load_config_scan_table(tmp_path: Path) -> None:
    path = tmp_path / "walmgr.toml"
    path.write_text('store = "file:///s"\nregistry = "/r"\n')
    assert (load_config(path).scan_engine, load_config(path).scan_spark_master) == ("local", "local[*]")
    path.write_text(
        'store = "file:///s"\nregistry = "/r"\nscan.engine = "spark"\nscan.spark_master = "spark://h:7077"\n'
    )
    cfg = load_config(path)
    assert (cfg.scan_engine, cfg.scan_spark_master) == ("spark", "spark://h:7077")
