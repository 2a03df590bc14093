"""One partition's replication state on this broker, as Kafka's ``Partition``:
:class:`LedPartition` for a partition it leads, :class:`FollowedPartition` for
one it follows.

A led partition answers a follower's fetch from the store
(:meth:`LedPartition.read_for_follower`): leader-epoch fencing, the
divergence check (``partlog.kafka.leader_epochs``), then entries.  The
replica manager (``partlog.replication.manager``) owns these records and
does the asyncio work around them: parking fetches, the ISR, acks=all.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from partlog import injected_bugs
from partlog.kafka.errors import Errors
from partlog.kafka.leader_epochs import diverging_epoch
from partlog.kafka.records import TopicIdPartition
from partlog.replication.replica_state import ReplicaState
from partlog.rpc.wire import ReplicaFetchPartition, ReplicaFetchResult
from partlog.store import MetadataStore, OffsetOutOfRangeError, StoreError

log = logging.getLogger(__name__)


@dataclass(slots=True)
class LedPartition:
    """A partition this broker leads."""

    tp: TopicIdPartition
    leader_epoch: int
    rs: ReplicaState
    waiters: dict[int, asyncio.Future[Errors]] = field(default_factory=dict)
    alter_inflight: bool = False
    alter_backoff_until_ms: int = 0

    def read_for_follower(
        self, store: MetadataStore, replica_id: int, p: ReplicaFetchPartition, entries_max: int
    ) -> ReplicaFetchResult:
        """The store side of one partition of a replica fetch by
        ``replica_id``, a replica of it (a worker thread): fencing,
        divergence, at most ``entries_max`` entries."""
        tp = p.topic_id_partition
        unfenced = injected_bugs.on("no_fetch_epoch_fencing")
        if p.current_leader_epoch < self.leader_epoch and not unfenced:
            return ReplicaFetchResult(Errors.FENCED_LEADER_EPOCH)
        if p.current_leader_epoch > self.leader_epoch and not unfenced:
            return ReplicaFetchResult(Errors.UNKNOWN_LEADER_EPOCH)
        try:
            leo = store.log_end_offset(tp)
            div = diverging_epoch(store.leader_epoch_cache(tp), leo, p.fetch_offset, p.last_fetched_epoch)
            if unfenced:
                div = None
            if div is not None:
                return ReplicaFetchResult(
                    Errors.NONE,
                    self.rs.high_watermark,
                    -1,
                    leo,
                    div.leader_epoch,
                    div.end_offset,
                )
            read = store.read_log(tp, p.fetch_offset, 1 << 62, entries_max)
        except OffsetOutOfRangeError:
            state = store.partition_state(tp)
            return ReplicaFetchResult(
                Errors.OFFSET_OUT_OF_RANGE, -1, state["log_start_offset"], state["log_end_offset"]
            )
        except (StoreError, KeyError) as e:
            log.warning("replica fetch of %s by broker %d failed: %s", tp, replica_id, e)
            return ReplicaFetchResult(Errors.KAFKA_STORAGE_ERROR)
        return ReplicaFetchResult(
            Errors.NONE,
            self.rs.high_watermark,
            read.log_start_offset,
            read.log_end_offset,
            entries=read.entries,
        )


@dataclass(slots=True)
class FollowedPartition:
    """A partition this broker follows: from which leader, at which epoch."""

    leader: int
    leader_epoch: int


def with_hwm(r: ReplicaFetchResult, hwm: int) -> ReplicaFetchResult:
    """``r`` reporting the leader's HWM ``hwm`` (-1: keep ``r``'s)."""
    if hwm < 0 or r.high_watermark == hwm:
        return r
    return ReplicaFetchResult(
        r.error, hwm, r.log_start_offset, r.log_end_offset, r.diverging_epoch, r.diverging_end_offset, r.entries
    )


__all__ = ["FollowedPartition", "LedPartition", "with_hwm"]
