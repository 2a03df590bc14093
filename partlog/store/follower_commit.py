"""A follower's appends of one fetch response, as one store write.

:meth:`ReplicaWrites.append` takes the appends of every partition of one
replica fetch response (:class:`ReplicaAppend`) and answers each with the
partition's new log end offset, or the error that partition alone failed
with (:class:`~partlog.store.layout.ReplicationError` when its entries do
not continue its log, KeyError for an unknown partition): the others still
apply, as Kafka's ``ReplicaFetcherThread`` handles each partition of a
response on its own.

The stateless checks (:func:`~partlog.store.replication.check_replicated`)
run in the caller's thread; an append of no entries that moves no log start
only raises the HWM in memory; the rest run in ONE exclusive write
(:meth:`FollowerLog.append <partlog.store.replication.FollowerLog.append>`
per partition, each validating before it writes).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from partlog.kafka.batch_header import BatchHeader
from partlog.kafka.records import ReplicatedEntry, TopicIdPartition
from partlog.store.layout import ReplicationError
from partlog.store.replication import FollowerLog, check_replicated
from partlog.store.staged import Staged

log = logging.getLogger(__name__)

Outcome = int | ReplicationError | KeyError
"""One partition's answer: its new log end offset, or why it failed alone."""


@dataclass(frozen=True, slots=True)
class ReplicaAppend:
    """One partition of a replica fetch response: the leader's entries (from
    its ``read_log``), its high watermark and its log start offset."""

    topic_id_partition: TopicIdPartition
    entries: Sequence[ReplicatedEntry]
    leader_high_watermark: int
    leader_log_start_offset: int


class ReplicaWrites:
    """The follower's appends (see the module doc).  ``write(fn)`` runs
    ``fn`` in the store's exclusive write."""

    def __init__(self, follower: FollowerLog, write: Callable[[Callable[[Staged], None]], None]) -> None:
        self._follower = follower
        self._write = write

    def append(self, appends: Sequence[ReplicaAppend]) -> list[Outcome]:
        """Answers in the order of ``appends`` (see the module doc)."""
        out: list[Outcome | None] = [None] * len(appends)
        exclusive: list[tuple[int, list[ReplicatedEntry], list[BatchHeader]]] = []
        for i, a in enumerate(appends):
            tp = a.topic_id_partition
            items = list(a.entries)
            try:
                headers = [check_replicated(tp, e) for e in items]
                if not items:
                    leo = self._follower.without_entries(tp, a.leader_high_watermark, a.leader_log_start_offset)
                    if leo is not None:
                        out[i] = leo
                        continue
            except (ReplicationError, KeyError) as e:
                out[i] = e
                continue
            exclusive.append((i, items, headers))
        if exclusive:
            self._write(lambda s: self._append_exclusive(s, appends, exclusive, out))
        assert all(o is not None for o in out)
        return [o for o in out if o is not None]

    def _append_exclusive(
        self,
        s: Staged,
        appends: Sequence[ReplicaAppend],
        todo: list[tuple[int, list[ReplicatedEntry], list[BatchHeader]]],
        out: list[Outcome | None],
    ) -> None:
        """Each partition of ``todo`` in the exclusive write ``s``: one that
        fails its checks raised before writing anything, so the others
        still stand in the same transaction."""
        for i, items, headers in todo:
            a = appends[i]
            try:
                out[i] = self._follower.append(
                    s, a.topic_id_partition, items, headers, a.leader_high_watermark, a.leader_log_start_offset
                )
            except (ReplicationError, KeyError) as e:
                out[i] = e
