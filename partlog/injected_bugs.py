"""Bugs the deterministic simulation must find test-only switches.

Each name below re-introduces one real-looking bug where the code checks
``injected_bugs.on(name)``.  Nothing in partlog turns one on: only the
simulation harness does (``python -m simulations.dst fuzz --inject NAME``),
to show how many seeds it takes to find it.  The check is one dict
lookup, so switched off it costs nothing measurable; a name not in
:data:`KNOWN` is refused there (a misspelt site would otherwise be a
mutation that never runs), and ``tests/sim/test_injected_bugs.py`` checks
that each known name has exactly one call site.
"""

from __future__ import annotations

from collections.abc import Iterable

KNOWN: dict[str, str] = {
    "walmgr_gate_without_commit_deadline": (
        "walmgr's age gate leaves out commit.deadline.ms: objects still committable look old enough"
    ),
    "walmgr_segment_gate_without_swap_deadline": (
        "walmgr's age gate for tiered segments leaves out the swap deadline: a segment a leader may "
        "still swap in looks old enough"
    ),
    "acks_all_before_hwm": "a leader answers acks=all commits once appended, before the HWM passes them",
    "no_fetch_epoch_fencing": ("a leader serves follower fetches from any leader epoch and skips the divergence check"),
    "producer_ids_not_persisted": "the controller hands out producer-id blocks again after it restarts",
    "walmgr_asks_only_leaders": (
        "walmgr asks only each partition's leader, so an ISR follower's reference counts as absent"
    ),
    "walmgr_skips_the_sweep": (
        "walmgr deletes what the leader check cleared without asking every broker (the sweep); the "
        "simulation's footers are right, so only together with a leader-check bug is a live object lost"
    ),
    "follower_ack_before_journal_sync": (
        "a follower's next fetch reports the entries it just received as its log end before their "
        "append is durable (the leader's HWM and acks=all pass entries the follower could lose)"
    ),
    "replica_session_keeps_old_items": (
        "a leader's replica fetch session keeps its first item of each partition, ignoring the changed ones an "
        "incremental fetch sends: followers never move past their first fetch offsets"
    ),
    "quiet_lane_ignores_writes": (
        "a leader's replica fetch session answers a partition the follower did not name again with its last "
        "quiet answer without checking that nothing was written since (nor the follower's times): the "
        "follower misses new entries"
    ),
    "retention_past_hwm": "retention deletes batches above the high watermark (not yet committed)",
    "not_leader_counts_as_unreferenced": (
        "walmgr takes a NOT_LEADER answer (a follower's, or a moved leader's) as 'not referenced'"
    ),
    # Transactions: found with `fuzz --txn` (transactional producers).
    "lso_ignores_one_ongoing_txn": (
        "the last stable offset is computed without the partition's earliest unstable transaction"
    ),
    "follower_skips_aborted_index": (
        "a follower adds no aborted-index entry for a replicated ABORT marker (its READ_COMMITTED "
        "fetches, and its reign as leader, hand out aborted records)"
    ),
    # WAL rotation (partlog/produce/rotation.py): found by the simulation's
    # check_rotation.
    "rotation_leaves_idle_file_open": (
        "a WAL file opened while the previous round was in flight waits for its commit interval "
        "when that round completes, instead of closing (the round_done rule is missing)"
    ),
    # The release grace (docs/design/release-grace.md).
    "release_grace_ignored": (
        "a store answers walmgr from its index alone: keys it released a moment ago, or holds for an "
        "answer being applied, count as unreferenced"
    ),
    "follower_applies_stale_answers": (
        "a follower applies a fetch answer however long ago it was requested (no answer age limit): "
        "an answer may name an object its leader let go of a grace ago"
    ),
    # Tiered segments: found with `fuzz --tiering` (the leaders' builder loops).
    "swap_positions_off_by_one": (
        "a leader's reference swap repoints each entry one byte past its batch's position in the segment "
        "(reads through the segment return the wrong bytes)"
    ),
    # CreatePartitions: found with `fuzz --create-partitions`.
    "broker_skips_added_partitions": (
        "a broker's store creates the partitions of new topics only, not those CreatePartitions adds to a "
        "topic it has (it cannot lead or follow them)"
    ),
    # Partition reassignment: found with `fuzz --reassign`.
    "reassign_completes_early": (
        "the controller completes a reassignment once any target replica is in the ISR, not all of them "
        "(a replica without the data joins the ISR, and may lead)"
    ),
    # KIP-966: found with `fuzz --reassign` (seed 2), and not found.
    "controller_without_elr": (
        "the controller runs without eligible leader replicas (KRaft before KIP-966): a fenced last ISR "
        "member stays the ISR and leads again when it returns, whatever a power loss took from it"
    ),
    "unclean_shutdown_ignored": (
        "a broker whose store lost acknowledged entries in a power loss registers as clean (it stays in "
        "the ELR, and may lead without them)"
    ),
    "replica_drops_log_while_listed": (
        "a broker drops its log of a partition it is being removed from while it is still a replica "
        "(in the reassignment's removing list)"
    ),
    # In the simulation's own stand-ins (simulations/dst): the transaction
    # coordinator and the consume-transform-produce application.
    "txn_markers_before_prepare": (
        "the transaction coordinator sends a decision's markers before its Prepare record is durable "
        "(a coordinator crash in between leaves the next one without the decision)"
    ),
    "ctp_position_before_output": (
        "a consume-transform-produce application commits its input position in a transaction of its "
        "own, before the outputs' transaction"
    ),
}

_enabled: frozenset[str] = frozenset()
# Every known bug -> whether it is on: as cheap to ask as the set, and a
# name it lacks is unknown.
_on: dict[str, bool] = dict.fromkeys(KNOWN, False)


def on(name: str) -> bool:
    """Whether the bug ``name`` (a key of :data:`KNOWN`) is switched on;
    ValueError for any other name."""
    try:
        return _on[name]
    except KeyError:
        raise ValueError(f"unknown injected bug {name!r}; known: {', '.join(sorted(KNOWN))}") from None


def enable(names: Iterable[str]) -> None:
    """Switch bugs on (the harness only); unknown names are refused."""
    global _enabled, _on
    wanted = frozenset(names)
    unknown = wanted - KNOWN.keys()
    if unknown:
        raise ValueError(f"unknown injected bugs {sorted(unknown)}; known: {', '.join(sorted(KNOWN))}")
    _enabled = wanted
    _on = {name: name in wanted for name in KNOWN}


def enabled() -> frozenset[str]:
    return _enabled
