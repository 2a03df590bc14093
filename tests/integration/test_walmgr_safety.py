"""walmgr's deletion safety (design.md, "Deletion safety") with
real parts: LMDB registries and stores, brokers on loopback, a LocalDirStore
(the parts are in tests/walmgr_safety_cases.py, which says what each case
checks):

1. Under concurrency, nothing referenced is ever deleted.
2. Clock skew within the bound: walmgr's clock ahead, the leader's behind.
3. Leadership changes between asking and deciding, and stale epochs.
6. One active manager per registry (``walmgr run`` in a subprocess).

No test asserts on timing; every wait is bounded."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from partlog.controller.cluster_meta import StaticMetadata
from partlog.kafka.errors import Errors
from partlog.rpc.wire import Verdict
from partlog.wal.localdir_store import LocalDirStore
from tests.clock import Clock
from tests.cluster_helpers import (
    running_cluster,
    topic_partitions,
)
from tests.walmgr_helpers import listed, orphan
from tests.walmgr_safety_cases import (
    DEADLINE_MS,
    GATE_MS,
    PREFIX,
    SKEW_MS,
    WAIT_S,
    at_leader,
    commit,
    config,
    now_ms,
    one_broker,
    safety_under_faults,
    until,
)
from walmgr import cli
from walmgr.cycle_report import CycleReport
from walmgr.daemon import Walmgr
from walmgr.model import State


@pytest.mark.timeout(120)
def test_nothing_referenced_is_deleted_under_concurrent_faults(tmp_path: Path) -> None:
    """LocalDirStore, with a broker restart (item 1 of the module doc)."""
    objects = LocalDirStore(tmp_path / "objects", fsync=False)
    asyncio.run(
        safety_under_faults(tmp_path, objects, "file://" + str(tmp_path / "objects"), records=300, restart=True, seed=5)
    )


def test_clock_skew_within_the_bound_never_deletes_what_a_leader_can_still_commit(tmp_path: Path) -> None:
    """walmgr's clock runs ``max_clock_skew_ms`` ahead of the leader's (the
    bound), with ``grace_ms`` 0 (the tightest gate).  Both clocks step
    through the commit deadline together: walmgr plans only objects the
    leader, by its own clock, already refuses; and the leader refuses
    commits to every object walmgr deleted."""
    objects = LocalDirStore(tmp_path / "objects", fsync=False)
    start = now_ms()
    leader_clock, walmgr_clock = Clock(start), Clock(start + SKEW_MS)

    async def main() -> None:
        async with one_broker(tmp_path, objects, leader_clock) as (broker, meta, tp):
            cfg = config(tmp_path, "file://" + str(tmp_path / "objects"), grace_ms=0)
            assert cfg.age_gate_ms == DEADLINE_MS + SKEW_MS
            mgr = Walmgr(cfg, store=objects, metadata=meta, clock=walmgr_clock)
            await mgr.start()
            try:
                # By the leader's clock: ages around the deadline, and one committed at the very deadline.
                ages = [DEADLINE_MS + 1, DEADLINE_MS, DEADLINE_MS - 1, DEADLINE_MS // 2, 0]
                keys = {orphan(objects, [tp], start - age, cluster_id=meta.cluster_id): start - age for age in ages}
                committed = orphan(objects, [tp], start - DEADLINE_MS, cluster_id=meta.cluster_id)
                size = objects.head(committed).size
                assert await commit(broker, committed, tp, size) == Errors.NONE  # age == deadline: accepted
                created = keys | {committed: start - DEADLINE_MS}
                deleted: set[str] = set()
                for step in (0, 1, DEADLINE_MS // 2, DEADLINE_MS // 2 + 1, DEADLINE_MS + 1):
                    leader_clock.now, walmgr_clock.now = start + step, start + step + SKEW_MS
                    report = await mgr.cycle()
                    for key in report.planned:
                        # Planned only when the leader would refuse a commit of it.
                        assert leader_clock.now - created[key] > DEADLINE_MS, (step, key)
                        assert await commit(broker, key, tp, 1) == Errors.COMMIT_DEADLINE_EXCEEDED
                    deleted |= set(report.planned)
                    for key, c in keys.items():
                        if leader_clock.now - c <= DEADLINE_MS:
                            assert key not in deleted, (step, key)
                            assert key in listed(objects, PREFIX + "/")
                # Every orphan went once the leader refused it; the committed object stays.
                assert deleted == set(keys)
                assert listed(objects, PREFIX + "/") == {committed}
                assert broker.store.referenced_files(set(created)) == {committed}
                reg = mgr.registry
                assert reg is not None
                rec = reg.get(committed)
                assert rec is not None and rec.state == State.TRACKED and "referenced" in rec.note
            finally:
                await mgr.stop()

    asyncio.run(main())


def test_answers_across_a_leadership_change_keep_the_object(tmp_path: Path) -> None:
    """Orphans of a replicated partition, past the gate.  (a) Broker 1, the
    leader at epoch 0, answers NOT_REFERENCED, but before walmgr decides its
    metadata moves on (the same leader at epoch 1; then another leader):
    kept.  (b) The brokers moved to leader 2 at epoch 1 while walmgr still
    asks at epoch 0: the old leader and the new one answer NOT_LEADER: kept.
    (c) walmgr learns the current leader: deleted."""
    objects = LocalDirStore(tmp_path / "objects", fsync=False)
    cfg = config(tmp_path, "file://" + str(tmp_path / "objects"))

    async def main() -> None:
        async with running_cluster(
            tmp_path, objects, partitions=1, replication_factor=3, commit_deadline_ms=DEADLINE_MS
        ) as (brokers, meta):
            [tp] = topic_partitions(meta)
            b = {x.broker_id: x for x in brokers}
            assert meta.leader_of(tp) == 1
            keys = {orphan(objects, [tp], now_ms() - 10 * GATE_MS, cluster_id=meta.cluster_id) for _ in range(3)}
            mgr = Walmgr(cfg, store=objects, metadata=meta)
            await mgr.start()
            try:
                reg = mgr.registry
                assert reg is not None
                answers: list[list[int]] = []
                switch_to: list[StaticMetadata] = []  # the view walmgr gets between answer and decision
                assert b[1]._server is not None
                real = b[1]._server.handlers["referenced_files"]

                async def intercept(body: Any) -> Any:
                    answer = await real(body)
                    answers.append(answer["verdicts"])
                    if switch_to:
                        mgr.metadata = switch_to.pop()
                    return answer

                b[1]._server.handlers["referenced_files"] = intercept

                def kept(report: CycleReport, why: str) -> None:
                    assert not report.planned and set(report.doubt) == keys, report.doubt
                    assert all(why in v for v in report.doubt.values()), report.doubt
                    assert keys <= listed(objects, PREFIX + "/")
                    for k in keys:
                        rec = reg.get(k)
                        assert rec is not None and rec.state == State.CANDIDATE and why in rec.note

                # (a) the same leader at a new epoch; then a new leader.
                for after in (at_leader(meta, 1, 1), at_leader(meta, 2, 1)):
                    mgr.metadata = meta
                    switch_to.append(after)
                    kept(await mgr.cycle(), "leader changed during the check")
                    assert not switch_to
                # The leader answered: not referenced.
                assert answers == [[Verdict.NOT_REFERENCED] * len(keys)] * 2

                # (b) the brokers follow leader 2 at epoch 1; walmgr asks at epoch 0.
                new = at_leader(meta, 2, 1)
                for x in brokers:
                    x.set_metadata(new)
                await until(lambda: b[2].replicas.leader_epoch(tp) == 1, "broker 2 to lead at epoch 1")
                await until(lambda: b[1].replicas.leader_epoch(tp) is None, "broker 1 to follow")
                for stale in (meta, at_leader(meta, 2, 0)):
                    mgr.metadata = stale
                    kept(await mgr.cycle(), Verdict.NOT_LEADER.name)
                assert answers[-1] == [Verdict.NOT_LEADER] * len(keys)  # broker 1's, at epoch 0

                # (c) the current view: they are orphans after all.
                mgr.metadata = new
                report = await mgr.cycle()
                assert set(report.planned) == keys
                assert keys.isdisjoint(listed(objects, PREFIX + "/"))
            finally:
                await mgr.stop()

    asyncio.run(main())


def wait_for_lock(registry: Path, proc: subprocess.Popen[bytes]) -> None:
    """Until ``proc`` holds the registry lock (its pid in the LOCK file)."""
    lock = registry / "LOCK"
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"walmgr run exited with {proc.returncode}"
        with contextlib.suppress(OSError):
            if lock.read_text().strip() == str(proc.pid) and (registry / "data.mdb").exists():
                return
        time.sleep(0.05)
    raise AssertionError("walmgr run did not take the registry lock")


@pytest.mark.timeout(60)
def test_one_active_manager_per_registry(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A second ``walmgr run`` on the registry exits 2 naming it; ``walmgr
    status`` reads it meanwhile; SIGTERM stops the first with exit 0."""
    objects = tmp_path / "objects"
    objects.mkdir()
    registry = tmp_path / "registry"
    args = [sys.executable, "-m", "walmgr.cli", "run", "--store", f"file://{objects}", "--registry", str(registry)]
    first = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    try:
        wait_for_lock(registry, first)
        second = subprocess.run(args, capture_output=True, timeout=20, stdin=subprocess.DEVNULL)
        assert second.returncode == 2, second.stderr.decode()
        assert str(registry) in second.stderr.decode()
        # status reads the registry while the first runs.
        capsys.readouterr()
        assert cli.main(["status", "--json", "--store", f"file://{objects}", "--registry", str(registry)]) == 0
        status = json.loads(capsys.readouterr().out)
        assert status["registry"] == str(registry) and "tracked" in status["states"]
        assert first.poll() is None
        first.send_signal(signal.SIGTERM)
        assert first.wait(WAIT_S) == 0
    finally:
        if first.poll() is None:
            first.kill()
            first.wait(10)
        if first.stderr is not None:
            first.stderr.close()
