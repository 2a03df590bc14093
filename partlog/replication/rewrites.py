"""A follower taking its leader's segment rows over its own (issue 31,
docs/design/compaction.md "Replicas"), sans-IO.

A leader's cleaner replaces rows by a cleaned segment; its builder's rows
may also be missing here (a swap this follower refused).  The follower
checks a window of its rows against the leader's (:func:`rows_digest`,
the same on both sides), and for each leader row it lacks it reads the
segment's ``.log`` (one GET, at most :data:`REWRITE_SEGMENT_BYTES_MAX`)
and :func:`rewrite_from_segment` turns it into the store's replicated
:class:`~partlog.store.compaction.SegmentRewrite`: the batches must be
whole v2 batches with valid CRCs, exactly ``size`` bytes, back to back in
offset order from the row's start to its end.  The store then matches
them one for one with its entries (base offset, last offset delta, the
batch's identity) and refuses anything else.

Everything here fails closed (:class:`RewriteRefused`): the follower keeps
its references, which keeps the objects they name alive (the safe side).
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Sequence

from partlog.kafka import batch_header as bh
from partlog.kafka.records import TopicIdPartition
from partlog.rpc.wire import ROWS_CHECKED_PER_FETCH_MAX, ROWS_DIGEST_BYTES, ReplicaFetchPartition, ReplicaSegment
from partlog.store import Segment
from partlog.store.compaction import SegmentRewrite
from partlog.tiered.cleaner import CleanerError, split_batches
from partlog.tiered.segment import SegmentFormatError, check_batch

# A segment a follower reads whole to take it over: a cleaned segment is
# built in memory up to 64 MiB (partlog/broker/cleaner.py,
# CLEANED_SEGMENT_BYTES_MAX); a larger row is refused here.
REWRITE_SEGMENT_BYTES_MAX = 64 << 20
_ROW = struct.Struct(">qqqiH")


class RewriteRefused(ValueError):
    """The leader's row cannot be taken here; the message says why."""


def rows_digest(rows: Iterable[Segment | ReplicaSegment]) -> bytes:
    """A digest of segment rows (offsets, size, uploader, key), in order:
    equal on leader and follower exactly when the rows are."""
    h = hashlib.blake2b(digest_size=ROWS_DIGEST_BYTES)
    for r in rows:
        key = r.object_key.encode("utf-8", "surrogatepass")
        h.update(_ROW.pack(r.start_offset, r.end_offset, r.size, r.uploader, len(key)))
        h.update(key)
    return h.digest()


def rewrites_for_follower(
    rows: Sequence[Segment], p: ReplicaFetchPartition, high_watermark: int
) -> tuple[ReplicaSegment, ...]:
    """The leader's answer to the follower's window ``p.rows_check``:
    ``rows`` are the leader's from the window's start on (ascending, at
    least ``ROWS_CHECKED_PER_FETCH_MAX + 1`` when it has that many).  None
    when the rows starting in the window match the follower's digest;
    else those rows, as ``segments_for_follower`` bounds them (ending at
    or past the follower's log start, below its fetch offset and the HWM),
    at most ``ROWS_CHECKED_PER_FETCH_MAX``."""
    c = p.rows_check
    if c is None:
        return ()
    window = [g for g in rows if c.from_offset <= g.start_offset <= c.through]
    if len(window) <= ROWS_CHECKED_PER_FETCH_MAX and rows_digest(window) == c.digest:
        return ()
    bound = min(p.fetch_offset, high_watermark)
    out: list[ReplicaSegment] = []
    for g in window:
        if g.end_offset < p.log_start_offset:
            continue
        if g.end_offset >= bound or len(out) == ROWS_CHECKED_PER_FETCH_MAX:
            break
        out.append(ReplicaSegment(g.start_offset, g.end_offset, g.size, g.uploader, g.object_key))
    return tuple(out)


def same_row(a: Segment | ReplicaSegment, b: Segment | ReplicaSegment) -> bool:
    return (a.start_offset, a.end_offset, a.size, a.uploader, a.object_key) == (
        b.start_offset,
        b.end_offset,
        b.size,
        b.uploader,
        b.object_key,
    )


def rows_replaced(row: ReplicaSegment, own: Sequence[Segment]) -> tuple[str, ...]:
    """The keys of this follower's rows ``own`` the leader's ``row`` takes
    over: those overlapping it, each wholly inside it (else refused: a
    row straddling the range is another leader's cut)."""
    inside = [r for r in own if r.start_offset <= row.end_offset and r.end_offset >= row.start_offset]
    for r in inside:
        if r.start_offset < row.start_offset or r.end_offset > row.end_offset:
            raise RewriteRefused(
                f"row [{r.start_offset}, {r.end_offset}] here straddles [{row.start_offset}, {row.end_offset}]"
            )
    return tuple(r.object_key for r in inside)


def rewrite_from_segment(
    tp: TopicIdPartition, row: ReplicaSegment, replaced: tuple[str, ...], data: bytes
) -> SegmentRewrite:
    """The store's replicated rewrite for ``row`` from its ``.log`` bytes
    ``data`` (module doc); :class:`RewriteRefused` when they are not its
    batches."""
    if len(data) != row.size or row.size > REWRITE_SEGMENT_BYTES_MAX:
        raise RewriteRefused(f"segment {row.object_key!r}: {len(data)} bytes read, its row says {row.size}")
    headers: list[bytes] = []
    expect = row.start_offset
    try:
        for batch in split_batches(data):
            h = check_batch(batch)
            if h.base_offset != expect:
                raise RewriteRefused(f"segment {row.object_key!r}: batch at {h.base_offset}, expected {expect}")
            expect = h.base_offset + h.last_offset_delta + 1
            headers.append(batch[: bh.HEADER_SIZE])
    except (CleanerError, SegmentFormatError, bh.BatchHeaderError) as e:
        raise RewriteRefused(f"segment {row.object_key!r}: {e}") from None
    if expect != row.end_offset + 1:
        raise RewriteRefused(f"segment {row.object_key!r} ends at {expect - 1}, its row at {row.end_offset}")
    return SegmentRewrite(
        tp, row.start_offset, row.end_offset, row.object_key, row.size, row.uploader, replaced, tuple(headers)
    )


__all__ = [
    "REWRITE_SEGMENT_BYTES_MAX",
    "ROWS_DIGEST_BYTES",
    "RewriteRefused",
    "rewrite_from_segment",
    "rewrites_for_follower",
    "rows_digest",
    "rows_replaced",
    "same_row",
]
