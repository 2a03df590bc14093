"""Durability and the index: the journal append per group, the checkpoint
that applies durable groups to LMDB in large transactions, and recovery.

The acknowledgement rule (design.md, "One durable append per group"): a
``commit_file`` returns once the journal record of its group is written and,
with ``sync=True``, synced.  Until a checkpoint applied that group to LMDB,
readers see it through the overlay (:mod:`partlog.store.view`) and
``referenced_files`` through the pending map, which a group leaves only once
applied.  A checkpoint writes the groups' log entries, file references,
partition and producer states and counters, and ``journal_applied_seq`` in
``meta``, in ONE LMDB transaction: after a crash, the groups above that
number are replayed and applied again, exactly once.

Checkpoints run in a background thread (``checkpoint_thread=True``, the
default) when ``checkpoint_groups_max`` groups wait or the oldest has waited
``checkpoint_interval_ms``; in the deterministic simulation, inline in the
commit stage after ``checkpoint_groups_max`` groups.  Every exclusive write
(topics, truncation, retention, follower appends) applies the overlay first,
so it reads and writes an LMDB that holds everything acknowledged.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from typing import Any

import lmdb
import msgpack

from partlog.store.base import StoreBase
from partlog.store.layout import (
    ENTRY_SIZE,
    FILE_RECORD,
    KEY_JOURNAL_APPLIED,
    U32,
    U64,
    CommitGroup,
    StoreError,
    chunks_of,
    verify,
)

log = logging.getLogger("partlog.store")

# Recovery applies replayed groups in transactions of at most this many.
RECOVERY_GROUPS_PER_TXN = 256


def encode_group(group: CommitGroup) -> bytes:
    """The journal record of a group: everything its LMDB write needs."""
    payload: bytes = msgpack.packb(
        [group.by_part, group.files, group.parts, group.producers, group.counters], use_bin_type=True
    )
    return payload


def decode_group(seq: int, payload: bytes) -> CommitGroup:
    by_part, files, parts, producers, counters = msgpack.unpackb(payload, strict_map_key=False, raw=False)
    return CommitGroup(
        results=[],
        errors=[],
        by_part={int(p): [_run(x) for x in runs] for p, runs in by_part.items()},
        files={str(k): [int(x) for x in v] for k, v in files.items()},
        parts={int(p): bytes(v) for p, v in parts.items()},
        producers={bytes(k): bytes(v) for k, v in producers.items()},
        counters={bytes(k): int(v) for k, v in counters.items()},
        seq=seq,
    )


def _run(x: Any) -> bytes:
    """A run of entries from a journal record; records written before runs
    (partlog <= the chunked log) held one [key, entry] pair per batch."""
    run = bytes(x[1]) if isinstance(x, list | tuple) else bytes(x)
    if not run or len(run) % ENTRY_SIZE:
        raise StoreError(f"journal record holds a run of {len(run)} bytes, not whole {ENTRY_SIZE}-byte entries")
    return run


class CheckpointMixin(StoreBase):
    """The journal append (pipeline stage 2), checkpoints and recovery. See the module doc."""

    # ------------------------------------------------------------ commit stage

    def _commit_group(self, group: CommitGroup) -> None:
        """Pipeline stage 2: make a sequenced group durable (one journal
        append), then visible to readers (the overlay)."""
        group.seq = self._journal.append(encode_group(group))
        with self._overlay_lock:
            self._overlay = (*self._overlay, group)
            waiting = len(self._overlay)
            if waiting == 1:
                self._overlay_since = time.monotonic()
        self.stats["group_commits"] += 1
        if self._checkpointer is None:
            if waiting >= self.checkpoint_groups_max:
                self._checkpoint()
        elif waiting >= self.checkpoint_backlog_groups_max:
            # The thread fell behind (commits outrun LMDB): this group's
            # caller applies the backlog itself, after the thread's running
            # checkpoint, before anything more is acknowledged.
            self.stats["checkpoint_backpressure"] += 1
            self._checkpoint()
        elif waiting == 1 or waiting == self.checkpoint_groups_max:
            # The thread sleeps with nothing waiting: the first group starts
            # its checkpoint_interval_ms clock, the limit cuts it short.
            with self._checkpoint_wake:
                self._checkpoint_wake.notify()

    # ------------------------------------------------------------ checkpoint

    def _checkpoint_locked(self) -> int:
        groups = self._overlay
        if not groups:
            return 0
        last = self._apply_durably(groups)
        # Only now may readers stop seeing them in the overlay (view.py).
        with self._overlay_lock:
            assert self._overlay[: len(groups)] == groups
            self._overlay = self._overlay[len(groups) :]
            self._overlay_since = time.monotonic()
        with self._pending_lock:
            for g in groups:
                for object_key, (_, nb, _, _, _) in g.files.items():
                    pending = self._pending_files[object_key]
                    pending[1] -= nb
                    assert pending[1] >= 0
                    if pending[1] == 0:
                        del self._pending_files[object_key]
        self._journal.release(last)
        self.stats["checkpoints"] += 1
        self.stats["checkpointed_groups"] += len(groups)
        return len(groups)

    def _apply_groups(self, txn: lmdb.Transaction, groups: Iterable[CommitGroup]) -> None:
        """The LMDB writes of ``groups``, in order, merged: one put per key."""
        files: dict[str, list[int]] = {}
        parts: dict[int, bytes] = {}
        producers: dict[bytes, bytes] = {}
        counters: dict[bytes, int] = {}
        # Each partition's new entries of all the groups, in order: written
        # as chunks (layout.CHUNK_ENTRIES_MAX), one put each.
        log: dict[int, list[bytes]] = {}
        for g in groups:
            for part_id, runs in g.by_part.items():
                mine = log.get(part_id)
                if mine is None:
                    log[part_id] = list(runs)
                else:
                    mine.extend(runs)
            for object_key, (fid, nb, nbytes, uploader, size) in g.files.items():
                acc = files.get(object_key)
                if acc is None:
                    files[object_key] = [fid, nb, nbytes, uploader, size]
                else:
                    verify(acc[0] == fid, "%s: file_id %d and %d in one checkpoint", object_key, acc[0], fid)
                    acc[1] += nb
                    acc[2] += nbytes
            parts.update(g.parts)
            producers.update(g.producers)
            counters.update(g.counters)
        for object_key, (fid, nb, nbytes, uploader, size) in files.items():
            k = object_key.encode()
            raw = txn.get(k, db=self._db_files)
            if raw is None:
                txn.put(k, FILE_RECORD.pack(fid, nb, nbytes, uploader, size), db=self._db_files)
                txn.put(U64.pack(fid), k, db=self._db_file_ids)
            else:
                old_fid, old_nb, old_nbytes, old_uploader, old_size = FILE_RECORD.unpack(raw)
                verify(old_fid == fid, "%s: file_id %d on disk, %d sequenced", object_key, old_fid, fid)
                record = FILE_RECORD.pack(fid, old_nb + nb, old_nbytes + nbytes, old_uploader, old_size)
                txn.put(k, record, db=self._db_files)
        if log:
            # (joining one run returns that run: no copy in the common case)
            chunks = [chunk for part_id in sorted(log) for chunk in chunks_of(part_id, b"".join(log[part_id]))]
            _, added = txn.cursor(db=self._db_log).putmulti(chunks, overwrite=False)
            verify(added == len(chunks), "a log key was written twice")
        if parts:
            txn.cursor(db=self._db_parts).putmulti([(U32.pack(p), v) for p, v in parts.items()])
        if producers:
            txn.cursor(db=self._db_producers).putmulti(list(producers.items()))
        for name, counter in counters.items():
            txn.put(name, U64.pack(counter), db=self._db_meta)

    def flush(self) -> None:
        """Apply everything acknowledged to the LMDB index now (a checkpoint
        with the pipeline drained): afterwards LMDB alone holds every
        acknowledged commit, as a backup or another process reading the
        files directly needs."""
        self._check_writable()
        self._write(lambda s: None)

    def store_stats(self) -> dict[str, int]:
        """Counters and gauges for metrics: group commits, checkpoints and
        the groups they applied, groups replayed at open, map resizes, the
        journal's records and bytes, and the overlay's length against its
        limit (``checkpoint_groups_max``)."""
        return {
            **self.stats,
            "journal_records": self._journal.stats["records"],
            "journal_bytes": self._journal.stats["bytes"],
            "overlay_groups": len(self._overlay),
            "checkpoint_groups_max": self.checkpoint_groups_max,
            "checkpoint_backlog_groups_max": self.checkpoint_backlog_groups_max,
        }

    def copy_to(self, directory: str) -> None:
        """Write a consistent copy of the store into the empty ``directory``:
        the journal applied first (pipeline drained), then LMDB's copy, which
        then holds everything acknowledged."""

        def copy() -> None:
            with self._checkpoint_lock:
                self._checkpoint_locked()
                self._env.copy(directory)

        self._exclusive(copy)

    # ------------------------------------------------------------ the thread

    def _start_checkpointer(self) -> None:
        thread = threading.Thread(target=self._checkpointer_loop, name=f"checkpoint {self.path}", daemon=True)
        self._checkpointer = thread
        thread.start()

    def _stop_checkpointer(self) -> None:
        thread = self._checkpointer
        if thread is None:
            return
        with self._checkpoint_wake:
            self._checkpointer_stop = True
            self._checkpoint_wake.notify()
        thread.join()
        self._checkpointer = None

    def _checkpointer_loop(self) -> None:
        interval_s = self.checkpoint_interval_ms / 1000
        while True:
            with self._checkpoint_wake:
                while not self._checkpointer_stop:
                    waiting = len(self._overlay)
                    if waiting >= self.checkpoint_groups_max:
                        break
                    if waiting:
                        left = self._overlay_since + interval_s - time.monotonic()
                        if left <= 0:
                            break
                        self._checkpoint_wake.wait(left)
                    else:
                        self._checkpoint_wake.wait()
                if self._checkpointer_stop:
                    return
            if self._pipeline.failed is not None:
                return
            try:
                with self._gate.writing():
                    self._checkpoint()
            except Exception as e:
                # The index can no longer follow the journal: fail-stop the
                # store as a failed commit does; reopen() replays the journal.
                log.exception("checkpoint failed path=%s", self.path)
                self._pipeline.fail_stop(e)
                return

    # ------------------------------------------------------------ recovery

    def _recover_journal(self) -> None:
        """Apply the journal's records above ``journal_applied_seq`` (what
        a crash left unapplied), then start appending after them."""
        applied = self._applied_seq()
        batch: list[CommitGroup] = []
        replayed = 0
        for seq, payload in self._journal.replay(applied):
            batch.append(decode_group(seq, payload))
            if len(batch) >= RECOVERY_GROUPS_PER_TXN:
                applied = self._apply_durably(batch)
                replayed += len(batch)
                batch = []
        if batch:
            applied = self._apply_durably(batch)
            replayed += len(batch)
        if replayed:
            log.info("journal replayed path=%s groups=%d applied_seq=%d", self.path, replayed, applied)
        self.stats["replayed_groups"] = replayed
        self._journal.start(applied + 1)

    def _apply_durably(self, groups: tuple[CommitGroup, ...] | list[CommitGroup]) -> int:
        """Apply ``groups`` and record the last one's seq as applied, in one
        transaction (durable with ``sync``); returns that seq."""
        last: int = groups[-1].seq

        def apply(txn: lmdb.Transaction) -> None:
            self._apply_groups(txn, groups)
            txn.put(KEY_JOURNAL_APPLIED, U64.pack(last), db=self._db_meta)

        self._in_write_txn(apply)
        return last

    def _replayed_overlay(self) -> tuple[CommitGroup, ...]:
        """A ``readonly`` store's overlay at open: the journal's records
        above the applied seq (it never applies them)."""
        applied = self._applied_seq()
        self._followed_seq = applied
        groups = tuple(decode_group(seq, payload) for seq, payload in self._journal.replay(applied))
        if groups:
            self._followed_seq = groups[-1].seq
        return groups

    def _follow_journal(self) -> None:
        """A ``readonly`` store before each read: the records the writer
        appended since, and the groups its checkpoints applied dropped."""
        with self._overlay_lock:
            # Records LMDB holds may be recycled already: follow from there.
            applied = self._applied_seq()
            new = self._journal.follow(max(self._followed_seq, applied))
            if new:
                self._followed_seq = new[-1][0]
                self._overlay = (*self._overlay, *(decode_group(seq, payload) for seq, payload in new))
            if self._overlay and self._overlay[0].seq <= applied:
                self._overlay = tuple(g for g in self._overlay if g.seq > applied)

    def _applied_seq(self) -> int:
        txn = self._env.begin(write=False)
        try:
            raw = txn.get(KEY_JOURNAL_APPLIED, db=self._db_meta)
        finally:
            txn.abort()
        return 0 if raw is None else int(U64.unpack(raw)[0])
