"""Replication's settings: :class:`ReplicationConfig`, its defaults, and the
named limits the replica manager and the follower fetchers work under.

Defaults are Kafka's broker settings of the same meaning
(``replica.fetch.wait.max.ms``, ``replica.fetch.backoff.ms``,
``min.insync.replicas``, ``replica.lag.time.max.ms``).
"""

from __future__ import annotations

from dataclasses import dataclass

from partlog.replication.replica_state import REPLICA_LAG_TIME_MAX_MS_DEFAULT
from partlog.store.release_grace import RELEASE_GRACE_MS_DEFAULT

# Kafka's replica.fetch.wait.max.ms and replica.fetch.backoff.ms defaults.
REPLICA_FETCH_WAIT_MAX_MS_DEFAULT = 500
REPLICA_FETCH_BACKOFF_MS_DEFAULT = 1000
# Entries per partition per fetch (each ~110 bytes on the wire): bounds the
# response of a follower far behind, like replica.fetch.max.bytes.
REPLICA_FETCH_ENTRIES_MAX_DEFAULT = 4096
# A leader never waits longer than this on one parked fetch.
REPLICA_FETCH_WAIT_MS_MAX = 30_000
# Partitions one replica fetch may name.
REPLICA_FETCH_PARTITIONS_MAX = 100_000
# Work small enough for the event loop (well under a millisecond; a hop to a
# worker thread costs 1-2 ms at p50 under load): a follower builds a fetch
# naming at most this many partitions inline (one LMDB read each, ~10 us);
# a leader serves a fetch inline when it names at most this many partitions
# and the entries it can return (bounded by the offsets between each fetch
# offset and the log end) are at most this many (~5 us each).
REPLICA_FETCH_BUILD_INLINE_PARTITIONS_MAX = 64
REPLICA_SERVE_INLINE_PARTITIONS_MAX = 64
REPLICA_SERVE_INLINE_ENTRIES_MAX = 64
# A leader's walk over many partitions (a session fetch's, the ISR check's)
# lets the event loop run other work after this many (~1-2 ms of Python):
# a Kafka fetch on the same loop must not wait out a walk of thousands.
PARTITIONS_PER_LOOP_SLICE = 256
# How often the leader reconsiders the ISR (lagging followers), and how long
# it waits after the controller refused or did not answer a change.
ISR_CHECK_INTERVAL_MS = 250
# A fetch answer older than this (from the request's send) when the follower
# would apply it is dropped and fetched again: at most half the release
# grace (partlog.store.release_grace, where the argument is).
REPLICA_ANSWER_AGE_MAX_MS_DEFAULT = 20_000
ALTER_PARTITION_BACKOFF_MS = 500


@dataclass(frozen=True, slots=True)
class ReplicationConfig:
    replica_lag_time_max_ms: int = REPLICA_LAG_TIME_MAX_MS_DEFAULT
    replica_fetch_wait_max_ms: int = REPLICA_FETCH_WAIT_MAX_MS_DEFAULT
    replica_fetch_backoff_ms: int = REPLICA_FETCH_BACKOFF_MS_DEFAULT
    replica_fetch_entries_max: int = REPLICA_FETCH_ENTRIES_MAX_DEFAULT
    # Kafka's broker-level min.insync.replicas (default 1).
    min_insync_replicas: int = 1
    # Send the follower's HWM in fetches (KIP-1166); off only to measure it.
    fetch_sends_high_watermark: bool = True
    # A released object key counts as referenced this long (0: off, only
    # for tests that need walmgr to delete at once); answers older than
    # replica_answer_age_max_ms are not applied.
    release_grace_ms: int = RELEASE_GRACE_MS_DEFAULT
    replica_answer_age_max_ms: int = REPLICA_ANSWER_AGE_MAX_MS_DEFAULT

    def __post_init__(self) -> None:
        for name in (
            "replica_lag_time_max_ms",
            "replica_fetch_backoff_ms",
            "replica_fetch_entries_max",
            "min_insync_replicas",
            "replica_answer_age_max_ms",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"ReplicationConfig.{name} must be > 0, got {getattr(self, name)}")
        if not 0 <= self.replica_fetch_wait_max_ms <= REPLICA_FETCH_WAIT_MS_MAX:
            raise ValueError(
                f"ReplicationConfig.replica_fetch_wait_max_ms must be in [0, {REPLICA_FETCH_WAIT_MS_MAX}], "
                f"got {self.replica_fetch_wait_max_ms}"
            )
        if self.release_grace_ms < 0:
            raise ValueError(f"ReplicationConfig.release_grace_ms must be >= 0, got {self.release_grace_ms}")
        if self.release_grace_ms and 2 * self.replica_answer_age_max_ms > self.release_grace_ms:
            raise ValueError(
                f"ReplicationConfig.replica_answer_age_max_ms ({self.replica_answer_age_max_ms}) must be at most "
                f"half of release_grace_ms ({self.release_grace_ms})"
            )
        if self.replica_fetch_wait_max_ms >= self.replica_answer_age_max_ms:
            raise ValueError(
                f"ReplicationConfig.replica_fetch_wait_max_ms ({self.replica_fetch_wait_max_ms}) must be under "
                f"replica_answer_age_max_ms ({self.replica_answer_age_max_ms}): a parked answer would always be dropped"
            )


__all__ = [
    "ALTER_PARTITION_BACKOFF_MS",
    "ISR_CHECK_INTERVAL_MS",
    "PARTITIONS_PER_LOOP_SLICE",
    "REPLICA_ANSWER_AGE_MAX_MS_DEFAULT",
    "REPLICA_FETCH_BACKOFF_MS_DEFAULT",
    "REPLICA_FETCH_BUILD_INLINE_PARTITIONS_MAX",
    "REPLICA_FETCH_ENTRIES_MAX_DEFAULT",
    "REPLICA_FETCH_PARTITIONS_MAX",
    "REPLICA_FETCH_WAIT_MAX_MS_DEFAULT",
    "REPLICA_FETCH_WAIT_MS_MAX",
    "REPLICA_SERVE_INLINE_ENTRIES_MAX",
    "REPLICA_SERVE_INLINE_PARTITIONS_MAX",
    "ReplicationConfig",
]
