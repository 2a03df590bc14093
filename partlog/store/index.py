"""The file-reference index: which WAL objects this store's logs reference,
with live batch and byte counts (what walmgr asks about).
"""

from __future__ import annotations

from collections.abc import Iterable

import lmdb

from partlog.kafka.records import (
    FileUsage,
    TopicIdPartition,
)
from partlog.store.base import Staged, StoreBase
from partlog.store.layout import (
    FILE_RECORD,
    U64,
    CorruptEntryError,
    Entry,
    inconsistent,
    verify,
)
from partlog.store.view import Txn, overlay_file
from partlog.wal.key import OBJECT_KEY_BYTES_MAX


class IndexMixin(StoreBase):
    """The file-reference index. See the module doc."""

    def _resolve_file(self, s: Staged, object_key: str) -> int:
        """The file_id of ``object_key`` if some commit (pending or durable)
        references it, else -1.  Checks the pending map BEFORE opening the
        read snapshot: a pending entry leaves the map only after its commit is
        durable, so one of the two always sees it."""
        with self._pending_lock:
            pending = self._pending_files.get(object_key)
        if pending is not None:
            return pending[0]
        raw = s.reader().get(object_key.encode(), db=self._db_files)
        return -1 if raw is None else int(FILE_RECORD.unpack(raw)[0])

    def _file_adjust(self, txn: lmdb.Transaction, file_id: int, batches: int, nbytes: int) -> None:
        key = txn.get(U64.pack(file_id), db=self._db_file_ids)
        if key is None:
            raise inconsistent("an entry references unknown file_id %d", file_id)
        raw = txn.get(key, db=self._db_files)
        if raw is None:
            raise inconsistent("the file index lost %r", key)
        fid, live_batches, live_bytes, uploader, fsize = FILE_RECORD.unpack(raw)
        live_batches += batches
        live_bytes += nbytes
        verify(live_batches >= 0 and live_bytes >= 0, "negative reference count for %r", key)
        if live_batches == 0:
            txn.delete(key, db=self._db_files)
            txn.delete(U64.pack(file_id), db=self._db_file_ids)
        else:
            txn.put(key, FILE_RECORD.pack(fid, live_batches, live_bytes, uploader, fsize), db=self._db_files)

    def _file_of(self, txn: Txn, tp: TopicIdPartition, e: Entry) -> tuple[str, int, int]:
        """Object key, uploader and file size of the WAL object ``e`` references."""
        raw_key = txn.get(U64.pack(e.file_id), db=self._db_file_ids)
        raw = None if raw_key is None else txn.get(raw_key, db=self._db_files)
        if raw_key is None or raw is None:
            new = overlay_file(txn, e.file_id)
            if new is not None:
                return new
            raise CorruptEntryError(f"partition {tp} offset {e.base_offset}: unknown file_id {e.file_id}")
        _, _, _, uploader, file_size = FILE_RECORD.unpack(raw)
        return bytes(raw_key).decode(), uploader, file_size

    def _file_add(
        self, txn: lmdb.Transaction, object_key: str, file_id: int, batches: int, nbytes: int, uploader: int, size: int
    ) -> None:
        """Add references to the file index, as a group commit does: the first
        reference records uploader and size, later ones only count."""
        k = object_key.encode()
        raw = txn.get(k, db=self._db_files)
        if raw is None:
            txn.put(k, FILE_RECORD.pack(file_id, batches, nbytes, uploader, size), db=self._db_files)
            txn.put(U64.pack(file_id), k, db=self._db_file_ids)
            return
        old_fid, old_nb, old_nbytes, old_uploader, old_size = FILE_RECORD.unpack(raw)
        verify(old_fid == file_id, "%s: file_id %d on disk, %d resolved", object_key, old_fid, file_id)
        txn.put(
            k,
            FILE_RECORD.pack(file_id, old_nb + batches, old_nbytes + nbytes, old_uploader, old_size),
            db=self._db_files,
        )

    def referenced_files(self, object_keys: Iterable[str]) -> set[str]:
        """The subset of ``object_keys`` that some entry of this store references:
        entries above the HWM included, and commits sequenced but not yet
        durable (design.md, "References stay visible")."""
        keys = list(object_keys)
        # Pending first, then the snapshot: a key leaves the pending map only
        # after its commit is durable, so one of the two sees it.
        with self._pending_lock:
            found = {k for k in keys if k in self._pending_files}
        with self._read() as txn:
            # (Pending holds the overlay's references too; its groups are
            # asked as well, so a reference never rests on one map alone.)
            for g in txn.groups:
                found.update(k for k in keys if k in g.files)
            for k in keys:
                raw = k.encode()
                # Keys no commit accepts (empty, longer than LMDB's key limit)
                # are unreferenced; asking LMDB about them raises BadValsizeError.
                if (
                    k not in found
                    and 0 < len(raw) <= OBJECT_KEY_BYTES_MAX
                    and txn.get(raw, db=self._db_files) is not None
                ):
                    found.add(k)
        return found

    def file_usage(self) -> dict[str, FileUsage]:
        """Live batches and bytes per referenced WAL object."""
        with self._read() as txn:
            usage = {
                bytes(k).decode(): [FILE_RECORD.unpack(v)[1], FILE_RECORD.unpack(v)[2]]
                for k, v in txn.cursor(db=self._db_files)
            }
            for g in txn.groups:
                for key, (_, nb, nbytes, _, _) in g.files.items():
                    acc = usage.setdefault(key, [0, 0])
                    acc[0] += nb
                    acc[1] += nbytes
        return {k: FileUsage(nb, nbytes) for k, (nb, nbytes) in usage.items()}
