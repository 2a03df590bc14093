"""``partlog topics drain``'s plan (partlog.tools.drain_plan) against its
contract, for any cluster shape: every replica leaves the drained broker,
in place, onto a broker that holds none of the partition, preferring the
drained broker's AZ, then an AZ the partition lacks; nothing else moves."""

from __future__ import annotations

import uuid
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from partlog.controller.cluster_meta import BrokerInfo, PartitionInfo, TopicInfo
from partlog.tools.drain_plan import drain_targets


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[BrokerInfo], list[TopicInfo], int]:
    n = draw(st.integers(1, 7))
    azs = draw(st.lists(st.sampled_from("abc"), min_size=n, max_size=n))
    brokers = [BrokerInfo(i + 1, az, "127.0.0.1", 9000 + i) for i, az in enumerate(azs)]
    ids = [b.broker_id for b in brokers]
    topics = []
    for t in range(draw(st.integers(0, 3))):
        parts = []
        for _ in range(draw(st.integers(1, 4))):
            reps = tuple(draw(st.permutations(ids))[: draw(st.integers(1, n))])
            reassigning = draw(st.booleans()) and draw(st.booleans())
            parts.append(PartitionInfo(reps[0], 0, reps, reps, 0, adding=reps[-1:] if reassigning else ()))
        topics.append(TopicInfo(uuid.UUID(int=t + 1), f"t{t}", tuple(parts)))
    return brokers, topics, draw(st.sampled_from(ids))


@settings(max_examples=300, deadline=None)
@given(clusters())
def test_the_plan_moves_every_replica_off_the_broker_and_nothing_else(c: tuple[Any, Any, int]) -> None:
    brokers, topics, drained = c
    az = {b.broker_id: b.az for b in brokers}
    plan = drain_targets(topics, brokers, drained)
    seen = set(plan.targets) | set(plan.stuck)
    assert len(seen) == len(plan.targets) + len(plan.stuck)
    for t in topics:
        for i, p in enumerate(t.partitions):
            key = (t.name, i)
            if drained not in p.replicas or p.adding or p.removing:
                assert key not in seen
                continue
            if len(p.replicas) == len(brokers):
                assert key in plan.stuck  # every other broker already holds it
                continue
            target = plan.targets[key]
            assert drained not in target and len(set(target)) == len(target) == len(p.replicas)
            k = p.replicas.index(drained)
            assert target[:k] + target[k + 1:] == p.replicas[:k] + p.replicas[k + 1:]  # in place
            pick = target[k]
            free = [b for b in az if b not in p.replicas]
            others = {az[r] for r in p.replicas if r != drained}
            if any(az[b] == az[drained] for b in free):
                assert az[pick] == az[drained]
            elif any(az[b] not in others for b in free):
                assert az[pick] not in others


def test_the_plan_spreads_the_moves_over_the_least_loaded() -> None:
    brokers = [BrokerInfo(i, "a", "127.0.0.1", 9000 + i) for i in (1, 2, 3)]
    parts = tuple(PartitionInfo(1, 0, (1,), (1,)) for _ in range(4))
    plan = drain_targets([TopicInfo(uuid.UUID(int=1), "t", parts)], brokers, 1)
    assert sorted(plan.targets.values()) == [(2,), (2,), (3,), (3,)]
