"""Helpers for tests of the group coordinator on a fake broker: a live
coordinator of group "g" with its offsets partition loaded, and the check
that a new coordinator's load rebuilds exactly what the live one holds."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator, Sequence

from partlog.kafka.errors import Errors
from partlog.kafka.records import TopicIdPartition
from partlog.kafka_front.group_coordinator import GroupCoordinator, partition_for
from partlog.produce.pipeline import BatchResult
from tests.fake_broker import FakeBroker


@contextlib.asynccontextmanager
async def live_coordinator(
    data_partitions: int,
) -> AsyncIterator[tuple[FakeBroker, GroupCoordinator, TopicIdPartition]]:
    """(broker, coordinator, the offsets partition of group "g"), the
    partition loaded; a topic "data" of ``data_partitions`` partitions."""
    broker = FakeBroker()
    broker.metadata.add("data", data_partitions)
    live = GroupCoordinator(broker.port())
    live.start()
    try:
        assert (await live.find_coordinator("g"))[0] == Errors.NONE
        assert (await live._partition("g"))[0] == Errors.NONE
        t = broker.metadata.topics_by_name["__consumer_offsets"]
        yield broker, live, TopicIdPartition(t.topic_id, partition_for("g", t.num_partitions))
    finally:
        await live.close()


async def assert_a_load_rebuilds(broker: FakeBroker, live: GroupCoordinator) -> None:
    """A new coordinator's load holds the live one's offsets and pending ones."""
    fresh = GroupCoordinator(broker.port())
    assert (await fresh._partition("g"))[0] == Errors.NONE
    [held] = live._parts.values()
    [loaded] = fresh._parts.values()
    assert loaded.offsets == held.offsets
    assert {k: v for k, v in loaded.pending.items() if v} == {k: v for k, v in held.pending.items() if v}


@contextlib.contextmanager
def leadership_moves_during_produce(broker: FakeBroker, live: GroupCoordinator, tp: TopicIdPartition) -> Iterator[None]:
    """While inside: each produce first moves ``tp``'s leadership away and
    back (a new leader epoch) and has the coordinator load it again, then
    appends: the append lands after the new coordinator's load."""
    produce = broker.produce

    async def produce_after_a_new_load(
        batches: Sequence[tuple[TopicIdPartition, bytes]],
        *,
        acks: int,
        timeout_ms: int,
        urgent: bool = False,
        transactional_id: str | None = None,
    ) -> list[BatchResult]:
        broker.epochs[tp] = (broker.epochs.get(tp) or 0) + 1  # leadership moved away and came back
        assert (await live.fetch_offsets("g", [("data", 0)]))[0] == Errors.NONE  # the new epoch loaded
        return await produce(
            batches, acks=acks, timeout_ms=timeout_ms, urgent=urgent, transactional_id=transactional_id
        )

    broker.produce = produce_after_a_new_load  # type: ignore[method-assign]
    try:
        yield
    finally:
        broker.produce = produce  # type: ignore[method-assign]
