"""The store's journal: one durable append per group commit.

A group commit is acknowledged once its record is in this journal and, with
``sync=True``, on disk (one ``pwrite`` plus one ``fdatasync`` of a file whose
blocks exist already).  The LMDB index catches up later, in large
transactions (:mod:`partlog.store.checkpoint`), and records in its ``meta``
database the sequence number it has applied up to.  After a crash, the
records above that number are applied again (:meth:`Journal.replay`).

Why a file and not an append-only key range in LMDB: measured on this
machine (``partlog bench commit`` prints both ceilings), a durable LMDB
transaction holding one 8 KiB value costs about 480 us, because LMDB syncs
twice (data pages, then the meta page); a write plus ``fdatasync`` into a
preallocated file costs about 200 us.  At 64 batches per group that is the
difference between ~130k and ~320k batches/s before any Python work.

Layout: a directory of segments ``<first_seq:020d>.jnl``, each filled with
zeros ahead of the appends, 1 MiB at a time up to ``segment_bytes`` (so an
append changes no file metadata and ``fdatasync`` writes only the record's
blocks, but once a MiB; a store that writes little holds 1 MiB, not a whole
segment, which matters for the many small stores of tests and tools).  A
record is::

    length u32 | crc32c u32 | seq u64 | payload (length bytes)

where the CRC covers ``length``, ``seq`` and the payload.  Records are
appended in sequence order, each synced before the next is written, so at
most the last record can be torn.  Replay reads from the segment holding the
first wanted sequence number and stops at the first record that is not the
next one: zeros, a torn write (CRC), or an old record of a recycled segment
(its seq is lower).  A segment whose records are all applied is recycled:
renamed to the next segment's name and overwritten from the start.
"""

from __future__ import annotations

import itertools
import logging
import os
import struct
import threading
from collections.abc import Iterator

from partlog.kafka.crc32c import crc32c

log = logging.getLogger("partlog.store")

# Segment size: large enough that rotation (a rename and a directory sync)
# is rare, small enough that recycling keeps the journal's disk use bounded
# (about two segments plus what is not yet applied).
JOURNAL_SEGMENT_BYTES_DEFAULT = 16 << 20
JOURNAL_SEGMENT_BYTES_MIN = 1 << 16
# A record larger than this is a bug or a corrupt length field: replay stops.
JOURNAL_RECORD_BYTES_MAX = 1 << 30

_HEADER = struct.Struct(">IIQ")  # length, crc32c, seq
_CRC_PREFIX = struct.Struct(">I")  # length, as the CRC covers it
_SEQ = struct.Struct(">Q")
_SUFFIX = ".jnl"
# A segment is filled with zeros this far ahead of its appends.
_ZEROS_CHUNK_BYTES = 1 << 20
# A follower (readonly store) reads at most this much of a segment per step.
_FOLLOW_CHUNK_BYTES = 1 << 20


class JournalError(Exception):
    """The journal directory cannot be used (I/O error, foreign files)."""


def _segment_name(first_seq: int) -> str:
    return f"{first_seq:020d}{_SUFFIX}"


