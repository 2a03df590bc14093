"""What a reader sees: an LMDB snapshot plus the journal's durable groups
that the snapshot does not hold yet.

Acknowledged commits are durable in the journal before the LMDB index holds
them (:mod:`partlog.store.checkpoint`), so every read goes through a
:class:`ReadView`.  The protocol that keeps a view exact, with the
checkpoint running concurrently:

1. the reader takes the tuple of durable, not yet applied groups (the
   overlay) first, and opens its LMDB read transaction second;
2. the checkpoint removes groups from the overlay only after the LMDB
   transaction that applied them committed.

So every group the overlay lost before step 1 is in the snapshot of step 2,
and the view is the snapshot plus the overlay groups whose seq is above the
snapshot's applied seq: a prefix of the journal, with no group twice.
:class:`Views` opens views in that order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import lmdb

from partlog.store.env import LmdbEnv
from partlog.store.layout import KEY_JOURNAL_APPLIED, U64, Buf, CommitGroup


class ReadView:
    """An LMDB read transaction and the overlay groups it must see.

    Forwards ``get`` and ``cursor`` to the transaction, so code that reads
    LMDB takes either a view or a write transaction (which an exclusive
    write runs with the overlay empty)."""

    __slots__ = ("groups", "txn")

    def __init__(self, txn: lmdb.Transaction, groups: tuple[CommitGroup, ...]) -> None:
        self.txn = txn
        self.groups = groups

    def get(self, key: Buf, db: Any) -> Buf | None:
        value: Buf | None = self.txn.get(key, db=db)
        return value

    def cursor(self, db: Any) -> lmdb.Cursor:
        return self.txn.cursor(db=db)


Txn = ReadView | lmdb.Transaction
"""What the read helpers take: a view, or an exclusive write's transaction."""


class Views:
    """Opens :class:`ReadView` s: ``overlay()`` (the durable groups not yet
    applied, oldest first) is taken first, the LMDB snapshot second, inside
    the environment's gate.  ``follow`` (a ``readonly`` store's) first reads
    what the writer in another process appended to the journal."""

    def __init__(
        self,
        env: LmdbEnv,
        overlay: Callable[[], tuple[CommitGroup, ...]],
        follow: Callable[[], None] | None,
    ) -> None:
        self._env = env
        self._overlay = overlay
        self._follow = follow

    def begin(self) -> ReadView:
        env = self._env
        env.gate.enter_read()
        try:
            if self._follow is not None:
                self._follow()
            groups = self._overlay()
            txn = env.snapshot()
        except BaseException:
            env.gate.exit_read()
            raise
        if groups:
            raw = txn.get(KEY_JOURNAL_APPLIED, db=env.meta)
            applied = -1 if raw is None else int(U64.unpack(raw)[0])
            if groups[0].seq <= applied:
                groups = tuple(g for g in groups if g.seq > applied)
        return ReadView(txn, groups)

    def end(self, view: ReadView) -> None:
        view.txn.abort()
        self._env.gate.exit_read()

    @contextmanager
    def read(self) -> Iterator[ReadView]:
        view = self.begin()
        try:
            yield view
        finally:
            self.end(view)


def overlay_runs(txn: Txn, part_id: int) -> list[bytes]:
    """The overlay's log entries of ``part_id``, ascending, as runs of whole
    entries (layout.chunk_entry reads them).

    Overlay entries of a partition all lie above its entries in LMDB: only
    appends go through the journal; truncation and deletion are exclusive
    writes, which run after a checkpoint emptied the overlay."""
    if type(txn) is not ReadView or not txn.groups:
        return []
    out: list[bytes] = []
    for g in txn.groups:
        runs = g.by_part.get(part_id)
        if runs:
            out.extend(runs)
    return out


def overlay_part(txn: Txn, part_id: int) -> bytes | None:
    """The packed state of ``part_id`` after the view's last overlay group
    that changed it, or None when the LMDB snapshot's state is current."""
    if type(txn) is not ReadView:
        return None
    for g in reversed(txn.groups):
        packed = g.parts.get(part_id)
        if packed is not None:
            return packed
    return None


def overlay_file(txn: Txn, file_id: int) -> tuple[str, int, int] | None:
    """(object key, uploader, file size) of a file the overlay references
    under ``file_id``, or None."""
    if type(txn) is not ReadView:
        return None
    for g in txn.groups:
        for key, (fid, _nb, _nbytes, uploader, size) in g.files.items():
            if fid == file_id:
                return key, uploader, size
    return None


def overlay_txns(txn: Txn, part_id: int) -> bytes | None:
    """The transactions of ``part_id`` after the view's last overlay group
    that changed them, or None when the LMDB snapshot's are current."""
    if type(txn) is not ReadView:
        return None
    for g in reversed(txn.groups):
        raw = g.txns.get(part_id)
        if raw is not None:
            return raw
    return None


def overlay_aborted(txn: Txn, part_id: int) -> list[bytes]:
    """The overlay's aborted-index records of ``part_id``, ascending (they
    all lie above LMDB's, as the overlay's entries do)."""
    if type(txn) is not ReadView or not txn.groups:
        return []
    out: list[bytes] = []
    for g in txn.groups:
        records = g.aborted.get(part_id)
        if records:
            out.extend(records)
    return out
