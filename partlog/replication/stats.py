"""Replication's counters: :class:`ReplicationStats`, one per broker
(``ReplicaManager.stats``), bumped by the leader side, the follower fetchers
and the acks=all waits, read by the broker's metrics and the cluster tools."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class ReplicationStats:
    became_leader: int = 0
    became_follower: int = 0
    truncations: int = 0
    entries_truncated: int = 0
    entries_replicated: int = 0
    replica_fetches_served: int = 0
    replica_fetches_parked: int = 0
    # Parked fetches woken (each wake serves the fetch again); partitions
    # served in replica fetches, and how many of those a woken fetch served
    # again.
    replica_fetch_wakeups: int = 0
    replica_partitions_served: int = 0
    replica_partitions_served_again: int = 0
    # Partitions answered with the replica's last, unchanged answer (no read).
    replica_partitions_unchanged: int = 0
    # Session partitions answered in the quiet lane (the last answer, no
    # serve: only the follower's fetch times move).
    replica_partitions_quiet: int = 0
    # Partitions left out of sparse answers (the follower's apply of them
    # would change nothing: partlog.rpc.replica_rows).
    replica_rows_omitted: int = 0
    # Replica fetch sessions a leader refused or lost, as a follower.
    replica_sessions_reset: int = 0
    # As a leader: sessions opened, refused (unknown id, wrong epoch,
    # invalid), evicted past REPLICA_FETCH_SESSIONS_MAX; incremental fetches,
    # and the partitions they did not name (served from the session's copy).
    replica_sessions_opened: int = 0
    replica_sessions_refused: int = 0
    replica_sessions_evicted: int = 0
    replica_fetches_incremental: int = 0
    replica_items_not_sent: int = 0
    # Full fetches served without a session: none fit the leader's bounds.
    replica_fetches_sessionless: int = 0
    replica_fetches_sent: int = 0
    replica_fetch_errors: int = 0
    # Answers dropped as older than replica_answer_age_max_ms when applied.
    replica_answers_stale: int = 0
    isr_shrinks: int = 0
    isr_expands: int = 0
    alter_partition_failures: int = 0
    acks_all_failed: int = 0
    # Tiered-segment rows (issue 31): sent as a leader; swapped to, or
    # refused by the store (the WAL references kept), as a follower.
    segment_swaps_sent: int = 0
    segment_swaps_applied: int = 0
    segment_swaps_failed: int = 0
    # Leaders' rows taken over here (a cleaned segment, a swap missed), or
    # refused (compaction.md, "Replicas"); rows sent for that as a leader.
    segment_rewrites_sent: int = 0
    segment_rewrites_applied: int = 0
    segment_rewrites_failed: int = 0
    # Logs of partitions this broker no longer replicates (reassignment), dropped.
    partitions_dropped: int = 0


__all__ = ["ReplicationStats"]
