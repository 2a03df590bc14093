"""The follower's side of replication: appending a leader's entries at the
leader's offsets and epochs, truncating a divergent suffix, restarting at a
new log start.  The transaction state (producers' ongoing transactions,
the partition's unstable ones, the aborted index) follows the entries: an
append derives it as the leader did, a truncation rebuilds it as if the
suffix had never been appended, a reset drops it.  A marker travels as an
entry without WAL object (empty object key, the marker in ``byte_offset``).

:class:`FollowerLog` owns no state: each operation runs inside an exclusive
write (a :class:`~partlog.store.staged.Staged`) and asks the components.
The high watermark the owner drives is the catalog's
(:meth:`~partlog.store.catalog.Catalog.set_high_watermark`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from partlog import injected_bugs
from partlog.kafka import batch_header as bh
from partlog.kafka.batch_header import BatchHeader
from partlog.kafka.control_batch import control_problem
from partlog.kafka.crc32c import crc32c
from partlog.kafka.producer_state import ProducerWindow
from partlog.kafka.records import (
    ReplicatedEntry,
    TimestampType,
    TopicIdPartition,
)
from partlog.store.catalog import Catalog
from partlog.store.epochs import EpochCache
from partlog.store.index import FileIndex
from partlog.store.layout import (
    ENTRY_CRC,
    ENTRY_TAIL,
    INLINE_FILE_ID,
    CorruptEntryError,
    Part,
    ReplicationError,
    inline_marker,
)
from partlog.store.log import LogChunks
from partlog.store.producers import ProducerTable, rebuild
from partlog.store.staged import Staged
from partlog.store.txns import ABORTED_RECORD, PartTxns, TxnTable
from partlog.wal.key import OBJECT_KEY_BYTES_MAX


def check_replicated(tp: TopicIdPartition, e: ReplicatedEntry) -> BatchHeader:
    """Stateless checks of one replicated entry; returns its parsed header.

    The leader validated the batch when it committed it; these catch a broken
    transfer or a broker bug before it reaches this log.  The batch CRC is not
    checked: the records are not here.
    """
    if len(e.header) != bh.HEADER_SIZE:
        raise ReplicationError(f"partition {tp}: replicated header is {len(e.header)} bytes, expected {bh.HEADER_SIZE}")
    h = BatchHeader.parse(e.header)
    where = f"partition {tp}: replicated entry at offset {h.base_offset}"
    if h.magic != bh.MAGIC_V2:
        raise ReplicationError(f"{where}: magic {h.magic}, expected {bh.MAGIC_V2}")
    if h.size < bh.HEADER_SIZE or h.size != e.size:
        raise ReplicationError(f"{where}: size {e.size} disagrees with the header's batch length {h.batch_length}")
    if h.base_offset < 0 or h.last_offset_delta < 0:
        raise ReplicationError(f"{where}: bad offsets (last offset delta {h.last_offset_delta})")
    if h.partition_leader_epoch < 0:
        raise ReplicationError(f"{where}: no partition leader epoch ({h.partition_leader_epoch})")
    if h.is_control:
        # A marker: inline, its byte_offset field holds the marker.
        if e.object_key or not 0 <= e.byte_offset < 1 << 33:
            raise ReplicationError(f"{where}: control batch with a WAL object or no marker")
        problem = control_problem(e.header, *inline_marker(e.byte_offset))
        if problem:
            raise ReplicationError(f"{where}: {problem}")
    elif not 0 < len(e.object_key.encode()) <= OBJECT_KEY_BYTES_MAX:
        raise ReplicationError(f"{where}: object key {e.object_key!r} is empty or over {OBJECT_KEY_BYTES_MAX} bytes")
    elif e.file_size <= 0 or e.byte_offset < 0 or e.byte_offset + e.size > e.file_size:
        raise ReplicationError(
            f"{where}: byte range [{e.byte_offset}, {e.byte_offset + e.size}) outside file size {e.file_size}"
        )
    if h.timestamp_type == TimestampType.LOG_APPEND_TIME:
        if e.log_append_time != h.max_timestamp:
            raise ReplicationError(f"{where}: log append time {e.log_append_time}, header says {h.max_timestamp}")
    elif e.log_append_time != -1 or e.batch_max_timestamp != h.max_timestamp:
        raise ReplicationError(
            f"{where}: CreateTime batch with log append time {e.log_append_time} "
            f"or max timestamp {e.batch_max_timestamp} != header's {h.max_timestamp}"
        )
    if h.producer_id >= 0:
        # (a transactional batch of the group coordinator has no sequence)
        if h.producer_epoch < 0 or (h.base_sequence < 0 and not (h.is_transactional and h.base_sequence == -1)):
            raise ReplicationError(f"{where}: producer {h.producer_id} without epoch or sequence")
    elif h.producer_id != bh.NO_PRODUCER_ID or h.is_transactional:
        raise ReplicationError(f"{where}: producer id {h.producer_id}")
    return h


class EntrySource(Protocol):
    """What building a follower's entries reads and advances: an exclusive
    write's :class:`~partlog.store.staged.Staged`, or the commit path's
    caches (:mod:`partlog.store.follower_commit`)."""

    def next_id(self, name: bytes) -> int: ...

    def producer_raw(self, part_id: int, producer_id: int) -> bytes | None: ...

    def txns_raw(self, part_id: int) -> bytes: ...


@dataclass(slots=True)
class BuiltEntries:
    """One partition's replicated entries made ready to write: what
    :func:`build_entries` returns, the partition's state already advanced."""

    run: bytes  # the new log entries, whole, ascending
    # object key -> [file_id, batches, bytes, uploader, file size]
    files: dict[str, list[int]]
    producers: dict[int, bytes]  # producer id -> its window after the entries, encoded
    ptxns: PartTxns | None  # the partition's transactions, when an entry changed them
    aborted: list[bytes]  # new aborted-index records, ascending
    epochs: list[tuple[int, int]]  # (leader epoch, start offset) the entries start, ascending


