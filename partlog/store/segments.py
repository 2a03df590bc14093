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
is a no-op (a retry after a lost answer).  Each swap is recorded as a row of
the ``segments`` database (:class:`~partlog.store.layout.Segment`): the
partition's tiered ranges, which never overlap, which a leader's builder
continues from and which replicas learn through their fetches; a row goes
with the entries it describes (:class:`~partlog.store.log.LogChunks`).

The swap deadline: a leader refuses to give a segment key its first
reference once the ``created_ms`` in the key is more than ``deadline_ms``
old (COMMIT_DEADLINE_EXCEEDED), as it refuses the commit of an old WAL
object; walmgr's age gate for segments rests on it.  A key that does not
parse as a segment key (:func:`~partlog.wal.key.parse_segment_key`) has no
age to check, and walmgr never deletes one.  Followers apply what their
leader accepted (``replicated``), whatever its age.
"""

from __future__ import annotations

from dataclasses import dataclass

from partlog import injected_bugs
from partlog.kafka.errors import Errors
from partlog.kafka.records import TopicIdPartition
from partlog.store.catalog import Catalog
from partlog.store.index import FileIndex
from partlog.store.layout import SEGMENT_SWAP_DEADLINE_MS_DEFAULT, Entry, Segment
from partlog.store.log import LogChunks
from partlog.store.staged import Staged
from partlog.wal.key import SegmentKeyError, parse_segment_key


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
    s: Staged,
    catalog: Catalog,
    log: LogChunks,
    index: FileIndex,
    req: SegmentSwap,
    *,
    now_ms: int,
    replicated: bool = False,
    deadline_ms: int = SEGMENT_SWAP_DEADLINE_MS_DEFAULT,
) -> SegmentSwapResult:
    """Repoint the entries of ``req``'s range at its segment and record the
    segment (module doc).  ``replicated``: a follower applying its leader's
    swap, whose range need only be in the log (the leader saw it committed),
    whose entries of the range may name the segment already, at their
    positions (those it fetched after the leader swapped), and whose log
    may start inside the range: the batches it holds are the segment's last,
    their positions counted back from its size.

    Errors: UNKNOWN_TOPIC_OR_PARTITION; COMMIT_DEADLINE_EXCEEDED (not
    ``replicated``) when the key's ``created_ms`` is more than
    ``deadline_ms`` before ``now_ms`` (module doc); OFFSET_OUT_OF_RANGE when the range is
    not wholly committed and present (below the HWM, at or above the log
    start: retention may have moved it while the segment was built);
    INVALID_REQUEST when the range overlaps another segment, does not start
    and end on batch boundaries, its sizes do not add up to the segment's,
    or the object is referenced already (other than, replicated, by entries
    of the range at their positions, with the segment's size).
    """
    part = s.part(req.topic_id_partition)
    if part is None:
        return SegmentSwapResult(Errors.UNKNOWN_TOPIC_OR_PARTITION)
    if not req.object_key or req.size <= 0 or req.start_offset > req.end_offset:
        return _refuse(f"segment {req.object_key!r}: empty key, size or range")
    bound = part.log_end_offset if replicated else catalog.effective_hwm(part)
    rng = f"[{req.start_offset}, {req.end_offset}]"
    # A follower's log may start inside the range (its leader's retention
    # moved it after the swap): it swaps the batches it holds.
    partial = replicated and req.start_offset < part.log_start_offset <= req.end_offset
    if (req.start_offset < part.log_start_offset and not partial) or req.end_offset >= bound:
        where = f"outside the committed log [{part.log_start_offset}, {bound})"
        return SegmentSwapResult(Errors.OFFSET_OUT_OF_RANGE, 0, f"segment {rng} {where}")
    row = Segment(req.start_offset, req.end_offset, req.size, req.uploader, req.object_key)
    same = log.segment_at(s.txn, part, req.start_offset)
    if same is not None and (same.end_offset, same.size, same.object_key) == (row.end_offset, row.size, row.object_key):
        return SegmentSwapResult(Errors.NONE)  # done before: a retry
    if not replicated:
        try:
            age_ms = now_ms - parse_segment_key(req.object_key).created_ms
        except SegmentKeyError:
            age_ms = 0  # never deleted by walmgr: no age to bound
        if age_ms > deadline_ms:
            message = f"segment {req.object_key!r} is {age_ms} ms old, past the swap deadline of {deadline_ms} ms"
            return SegmentSwapResult(Errors.COMMIT_DEADLINE_EXCEEDED, 0, message)
    for other in log.segments(s.txn, part):
        if other.start_offset <= req.end_offset and other.end_offset >= req.start_offset:
            return _refuse(
                f"segment [{req.start_offset}, {req.end_offset}] overlaps [{other.start_offset}, {other.end_offset}]"
            )
    # A follower's entries fetched after its leader swapped name the
    # segment already (the leader reads them so); no other entry may.
    known = index.record(s.txn, req.object_key)
    if known is not None and (not replicated or known[4] != req.size):
        return _refuse(f"segment {req.object_key!r} is referenced already")
    seg_id = -1 if known is None else known[0]
    # Validate: the range's entries, their positions, the sizes.
    entries: list[Entry] = []
    for _, e in log.entries(s.txn, part, req.start_offset):
        if not entries and e.base_offset != req.start_offset and not partial:
            return _refuse(f"segment starts at {req.start_offset}, inside or before a batch (next at {e.base_offset})")
        if e.base_offset > req.end_offset:
            break
        if e.last_offset > req.end_offset:
            return _refuse(f"segment ends at {req.end_offset}, inside the batch at {e.base_offset}")
        entries.append(e)
        if e.last_offset == req.end_offset:
            break
    if not entries or entries[-1].last_offset != req.end_offset:
        return _refuse(f"segment {rng} does not end on a batch boundary")
    held = sum(e.size for e in entries)
    # The segment ends with the batches held; those below the log start
    # (gone here, never past the end) fill the bytes before them.
    base = req.size - held if entries[0].base_offset != req.start_offset else 0
    if base < 0 or (base == 0) != (entries[0].base_offset == req.start_offset) or base + held != req.size:
        return _refuse(f"segment {req.object_key!r} is {req.size} bytes, its batches here {held}")
    position, already = base, 0
    for e in entries:
        if not e.is_inline and e.file_id == seg_id:
            if e.byte_offset != position:
                return _refuse(f"batch {e.base_offset} is at {e.byte_offset} of {req.object_key!r}, not {position}")
            already += 1
        position += e.size
    if known is not None and known[1] != already:
        return _refuse(f"segment {req.object_key!r} is referenced outside [{req.start_offset}, {req.end_offset}]")
    # Apply: repoint the range's entries, move their references, record the
    # segment (markers only: nothing to repoint, and an object no entry
    # references stays out of the file index, but the range is tiered).
    # Entries naming the segment already are released and counted again
    # with the rest: the object's record is rebuilt whole.
    referenced = [e for e in entries if not e.is_inline]
    moved = 0
    if len(referenced) > already:
        file_id = seg_id if seg_id >= 0 else s.next_id(b"next_file_id")
        # (The injected bug: a leader's entries land one byte off their batches.)
        shift = 1 if not replicated and injected_bugs.on("swap_positions_off_by_one") else 0
        released, moved, span = log.repoint(s.txn, part, req.start_offset, req.end_offset, file_id, base + shift)
        assert span == held and moved == len(referenced), (span, held, moved, len(referenced))
        index.release(s.txn, released)
        index.add(s.txn, req.object_key, file_id, moved, sum(e.size for e in referenced), req.uploader, req.size)
    log.add_segment(s.txn, part, row)
    return SegmentSwapResult(Errors.NONE, max(0, moved - already))


__all__ = ["Segment", "SegmentSwap", "SegmentSwapResult", "swap_to_segment"]
