"""One partition's replication state on this broker, as Kafka's ``Partition``:
:class:`LedPartition` for a partition it leads, :class:`FollowedPartition` for
one it follows.

A led partition answers a follower's fetch from the store
(:meth:`LedPartition.read_for_follower`): leader-epoch fencing, the
divergence check (``partlog.kafka.leader_epochs``), then entries and the
tiered-segment rows the follower lacks (:func:`segments_for_follower`).  The
replica manager (``partlog.replication.manager``) owns these records and
does the asyncio work around them: parking fetches, the ISR, acks=all.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from partlog import injected_bugs
from partlog.kafka.errors import Errors
from partlog.kafka.leader_epochs import diverging_epoch
from partlog.kafka.records import TopicIdPartition
from partlog.replication.replica_state import ReplicaState
from partlog.replication.rewrites import rewrites_for_follower
from partlog.rpc.wire import (
    NO_DIVERGENCE,
    ROWS_CHECKED_PER_FETCH_MAX,
    SEGMENT_SWAPS_PER_FETCH_MAX,
    ReplicaFetchPartition,
    ReplicaFetchResult,
    ReplicaSegment,
)
from partlog.store import MetadataStore, OffsetOutOfRangeError, Segment, StoreError

log = logging.getLogger(__name__)


class QuietAnswer(NamedTuple):
    """A replica's last fetch of a led partition that had nothing to send:
    the fetch, the partition's version and the HWM taken before its read,
    and the answer (LedPartition.quiet)."""

    fetch: ReplicaFetchPartition
    version: object
    high_watermark: int
    answer: ReplicaFetchResult
    # quiet_noop(fetch, answer): the same fetch again needs no new test.
    noop: bool


@dataclass(slots=True)
class LedPartition:
    """A partition this broker leads."""

    tp: TopicIdPartition
    leader_epoch: int
    rs: ReplicaState
    waiters: dict[int, asyncio.Future[Errors]] = field(default_factory=dict)
    alter_inflight: bool = False
    alter_backoff_until_ms: int = 0
    # Per replica: its last fetch here answered with nothing to send, the
    # partition's version (MetadataStore.partition_version) and the HWM
    # taken before that answer was read, and the answer.  The same fetch
    # while neither moved gets it again without a read: most fetches of a
    # cluster of many quiet partitions are exactly that.
    quiet: dict[int, QuietAnswer] = field(default_factory=dict)

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
        # Both taken before the reads: a write sequenced after them replaces
        # the version, so an answer kept here is never older than its key.
        hwm = self.rs.high_watermark
        try:
            version: object | None = store.partition_version(tp)
        except KeyError:
            version = None
        last = self.quiet.get(replica_id)
        if last is not None and last.version is version and last.high_watermark == hwm and last.fetch == p:
            return last.answer
        try:
            # From memory, after the version: a write standing in between
            # replaced it, so the answer kept below is never found again.
            leo, lso = store.log_end_offset(tp), store.log_start_offset(tp)
            # The usual case, a follower whose last entry is of the newest
            # epoch, needs no cache: that epoch ends at the log end
            # (end_offset_for_epoch), so there is no divergence.
            div = (
                None
                if p.fetch_offset <= leo and store.latest_leader_epochs([tp]) == [p.last_fetched_epoch]
                else diverging_epoch(store.leader_epoch_cache(tp), leo, p.fetch_offset, p.last_fetched_epoch)
            )
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
            # From the first row the follower may lack: an LMDB read of a
            # few rows, on this same path.
            rows = store.segments(tp, p.tiered_through + 1, SEGMENT_SWAPS_PER_FETCH_MAX + 1)
            # The follower's window of rows to compare (compaction.md).
            check = p.rows_check
            window = [] if check is None else store.segments(tp, check.from_offset, ROWS_CHECKED_PER_FETCH_MAX + 1)
        except OffsetOutOfRangeError:
            state = store.partition_state(tp)
            return ReplicaFetchResult(
                Errors.OFFSET_OUT_OF_RANGE, -1, state["log_start_offset"], state["log_end_offset"]
            )
        except (StoreError, KeyError) as e:
            log.warning("replica fetch of %s by broker %d failed: %s", tp, replica_id, e)
            return ReplicaFetchResult(Errors.KAFKA_STORAGE_ERROR)
        answer = ReplicaFetchResult(
            Errors.NONE,
            hwm,
            read.log_start_offset,
            read.log_end_offset,
            entries=read.entries,
            segments=segments_for_follower(rows, p, hwm),
            rewrites=rewrites_for_follower(window, p, hwm),
        )
        # Kept only if the read saw all the version holds: a commit is in
        # the version once sequenced, readable once durable, and nothing
        # replaces the version in between.
        if (
            version is not None
            and (leo, lso) == (read.log_end_offset, read.log_start_offset)
            and check is None
            and not (answer.entries or answer.segments or answer.rewrites)
        ):
            self.quiet[replica_id] = QuietAnswer(p, version, hwm, answer, quiet_noop(p, answer))
        else:
            self.quiet.pop(replica_id, None)
        return answer

    def quiet_fetch(
        self, store: MetadataStore, replica_id: int, p: ReplicaFetchPartition, now_ms: int | None
    ) -> ReplicaFetchResult | None:
        """``replica_id``'s last answer, if a fetch of ``p`` now would get it
        again and change nothing but the follower's fetch times, which move
        to ``now_ms`` (None: they moved already for this request): the quiet
        lane of a session fetch, ``p`` being the session's copy of an item
        the follower did not send again.

        The full path would find: no fencing (the same leader epoch), the
        same answer (the partition's version and HWM unchanged since it was
        read), nothing for the follower to apply (``quiet_noop``), and a
        caught-up ISR member at the log end and HWM with nothing waiting
        (``ReplicaState.quiet_fetch``): no append, HWM move, ISR check or
        urgency.  None otherwise (nothing changed): the full path's."""
        last = self.quiet.get(replica_id)
        if last is None or (last.fetch is not p and last.fetch != p) or p.current_leader_epoch != self.leader_epoch:
            return None
        answer = last.answer
        if injected_bugs.on("quiet_lane_ignores_writes"):
            return answer
        if not store.partition_version_is(last.version):
            return None
        if last.high_watermark != self.rs.high_watermark or not last.noop:
            return None
        return answer if self.rs.quiet_fetch(replica_id, p.fetch_offset, now_ms) else None


