"""The leader's ISR changes: proposals from fetches and a periodic check,
sent to the controller as AlterPartition (a mixin of ReplicaManager)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Any

from partlog.controller.cluster_meta import MetadataSource, PartitionInfo
from partlog.kafka.errors import Errors
from partlog.kafka.records import TopicIdPartition
from partlog.replication.config import ALTER_PARTITION_BACKOFF_MS, ISR_CHECK_INTERVAL_MS, PARTITIONS_PER_LOOP_SLICE
from partlog.replication.partition import LedPartition
from partlog.replication.replica_state import AckResult
from partlog.replication.stats import ReplicationStats
from partlog.runtime import Clock

log = logging.getLogger("partlog.replication.manager")

# AlterPartition answers that leave its outcome unknown (the request may
# have been applied): the members it would add stay in the maximal ISR.
_ALTER_OUTCOME_UNKNOWN = frozenset(
    {Errors.REQUEST_TIMED_OUT, Errors.COORDINATOR_NOT_AVAILABLE, Errors.UNKNOWN_SERVER_ERROR}
)


class IsrChanges:
    broker_id: int
    metadata: MetadataSource
    stats: ReplicationStats
    clock: Clock
    _led: dict[TopicIdPartition, LedPartition]
    _stopping: bool

    def _spawn(self, coro: Awaitable[Any]) -> None:  # pragma: no cover - ReplicaManager's
        raise NotImplementedError

    def _complete(self, led: LedPartition, results: list[AckResult]) -> None:  # pragma: no cover - ReplicaManager's
        raise NotImplementedError

    def _maybe_alter_isr(self, led: LedPartition, now: int, expand_for: int | None = None) -> None:
        if led.alter_inflight or now < led.alter_backoff_until_ms:
            return
        proposal = led.rs.isr_proposal(now, expand_for)
        if proposal is None:
            return
        led.alter_inflight = True
        self._spawn(self._alter_isr(led, proposal))

    async def _alter_isr(self, led: LedPartition, proposal: tuple[int, ...]) -> None:
        before = set(led.rs.isr)
        try:
            answer = await self.metadata.alter_partition(
                self.broker_id, led.tp, led.leader_epoch, led.rs.partition_epoch, proposal
            )
        except Exception as e:  # a MetadataSource must not raise, but one bug must not stop the ISR
            log.exception("alter_partition raised")
            answer = Errors.UNKNOWN_SERVER_ERROR if not isinstance(e, asyncio.CancelledError) else Errors.NONE
        led.alter_inflight = False
        if self._led.get(led.tp) is not led:
            return
        if isinstance(answer, PartitionInfo):
            after = set(answer.isr)
            if after < before:
                self.stats.isr_shrinks += 1
            elif after > before:
                self.stats.isr_expands += 1
            log.info("broker %d: ISR of %s now %s (was %s)", self.broker_id, led.tp, sorted(after), sorted(before))
            self._complete(led, led.rs.isr_committed(after, answer.partition_epoch))
        else:
            self.stats.alter_partition_failures += 1
            # No answer from the controller (timeout, connection lost, an
            # unexpected error): it may have committed the change.
            unknown = answer in _ALTER_OUTCOME_UNKNOWN
            led.rs.isr_failed(outcome_unknown=unknown)
            led.alter_backoff_until_ms = self.clock.wall_ms() + ALTER_PARTITION_BACKOFF_MS
            log.info(
                "broker %d: ISR change of %s to %s %s: %s",
                self.broker_id,
                led.tp,
                proposal,
                "unanswered" if unknown else "refused",
                answer.name,
            )

    async def _isr_loop(self) -> None:
        """Shrink the ISR of followers that stopped fetching (they send no
        fetch that would trigger the check)."""
        while not self._stopping:
            await asyncio.sleep(ISR_CHECK_INTERVAL_MS / 1000)
            now = self.clock.wall_ms()
            leds = list(self._led.values())
            for i, led in enumerate(leds):
                if i and not i % PARTITIONS_PER_LOOP_SLICE:
                    await asyncio.sleep(0)
                if i >= PARTITIONS_PER_LOOP_SLICE and self._led.get(led.tp) is not led:
                    continue  # no longer led, or led anew, since the walk began
                self._maybe_alter_isr(led, now)


__all__ = ["IsrChanges"]