def check_continues(tp: TopicIdPartition, part: Part, headers: list[BatchHeader], latest_epoch: int) -> None:
    """Raise :class:`ReplicationError` unless entries with ``headers`` continue
    ``part``'s log: contiguous offsets from its log end, and leader epochs
    that never go below ``latest_epoch`` (the newest in its epoch cache)."""
    expect = part.log_end_offset
    if headers and part.live_batches == 0:
        h0 = headers[0]
        if h0.base_offset < expect <= h0.base_offset + h0.last_offset_delta:
            # The leader's log start lies inside its first batch (a
            # DeleteRecords) and this empty log starts there: take the
            # whole batch, the log start stays inside it, as Kafka's
            # follower restarts its log at the batch's base offset.
            expect = h0.base_offset
    epoch = latest_epoch
    for h in headers:
        if h.base_offset != expect:
            raise ReplicationError(
                f"partition {tp}: replicated entry at offset {h.base_offset} does not continue the log: "
                f"expected offset {expect}"
            )
        if h.partition_leader_epoch < epoch:
            raise ReplicationError(
                f"partition {tp}: replicated entry at offset {h.base_offset} has leader epoch "
                f"{h.partition_leader_epoch}, below {epoch}"
            )
        epoch = h.partition_leader_epoch
        expect = h.base_offset + h.last_offset_delta + 1


def follower_hwm(part: Part, leader_high_watermark: int) -> int:
    """Kafka's follower HWM: the leader's, capped at the log end, and never
    below the log start; ours also never goes down here.  Sets it on ``part``."""
    hwm = max(part.high_watermark, min(leader_high_watermark, part.log_end_offset), part.log_start_offset)
    part.high_watermark = hwm
    return hwm


