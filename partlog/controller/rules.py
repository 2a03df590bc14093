"""The controller's rules as pure functions (topic names, replica
assignment, partition state), shared by both metadata back ends: the
embedded controller (:mod:`partlog.controller.core`) and the etcd one
(:mod:`partlog.controller.etcd_controller`, :mod:`partlog.controller.etcd_meta`).
Neither may carry its own copy: a leader elected one way by one back end
and another way by the other would make their behaviour, and their tests,
diverge.

Kafka's KRaft semantics, simplified (see :mod:`partlog.controller.core`'s
module doc for the rules in words)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from partlog.controller import elr
from partlog.controller.cluster_meta import NO_LEADER, BrokerInfo, ConfigChange, PartitionInfo
from partlog.kafka.errors import Errors
from partlog.kafka.topic_config import TopicConfigError, apply_config_ops, validate_overrides
from partlog.limits import (
    AZ_CHARS_MAX,
    BROKER_ID_MAX,
    HOST_CHARS_MAX,
    PARTITIONS_PER_CLUSTER_MAX,
    PARTITIONS_PER_TOPIC_MAX,
    PORT_MAX,
)

__all__ = [
    "TOPIC_NAME_CHARS_MAX",
    "Refused",
    "added_partitions",
    "after_fencing",
    "alter_overrides",
    "assign_replicas",
    "bump",
    "check_assignment",
    "check_broker_args",
    "needs_reconcile",
    "new_overrides",
    "preferred",
    "valid_topic_name",
]

# Kafka's limit on topic names (249: the name must fit in a file name with a
# partition suffix) and its legal characters.
TOPIC_NAME_CHARS_MAX = 249
_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")


def valid_topic_name(name: str) -> bool:
    """Kafka's rule: 1-249 of ``[a-zA-Z0-9._-]``, and not "." or ".."."""
    return 0 < len(name) <= TOPIC_NAME_CHARS_MAX and name not in (".", "..") and _TOPIC_NAME.fullmatch(name) is not None


def assign_replicas(brokers: Iterable[BrokerInfo], partitions: int, rf: int, start: int) -> list[tuple[int, ...]]:
    """Replica lists for ``partitions`` new partitions, leader first.

    The leader of partition p is broker ``(start + p) mod n`` of the brokers
    sorted by id.  Followers are taken by walking, from the leader, the
    brokers in AZ-interleaved order (AZs sorted, each AZ's brokers by id:
    the first of each AZ, then the second of each, ...), first skipping
    brokers in AZs that already hold a replica, then taking any: so the
    replicas are in distinct AZs whenever ``rf`` <= the number of AZs, also
    with unequal AZs (Kafka's rack-aware assignment does the same)."""
    by_id = sorted(brokers, key=lambda b: b.broker_id)
    n = len(by_id)
    if not 1 <= rf <= n:
        raise ValueError(f"replication factor {rf} with {n} brokers")
    by_az: dict[str, list[BrokerInfo]] = {}
    for b in by_id:
        by_az.setdefault(b.az, []).append(b)
    interleaved: list[BrokerInfo] = []
    for i in range(max(len(v) for v in by_az.values())):
        interleaved.extend(by_az[az][i] for az in sorted(by_az) if i < len(by_az[az]))
    position = {b.broker_id: i for i, b in enumerate(interleaved)}
    out = []
    for p in range(partitions):
        leader = by_id[(start + p) % n]
        reps = [leader.broker_id]
        azs = {leader.az}
        walk = [interleaved[(position[leader.broker_id] + k) % n] for k in range(1, n)]
        for b in walk:
            if len(reps) < rf and b.az not in azs:
                reps.append(b.broker_id)
                azs.add(b.az)
        for b in walk:
            if len(reps) < rf and b.broker_id not in reps:
                reps.append(b.broker_id)
        out.append(tuple(reps))
    return out


@dataclass(frozen=True, slots=True)
class Refused:
    """A request the controller refuses, with Kafka's error and message."""

    error: Errors
    message: str


