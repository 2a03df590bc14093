"""The file-reference index: which WAL objects this store's logs reference,
with live batch and byte counts (what walmgr asks about).

The index is exact and transactional: every write that adds or removes
entries adjusts ``files`` (object key -> file_id, live batches, live bytes,
uploader, file size) and ``file_ids`` (file_id -> object key) in its own
transaction, so a key is present exactly while some entry references it.

**References stay visible** (design.md): a commit that is sequenced but not
yet applied to LMDB holds its references in the *pending* map from the step
that checked its commit deadline until a checkpoint applied its group, and
:meth:`FileIndex.referenced` asks the pending map before it opens its
snapshot.  So after the deadline no new reference can appear, for every
answer, durable or not.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

import lmdb

from partlog.kafka.records import FileUsage, TopicIdPartition
from partlog.store.env import LmdbEnv
from partlog.store.layout import (
    FILE_RECORD,
    U64,
    CommitGroup,
    CorruptEntryError,
    Entry,
    inconsistent,
    verify,
)
from partlog.store.release_grace import ReleaseGrace
from partlog.store.view import ReadView, Txn, Views, overlay_file
from partlog.wal.key import OBJECT_KEY_BYTES_MAX


class FileIndex:
    """The file-reference index and the pending references (see the module doc)."""

    def __init__(self, env: LmdbEnv) -> None:
        self._db_files = env.files
        self._db_file_ids = env.file_ids
        # WAL objects referenced by sequenced commits whose groups are not
        # yet applied to LMDB: key -> [file_id, batches].
        self.pending: dict[str, list[int]] = {}
        self._pending_lock = threading.Lock()
        # Keys released a moment ago still count (release_grace.py); the
        # store sets it.  A write that aborts after noting a release only
        # keeps a key referenced a little longer: the safe side.
        self.grace: ReleaseGrace | None = None

    # ------------------------------------------------------------ pending references

    def pending_id(self, object_key: str) -> int | None:
        """The file_id a pending commit gave ``object_key``, or None."""
        with self._pending_lock:
            pending = self.pending.get(object_key)
        return None if pending is None else pending[0]

    def add_pending(self, object_key: str, file_id: int, batches: int) -> None:
        """A commit referencing ``object_key`` was sequenced."""
        with self._pending_lock:
            pending = self.pending.setdefault(object_key, [file_id, 0])
            pending[1] += batches

    def release_pending(self, groups: Iterable[CommitGroup]) -> None:
        """``groups`` are applied to LMDB: their references left the pending map."""
        with self._pending_lock:
            for g in groups:
                for object_key, (_, nb, _, _, _) in g.files.items():
                    pending = self.pending[object_key]
                    pending[1] -= nb
                    assert pending[1] >= 0
                    if pending[1] == 0:
                        del self.pending[object_key]

    # ------------------------------------------------------------ file ids

    def durable_id(self, txn: Txn, object_key: str) -> int:
        """The file_id LMDB (as ``txn`` sees it) gives ``object_key``, else -1."""
        raw = txn.get(object_key.encode(), db=self._db_files)
        return -1 if raw is None else int(FILE_RECORD.unpack(raw)[0])

    def record(self, txn: Txn, object_key: str) -> tuple[int, int, int, int, int] | None:
        """(file_id, batches, bytes, uploader, size) of ``object_key`` in
        LMDB as ``txn`` sees it, None when nothing references it."""
        raw = txn.get(object_key.encode(), db=self._db_files)
        return None if raw is None else FILE_RECORD.unpack(raw)

    def resolve(self, txn: Txn, object_key: str) -> int:
        """The file_id of ``object_key`` if some commit (pending or durable)
        references it, else -1.  The pending map is asked BEFORE ``txn``'s
        snapshot (opened after): a pending entry leaves the map only once
        its group is applied, so one of the two always sees it."""
        pending = self.pending_id(object_key)
        return pending if pending is not None else self.durable_id(txn, object_key)

    def object_key(self, txn: Txn, tp: TopicIdPartition, e: Entry) -> str:
        """The object key of the WAL object entry ``e`` references."""
        raw = txn.get(U64.pack(e.file_id), db=self._db_file_ids)
        if raw is not None:
            return bytes(raw).decode()
        new = overlay_file(txn, e.file_id)
        if new is None:
            raise CorruptEntryError(f"partition {tp} offset {e.base_offset}: unknown file_id {e.file_id}")
        return new[0]

    def file_of(self, txn: Txn, tp: TopicIdPartition, e: Entry) -> tuple[str, int, int]:
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

    # ------------------------------------------------------------ LMDB writes

    def add(
        self, txn: lmdb.Transaction, object_key: str, file_id: int, batches: int, nbytes: int, uploader: int, size: int
    ) -> None:
        """Add references: the first one records uploader and size, later
        ones only count."""
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

    def release(self, txn: lmdb.Transaction, per_file: dict[int, list[int]]) -> None:
        """Remove references: file_id -> [batches, bytes] (negative counts);
        a file whose last reference went leaves the index."""
        for file_id, (nb, nbytes) in per_file.items():
            self._adjust(txn, file_id, nb, nbytes)

    def _adjust(self, txn: lmdb.Transaction, file_id: int, batches: int, nbytes: int) -> None:
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
            if self.grace is not None:
                self.grace.released((bytes(key).decode(),))
        else:
            txn.put(key, FILE_RECORD.pack(fid, live_batches, live_bytes, uploader, fsize), db=self._db_files)

    # ------------------------------------------------------------ reads

    def referenced(self, views: Views, object_keys: Iterable[str]) -> set[str]:
        """The subset of ``object_keys`` that some entry references: entries
        above the HWM included, and commits sequenced but not yet durable."""
        keys = list(object_keys)
        # Pending first, then the snapshot (see resolve).
        with self._pending_lock:
            found = {k for k in keys if k in self.pending}
        with views.read() as txn:
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

    def usage(self, view: ReadView) -> dict[str, FileUsage]:
        """Live batches and bytes per referenced WAL object."""
        usage = {
            bytes(k).decode(): [FILE_RECORD.unpack(v)[1], FILE_RECORD.unpack(v)[2]]
            for k, v in view.cursor(db=self._db_files)
        }
        for g in view.groups:
            for key, (_, nb, nbytes, _, _) in g.files.items():
                acc = usage.setdefault(key, [0, 0])
                acc[0] += nb
                acc[1] += nbytes
        return {k: FileUsage(nb, nbytes) for k, (nb, nbytes) in usage.items()}

    def problems(self, view: ReadView, usage: dict[int, list[int]]) -> list[str]:
        """Where the index disagrees with ``usage`` (file_id -> [batches,
        bytes] recomputed from the logs) or with its reverse map."""
        problems = []
        index: dict[int, list[int]] = {}
        for k, v in view.cursor(db=self._db_files):
            fid, nb, nbytes, _, _ = FILE_RECORD.unpack(v)
            index[fid] = [nb, nbytes]
            back = view.get(U64.pack(fid), db=self._db_file_ids)
            if back is None or bytes(back) != bytes(k):
                problems.append(f"file index: {bytes(k).decode()!r} has no reverse entry")
        for g in view.groups:
            for fid, nb, nbytes, _, _ in g.files.values():
                acc = index.setdefault(fid, [0, 0])
                acc[0] += nb
                acc[1] += nbytes
        if index != usage:
            problems.append(f"file index differs from the logs: index={index} logs={usage}")
        return problems
