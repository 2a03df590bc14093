"""walmgr's deletion safety (design.md, "Deletion safety") without
a network: keys that are not WAL keys of the prefix are never planned or
deleted (LocalDirStore), and a deleter that crashes mid-plan resumes without
re-sending or forgetting.  The cases with brokers on loopback are in
tests/integration/test_walmgr_safety.py, those on SeaweedFS in
tests/system/test_walmgr_safety_s3.py; their parts are in
tests/walmgr_safety_cases.py.

No test asserts on timing; every wait is bounded."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from partlog.runtime import SYSTEM_CLOCK
from partlog.wal.key import make_wal_key
from partlog.wal.localdir_store import LocalDirStore
from partlog.wal.objectstore import DeleteResult, ForwardingStore, ObjectStore, ObjectStoreError
from tests.walmgr_helpers import listed
from tests.walmgr_safety_cases import PREFIX, config, now_ms
from walmgr.cycle_report import CycleReport
from walmgr.daemon import Walmgr
from walmgr.deleter import execute_plan
from walmgr.model import ObjectRecord, Source, State
from walmgr.registry import Registry


class Crash(Exception):
    """The process died here (simulated)."""


class RecordingStore(ForwardingStore):
    """Records every delete batch.  ``crash_on`` (a call number) raises
    :class:`Crash` before deleting; ``crash_with`` is raised by every call;
    ``errors_for(key)`` fails some keys; ``unanswered(key)`` deletes a key
    but leaves it out of the answer."""

    def __init__(
        self,
        inner: ObjectStore,
        *,
        crash_on: int = 0,
        crash_with: Exception | None = None,
        errors_for: Callable[[str], str | None] = lambda k: None,
        unanswered: Callable[[str], bool] = lambda k: False,
    ) -> None:
        super().__init__(inner)
        self.calls: list[list[str]] = []
        self.crash_on, self.errors_for, self.unanswered = crash_on, errors_for, unanswered
        self.crash_with = crash_with

    def delete_many(self, keys: Sequence[str]) -> DeleteResult:
        self.calls.append(list(keys))
        if len(self.calls) == self.crash_on:
            raise Crash("walmgr died before this DeleteObjects")
        if self.crash_with is not None:
            raise self.crash_with
        errors = {k: e for k in keys if (e := self.errors_for(k)) is not None}
        silent = {k for k in keys if self.unanswered(k)}
        result = self.inner.delete_many([k for k in keys if k not in errors])
        return DeleteResult([k for k in result.deleted if k not in silent], errors | result.errors)


def planned_registry(tmp_path: Path, objects: ObjectStore, n: int) -> list[str]:
    """``n`` objects in a persisted delete plan (created now: scans leave them alone)."""
    created = now_ms()
    keys = sorted(str(make_wal_key(PREFIX, created, 1, f"{i:04x}")) for i in range(n))
    for k in keys:
        objects.put(k, b"x")
    with Registry(tmp_path / "registry") as reg:
        recs = [ObjectRecord(k, 1, created, 1, (), Source.SCAN, State.TRACKED, created) for k in keys]
        reg.put_many(recs)
        assert len(reg.plan(recs)) == n
    return keys


def test_deleter_resumes_a_persisted_plan_after_a_crash(tmp_path: Path) -> None:
    """A plan of 23 keys, batches of 5; walmgr dies before the second
    DeleteObjects.  A new manager on the same registry sends every key not
    confirmed, never one that was, and every planned key ends DELETED."""
    objects = LocalDirStore(tmp_path / "objects", fsync=False)
    keys = planned_registry(tmp_path, objects, 23)
    cfg = config(tmp_path, "file://" + str(tmp_path / "objects"), delete_batch_size=5)

    async def run(store: RecordingStore) -> CycleReport:
        mgr = Walmgr(cfg, store=store)
        await mgr.start()
        try:
            return await mgr.cycle()
        finally:
            await mgr.stop()

    first = RecordingStore(objects, crash_on=2)
    with pytest.raises(Crash):
        asyncio.run(run(first))
    confirmed = set(first.calls[0])
    assert len(first.calls) == 2 and len(confirmed) == 5
    with Registry(tmp_path / "registry", readonly=True) as reg:
        assert {r.key for r in reg.records({State.DELETED})} == confirmed
        assert {r.key for r in reg.records({State.PLANNED})} == set(keys) - confirmed
    # A new manager on the same registry resumes the plan.
    second = RecordingStore(objects)
    report = asyncio.run(run(second))
    resent = {k for call in second.calls for k in call}
    assert not resent & confirmed, "a key whose deletion was confirmed was sent again"
    assert resent == set(keys) - confirmed
    assert report.deleted is not None and report.deleted.deleted_files == len(keys) - 5
    assert all(len(c) <= 5 for c in first.calls + second.calls)
    with Registry(tmp_path / "registry", readonly=True) as reg:
        assert {r.key for r in reg.records({State.DELETED})} == set(keys), "a planned key was forgotten"
        assert not reg.planned(100) and reg.check() == []
    assert not set(keys) & listed(objects)


def test_partial_delete_failures_stay_planned_and_are_retried(tmp_path: Path) -> None:
    """DeleteObjects answers errors for some keys and nothing for others, or
    fails as a whole: those keys stay planned, and the next run deletes them."""
    objects = LocalDirStore(tmp_path / "objects", fsync=False)
    keys = planned_registry(tmp_path, objects, 17)
    failing = set(keys[1::4])
    silent = set(keys[2::5]) - failing
    reg = Registry(tmp_path / "registry")
    try:
        store = RecordingStore(
            objects, errors_for=lambda k: "SlowDown: injected" if k in failing else None, unanswered=silent.__contains__
        )
        report = execute_plan(store, reg, PREFIX, batch_size=4, clock=SYSTEM_CLOCK)
        assert set(report.failed) == failing | silent
        assert {r.key for r in reg.records({State.PLANNED})} == failing | silent
        assert {r.key for r in reg.records({State.DELETED})} == set(keys) - failing - silent
        assert failing <= listed(objects)
        # A failing DeleteObjects call: everything stays planned.
        broken = RecordingStore(objects, crash_with=ObjectStoreError("injected: 503", retriable=True))
        again = execute_plan(broken, reg, PREFIX, batch_size=4, clock=SYSTEM_CLOCK)
        assert again.deleted_files == 0 and set(again.failed) <= failing | silent
        assert {r.key for r in reg.records({State.PLANNED})} == failing | silent
        # The next run retries them.
        retry = RecordingStore(objects)
        final = execute_plan(retry, reg, PREFIX, batch_size=4, clock=SYSTEM_CLOCK)
        assert final.deleted_files == len(failing | silent) and not final.failed
        assert {k for c in retry.calls for k in c} == failing | silent
        assert all(len(c) <= 4 for c in store.calls + retry.calls)
        assert {r.key for r in reg.records({State.DELETED})} == set(keys) and reg.check() == []
        assert not set(keys) & listed(objects)
    finally:
        reg.close()