def added_partitions(
    name: str,
    parts: Sequence[PartitionInfo],
    count: int,
    assignments: Sequence[Sequence[int]] | None,
    *,
    alive_brokers: Sequence[BrokerInfo],
    registered: Callable[[int], bool],
    cluster_partitions: int,
) -> list[PartitionInfo] | Refused:
    """The partitions that grow topic ``name`` (now ``parts``) to ``count``,
    as Kafka's ReplicationControlManager.createPartitions decides them and
    in its order of checks: INVALID_PARTITIONS (not an increase, or over our
    limits), INVALID_REPLICA_ASSIGNMENT (as many assignments as partitions
    added, each valid: see :func:`check_assignment`), then placement.

    Without ``assignments`` the new partitions are placed as a new topic's
    are (:func:`assign_replicas` over ``alive_brokers``, the topic's
    replication factor, starting at ``cluster_partitions``): leader the
    first replica, ISR = replicas, epochs 0.  With them, the ISR is the
    assigned replicas that are alive and the first of them leads (Kafka's)."""
    current = len(parts)
    assert current > 0, f"topic {name} without partitions"
    if count == current:
        return Refused(Errors.INVALID_PARTITIONS, f"Topic already has {current} partition(s).")
    if count < current:
        return Refused(
            Errors.INVALID_PARTITIONS,
            f"The topic {name} currently has {current} partition(s); {count} would not be an increase.",
        )
    added = count - current
    if count > PARTITIONS_PER_TOPIC_MAX or cluster_partitions + added > PARTITIONS_PER_CLUSTER_MAX:
        return Refused(
            Errors.INVALID_PARTITIONS,
            f"{count} partition(s) is more than a topic may have ({PARTITIONS_PER_TOPIC_MAX}) or than the "
            f"cluster has room for ({PARTITIONS_PER_CLUSTER_MAX - cluster_partitions} more)",
        )
    if assignments is not None and len(assignments) != added:
        return Refused(
            Errors.INVALID_REPLICA_ASSIGNMENT,
            f"Attempted to add {added} additional partition(s), but only {len(assignments)} assignment(s) "
            "were specified.",
        )
    rf = len(parts[0].replicas)
    alive = {b.broker_id for b in alive_brokers}
    if assignments is not None:
        out = []
        for i, asked in enumerate(assignments):
            why = check_assignment(asked, registered, rf)
            if why is not None:
                return Refused(Errors.INVALID_REPLICA_ASSIGNMENT, why)
            reps = tuple(asked)
            isr = tuple(r for r in reps if r in alive)
            if not isr:
                return Refused(
                    Errors.INVALID_REPLICA_ASSIGNMENT,
                    f"All brokers specified in the manual partition assignment for partition {current + i} "
                    "are fenced or in controlled shutdown.",
                )
            out.append(PartitionInfo(isr[0], 0, reps, isr, 0))
        return out
    if not alive:
        return Refused(
            Errors.INVALID_REPLICATION_FACTOR,
            f"Unable to replicate the partition {rf} time(s): All brokers are currently fenced or in "
            "controlled shutdown.",
        )
    if rf > len(alive):
        return Refused(
            Errors.INVALID_REPLICATION_FACTOR,
            f"The target replication factor of {rf} cannot be reached because only {len(alive)} broker(s) "
            "are registered.",
        )
    return [PartitionInfo(r[0], 0, r, r, 0) for r in assign_replicas(alive_brokers, added, rf, cluster_partitions)]


def check_assignment(replicas: Sequence[int], registered: Callable[[int], bool], rf: int | None) -> str | None:
    """Kafka's validateManualPartitionAssignment: why ``replicas`` cannot be
    a new partition's replicas (None: they can; ``rf`` None: the first
    partition of a new topic, any count).  Brokers are checked in id
    order, as Kafka does, so the message names the same broker."""
    if not replicas:
        return "The manual partition assignment includes an empty replica list."
    previous = None
    for b in sorted(replicas):
        if not registered(b):
            return f"The manual partition assignment includes broker {b}, but no such broker is registered."
        if b == previous:
            return f"The manual partition assignment includes the broker {b} more than once."
        previous = b
    if rf is not None and len(replicas) != rf:
        return (
            f"The manual partition assignment includes a partition with {len(replicas)} replica(s), but this "
            f"is not consistent with previous partitions, which have {rf} replica(s)."
        )
    return None


