"""walmgr deletes nothing on answers further apart than ``verdict_window_ms``
(docs/design/release-grace.md, rule 5): a reference moving between brokers
is seen only by answers close together."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import pytest

from partlog.controller.cluster_meta import StaticMetadata
from partlog.kafka.records import TopicIdPartition
from partlog.runtime import ManualClock
from partlog.wal.localdir_store import LocalDirStore
from walmgr.config import WalmgrConfig
from walmgr.daemon import Walmgr
from walmgr.decide import Check, Verdict
from walmgr.model import ObjectRecord, Source, State

WINDOW_MS = 2_000


class SlowAsker:
    """Every broker answers "not referenced", after ``delay_s`` of the clock."""

    def __init__(self, clock: ManualClock, delay_s: float) -> None:
        self.clock = clock
        self.delay_s = delay_s

    async def referenced_files(self, broker_id: int, checks: Sequence[Check]) -> list[int]:
        self.clock.advance(self.delay_s)
        return [int(Verdict.NOT_REFERENCED)] * len(checks)

    async def keys_referenced(self, broker_id: int, keys: Sequence[str]) -> set[str]:
        self.clock.advance(self.delay_s)
        return set()


@pytest.mark.parametrize(("delay_s", "deleted"), [(0.0, True), (WINDOW_MS / 1000, False)])
def test_answers_spanning_more_than_the_window_delete_nothing(tmp_path: Path, delay_s: float, deleted: bool) -> None:
    meta = StaticMetadata.generate(azs=1, brokers_per_az=2, topics={"t": 1})
    [topic] = meta.topics()
    tp = TopicIdPartition(topic.topic_id, 0)
    clock = ManualClock()
    cfg = WalmgrConfig.for_cli(str(tmp_path / "o"), str(tmp_path / "reg"), verdict_window_ms=WINDOW_MS)
    mgr = Walmgr(cfg, store=LocalDirStore(tmp_path / "o"), metadata=meta, clock=clock)
    mgr.cluster_id = meta.cluster_id
    mgr._asker = SlowAsker(clock, delay_s)  # type: ignore[assignment]
    rec = ObjectRecord(
        "wal/00/1-1-00.wal", 10, 1, 1, (tp,), Source.SCAN, State.CANDIDATE, 1, cluster_id=meta.cluster_id
    )
    decision = asyncio.run(mgr._check([rec]))
    if deleted:
        assert decision.delete == [rec.key]
    else:
        assert decision.delete == []
        assert "verdict_window_ms" in decision.doubt[rec.key]
