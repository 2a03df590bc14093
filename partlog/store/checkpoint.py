"""Durability and the index: the journal append per group, the checkpoint
that applies durable groups to LMDB in large transactions, and recovery.

The acknowledgement rule (docs/design/store.md, "One durable append per group"): a
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
(topics, truncation, retention, follower appends) applies the overlay first
(:meth:`Checkpointer.applied`), so it reads and writes an LMDB that holds
everything acknowledged.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import lmdb
import msgpack

from partlog.runtime import SYSTEM_CLOCK
from partlog.store.catalog import Catalog
from partlog.store.env import LmdbEnv
from partlog.store.group_commit import GroupCommitPipeline
from partlog.store.index import FileIndex
from partlog.store.journal import Journal
from partlog.store.layout import (
    ENTRY_SIZE,
    KEY_JOURNAL_APPLIED,
    U64,
    CommitGroup,
    StoreError,
    chunks_of,
    verify,
)
from partlog.store.log import LogChunks
from partlog.store.producers import ProducerTable
from partlog.store.txns import TxnTable

log = logging.getLogger(__name__)

# Recovery applies replayed groups in transactions of at most this many.
RECOVERY_GROUPS_PER_TXN = 256


def encode_group(group: CommitGroup) -> bytes:
    """The journal record of a group: everything its LMDB write needs.  The
    transaction fields follow only when the group has some, so a group
    without transactions is written as before them."""
    fields: list[Any] = [group.by_part, group.files, group.parts, group.producers, group.counters]
    if group.txns or group.aborted:
        fields += [group.txns, group.aborted]
    payload: bytes = msgpack.packb(fields, use_bin_type=True)
    return payload


def decode_group(seq: int, payload: bytes) -> CommitGroup:
    fields = msgpack.unpackb(payload, strict_map_key=False, raw=False)
    by_part, files, parts, producers, counters = fields[:5]
    txns, aborted = fields[5:] if len(fields) == 7 else ({}, {})
    return CommitGroup(
        results=[],
        errors=[],
        by_part={int(p): [_run(x) for x in runs] for p, runs in by_part.items()},
        files={str(k): [int(x) for x in v] for k, v in files.items()},
        parts={int(p): bytes(v) for p, v in parts.items()},
        producers={bytes(k): bytes(v) for k, v in producers.items()},
        counters={bytes(k): int(v) for k, v in counters.items()},
        seq=seq,
        txns={int(p): bytes(v) for p, v in txns.items()},
        aborted={int(p): [bytes(r) for r in records] for p, records in aborted.items()},
    )


def _run(x: Any) -> bytes:
    """A run of entries from a journal record; records written before runs
    (partlog <= the chunked log) held one [key, entry] pair per batch."""
    run = bytes(x[1]) if isinstance(x, list | tuple) else bytes(x)
    if not run or len(run) % ENTRY_SIZE:
        raise StoreError(f"journal record holds a run of {len(run)} bytes, not whole {ENTRY_SIZE}-byte entries")
    return run


class Checkpointer:
    """The journal, the overlay of durable groups not yet in LMDB, and the
    checkpoints that apply them (see the module doc).

    ``overlay`` is a tuple replaced (never mutated) by the commit stage and
    the checkpoint, so a reader can hold a snapshot of it (view.py)."""

    def __init__(
        self,
        env: LmdbEnv,
        journal: Journal,
        *,
        catalog: Catalog,
        index: FileIndex,
        log: LogChunks,
        producers: ProducerTable,
        txns: TxnTable,
        stats: dict[str, int],
        groups_max: int,
        interval_ms: int,
        backlog_groups_max: int,
        monotonic: Callable[[], float] = SYSTEM_CLOCK.monotonic,
    ) -> None:
        # How long the overlay has waited (the checkpoint thread's interval).
        self._monotonic = monotonic
        self._env = env
        self.journal = journal
        self._catalog = catalog
        self._index = index
        self._log = log
        self._producers = producers
        self._txns = txns
        self.stats = stats
        self.groups_max = groups_max
        self.interval_ms = interval_ms
        self.backlog_groups_max = backlog_groups_max
        self.overlay: tuple[CommitGroup, ...] = ()
        self._overlay_lock = threading.Lock()
        self._overlay_since = 0.0
        # Serialises LMDB write transactions of checkpoints and exclusive writes.
        self.lock = threading.Lock()
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stop = False
        self._pipeline: GroupCommitPipeline[CommitGroup] | None = None
        self._followed_seq = 0  # readonly: the last journal seq seen

    # ------------------------------------------------------------ commit stage

    def commit(self, group: CommitGroup) -> None:
        """Pipeline stage 2: make a sequenced group durable (one journal
        append), then visible to readers (the overlay)."""
        group.seq = self.journal.append(encode_group(group))
        with self._overlay_lock:
            self.overlay = (*self.overlay, group)
            waiting = len(self.overlay)
            if waiting == 1:
                self._overlay_since = self._monotonic()
        self.stats["group_commits"] += 1
        if self._thread is None:
            if waiting >= self.groups_max:
                self.checkpoint()
        elif waiting >= self.backlog_groups_max:
            # The thread fell behind (commits outrun LMDB): this group's
            # caller applies the backlog itself, after the thread's running
            # checkpoint, before anything more is acknowledged.
            self.stats["checkpoint_backpressure"] += 1
            self.checkpoint()
        elif waiting == 1 or waiting == self.groups_max:
            # The thread sleeps with nothing waiting: the first group starts
            # its checkpoint_interval_ms clock, the limit cuts it short.
            with self._wake:
                self._wake.notify()

    # ------------------------------------------------------------ checkpoint

    def checkpoint(self) -> int:
        """Apply every durable group of the overlay to LMDB in one
        transaction; returns how many.  Serialised with exclusive writes."""
        with self.lock:
            return self._checkpoint_locked()

    @contextmanager
    def applied(self) -> Iterator[None]:
        """Hold the checkpoint lock with the overlay applied: LMDB then holds
        everything acknowledged, and no checkpoint runs beside the caller."""
        with self.lock:
            self._checkpoint_locked()
            yield

    def _checkpoint_locked(self) -> int:
        groups = self.overlay
        if not groups:
            return 0
        last = self._apply_durably(groups)
        # Only now may readers stop seeing them in the overlay (view.py).
        with self._overlay_lock:
            assert self.overlay[: len(groups)] == groups
            self.overlay = self.overlay[len(groups) :]
            self._overlay_since = self._monotonic()
        self._index.release_pending(groups)
        self.journal.release(last)
        self.stats["checkpoints"] += 1
        self.stats["checkpointed_groups"] += len(groups)
        return len(groups)

    def _apply_groups(self, txn: lmdb.Transaction, groups: Iterable[CommitGroup]) -> None:
        """The LMDB writes of ``groups``, in order, merged: one put per key."""
        files: dict[str, list[int]] = {}
        parts: dict[int, bytes] = {}
        producers: dict[bytes, bytes] = {}
        counters: dict[bytes, int] = {}
        txns: dict[int, bytes] = {}
        aborted: dict[int, list[bytes]] = {}
        # Each partition's new entries of all the groups, in order: written
        # as chunks (layout.CHUNK_ENTRIES_MAX), one put each.
        runs: dict[int, list[bytes]] = {}
        for g in groups:
            for part_id, part_runs in g.by_part.items():
                mine = runs.get(part_id)
                if mine is None:
                    runs[part_id] = list(part_runs)
                else:
                    mine.extend(part_runs)
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
            txns.update(g.txns)
            for part_id, records in g.aborted.items():
                aborted.setdefault(part_id, []).extend(records)
        for object_key, (fid, nb, nbytes, uploader, size) in files.items():
            self._index.add(txn, object_key, fid, nb, nbytes, uploader, size)
        if runs:
            # (joining one run returns that run: no copy in the common case)
            self._log.put_chunks(
                txn, [chunk for part_id in sorted(runs) for chunk in chunks_of(part_id, b"".join(runs[part_id]))]
            )
        self._catalog.put_packed_parts(txn, parts)
        self._producers.put_encoded(txn, producers)
        self._txns.write(txn, txns)
        for part_id, records in aborted.items():
            self._txns.put_aborted(txn, part_id, records)
        self._catalog.put_counters(txn, counters)

    def _apply_durably(self, groups: tuple[CommitGroup, ...] | list[CommitGroup]) -> int:
        """Apply ``groups`` and record the last one's seq as applied, in one
        transaction (durable with ``sync``); returns that seq."""
        last: int = groups[-1].seq

        def apply(txn: lmdb.Transaction) -> None:
            self._apply_groups(txn, groups)
            txn.put(KEY_JOURNAL_APPLIED, U64.pack(last), db=self._env.meta)

        self._env.write(apply)
        return last

    # ------------------------------------------------------------ the thread

    def start_thread(self, name: str, pipeline: GroupCommitPipeline[CommitGroup]) -> None:
        """Checkpoint in a thread of its own from now on; a checkpoint that
        fails there fail-stops ``pipeline`` (the store's writes)."""
        self._pipeline = pipeline
        thread = threading.Thread(target=self._loop, name=f"checkpoint {name}", daemon=True)
        self._thread = thread
        thread.start()

    def stop_thread(self) -> None:
        thread = self._thread
        if thread is None:
            return
        with self._wake:
            self._stop = True
            self._wake.notify()
        thread.join()
        self._thread = None

    def _loop(self) -> None:
        pipeline = self._pipeline
        assert pipeline is not None
        interval_s = self.interval_ms / 1000
        while True:
            with self._wake:
                while not self._stop:
                    waiting = len(self.overlay)
                    if waiting >= self.groups_max:
                        break
                    if waiting:
                        left = self._overlay_since + interval_s - self._monotonic()
                        if left <= 0:
                            break
                        self._wake.wait(left)
                    else:
                        self._wake.wait()
                if self._stop:
                    return
            if pipeline.failed is not None:
                return
            try:
                with self._env.gate.writing():
                    self.checkpoint()
            except Exception as e:
                # The index can no longer follow the journal: fail-stop the
                # store as a failed commit does; reopen() replays the journal.
                log.exception("checkpoint failed path=%s", self._env.path)
                pipeline.fail_stop(e)
                return

    # ------------------------------------------------------------ recovery

    def recover(self) -> None:
        """Apply the journal's records above ``journal_applied_seq`` (what
        a crash left unapplied), then start appending after them."""
        applied = self._applied_seq()
        batch: list[CommitGroup] = []
        replayed = 0
        for seq, payload in self.journal.replay(applied):
            batch.append(decode_group(seq, payload))
            if len(batch) >= RECOVERY_GROUPS_PER_TXN:
                applied = self._apply_durably(batch)
                replayed += len(batch)
                batch = []
        if batch:
            applied = self._apply_durably(batch)
            replayed += len(batch)
        if replayed:
            log.info("journal replayed path=%s groups=%d applied_seq=%d", self._env.path, replayed, applied)
        self.stats["replayed_groups"] = replayed
        self.journal.start(applied + 1)

    def replay_overlay(self) -> None:
        """A ``readonly`` store's overlay at open: the journal's records
        above the applied seq (it never applies them)."""
        applied = self._applied_seq()
        self._followed_seq = applied
        groups = tuple(decode_group(seq, payload) for seq, payload in self.journal.replay(applied))
        if groups:
            self._followed_seq = groups[-1].seq
        self.overlay = groups

    def follow(self) -> None:
        """A ``readonly`` store before each read: the records the writer
        appended since, and the groups its checkpoints applied dropped."""
        with self._overlay_lock:
            # Records LMDB holds may be recycled already: follow from there.
            applied = self._applied_seq()
            new = self.journal.follow(max(self._followed_seq, applied))
            if new:
                self._followed_seq = new[-1][0]
                self.overlay = (*self.overlay, *(decode_group(seq, payload) for seq, payload in new))
            if self.overlay and self.overlay[0].seq <= applied:
                self.overlay = tuple(g for g in self.overlay if g.seq > applied)

    def _applied_seq(self) -> int:
        raw = self._env.get_meta(KEY_JOURNAL_APPLIED)
        return 0 if raw is None else int(U64.unpack(raw)[0])
