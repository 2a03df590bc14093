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
only raises the HWM in memory.  The appends with entries go through the
group-commit pipeline as ONE :class:`FollowerCall`, beside the leader's
commits (:mod:`partlog.store.writes`): :func:`sequence_follower` validates
each partition against the caches (which run ahead of disk by the groups
sequenced, as for the leader's commits) and builds its entries, producer
windows and transactions exactly as the exclusive path does; the call's
changes join the group, durable at the group's ONE journal append and
fdatasync, visible to readers through the overlay until a checkpoint
applies them to LMDB.  The call returns only then: the log end offset it
answers (and that the fetcher reports to the leader in its next fetch) is
durable.  Recovery replays these records as it replays the leader's: they
are the same group records (docs/design/store.md, "The follower's appends").

Two rare cases keep the exclusive path (pipeline drained, journal applied,
one synced LMDB transaction, :meth:`FollowerLog.append
<partlog.store.replication.FollowerLog.append>`): entries that start a
leader epoch (the epoch cache is written only by exclusive writes, so LMDB
always holds it current), and an append that moves the log start (it
deletes entries, which the overlay cannot express).  All such partitions of
one response share one exclusive write, after the journal's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from partlog.kafka.batch_header import BatchHeader
from partlog.kafka.records import ReplicatedEntry, TopicIdPartition
from partlog.store.layout import Part, ReplicationError
from partlog.store.replication import (
    FollowerLog,
    build_entries,
    check_continues,
    check_replicated,
    follower_hwm,
)
from partlog.store.staged import CacheState, Staged

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


@dataclass(frozen=True, slots=True)
class FollowerCall:
    """The appends of one fetch response that have entries, checked
    statelessly, for the group-commit pipeline: (the append, its entries,
    their headers); ``now_ms`` decides producer expiry as the leader did."""

    appends: list[tuple[ReplicaAppend, list[ReplicatedEntry], list[BatchHeader]]]
    now_ms: int


@dataclass(slots=True)
class FollowerDelta:
    """What one sequenced :class:`FollowerCall` changes (the shape of the
    leader's :class:`~partlog.store.sequencer.CommitDelta`)."""

    parts: dict[TopicIdPartition, Part] = field(default_factory=dict)
    producers: dict[tuple[int, int], bytes] = field(default_factory=dict)
    counters: dict[bytes, int] = field(default_factory=dict)
    runs: dict[int, bytes] = field(default_factory=dict)
    # object key -> [file_id, batches, bytes, uploader, file size]
    files: dict[str, list[int]] = field(default_factory=dict)
    txns: dict[int, bytes] = field(default_factory=dict)
    aborted: dict[int, list[bytes]] = field(default_factory=dict)


class _CacheSource:
    """:class:`~partlog.store.replication.EntrySource` on the commit path's
    caches, with the counters and new file ids of the call so far."""

    __slots__ = ("_state", "counters", "file_ids")

    def __init__(self, state: CacheState, counters: dict[bytes, int], file_ids: dict[str, int]) -> None:
        self._state = state
        self.counters = counters
        self.file_ids = file_ids

    def next_id(self, name: bytes) -> int:
        value = self.counters.get(name)
        if value is None:
            value = self._state.counter(name)
        self.counters[name] = value + 1
        return value

    def producer_raw(self, part_id: int, producer_id: int) -> bytes | None:
        return self._state.producer(part_id, producer_id)

    def txns_raw(self, part_id: int) -> bytes:
        return self._state.txns(part_id)

    def file_id(self, object_key: str) -> int:
        return self.file_ids[object_key]


def sequence_follower(
    state: CacheState,
    call: FollowerCall,
    *,
    latest_epoch: Callable[[int], int],
    effective_hwm: Callable[[Part], int],
    producer_id_expiration_ms: int,
) -> tuple[list[Outcome | None], FollowerDelta]:
    """Pipeline stage 1 for a follower's appends: per append of ``call``, in
    order, its new log end offset, its error, or None when it must take the
    exclusive path (see the module doc); and the changes of those that
    went through.  Reads the caches and nothing else changes them meanwhile
    (stage 1 runs one call at a time); ``latest_epoch(part_id)`` is the
    newest epoch of the partition's cache (from LMDB, which holds it current)."""
    delta = FollowerDelta()
    # Every object key first, before anything opens the call's snapshot
    # (CacheState.file_ids): a checkpoint running meanwhile must not hide a
    # reference from both the pending map and the snapshot.
    keys = {e.object_key for _a, items, _h in call.appends for e in items}
    keys.discard("")  # markers: inline, no object
    src = _CacheSource(state, delta.counters, state.file_ids(keys))
    out: list[Outcome | None] = []
    for a, items, headers in call.appends:
        tp = a.topic_id_partition
        cached = state.part(tp)
        if cached is None:
            out.append(KeyError(f"unknown partition {tp}"))
            continue
        latest = latest_epoch(cached.part_id)
        part = cached.copy()
        part.high_watermark = effective_hwm(cached)
        try:
            check_continues(tp, part, headers, latest)
        except ReplicationError as e:
            out.append(e)
            continue
        last = headers[-1]
        leo = last.base_offset + last.last_offset_delta + 1
        if last.partition_leader_epoch > latest or min(a.leader_log_start_offset, leo) > part.log_start_offset:
            out.append(None)
            continue
        built = build_entries(src, src.file_id, part, items, headers, latest, call.now_ms, producer_id_expiration_ms)
        assert not built.epochs and part.log_end_offset == leo, (tp, built.epochs, leo)
        part_id = part.part_id
        hwm = follower_hwm(part, a.leader_high_watermark)
        if built.ptxns is not None:
            built.ptxns.prune(hwm)
            delta.txns[part_id] = built.ptxns.encode()
        if built.aborted:
            delta.aborted[part_id] = built.aborted
        delta.parts[tp] = part
        delta.runs[part_id] = built.run
        for pid, raw in built.producers.items():
            delta.producers[(part_id, pid)] = raw
        for object_key, (fid, nb, nbytes, uploader, size) in built.files.items():
            src.file_ids[object_key] = fid  # a new id: the next partitions of the call take it
            acc = delta.files.get(object_key)
            if acc is None:
                delta.files[object_key] = [fid, nb, nbytes, uploader, size]
            else:
                acc[1] += nb
                acc[2] += nbytes
        out.append(leo)
    return out, delta


class ReplicaWrites:
    """The follower's appends (see the module doc).  ``submit(call)`` puts a
    :class:`FollowerCall` through the group-commit pipeline and returns
    :func:`sequence_follower`'s answers once its group is durable;
    ``write(fn)`` runs ``fn`` in the store's exclusive write; ``clock``
    gives ms since the epoch."""

    def __init__(
        self,
        follower: FollowerLog,
        submit: Callable[[FollowerCall], list[Outcome | None]],
        write: Callable[[Callable[[Staged], None]], None],
        clock: Callable[[], int],
    ) -> None:
        self._follower = follower
        self._submit = submit
        self._write = write
        self._clock = clock

    def append(self, appends: Sequence[ReplicaAppend]) -> list[Outcome]:
        """Answers in the order of ``appends`` (see the module doc); ValueError
        when a partition appears twice, before anything is written."""
        if len({a.topic_id_partition for a in appends}) != len(appends):
            raise ValueError("a fetch response names a partition twice")
        out: list[Outcome | None] = [None] * len(appends)
        journal: list[int] = []
        call = FollowerCall([], self._clock())
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
            if items:
                journal.append(i)
                call.appends.append((a, items, headers))
            else:
                exclusive.append((i, items, headers))
        if journal:
            for i, (_a, items, headers), outcome in zip(journal, call.appends, self._submit(call), strict=True):
                if outcome is None:
                    exclusive.append((i, items, headers))
                else:
                    out[i] = outcome
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
