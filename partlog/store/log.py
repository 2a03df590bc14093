"""The metadata log: entries under (part_id, base_offset) keys, iterated
and looked up (LMDB and the overlay of durable, not yet applied groups),
and dropped (prefix and suffix, by exclusive writes).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import lmdb

from partlog.store.base import Staged
from partlog.store.index import IndexMixin
from partlog.store.layout import (
    PART_KEY,
    U32,
    Buf,
    Entry,
    Part,
    decode_entry,
)
from partlog.store.view import Txn, find_at_or_before, overlay_entries


class LogMixin(IndexMixin):
    """Log entries. See the module doc."""

    def _drop_prefix_keys(self, txn: lmdb.Transaction, db: Any, prefix: bytes) -> None:
        cur = txn.cursor(db=db)
        if cur.set_range(prefix):
            while cur.key()[: len(prefix)] == prefix:
                if not cur.delete():
                    break

    def _entries(self, txn: Txn, part: Part, from_offset: int = 0) -> Iterator[tuple[Buf, Entry]]:
        """Entries of ``part`` whose base offset >= ``from_offset``, ascending:
        LMDB's, then the overlay's (which all lie above them)."""
        start = PART_KEY.pack(part.part_id, max(from_offset, 0))
        overlay = overlay_entries(txn, part.part_id)
        if not overlay or start < overlay[0][0]:
            prefix = start[:4]
            cur = txn.cursor(db=self._db_log)
            if cur.set_range(start):
                for k, v in cur:
                    if k[:4] != prefix:
                        break
                    yield k, decode_entry(v, f"partition {part.tp} offset {PART_KEY.unpack(k)[1]}")
        for k, v in overlay:
            if k >= start:
                yield k, decode_entry(v, f"partition {part.tp} offset {PART_KEY.unpack(k)[1]} (journal)")

    def _entry_containing(self, txn: Txn, part: Part, offset: int) -> tuple[bytes, Entry] | None:
        """The entry whose offset range contains ``offset``, if any."""
        overlay = overlay_entries(txn, part.part_id)
        if overlay and offset >= 0:
            i = find_at_or_before(overlay, part.part_id, offset)
            if i >= 0:
                ok, ov = overlay[i]
                entry = decode_entry(ov, f"partition {part.tp} offset {PART_KEY.unpack(ok)[1]} (journal)")
                return (ok, entry) if entry.base_offset <= offset <= entry.last_offset else None
        cur = txn.cursor(db=self._db_log)
        key = PART_KEY.pack(part.part_id, offset)
        found = cur.set_range(key)
        if found and cur.key() == key:
            k, v = cur.item()
        else:
            # The batch that starts before `offset`: step back one entry.
            if found:
                if not cur.prev():
                    return None
            elif not cur.last():
                return None
            k, v = cur.item()
            if k[:4] != key[:4]:
                return None
        entry = decode_entry(v, f"partition {part.tp} offset {PART_KEY.unpack(k)[1]}")
        if entry.base_offset <= offset <= entry.last_offset:
            return bytes(k), entry
        return None

    def _drop_entries(self, s: Staged, part: Part, until_offset: int | None) -> int:
        """Delete entries wholly below ``until_offset`` (all if None); returns count.

        Keeps the partition's live counters and the file index exact.
        """
        txn = s.wtxn
        per_file: dict[int, list[int]] = {}
        cur = txn.cursor(db=self._db_log)
        prefix = U32.pack(part.part_id)
        dropped = 0
        if cur.set_range(prefix):
            while cur.key()[:4] == prefix:
                k = cur.key()
                e = decode_entry(cur.value(), f"partition {part.tp} offset {PART_KEY.unpack(k)[1]}")
                if until_offset is not None and e.last_offset >= until_offset:
                    break
                acc = per_file.setdefault(e.file_id, [0, 0])
                acc[0] -= 1
                acc[1] -= e.size
                part.live_batches -= 1
                part.live_bytes -= e.size
                if e.base_offset == part.max_timestamp_offset:
                    part.max_timestamp_offset = -2
                dropped += 1
                if not cur.delete():
                    break
        for file_id, (nb, nbytes) in per_file.items():
            self._file_adjust(txn, file_id, nb, nbytes)
        assert part.live_batches >= 0 and part.live_bytes >= 0
        if part.live_batches == 0 and part.max_timestamp_offset == -2:
            part.max_timestamp, part.max_timestamp_offset = -1, -1
        return dropped

    def _drop_suffix(self, s: Staged, part: Part, from_offset: int) -> tuple[int, set[int]]:
        """Delete entries with base offset >= ``from_offset``, keeping the live
        counters and the file index exact; returns how many, and the producer
        ids they held."""
        txn = s.wtxn
        per_file: dict[int, list[int]] = {}
        pids: set[int] = set()
        cur = txn.cursor(db=self._db_log)
        prefix = U32.pack(part.part_id)
        dropped = 0
        if cur.set_range(PART_KEY.pack(part.part_id, from_offset)):
            while cur.key()[:4] == prefix:
                k = cur.key()
                e = decode_entry(cur.value(), f"partition {part.tp} offset {PART_KEY.unpack(k)[1]}")
                acc = per_file.setdefault(e.file_id, [0, 0])
                acc[0] -= 1
                acc[1] -= e.size
                part.live_batches -= 1
                part.live_bytes -= e.size
                if e.header.producer_id >= 0:
                    pids.add(e.header.producer_id)
                dropped += 1
                if not cur.delete():
                    break
        for file_id, (nb, nbytes) in per_file.items():
            self._file_adjust(txn, file_id, nb, nbytes)
        assert part.live_batches >= 0 and part.live_bytes >= 0
        return dropped, pids