def segments_for_follower(
    rows: Iterable[Segment], p: ReplicaFetchPartition, high_watermark: int
) -> tuple[ReplicaSegment, ...]:
    """The leader's segment ``rows`` (ascending) that the follower fetching
    ``p`` lacks and can apply now, ascending, at most
    ``SEGMENT_SWAPS_PER_FETCH_MAX``: each starts past the follower's last row
    (``tiered_through``), ends at or past its log start (it holds some of the
    range: a follower swaps what it holds of a range its log starts in), and
    ends below both its fetch offset (its log holds the range, as the
    leader's, the divergence check said so) and the leader's HWM
    (committed: truncation never undoes it).  Rows never overlap, so their
    ends ascend too: the first that ends too high ends the list."""
    out: list[ReplicaSegment] = []
    bound = min(p.fetch_offset, high_watermark)
    for g in rows:
        if g.start_offset <= p.tiered_through or g.end_offset < p.log_start_offset:
            continue
        if g.end_offset >= bound or len(out) == SEGMENT_SWAPS_PER_FETCH_MAX:
            break
        out.append(ReplicaSegment(g.start_offset, g.end_offset, g.size, g.uploader, g.object_key))
    return tuple(out)


@dataclass(slots=True)
class FollowedPartition:
    """A partition this broker follows: from which leader, at which epoch,
    and the end offset of its last segment row (None: not read from the
    store yet; the fetcher reads it before its first fetch, and again after
    a truncation or a reset); the rows check's state."""

    leader: int
    leader_epoch: int
    tiered_through: int | None = None
    # The end of the last window of rows checked against the leader's
    # (-1: start from the first row), and the keys of leader rows refused
    # here, oldest first (not read again: compaction.md, "Replicas").
    checked_through: int = -1
    refused: dict[str, None] = field(default_factory=dict)
    # The last fetch item built for it without a rows check, and the
    # partition's version (MetadataStore.partition_version) it was built
    # from: while neither the version, the HWM nor the fields above moved,
    # the next fetch sends it again without reading the newest epoch from
    # LMDB (ReplicaFetchers._fetch_request).  None after a truncation,
    # which may drop an empty epoch without a new version.
    built: tuple[object, ReplicaFetchPartition] | None = None


def quiet_noop(p: ReplicaFetchPartition, r: ReplicaFetchResult) -> bool:
    """Whether the follower's apply of ``r``, the answer to ``p``, changes
    nothing (``ReplicaFetchers._apply_fetch``), so a sparse answer may leave
    it out: no error, divergence, entries or rows; no window of rows checked
    (its answer moves ``checked_through``); and the leader's HWM, log start
    and log end are the ones the follower sent (it never lowers its HWM or
    log start, so neither moves)."""
    return (
        r.error == Errors.NONE
        and r.diverging_epoch == NO_DIVERGENCE
        and not r.entries
        and not r.segments
        and not r.rewrites
        and p.rows_check is None
        and p.high_watermark >= 0
        and r.high_watermark == p.high_watermark
        and r.log_start_offset == p.log_start_offset
        and r.log_end_offset == p.fetch_offset
    )


def with_hwm(r: ReplicaFetchResult, hwm: int) -> ReplicaFetchResult:
    """``r`` reporting the leader's HWM ``hwm`` (-1: keep ``r``'s)."""
    if hwm < 0 or r.high_watermark == hwm:
        return r
    return r._replace(high_watermark=hwm)


__all__ = ["FollowedPartition", "LedPartition", "QuietAnswer", "quiet_noop", "segments_for_follower", "with_hwm"]
