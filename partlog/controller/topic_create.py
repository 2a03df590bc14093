"""New topics as Kafka's controller decides them (ReplicationControlManager
.createTopics / createTopic), shared by the embedded controller and etcd.

Pure: a :class:`NewTopic` and a :class:`CreateState` (what the cluster holds)
in, the new partitions or Kafka's refusal out; nothing is written here.  A
batch (:func:`plan_topics`) is decided against the state as each earlier
topic of the same batch leaves it, so the embedded controller writes a whole
CreateTopics request in one transaction (one fsync, one new metadata
version) rather than one per topic.

Manual replica assignments (CreateTopics ``assignments``), in Kafka's order
of checks (:func:`manual_partitions`):

1. a partition index given twice: INVALID_REPLICA_ASSIGNMENT;
2. each partition's replicas (``validateManualPartitionAssignment``): not
   empty, every broker registered and named once (checked in id order, so
   the message names the broker Kafka's names), as many as the first
   partition's: INVALID_REPLICA_ASSIGNMENT;
3. at least one of them active (registered, not fenced):
   INVALID_REPLICA_ASSIGNMENT; the ISR is the active ones, the first leads;
4. the indexes 0..n-1 with no gap: INVALID_REPLICA_ASSIGNMENT.

``num_partitions`` and ``replication_factor`` must then be -1
(INVALID_REQUEST, :func:`shape_refusal`): the Kafka front end checks that
before the controller too.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from partlog.controller.cluster_meta import BrokerInfo, PartitionInfo, TopicInfo
from partlog.controller.partition_admin import ASSIGNMENT_ITEMS_PER_REQUEST_MAX
from partlog.controller.rules import (
    Overrides,
    Refused,
    assign_replicas,
    check_assignment,
    new_overrides,
    valid_topic_name,
)
from partlog.kafka.errors import Errors
from partlog.limits import BROKERS_MAX, PARTITIONS_PER_CLUSTER_MAX, PARTITIONS_PER_TOPIC_MAX
from partlog.rpc.wire import WireError, expect_int, expect_list, expect_map, expect_str

__all__ = [
    "ASSIGNMENTS_RPC_VERSION",
    "Assignment",
    "CreateState",
    "NewTopic",
    "PlannedTopic",
    "assignment_bounds",
    "dec_create_topics_assignments",
    "enc_assignments",
    "manual_partitions",
    "plan_topic",
    "plan_topics",
    "shape_refusal",
]

# The RPC version whose create_topics carries "assignments" (and whose
# answer carries a refusal's message).
ASSIGNMENTS_RPC_VERSION = 3

# One partition's manual assignment: (partition index, replicas in order).
Assignment = tuple[int, tuple[int, ...]]


@dataclass(frozen=True, slots=True)
class NewTopic:
    """One topic a CreateTopics asks: its shape (the defaults already
    applied) or, with ``assignments``, its partitions' replicas."""

    name: str
    partitions: int
    replication_factor: int
    configs: Mapping[str, str] | None = None
    assignments: tuple[Assignment, ...] | None = None


@dataclass(frozen=True, slots=True)
class CreateState:
    """What a batch is decided against: the alive brokers (in the order
    replicas are assigned over),
    whether an id is registered (fenced or not), the partitions the cluster
    has, and the existing topic of a name."""

    alive: Sequence[BrokerInfo]
    registered: Callable[[int], bool]
    cluster_partitions: int
    existing: Callable[[str], TopicInfo | None]


@dataclass(frozen=True, slots=True)
class PlannedTopic:
    """A topic to write: its name, partitions (index order) and overrides."""

    name: str
    parts: tuple[PartitionInfo, ...]
    overrides: Overrides | None


def shape_refusal(partitions: int, replication_factor: int) -> Refused | None:
    """Kafka's rule for a topic with assignments: its replication factor,
    then its partitions, are -1 (the assignments say them)."""
    for value, what in ((replication_factor, "replication factor"), (partitions, "numPartitions")):
        if value != -1:
            return Refused(
                Errors.INVALID_REQUEST, f"A manual partition assignment was specified, but {what} was not set to -1."
            )
    return None


