"""The follower's side of replication: appending a leader's entries at the
leader's offsets and epochs, truncating a divergent suffix, restarting at a
new log start; and the high watermark the owner drives.
"""

from __future__ import annotations

from collections.abc import Iterable

from partlog.kafka import batch_header as bh
from partlog.kafka.batch_header import BatchHeader
from partlog.kafka.crc32c import crc32c
from partlog.kafka.producer_state import ProducerWindow
from partlog.kafka.records import (
    ReplicatedEntry,
    TimestampType,
    TopicIdPartition,
)
from partlog.store.base import Staged
from partlog.store.epochs import EpochsMixin
from partlog.store.layout import (
    ENTRY_CRC,
    ENTRY_TAIL,
    U32,
    CorruptEntryError,
    ReplicationError,
    chunks_of,
    verify,
)
from partlog.store.producers import ProducersMixin
from partlog.store.reads import ReadsMixin
from partlog.wal.key import OBJECT_KEY_BYTES_MAX


def _check_replicated(tp: TopicIdPartition, e: ReplicatedEntry) -> BatchHeader:
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
    if not 0 < len(e.object_key.encode()) <= OBJECT_KEY_BYTES_MAX:
        raise ReplicationError(f"{where}: object key {e.object_key!r} is empty or over {OBJECT_KEY_BYTES_MAX} bytes")
    if e.file_size <= 0 or e.byte_offset < 0 or e.byte_offset + e.size > e.file_size:
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
        if h.producer_epoch < 0 or h.base_sequence < 0:
            raise ReplicationError(f"{where}: producer {h.producer_id} without epoch or sequence")
    elif h.producer_id != bh.NO_PRODUCER_ID:
        raise ReplicationError(f"{where}: producer id {h.producer_id}")
    return h


