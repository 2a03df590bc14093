"""The controller's partition rules as pure functions, shared by both
metadata back ends: the embedded controller (:mod:`partlog.controller.core`)
and the etcd one (:mod:`partlog.controller.etcd_controller`).  Neither may
carry its own copy: a leader elected one way by one back end and another
way by the other would make their behaviour, and their tests, diverge.

Kafka's KRaft semantics, simplified (see :mod:`partlog.controller.core`'s
module doc for the rules in words)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from partlog.controller.cluster_meta import NO_LEADER, PartitionInfo

__all__ = ["after_fencing", "bump", "needs_reconcile", "preferred"]


def after_fencing(p: PartitionInfo, alive: Callable[[int], bool], unclean: bool) -> tuple[PartitionInfo, bool]:
    """``p`` once dead brokers left its ISR and, if it has no live leader, an
    election ran.  Returns (new state, whether the election was unclean).
    Epochs are bumped by the caller, which compares with ``p``."""
    isr = tuple(r for r in p.isr if alive(r))
    if not isr:
        # KRaft keeps the last member: it has every committed record.
        isr = (p.leader,) if p.leader in p.isr else p.isr[:1]
    leader = p.leader
    was_unclean = False
    if leader == NO_LEADER or not alive(leader):
        leader = next((r for r in p.replicas if r in isr and alive(r)), NO_LEADER)
        if leader == NO_LEADER and unclean:
            leader = next((r for r in p.replicas if alive(r)), NO_LEADER)
            if leader != NO_LEADER:
                isr, was_unclean = (leader,), True
    return replace(p, leader=leader, isr=isr), was_unclean


def bump(old: PartitionInfo, new: PartitionInfo) -> PartitionInfo:
    """``new`` with the epochs a change from ``old`` earns."""
    if new.leader != old.leader:
        return replace(new, leader_epoch=old.leader_epoch + 1, partition_epoch=old.partition_epoch + 1)
    if new.isr != old.isr:
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