def build_entries(
    src: EntrySource,
    file_id_of: Callable[[str], int],
    part: Part,
    items: list[ReplicatedEntry],
    headers: list[BatchHeader],
    latest_epoch: int,
    now: int,
    expiration_ms: int,
) -> BuiltEntries:
    """The log entries, file references, producer windows and transactions
    of ``items`` (checked by :func:`check_continues`), as the leader derived
    them (no checks: Kafka's AppendOrigin.REPLICATION); advances ``part``'s
    log end, live counters, timestamps and leader epoch.  ``file_id_of``
    gives the id some write gave an object key, or -1 (a new one is drawn)."""
    part_id = part.part_id
    files: dict[str, list[int]] = {}
    run: list[bytes] = []
    # This partition's producers as the entries change them (leader's rules, no checks).
    windows: dict[int, ProducerWindow] = {}
    running_max = part.running_max_timestamp
    epoch = latest_epoch
    epochs: list[tuple[int, int]] = []
    ptxns: PartTxns | None = None  # loaded at the first transactional entry
    aborted: list[bytes] = []
    for e, h in zip(items, headers, strict=True):
        if h.is_control:
            file_id = INLINE_FILE_ID
        else:
            acc = files.get(e.object_key)
            if acc is None:
                file_id = file_id_of(e.object_key)
                if file_id < 0:
                    file_id = src.next_id(b"next_file_id")
                acc = files[e.object_key] = [file_id, 0, 0, e.uploader_broker_id, e.file_size]
            acc[1] += 1
            acc[2] += e.size
            file_id = acc[0]
        base = h.base_offset
        last = base + h.last_offset_delta
        # The stored maxTimestamp is what ListOffsets and retention use
        # (the append time on LogAppendTime topics), as on the leader.
        effective_ts = h.max_timestamp
        if effective_ts > running_max:
            running_max = effective_ts
        if effective_ts > part.max_timestamp and part.max_timestamp_offset != -2:
            part.max_timestamp = effective_ts
            part.max_timestamp_offset = base
        body = e.header + ENTRY_TAIL.pack(
            file_id,
            e.byte_offset,
            e.size,
            e.log_append_time,
            e.batch_max_timestamp,
            running_max,
            src.next_id(b"next_batch_id"),
        )
        run.append(body + ENTRY_CRC.pack(crc32c(body)))
        if h.partition_leader_epoch > epoch:
            epoch = h.partition_leader_epoch
            epochs.append((epoch, base))
        pid = h.producer_id
        if pid >= 0:
            window = windows.get(pid)
            if window is None:
                window = windows[pid] = ProducerWindow.from_encoded(src.producer_raw(part_id, pid))
            if window.expired(now, expiration_ms):
                # expired, as the leader's lookup decides
                window = windows[pid] = ProducerWindow.from_encoded(None)
            if h.is_control or h.is_transactional:
                # The leader's transaction state, derived as it derived it.
                if ptxns is None:
                    ptxns = PartTxns.decode(src.txns_raw(part_id))
                _follow_txn(ptxns, aborted, window, e, h)
            if not h.is_control:
                window.append_values(
                    h.producer_epoch,
                    h.base_sequence,
                    h.last_sequence,
                    base,
                    last,
                    e.batch_max_timestamp,
                    e.log_append_time,
                )
        part.live_batches += 1
        part.live_bytes += e.size
        part.log_end_offset = last + 1
    part.running_max_timestamp = running_max
    if epoch > part.leader_epoch:
        part.leader_epoch = epoch
    return BuiltEntries(b"".join(run), files, {pid: w.encoded() for pid, w in windows.items()}, ptxns, aborted, epochs)


def _follow_txn(
    ptxns: PartTxns, aborted: list[bytes], window: ProducerWindow, e: ReplicatedEntry, h: BatchHeader
) -> None:
    """A replicated transactional batch or marker changes the producer's
    and the partition's transactions as on the leader (no checks: Kafka's
    AppendOrigin.REPLICATION)."""
    pid = h.producer_id
    if not h.is_control:
        if window.txn_first < 0:
            window.txn_first = h.base_offset
            ptxns.start(pid, h.base_offset)
        return
    committed, coordinator_epoch = inline_marker(e.byte_offset)
    if window.txn_first >= 0:
        ptxns.complete(pid, h.base_offset)
        if not committed and not injected_bugs.on("follower_skips_aborted_index"):
            lso = ptxns.next_incomplete(pid)
            last = h.base_offset
            aborted.append(ABORTED_RECORD.pack(last, pid, window.txn_first, last + 1 if lso < 0 else lso))
    window.end_txn(h.producer_epoch, coordinator_epoch, h.max_timestamp)


