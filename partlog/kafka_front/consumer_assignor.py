"""The server-side assignors of KIP-848 consumer groups: ``uniform`` (the
default) and ``range``, as Kafka's ``UniformAssignor`` and ``RangeAssignor``
name them.

Contract: :func:`assign` takes the members' subscriptions (topic names), the
subscribed topics' ids and partition counts, and the current target
assignment, and returns the next target: every partition of a subscribed
topic goes to exactly one member subscribed to that topic (none when no
member is), deterministically (sorted iteration, no hashing).

``uniform`` is sticky: a member keeps the partitions it had, up to its share
(the ceiling of partitions over members), so a join or a leave moves as few
partitions as it must; the rest go to the least loaded eligible member.
``range`` gives each topic's partitions in contiguous ranges to the
subscribed members sorted by member id (co-partitioned topics line up).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping

# (topic id, partition): one partition of a subscribed topic.
TopicPartition = tuple[uuid.UUID, int]
Assignment = frozenset[TopicPartition]

UNIFORM = "uniform"
RANGE = "range"
ASSIGNORS = (UNIFORM, RANGE)  # the first is the default (Kafka's group.consumer.assignors)


def assign(
    assignor: str,
    subscriptions: Mapping[str, frozenset[str]],
    topics: Mapping[str, tuple[uuid.UUID, int]],
    current: Mapping[str, Assignment],
) -> dict[str, Assignment]:
    """The target assignment: member id -> partitions.  ``topics``: name ->
    (topic id, partition count) of the subscribed topics that exist."""
    assert assignor in ASSIGNORS, assignor
    eligible: dict[TopicPartition, list[str]] = {}
    for name in sorted(topics):
        topic_id, count = topics[name]
        members = sorted(m for m, subs in subscriptions.items() if name in subs)
        if members:
            for p in range(count):
                eligible[(topic_id, p)] = members
    if assignor == RANGE:
        return _range(subscriptions, topics, eligible)
    return _uniform(subscriptions, eligible, current)


def _range(
    subscriptions: Mapping[str, frozenset[str]],
    topics: Mapping[str, tuple[uuid.UUID, int]],
    eligible: Mapping[TopicPartition, list[str]],
) -> dict[str, Assignment]:
    out: dict[str, set[TopicPartition]] = {m: set() for m in subscriptions}
    for name in sorted(topics):
        topic_id, count = topics[name]
        members = eligible.get((topic_id, 0), [])
        if not members:
            continue
        share, extra = divmod(count, len(members))
        start = 0
        for i, m in enumerate(members):
            n = share + (1 if i < extra else 0)
            out[m].update((topic_id, p) for p in range(start, start + n))
            start += n
    return {m: frozenset(ps) for m, ps in out.items()}


def _uniform(
    subscriptions: Mapping[str, frozenset[str]],
    eligible: Mapping[TopicPartition, list[str]],
    current: Mapping[str, Assignment],
) -> dict[str, Assignment]:
    out: dict[str, set[TopicPartition]] = {m: set() for m in subscriptions}
    if not out:
        return {}
    share = -(-len(eligible) // len(out))  # ceiling
    # Sticky: what a member had and may still have, up to its share.
    for m in sorted(out):
        for tp in sorted(current.get(m, ())):
            if len(out[m]) < share and m in eligible.get(tp, ()):
                out[m].add(tp)
    taken = {tp for ps in out.values() for tp in ps}
    for tp in sorted(eligible):
        if tp not in taken:
            least = min(eligible[tp], key=lambda m: (len(out[m]), m))
            out[least].add(tp)
    return {m: frozenset(ps) for m, ps in out.items()}


__all__ = ["ASSIGNORS", "RANGE", "UNIFORM", "Assignment", "TopicPartition", "assign"]
