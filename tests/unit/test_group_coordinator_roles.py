"""Which error a broker that is not (yet) the coordinator answers: a
partition the metadata gives this broker but whose replica does not lead
yet (its role is being applied, as right after a cluster starts) is
COORDINATOR_LOAD_IN_PROGRESS, which clients retry where they are, as
Kafka's loading coordinator answers; a partition led elsewhere is
NOT_COORDINATOR.  Regression (librdkafka 0127): OffsetFetch 0.6 s after the
cluster started answered NOT_COORDINATOR, which librdkafka's committed()
does not retry."""

from __future__ import annotations

import asyncio
import dataclasses

from partlog.kafka.errors import Errors
from tests.group_helpers import live_coordinator


def test_a_partition_led_here_but_not_yet_by_its_replica_is_loading() -> None:
    async def run() -> None:
        async with live_coordinator(1) as (broker, live, tp):
            broker.epochs[tp] = None  # the replica does not lead it yet
            assert (await live._partition("g"))[0] == Errors.COORDINATOR_LOAD_IN_PROGRESS
            t = broker.metadata.topics_by_name["__consumer_offsets"]
            elsewhere = dataclasses.replace(t.partitions[tp.partition], leader=broker.broker_id + 1)
            parts = tuple(elsewhere if i == tp.partition else p for i, p in enumerate(t.partitions))
            broker.metadata.topics_by_name["__consumer_offsets"] = dataclasses.replace(t, partitions=parts)
            assert (await live._partition("g"))[0] == Errors.NOT_COORDINATOR
            broker.epochs[tp] = 0
            broker.metadata.topics_by_name["__consumer_offsets"] = t
            assert (await live._partition("g"))[0] == Errors.NONE

    asyncio.run(run())
