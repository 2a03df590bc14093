"""Where a drained broker's replicas go: ``partlog topics drain``'s plan,
a pure function of the metadata (no I/O), so it is tested alone.

For each partition with a replica on the drained broker (and no
reassignment in progress), the target is its replica list with that broker
replaced in place (a preferred leader's replacement becomes the preferred
leader).  The replacement is, in this order of preference:

1. a broker in the drained broker's AZ (a producer's representative and a
   consumer's nearest replica stay in that AZ, docs/design/reassignment.md);
2. else a broker in an AZ none of the partition's other replicas is in
   (replicas stay in distinct AZs while they can, as at creation);
3. else any broker;

never one that already holds a replica of the partition, and among equals
the one holding the fewest replicas so far (counting the plan's own moves),
then the lowest id.  A partition with no broker left to take its replica is
left out, and named in ``Drain.stuck``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from partlog.controller.cluster_meta import BrokerInfo, TopicInfo

__all__ = ["Drain", "drain_targets"]


@dataclass(frozen=True, slots=True)
class Drain:
    """The plan: per (topic, partition) its target replicas, and the
    partitions no broker can take over (too few brokers)."""

    targets: dict[tuple[str, int], tuple[int, ...]] = field(default_factory=dict)
    stuck: tuple[tuple[str, int], ...] = ()


def drain_targets(topics: Iterable[TopicInfo], brokers: Iterable[BrokerInfo], broker_id: int) -> Drain:
    """The plan to move every replica off ``broker_id``; ``brokers`` are
    the ones that may take replicas (the drained one is never chosen)."""
    topics = sorted(topics, key=lambda t: t.name)
    az = {b.broker_id: b.az for b in brokers}
    drained_az = az.get(broker_id)
    takers = sorted(b for b in az if b != broker_id)
    load: Counter[int] = Counter({b: 0 for b in takers})
    for t in topics:
        for p in t.partitions:
            load.update(r for r in p.replicas if r in load)
    targets: dict[tuple[str, int], tuple[int, ...]] = {}
    stuck: list[tuple[str, int]] = []
    for t in topics:
        for i, p in enumerate(t.partitions):
            if broker_id not in p.replicas or p.adding or p.removing:
                continue
            others = [r for r in p.replicas if r != broker_id]
            free = [b for b in takers if b not in p.replicas]
            if not free:
                stuck.append((t.name, i))
                continue
            their_azs = {az.get(r) for r in others}
            pick = min(free, key=lambda b: (_tier(az[b], drained_az, their_azs), load[b], b))
            load[pick] += 1
            targets[(t.name, i)] = tuple(pick if r == broker_id else r for r in p.replicas)
    return Drain(targets, tuple(stuck))


def _tier(b_az: str, drained_az: str | None, their_azs: set[str | None]) -> int:
    """0: the drained broker's AZ; 1: an AZ without a replica; 2: any."""
    return 0 if b_az == drained_az else 1 if b_az not in their_azs else 2
