"""A cycle decides its candidates in rounds streamed from the registry
(``CHECK_ROUND_OBJECTS``), so its memory does not grow with the bucket; its
report counts everything and lists at most ``REPORT_KEYS_MAX`` keys a kind.

The checks themselves are scripted (a key is referenced, a doubt, or free):
what is under test is the rounds: every candidate decided exactly once per
cycle, whatever the round size, including candidates whose doubt resolved
into a reference (CANDIDATE -> TRACKED, a state streamed later); nothing
referenced or doubted deleted; everything free deleted.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from partlog.kafka.records import TopicIdPartition
from partlog.wal.localdir_store import LocalDirStore
from tests.clock import Clock
from tests.walmgr_helpers import listed, orphan
from walmgr import cycle_report, daemon
from walmgr.config import WalmgrConfig
from walmgr.decide import Decision
from walmgr.model import ObjectRecord, State

TPS = [TopicIdPartition(uuid.UUID(int=0x20), 0)]
T0 = 1_700_000_000_000
NOW = T0 + 3_600_000


class Scripted(daemon.Walmgr):
    """A walmgr whose reference checks answer from ``verdicts`` (key ->
    "referenced" | "doubt"; any other key is free) and count each key asked."""

    def __init__(self, *args: object, verdicts: dict[str, str], **kw: object) -> None:
        super().__init__(*args, **kw)  # type: ignore[arg-type]
        self.verdicts = verdicts
        self.asked: Counter[str] = Counter()

    async def _check(self, cands: list[ObjectRecord]) -> Decision:
        self.asked.update(r.key for r in cands)
        referenced = {r.key: "scripted" for r in cands if self.verdicts.get(r.key) == "referenced"}
        doubt = {r.key: "scripted" for r in cands if self.verdicts.get(r.key) == "doubt"}
        free = [r.key for r in cands if r.key not in referenced and r.key not in doubt]
        return Decision(free, referenced, doubt)


def _run(tmp: Path, keys_kinds: list[str], flips: list[bool], round_objects: int, report_max: int) -> None:
    store = LocalDirStore(tmp / "store", fsync=False)
    keys = [orphan(store, TPS, created_ms=T0 + i) for i in range(len(keys_kinds))]
    verdicts = {k: kind for k, kind in zip(keys, keys_kinds, strict=True) if kind != "free"}
    cfg = WalmgrConfig.for_cli(str(tmp / "store"), str(tmp / "reg"), delete_batch_size=3)

    async def main() -> None:
        mgr = Scripted(cfg, store=store, clock=Clock(NOW), verdicts=verdicts)
        await mgr.start()
        try:
            first = await mgr.cycle(full_scan=True)
            assert mgr.asked == Counter({k: 1 for k in keys}), "each candidate decided once"
            free = [k for k in keys if k not in verdicts]
            assert first.candidates == len(keys)
            assert first.planned_count == len(free) and first.deleted is not None
            assert first.deleted.deleted_files == len(free)
            assert first.referenced_count == sum(v == "referenced" for v in verdicts.values())
            assert first.doubt_count == sum(v == "doubt" for v in verdicts.values())
            assert len(first.planned) == min(len(free), report_max)
            assert len(first.referenced) == min(first.referenced_count, report_max)
            assert len(first.doubt) == min(first.doubt_count, report_max)
            assert listed(store, "wal/") == set(verdicts)
            # Some doubts resolve into references: CANDIDATE -> TRACKED in
            # the middle of the next cycle's stream.
            doubts = [k for k in keys if verdicts.get(k) == "doubt"]
            for k, flip in zip(doubts, flips, strict=False):
                if flip:
                    verdicts[k] = "referenced"
            mgr.asked.clear()
            await mgr.cycle(full_scan=False)
            assert mgr.asked == Counter({k: 1 for k in verdicts}), "each candidate decided once"
            reg = mgr.registry
            assert reg is not None
            states = {r.key: r.state for r in reg.records({State.TRACKED, State.CANDIDATE})}
            assert states == {k: State.TRACKED if v == "referenced" else State.CANDIDATE for k, v in verdicts.items()}
            assert listed(store, "wal/") == set(verdicts)
        finally:
            await mgr.stop()

    asyncio.run(main())


def test_rounds_smaller_than_the_candidates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(daemon, "CHECK_ROUND_OBJECTS", 4)
    monkeypatch.setattr(cycle_report, "REPORT_KEYS_MAX", 3)
    kinds = ["free", "doubt", "referenced", "free", "doubt", "free", "doubt", "free", "referenced", "free", "doubt"]
    _run(tmp_path, kinds, [True, False, True, True], round_objects=4, report_max=3)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    kinds=st.lists(st.sampled_from(["free", "doubt", "referenced"]), max_size=25),
    flips=st.lists(st.booleans(), max_size=25),
    round_objects=st.integers(1, 8),
    report_max=st.integers(0, 6),
)
def test_any_round_size_decides_each_candidate_once_and_deletes_only_the_free(
    tmp_path_factory: pytest.TempPathFactory, kinds: list[str], flips: list[bool], round_objects: int, report_max: int
) -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(daemon, "CHECK_ROUND_OBJECTS", round_objects)
        mp.setattr(cycle_report, "REPORT_KEYS_MAX", report_max)
        _run(tmp_path_factory.mktemp("rounds"), kinds, flips, round_objects, report_max)
