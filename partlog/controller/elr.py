"""KIP-966's eligible leader replicas (ELR), as pure functions over
:class:`~partlog.controller.cluster_meta.PartitionInfo`, for both back ends
(docs/design/elr.md).

The contract:

* A replica that leaves the ISR while the ISR falls below the partition's
  minimum ISR (``min.insync.replicas``) joins the ELR: the high watermark
  did not advance past what it holds since, because it only advances while
  the ISR is at least that large.  A fenced last ISR member leaves the ISR
  too (the ISR may be empty) and joins the ELR.
* Once the ISR is back at or above the minimum the ELR is cleared.
* ISR and ELR are disjoint and both within the replicas (a replica a
  reassignment removes leaves the ELR: :func:`normalized`).
* Election (:func:`elect`): a live ISR member; else a live ELR member,
  which leads with ISR = {it} and leaves the ELR; else none (the caller may
  run an unclean election, which clears the ELR).
* A broker that registers after an unclean shutdown (it may have lost
  acknowledged entries) leaves every ISR and ELR before any election can
  pick it (:func:`forget`); it rejoins the ISR only by catching up.

``min_isr`` 0 turns the ELR off (KRaft before KIP-966: a fenced last ISR
member stays in the ISR); the etcd back end still runs so.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from partlog import injected_bugs
from partlog.controller.cluster_meta import NO_LEADER, PartitionInfo

__all__ = ["ELR_RPC_VERSION", "MIN_ISR_CONFIG", "elect", "forget", "min_isr", "normalized", "shrink"]

# The first RPC version whose peers decode a partition's ELR (an eighth
# item) and send a registration's unclean_shutdown (docs/design/upgrades.md).
ELR_RPC_VERSION = 3
# The topic config (and cluster default) the ELR follows.
MIN_ISR_CONFIG = "min.insync.replicas"


def min_isr(overrides: Sequence[tuple[str, str]] | None, default: int) -> int:
    """A topic's min ISR: its override, else the cluster's ``default``."""
    if injected_bugs.on("controller_without_elr"):
        return 0
    value = dict(overrides or ()).get(MIN_ISR_CONFIG)
    return int(value) if value is not None else default


def shrink(p: PartitionInfo, isr: tuple[int, ...], min_isr: int) -> PartitionInfo:
    """``p`` with ``isr`` (a subset of the replicas) as its ISR and the ELR
    that follows: the ISR members it loses join the ELR while ``isr`` is
    below ``min_isr``; at or above it the ELR is empty."""
    if min_isr <= 0 or len(isr) >= min_isr:
        return replace(p, isr=isr, elr=())
    kept = set(p.elr) | set(p.isr)
    return replace(p, isr=isr, elr=tuple(r for r in p.replicas if r in kept and r not in isr))


def forget(p: PartitionInfo, broker_id: int, min_isr: int) -> PartitionInfo:
    """``p`` without ``broker_id`` in its ISR or ELR (it shut down uncleanly
    and may have lost acknowledged entries).  It leads nothing here: its
    old incarnation was fenced before it registered again."""
    if broker_id not in p.isr and broker_id not in p.elr:
        return p
    assert p.leader != broker_id, f"forgetting the leader {broker_id} of {p}"
    out = shrink(p, tuple(r for r in p.isr if r != broker_id), min_isr)
    return replace(out, elr=tuple(r for r in out.elr if r != broker_id))


def elect(p: PartitionInfo, alive: Callable[[int], bool]) -> PartitionInfo:
    """``p`` led by the first live ISR member (replicas order), else by the
    first live ELR member with ISR = {it} (it leaves the ELR), else
    offline (``NO_LEADER``, ISR and ELR unchanged)."""
    leader = next((r for r in p.replicas if r in p.isr and alive(r)), NO_LEADER)
    if leader != NO_LEADER:
        return replace(p, leader=leader)
    leader = next((r for r in p.replicas if r in p.elr and alive(r)), NO_LEADER)
    if leader != NO_LEADER:
        return replace(p, leader=leader, isr=(leader,), elr=tuple(r for r in p.elr if r != leader))
    return replace(p, leader=NO_LEADER)


def normalized(p: PartitionInfo) -> PartitionInfo:
    """``p`` with its ELR within the replicas and out of the ISR, in
    replicas order (a reassignment's end, an ISR that grew back)."""
    elr = tuple(r for r in p.replicas if r in p.elr and r not in p.isr)
    return p if elr == p.elr else replace(p, elr=elr)
