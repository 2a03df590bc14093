"""Kafka's classic consumer-group membership protocol, sans-IO.

JoinGroup, SyncGroup, Heartbeat and LeaveGroup of the "classic" protocol
(Kafka's ``GroupCoordinator`` / ``GroupMetadata`` before KIP-848): a group
goes Empty -> PreparingRebalance -> CompletingRebalance -> Stable, a
rebalance completes when every known member has rejoined (or its rebalance
timeout passed, dropping those that did not), the first member to join is
the leader and computes the assignment on the client, and members that
miss their session timeout are removed.

Static members (KIP-345, ``group.instance.id``): an instance id maps to one
member id.  A join naming a known instance id with no member id (a restart)
takes the old member's place: in Stable, when the group's protocol would not
change, with no rebalance and the old assignment; any request naming the
instance id with another member id is FENCED_INSTANCE_ID.  A static member
that does not rejoin a rebalance stays until its session timeout (Kafka's
``onCompleteJoin`` drops only dynamic ones).

Time comes in as ``now_ms``; answers to requests that must wait (a join
until the rebalance completes, a follower's sync until the leader's) come
out of :meth:`Groups.take_completions`, keyed by the waiting request's
token.  The asyncio shell (``partlog.kafka_front.group_coordinator``) owns
the futures and the timer.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from partlog.kafka.errors import Errors
from partlog.runtime import SYSTEM_ENTROPY

# Kafka's group.initial.rebalance.delay.ms default: how long the first
# rebalance of an empty group waits for more members to join.
INITIAL_REBALANCE_DELAY_MS_DEFAULT = 3_000
# Kafka's group.min/max.session.timeout.ms defaults.
SESSION_TIMEOUT_MS_MIN = 6_000
SESSION_TIMEOUT_MS_MAX = 1_800_000
# Kafka's group.max.size default is unbounded; ours bounds one group's memory.
GROUP_MEMBERS_MAX = 1_000
# Groups one coordinator holds (each costs memory until it is empty and
# has no offsets).
GROUPS_MAX = 100_000
# Bytes of one member's protocol metadata or assignment (they live in memory).
MEMBER_METADATA_BYTES_MAX = 1024 * 1024
# All members' metadata and assignments one coordinator keeps: a join or
# sync past it is answered COORDINATOR_NOT_AVAILABLE (retriable), so hostile
# or runaway clients cost bounded memory.
METADATA_BYTES_MAX = 256 * 1024 * 1024


class GroupState(Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(slots=True)
class Member:
    member_id: str
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    group_instance_id: str | None = None
    assignment: bytes = b""
    last_heartbeat_ms: int = 0
    # The token of this member's JoinGroup / SyncGroup waiting for an answer.
    join_token: Any = None
    sync_token: Any = None


@dataclass(slots=True)
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    # When the rebalance in progress completes at the latest.
    rebalance_deadline_ms: int = 0
    # Members that joined the rebalance in progress.
    joined: set[str] = field(default_factory=set)
    # Member ids handed out with MEMBER_ID_REQUIRED, not yet joined: id ->
    # when it expires (the client's session timeout after it was handed out).
    pending: dict[str, int] = field(default_factory=dict)
    # The rebalance in progress started from an empty group.
    initial: bool = False
    # Static members: group.instance.id -> member id.
    static: dict[str, str] = field(default_factory=dict)

    def fenced(self, group_instance_id: str | None, member_id: str) -> bool:
        """Kafka's isStaticMemberFenced: the instance id maps to another member."""
        return group_instance_id is not None and self.static.get(group_instance_id, member_id) != member_id


@dataclass(frozen=True, slots=True)
class Completion:
    """The answer of a request that waited: ``body`` is a JoinGroup or
    SyncGroup response as plain values."""

    token: Any
    body: dict[str, Any]


def join_answer(error: Errors, **kw: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "throttle_time": 0,
        "error_code": int(error),
        "generation_id": -1,
        "protocol_type": None,
        "protocol_name": None,
        "leader": "",
        "skip_assignment": False,
        "member_id": "",
        "members": [],
    }
    body.update(kw)
    return body


def sync_answer(error: Errors, assignment: bytes = b"", **kw: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "throttle_time": 0,
        "error_code": int(error),
        "protocol_type": None,
        "protocol_name": None,
        "assignment": assignment,
    }
    body.update(kw)
    return body


