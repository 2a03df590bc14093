"""The metadata log: entries under (part_id, base_offset) keys, iterated,
looked up, dropped (prefix and suffix), and the durable write of one
sequenced group commit.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import lmdb

from partlog.store.base import Staged
from partlog.store.index import IndexMixin
from partlog.store.layout import (
    FILE_RECORD,
    PART_KEY,
    U32,
    U64,
    Buf,
    CommitGroup,
    Entry,
    Part,
    decode_entry,
)


class LogMixin(IndexMixin):
    """Log entries and the durable write of a group. See the module doc."""

    def _commit_group(self, group: CommitGroup) -> None:
        """Pipeline stage 2: write a sequenced group in one durable transaction."""
        while True:
            txn = self._env.begin(write=True)
            try:
                # putmulti loops in C: the commit stage holds the GIL and is
                # the pipeline's busiest stage, so its per-put cost matters.
                _, added = txn.cursor(db=self._db_log).putmulti(group.log_puts, overwrite=False)
                assert added == len(group.log_puts), "a log key was written twice"
                for object_key, (fid, nb, nbytes, uploader, size) in group.files.items():
                    k = object_key.encode()
                    raw = txn.get(k, db=self._db_files)
                    if raw is None:
                        txn.put(k, FILE_RECORD.pack(fid, nb, nbytes, uploader, size), db=self._db_files)
                        txn.put(U64.pack(fid), k, db=self._db_file_ids)
                    else:
                        old_fid, old_nb, old_nbytes, old_uploader, old_size = FILE_RECORD.unpack(raw)
                        assert old_fid == fid, f"{object_key}: file_id {old_fid} on disk, {fid} sequenced"
                        record = FILE_RECORD.pack(fid, old_nb + nb, old_nbytes + nbytes, old_uploader, old_size)
                        txn.put(k, record, db=self._db_files)
                txn.cursor(db=self._db_parts).putmulti([(U32.pack(p), v) for p, v in group.parts.items()])
                if group.producers:
                    txn.cursor(db=self._db_producers).putmulti(list(group.producers.items()))
                for name, counter in group.counters.items():
                    txn.put(name, U64.pack(counter), db=self._db_meta)
                txn.commit()
            except lmdb.MapFullError:
                self._abort_write(txn)
                self._grow_map()
                continue
            except BaseException:
                self._abort_write(txn)
                raise
            break
        self.stats["group_commits"] += 1
        if group.files:
            with self._pending_lock:
                for object_key, (_, nb, _, _, _) in group.files.items():
                    pending = self._pending_files[object_key]
                    pending[1] -= nb
                    assert pending[1] >= 0
                    if pending[1] == 0:
                        del self._pending_files[object_key]

    def _drop_prefix_keys(self, txn: lmdb.Transaction, db: Any, prefix: bytes) -> None:
        cur = txn.cursor(db=db)
        if cur.set_range(prefix):
            while cur.key()[: len(prefix)] == prefix:
                if not cur.delete():
                    break

    def _entries(self, txn: lmdb.Transaction, part: Part, from_offset: int = 0) -> Iterator[tuple[Buf, Entry]]:
        """Entries of ``part`` whose base offset >= ``from_offset``, ascending."""
        prefix = U32.pack(part.part_id)
        cur = txn.cursor(db=self._db_log)
        if not cur.set_range(PART_KEY.pack(part.part_id, max(from_offset, 0))):
            return
        for k, v in cur:
            if k[:4] != prefix:
                return
            yield k, decode_entry(v, f"partition {part.tp} offset {PART_KEY.unpack(k)[1]}")

    def _entry_containing(self, txn: lmdb.Transaction, part: Part, offset: int) -> tuple[bytes, Entry] | None:
        """The entry whose offset range contains ``offset``, if any."""
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