def after_fencing(
    p: PartitionInfo, alive: Callable[[int], bool], unclean: bool, min_isr: int = 0
) -> tuple[PartitionInfo, bool]:
    """``p`` once dead brokers left its ISR and, if it has no live leader, an
    election ran.  Returns (new state, whether the election was unclean).
    With ``min_isr`` > 0 the ELR rules apply (:mod:`partlog.controller.elr`:
    the dead leave the ISR, even the last, for the ELR); with 0 KRaft's
    older rule keeps the last ISR member.  An unclean election (none
    eligible, ``unclean`` on) leads with the first alive replica, ISR = {it},
    ELR cleared.  Epochs are bumped by the caller, which compares with ``p``."""
    isr = tuple(r for r in p.isr if alive(r))
    if min_isr > 0:
        p = elr.shrink(p, isr, min_isr)
    else:
        # KRaft keeps the last member: it has every committed record.
        p = replace(p, isr=isr or ((p.leader,) if p.leader in p.isr else p.isr[:1]))
    if p.leader != NO_LEADER and alive(p.leader) and p.leader in p.isr:
        return p, False
    p = elr.elect(p, alive)
    if p.leader == NO_LEADER and unclean:
        leader = next((r for r in p.replicas if alive(r)), NO_LEADER)
        if leader != NO_LEADER:
            return replace(p, leader=leader, isr=(leader,), elr=()), True
    return p, False


def bump(old: PartitionInfo, new: PartitionInfo) -> PartitionInfo:
    """``new`` with the epochs a change from ``old`` earns: a new leader, or
    replicas that lose a member (a reassignment's end, KRaft's rule), bump
    both; any other change (ISR, replicas, a reassignment's lists) the
    partition epoch."""
    if new.leader != old.leader or not set(old.replicas) <= set(new.replicas):
        return replace(new, leader_epoch=old.leader_epoch + 1, partition_epoch=old.partition_epoch + 1)
    if (new.isr, new.replicas, new.adding, new.removing, new.elr) != (
        old.isr,
        old.replicas,
        old.adding,
        old.removing,
        old.elr,
    ):
        return replace(new, leader_epoch=old.leader_epoch, partition_epoch=old.partition_epoch + 1)
    return old


def preferred(p: PartitionInfo, alive: Callable[[int], bool]) -> PartitionInfo:
    """``p`` led by its first replica when that one is alive, in the ISR and
    not leading (Kafka's preferred-leader election), else ``p`` unchanged."""
    first = p.replicas[0]
    if p.leader != first and first in p.isr and alive(first):
        return replace(p, leader=first)
    return p


def needs_reconcile(p: PartitionInfo, alive: Callable[[int], bool]) -> bool:
    """Whether :func:`after_fencing` has anything to do for ``p``: it is
    offline, or its leader or an ISR member is not alive."""
    return p.leader == NO_LEADER or not all(alive(r) for r in p.isr)


Overrides = tuple[tuple[str, str], ...]


def new_overrides(configs: Mapping[str, str] | None) -> Overrides | Errors | None:
    """A new topic's overrides as kept (None: none asked), or INVALID_CONFIG."""
    if not configs:
        return None
    try:
        validate_overrides(configs)
    except TopicConfigError:
        return Errors.INVALID_CONFIG
    return tuple(sorted(configs.items()))


def alter_overrides(current: Overrides | None, change: ConfigChange) -> tuple[Errors, str | None, Overrides]:
    """A topic's overrides after ``change`` (Kafka's ConfigurationControlManager:
    validated whole), or INVALID_CONFIG and Kafka's message."""
    replace_all, ops = change
    try:
        new = apply_config_ops(dict(current or ()), ops, replace=replace_all)
    except TopicConfigError as e:
        return Errors.INVALID_CONFIG, str(e), current or ()
    return Errors.NONE, None, tuple(sorted(new.items()))


def check_broker_args(broker_id: int, az: str, host: str, port: int) -> None:
    """A registration's own fields (ValueError: the caller's bug, see Controller)."""
    if not 0 <= broker_id <= BROKER_ID_MAX:
        raise ValueError(f"broker_id must be in [0, {BROKER_ID_MAX}], got {broker_id}")
    if not 0 < len(az) <= AZ_CHARS_MAX:
        raise ValueError(f"az must be 1-{AZ_CHARS_MAX} characters, got {az!r:.300}")
    if len(host) > HOST_CHARS_MAX:
        raise ValueError(f"host must be at most {HOST_CHARS_MAX} characters")
    if not 0 <= port <= PORT_MAX:
        raise ValueError(f"port must be in [0, {PORT_MAX}], got {port}")