class FollowerLog:
    """The follower API's writes (see the module doc).  ``clock`` gives
    milliseconds since the epoch (producer expiry, as the leader decides it)."""

    def __init__(
        self,
        *,
        catalog: Catalog,
        log: LogChunks,
        index: FileIndex,
        epochs: EpochCache,
        producers: ProducerTable,
        txns: TxnTable,
        clock: Callable[[], int],
        producer_id_expiration_ms: int,
    ) -> None:
        self._txns = txns
        self._catalog = catalog
        self._log = log
        self._index = index
        self._epochs = epochs
        self._producers = producers
        self._clock = clock
        self._expiration_ms = producer_id_expiration_ms

    def without_entries(
        self, tp: TopicIdPartition, leader_high_watermark: int, leader_log_start_offset: int
    ) -> int | None:
        """An append of no entries that needs no write (the log start stays):
        the HWM rises in memory; returns the log end.  None when a write must
        move the log start.  KeyError for an unknown partition."""
        cached = self._catalog.parts.get(tp)
        if cached is None:
            raise KeyError(f"unknown partition {tp}")
        if min(leader_log_start_offset, cached.log_end_offset) <= cached.log_start_offset:
            self._catalog.set_high_watermark(tp, leader_high_watermark)
            return cached.log_end_offset
        return None

    def append(
        self,
        s: Staged,
        tp: TopicIdPartition,
        items: list[ReplicatedEntry],
        headers: list[BatchHeader],
        leader_high_watermark: int,
        leader_log_start_offset: int,
    ) -> int:
        """Append ``items`` (their headers checked by :func:`check_replicated`)
        at the leader's offsets in the exclusive write ``s``; returns the new
        log end offset (see :meth:`partlog.store.MetadataStore.append_replicated`)."""
        part = s.part(tp)
        if part is None:
            raise KeyError(f"unknown partition {tp}")
        txn = s.txn
        part_id = part.part_id
        latest_epoch = self._epochs.latest(txn, [part_id])[0]
        check_continues(tp, part, headers, latest_epoch)
        built = build_entries(
            s,
            lambda key: self._index.resolve(txn, key),
            part,
            items,
            headers,
            latest_epoch,
            self._clock(),
            self._expiration_ms,
        )
        for epoch, start in built.epochs:
            self._epochs.assign(txn, part_id, epoch, start)
        for pid, raw in built.producers.items():
            s.producers[(part_id, pid)] = raw
        if built.run:
            self._log.append(txn, part_id, built.run)
        for object_key, (file_id, nb, nbytes, uploader, file_size) in built.files.items():
            self._index.add(txn, object_key, file_id, nb, nbytes, uploader, file_size)
        leo = part.log_end_offset
        if built.aborted:
            self._txns.put_aborted(txn, part_id, built.aborted)
        new_lso = min(leader_log_start_offset, leo)
        if new_lso > part.log_start_offset:
            part.log_start_offset = new_lso
            self._log.drop_below(txn, part, new_lso)
            self._txns.drop_aborted_below(txn, part_id, new_lso)
        hwm = follower_hwm(part, leader_high_watermark)
        s.hwms[tp] = (hwm, False)
        if built.ptxns is not None:
            built.ptxns.prune(hwm)
            s.txns[part_id] = built.ptxns.encode()
        return leo

    def truncate(self, s: Staged, tp: TopicIdPartition, offset: int) -> int:
        """Remove the suffix from ``offset``: every entry whose last offset is
        >= ``offset`` (the log end becomes the base of the first entry
        removed); returns how many entries went, 0 if ``offset`` is at or past
        the log end (epochs starting at the log end still go, as in Kafka).

        In the one write ``s``: the removed entries' file references,
        epoch-cache entries starting at or after the new log end, and the HWM
        (persisted and in memory; the only write that lowers it) capped at
        the new log end; producers that had a batch in the suffix get their
        state rebuilt from their remaining entries (deleted if none remain),
        so a truncated sequence can be sent again.  The log start stays
        unless the cut batch held it (then it becomes the new log end: the
        log is empty)."""
        cached = self._catalog.parts.get(tp)
        if cached is None:
            raise KeyError(f"unknown partition {tp}")
        if offset < cached.log_start_offset:
            raise ValueError(
                f"partition {tp}: cannot truncate to offset {offset}, "
                f"below the log start offset {cached.log_start_offset}"
            )
        if offset >= cached.log_end_offset:
            # No entry goes, but as Kafka an epoch this replica started
            # as leader without appending anything does: the new
            # leader's entries may carry older epochs.  The partition is
            # written too: a new version (MetadataStore.partition_version)
            # tells readers the newest epoch may have changed.
            s.part(tp)
            self._epochs.truncate_from_end(s.txn, cached.part_id, cached.log_end_offset)
            return 0
        part = s.part(tp)
        assert part is not None
        txn = s.txn
        first = self._log.entry_containing(txn, part, offset)
        if first is None:
            raise CorruptEntryError(f"partition {tp}: no entry holds offset {offset}")
        new_leo = first[1].base_offset
        removed, pids, marker_pids = self._log.drop_from(txn, part, new_leo)
        part.log_end_offset = new_leo
        part.log_start_offset = min(part.log_start_offset, new_leo)
        part.high_watermark = min(part.high_watermark, new_leo)
        s.hwms[tp] = (part.high_watermark, True)
        if part.max_timestamp_offset >= new_leo:
            part.max_timestamp_offset = -2  # rescanned on demand, as after a deletion
        if part.live_batches == 0:
            part.max_timestamp, part.max_timestamp_offset = -1, -1
        # The last remaining entry holds the exact running max of the prefix.
        last = self._log.last_entry(txn, part)
        part.running_max_timestamp = -1 if last is None else last.running_max_timestamp
        self._epochs.truncate_from_end(txn, part.part_id, new_leo)
        before = {pid: s.producer_raw(part.part_id, pid) for pid in pids}
        ptxns = PartTxns.decode(s.txns_raw(part.part_id))
        reopened = {pid: first for pid, first in ptxns.reopened(new_leo).items() if pid in pids}
        ongoing: dict[int, int] = {}
        for pid, raw in rebuild(self._log.entries_backward(txn, part), before, new_leo, reopened, marker_pids).items():
            s.producers[(part.part_id, pid)] = raw
            ongoing[pid] = -1 if raw is None else ProducerWindow.from_encoded(raw).txn_first
        ptxns.drop_from(new_leo, ongoing)
        s.txns[part.part_id] = ptxns.encode()
        self._txns.drop_aborted_from(txn, part.part_id, new_leo)
        return removed

    def reset(self, s: Staged, tp: TopicIdPartition, offset: int) -> None:
        """Empty the partition and restart it at ``offset``: every entry and
        its file references, the producer states and the epoch cache go; log
        start, log end and HWM become ``offset``."""
        part = s.part(tp)
        if part is None:
            raise KeyError(f"unknown partition {tp}")
        self._log.drop_below(s.txn, part, None)
        part.log_start_offset = part.log_end_offset = part.high_watermark = offset
        part.running_max_timestamp = part.max_timestamp = part.max_timestamp_offset = -1
        s.hwms[tp] = (offset, True)
        self._producers.drop(s.txn, part.part_id)
        for k in self._producers.keys_of(part.part_id, s.producers):
            s.producers[k] = None
        self._epochs.drop(s.txn, part.part_id)
        self._txns.drop(s.txn, part.part_id)
        s.txns[part.part_id] = b""
