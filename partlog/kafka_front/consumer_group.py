"""KIP-848 consumer groups (``group.protocol=consumer``), sans-IO.

The coordinator side of ConsumerGroupHeartbeat, as Kafka's
``GroupMetadataManager.consumerGroupHeartbeat``: the group has an epoch,
bumped by every change of membership, subscription, assignor or of the
subscribed topics' partition counts; each bump computes a new *target
assignment* (server-side assignor, :mod:`partlog.kafka_front.consumer_assignor`)
at that epoch.  Each member moves toward its target on its own heartbeats,
as Kafka's ``CurrentAssignmentBuilder``:

* STABLE: the member's epoch is the target's, it has all it may have;
* UNREVOKED_PARTITIONS: it must first give up partitions no longer its own;
  it keeps its epoch until a heartbeat's owned partitions show them gone
  (within its rebalance timeout, else it is fenced: removed);
* UNRELEASED_PARTITIONS: it has the target's epoch, but some partitions of
  its target are still held by another member, which must revoke them first.

So a partition is never *owned* (given to, or being revoked by) two members
at once: :meth:`ConsumerGroups.owners` holds that map and a partition is
given only when free.

Member epochs in a request: 0 joins, -1 leaves, -2 leaves a static member
(``group.instance.id``) that will come back and take its place and
assignment; anything else below zero is INVALID_REQUEST.  A member that
misses its session timeout is removed.  Everything is in memory: a new
coordinator (after an offsets partition moves) knows no member, and answers
UNKNOWN_MEMBER_ID (Kafka: GROUP_ID_NOT_FOUND, from its persisted groups),
so members join again with epoch 0.

Time comes in as ``now_ms``; the asyncio shell is
:mod:`partlog.kafka_front.group_coordinator`.
"""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum

from partlog.kafka.dynamic_config import GroupSettings
from partlog.kafka.errors import Errors
from partlog.kafka_front.consumer_assignor import ASSIGNORS, Assignment, TopicPartition, assign

log = logging.getLogger(__name__)

# Kafka's group.consumer.session.timeout.ms and heartbeat.interval.ms (the
# interval every answer tells the member).
SESSION_TIMEOUT_MS_DEFAULT = 45_000
HEARTBEAT_INTERVAL_MS_DEFAULT = 5_000
# Kafka's group.consumer.max.size is unbounded; ours bounds a group's memory.
GROUP_MEMBERS_MAX = 1_000
# Consumer groups one offsets partition's coordinator holds.
GROUPS_MAX = 10_000
# Topics one member may subscribe to, partitions one heartbeat may name.
SUBSCRIBED_TOPICS_MAX = 10_000
OWNED_PARTITIONS_MAX = 100_000
# Kafka's ConsumerGroupMember epochs of a request.
JOIN_EPOCH = 0
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2


class MemberState(Enum):
    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    UNRELEASED_PARTITIONS = "unreleased_partitions"


@dataclass(frozen=True, slots=True)
class HeartbeatIn:
    """One ConsumerGroupHeartbeat, its optional fields None when unchanged."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: Assignment | None = None
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True, slots=True)
class HeartbeatOut:
    error: Errors
    member_id: str = ""
    member_epoch: int = -1
    # The member's assignment, when the answer carries it (None: unchanged).
    assignment: Assignment | None = None
    message: str | None = None
    # The group's consumer.heartbeat.interval.ms (its dynamic config, else Kafka's default).
    heartbeat_interval_ms: int = HEARTBEAT_INTERVAL_MS_DEFAULT


@dataclass(slots=True)
class Member:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed: frozenset[str]
    rebalance_timeout_ms: int
    session_deadline_ms: int
    member_epoch: int = 0
    previous_epoch: int = -1
    state: MemberState = MemberState.STABLE
    assigned: Assignment = frozenset()
    revoking: Assignment = frozenset()
    # The rebalance timeout's deadline while it must revoke partitions.
    revoke_deadline_ms: int | None = None
    # The server assignor it asks for (the group uses the most asked).
    assignor: str | None = None


@dataclass(slots=True)
class ConsumerGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor: str = ASSIGNORS[0]
    members: dict[str, Member] = field(default_factory=dict)
    static: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    target: dict[str, Assignment] = field(default_factory=dict)
    # The subscribed topics (name -> (id, partitions)) the target was computed from.
    topics: dict[str, tuple[uuid.UUID, int]] = field(default_factory=dict)
    owners: dict[TopicPartition, str] = field(default_factory=dict)

    @property
    def state(self) -> str:
        """Kafka's ConsumerGroup state names."""
        if not self.members:
            return "Empty"
        if self.group_epoch != self.assignment_epoch:
            return "Assigning"
        if any(m.member_epoch != self.assignment_epoch or m.state is not MemberState.STABLE
               for m in self.members.values()):  # fmt: skip
            return "Reconciling"
        return "Stable"


