"""Which tiered segments a replica keeps on its own disk (sans-IO):
KIP-1163's third fetch policy, the last N bytes of each partition's
segments held locally, so that consumers reading recent history from this
replica need no GET (docs/design/tiered-reads.md, "Local copies").

:func:`plan_local_copies` takes each served partition's segment rows
(ascending, as the store keeps them) and the copies held, and answers which
to download and which to delete: per partition the newest segments whose
sizes add up to at most ``partition_bytes_max`` (a segment larger than that
is never held, and ends the partition's run: copies are a suffix of its
segments); over all partitions at most ``total_bytes_max``, filled rank by
rank (every partition's newest first, then every partition's second, ...),
so one busy partition cannot take every byte.  Downloads per call are
bounded by ``fetch_bytes_max`` (at least one segment, newest first).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from partlog.kafka.records import TopicIdPartition


@dataclass(frozen=True, slots=True)
class LocalCopy:
    """One segment's ``.log`` held on this replica's disk."""

    topic_id_partition: TopicIdPartition
    key: str
    size: int


@dataclass(frozen=True, slots=True)
class LocalCopyPlan:
    # To download, newest first; to delete (keys held that are no longer wanted).
    fetch: tuple[LocalCopy, ...]
    delete: tuple[str, ...]


def plan_local_copies(
    rows: Mapping[TopicIdPartition, Sequence[tuple[str, int]]],
    held: Mapping[str, LocalCopy],
    *,
    partition_bytes_max: int,
    total_bytes_max: int,
    fetch_bytes_max: int,
) -> LocalCopyPlan:
    """The plan for ``rows`` (per partition, its segments' (key, size),
    ascending) given the copies ``held`` (module doc)."""
    if min(partition_bytes_max, total_bytes_max, fetch_bytes_max) < 0:
        raise ValueError("byte bounds must be >= 0")
    # Each partition's newest segments that fit its share, newest first.
    ranked: list[list[LocalCopy]] = []
    for tp, segments in rows.items():
        mine: list[LocalCopy] = []
        used = 0
        for key, size in reversed(segments):
            if used + size > partition_bytes_max:
                break
            mine.append(LocalCopy(tp, key, size))
            used += size
        ranked.append(mine)
    wanted: list[LocalCopy] = []
    total = 0
    full = False
    for rank in range(max((len(r) for r in ranked), default=0)):
        for mine in ranked:
            if rank < len(mine) and not full:
                copy = mine[rank]
                if total + copy.size > total_bytes_max:
                    full = True
                    continue
                wanted.append(copy)
                total += copy.size
    keep = {c.key for c in wanted}
    fetch: list[LocalCopy] = []
    fetched = 0
    for copy in wanted:
        if copy.key in held or (fetch and fetched + copy.size > fetch_bytes_max):
            continue
        fetch.append(copy)
        fetched += copy.size
    return LocalCopyPlan(tuple(fetch), tuple(k for k in held if k not in keep))


__all__ = ["LocalCopy", "LocalCopyPlan", "plan_local_copies"]
