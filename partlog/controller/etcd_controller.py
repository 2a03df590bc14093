"""The acting controller's decisions over an :class:`EtcdView`: sans-IO.

With etcd there is no controller process: brokers register and change ISRs
themselves, by compare-and-swap transactions.  What needs one actor (fencing
a broker whose lease expired, electing leaders, accepting a new incarnation,
preferred-leader elections, completing a reassignment whose target those
bring into the ISR) is done by whichever process won etcd's election, with
the rules of :mod:`partlog.controller.rules` and
:mod:`partlog.controller.reassignment`, the same ones the embedded
controller runs.

Decisions are level-triggered: :func:`plan` compares the whole view with
what the rules want, so a controller that takes over mid-way (its
predecessor killed between two transactions) simply finishes the job.

A broker is alive for these decisions when it is *accepted*: its key exists
(its lease is alive) and ``incarnations/<id>`` holds that key's epoch.  A
new incarnation is accepted only by a plan with nothing else to do, i.e.
once every partition has been settled without it: the old incarnation left
every ISR and leadership first, exactly as the embedded controller fences
an old incarnation before registering the new one.  The next plan then
brings the new one back (offline partitions whose last ISR member it is,
preferred leaders).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from partlog.controller.cluster_meta import NO_LEADER, PartitionInfo
from partlog.controller.etcd_layout import EtcdView
from partlog.controller.model import (
    REASON_BROKER_FENCED,
    REASON_BROKER_REGISTERED,
    REASON_PREFERRED,
    REASON_UNCLEAN_SHUTDOWN,
)
from partlog.controller.reassignment import completed
from partlog.controller.rules import after_fencing, bump, needs_reconcile, preferred
from partlog.kafka.records import TopicIdPartition

__all__ = ["PartitionChange", "Plan", "plan"]


@dataclass(frozen=True, slots=True)
class PartitionChange:
    """One partition's next state, with every revision it was decided on:
    the write compares exactly these, so a change that lands in etcd between
    the plan and the write (a leader's ISR change, a broker's death) fails
    the write instead of being overwritten by a decision that did not see it."""

    tp: TopicIdPartition
    old: PartitionInfo
    new: PartitionInfo  # epochs bumped
    reason: str
    unclean: bool
    part_revision: int  # the partition key's mod revision (0: never written)
    topic: str
    topic_revision: int  # the topic key's create revision
    leader_epoch_seen: int  # the new leader's broker epoch (0: no leader)

    @property
    def election(self) -> bool:
        return self.new.leader != self.old.leader and self.new.leader != NO_LEADER


@dataclass(slots=True)
class Plan:
    changes: list[PartitionChange] = field(default_factory=list)
    # (broker id, epoch): incarnations to accept, only when ``changes`` is empty.
    accept: list[tuple[int, int]] = field(default_factory=list)

    def empty(self) -> bool:
        return not self.changes and not self.accept


def plan(view: EtcdView, *, unclean: bool, elect_preferred: bool, leaderless_first: bool = True) -> Plan:
    """What the acting controller should write next (see the module doc).

    Partitions without a live leader come first and alone (unless
    ``leaderless_first`` is false: everything at once): when a broker
    leading many partitions dies, the plan holds only their elections (and
    the ISR changes those elections make), so they are decided, written and
    seen by the brokers without waiting for the ISR shrinks of the
    partitions it only followed (twice as many with RF 3), which the next
    pass plans once they have landed."""
    accepted = frozenset(b for b in view.brokers if view.accepted(b))
    if leaderless_first:
        leaderless = [(tp, p) for tp, p in view.partitions() if p.leader == NO_LEADER or p.leader not in accepted]
        out = _plan(view, leaderless, accepted, unclean=unclean, elect_preferred=False)
        if out.changes:
            return out
    return _plan(view, view.partitions(), accepted, unclean=unclean, elect_preferred=elect_preferred)


def _plan(
    view: EtcdView,
    parts: Iterable[tuple[TopicIdPartition, PartitionInfo]],
    accepted: frozenset[int],
    *,
    unclean: bool,
    elect_preferred: bool,
) -> Plan:
    out = Plan()
    alive = accepted.__contains__
    # KIP-966, in part (docs/design/elr.md): incarnations that registered after
    # an unclean shutdown and are not accepted yet leave every ISR, even as its
    # last member, before they are accepted: none is elected from a stale ISR.
    lost = {b for b, r in view.brokers.items() if r.unclean_shutdown and view.incarnations.get(b) != r.epoch}
    for tp, p in parts:
        if not elect_preferred and p.leader != NO_LEADER and accepted.issuperset(p.isr):
            continue  # needs_reconcile is false: nothing to do (the common case, checked in C)
        new, was_unclean = p, False
        # An offline partition comes back with a broker; otherwise one left.
        reason = REASON_BROKER_REGISTERED if p.leader == NO_LEADER else REASON_BROKER_FENCED
        if needs_reconcile(p, alive):
            new, was_unclean = after_fencing(p, alive, unclean)
        if lost.intersection(new.isr):
            new = replace(new, isr=tuple(r for r in new.isr if r not in lost))
            reason = REASON_UNCLEAN_SHUTDOWN
        if elect_preferred and new == p:
            new, reason = preferred(p, alive), REASON_PREFERRED
        # A changed ISR or leader may complete a reassignment, in the same write.
        new = bump(p, completed(new, alive))
        if new != p:
            owner = view.topic_revision(tp.topic_id)
            assert owner is not None  # view.partitions() yields live topics only
            leader = view.brokers.get(new.leader)
            epoch = 0 if leader is None else leader.epoch
            assert new.leader == NO_LEADER or leader is not None  # elected from accepted brokers
            out.changes.append(
                PartitionChange(tp, p, new, reason, was_unclean, view.part_revision(tp), owner[0], owner[1], epoch)
            )
    if not out.changes:
        out.accept = [
            (bid, b.epoch) for bid, b in sorted(view.brokers.items()) if view.incarnations.get(bid) != b.epoch
        ]
    return out