def assignment_bounds(assignments: Sequence[tuple[int, Sequence[int]]]) -> Refused | None:
    """Refuse what no cluster of ours could accept before it is sent: more
    partitions than a topic may have (INVALID_PARTITIONS), or a replica list
    longer than the brokers a cluster may have (it must repeat a broker or
    name an unknown one: INVALID_REPLICA_ASSIGNMENT).  Bounds the request the
    front end forwards to the controller."""
    if len(assignments) > PARTITIONS_PER_TOPIC_MAX:
        return Refused(Errors.INVALID_PARTITIONS, f"more than {PARTITIONS_PER_TOPIC_MAX} partitions")
    for index, replicas in assignments:
        if len(replicas) > BROKERS_MAX:
            return Refused(
                Errors.INVALID_REPLICA_ASSIGNMENT,
                f"partition {index}: {len(replicas)} replicas, more than a cluster's {BROKERS_MAX} brokers",
            )
    return None


def manual_partitions(
    assignments: Sequence[Assignment], registered: Callable[[int], bool], active: Callable[[int], bool]
) -> list[PartitionInfo] | Refused:
    """The partitions ``assignments`` give a new topic, or Kafka's refusal
    (see the module's docstring for the order of checks)."""
    parts: dict[int, PartitionInfo] = {}
    rf: int | None = None
    for index, replicas in assignments:
        if index in parts:
            return Refused(
                Errors.INVALID_REPLICA_ASSIGNMENT, f"Found multiple manual partition assignments for partition {index}"
            )
        why = check_assignment(replicas, registered, rf)
        if why is not None:
            return Refused(Errors.INVALID_REPLICA_ASSIGNMENT, why)
        rf = len(replicas)
        isr = tuple(r for r in replicas if active(r))
        if not isr:
            return Refused(
                Errors.INVALID_REPLICA_ASSIGNMENT,
                f"All brokers specified in the manual partition assignment for partition {index} are fenced or "
                "in controlled shutdown.",
            )
        parts[index] = PartitionInfo(isr[0], 0, tuple(replicas), isr, 0)
    if any(i not in parts for i in range(len(parts))):
        return Refused(Errors.INVALID_REPLICA_ASSIGNMENT, "partitions should be a consecutive 0-based integer sequence")
    if not parts:
        # Kafka's createTopic takes an empty list as "no assignments"; the
        # front end sends none then, so an empty list here is a bad request.
        return Refused(Errors.INVALID_REPLICA_ASSIGNMENT, "no partitions assigned")
    return [parts[i] for i in range(len(parts))]


def plan_topic(t: NewTopic, state: CreateState) -> PlannedTopic | TopicInfo | Errors | Refused:
    """What creating ``t`` does: a :class:`PlannedTopic` to write, the
    existing topic when one of the same shape exists (a retried create
    succeeds), or the refusal: INVALID_REQUEST (a bad name),
    TOPIC_ALREADY_EXISTS (another shape), INVALID_PARTITIONS (< 1, over
    PARTITIONS_PER_TOPIC_MAX or the cluster's PARTITIONS_PER_CLUSTER_MAX),
    INVALID_REPLICATION_FACTOR (< 1 or more than the alive brokers), a
    :class:`Refused` for bad assignments, INVALID_CONFIG."""
    if not valid_topic_name(t.name):
        return Errors.INVALID_REQUEST
    parts: list[PartitionInfo] | Refused
    if t.assignments is not None:
        bad_shape = shape_refusal(t.partitions, t.replication_factor)
        if bad_shape is not None:
            return bad_shape
        alive_ids = {b.broker_id for b in state.alive}
        parts = manual_partitions(t.assignments, state.registered, alive_ids.__contains__)
        if isinstance(parts, Refused):
            return parts
        shape = (len(parts), len(parts[0].replicas))
    else:
        shape = (t.partitions, t.replication_factor)
    existing = state.existing(t.name)
    if existing is not None:
        if existing.num_partitions == shape[0] and len(existing.partitions[0].replicas) == shape[1]:
            return existing
        return Errors.TOPIC_ALREADY_EXISTS
    n, rf = shape
    if not 1 <= n <= PARTITIONS_PER_TOPIC_MAX or state.cluster_partitions + n > PARTITIONS_PER_CLUSTER_MAX:
        return Errors.INVALID_PARTITIONS
    if t.assignments is None:
        if not 1 <= rf <= len(state.alive):
            return Errors.INVALID_REPLICATION_FACTOR
        parts = [PartitionInfo(r[0], 0, r, r, 0) for r in assign_replicas(state.alive, n, rf, state.cluster_partitions)]
    overrides = new_overrides(t.configs)
    if isinstance(overrides, Errors):
        return overrides
    assert not isinstance(parts, Refused)
    return PlannedTopic(t.name, tuple(parts), overrides)


