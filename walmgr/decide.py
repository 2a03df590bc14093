"""walmgr's decision core, sans-IO: which objects may be deleted.

The deletion-safety argument (design.md, "Deletion safety") in code:

1. **Age gate.** Only objects older than ``commit.deadline.ms +
   max.clock.skew.ms + grace.ms`` (by their key's ``created_ms``) are
   considered: by then no leader can accept a first reference to them.
2. **Leader check.** For every partition in an object's footer, the leader
   the metadata names, at the leader epoch it names, is asked whether its log
   still references the object (entries above the HWM and commits not yet
   durable count).  Checks are grouped per broker: one question list each.
   A partition whose topic the metadata says was deleted holds no reference;
   a partition the metadata does not know at all is a doubt (the view may be
   stale).
3. **Positive evidence only.** The partitions come from a footer checked
   against the object (``partlog.wal.segment.parse_footer``: it accounts for
   the whole batch area) that names this walmgr's cluster.  A record with
   no partitions, no cluster, or another cluster is kept: "nobody was asked"
   never means "nobody references it".
4. **Fail closed.** An object is deleted only when every one of its checks
   was answered NOT_REFERENCED by the leader at the epoch asked, and the
   metadata still names that leader at that epoch after the answers came
   back.  No leader, an error, a timeout, a missing or unknown answer, or a
   leader change keeps the object for the next round.

5. **Every broker's word.** The keys that pass 1-4 are then asked of every
   broker the metadata lists (:func:`sweep`): does any entry of your store,
   for any partition, reference them?  A footer that names the wrong
   partition (a writer's bug) would otherwise send the leader check to
   leaders that hold nothing, and delete an object another partition still
   reads.  Any "yes", any missing answer, or a change of the broker list
   keeps the key.

Inputs are values (records, a view of leaders, the answers); outputs are
values (a :class:`CheckPlan`, a :class:`Decision`).  The daemon performs the
I/O; the property test drives this module against a reference model.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence, Set
from dataclasses import dataclass, field
from typing import TypeVar

from partlog import injected_bugs
from partlog.kafka.records import TopicIdPartition
from partlog.rpc.wire import Verdict
from walmgr.model import ObjectRecord, State

_Item = TypeVar("_Item")

# Checks (or sweep keys) one reference RPC carries at most; a bigger round is split.
CHECKS_PER_RPC_MAX = 10_000


@dataclass(frozen=True, slots=True)
class Check:
    key: str
    topic_id_partition: TopicIdPartition
    leader_epoch: int
    leader: int = -1  # the leader at that epoch (the broker asked may be an ISR follower)
    # Every replica of the partition asked (leader and ISR): the leader
    # answers ISR_CHANGED when its ISR has another member.
    asked: tuple[int, ...] = ()


# (broker id, leader epoch) of a partition's leader, or None when it has none.
LeaderView = Callable[[TopicIdPartition], "tuple[int, int] | None"]
# A partition's in-sync replicas as the metadata names them.
IsrView = Callable[[TopicIdPartition], Iterable[int]]


def _no_isr(tp: TopicIdPartition) -> Iterable[int]:
    return ()


@dataclass(frozen=True, slots=True)
class CheckPlan:
    """The questions of one round, per broker, and what needs none."""

    by_broker: dict[int, list[Check]] = field(default_factory=dict)
    # Keys whose every partition belongs to a deleted topic: nothing to ask.
    unreferenced: frozenset[str] = frozenset()
    # Keys kept before asking anything, with the reason.
    doubt: dict[str, str] = field(default_factory=dict)
    # All keys of the round (the ones not in ``doubt`` have checks or are unreferenced).
    keys: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Decision:
    delete: list[str]
    referenced: dict[str, str]  # key -> who references it
    doubt: dict[str, str]  # key -> why it is kept


def past_age_gate(record: ObjectRecord, now_ms: int, age_gate_ms: int) -> bool:
    """Old enough that no leader can accept a first reference to it."""
    return now_ms - record.created_ms > age_gate_ms


def candidates(records: Iterable[ObjectRecord], now_ms: int, age_gate_ms: int) -> list[ObjectRecord]:
    """The objects a round may check: tracked or candidate, past the gate."""
    return [r for r in records if r.state in (State.TRACKED, State.CANDIDATE) and past_age_gate(r, now_ms, age_gate_ms)]


def plan_checks(
    records: Sequence[ObjectRecord],
    topic_deleted: Callable[[TopicIdPartition], bool],
    leader: LeaderView,
    cluster_id: uuid.UUID,
    isr: IsrView = _no_isr,
) -> CheckPlan:
    """The questions for ``records`` of cluster ``cluster_id``: for each
    partition, of its leader and of every other member of ``isr(tp)``, at
    the leader's epoch; the leader also checks that its ISR has no member
    beyond those asked (one that joined since the metadata was read).  A record whose footer named no partitions, no
    cluster or another cluster is a doubt, asked of nobody."""
    by_broker: dict[int, list[Check]] = {}
    unreferenced: set[str] = set()
    doubt: dict[str, str] = {}
    for r in records:
        checks: list[tuple[int, Check]] = []
        reason = ""
        if r.cluster_id != cluster_id:
            doubt[r.key] = f"footer names cluster {r.cluster_id}, not {cluster_id}"
            continue
        if not r.partitions:
            doubt[r.key] = "footer names no partitions"
            continue
        for tp in dict.fromkeys(r.partitions):  # a footer names each partition once; be sure
            if topic_deleted(tp):
                continue  # a deleted topic holds no reference
            current = leader(tp)
            if current is None:
                reason = f"partition {tp} has no leader"
                break
            broker, epoch = current
            members = tuple(dict.fromkeys((broker, *isr(tp))))
            asking = (broker,) if injected_bugs.on("walmgr_asks_only_leaders") else members
            for asked in asking:
                checks.append((asked, Check(r.key, tp, epoch, broker, members)))
        if reason:
            doubt[r.key] = reason
        elif not checks:
            unreferenced.add(r.key)
        else:
            for broker, c in checks:
                by_broker.setdefault(broker, []).append(c)
    return CheckPlan(by_broker, frozenset(unreferenced), doubt, frozenset(r.key for r in records))


def decide(
    plan: CheckPlan,
    answers: Mapping[int, Sequence[int] | str],
    leader_now: LeaderView,
    isr_now: IsrView | None = None,
) -> Decision:
    """Combine the brokers' answers.  ``answers[broker]`` is the verdict list
    aligned with ``plan.by_broker[broker]``, or an error text when the RPC
    failed; ``leader_now`` and ``isr_now`` are the metadata after the
    answers arrived (an ISR member not asked keeps the object)."""
    referenced: dict[str, str] = {}
    doubt: dict[str, str] = dict(plan.doubt)
    answered: set[str] = set()
    for broker, checks in plan.by_broker.items():
        got = answers.get(broker)
        if got is None or isinstance(got, str) or len(got) != len(checks):
            why = (
                f"broker {broker}: {got}"
                if isinstance(got, str)
                else f"broker {broker}: no answer"
                if got is None
                else f"broker {broker}: {len(got)} answers for {len(checks)} checks"
            )
            for c in checks:
                doubt.setdefault(c.key, why)
            continue
        for c, v in zip(checks, got, strict=True):
            if v == Verdict.NOT_LEADER and injected_bugs.on("not_leader_counts_as_unreferenced"):
                v = Verdict.NOT_REFERENCED
            if v == Verdict.REFERENCED:
                referenced.setdefault(c.key, f"broker {broker} partition {c.topic_id_partition}")
            elif v != Verdict.NOT_REFERENCED:
                doubt.setdefault(c.key, f"broker {broker} partition {c.topic_id_partition}: {_name(v)}")
            elif leader_now(c.topic_id_partition) != (c.leader, c.leader_epoch):
                doubt.setdefault(c.key, f"partition {c.topic_id_partition}: leader changed during the check")
            elif isr_now is not None and c.asked and not set(isr_now(c.topic_id_partition)) <= set(c.asked):
                doubt.setdefault(c.key, f"partition {c.topic_id_partition}: ISR changed during the check")
            else:
                answered.add(c.key)
    delete = sorted(
        k for k in plan.keys if k not in referenced and k not in doubt and (k in answered or k in plan.unreferenced)
    )
    for k in referenced:
        doubt.pop(k, None)  # referenced is the stronger reason to keep
    return Decision(delete, referenced, doubt)


def sweep(
    decision: Decision,
    live: Sequence[int],
    answers: Mapping[int, Set[str] | str],
    live_after: Sequence[int],
    deleted_topic_keys: Set[str] = frozenset(),
) -> Decision:
    """Every live broker's word on the keys ``decision`` would delete
    (issue 29: no single wrong footer may cause a deletion).  ``live`` are
    the brokers the metadata listed when the sweep began, ``answers[b]`` the
    keys broker ``b``'s store references (any partition, leader or follower)
    or why it did not answer, ``live_after`` the brokers listed once the
    answers were in.  A key any broker references is kept as referenced;
    every key is kept when a broker did not answer, when nobody was asked,
    or when the brokers listed changed meanwhile (one that joined was not
    asked).  ``deleted_topic_keys``: the keys whose every partition is a
    deleted topic's (no leader was asked): a broker that references one
    has not dropped those logs yet, which is expected for a while."""
    if not decision.delete or injected_bugs.on("walmgr_skips_the_sweep"):
        return decision
    doubt = dict(decision.doubt)
    referenced = dict(decision.referenced)

    def keep_all(why: str) -> Decision:
        for k in decision.delete:
            doubt[k] = why
        return Decision([], referenced, doubt)

    if not live:
        return keep_all("sweep: no live broker to ask")
    if set(live_after) != set(live):
        return keep_all("sweep: the brokers changed during the sweep")
    failed = next(((b, answers.get(b)) for b in live if not isinstance(answers.get(b), Set)), None)
    if failed is not None:
        b, got = failed
        return keep_all(f"sweep: broker {b}: {got if isinstance(got, str) else 'no answer'}")
    for b in live:
        got = answers[b]
        assert not isinstance(got, str)
        for k in decision.delete:
            if k in got:
                referenced.setdefault(
                    k,
                    f"broker {b} references it (it has not dropped its deleted topics' logs yet)"
                    if k in deleted_topic_keys
                    else f"broker {b} references it (its footer did not name that partition)",
                )
    return Decision([k for k in decision.delete if k not in referenced], referenced, doubt)


def _name(v: int) -> str:
    try:
        return Verdict(v).name
    except ValueError:
        return f"unknown verdict {v}"


def split_checks(checks: Sequence[_Item], size: int = CHECKS_PER_RPC_MAX) -> list[Sequence[_Item]]:
    return [checks[i : i + size] for i in range(0, len(checks), size)]


__all__ = ["Check", "CheckPlan", "Decision", "Verdict", "candidates", "decide", "past_age_gate", "plan_checks"]
