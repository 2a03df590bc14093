"""The leader's periodic ISR check walks its led partitions in slices of
``PARTITIONS_PER_LOOP_SLICE``, letting the event loop run between them
(a Kafka fetch on the same loop must not wait out a walk of thousands).
A partition that stopped being led, or was led anew, while the walk
yielded is not checked with its old state (an AlterPartition at an old
leader epoch)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from partlog.kafka.records import TopicIdPartition
from partlog.replication.config import PARTITIONS_PER_LOOP_SLICE
from partlog.replication.isr import IsrChanges
from partlog.replication.partition import LedPartition
from partlog.replication.replica_state import ReplicaState
from partlog.replication.stats import ReplicationStats
from partlog.runtime import ManualClock

LED = 3 * PARTITIONS_PER_LOOP_SLICE


def _led(tp: TopicIdPartition, epoch: int) -> LedPartition:
    return LedPartition(tp, epoch, ReplicaState(leader_id=1, replicas=(1, 2, 3)))


class _Walk(IsrChanges):
    def __init__(self, leds: dict[TopicIdPartition, LedPartition]) -> None:
        self._led = leds
        self._stopping = False
        self.clock = ManualClock()
        self.stats = ReplicationStats()
        self.broker_id = 1
        self.checked: list[LedPartition] = []
        self.stale: list[LedPartition] = []

    def _spawn(self, coro: Any) -> None:  # pragma: no cover - no proposal is made
        raise AssertionError("no ISR change expected")

    def _maybe_alter_isr(self, led: LedPartition, now: int, expand_for: int | None = None) -> None:
        if self._led.get(led.tp) is not led:
            self.stale.append(led)
        self.checked.append(led)


async def _walk_while_roles_change() -> _Walk:
    tps = [TopicIdPartition(uuid.UUID(int=i + 1), 0) for i in range(LED)]
    walk = _Walk({tp: _led(tp, 0) for tp in tps})
    loop_ran_between = []

    async def roles_change() -> None:
        # Runs only once the walk yields: after its first slice.
        while not walk.checked:
            await asyncio.sleep(0)
        loop_ran_between.append(len(walk.checked))
        walk._led[tps[-1]] = _led(tps[-1], 1)  # led anew, at a newer epoch
        del walk._led[tps[-2]]  # no longer led
        walk._stopping = True  # after this walk

    changer = asyncio.ensure_future(roles_change())
    await asyncio.wait_for(walk._isr_loop(), 10)
    await changer
    assert loop_ran_between == [PARTITIONS_PER_LOOP_SLICE]
    return walk


def test_the_isr_walk_yields_between_slices_and_skips_what_changed_meanwhile() -> None:
    walk = asyncio.run(_walk_while_roles_change())
    assert walk.stale == []
    # The two that changed were not checked (the new one waits for the
    # next walk: it was not led when this one began); all others were.
    assert len(walk.checked) == LED - 2
    assert {led.leader_epoch for led in walk.checked} == {0}
