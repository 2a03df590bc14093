"""Partition reassignment on the controller side: KRaft's flow
(ReplicationControlManager.alterPartitionReassignments, PartitionReassignmentReplicas,
PartitionReassignmentRevert, PartitionChangeBuilder) as pure functions over
:class:`~partlog.controller.cluster_meta.PartitionInfo`, shared by both back ends
(the embedded controller, :mod:`partlog.controller.core`, and etcd's
:mod:`partlog.controller.etcd_admin` / :mod:`partlog.controller.etcd_controller`):
neither carries its own copy.  docs/design/reassignment.md has the flow.

States of a partition (``replicas`` is always the union, brokers act on it):

* **settled**: ``adding == removing == ()``;
* **reassigning**: ``replicas = target + removing`` (the target in the order
  asked, then the replicas being removed, by id), ``adding`` = the target's
  replicas that were not replicas when it was asked (by id), ``removing`` = the
  replicas not in the target (by id).

Transitions:

* :func:`start_reassignment` (AlterPartitionReassignments with a target):
  checks the target as Kafka's validateManualPartitionAssignment (empty,
  unregistered broker, duplicate: INVALID_REPLICA_ASSIGNMENT with Kafka's
  messages), then the union as above, computed against the current
  ``replicas`` (so a new target replaces an ongoing one, as Kafka's);
* :func:`cancel_reassignment` (a target of None): back to the replicas
  before the ones being added (NO_REASSIGNMENT_IN_PROGRESS when settled);
* :func:`completed`: as soon as every target replica is in the ISR,
  ``replicas = target``, ``ISR = target`` (ISR ∩ target), the lists cleared,
  and a leader outside the target replaced by the first target replica in
  the ISR that is alive.  Both back ends call it after every change of the
  ISR or of the brokers (AlterPartition, fencing, registration, elections)
  in the same commit, and at start (a target already in the ISR completes
  at once).

Epochs (:func:`partlog.controller.rules.bump`): every change bumps the
partition epoch; a change of leader, or replicas that lose a member, bump the
leader epoch too (KRaft's triggerLeaderEpochBumpForReplicaReassignmentIfNeeded).
Elections during a reassignment walk ``replicas`` in order, so they prefer
target replicas, as Kafka's.

The controller RPC's bodies (schemas in :mod:`partlog.rpc.methods`)::

    alter_reassignments {"partitions": [[topic, partition, [broker ids] or nil]]}
                     -> {"version", "partitions": [[topic, partition, error, message or nil]]}
    list_reassignments  {"partitions": [[topic, partition]] or nil}
                     -> {"reassignments": [[topic, partition, replicas, adding, removing]]}

A request names a partition once (a Mapping on both sides; Kafka's
controller decides each entry against the state before the request, so
the last one would win): twice is a malformed body.

Deliberate difference: Kafka's builder keeps the previous adding (removing)
list when a replacing target computes an empty one; here both lists are
always the ones the target computes (a target equal to the whole union ends
the reassignment with that union as the replicas)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol, runtime_checkable

from partlog import injected_bugs
from partlog.controller.cluster_meta import NO_LEADER, PartitionInfo, TopicInfo
from partlog.controller.rules import Refused, after_fencing
from partlog.kafka.errors import Errors
from partlog.limits import PARTITIONS_PER_CLUSTER_MAX
from partlog.rpc.wire import WireError, expect_int, expect_list, expect_map, expect_str, field

__all__ = [
    "LISTS_RPC_VERSION",
    "NO_REASSIGNMENT_MESSAGE",
    "REASON_REASSIGNMENT",
    "REASSIGNMENT_ITEMS_PER_REQUEST_MAX",
    "Reassignment",
    "ReassignmentAdmin",
    "cancel_reassignment",
    "check_target",
    "completed",
    "dec_alter_reassignments",
    "dec_alter_reassignments_response",
    "dec_list_reassignments",
    "dec_list_reassignments_response",
    "decide_reassignment",
    "enc_alter_reassignments",
    "enc_alter_reassignments_response",
    "enc_list_reassignments",
    "enc_list_reassignments_response",
    "listed",
    "reassigning",
    "reassignment_of",
    "shape_error",
    "start_reassignment",
    "state_error",
    "target_of",
    "unknown_partition",
    "unknown_topic",
    "without_lists",
]

# The first RPC version whose peers decode a partition's adding and
# removing lists (docs/design/upgrades.md): a version 1 peer (e739335)
# refuses the seven-item partition value, so it gets the union alone.
LISTS_RPC_VERSION = 2

# Kafka's Errors.NO_REASSIGNMENT_IN_PROGRESS.message().
NO_REASSIGNMENT_MESSAGE = "No partition reassignment is in progress."
# The reason controller events and logs give for a reassignment's change.
REASON_REASSIGNMENT = "reassignment"
# Partitions and the broker ids of their targets, all of one request's
# together (each counts one): well inside the RPC body's element limit
# (partlog.rpc.schema's BODY_ELEMENTS_MAX, 1,000,000).
REASSIGNMENT_ITEMS_PER_REQUEST_MAX = 250_000
# What a message may carry back (Kafka's are one sentence).
_MESSAGE_CHARS_MAX = 1_000


@dataclass(frozen=True, slots=True)
class Reassignment:
    """A partition being reassigned, as ListPartitionReassignments reports it."""

    topic: str
    partition: int
    replicas: tuple[int, ...]  # the union: target first, then the old ones being removed (Kafka's order)
    adding: tuple[int, ...]
    removing: tuple[int, ...]


@runtime_checkable
class ReassignmentAdmin(Protocol):
    """A metadata source whose controller reassigns replicas (the embedded
    controller's client, etcd); a static cluster file does not."""

    async def alter_reassignments(
        self, changes: Mapping[tuple[str, int], tuple[int, ...] | None]
    ) -> dict[tuple[str, int], Refused | None]:
        """Per (topic, partition): None when done (a reassignment started,
        replaced, cancelled, or nothing to do), else the refusal with
        Kafka's code and message.  A target of None cancels
        (NO_REASSIGNMENT_IN_PROGRESS when none is)."""
        ...

    async def list_reassignments(self, partitions: Iterable[tuple[str, int]] | None) -> list[Reassignment]:
        """The reassignments in progress among ``partitions`` (all when
        None; unknown ones are left out), sorted by (topic, partition)."""
        ...


def reassigning(p: PartitionInfo) -> bool:
    """Whether a reassignment of ``p`` is in progress (Kafka's isReassignmentInProgress)."""
    return bool(p.adding or p.removing)


def target_of(p: PartitionInfo) -> tuple[int, ...]:
    """The replicas ``p`` is being moved to (its replicas when settled)."""
    return p.replicas[: len(p.replicas) - len(p.removing)]


def reassignment_of(topic: str, index: int, p: PartitionInfo) -> Reassignment | None:
    """``p``'s reassignment as listed, None when it is settled."""
    return Reassignment(topic, index, p.replicas, p.adding, p.removing) if reassigning(p) else None


def without_lists(p: PartitionInfo) -> PartitionInfo:
    """``p`` as a version 1 peer can decode it: the replicas (the union
    during a move) without the adding and removing lists.  Such a broker
    follows the union; it neither drops its log nor lets a replica join at
    the same leader epoch, so moves wait for it (docs/design/upgrades.md)."""
    return replace(p, adding=(), removing=()) if reassigning(p) else p


def unknown_topic(name: str) -> Refused:
    return Refused(Errors.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find a topic named {name}.")


def unknown_partition(name: str, index: int) -> Refused:
    return Refused(Errors.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find partition {name}:{index}.")


def decide_reassignment(
    topic: str,
    index: int,
    target: Sequence[int] | None,
    p: PartitionInfo | None,
    *,
    topic_known: bool,
    registered: Callable[[int], bool],
    alive: Callable[[int], bool],
    unclean: bool,
) -> PartitionInfo | Refused:
    """One partition of AlterPartitionReassignments, in Kafka's order of
    checks (alterPartitionReassignment): the topic, the partition (``p``,
    None when the topic has no such index), then a cancel (``target`` None)
    or a new target.  Returns the partition's next state (epochs not yet
    bumped; ``p`` itself when nothing changes) or the refusal."""
    if not topic_known:
        return unknown_topic(topic)
    if p is None:
        return unknown_partition(topic, index)
    if target is None:
        return cancel_reassignment(p, alive, unclean=unclean, topic=topic, index=index)
    return start_reassignment(p, target, registered, alive)


def listed(topics: Iterable[TopicInfo], partitions: Iterable[tuple[str, int]] | None) -> list[Reassignment]:
    """ListPartitionReassignments over ``topics``: the reassignments in
    progress among ``partitions`` (every one when None; unknown ones left
    out), sorted by (topic, partition)."""
    by_name = {t.name: t for t in topics}
    if partitions is None:
        wanted: Iterable[tuple[str, int]] = ((t.name, i) for t in by_name.values() for i in range(t.num_partitions))
    else:
        wanted = set(partitions)
    out = []
    for name, index in wanted:
        t = by_name.get(name)
        if t is not None and 0 <= index < t.num_partitions:
            r = reassignment_of(name, index, t.partitions[index])
            if r is not None:
                out.append(r)
    return sorted(out, key=lambda r: (r.topic, r.partition))


def check_target(target: Sequence[int], registered: Callable[[int], bool]) -> Refused | None:
    """Kafka's validateManualPartitionAssignment without a replication
    factor: why ``target`` cannot be a partition's replicas (None: it can).
    Brokers are checked in id order, as Kafka does, so the message names the
    same broker."""
    if not target:
        return Refused(
            Errors.INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment includes an empty replica list."
        )
    previous = None
    for b in sorted(target):
        if not registered(b):
            return Refused(
                Errors.INVALID_REPLICA_ASSIGNMENT,
                f"The manual partition assignment includes broker {b}, but no such broker is registered.",
            )
        if b == previous:
            return Refused(
                Errors.INVALID_REPLICA_ASSIGNMENT,
                f"The manual partition assignment includes the broker {b} more than once.",
            )
        previous = b
    return None


def start_reassignment(
    p: PartitionInfo, target: Sequence[int], registered: Callable[[int], bool], alive: Callable[[int], bool]
) -> PartitionInfo | Refused:
    """``p`` moving to ``target`` (Kafka's changePartitionReassignment),
    completed at once when the target is already in the ISR; epochs are
    bumped by the caller.  A target naming the current replicas in another
    order reorders them (no reassignment)."""
    why = check_target(target, registered)
    if why is not None:
        return why
    wanted = tuple(target)
    current = set(p.replicas)
    removing = tuple(sorted(current - set(wanted)))
    adding = tuple(sorted(set(wanted) - current))
    new = replace(p, replicas=wanted + removing, adding=adding, removing=removing)
    # A reorder or a replacement moves replicas; the ISR stays in replicas order.
    new = replace(new, isr=tuple(r for r in new.replicas if r in p.isr))
    return completed(new, alive)


def cancel_reassignment(
    p: PartitionInfo, alive: Callable[[int], bool], *, unclean: bool, topic: str, index: int
) -> PartitionInfo | Refused:
    """``p`` back on the replicas it had before the ones being added
    (Kafka's cancelPartitionReassignment and PartitionReassignmentRevert):
    they leave the replicas and the ISR; a leader among them gives way to
    the first original replica in the ISR that is alive.  When only added
    replicas are in the ISR, the first original replica becomes the ISR: an
    unclean election, refused (INVALID_REPLICA_ASSIGNMENT) unless
    ``unclean`` leader election is enabled."""
    if not reassigning(p):
        return Refused(Errors.NO_REASSIGNMENT_IN_PROGRESS, NO_REASSIGNMENT_MESSAGE)
    adding = set(p.adding)
    original = tuple(r for r in p.replicas if r not in adding)
    assert original, f"a reassignment adding every replica: {p}"
    isr = tuple(r for r in p.isr if r not in adding)
    if not isr:
        if not unclean:
            return Refused(
                Errors.INVALID_REPLICA_ASSIGNMENT,
                f"Unable to revert partition assignment for {topic}:{index} because it would require an "
                "unclean leader election.",
            )
        isr = original[:1]
    leader = p.leader if p.leader in isr else NO_LEADER
    reverted = replace(p, leader=leader, replicas=original, isr=isr, adding=(), removing=())
    if leader != NO_LEADER and all(alive(r) for r in isr):
        return reverted
    return after_fencing(reverted, alive, unclean)[0]


def completed(p: PartitionInfo, alive: Callable[[int], bool]) -> PartitionInfo:
    """``p`` with its reassignment completed when every target replica is in
    the ISR (Kafka's maybeCompleteReassignment), else ``p``: replicas and ISR
    become the target, the lists are cleared, and a leader outside the
    target gives way to the first target replica that is alive (none: the
    partition is offline with that first replica as its last ISR member)."""
    if not reassigning(p):
        return p
    target = target_of(p)
    if not (set(target) & set(p.isr) if injected_bugs.on("reassign_completes_early") else set(target) <= set(p.isr)):
        return p
    leader, isr = p.leader, target
    if leader not in target:
        leader = next((r for r in target if alive(r)), NO_LEADER)
        if leader == NO_LEADER:
            isr = target[:1]
    return replace(p, leader=leader, replicas=target, isr=isr, adding=(), removing=())


def shape_error(p: PartitionInfo) -> str | None:
    """What is wrong with ``p``'s replicas and reassignment lists (None:
    nothing): replicas once each, ``removing`` their tail, both lists by id,
    ``adding`` within the target, and a target left."""
    if len(set(p.replicas)) != len(p.replicas) or not target_of(p):
        return f"replicas {list(p.replicas)} name a broker twice or leave no target"
    if p.removing and p.replicas[-len(p.removing) :] != p.removing:
        return f"removing {list(p.removing)} is not the tail of the replicas {list(p.replicas)}"
    if p.adding != tuple(sorted(set(p.adding))) or p.removing != tuple(sorted(set(p.removing))):
        return f"adding {list(p.adding)} or removing {list(p.removing)} not by id, or naming a broker twice"
    if not set(p.adding) <= set(target_of(p)):
        return f"adding {list(p.adding)} outside the target {list(target_of(p))}"
    return None


def state_error(p: PartitionInfo, alive: Callable[[int], bool]) -> str | None:
    """Which invariant of a committed state ``p`` breaks (None: none): its
    shape (:func:`shape_error`); the ISR a subset of the replicas in their
    order (empty only when offline), the ELR too and out of the ISR; epochs
    in order; a leader alive and in the ISR, whose ISR holds only alive
    brokers; an offline partition keeping at most its last ISR member; and
    no reassignment left whose target is in the ISR."""
    why = shape_error(p)
    if why is not None:
        return why
    if p.isr != tuple(r for r in p.replicas if r in p.isr) or (not p.isr and p.leader != NO_LEADER):
        return "the ISR is not a subset of the replicas in their order, or empty under a leader"
    if p.elr != tuple(r for r in p.replicas if r in p.elr and r not in p.isr):
        return "the ELR is not within the replicas in their order, or meets the ISR"
    if not 0 <= p.leader_epoch <= p.partition_epoch:
        return "epochs out of order"
    if p.leader == NO_LEADER and len(p.isr) > 1:
        return "offline with more than its last ISR member"
    if p.leader != NO_LEADER and (p.leader not in p.isr or not all(alive(r) for r in p.isr)):
        return "a leader outside the ISR, or an ISR member not alive"
    if reassigning(p) and set(target_of(p)) <= set(p.isr):
        return "a reassignment whose target is in the ISR left in progress"
    return None


# ------------------------------------------------------------ RPC bodies

_Changes = Mapping[tuple[str, int], Sequence[int] | None]


def enc_alter_reassignments(changes: _Changes) -> dict[str, Any]:
    return {"partitions": [[t, i, None if r is None else list(r)] for (t, i), r in changes.items()]}


def dec_alter_reassignments(body: Any) -> dict[tuple[str, int], tuple[int, ...] | None]:
    w = "alter_reassignments"
    items = expect_list(field(expect_map(body, w), "partitions", w), f"{w}.partitions")
    if len(items) > PARTITIONS_PER_CLUSTER_MAX:
        raise WireError(f"{w}.partitions: at most {PARTITIONS_PER_CLUSTER_MAX}, got {len(items)}")
    out: dict[tuple[str, int], tuple[int, ...] | None] = {}
    count = 0
    for n, item in enumerate(items):
        what = f"{w}.partitions[{n}]"
        topic, index, raw = expect_list(item, what, 3)
        key = (expect_str(topic, f"{what}.topic"), expect_int(index, f"{what}.partition"))
        target = None if raw is None else tuple(expect_int(b, f"{what}.replicas[]") for b in expect_list(raw, what))
        count += 1 + len(target or ())
        if key in out:
            raise WireError(f"{what}: partition {key[0]!r:.300}:{key[1]} named twice")
        out[key] = target
    if count > REASSIGNMENT_ITEMS_PER_REQUEST_MAX:
        raise WireError(f"{w}: {count} items, at most {REASSIGNMENT_ITEMS_PER_REQUEST_MAX}")
    return out


def enc_alter_reassignments_response(version: int, answers: Mapping[tuple[str, int], Refused | None]) -> dict[str, Any]:
    return {
        "version": version,
        "partitions": [
            [t, i, 0, None] if a is None else [t, i, int(a.error), a.message[:_MESSAGE_CHARS_MAX]]
            for (t, i), a in answers.items()
        ],
    }


def dec_alter_reassignments_response(body: Any) -> tuple[int, dict[tuple[str, int], Refused | None]]:
    """(the controller's version once the changes were committed, the answers)."""
    w = "alter_reassignments response"
    m = expect_map(body, w)
    out: dict[tuple[str, int], Refused | None] = {}
    for n, item in enumerate(expect_list(field(m, "partitions", w), f"{w}.partitions")):
        what = f"{w}.partitions[{n}]"
        topic, index, code, message = expect_list(item, what, 4)
        key = (expect_str(topic, f"{what}.topic"), expect_int(index, f"{what}.partition"))
        code = expect_int(code, f"{what}.error")
        if code == 0:
            out[key] = None
            continue
        try:
            err = Errors(code)
        except ValueError:
            err = Errors.UNKNOWN_SERVER_ERROR
        out[key] = Refused(err, "" if message is None else expect_str(message, f"{what}.message")[:_MESSAGE_CHARS_MAX])
    return expect_int(field(m, "version", w), f"{w}.version"), out


def enc_list_reassignments(partitions: Iterable[tuple[str, int]] | None) -> dict[str, Any]:
    return {"partitions": None if partitions is None else [[t, i] for t, i in partitions]}


def dec_list_reassignments(body: Any) -> list[tuple[str, int]] | None:
    w = "list_reassignments"
    raw = field(expect_map(body, w), "partitions", w)
    if raw is None:
        return None
    items = expect_list(raw, f"{w}.partitions")
    if len(items) > PARTITIONS_PER_CLUSTER_MAX:
        raise WireError(f"{w}.partitions: at most {PARTITIONS_PER_CLUSTER_MAX}, got {len(items)}")
    out = []
    for n, item in enumerate(items):
        topic, index = expect_list(item, f"{w}.partitions[{n}]", 2)
        out.append((expect_str(topic, f"{w}.partitions[{n}].topic"), expect_int(index, f"{w}.partitions[{n}].index")))
    return out


def enc_list_reassignments_response(found: Iterable[Reassignment]) -> dict[str, Any]:
    return {
        "reassignments": [[r.topic, r.partition, list(r.replicas), list(r.adding), list(r.removing)] for r in found]
    }


def dec_list_reassignments_response(body: Any) -> list[Reassignment]:
    w = "list_reassignments response"
    out = []
    for n, item in enumerate(expect_list(field(expect_map(body, w), "reassignments", w), f"{w}.reassignments")):
        what = f"{w}.reassignments[{n}]"
        topic, index, replicas, adding, removing = expect_list(item, what, 5)
        lists = [tuple(expect_int(b, f"{what}[]") for b in expect_list(v, what)) for v in (replicas, adding, removing)]
        out.append(Reassignment(expect_str(topic, f"{what}.topic"), expect_int(index, f"{what}.partition"), *lists))
    return out
