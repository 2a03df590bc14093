"""The log chunks: every partition's metadata-log entries, in chunks under
(part_id, base offset) keys (:mod:`partlog.store.layout`) in the ``log``
database; iterated and looked up through a view (LMDB, then the journal's
overlay above it), appended, and cut (a prefix or a suffix, by exclusive
writes).

Cutting keeps the partition's live counters and the file-reference index
exact: every entry dropped releases its reference (:class:`FileIndex`) in
the same transaction.  The partition's tiered-segment rows
(:mod:`partlog.store.segments`) go with the entries they describe: a cut
below drops the rows that end below it, a cut from an offset the rows that
reach it.  A chunk that a cut falls inside is rewritten: the
kept tail under its new first offset, or the kept head in place.
"""

from __future__ import annotations

from collections.abc import Iterator

import lmdb

from partlog.store.env import LmdbEnv, last_under
from partlog.store.index import FileIndex
from partlog.store.layout import (
    ENTRY_SIZE,
    PART_KEY,
    U32,
    Buf,
    Entry,
    Part,
    Segment,
    chunk_base,
    chunk_entry,
    chunk_span,
    chunks_of,
    repoint_entry,
    verify,
)
from partlog.store.view import Txn, overlay_runs


class LogChunks:
    """Every partition's log entries (see the module doc)."""

    def __init__(self, env: LmdbEnv, index: FileIndex) -> None:
        self._db = env.log
        self._segments = env.segments
        self._index = index

    # ------------------------------------------------------------ reads

    def _seek_chunk(self, cur: lmdb.Cursor, key: bytes) -> bool:
        """Position ``cur`` on the chunk of ``key``'s partition that holds
        ``key``'s offset or lies wholly above it: the last chunk starting at
        or before it, else the first one after.  False if the partition has
        no such chunk."""
        prefix = key[:4]
        found = cur.set_range(key)
        if found and cur.key() == key:
            return True
        # The chunk before may hold the offset: step back one.
        if (cur.prev() if found else cur.last()) and cur.key()[:4] == prefix:
            return True
        return bool(cur.set_range(key)) and cur.key()[:4] == prefix

    def entries(self, txn: Txn, part: Part, from_offset: int = 0) -> Iterator[tuple[Buf, Entry]]:
        """Entries of ``part`` whose base offset >= ``from_offset``, ascending,
        with their (part_id, base_offset) keys: LMDB's chunks, then the
        overlay's entries (which all lie above them)."""
        start = PART_KEY.pack(part.part_id, max(from_offset, 0))
        overlay = overlay_runs(txn, part.part_id)
        if not overlay or max(from_offset, 0) < chunk_base(overlay[0], 0):
            prefix = start[:4]
            cur = txn.cursor(db=self._db)
            if self._seek_chunk(cur, start):
                for k, v in cur:
                    if k[:4] != prefix:
                        break
                    at, n = chunk_span(part.tp, k, v)
                    for i in range(n):
                        base = chunk_base(v, i)
                        if base >= from_offset:
                            yield PART_KEY.pack(part.part_id, base), chunk_entry(v, i, part.tp, at)
        for run in overlay:
            for i in range(len(run) // ENTRY_SIZE):
                base = chunk_base(run, i)
                if base >= from_offset:
                    yield PART_KEY.pack(part.part_id, base), chunk_entry(run, i, part.tp, -1)

    def entries_backward(self, txn: lmdb.Transaction, part: Part) -> Iterator[Entry]:
        """The partition's entries in LMDB, newest first (exclusive writes:
        the overlay is empty)."""
        prefix = U32.pack(part.part_id)
        cur = txn.cursor(db=self._db)
        positioned = last_under(cur, prefix)
        while positioned and cur.key()[:4] == prefix:
            k, v = cur.item()
            at, n = chunk_span(part.tp, k, v)
            for i in reversed(range(n)):
                yield chunk_entry(v, i, part.tp, at)
            positioned = cur.prev()

    def entry_containing(self, txn: Txn, part: Part, offset: int) -> tuple[bytes, Entry] | None:
        """The entry whose offset range contains ``offset``, if any, with its key."""
        overlay = overlay_runs(txn, part.part_id)
        if overlay and offset >= 0:
            # The last overlay entry starting at or before `offset`; none if
            # the offset lies below them all (then it is LMDB's).
            for run in reversed(overlay):
                if chunk_base(run, 0) <= offset:
                    i = len(run) // ENTRY_SIZE - 1
                    while chunk_base(run, i) > offset:
                        i -= 1
                    entry = chunk_entry(run, i, part.tp, -1)
                    if entry.base_offset <= offset <= entry.last_offset:
                        return PART_KEY.pack(part.part_id, entry.base_offset), entry
                    return None
        cur = txn.cursor(db=self._db)
        key = PART_KEY.pack(part.part_id, offset)
        if not self._seek_chunk(cur, key):
            return None
        k, v = cur.item()
        at, n = chunk_span(part.tp, k, v)
        # The last entry starting at or before `offset` (a chunk is ascending).
        i = n - 1
        while i >= 0 and chunk_base(v, i) > offset:
            i -= 1
        if i < 0:
            return None
        entry = chunk_entry(v, i, part.tp, at)
        if entry.base_offset <= offset <= entry.last_offset:
            return PART_KEY.pack(part.part_id, entry.base_offset), entry
        return None

    def last_entry(self, txn: Txn, part: Part) -> Entry | None:
        """The last entry of ``part`` in LMDB (exclusive writes: the overlay is empty)."""
        prefix = U32.pack(part.part_id)
        cur = txn.cursor(db=self._db)
        if not (last_under(cur, prefix) and cur.key()[:4] == prefix):
            return None
        k, v = cur.item()
        at, n = chunk_span(part.tp, k, v)
        return chunk_entry(v, n - 1, part.tp, at)

    # ------------------------------------------------------------ segment rows

    def segment_at(self, txn: Txn, part: Part, start_offset: int) -> Segment | None:
        """The segment row starting at ``start_offset``, if any."""
        raw = txn.get(PART_KEY.pack(part.part_id, start_offset), db=self._segments)
        return None if raw is None else Segment.unpack(start_offset, raw)

    def segments(self, txn: Txn, part: Part, from_start: int = 0, rows_max: int | None = None) -> Iterator[Segment]:
        """The partition's segment rows starting at or above ``from_start``,
        ascending, at most ``rows_max`` (None: all)."""
        prefix = U32.pack(part.part_id)
        cur = txn.cursor(db=self._segments)
        left = -1 if rows_max is None else rows_max
        if left != 0 and cur.set_range(PART_KEY.pack(part.part_id, max(0, from_start))):
            for k, v in cur:
                if k[:4] != prefix:
                    break
                yield Segment.unpack(int(PART_KEY.unpack(k)[1]), v)
                left -= 1
                if left == 0:
                    break

    def last_segment(self, txn: Txn, part: Part) -> Segment | None:
        """The partition's highest segment row."""
        prefix = U32.pack(part.part_id)
        cur = txn.cursor(db=self._segments)
        if not (last_under(cur, prefix) and cur.key()[:4] == prefix):
            return None
        return Segment.unpack(int(PART_KEY.unpack(cur.key())[1]), cur.value())

    def add_segment(self, txn: lmdb.Transaction, part: Part, seg: Segment) -> None:
        old = self.segment_at(txn, part, seg.start_offset)
        txn.put(PART_KEY.pack(part.part_id, seg.start_offset), seg.pack(), db=self._segments)
        if old is not None and old.object_key != seg.object_key:
            self._released(old)

    def drop_segment(self, txn: lmdb.Transaction, part: Part, start_offset: int) -> None:
        old = self.segment_at(txn, part, start_offset)
        txn.delete(PART_KEY.pack(part.part_id, start_offset), db=self._segments)
        if old is not None:
            self._released(old)

    def _released(self, row: Segment) -> None:
        """A row's object is no longer referenced here (release_grace.py)."""
        if self._index.grace is not None:
            self._index.grace.released((row.object_key,))

    def _prune_segments(self, txn: lmdb.Transaction, part: Part, below: int | None, reaching: int | None) -> None:
        """Drop the rows ending below ``below`` (all if both are None) or
        reaching ``reaching``."""
        doomed = [
            seg
            for seg in self.segments(txn, part)
            if (below is None and reaching is None)
            or (below is not None and seg.end_offset < below)
            or (reaching is not None and seg.end_offset >= reaching)
        ]
        for seg in doomed:
            txn.delete(PART_KEY.pack(part.part_id, seg.start_offset), db=self._segments)
            self._released(seg)

    # ------------------------------------------------------------ writes

    def put_chunks(self, txn: lmdb.Transaction, chunks: list[tuple[bytes, bytes]]) -> None:
        """New chunks (a checkpoint's), none over an existing key."""
        _, added = txn.cursor(db=self._db).putmulti(chunks, overwrite=False)
        verify(added == len(chunks), "a log key was written twice")

    def append(self, txn: lmdb.Transaction, part_id: int, run: bytes) -> None:
        """A follower's new entries of one partition (whole entries, ascending,
        above the log end) as chunks."""
        chunks = chunks_of(part_id, run)
        _, added = txn.cursor(db=self._db).putmulti(chunks, overwrite=False)
        verify(added == len(chunks), "a replicated entry overwrote one past the log end")

    def repoint(
        self, txn: lmdb.Transaction, part: Part, start_offset: int, end_offset: int, file_id: int, position: int = 0
    ) -> tuple[dict[int, list[int]], int, int]:
        """Point the entries with base offsets in ``[start_offset,
        end_offset]`` that reference an object at ``file_id``, each at its
        position in the concatenation of the range's batches, the first at
        ``position`` (inline entries keep their bytes but take their place).
        Returns the references
        released per old file_id ([-batches, -bytes], for
        :meth:`FileIndex.release`), the entries repointed and the bytes the
        range spans.  The caller validated the range (an exclusive write:
        the overlay is empty) and updates the index."""
        released: dict[int, list[int]] = {}
        moved, first = 0, position
        cur = txn.cursor(db=self._db)
        prefix = U32.pack(part.part_id)
        positioned = self._seek_chunk(cur, PART_KEY.pack(part.part_id, start_offset))
        while positioned and cur.key()[:4] == prefix:
            k = bytes(cur.key())
            v = bytes(cur.value())
            at, n = chunk_span(part.tp, k, v)
            if at > end_offset:
                break
            out = bytearray(v)
            changed = False
            for i in range(n):
                e = chunk_entry(v, i, part.tp, at)
                if e.base_offset < start_offset:
                    continue
                if e.base_offset > end_offset:
                    break
                if not e.is_inline:
                    acc = released.setdefault(e.file_id, [0, 0])
                    acc[0] -= 1
                    acc[1] -= e.size
                    repoint_entry(out, i, file_id, position)
                    moved += 1
                    changed = True
                position += e.size
            if changed:
                cur.put(k, bytes(out))
            positioned = cur.next()
        return released, moved, position - first

    def rewrite(self, txn: lmdb.Transaction, part: Part, entries: dict[int, bytes]) -> int:
        """Replace whole entries in place: base offset -> the new entry's
        bytes (same base offset, so chunk keys stay).  The caller validated
        them and keeps the counters and the index; returns how many."""
        done = 0
        first, last = min(entries), max(entries)
        cur = txn.cursor(db=self._db)
        prefix = U32.pack(part.part_id)
        positioned = self._seek_chunk(cur, PART_KEY.pack(part.part_id, first))
        while positioned and cur.key()[:4] == prefix:
            k = bytes(cur.key())
            v = bytes(cur.value())
            at, n = chunk_span(part.tp, k, v)
            if at > last:
                break
            out = bytearray(v)
            for i in range(n):
                new = entries.get(chunk_base(v, i))
                if new is not None:
                    verify(len(new) == ENTRY_SIZE and chunk_base(new, 0) == chunk_base(v, i), "a bad rewritten entry")
                    out[i * ENTRY_SIZE : (i + 1) * ENTRY_SIZE] = new
                    done += 1
            if out != v:
                cur.put(k, bytes(out))
            positioned = cur.next()
        return done

    def _drop_entry(self, part: Part, e: Entry, per_file: dict[int, list[int]]) -> None:
        """Account for one dropped entry: live counters and file deltas (an
        inline entry references no file)."""
        if not e.is_inline:
            acc = per_file.setdefault(e.file_id, [0, 0])
            acc[0] -= 1
            acc[1] -= e.size
        part.live_batches -= 1
        part.live_bytes -= e.size

    def drop_below(self, txn: lmdb.Transaction, part: Part, until_offset: int | None) -> int:
        """Delete entries wholly below ``until_offset`` (all if None); returns
        how many.  Keeps ``part``'s live counters and the file index exact;
        a chunk that keeps some entries is rewritten under its first kept one."""
        per_file: dict[int, list[int]] = {}
        cur = txn.cursor(db=self._db)
        prefix = U32.pack(part.part_id)
        dropped = 0
        if cur.set_range(prefix):
            while cur.key()[:4] == prefix:
                k = bytes(cur.key())
                v = bytes(cur.value())
                at, n = chunk_span(part.tp, k, v)
                keep = n  # index of the first entry kept
                for i in range(n):
                    e = chunk_entry(v, i, part.tp, at)
                    if until_offset is not None and e.last_offset >= until_offset:
                        keep = i
                        break
                    self._drop_entry(part, e, per_file)
                    if e.base_offset == part.max_timestamp_offset:
                        part.max_timestamp_offset = -2
                    dropped += 1
                if keep == 0:
                    break
                more = cur.delete()
                if keep < n:
                    rest = v[keep * ENTRY_SIZE :]
                    txn.put(PART_KEY.pack(part.part_id, chunk_base(rest, 0)), rest, db=self._db)
                    break
                if not more:
                    break
        self._index.release(txn, per_file)
        self._prune_segments(txn, part, until_offset, None)
        verify(part.live_batches >= 0 and part.live_bytes >= 0, "%s: negative live counters", part.tp)
        if part.live_batches == 0 and part.max_timestamp_offset == -2:
            part.max_timestamp, part.max_timestamp_offset = -1, -1
        return dropped

    def drop_from(self, txn: lmdb.Transaction, part: Part, from_offset: int) -> tuple[int, set[int], set[int]]:
        """Delete entries with base offset >= ``from_offset``, keeping the live
        counters and the file index exact; returns how many, the producer ids
        they held, and those of the markers among them.  A chunk that keeps a
        prefix is rewritten in place."""
        per_file: dict[int, list[int]] = {}
        pids: set[int] = set()
        marker_pids: set[int] = set()
        cur = txn.cursor(db=self._db)
        prefix = U32.pack(part.part_id)
        dropped = 0
        if self._seek_chunk(cur, PART_KEY.pack(part.part_id, from_offset)):
            while cur.key()[:4] == prefix:
                k = bytes(cur.key())
                v = bytes(cur.value())
                at, n = chunk_span(part.tp, k, v)
                first = 0  # index of the first entry dropped
                while first < n and chunk_base(v, first) < from_offset:
                    first += 1
                for i in range(first, n):
                    e = chunk_entry(v, i, part.tp, at)
                    self._drop_entry(part, e, per_file)
                    if e.header.producer_id >= 0:
                        pids.add(e.header.producer_id)
                        if e.is_inline:
                            marker_pids.add(e.header.producer_id)
                    dropped += 1
                if first == 0:
                    if not cur.delete():
                        break
                    continue
                if first < n:
                    cur.put(k, v[: first * ENTRY_SIZE])  # positions the cursor on k
                if not cur.next():
                    break
        self._index.release(txn, per_file)
        self._prune_segments(txn, part, None, from_offset)
        verify(part.live_batches >= 0 and part.live_bytes >= 0, "%s: negative live counters", part.tp)
        return dropped, pids, marker_pids