class ConsumerGroups:
    """The KIP-848 groups of one coordinator (one offsets partition)."""

    def __init__(
        self,
        *,
        session_timeout_ms: int = SESSION_TIMEOUT_MS_DEFAULT,
        members_max: int = GROUP_MEMBERS_MAX,
        new_uuid: Callable[[], uuid.UUID],
        settings: Callable[[str], GroupSettings] | None = None,
    ) -> None:
        """``settings``: a group's session timeout and heartbeat interval
        (its dynamic GROUP configs); None: ``session_timeout_ms`` and Kafka's
        default interval for every group."""
        assert session_timeout_ms > HEARTBEAT_INTERVAL_MS_DEFAULT and members_max > 0
        fixed = GroupSettings(session_timeout_ms, HEARTBEAT_INTERVAL_MS_DEFAULT)
        self._settings = settings or (lambda _group_id: fixed)
        self.members_max = members_max
        self._new_uuid = new_uuid
        self.groups: dict[str, ConsumerGroup] = {}

    def group(self, group_id: str) -> ConsumerGroup | None:
        return self.groups.get(group_id)

    # ------------------------------------------------------------ heartbeat

    def heartbeat(
        self, req: HeartbeatIn, topics: Mapping[str, tuple[uuid.UUID, int]], now_ms: int, *, version: int = 1
    ) -> HeartbeatOut:
        """One heartbeat: validate, then apply.  ``topics``: every topic's
        name -> (id, partition count) the coordinator knows now."""
        settings = self._settings(req.group_id)
        invalid = _invalid(req, version)
        if invalid is not None:
            log.info("ConsumerGroupHeartbeat of %s in %s refused: %s", req.member_id, req.group_id, invalid)
            return HeartbeatOut(Errors.INVALID_REQUEST, req.member_id, message=invalid)
        if req.server_assignor is not None and req.server_assignor not in ASSIGNORS:
            return HeartbeatOut(Errors.UNSUPPORTED_ASSIGNOR, req.member_id,
                                message=f"{req.server_assignor} is not supported: {', '.join(ASSIGNORS)}")  # fmt: skip
        g = self.groups.get(req.group_id)
        if g is None:
            if req.member_epoch != JOIN_EPOCH:
                # In memory only: a new coordinator forgot the group (Kafka,
                # which keeps it, answers GROUP_ID_NOT_FOUND for none).
                return HeartbeatOut(Errors.UNKNOWN_MEMBER_ID, req.member_id, message=f"Group {req.group_id} not found.")
            if len(self.groups) >= GROUPS_MAX:
                # Empty groups hold only their epochs (offsets live apart): they go first.
                self.groups = {gid: held for gid, held in self.groups.items() if held.members}
            if len(self.groups) >= GROUPS_MAX:
                return HeartbeatOut(Errors.COORDINATOR_NOT_AVAILABLE, req.member_id)
            g = ConsumerGroup(req.group_id)
        if req.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            return self._leave(g, req, now_ms)
        if len(g.members) >= self.members_max and (not req.member_id or req.member_id not in g.members):
            return HeartbeatOut(Errors.GROUP_MAX_SIZE_REACHED, req.member_id,
                                message=f"the group has its maximum of {self.members_max} members")  # fmt: skip
        found = self._member(g, req, now_ms)
        if isinstance(found, HeartbeatOut):
            return found
        m, changed = found
        before = m.assigned
        self.groups[g.group_id] = g
        m.session_deadline_ms = now_ms + settings.session_timeout_ms
        subscribed = {n: topics[n] for n in sorted(_subscribed(g)) if n in topics}
        if changed or subscribed != g.topics:
            g.group_epoch += 1
            g.topics = subscribed
        if g.group_epoch != g.assignment_epoch:
            self._compute_target(g)
        self._reconcile(g, m, req.owned, now_ms)
        # As Kafka: the assignment goes out on a full request or a change.
        full = req.member_epoch == JOIN_EPOCH or (
            req.rebalance_timeout_ms != -1 and req.subscribed_topic_names is not None and req.owned is not None
        )
        return HeartbeatOut(
            Errors.NONE,
            m.member_id,
            m.member_epoch,
            m.assigned if full or m.assigned != before else None,
            heartbeat_interval_ms=settings.heartbeat_interval_ms,
        )

    def _member(self, g: ConsumerGroup, req: HeartbeatIn, now_ms: int) -> HeartbeatOut | tuple[Member, bool]:
        """The request's member (created on a join) and whether the group
        epoch must move; or the error answer (Kafka's
        getOrMaybeSubscribe{Dynamic,Static}ConsumerGroupMember)."""
        mid = req.member_id or str(self._new_uuid())
        if req.member_epoch != JOIN_EPOCH:
            found = self._known(g, req)
            if isinstance(found, HeartbeatOut):
                return found
            m = found
            if req.member_epoch != m.member_epoch and not (
                req.member_epoch < m.member_epoch and req.member_epoch == m.previous_epoch
                and req.owned is not None and req.owned <= m.assigned
            ):  # fmt: skip
                # A retried heartbeat of the previous epoch is fine if it owns
                # nothing it lost (its answer may have been lost).
                return HeartbeatOut(Errors.FENCED_MEMBER_EPOCH, req.member_id)
            return m, self._update(m, req)
        if req.instance_id is not None and req.instance_id in g.static:
            old = g.members[g.static[req.instance_id]]
            # Kafka refuses while the instance is in use; its own member id
            # (kept for life since KIP-1082) rejoining after a fence is let in.
            if old.member_epoch != STATIC_LEAVE_EPOCH and old.member_id != mid:
                return HeartbeatOut(Errors.UNRELEASED_INSTANCE_ID, req.member_id,
                                    message=f"{req.instance_id} is owned by {old.member_id}")  # fmt: skip
            # A static member back: the new member id takes its place and
            # its assignment, at epoch 0 (no rebalance unless its
            # subscription changed).
            del g.members[old.member_id]
            g.target[mid] = g.target.pop(old.member_id, frozenset())
            old.member_id, old.member_epoch, old.previous_epoch = mid, JOIN_EPOCH, JOIN_EPOCH
            g.members[mid] = old
            g.static[req.instance_id] = mid
            for tp in old.assigned:
                g.owners[tp] = mid
            return old, self._update(old, req)
        known = g.members.get(mid)
        if known is not None:
            # A join of a member id the group has (its client was fenced, or
            # restarted with the id it keeps for life): it starts again.
            self._remove(g, known)
        m = Member(mid, req.instance_id, req.rack_id, req.client_id, req.client_host,
                   frozenset(req.subscribed_topic_names or ()), req.rebalance_timeout_ms,
                   now_ms + self._settings(g.group_id).session_timeout_ms, assignor=req.server_assignor)  # fmt: skip
        g.members[mid] = m
        if m.instance_id is not None:
            g.static[m.instance_id] = mid
        return m, True

    @staticmethod
    def _known(g: ConsumerGroup, req: HeartbeatIn) -> Member | HeartbeatOut:
        """The member a heartbeat or leave names: by instance id when it
        gives one, which must be the member id's (FENCED_INSTANCE_ID)."""
        if req.instance_id is None:
            m = g.members.get(req.member_id)
            return m if m is not None else HeartbeatOut(Errors.UNKNOWN_MEMBER_ID, req.member_id)
        m = g.members.get(g.static.get(req.instance_id, ""))
        if m is None:
            return HeartbeatOut(Errors.UNKNOWN_MEMBER_ID, req.member_id,
                                message=f"Instance id {req.instance_id} is unknown.")  # fmt: skip
        if m.member_id != req.member_id:
            return HeartbeatOut(Errors.FENCED_INSTANCE_ID, req.member_id)
        return m

    @staticmethod
    def _update(m: Member, req: HeartbeatIn) -> bool:
        """The member's fields the request changes; whether its
        subscription changed (a new group epoch)."""
        if req.rebalance_timeout_ms >= 0:
            m.rebalance_timeout_ms = req.rebalance_timeout_ms
        if req.rack_id is not None:
            m.rack_id = req.rack_id
        if req.server_assignor is not None:
            m.assignor = req.server_assignor
        if req.subscribed_topic_names is not None and frozenset(req.subscribed_topic_names) != m.subscribed:
            m.subscribed = frozenset(req.subscribed_topic_names)
            return True
        return False

    def _leave(self, g: ConsumerGroup, req: HeartbeatIn, now_ms: int) -> HeartbeatOut:
        """Kafka's consumerGroupLeave: -1 removes the member, -2 (a static
        member) keeps it and its assignment until it comes back or its
        session ends, and frees what it was revoking."""
        found = self._known(g, req)
        if isinstance(found, HeartbeatOut):
            return found
        m = found
        if req.member_epoch == STATIC_LEAVE_EPOCH:
            for tp in m.revoking:
                if g.owners.get(tp) == m.member_id:
                    del g.owners[tp]
            m.revoking, m.revoke_deadline_ms, m.member_epoch = frozenset(), None, STATIC_LEAVE_EPOCH
            m.session_deadline_ms = now_ms + self._settings(g.group_id).session_timeout_ms
            return HeartbeatOut(Errors.NONE, m.member_id, STATIC_LEAVE_EPOCH)
        self._remove(g, m)
        self._after_removal(g)
        return HeartbeatOut(Errors.NONE, req.member_id, LEAVE_EPOCH)

    def _remove(self, g: ConsumerGroup, m: Member) -> None:
        del g.members[m.member_id]
        g.target.pop(m.member_id, None)
        if m.instance_id is not None and g.static.get(m.instance_id) == m.member_id:
            del g.static[m.instance_id]
        for tp in m.assigned | m.revoking:
            if g.owners.get(tp) == m.member_id:
                del g.owners[tp]
        g.group_epoch += 1

    def _after_removal(self, g: ConsumerGroup) -> None:
        if not g.members:
            # As Kafka: an empty group stays (its offsets do), at its epoch.
            g.target.clear()
            g.assignment_epoch = g.group_epoch
            return
        self._compute_target(g)

    # --------------------------------------------------------- assignment

    def _compute_target(self, g: ConsumerGroup) -> None:
        """Kafka's TargetAssignmentBuilder, with its preferred assignor: the
        one most members ask for (ties: by name), else the default."""
        asked = Counter(m.assignor for m in g.members.values() if m.assignor is not None)
        g.assignor = min(asked, key=lambda a: (-asked[a], a)) if asked else ASSIGNORS[0]
        subs = {mid: m.subscribed for mid, m in g.members.items()}
        g.target = assign(g.assignor, subs, g.topics, g.target)
        g.assignment_epoch = g.group_epoch

    def _reconcile(self, g: ConsumerGroup, m: Member, owned: Assignment | None, now_ms: int) -> None:
        """Kafka's CurrentAssignmentBuilder for one member."""
        target = g.target.get(m.member_id, frozenset())
        if m.state is MemberState.UNREVOKED_PARTITIONS:
            if owned is None or owned & m.revoking:
                return  # still revoking (tick fences it at its rebalance timeout)
            for tp in m.revoking:
                if g.owners.get(tp) == m.member_id:
                    del g.owners[tp]
            m.revoking, m.revoke_deadline_ms = frozenset(), None
        elif m.member_epoch == g.assignment_epoch and m.state is MemberState.STABLE:
            return
        kept = m.assigned & target
        revoke = m.assigned - target
        if revoke and (owned is None or owned & revoke):
            m.state, m.assigned, m.revoking = MemberState.UNREVOKED_PARTITIONS, kept, revoke
            m.revoke_deadline_ms = now_ms + max(m.rebalance_timeout_ms, 0)
            return
        for tp in revoke:  # the member says it holds them no more
            if g.owners.get(tp) == m.member_id:
                del g.owners[tp]
        free = frozenset(tp for tp in target - kept if g.owners.get(tp, m.member_id) == m.member_id)
        for tp in free:
            g.owners[tp] = m.member_id
        m.assigned = kept | free
        m.state = MemberState.STABLE if m.assigned == target else MemberState.UNRELEASED_PARTITIONS
        if m.member_epoch != g.assignment_epoch:
            m.previous_epoch, m.member_epoch = m.member_epoch, g.assignment_epoch

    # -------------------------------------------------------------- timers

    def next_deadline_ms(self) -> int | None:
        due = [d for g in self.groups.values() for m in g.members.values()
               for d in (m.session_deadline_ms, m.revoke_deadline_ms) if d is not None]  # fmt: skip
        return min(due, default=None)

    def tick(self, now_ms: int) -> None:
        """Remove members past their session timeout or, revoking, past
        their rebalance timeout (Kafka fences both)."""
        for g in list(self.groups.values()):
            gone = [m for m in g.members.values() if now_ms >= m.session_deadline_ms
                    or (m.revoke_deadline_ms is not None and now_ms >= m.revoke_deadline_ms)]  # fmt: skip
            for m in gone:
                self._remove(g, m)
            if gone:
                self._after_removal(g)

    # ------------------------------------------------------------- offsets

    def check_commit(
        self, group_id: str, member_id: str, member_epoch: int, *, api_version: int = 9, transactional: bool = False
    ) -> Errors:
        """Kafka's ConsumerGroup.validateOffsetCommit."""
        g = self.groups.get(group_id)
        assert g is not None
        if member_epoch < 0 and not g.members:
            return Errors.NONE  # an admin client's or a simple consumer's commit
        m = g.members.get(member_id)
        if m is None:
            return Errors.UNKNOWN_MEMBER_ID
        if api_version < 9 and not transactional:
            return Errors.UNSUPPORTED_VERSION
        return Errors.NONE if member_epoch == m.member_epoch else Errors.STALE_MEMBER_EPOCH

    def forget_empty(self, group_id: str) -> bool:
        """Drop ``group_id`` if it has no member (a classic group replaces
        it, as Kafka converts an empty group); False if it has members."""
        g = self.groups.get(group_id)
        if g is not None and g.members:
            return False
        self.groups.pop(group_id, None)
        return True