def _record_crc(length: int, seq: int, payload: bytes | memoryview) -> int:
    return int(crc32c(_CRC_PREFIX.pack(length) + _SEQ.pack(seq) + bytes(payload)))


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Journal:
    """Append-only, recycled segment files (see the module doc).

    Not thread-safe: one appender (the group commit's commit stage) and one
    releaser (the checkpoint), serialised by the store.  ``append`` and
    ``release`` may run concurrently: release touches only segments wholly
    below the one being written.
    """

    def __init__(
        self,
        directory: str,
        *,
        sync: bool,
        segment_bytes: int = JOURNAL_SEGMENT_BYTES_DEFAULT,
        readonly: bool = False,
    ) -> None:
        if segment_bytes < JOURNAL_SEGMENT_BYTES_MIN:
            raise ValueError(f"journal segment_bytes must be >= {JOURNAL_SEGMENT_BYTES_MIN}, got {segment_bytes}")
        self.directory = directory
        self.sync = sync
        self.segment_bytes = segment_bytes
        self._fd = -1
        self._segment_first = 0  # first seq of the segment being written
        self._pos = 0
        self._filled = 0  # bytes of the segment being written that exist (zeros or records)
        self._next_seq = 0
        # first seq -> segment path, of every segment on disk, oldest first
        self._segments: dict[int, str] = {}
        self._spares: list[str] = []  # recycled segments, ready to be renamed
        # follow(): (segment path, byte position, seq expected there)
        self._follow: tuple[str, int, int] | None = None
        # Guards the segment bookkeeping: append (commit stage) and release
        # (checkpoint) run in different threads.
        self._lock = threading.Lock()
        self.stats = {"records": 0, "bytes": 0, "rotations": 0, "recycled": 0, "created": 0}
        if readonly and not os.path.isdir(directory):
            return  # a store from before the journal, or one never written
        if not readonly:
            os.makedirs(directory, exist_ok=True)
        for name in sorted(os.listdir(directory)):
            if name.endswith(_SUFFIX + ".tmp"):
                if not readonly:
                    os.remove(os.path.join(directory, name))  # a segment cut off while being created
                continue
            if not name.endswith(_SUFFIX):
                continue
            stem = name[: -len(_SUFFIX)]
            if not (stem.isdigit() and len(stem) == 20):
                raise JournalError(f"{directory}: unexpected file {name!r} in the journal directory")
            self._segments[int(stem)] = os.path.join(directory, name)

    # ------------------------------------------------------------ reading

    def replay(self, after_seq: int) -> Iterator[tuple[int, bytes]]:
        """Every record with seq > ``after_seq``, in order, up to the first
        gap or invalid record (the end of the journal)."""
        firsts = sorted(self._segments)
        expected = after_seq + 1
        # The segment holding `expected`: the last one starting at or before it.
        start = [f for f in firsts if f <= expected]
        index = firsts.index(start[-1]) if start else 0
        for first in firsts[index:]:
            if first > expected:
                return  # a gap: the records between were never written
            # _read_segment yields seqs running from `first` without a gap.
            for seq, payload in self._read_segment(self._segments[first], first):
                if seq >= expected:
                    yield seq, payload
                    expected += 1

    def follow(self, after_seq: int) -> list[tuple[int, bytes]]:
        """The records with seq > ``after_seq`` that a writer in another
        process appended since the last call (a ``readonly`` store's view
        of a live journal).  Reads only new bytes while the writer stays in
        one segment; finds the next segment by its name (its first seq).
        A record half written is not returned until it is whole."""
        out: list[tuple[int, bytes]] = []
        expected = after_seq + 1
        while True:
            if self._follow is None or self._follow[2] != expected:
                self._follow = self._locate(expected)
                if self._follow is None:
                    return out
            path, pos, _ = self._follow
            try:
                with open(path, "rb") as f:
                    f.seek(pos)
                    data = f.read(_FOLLOW_CHUNK_BYTES)
            except FileNotFoundError:
                self._follow = None  # recycled under us: look again
                continue
            used = 0
            while used + _HEADER.size <= len(data):
                length, crc, seq = _HEADER.unpack_from(data, used)
                end = used + _HEADER.size + length
                if length == 0 or seq != expected or end > len(data):
                    break
                payload = data[used + _HEADER.size : end]
                if _record_crc(length, seq, payload) != crc:
                    break
                out.append((seq, payload))
                expected += 1
                used = end
            self._follow = (path, pos + used, expected)
            if used == 0:
                # Nothing new here: the writer may have moved to the
                # segment that starts at `expected` (or recycled this one).
                nxt = os.path.join(self.directory, _segment_name(expected))
                if nxt == path or not os.path.exists(nxt):
                    return out
                self._follow = (nxt, 0, expected)
            elif len(data) < _FOLLOW_CHUNK_BYTES:
                return out

    def _locate(self, seq: int) -> tuple[str, int, int] | None:
        """(segment, byte position, seq) of record ``seq``, scanning the
        segment that should hold it from its start; None if none does."""
        try:
            names = sorted(n for n in os.listdir(self.directory) if n.endswith(_SUFFIX) and n[:-4].isdigit())
        except FileNotFoundError:
            return None
        firsts = [int(n[: -len(_SUFFIX)]) for n in names]
        holding = [f for f in firsts if f <= seq]
        if not holding:
            return None
        first = holding[-1]
        path = os.path.join(self.directory, _segment_name(first))
        pos = 0
        for s, payload in self._read_segment(path, first):
            if s == seq:
                return path, pos, seq
            pos += _HEADER.size + len(payload)
        return path, pos, seq

    def _read_segment(self, path: str, first: int) -> Iterator[tuple[int, bytes]]:
        """The valid records of one segment from its start: seq runs from
        ``first`` without a gap; stops at the first record that is not."""
        with open(path, "rb") as f:
            data = f.read()
        pos = 0
        want = first
        while pos + _HEADER.size <= len(data):
            length, crc, seq = _HEADER.unpack_from(data, pos)
            if length == 0 or length > JOURNAL_RECORD_BYTES_MAX or pos + _HEADER.size + length > len(data):
                return
            if seq != want:
                return
            payload = data[pos + _HEADER.size : pos + _HEADER.size + length]
            if _record_crc(length, seq, payload) != crc:
                return
            yield seq, payload
            want += 1
            pos += _HEADER.size + length

    # ------------------------------------------------------------ writing

    def start(self, next_seq: int) -> None:
        """Start appending at ``next_seq``, in a fresh segment: every segment
        on disk holds only applied records then, so all become spares."""
        self._close_fd()
        self._spares = sorted(self._segments.values())
        self._segments = {}
        self._next_seq = next_seq
        self._open_segment(next_seq)

    @property
    def next_seq(self) -> int:
        return self._next_seq

    def append(self, payload: bytes) -> int:
        """Append one record; durable on return when ``sync``.  Returns its seq."""
        assert self._fd >= 0, "journal not started"
        length = len(payload)
        seq = self._next_seq
        record = _HEADER.pack(length, _record_crc(length, seq, payload), seq) + payload
        if self._pos + len(record) > self.segment_bytes and self._pos > 0:
            self._open_segment(seq)
        end = self._pos + len(record)
        if end > self._filled:
            # Zeros up to the next chunk boundary (or the segment's end),
            # synced by this append's fdatasync with the file's new size.
            target = max(end, min(self.segment_bytes, -(-end // _ZEROS_CHUNK_BYTES) * _ZEROS_CHUNK_BYTES))
            self._fill(self._fd, self._filled, target)
            self._filled = target
        os.pwrite(self._fd, record, self._pos)
        if self.sync:
            os.fdatasync(self._fd)
        self._pos += len(record)
        self._next_seq = seq + 1
        self.stats["records"] += 1
        self.stats["bytes"] += len(record)
        return seq

    def release(self, applied_seq: int) -> None:
        """Every record up to ``applied_seq`` is applied durably elsewhere:
        segments holding nothing newer become spares."""
        with self._lock:
            firsts = sorted(self._segments)
            for first, nxt in itertools.pairwise(firsts):
                if nxt - 1 > applied_seq or first == self._segment_first:
                    break
                self._spares.append(self._segments.pop(first))
                self.stats["recycled"] += 1
            # Keep at most two spares; delete the rest (a burst passed).
            while len(self._spares) > 2:
                os.remove(self._spares.pop())

    def close(self) -> None:
        self._close_fd()

    def _close_fd(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    @staticmethod
    def _fill(fd: int, start: int, end: int) -> None:
        """Write zeros over bytes [start, end) of the file."""
        zeros = bytes(min(_ZEROS_CHUNK_BYTES, end - start))
        while start < end:
            start += os.pwrite(fd, zeros[: min(end - start, len(zeros))], start)

    def _open_segment(self, first_seq: int) -> None:
        """Switch to a new segment whose first record will be ``first_seq``:
        a recycled spare renamed, or a new file with its first chunk of zeros."""
        path = os.path.join(self.directory, _segment_name(first_seq))
        with self._lock:
            # A segment of this name may be on disk already (a crash right
            # after a rotation, before its first record was whole): it is
            # overwritten here, so it must not stay a spare, or a later
            # rotation would rename this live segment away.
            if path in self._spares:
                self._spares.remove(path)
            spare = self._spares.pop(0) if self._spares else None
        if spare is not None:
            os.replace(spare, path)
            self.stats["rotations"] += 1
        else:
            tmp = path + ".tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                self._fill(fd, 0, min(self.segment_bytes, _ZEROS_CHUNK_BYTES))
                if self.sync:
                    os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
            self.stats["created"] += 1
        if self.sync:
            _fsync_dir(self.directory)
        self._close_fd()
        self._fd = os.open(path, os.O_RDWR)
        # A recycled spare is as long as its last use filled it.
        self._filled = os.fstat(self._fd).st_size
        with self._lock:
            self._segments[first_seq] = path
            self._segment_first = first_seq
        self._pos = 0
