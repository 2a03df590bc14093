"""The store's LMDB environment: its named databases, read and write
transactions, map growth, and the gate that closing waits for.

One :class:`LmdbEnv` per store.  It knows nothing of partitions or of the
journal; it keeps py-lmdb's sharp edges (:mod:`partlog.lmdb_gate`) in one
place:

* a write that fills the map is aborted, the map doubled (this process's
  readers drained first) and the write run again in a new transaction
  (:meth:`LmdbEnv.write`): no caller sees ``MapFullError``;
* a write transaction is aborted only with this process's readers drained
  (py-lmdb >= 2.0 would wait forever under steady read load otherwise);
* a read of a map another process grew adopts the new size;
* :meth:`LmdbEnv.close` refuses new operations and waits for those in
  flight before it closes LMDB (closing under a transaction crashes).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import lmdb

from partlog.lmdb_gate import LmdbGate
from partlog.store.journal import Journal, JournalError
from partlog.store.layout import (
    DB_NAMES,
    FORMAT_VERSION,
    FORMAT_VERSIONS_READABLE,
    MAP_SIZE_BYTES_MAX,
    NEWER_DB_NAMES,
    U64,
    Buf,
    StoreError,
    T,
)
from partlog.store.options import StoreOptions

log = logging.getLogger(__name__)


def open_files(path: str, o: StoreOptions) -> tuple[LmdbEnv, Journal]:
    """The store's LMDB environment and journal in directory ``path``
    (created unless ``readonly``); StoreError if either cannot be opened.
    The environment's ``stats`` start the store's counters for metrics and
    benchmarks (components add to them)."""
    if o.readonly and not os.path.exists(os.path.join(path, "data.mdb")):
        raise StoreError(f"{path}: no metadata store here (data.mdb missing)")
    if not o.readonly:
        os.makedirs(path, exist_ok=True)
    stats = {
        "group_commits": 0,
        "map_resizes": 0,
        "checkpoints": 0,
        "checkpointed_groups": 0,
        "replayed_groups": 0,
        # commits that waited for a checkpoint: the thread fell behind
        "checkpoint_backpressure": 0,
    }
    raw = open_environment(path, map_size_bytes=o.map_size_bytes, readonly=o.readonly, sync=o.sync)
    try:
        journal = Journal(
            os.path.join(path, "journal"), sync=o.sync, segment_bytes=o.journal_segment_bytes, readonly=o.readonly
        )
    except (OSError, ValueError, JournalError) as e:
        raw.close()
        raise StoreError(f"{path}: cannot open the journal: {e}") from e
    return LmdbEnv(raw, path=path, readonly=o.readonly, stats=stats), journal


def open_environment(path: str, *, map_size_bytes: int, readonly: bool, sync: bool) -> lmdb.Environment:
    """Open (creating unless ``readonly``) the LMDB environment in ``path``;
    StoreError if LMDB refuses.  :class:`LmdbEnv` then opens its databases."""
    try:
        env: lmdb.Environment = lmdb.open(
            path,
            map_size=map_size_bytes,
            max_dbs=16,
            readonly=readonly,
            sync=sync,
            metasync=sync,
            writemap=False,
            # Appends touch one tail page per partition, scattered over the
            # file: OS readahead would only fill RSS with pages nobody reads.
            readahead=False,
            max_readers=256,
        )
    except lmdb.Error as e:
        raise StoreError(f"{path}: cannot open LMDB environment: {e}") from e
    return env


class LmdbEnv:
    """The LMDB environment of one store (see the module doc).

    The named databases are attributes (``meta``, ``topics``, ``tp``,
    ``parts``, ``log``, ``producers``, ``epochs``, ``files``, ``file_ids``,
    ``txns``, ``aborted``, ``segments``:
    :mod:`partlog.store.layout`); each component of the store uses its own.
    ``stats["map_resizes"]`` counts doublings of the map."""

    def __init__(self, env: lmdb.Environment, *, path: str, readonly: bool, stats: dict[str, int]) -> None:
        self._env = env
        self.path = path
        self.readonly = readonly
        self.stats = stats
        dbs = []
        try:
            for name in DB_NAMES:
                dbs.append(env.open_db(name, create=not readonly))
        except lmdb.Error as e:
            # A read-only open of an LMDB environment that is not a partlog
            # store has no such named databases (lmdb.NotFoundError); one
            # last written before transactions lacks only the newest ones,
            # which its writer creates at its next open.
            env.close()
            if dbs and DB_NAMES[len(dbs)] in NEWER_DB_NAMES:
                raise StoreError(
                    f"{path}: written by an older partlog (no {DB_NAMES[len(dbs)].decode()!r} database); "
                    "open it read-write once (its broker's next start does) before reading it read-only"
                ) from e
            raise StoreError(f"{path}: not a partlog metadata store: {e}") from e
        (
            self.meta,
            self.topics,
            self.tp,
            self.parts,
            self.log,
            self.producers,
            self.epochs,
            self.files,
            self.file_ids,
            self.txns,
            self.aborted,
            self.segments,
        ) = dbs
        self.gate = LmdbGate(lambda: StoreError(f"{self.path}: store is closed"))

    def close(self, *, sync: bool = False) -> None:
        """Close LMDB (``sync``: fsynced first, as ``sync=False`` writes are
        not); the caller closed the gate first (no transaction left)."""
        if sync:
            self._env.sync(True)
        self._env.close()

    # ------------------------------------------------------------ reads

    def snapshot(self) -> lmdb.Transaction:
        """A read transaction; the caller entered the gate (``gate.enter_read``)."""
        try:
            return self._env.begin(write=False)
        except lmdb.MapResizedError:
            # Another process grew the map: adopt its size.
            self._env.set_mapsize(0)
            return self._env.begin(write=False)

    @contextmanager
    def read(self) -> Iterator[lmdb.Transaction]:
        """A read transaction of LMDB alone (no journal overlay), inside the gate."""
        self.gate.enter_read()
        try:
            txn = self.snapshot()
        except BaseException:
            self.gate.exit_read()
            raise
        try:
            yield txn
        finally:
            txn.abort()
            self.gate.exit_read()

    def get_meta(self, key: bytes) -> Buf | None:
        """One value of ``meta``, outside the gate (the caller holds it or
        the store is opening)."""
        txn = self._env.begin(write=False)
        try:
            value: Buf | None = txn.get(key, db=self.meta)
        finally:
            txn.abort()
        return value

    # ------------------------------------------------------------ writes

    def write(self, fn: Callable[[lmdb.Transaction], T]) -> T:
        """``fn`` in one committed write transaction; a full map is grown
        and ``fn`` run again in a new one (so ``fn`` must only stage what it
        changes outside LMDB).  If ``fn`` raises, nothing is written."""
        while True:
            txn = self._env.begin(write=True)
            try:
                result = fn(txn)
                txn.commit()
            except lmdb.MapFullError:
                self._abort(txn)
                self.grow_map()
                continue
            except BaseException:
                self._abort(txn)
                raise
            return result

    def _abort(self, txn: lmdb.Transaction) -> None:
        # py-lmdb >= 2.0 aborts only with no reader in this process (lmdb_gate).
        with self.gate.readers_drained():
            txn.abort()

    def grow_map(self) -> None:
        """Double the LMDB map; waits until this process has no open readers."""
        with self.gate.readers_drained():
            size = self._env.info()["map_size"]
            if size * 2 > MAP_SIZE_BYTES_MAX:
                raise StoreError(f"{self.path}: LMDB map would exceed {MAP_SIZE_BYTES_MAX} bytes")
            self._env.set_mapsize(size * 2)
            self.stats["map_resizes"] += 1
            log.info("lmdb map grown path=%s map_size_bytes=%d", self.path, size * 2)

    def check_version(self) -> None:
        """Refuse a store of a format this code cannot read; mark a new or
        older one with :data:`FORMAT_VERSION` (unless ``readonly``)."""
        with self.read() as txn:
            raw = txn.get(b"version", db=self.meta)
        if raw is None:
            if self.readonly:
                raise StoreError(f"{self.path}: not initialised as a partlog metadata store")
            with self._env.begin(write=True) as txn:
                txn.put(b"version", U64.pack(FORMAT_VERSION), db=self.meta)
        else:
            version = U64.unpack(raw)[0]
            if version not in FORMAT_VERSIONS_READABLE:
                raise StoreError(
                    f"{self.path}: store format {version}, this code reads formats {FORMAT_VERSIONS_READABLE}"
                )
            if version != FORMAT_VERSION and not self.readonly:
                # Older formats are valid newer ones (layout.FORMAT_VERSION):
                # the number changes so that older code refuses the store.
                with self._env.begin(write=True) as txn:
                    txn.put(b"version", U64.pack(FORMAT_VERSION), db=self.meta)

    # ------------------------------------------------------------ whole environment

    def info(self) -> dict[str, Any]:
        """LMDB's ``Environment.info()`` (``map_size`` and the like)."""
        return dict(self._env.info())

    def copy(self, directory: str) -> None:
        """LMDB's consistent copy of the environment into ``directory``."""
        self._env.copy(directory)


def last_under(cur: lmdb.Cursor, prefix: bytes) -> bool:
    """Position ``cur`` on the last key before the first key above every key
    starting with ``prefix``; the caller checks that key's prefix.  False if
    there is no such key."""
    # Every key under the prefix is shorter than this bound and sorts below it.
    if cur.set_range(prefix + b"\xff" * 16):
        return bool(cur.prev())
    return bool(cur.last())


def delete_prefix(txn: lmdb.Transaction, db: Any, prefix: bytes) -> None:
    """Delete every key of ``db`` that starts with ``prefix``."""
    cur = txn.cursor(db=db)
    if cur.set_range(prefix):
        while cur.key()[: len(prefix)] == prefix:
            if not cur.delete():
                break
