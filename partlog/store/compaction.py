"""Replacing tiered segments by their cleaned copy (issue 31, compaction;
docs/design/compaction.md): the store's half of the cleaner's swap.

The leader's cleaner reads the segments of ``[start_offset, end_offset]``
(one or several adjacent rows), rewrites their batches (fewer records, the
same offsets) and uploads the result as one new segment.
:func:`rewrite_segments` then, in one exclusive write, validated first:

* gives every entry of the range its new header and size, and points it at
  the new segment (its position the sum of the new sizes before it); its
  offsets, timestamps (``batch_max_timestamp``, the running max), append
  time and batch id stay, so ListOffsets, retention by time, the HWM and
  producer state do not move;
* moves the references in the file index: the old segments lose theirs
  (one whose last went leaves the index and is garbage for walmgr's gate),
  the new one gains them; the partition's ``live_bytes`` shrinks by the
  bytes removed;
* replaces the old rows by one row for the new segment.

The new headers must describe the same batches: base offset, last offset
delta, partition leader epoch, magic, producer id, epoch and base
sequence, max timestamp and the transactional and control bits as stored,
at most the stored record count.  An inline entry (a marker) is not
rewritten: its header must be the stored one.  The rows replaced must be
exactly the ones the cleaner read (``replaced``, their keys): a row
changed since (a retention cut, another swap) makes it INVALID_REQUEST,
and the cleaner starts again from the store.  The same rewrite again is a
no-op (a retry after a lost answer).

A follower applies its leader's row (``replicated``, docs/design/
compaction.md "Replicas"): it read the leader's segment and passes every
batch's header from it; ``replaced`` are its own rows inside the range as
it read them (any, none: entries it never swapped keep WAL references,
and take the segment too).  No swap deadline; the range in its log (below
its log end, not below its log start); a header may hold more records
than the stored one (its rows may be a former leader's cleaned copy); and
entries fetched after the leader rewrote may name the segment already, at
their positions with their headers.  Anything else: INVALID_REQUEST, the
follower keeps its references (the safe side).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from partlog.kafka import batch_header as bh
from partlog.kafka.batch_header import BatchHeader
from partlog.kafka.crc32c import crc32c
from partlog.kafka.errors import Errors
from partlog.kafka.records import TopicIdPartition
from partlog.store.catalog import Catalog
from partlog.store.index import FileIndex
from partlog.store.layout import ENTRY_CRC, ENTRY_TAIL, SEGMENT_SWAP_DEADLINE_MS_DEFAULT, Entry, Segment
from partlog.store.log import LogChunks
from partlog.store.segments import SegmentSwap, SegmentSwapResult, swap_to_segment
from partlog.store.staged import Staged
from partlog.wal.key import SegmentKeyError, parse_segment_key

# The attribute bits a cleaned header may change: compression (an emptied
# batch is written uncompressed) and KIP-534's delete horizon.
_ATTRIBUTES_CLEANABLE = bh.ATTR_COMPRESSION_MASK | 0x40


@dataclass(frozen=True, slots=True)
class SegmentRewrite:
    """The cleaned copy of the segments of ``[start_offset, end_offset]``
    (rows ``replaced``, by object key, ascending), uploaded as
    ``object_key`` of ``size`` bytes by broker ``uploader``; ``headers``:
    the new 61-byte header of every batch of the range, in offset order."""

    topic_id_partition: TopicIdPartition
    start_offset: int
    end_offset: int
    object_key: str
    size: int
    uploader: int
    replaced: tuple[str, ...]
    headers: tuple[bytes, ...]


def _refuse(message: str) -> SegmentSwapResult:
    return SegmentSwapResult(Errors.INVALID_REQUEST, 0, message)


def _same_batch(old: BatchHeader, new: BatchHeader, *, replicated: bool) -> bool:
    """``new`` is a cleaned ``old``; ``replicated``: any record count the
    batch's offsets allow (the leader's copy may hold more than ours)."""
    records_max = old.last_offset_delta + 1 if replicated else old.record_count
    return (
        new.base_offset == old.base_offset
        and new.last_offset_delta == old.last_offset_delta
        and new.partition_leader_epoch == old.partition_leader_epoch
        and new.magic == old.magic
        and (new.producer_id, new.producer_epoch, new.base_sequence)
        == (old.producer_id, old.producer_epoch, old.base_sequence)
        and new.max_timestamp == old.max_timestamp
        and new.attributes & ~_ATTRIBUTES_CLEANABLE == old.attributes & ~_ATTRIBUTES_CLEANABLE
        and 0 <= new.record_count <= records_max
        and new.size >= bh.HEADER_SIZE
    )


def rewrite_segments(
    s: Staged,
    catalog: Catalog,
    log: LogChunks,
    index: FileIndex,
    req: SegmentRewrite,
    *,
    now_ms: int,
    deadline_ms: int = SEGMENT_SWAP_DEADLINE_MS_DEFAULT,
    replicated: bool = False,
) -> SegmentSwapResult:
    """Swap the cleaned segment in for the rows it replaces (module doc).

    Errors: UNKNOWN_TOPIC_OR_PARTITION; COMMIT_DEADLINE_EXCEEDED past the
    swap deadline (as :func:`~partlog.store.segments.swap_to_segment`; not
    ``replicated``); OFFSET_OUT_OF_RANGE when the range is not wholly
    committed (``replicated``: in the log) and present; INVALID_REQUEST when
    the rows are not ``replaced``, a header does not describe its batch,
    the sizes do not add up, or the key is known (``replicated``: other than
    by entries of the range at their positions)."""
    part = s.part(req.topic_id_partition)
    if part is None:
        return SegmentSwapResult(Errors.UNKNOWN_TOPIC_OR_PARTITION)
    if not req.object_key or req.size <= 0 or req.start_offset > req.end_offset or not (req.replaced or replicated):
        return _refuse(f"rewrite {req.object_key!r}: empty key, size, range or rows")
    rng = f"[{req.start_offset}, {req.end_offset}]"
    bound = part.log_end_offset if replicated else catalog.effective_hwm(part)
    if req.start_offset < part.log_start_offset or req.end_offset >= bound:
        where = f"outside the {'' if replicated else 'committed '}log [{part.log_start_offset}, {bound})"
        return SegmentSwapResult(Errors.OFFSET_OUT_OF_RANGE, 0, f"rewrite {rng} {where}")
    same = log.segment_at(s.txn, part, req.start_offset)
    if same is not None and (same.end_offset, same.size, same.object_key) == (
        req.end_offset,
        req.size,
        req.object_key,
    ):
        return SegmentSwapResult(Errors.NONE)  # done before: a retry
    try:
        age_ms = now_ms - parse_segment_key(req.object_key).created_ms
    except SegmentKeyError:
        age_ms = 0  # never deleted by walmgr: no age to bound
    if age_ms > deadline_ms and not replicated:
        message = f"segment {req.object_key!r} is {age_ms} ms old, past the swap deadline of {deadline_ms} ms"
        return SegmentSwapResult(Errors.COMMIT_DEADLINE_EXCEEDED, 0, message)
    rows = [
        r for r in log.segments(s.txn, part) if r.start_offset <= req.end_offset and r.end_offset >= req.start_offset
    ]
    if tuple(r.object_key for r in rows) != req.replaced or not _rows_fit(rows, req, replicated=replicated):
        return _refuse(f"rewrite {rng}: its rows are not {list(req.replaced)} back to back")
    known = index.record(s.txn, req.object_key)
    if known is not None and (not replicated or known[4] != req.size):
        return _refuse(f"segment {req.object_key!r} is referenced already")
    seg_id = -1 if known is None else known[0]
    entries: list[Entry] = []
    for _, e in log.entries(s.txn, part, req.start_offset):
        if e.base_offset > req.end_offset:
            break
        entries.append(e)
    if (
        len(entries) != len(req.headers)
        or not entries
        or entries[0].base_offset != req.start_offset
        or entries[-1].last_offset != req.end_offset
    ):
        return _refuse(f"rewrite {rng}: {len(req.headers)} headers for {len(entries)} batches")
    new_headers: list[BatchHeader] = []
    for e, raw in zip(entries, req.headers, strict=True):
        try:
            h = BatchHeader.parse(raw)
        except bh.BatchHeaderError as err:
            return _refuse(f"rewrite {rng}: {err}")
        if (
            len(raw) != bh.HEADER_SIZE
            or not _same_batch(e.header, h, replicated=replicated)
            or (e.is_inline and raw != e.raw_header)
        ):
            return _refuse(f"rewrite {rng}: the header for batch {e.base_offset} does not describe it")
        new_headers.append(h)
    if sum(h.size for h in new_headers) != req.size:
        return _refuse(
            f"segment {req.object_key!r} is {req.size} bytes, its batches {sum(h.size for h in new_headers)}"
        )
    # A follower's entries fetched after its leader rewrote name the
    # segment already, at their positions, with their headers; no other may.
    position, already = 0, 0
    for e, raw, h in zip(entries, req.headers, new_headers, strict=True):
        if not e.is_inline and e.file_id == seg_id:
            if (e.byte_offset, e.size, e.raw_header) != (position, h.size, raw):
                return _refuse(f"batch {e.base_offset} of {req.object_key!r} is not as the segment holds it")
            already += 1
        position += h.size
    if known is not None and known[1] != already:
        return _refuse(f"segment {req.object_key!r} is referenced outside {rng}")
    # Apply: new entries, references moved (those naming the segment
    # already released and counted again: its record is rebuilt whole),
    # rows replaced.
    file_id = seg_id if seg_id >= 0 else s.next_id(b"next_file_id")
    released: dict[int, list[int]] = {}
    rewritten: dict[int, bytes] = {}
    position, moved, moved_bytes, delta = 0, 0, 0, 0
    for e, raw, h in zip(entries, req.headers, new_headers, strict=True):
        if not e.is_inline:
            acc = released.setdefault(e.file_id, [0, 0])
            acc[0] -= 1
            acc[1] -= e.size
            body = raw + ENTRY_TAIL.pack(
                file_id,
                position,
                h.size,
                e.log_append_time,
                e.batch_max_timestamp,
                e.running_max_timestamp,
                e.batch_id,
            )
            rewritten[e.base_offset] = body + ENTRY_CRC.pack(crc32c(body))
            moved += 1
            moved_bytes += h.size
            delta += h.size - e.size
        position += h.size
    if rewritten:
        done = log.rewrite(s.txn, part, rewritten)
        assert done == moved, (done, moved)
        index.release(s.txn, released)
        index.add(s.txn, req.object_key, file_id, moved, moved_bytes, req.uploader, req.size)
    part.live_bytes += delta
    for r in rows:
        log.drop_segment(s.txn, part, r.start_offset)
    log.add_segment(s.txn, part, Segment(req.start_offset, req.end_offset, req.size, req.uploader, req.object_key))
    return SegmentSwapResult(Errors.NONE, moved - already)


def _rows_fit(rows: list[Segment], req: SegmentRewrite, *, replicated: bool) -> bool:
    """The rows overlapping the range cover it back to back (the leader's
    cleaner read exactly those); ``replicated``: they lie inside it, gaps
    between them (entries never swapped here) allowed."""
    if not rows:
        return replicated
    if replicated:
        return rows[0].start_offset >= req.start_offset and rows[-1].end_offset <= req.end_offset
    return (
        rows[0].start_offset == req.start_offset
        and rows[-1].end_offset == req.end_offset
        and all(a.end_offset + 1 == b.start_offset for a, b in itertools.pairwise(rows))
    )


def swap(
    s: Staged,
    catalog: Catalog,
    log: LogChunks,
    index: FileIndex,
    req: SegmentSwap | SegmentRewrite,
    *,
    now_ms: int,
    replicated: bool = False,
) -> SegmentSwapResult:
    """A builder's swap (:func:`~partlog.store.segments.swap_to_segment`)
    or a cleaner's (:func:`rewrite_segments`), a leader's or, ``replicated``,
    a follower applying its leader's row."""
    if isinstance(req, SegmentSwap):
        return swap_to_segment(s, catalog, log, index, req, now_ms=now_ms, replicated=replicated)
    return rewrite_segments(s, catalog, log, index, req, now_ms=now_ms, replicated=replicated)


__all__ = ["SegmentRewrite", "rewrite_segments", "swap"]