def check_fetch(g: ConsumerGroup, member_id: str | None, member_epoch: int) -> Errors:
    """Kafka's ConsumerGroup.validateOffsetFetch (OffsetFetch v9+): no
    member id and a negative epoch is an admin client's fetch."""
    if member_id is None and member_epoch < 0:
        return Errors.NONE
    m = g.members.get(member_id or "")
    if m is None:
        return Errors.UNKNOWN_MEMBER_ID
    return Errors.NONE if member_epoch == m.member_epoch else Errors.STALE_MEMBER_EPOCH


def _subscribed(g: ConsumerGroup) -> set[str]:
    return {n for m in g.members.values() for n in m.subscribed}


def _invalid(req: HeartbeatIn, version: int) -> str | None:
    """Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid, in its order
    (v1, KIP-1082: the client makes its member id, never empty), then our
    bounds on the request's lists."""
    if not req.group_id:
        return "GroupId can't be empty."
    if req.instance_id is not None and not req.instance_id:
        return "InstanceId can't be empty."
    if req.rack_id is not None and not req.rack_id:
        return "RackId can't be empty."
    if req.subscribed_topic_regex:  # librdkafka sends "" for none
        return "SubscribedTopicRegex is not supported."
    named = req.member_epoch > 0 or req.member_epoch == LEAVE_EPOCH or (version >= 1 and req.member_epoch == JOIN_EPOCH)
    if named and not req.member_id:
        return "MemberId can't be empty."
    if req.member_epoch == JOIN_EPOCH:
        if req.rebalance_timeout_ms == -1:
            return "RebalanceTimeoutMs must be provided in first request."
        if req.owned is None or req.owned:
            return "TopicPartitions must be empty when (re-)joining."
        if not req.subscribed_topic_names:
            return "SubscribedTopicNames must be set in first request."
    elif req.member_epoch == STATIC_LEAVE_EPOCH:
        if not req.member_id:
            return "MemberId can't be empty."
        if req.instance_id is None:
            return "InstanceId can't be null."
    elif req.member_epoch < 0 and req.member_epoch != LEAVE_EPOCH:
        return "MemberEpoch is invalid."
    if len(req.subscribed_topic_names or ()) > SUBSCRIBED_TOPICS_MAX:
        return f"more than {SUBSCRIBED_TOPICS_MAX} subscribed topics"
    if req.owned is not None and len(req.owned) > OWNED_PARTITIONS_MAX:
        return f"more than {OWNED_PARTITIONS_MAX} owned partitions"
    return None


__all__ = [
    "GROUP_MEMBERS_MAX",
    "HEARTBEAT_INTERVAL_MS_DEFAULT",
    "SESSION_TIMEOUT_MS_DEFAULT",
    "ConsumerGroup",
    "ConsumerGroups",
    "HeartbeatIn",
    "HeartbeatOut",
    "Member",
    "MemberState",
    "check_fetch",
]
