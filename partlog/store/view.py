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
"""

from __future__ import annotations

from typing import Any

import lmdb

from partlog.store.layout import Buf, CommitGroup


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