def plan_topics(
    topics: Sequence[NewTopic],
    state: CreateState,
    new_uuid: Callable[[], uuid.UUID],
    taken: Callable[[uuid.UUID], bool],
) -> dict[str, TopicInfo | Errors | Refused]:
    """Decide a batch in order, each topic against the state the earlier
    ones leave (their partitions count; a name given twice answers as a
    retry of the first).  New topics get ids from ``new_uuid``; an id
    ``taken`` (a repeating uuid source) is TOPIC_ALREADY_EXISTS rather than
    two topics merged.  The TopicInfo of a new topic is what to write."""
    out: dict[str, TopicInfo | Errors | Refused] = {}
    planned: dict[str, TopicInfo] = {}
    ids: set[uuid.UUID] = set()
    cluster_partitions = state.cluster_partitions
    for t in topics:
        here = CreateState(
            state.alive, state.registered, cluster_partitions, lambda n: planned.get(n) or state.existing(n)
        )
        p = plan_topic(t, here)
        if not isinstance(p, PlannedTopic):
            out[t.name] = p
            continue
        tid = new_uuid()
        if taken(tid) or tid in ids:
            out[t.name] = Errors.TOPIC_ALREADY_EXISTS
            continue
        ids.add(tid)
        info = TopicInfo(tid, t.name, p.parts, p.overrides)
        planned[t.name] = info
        out[t.name] = info
        cluster_partitions += len(p.parts)
    return out


# ------------------------------------------------------------------ wire
# create_topics' optional "assignments" (RPC version 3, ASSIGNMENTS_RPC_VERSION):
# [[name, [[partition index, [broker ids]]]]]; a controller of version 2
# would skip the field and create the topic by its shape, so the client
# sends it only to a version 3 controller.


def enc_assignments(assignments: Mapping[str, Sequence[Assignment]]) -> list[Any]:
    return [[name, [[i, list(r)] for i, r in a]] for name, a in assignments.items()]


def dec_create_topics_assignments(body: Any) -> dict[str, tuple[Assignment, ...]]:
    """The manual assignments a create_topics asks, by topic name; all of a
    request's together at most ASSIGNMENT_ITEMS_PER_REQUEST_MAX items."""
    w = "create_topics"
    out: dict[str, tuple[Assignment, ...]] = {}
    items = 0
    for i, item in enumerate(expect_list(expect_map(body, w).get("assignments", []), f"{w}.assignments")):
        name, parts = expect_list(item, f"{w}.assignments[{i}]", 2)
        decoded = []
        for j, part in enumerate(expect_list(parts, f"{w}.assignments[{i}].partitions")):
            what = f"{w}.assignments[{i}].partitions[{j}]"
            index, replicas = expect_list(part, what, 2)
            ids = tuple(expect_int(b, f"{what}.replicas") for b in expect_list(replicas, f"{what}.replicas"))
            items += 1 + len(ids)
            decoded.append((expect_int(index, f"{what}.index"), ids))
        if items > ASSIGNMENT_ITEMS_PER_REQUEST_MAX:
            raise WireError(f"{w}.assignments: more than {ASSIGNMENT_ITEMS_PER_REQUEST_MAX} items")
        out[expect_str(name, f"{w}.assignments[{i}].name")] = tuple(decoded)
    return out