class ReplicationMixin(ReadsMixin, EpochsMixin, ProducersMixin):
    """The follower API and the owner-driven high watermark. See the module doc."""

    def set_high_watermark(self, tp: TopicIdPartition, high_watermark: int) -> int:
        """Advance the partition's high watermark to ``high_watermark``, capped
        at the log end; never lowers it.  Returns the effective HWM.

        Called by a leader after every commit and follower fetch, so it writes
        nothing: the value lives in memory, every read path of this store uses
        it at once, and the next write of the partition (a commit, a deletion,
        a replicated append) persists it.  After a restart, or in a
        ``readonly`` store in another process, the persisted value may lag;
        the owner re-derives the HWM from its replicas.  KeyError for an
        unknown partition.
        """
        self._check_writable()
        with self._hwm_lock:
            part = self._parts.get(tp)
            if part is None:
                raise KeyError(f"unknown partition {tp}")
            current = self._effective_hwm(part)
            target = min(high_watermark, part.log_end_offset)
            if target <= current:
                return current
            self._hwms[tp] = target
            return target

    def append_replicated(
        self,
        tp: TopicIdPartition,
        entries: Iterable[ReplicatedEntry],
        *,
        leader_high_watermark: int,
        leader_log_start_offset: int,
    ) -> int:
        """The follower's append of entries from the leader's :meth:`read_log`;
        returns the new log end offset.

        As Kafka's follower (``AppendOrigin.REPLICATION``): the entries keep
        the leader's offsets, headers and epochs; nothing is re-sequenced and
        producer sequences are not checked, but producer state advances as on
        the leader, so this store can take over as leader and still answer a
        retry of a batch the old leader wrote as a duplicate.  A new epoch in
        the entries starts an epoch-cache entry at its first offset.  Then
        the log start follows the leader's (never past the log end) and the
        HWM rises to the leader's (capped at the log end), persisted in the
        same transaction.  Empty ``entries`` only moves log start and HWM,
        without a write transaction unless the log start moves.

        Raises :class:`ReplicationError` (naming partition and offset, nothing
        written) when the entries do not continue this log, an epoch goes
        backwards, or an entry is malformed; KeyError for an unknown partition.
        """
        self._check_writable()
        items = list(entries)
        # Stateless checks in the caller's thread, before the pipeline drains.
        headers = [_check_replicated(tp, e) for e in items]
        if not items:
            cached = self._parts.get(tp)
            if cached is None:
                raise KeyError(f"unknown partition {tp}")
            if min(leader_log_start_offset, cached.log_end_offset) <= cached.log_start_offset:
                self.set_high_watermark(tp, leader_high_watermark)
                return cached.log_end_offset

        def fn(s: Staged) -> int:
            part = s.part(tp)
            if part is None:
                raise KeyError(f"unknown partition {tp}")
            txn = s.wtxn
            part_id = part.part_id
            latest_epoch = self._latest_epoch(txn, part_id)
            # Validate everything against this log before writing anything.
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

            now = self._clock()
            expiration_ms = self.producer_id_expiration_ms
            # object key -> [file_id, batches, bytes, uploader, file size]
            files: dict[str, list[int]] = {}
            run: list[bytes] = []
            # This partition's producers as the entries change them (leader's rules, no checks).
            windows: dict[int, ProducerWindow] = {}
            running_max = part.running_max_timestamp
            epoch = latest_epoch
            for e, h in zip(items, headers, strict=True):
                acc = files.get(e.object_key)
                if acc is None:
                    file_id = self._resolve_file(s, e.object_key)
                    if file_id < 0:
                        file_id = s.next_id(b"next_file_id")
                    acc = files[e.object_key] = [file_id, 0, 0, e.uploader_broker_id, e.file_size]
                acc[1] += 1
                acc[2] += e.size
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
                    acc[0],
                    e.byte_offset,
                    e.size,
                    e.log_append_time,
                    e.batch_max_timestamp,
                    running_max,
                    s.next_id(b"next_batch_id"),
                )
                run.append(body + ENTRY_CRC.pack(crc32c(body)))
                if h.partition_leader_epoch > epoch:
                    epoch = h.partition_leader_epoch
                    self._assign_epoch(txn, part_id, epoch, base)
                pid = h.producer_id
                if pid >= 0:
                    window = windows.get(pid)
                    if window is None:
                        window = windows[pid] = ProducerWindow.from_encoded(s.producer_raw(part_id, pid))
                    if window.known and now - window.last_timestamp >= expiration_ms:
                        # expired, as the leader's lookup decides
                        window = windows[pid] = ProducerWindow.from_encoded(None)
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
            for pid, window in windows.items():
                s.producers[(part_id, pid)] = window.encoded()
            if run:
                chunks = chunks_of(part_id, b"".join(run))
                _, added = txn.cursor(db=self._db_log).putmulti(chunks, overwrite=False)
                verify(added == len(chunks), "a replicated entry overwrote one past the log end")
            for object_key, (file_id, nb, nbytes, uploader, file_size) in files.items():
                self._file_add(txn, object_key, file_id, nb, nbytes, uploader, file_size)
            part.running_max_timestamp = running_max
            if epoch > part.leader_epoch:
                part.leader_epoch = epoch
            leo = part.log_end_offset
            new_lso = min(leader_log_start_offset, leo)
            if new_lso > part.log_start_offset:
                part.log_start_offset = new_lso
                self._drop_entries(s, part, until_offset=new_lso)
            # Kafka's follower HWM: the leader's, capped at the log end, and
            # never below the log start; ours also never goes down here.
            hwm = max(part.high_watermark, min(leader_high_watermark, leo), part.log_start_offset)
            part.high_watermark = hwm
            s.hwms[tp] = (hwm, False)
            return leo

        return self._write(fn)

    def truncate_to(self, tp: TopicIdPartition, offset: int) -> int:
        """Remove the follower's divergent suffix: every entry whose last
        offset is >= ``offset`` (Kafka's ``truncateTo``, at a batch boundary:
        the log end becomes the base of the first entry removed).  Returns the
        number of entries removed; 0 if ``offset`` is at or past the log end
        (epochs starting at the log end still go, as in Kafka).

        In one transaction: the removed entries' file references, epoch-cache
        entries starting at or after the new log end, and the HWM (persisted
        and in memory; the only call that lowers it) capped at the new log
        end; producers that had a batch in the suffix get their state rebuilt
        from their remaining entries (deleted if none remain), so a truncated
        sequence can be sent again.  The log start stays unless the cut
        batch held it (then it becomes the new log end: the log is empty).

        Raises ValueError for ``offset`` below the log start, KeyError for an
        unknown partition.
        """

        def fn(s: Staged) -> int:
            cached = self._parts.get(tp)
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
                # leader's entries may carry older epochs.
                self._truncate_epochs(s.wtxn, cached.part_id, cached.log_end_offset)
                return 0
            part = s.part(tp)
            assert part is not None
            txn = s.wtxn
            first = self._entry_containing(txn, part, offset)
            if first is None:
                raise CorruptEntryError(f"partition {tp}: no entry holds offset {offset}")
            new_leo = first[1].base_offset
            removed, pids = self._drop_suffix(s, part, new_leo)
            part.log_end_offset = new_leo
            part.log_start_offset = min(part.log_start_offset, new_leo)
            part.high_watermark = min(part.high_watermark, new_leo)
            s.hwms[tp] = (part.high_watermark, True)
            if part.max_timestamp_offset >= new_leo:
                part.max_timestamp_offset = -2  # rescanned on demand, as after a deletion
            if part.live_batches == 0:
                part.max_timestamp, part.max_timestamp_offset = -1, -1
            # The last remaining entry holds the exact running max of the prefix.
            last = self._last_entry(txn, part)
            part.running_max_timestamp = -1 if last is None else last.running_max_timestamp
            self._truncate_epochs(txn, part.part_id, new_leo)
            self._rebuild_producers(s, part, pids)
            return removed

        return self._write(fn)

    def reset_to(self, tp: TopicIdPartition, offset: int) -> None:
        """Empty the partition's log and restart it at ``offset`` (Kafka's
        ``truncateFullyAndStartAt``), for a follower whose log end fell below
        the leader's log start: every entry and its file references, the
        producer states and the epoch cache go; log start, log end and HWM
        become ``offset``.  KeyError for an unknown partition, ValueError for
        a negative offset."""
        if offset < 0:
            raise ValueError(f"partition {tp}: cannot reset to negative offset {offset}")

        def fn(s: Staged) -> None:
            part = s.part(tp)
            if part is None:
                raise KeyError(f"unknown partition {tp}")
            self._drop_entries(s, part, until_offset=None)
            part.log_start_offset = part.log_end_offset = part.high_watermark = offset
            part.running_max_timestamp = part.max_timestamp = part.max_timestamp_offset = -1
            s.hwms[tp] = (offset, True)
            prefix = U32.pack(part.part_id)
            self._drop_prefix_keys(s.wtxn, self._db_producers, prefix)
            for k in {k for k in (*self._producers, *s.producers) if k[0] == part.part_id}:
                s.producers[k] = None
            self._drop_prefix_keys(s.wtxn, self._db_epochs, prefix)

        self._write(fn)
