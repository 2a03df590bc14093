"""Moving a partition's references from WAL objects to a tiered segment
(issue 31): the store's half of the reference swap.

A leader builds a per-partition segment from its committed log: the
batches of offsets ``[start_offset, end_offset]`` concatenated in offset
order, as Kafka writes a segment's ``.log``.  Once that object is durable,
:func:`swap_to_segment` repoints every entry of the range at it: the entry's
``file_id`` becomes the segment's and its ``byte_offset`` the batch's
position in the segment, the sum of the sizes of the entries before it.
Offsets, headers, sizes, timestamps and batch ids do not change, so reads,
ListOffsets, retention and producer state are untouched, and the file index
stays exact: the WAL objects lose those references in the same transaction
(walmgr may delete one once no replica references it), the segment gains
them, as one more object of the ``files`` index.

An inline entry (a transaction marker's control batch) holds its bytes and
references no object; it keeps doing so, but its batch occupies its place in
the segment like any other (Kafka's segments hold control batches too).

The swap runs as an exclusive write and validates everything before it
writes (Kafka's validate-then-apply): a request that does not match the log
exactly changes nothing.  Swapping the same range to the same segment again
is a no-op (a retry after a lost answer).
"""

from __future__ import annotations

from dataclasses import dataclass

from partlog.kafka.errors import Errors
from partlog.kafka.records import TopicIdPartition
from partlog.store.catalog import Catalog
from partlog.store.index import FileIndex
from partlog.store.layout import Entry
from partlog.store.log import LogChunks
from partlog.store.staged import Staged


@dataclass(frozen=True, slots=True)
class SegmentSwap:
    """One reference swap: the batches of ``[start_offset, end_offset]`` of
    ``topic_id_partition`` now live, in offset order, in the object
    ``object_key`` of ``size`` bytes, uploaded by broker ``uploader``."""

    topic_id_partition: TopicIdPartition
    start_offset: int
    end_offset: int
    object_key: str
    size: int
    uploader: int


@dataclass(frozen=True, slots=True)
class SegmentSwapResult:
    error: Errors
    # Entries repointed (0 for a repeat or an error).
    moved: int = 0
    message: str | None = None


def _refuse(message: str) -> SegmentSwapResult:
    return SegmentSwapResult(Errors.INVALID_REQUEST, 0, message)


def swap_to_segment(
    s: Staged, catalog: Catalog, log: LogChunks, index: FileIndex, req: SegmentSwap
) -> SegmentSwapResult:
    """Repoint the entries of ``req``'s range at its segment (module doc).

    Errors: UNKNOWN_TOPIC_OR_PARTITION; OFFSET_OUT_OF_RANGE when the range is
    not wholly committed and present (below the HWM, at or above the log
    start: retention may have moved it while the segment was built);
    INVALID_REQUEST when the range does not start and end on batch
    boundaries, its sizes do not add up to the segment's, or the segment
    object is already referenced by other entries.
    """
    part = s.part(req.topic_id_partition)
    if part is None:
        return SegmentSwapResult(Errors.UNKNOWN_TOPIC_OR_PARTITION)
    if not req.object_key or req.size <= 0 or req.start_offset > req.end_offset:
        return _refuse(f"segment {req.object_key!r}: empty key, size or range")
    hwm = catalog.effective_hwm(part)
    if req.start_offset < part.log_start_offset or req.end_offset >= hwm:
        return SegmentSwapResult(
            Errors.OFFSET_OUT_OF_RANGE,
            0,
            f"segment [{req.start_offset}, {req.end_offset}] outside the committed log "
            f"[{part.log_start_offset}, {hwm})",
        )
    # Validate: the range's entries, their positions, the sizes.
    entries: list[Entry] = []
    position = 0
    for _, e in log.entries(s.txn, part, req.start_offset):
        if not entries and e.base_offset != req.start_offset:
            return _refuse(f"segment starts at {req.start_offset}, inside or before a batch (next at {e.base_offset})")
        if e.base_offset > req.end_offset:
            break
        if e.last_offset > req.end_offset:
            return _refuse(f"segment ends at {req.end_offset}, inside the batch at {e.base_offset}")
        entries.append(e)
        position += e.size
        if e.last_offset == req.end_offset:
            break
    if not entries or entries[-1].last_offset != req.end_offset:
        return _refuse(f"segment [{req.start_offset}, {req.end_offset}] does not end on a batch boundary")
    if position != req.size:
        return _refuse(f"segment {req.object_key!r} is {req.size} bytes, its batches {position}")
    file_id = index.durable_id(s.txn, req.object_key)
    referenced = [e for e in entries if not e.is_inline]
    if file_id >= 0:
        if all(e.file_id == file_id for e in referenced):
            return SegmentSwapResult(Errors.NONE)  # done before: a retry
        return _refuse(f"segment {req.object_key!r} is already referenced by other entries")
    if not referenced:
        # Markers only: nothing to repoint, and an object no entry would
        # reference must not enter the index.
        return SegmentSwapResult(Errors.NONE)
    # Apply: repoint the range's entries, then move their references.
    file_id = s.next_id(b"next_file_id")
    released, moved, span = log.repoint(s.txn, part, req.start_offset, req.end_offset, file_id)
    assert span == req.size and moved == len(referenced), (span, req.size, moved, len(referenced))
    index.release(s.txn, released)
    index.add(s.txn, req.object_key, file_id, moved, sum(e.size for e in referenced), req.uploader, req.size)
    return SegmentSwapResult(Errors.NONE, moved)


__all__ = ["SegmentSwap", "SegmentSwapResult", "swap_to_segment"]