class Groups:
    """The groups one coordinator serves (membership only; committed
    offsets are kept by the shell)."""

    def __init__(
        self,
        *,
        initial_rebalance_delay_ms: int = INITIAL_REBALANCE_DELAY_MS_DEFAULT,
        new_uuid: Callable[[], uuid.UUID] = SYSTEM_ENTROPY.uuid4,
    ) -> None:
        if initial_rebalance_delay_ms < 0:
            raise ValueError(f"initial_rebalance_delay_ms must be >= 0, got {initial_rebalance_delay_ms}")
        self.initial_rebalance_delay_ms = initial_rebalance_delay_ms
        self._new_uuid = new_uuid  # member ids (handed in: sans-IO)
        self.groups: dict[str, Group] = {}
        # Protocol types of groups forgotten once empty (their committed
        # offsets live on in the shell): ListGroups and DescribeGroups report
        # them as Kafka does, "consumer" and not "".  At most GROUPS_MAX.
        self.emptied_types: dict[str, str] = {}
        self._completions: list[Completion] = []
        # Bytes of every member's protocols and assignment (METADATA_BYTES_MAX).
        self.metadata_bytes = 0

    def take_completions(self) -> list[Completion]:
        out, self._completions = self._completions, []
        return out

    def group(self, group_id: str) -> Group | None:
        return self.groups.get(group_id)

    def next_deadline_ms(self) -> int | None:
        deadlines: list[int] = []
        for g in self.groups.values():
            deadlines.extend(g.pending.values())
            if g.state is GroupState.PREPARING_REBALANCE:
                deadlines.append(g.rebalance_deadline_ms)
            for m in g.members.values():
                deadlines.append(m.last_heartbeat_ms + m.session_timeout_ms)
        return min(deadlines) if deadlines else None

    # -------------------------------------------------------------- join

    def join(
        self,
        token: Any,
        group_id: str,
        member_id: str,
        *,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        group_instance_id: str | None,
        require_known_member_id: bool,
        now_ms: int,
        supports_skip_assignment: bool = False,
    ) -> dict[str, Any] | None:
        """A JoinGroup: its answer now, or None when it waits for the
        rebalance (the answer then comes as a Completion for ``token``)."""
        if not group_id:
            return join_answer(Errors.INVALID_GROUP_ID)
        if not SESSION_TIMEOUT_MS_MIN <= session_timeout_ms <= SESSION_TIMEOUT_MS_MAX:
            return join_answer(Errors.INVALID_SESSION_TIMEOUT)
        if not protocols or not protocol_type:
            return join_answer(Errors.INCONSISTENT_GROUP_PROTOCOL)
        if any(len(meta) > MEMBER_METADATA_BYTES_MAX for _, meta in protocols):
            return join_answer(Errors.INVALID_REQUEST)
        g = self.groups.get(group_id)
        if g is None:
            if len(self.groups) >= GROUPS_MAX:
                return join_answer(Errors.COORDINATOR_NOT_AVAILABLE)
            g = self.groups[group_id] = Group(group_id)
            self.emptied_types.pop(group_id, None)
        if g.members and g.protocol_type != protocol_type:
            return join_answer(Errors.INCONSISTENT_GROUP_PROTOCOL)
        if g.members and not self._supports_some(g, protocols):
            return join_answer(Errors.INCONSISTENT_GROUP_PROTOCOL)
        if not member_id and group_instance_id is not None:
            # Kafka's doStaticNewMemberJoinGroup: no MEMBER_ID_REQUIRED round.
            member_id = f"{group_instance_id}-{self._new_uuid()}"
            old = g.static.get(group_instance_id)
            if old is not None:
                return self._static_rejoin(g, token, old, member_id, protocols, session_timeout_ms,
                                           rebalance_timeout_ms, supports_skip_assignment, now_ms)  # fmt: skip
        elif not member_id:
            member_id = f"{client_id or 'member'}-{self._new_uuid()}"
            if require_known_member_id:
                # KIP-394: the client joins again with the id it was given.
                if len(g.pending) >= GROUP_MEMBERS_MAX:
                    del g.pending[next(iter(g.pending))]
                g.pending[member_id] = now_ms + session_timeout_ms
                return join_answer(Errors.MEMBER_ID_REQUIRED, member_id=member_id)
        elif member_id not in g.pending and g.fenced(group_instance_id, member_id):
            return join_answer(Errors.FENCED_INSTANCE_ID)
        elif member_id not in g.pending and (
            member_id not in g.members or (group_instance_id is not None and group_instance_id not in g.static)
        ):
            # An id we did not hand out, or forgot (a new coordinator): the
            # client drops it and joins anew.
            return join_answer(Errors.UNKNOWN_MEMBER_ID)
        g.pending.pop(member_id, None)
        m = g.members.get(member_id)
        if m is None and len(g.members) >= GROUP_MEMBERS_MAX:
            return join_answer(Errors.GROUP_MAX_SIZE_REACHED)
        changed = m is None or m.protocols != list(protocols)
        growth = _protocols_bytes(protocols) - (_protocols_bytes(m.protocols) if m is not None else 0)
        if self.metadata_bytes + growth > METADATA_BYTES_MAX:
            return join_answer(Errors.COORDINATOR_NOT_AVAILABLE)
        self.metadata_bytes += growth
        if m is None:
            m = Member(member_id, client_id, client_host, session_timeout_ms, rebalance_timeout_ms, protocol_type,
                       list(protocols), group_instance_id)  # fmt: skip
            g.members[member_id] = m
            g.protocol_type = protocol_type
            if group_instance_id is not None:
                g.static[group_instance_id] = member_id
        elif m.join_token is not None:
            # A second join of the same member replaces the first (the
            # client gave up on it); the old one is answered as retriable.
            self._completions.append(Completion(m.join_token, join_answer(Errors.REBALANCE_IN_PROGRESS)))
            m.join_token = None
        m.protocols = list(protocols)
        m.session_timeout_ms = session_timeout_ms
        m.rebalance_timeout_ms = rebalance_timeout_ms
        m.last_heartbeat_ms = now_ms
        if g.state is not GroupState.PREPARING_REBALANCE:
            if (
                not changed
                and g.state is not GroupState.EMPTY
                and not (g.state is GroupState.STABLE and member_id == g.leader)
            ):
                # Kafka: a known member rejoining with the same metadata
                # gets the current generation without a rebalance.
                return self._join_done(g, m)
            self._prepare_rebalance(g, now_ms)
        m.join_token = token
        g.joined.add(member_id)
        self._maybe_complete_join(g, now_ms)
        return None

    def _static_rejoin(
        self,
        g: Group,
        token: Any,
        old_id: str,
        new_id: str,
        protocols: list[tuple[str, bytes]],
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        supports_skip_assignment: bool,
        now_ms: int,
    ) -> dict[str, Any] | None:
        """Kafka's updateStaticMemberAndRebalance: the known static member
        ``old_id`` rejoins as ``new_id`` (a restart) and takes its place,
        keeping its assignment; the old id's waiting requests are fenced."""
        m = g.members[old_id]
        growth = _protocols_bytes(protocols) - _protocols_bytes(m.protocols)
        if self.metadata_bytes + growth > METADATA_BYTES_MAX:
            return join_answer(Errors.COORDINATOR_NOT_AVAILABLE)
        self.metadata_bytes += growth
        current_leader = g.leader
        for waiting, answer in ((m.join_token, join_answer), (m.sync_token, sync_answer)):
            if waiting is not None:
                self._completions.append(Completion(waiting, answer(Errors.FENCED_INSTANCE_ID)))
        m.join_token = m.sync_token = None
        # The new id takes the old one's place in join order (the leader
        # and protocol votes follow that order).
        g.members = {(new_id if mid == old_id else mid): o for mid, o in g.members.items()}
        m.member_id = new_id
        assert m.group_instance_id is not None
        g.static[m.group_instance_id] = new_id
        if g.leader == old_id:
            g.leader = new_id
        if old_id in g.joined:
            g.joined.discard(old_id)
            g.joined.add(new_id)
        m.protocols = list(protocols)
        m.session_timeout_ms = session_timeout_ms
        m.rebalance_timeout_ms = rebalance_timeout_ms
        m.last_heartbeat_ms = now_ms
        assert g.state is not GroupState.EMPTY, "a group with a static member has members"
        if g.state is GroupState.STABLE and self._choose_protocol(g) == g.protocol:
            # No rebalance: the member syncs and gets its old assignment.
            if supports_skip_assignment:
                # JoinGroup v9+ (KIP-814): the leader is told it leads, and
                # not to run its assignor (a Stable group keeps assignments).
                leads = g.leader == new_id
                return {**self._join_done(g, m), "skip_assignment": leads}
            # Before v9: the old leader id, so a restarted leader does not
            # run a trivial assignment a Stable group would ignore.
            return {**self._join_done(g, m), "members": [], "leader": current_leader}
        if g.state is not GroupState.PREPARING_REBALANCE:
            # CompletingRebalance: the leader may be assigning the old id.
            self._prepare_rebalance(g, now_ms)
        m.join_token = token
        g.joined.add(new_id)
        self._maybe_complete_join(g, now_ms)
        return None

    def _join_done(self, g: Group, m: Member) -> dict[str, Any]:
        assert g.protocol is not None
        protocol = g.protocol
        members = (
            [
                {"member_id": o.member_id, "group_instance_id": o.group_instance_id,
                 "metadata": dict(o.protocols)[protocol]}
                for o in g.members.values()
            ]
            if m.member_id == g.leader
            else []
        )  # fmt: skip
        return join_answer(
            Errors.NONE,
            generation_id=g.generation,
            protocol_type=g.protocol_type,
            protocol_name=protocol,
            leader=g.leader,
            member_id=m.member_id,
            members=members,
        )

    @staticmethod
    def _supports_some(g: Group, protocols: list[tuple[str, bytes]]) -> bool:
        names = {n for n, _ in protocols}
        common = set.intersection(*({n for n, _ in m.protocols} for m in g.members.values()))
        return bool(names & common)

    def _prepare_rebalance(self, g: Group, now_ms: int) -> None:
        # Followers waiting for their assignment learn that it is void.
        for m in g.members.values():
            if m.sync_token is not None:
                self._completions.append(Completion(m.sync_token, sync_answer(Errors.REBALANCE_IN_PROGRESS)))
                m.sync_token = None
        timeout = max((m.rebalance_timeout_ms for m in g.members.values()), default=0)
        # Kafka's initial delay: the first rebalance of an empty group waits
        # for more members, so a group starting up rebalances once.
        g.initial = g.state is GroupState.EMPTY
        delay = min(timeout, self.initial_rebalance_delay_ms) if g.initial else timeout
        g.state = GroupState.PREPARING_REBALANCE
        g.rebalance_deadline_ms = now_ms + delay
        g.joined = set()

    def _maybe_complete_join(self, g: Group, now_ms: int) -> None:
        if g.state is not GroupState.PREPARING_REBALANCE:
            return
        due = now_ms >= g.rebalance_deadline_ms
        if not due and (g.initial or not set(g.members) <= g.joined):
            return
        # Dynamic members that did not rejoin in time leave the group;
        # static ones stay until their session timeout (Kafka's onCompleteJoin).
        for mid in [mid for mid, m in g.members.items() if mid not in g.joined and m.group_instance_id is None]:
            self.metadata_bytes -= _member_bytes(g.members.pop(mid))
        if g.members and not g.joined:
            # Only static members that have not rejoined: no leader to
            # elect; wait another rebalance timeout (Kafka's DelayedJoin).
            g.rebalance_deadline_ms = now_ms + max(m.rebalance_timeout_ms for m in g.members.values())
            return
        g.generation += 1
        if not g.members:
            g.state = GroupState.EMPTY
            g.leader = None
            g.protocol = None
            return
        g.protocol = self._choose_protocol(g)
        if g.leader not in g.joined:
            # Kafka's maybeElectNewJoinedLeader: a member that rejoined.
            g.leader = next(mid for mid in g.members if mid in g.joined)
        g.state = GroupState.COMPLETING_REBALANCE
        for m in g.members.values():
            if m.join_token is not None:
                self._completions.append(Completion(m.join_token, self._join_done(g, m)))
                m.join_token = None
            m.last_heartbeat_ms = now_ms

    @staticmethod
    def _choose_protocol(g: Group) -> str:
        """Kafka's vote: among protocols every member supports, each member
        votes for its most preferred; the most votes wins (ties: the first
        member's preference order)."""
        common = set.intersection(*({n for n, _ in m.protocols} for m in g.members.values()))
        votes: dict[str, int] = {}
        for m in g.members.values():
            pick = next(n for n, _ in m.protocols if n in common)
            votes[pick] = votes.get(pick, 0) + 1
        first = next(iter(g.members.values()))
        order = [n for n, _ in first.protocols if n in common]
        return max(order, key=lambda n: (votes.get(n, 0), -order.index(n)))

    # -------------------------------------------------------------- sync

    def sync(
        self,
        token: Any,
        group_id: str,
        member_id: str,
        generation: int,
        assignments: dict[str, bytes],
        now_ms: int,
        group_instance_id: str | None = None,
    ) -> dict[str, Any] | None:
        g = self.groups.get(group_id)
        if g is not None and g.fenced(group_instance_id, member_id):
            return sync_answer(Errors.FENCED_INSTANCE_ID)
        if g is None or member_id not in g.members:
            return sync_answer(Errors.UNKNOWN_MEMBER_ID)
        if generation != g.generation:
            return sync_answer(Errors.ILLEGAL_GENERATION)
        if g.state is GroupState.PREPARING_REBALANCE:
            return sync_answer(Errors.REBALANCE_IN_PROGRESS)
        m = g.members[member_id]
        m.last_heartbeat_ms = now_ms
        done = {"protocol_type": g.protocol_type, "protocol_name": g.protocol}
        if g.state is GroupState.STABLE:
            return sync_answer(Errors.NONE, m.assignment, **done)
        if any(len(a) > MEMBER_METADATA_BYTES_MAX for a in assignments.values()):
            return sync_answer(Errors.INVALID_REQUEST)
        if member_id == g.leader:
            growth = sum(len(assignments.get(mid, b"")) - len(o.assignment) for mid, o in g.members.items())
            if self.metadata_bytes + growth > METADATA_BYTES_MAX:
                return sync_answer(Errors.COORDINATOR_NOT_AVAILABLE)
            self.metadata_bytes += growth
        if member_id == g.leader:
            for mid, o in g.members.items():
                o.assignment = assignments.get(mid, b"")
            g.state = GroupState.STABLE
            for o in g.members.values():
                if o.sync_token is not None and o.member_id != member_id:
                    self._completions.append(Completion(o.sync_token, sync_answer(Errors.NONE, o.assignment, **done)))
                    o.sync_token = None
            return sync_answer(Errors.NONE, m.assignment, **done)
        if m.sync_token is not None:
            self._completions.append(Completion(m.sync_token, sync_answer(Errors.REBALANCE_IN_PROGRESS)))
        m.sync_token = token
        return None

    # ---------------------------------------------------------- heartbeat

    def heartbeat(
        self, group_id: str, member_id: str, generation: int, now_ms: int, group_instance_id: str | None = None
    ) -> Errors:
        g = self.groups.get(group_id)
        if g is not None and g.fenced(group_instance_id, member_id):
            return Errors.FENCED_INSTANCE_ID
        if g is None or member_id not in g.members:
            return Errors.UNKNOWN_MEMBER_ID
        m = g.members[member_id]
        m.last_heartbeat_ms = now_ms
        if generation != g.generation:
            return Errors.ILLEGAL_GENERATION
        if g.state is GroupState.PREPARING_REBALANCE:
            return Errors.REBALANCE_IN_PROGRESS
        return Errors.NONE

    def leave(self, group_id: str, member_id: str, now_ms: int, group_instance_id: str | None = None) -> Errors:
        """One member of a LeaveGroup, by Kafka's rules: an empty member id
        with an instance id removes that static member (an admin's
        removal); a pending id is forgotten; an instance id mapped to
        another member is FENCED_INSTANCE_ID."""
        g = self.groups.get(group_id)
        if g is None:
            return Errors.UNKNOWN_MEMBER_ID
        if not member_id:
            current = g.static.get(group_instance_id) if group_instance_id is not None else None
            if current is None:
                return Errors.UNKNOWN_MEMBER_ID
            member_id = current
        elif g.pending.pop(member_id, None) is not None:
            return Errors.NONE
        elif g.fenced(group_instance_id, member_id):
            return Errors.FENCED_INSTANCE_ID
        if member_id not in g.members:
            return Errors.UNKNOWN_MEMBER_ID
        self._remove(g, member_id, now_ms)
        return Errors.NONE

    def _remove(self, g: Group, member_id: str, now_ms: int) -> None:
        m = g.members.pop(member_id)
        self.metadata_bytes -= _member_bytes(m)
        g.joined.discard(member_id)
        if m.group_instance_id is not None:
            del g.static[m.group_instance_id]
        if m.join_token is not None:
            self._completions.append(Completion(m.join_token, join_answer(Errors.UNKNOWN_MEMBER_ID)))
        if m.sync_token is not None:
            self._completions.append(Completion(m.sync_token, sync_answer(Errors.UNKNOWN_MEMBER_ID)))
        if g.leader == member_id:
            g.leader = None
        if not g.members:
            g.state = GroupState.EMPTY
            g.generation += 1
            g.protocol = None
            return
        if g.state is not GroupState.PREPARING_REBALANCE:
            self._prepare_rebalance(g, now_ms)
        self._maybe_complete_join(g, now_ms)

    def check_commit(
        self, group_id: str, member_id: str, generation: int, now_ms: int, group_instance_id: str | None = None
    ) -> Errors:
        """Whether an OffsetCommit of this member and generation may be
        written, by Kafka's rules and in its order (ClassicGroup.
        validateOffsetCommit): a simple commit (generation < 0) only while
        the group has no members; then the member (FENCED_INSTANCE_ID,
        UNKNOWN_MEMBER_ID), then the generation (ILLEGAL_GENERATION), and
        only then REBALANCE_IN_PROGRESS while the assignment is being handed
        out (CompletingRebalance). A member of an older generation is told
        ILLEGAL_GENERATION even then, which a cooperative consumer committing
        mid-rebalance expects. A member's commit in Stable or
        PreparingRebalance (a consumer commits in its revoke callback) is
        written and counts as a heartbeat."""
        g = self.groups.get(group_id)
        if generation < 0 and (g is None or not g.members):
            return Errors.NONE
        if g is not None and g.fenced(group_instance_id, member_id):
            return Errors.FENCED_INSTANCE_ID
        if g is None or member_id not in g.members:
            return Errors.UNKNOWN_MEMBER_ID
        if generation != g.generation:
            return Errors.ILLEGAL_GENERATION
        if g.state is GroupState.COMPLETING_REBALANCE:
            return Errors.REBALANCE_IN_PROGRESS
        g.members[member_id].last_heartbeat_ms = now_ms
        return Errors.NONE

    # -------------------------------------------------------------- time

    def tick(self, now_ms: int) -> None:
        for g in list(self.groups.values()):
            for mid, m in list(g.members.items()):
                waiting = m.join_token is not None and g.state is GroupState.PREPARING_REBALANCE
                if not waiting and now_ms >= m.last_heartbeat_ms + m.session_timeout_ms and mid in g.members:
                    self._remove(g, mid, now_ms)
            self._maybe_complete_join(g, now_ms)
            for mid in [mid for mid, until in g.pending.items() if until <= now_ms]:
                del g.pending[mid]  # handed out, never used: as Kafka's pending-member expiry
            if g.state is GroupState.EMPTY and not g.members and not g.pending:
                # Nothing left to remember (offsets live in the shell): the
                # slot goes back to GROUPS_MAX.
                del self.groups[g.group_id]
                if g.protocol_type:
                    if len(self.emptied_types) >= GROUPS_MAX:
                        del self.emptied_types[next(iter(self.emptied_types))]
                    self.emptied_types[g.group_id] = g.protocol_type

    def drop_all(self) -> None:
        """This coordinator no longer serves these groups (its offsets
        partition moved): waiting requests are told NOT_COORDINATOR."""
        for g in self.groups.values():
            for m in g.members.values():
                if m.join_token is not None:
                    self._completions.append(Completion(m.join_token, join_answer(Errors.NOT_COORDINATOR)))
                if m.sync_token is not None:
                    self._completions.append(Completion(m.sync_token, sync_answer(Errors.NOT_COORDINATOR)))
        self.groups.clear()
        self.emptied_types.clear()
        self.metadata_bytes = 0

    def forget(self, group_id: str) -> Errors:
        """DeleteGroups' check and removal of ``group_id``'s membership
        (Kafka's: a group with members is NON_EMPTY_GROUP); the caller
        deletes its offsets."""
        g = self.groups.get(group_id)
        if g is not None and g.members:
            return Errors.NON_EMPTY_GROUP
        self.groups.pop(group_id, None)
        self.emptied_types.pop(group_id, None)
        return Errors.NONE

    def protocol_type(self, group_id: str) -> str:
        """The group's protocol type, kept once it is empty ("" if none)."""
        g = self.groups.get(group_id)
        return (g.protocol_type or "") if g is not None else self.emptied_types.get(group_id, "")


def _protocols_bytes(protocols: list[tuple[str, bytes]]) -> int:
    return sum(len(name) + len(meta) for name, meta in protocols)


def _member_bytes(m: Member) -> int:
    return _protocols_bytes(m.protocols) + len(m.assignment)


__all__ = ["Completion", "Group", "GroupState", "Groups", "Member", "join_answer", "sync_answer"]
