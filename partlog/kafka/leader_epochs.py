"""Leader-epoch arithmetic for log divergence, as Kafka's
``LeaderEpochFileCache.endOffsetFor`` and the fetch-time divergence check
(KIP-320/KIP-595): pure functions over a partition's epoch cache, the
``[(leader_epoch, start_offset), ...]`` list that
``MetadataStore.leader_epoch_cache`` returns.

Followers use them: a follower fetches with the epoch of its last
entry; the leader answers with a diverging epoch when that epoch ends on the
leader before the follower's fetch offset, and the follower truncates its
divergent suffix before fetching again.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


@dataclass(frozen=True, slots=True)
class EpochEndOffset:
    leader_epoch: int
    end_offset: int


def end_offset_for_epoch(cache: Sequence[tuple[int, int]], requested_epoch: int, log_end_offset: int) -> EpochEndOffset:
    """The largest epoch <= ``requested_epoch`` and the offset where it ends
    (the start of the next epoch, or the log end for the latest epoch).

    As Kafka: an undefined or unknown-and-too-large epoch gives
    (-1, -1); an epoch older than the cache gives (requested, start of the
    first epoch above it), since those entries are gone from the log.
    """
    if requested_epoch == UNDEFINED_EPOCH or not cache:
        return EpochEndOffset(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
    epochs = [e for e, _ in cache]
    if epochs[-1] == requested_epoch:
        return EpochEndOffset(requested_epoch, log_end_offset)
    higher = bisect.bisect_right(epochs, requested_epoch)
    if higher == len(epochs):
        return EpochEndOffset(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
    if higher == 0:
        return EpochEndOffset(requested_epoch, cache[0][1])
    return EpochEndOffset(cache[higher - 1][0], cache[higher][1])


def diverging_epoch(
    leader_cache: Sequence[tuple[int, int]], leader_log_end_offset: int, fetch_offset: int, last_fetched_epoch: int
) -> EpochEndOffset | None:
    """The leader's check on a follower fetch: None when the follower's log
    is a prefix of the leader's up to ``fetch_offset``; else the epoch and end
    offset the follower must truncate to (Kafka's ``divergingEpoch``)."""
    if last_fetched_epoch == UNDEFINED_EPOCH:
        return None
    end = end_offset_for_epoch(leader_cache, last_fetched_epoch, leader_log_end_offset)
    if end.leader_epoch < last_fetched_epoch or end.end_offset < fetch_offset:
        return end
    return None


def truncation_offset(
    follower_cache: Sequence[tuple[int, int]],
    follower_log_end_offset: int,
    follower_high_watermark: int,
    diverging: EpochEndOffset,
) -> tuple[int, bool]:
    """Where a follower truncates after the leader answered ``diverging``,
    and whether that is final (False: truncate, then fetch again to learn
    more), as Kafka's ``AbstractFetcherThread.getOffsetTruncationState``."""
    leo = follower_log_end_offset
    if diverging.end_offset == UNDEFINED_EPOCH_OFFSET:
        # The leader knows nothing of the epoch: keep only what is committed.
        return min(follower_high_watermark, leo), True
    if diverging.leader_epoch == UNDEFINED_EPOCH:
        return min(diverging.end_offset, leo), True
    mine = end_offset_for_epoch(follower_cache, diverging.leader_epoch, leo)
    if mine.leader_epoch == UNDEFINED_EPOCH:
        # The follower tracked no epoch that old: the leader's offset is safe.
        return min(diverging.end_offset, leo), True
    if mine.leader_epoch != diverging.leader_epoch:
        # The follower never saw the leader's epoch: truncate to the end of
        # its largest older epoch and ask again.
        return min(mine.end_offset, leo), False
    return min(mine.end_offset, diverging.end_offset, leo), True
