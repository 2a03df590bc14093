"""walmgr's registry: what it knows about every WAL object, in one LMDB
environment (``sync=True``: every returned write is on disk).

Named databases:

=========  ===========================  =======================================
db         key                          value
=========  ===========================  =======================================
objects    object key (UTF-8)           msgpack of ``ObjectRecord.to_doc()``
by_state   state (UTF-8), dupsort       object key: ``records(states)`` reads
                                        only the records in those states
tombs      deleted_ms (u64), dupsort    object key of a DELETED or GONE record:
                                        purging reads only what expires
plan       object key                   planned_ms (u64): the delete plan
shards     shard ("00".."ff")           the last key an incremental scan listed
meta       name                         msgpack: format version, per-state
                                        counts, counters, scan times
=========  ===========================  =======================================

Every write goes through one function (``_Write.replace``) that keeps
``by_state``, ``tombs``, ``plan`` and the per-state counts in step with
``objects`` in the same transaction; :meth:`Registry.check` recomputes them.
The invariant that matters for deletion: the ``plan`` db holds exactly the
keys of PLANNED records, and a record becomes PLANNED only through
:meth:`Registry.plan`, which persists the plan before it returns.

One process writes: ``path/LOCK`` is held with ``flock`` while a writable
registry is open.  ``Registry(path, readonly=True)`` takes no lock, so
``walmgr status`` works beside the daemon.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import struct
import threading
import uuid
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from typing import Any, TypeVar

import lmdb
import msgpack

from partlog.controller.cluster_meta import check_same_cluster
from partlog.lmdb_gate import LmdbGate
from partlog.wal.key import OBJECT_KEY_BYTES_MAX, SegmentKeyError, WalKeyError, parse_segment_key, parse_wal_key
from walmgr.model import ObjectRecord, State

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
# The map is address space, not disk; it doubles when full (MapFullError
# never reaches a caller), as partlog.store's.  A record is ~150-300 bytes,
# so 1 GiB holds a few million before the first growth.
MAP_SIZE_BYTES_DEFAULT = 1 << 30
MAP_SIZE_BYTES_MAX = 1 << 40
# Below this, creating the named databases alone fills the map.
MAP_SIZE_BYTES_MIN = 1 << 16
# records() reads this many records per read transaction and then lets go:
# a caller may take minutes over the stream (leader checks), and a long-lived
# read transaction would pin every page written meanwhile and block map growth.
RECORDS_PER_READ_TXN = 1000
# Tombstones purged per write transaction: bounds one transaction's size.
PURGE_PER_TXN = 10_000
LOCK_FILE = "LOCK"
# States whose records carry deleted_ms and expire after the retention.
TOMBSTONE_STATES = frozenset({State.DELETED, State.GONE})
# States a full scan may mark GONE when the object is no longer listed.
LIVE_STATES = frozenset({State.TRACKED, State.CANDIDATE, State.PLANNED})
# States Registry.plan moves to PLANNED, and unplan's targets.
PLANNABLE_STATES = frozenset({State.TRACKED, State.CANDIDATE})
UNPLAN_STATES = frozenset({State.CANDIDATE, State.TRACKED, State.INVALID})

_DB_NAMES = (b"objects", b"by_state", b"tombs", b"plan", b"shards", b"meta")
_DUPSORT = frozenset({b"by_state", b"tombs"})
_U64 = struct.Struct(">Q")
_COUNT_PREFIX = "count."
# Meta names the registry maintains itself; meta_set refuses them.
COUNTER_DELETED_FILES = "deleted_files"
COUNTER_DELETED_BYTES = "deleted_bytes"
_META_VERSION = "format_version"
# The cluster this registry belongs to (bind_cluster), as its UUID string.
_META_CLUSTER = "cluster_id"
_RESERVED_META = frozenset({_META_VERSION, COUNTER_DELETED_FILES, COUNTER_DELETED_BYTES, _META_CLUSTER})

T = TypeVar("T")


class RegistryError(Exception):
    """The registry cannot be opened or used (the message names the directory):
    a configuration error (exit status 2 in the CLI) unless a subclass says
    otherwise."""

    exit_status = 2


class RegistryLockedError(RegistryError):
    """Another walmgr (this process or another) has the registry open for writing."""


class RegistryCorruptError(RegistryError):
    """A stored record or index entry does not decode; ``key`` names it."""

    exit_status = 1

    def __init__(self, message: str, *, key: str) -> None:
        super().__init__(message)
        self.key = key


def _key_bytes(key: str) -> bytes:
    raw = key.encode("utf-8")
    if not raw or len(raw) > OBJECT_KEY_BYTES_MAX:
        # LMDB's key limit; such keys are never WAL keys (wal_key refuses them).
        raise ValueError(f"object key {key[:80]!r} is empty or over {OBJECT_KEY_BYTES_MAX} bytes: not recordable")
    return raw


def _recordable(key: str) -> bool:
    return 0 < len(key.encode("utf-8")) <= OBJECT_KEY_BYTES_MAX


def _take_lock(directory: str) -> int:
    """The registry's exclusive lock, as an open fd (closing it releases it).

    ``flock`` locks belong to the open file description, so a second open in
    this same process conflicts too: two Registry objects on one directory
    would otherwise both write, and LMDB forbids opening one environment
    twice in a process.
    """
    lock_path = os.path.join(directory, LOCK_FILE)
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        os.close(fd)
        by = f" (pid {holder})" if holder.isdigit() else ""
        raise RegistryLockedError(
            f"registry {directory}: another walmgr holds {lock_path}{by}; stop it, or open the registry read-only"
        ) from None
    except BaseException:
        os.close(fd)
        raise
    # For the message above only: the flock is the lock, not this content.
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


class Registry:
    """The registry in directory ``path`` (created unless ``readonly``).

    Thread-safe: writes are serialised, reads run beside them.  Raises
    :class:`RegistryLockedError` when another writable registry is open on
    ``path``, :class:`RegistryError` when ``path`` is not a registry.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        readonly: bool = False,
        map_size_bytes: int = MAP_SIZE_BYTES_DEFAULT,
        sync: bool = True,
    ) -> None:
        if not MAP_SIZE_BYTES_MIN <= map_size_bytes <= MAP_SIZE_BYTES_MAX:
            raise ValueError(
                f"map_size_bytes must be in [{MAP_SIZE_BYTES_MIN}, {MAP_SIZE_BYTES_MAX}], got {map_size_bytes}"
            )
        self.path = os.path.abspath(os.fspath(path))
        self.readonly = readonly
        self._lock_fd: int | None = None
        if readonly:
            if not os.path.exists(os.path.join(self.path, "data.mdb")):
                raise RegistryError(f"registry {self.path}: no walmgr registry here (data.mdb missing)")
        else:
            try:
                os.makedirs(self.path, exist_ok=True)
            except OSError as e:
                raise RegistryError(f"registry {self.path}: cannot create the directory: {e.strerror or e}") from e
            self._lock_fd = _take_lock(self.path)
        try:
            self._env = lmdb.open(
                self.path,
                map_size=map_size_bytes,
                max_dbs=len(_DB_NAMES),
                readonly=readonly,
                sync=sync,
                metasync=sync,
                # Lookups are by key, scattered over the file.
                readahead=False,
            )
        except lmdb.Error as e:
            self._unlock()
            raise RegistryError(f"registry {self.path}: cannot open LMDB environment: {e}") from e
        try:
            dbs = {name: self._env.open_db(name, create=not readonly, dupsort=name in _DUPSORT) for name in _DB_NAMES}
        except lmdb.Error as e:
            self._env.close()
            self._unlock()
            raise RegistryError(f"registry {self.path}: not a walmgr registry: {e}") from e
        self._objects = dbs[b"objects"]
        self._by_state = dbs[b"by_state"]
        self._tombs = dbs[b"tombs"]
        self._plan = dbs[b"plan"]
        self._shards = dbs[b"shards"]
        self._meta = dbs[b"meta"]
        # Map growth, aborts and close need no live transaction (lmdb_gate).
        self._gate = LmdbGate(lambda: RegistryError(f"registry {self.path}: closed"))
        self._write_lock = threading.Lock()
        self.map_resizes = 0
        try:
            self._check_version()
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ life

    def close(self) -> None:
        """Close once the operations in flight in other threads have ended."""
        if self._gate.close():
            self._env.close()
            self._unlock()

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def __enter__(self) -> Registry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_version(self) -> None:
        version = self.meta_get(_META_VERSION)
        if version is None:
            if self.readonly:
                raise RegistryError(f"registry {self.path}: not initialised as a walmgr registry")
            self._write(lambda w: w.meta_put(_META_VERSION, FORMAT_VERSION))
        elif version != FORMAT_VERSION:
            raise RegistryError(f"registry {self.path}: format {version!r}, this code reads {FORMAT_VERSION}")

    # ------------------------------------------------------------- plumbing

    @contextlib.contextmanager
    def _read(self) -> Iterator[lmdb.Transaction]:
        self._gate.enter_read()
        try:
            try:
                txn = self._env.begin(write=False)
            except lmdb.MapResizedError:
                # The writing process grew the map: adopt its size.
                self._env.set_mapsize(0)
                txn = self._env.begin(write=False)
            try:
                yield txn
            finally:
                txn.abort()
        finally:
            self._gate.exit_read()

    def _write(self, fn: Callable[[_Write], T]) -> T:
        """Run ``fn`` in one write transaction; all or nothing.  A full map
        is doubled and ``fn`` run again."""
        if self.readonly:
            raise RegistryError(f"registry {self.path}: open read-only")
        with self._write_lock, self._gate.writing():
            while True:
                txn = self._env.begin(write=True)
                try:
                    w = _Write(self, txn)
                    result = fn(w)
                    w.flush_counts()
                    txn.commit()
                    return result
                except lmdb.MapFullError:
                    self._abort(txn)
                    self._grow_map()
                except BaseException:
                    self._abort(txn)
                    raise

    def _abort(self, txn: lmdb.Transaction) -> None:
        with self._gate.readers_drained():
            txn.abort()

    def _grow_map(self) -> None:
        with self._gate.readers_drained():
            size = int(self._env.info()["map_size"])
            if size * 2 > MAP_SIZE_BYTES_MAX:
                raise RegistryError(f"registry {self.path}: LMDB map would exceed {MAP_SIZE_BYTES_MAX} bytes")
            self._env.set_mapsize(size * 2)
            self.map_resizes += 1
            log.info("registry map grown path=%s map_size_bytes=%d", self.path, size * 2)

    def _decode(self, key: str, raw: bytes) -> ObjectRecord:
        try:
            doc = msgpack.unpackb(raw, raw=False)
            if not isinstance(doc, dict):
                raise TypeError(f"a {type(doc).__name__}, not a map")
            return ObjectRecord.from_doc(key, doc)
        except Exception as e:  # msgpack, KeyError, ValueError, TypeError...
            raise RegistryCorruptError(
                f"registry {self.path}: record of object {key!r} is corrupt: {type(e).__name__}: {e}", key=key
            ) from e

    def _get(self, txn: lmdb.Transaction, key: str) -> ObjectRecord | None:
        raw = txn.get(_key_bytes(key), db=self._objects)
        return None if raw is None else self._decode(key, bytes(raw))

    # ------------------------------------------------------------- reading

    def get(self, key: str) -> ObjectRecord | None:
        with self._read() as txn:
            return self._get(txn, key)

    def known(self, keys: Iterable[str]) -> set[str]:
        """Which of ``keys`` have a record (in any state); a key too long to
        record is never known."""
        with self._read() as txn:
            return {k for k in keys if _recordable(k) and txn.get(k.encode("utf-8"), db=self._objects) is not None}

    def records(self, states: Collection[State] | None = None, *, key_prefix: str = "") -> Iterator[ObjectRecord]:
        """Records in ``states`` (all when None) whose keys start with
        ``key_prefix``, by state and then key.

        Streamed in read transactions of ``RECORDS_PER_READ_TXN`` records, so
        the registry may change between them: a record that changes state
        meanwhile may be seen in either state, or twice, or not at all;
        one that does not change is seen exactly once.
        """
        start = key_prefix.encode("utf-8")
        if states is None:
            yield from self._stream(None, start)
        else:
            for state in sorted(set(states), key=lambda s: s.value):
                yield from self._stream(state, start)

    def _stream(self, state: State | None, prefix: bytes) -> Iterator[ObjectRecord]:
        after: bytes | None = None
        while True:
            chunk: list[ObjectRecord] = []
            with self._read() as txn:
                # Position at the first key >= seek, then skip `after` itself
                # (seeking to after + b"\0" could exceed LMDB's 511 bytes).
                seek = prefix if after is None else after
                if state is None:
                    cur = txn.cursor(db=self._objects)
                    found = cur.set_range(seek) if seek else cur.first()
                    if found and after is not None and cur.key() == after:
                        found = cur.next()
                    while found and len(chunk) < RECORDS_PER_READ_TXN:
                        raw_key = bytes(cur.key())
                        if not raw_key.startswith(prefix):
                            break
                        chunk.append(self._decode(raw_key.decode("utf-8", "replace"), bytes(cur.value())))
                        found = cur.next()
                else:
                    cur = txn.cursor(db=self._by_state)
                    sb = state.value.encode()
                    found = cur.set_range_dup(sb, seek) if seek else cur.set_key(sb)
                    if found and after is not None and cur.value() == after:
                        found = cur.next_dup()
                    while found and len(chunk) < RECORDS_PER_READ_TXN:
                        raw_key = bytes(cur.value())
                        if not raw_key.startswith(prefix):
                            break
                        key = raw_key.decode("utf-8", "replace")
                        rec = self._get(txn, key)
                        if rec is None or rec.state != state:
                            raise RegistryCorruptError(
                                f"registry {self.path}: state index lists {key!r} as {state.value}, "
                                f"the record is {'missing' if rec is None else rec.state.value}",
                                key=key,
                            )
                        chunk.append(rec)
                        found = cur.next_dup()
            yield from chunk
            if len(chunk) < RECORDS_PER_READ_TXN:
                return
            after = chunk[-1].key.encode("utf-8")

    def counts(self) -> dict[State, tuple[int, int]]:
        """State -> (files, bytes), kept by every write: O(1)."""
        with self._read() as txn:
            out = {}
            for state in State:
                raw = txn.get(f"{_COUNT_PREFIX}{state.value}".encode(), db=self._meta)
                files, size = msgpack.unpackb(raw) if raw is not None else (0, 0)
                out[state] = (int(files), int(size))
            return out

    def shard_position(self, shard: str) -> str:
        """The last key the incremental scan listed in ``shard`` ("" if none)."""
        with self._read() as txn:
            raw = txn.get(shard.encode(), db=self._shards)
            return "" if raw is None else bytes(raw).decode("utf-8")

    def used_bytes(self) -> int:
        """Bytes of the LMDB file in use (its last page, not the sparse map)."""
        info, stat = self._env.info(), self._env.stat()
        return (int(info["last_pgno"]) + 1) * int(stat["psize"])

    def shard_positions(self) -> dict[str, str]:
        with self._read() as txn:
            return {bytes(k).decode(): bytes(v).decode("utf-8") for k, v in txn.cursor(db=self._shards)}

    def planned(self, limit: int) -> list[ObjectRecord]:
        """Up to ``limit`` records of the persisted delete plan, by key."""
        if limit <= 0:
            raise ValueError(f"limit must be > 0, got {limit}")
        out: list[ObjectRecord] = []
        with self._read() as txn:
            for raw_key in txn.cursor(db=self._plan).iternext(keys=True, values=False):
                key = bytes(raw_key).decode("utf-8", "replace")
                rec = self._get(txn, key)
                if rec is None or rec.state != State.PLANNED:
                    raise RegistryCorruptError(
                        f"registry {self.path}: delete plan holds {key!r}, whose record is "
                        f"{'missing' if rec is None else rec.state.value}",
                        key=key,
                    )
                out.append(rec)
                if len(out) == limit:
                    break
        return out

    def meta_get(self, name: str, default: Any = None) -> Any:
        with self._read() as txn:
            raw = txn.get(name.encode(), db=self._meta)
            return default if raw is None else msgpack.unpackb(raw, raw=False)

    # ------------------------------------------------------------- writing

    def put_many(self, records: Iterable[ObjectRecord], *, shard_positions: Mapping[str, str] | None = None) -> None:
        """Write ``records`` (replacing any stored ones) and, in the same
        transaction, ``shard_positions``.  PLANNED is refused: only
        :meth:`plan` makes a record planned."""
        recs = list(records)

        def fn(w: _Write) -> None:
            for rec in recs:
                w.replace(w.get(rec.key), rec)
            w.set_positions(shard_positions or {})

        self._write(fn)

    def put_new(
        self, records: Iterable[ObjectRecord], *, shard_positions: Mapping[str, str] | None = None
    ) -> list[ObjectRecord]:
        """Write the records whose keys have no record yet (checked inside the
        transaction, so a concurrent notification is never overwritten), and
        ``shard_positions``; returns the records written."""
        recs = list(records)

        def fn(w: _Write) -> list[ObjectRecord]:
            added = []
            for rec in recs:
                if w.get(rec.key) is None:
                    w.replace(None, rec)
                    added.append(rec)
            w.set_positions(shard_positions or {})
            return added

        return self._write(fn)

    def set_shard_positions(self, positions: Mapping[str, str]) -> None:
        self._write(lambda w: w.set_positions(positions))

    def plan(self, records: Iterable[ObjectRecord], now_ms: int | None = None) -> list[ObjectRecord]:
        """Mark ``records`` PLANNED and add them to the delete plan, in one
        transaction: the plan is on disk before anything is deleted.

        The caller's records (with its last_checked_ms and note) are written
        for the keys whose stored record is still TRACKED or CANDIDATE; the
        rest (already planned, or marked GONE by a full scan meanwhile) are
        skipped.  Returns the records planned.  ``now_ms`` (default: each
        record's last_checked_ms) is stored as the planning time.  Planning a
        key that is neither a WAL key nor a segment key, or an INVALID record,
        is a bug: ValueError.
        """
        recs = list(records)
        for rec in recs:
            try:
                parse_wal_key(rec.key)
            except WalKeyError as e:
                try:
                    parse_segment_key(rec.key)
                except SegmentKeyError:
                    raise ValueError(
                        f"refusing to plan the deletion of a non-WAL key that is no segment key either: {e}"
                    ) from e

        def fn(w: _Write) -> list[ObjectRecord]:
            out = []
            for rec in recs:
                old = w.get(rec.key)
                if old is not None and old.state == State.INVALID:
                    raise ValueError(f"refusing to plan the deletion of INVALID object {rec.key!r}: {old.note}")
                if old is None or old.state not in PLANNABLE_STATES:
                    log.info("not planned key=%s state=%s", rec.key, "missing" if old is None else old.state.value)
                    continue
                new = rec.with_state(State.PLANNED)
                w.replace(old, new, planned_ms=max(0, rec.last_checked_ms if now_ms is None else now_ms))
                out.append(new)
            return out

        return self._write(fn)

    def unplan(self, keys: Iterable[str], note: str, *, state: State = State.CANDIDATE) -> int:
        """PLANNED -> ``state`` (CANDIDATE, TRACKED or INVALID), out of the
        plan, with ``note`` saying why; records in other states are left
        alone.  Returns how many changed."""
        if state not in UNPLAN_STATES:
            raise ValueError(f"unplan to {state.value}: must be one of {sorted(s.value for s in UNPLAN_STATES)}")
        return self._transition(keys, lambda old: old.with_state(state, note=note), {State.PLANNED})

    def record_deleted(self, keys: Iterable[str], now_ms: int) -> int:
        """The store confirmed deleting ``keys``: DELETED with ``deleted_ms``,
        out of the plan, deleted_files/deleted_bytes counted; one transaction.

        Keys already DELETED are skipped.  A key that was not PLANNED (or
        GONE: a full scan saw it vanish between plan and delete) should never
        have been deleted: it is recorded anyway, since it is gone, and
        logged as an error.
        """
        key_list = list(keys)

        def fn(w: _Write) -> int:
            files = size = 0
            for key in key_list:
                old = w.get(key)
                if old is None:
                    log.error("deleted an object walmgr has no record of key=%s", key)
                    continue
                if old.state == State.DELETED:
                    continue
                if old.state not in (State.PLANNED, State.GONE):
                    log.error("deleted an object that was not planned key=%s state=%s", key, old.state.value)
                w.replace(old, old.with_state(State.DELETED, deleted_ms=now_ms))
                files += 1
                size += old.size
            w.meta_add(COUNTER_DELETED_FILES, files)
            w.meta_add(COUNTER_DELETED_BYTES, size)
            return files

        return self._write(fn)

    def mark_gone(self, keys: Iterable[str], now_ms: int, *, created_before_ms: int) -> list[str]:
        """A full scan no longer lists ``keys``: those still TRACKED,
        CANDIDATE or PLANNED and created before ``created_before_ms`` become
        GONE (deleted_ms = ``now_ms``, when it was noticed).  Rechecked inside
        the transaction; returns the keys marked."""
        key_list = list(keys)

        def fn(w: _Write) -> list[str]:
            marked = []
            for key in key_list:
                old = w.get(key)
                if old is None or old.state not in LIVE_STATES or old.created_ms >= created_before_ms:
                    continue
                w.replace(old, old.with_state(State.GONE, note="no longer listed by a full scan", deleted_ms=now_ms))
                marked.append(key)
            return marked

        return self._write(fn)

    def revive(self, keys: Iterable[str], note: str = "listed again after a full scan had missed it") -> list[str]:
        """A full scan lists ``keys`` again: those still GONE become TRACKED
        (deleted_ms cleared); rechecked inside the transaction, so a record
        that changed meanwhile is left alone.  Returns the keys revived."""
        key_list = list(keys)

        def fn(w: _Write) -> list[str]:
            revived = []
            for key in key_list:
                old = w.get(key)
                if old is None or old.state != State.GONE:
                    continue
                w.replace(old, old.with_state(State.TRACKED, note=note, deleted_ms=-1))
                revived.append(key)
            return revived

        return self._write(fn)

    def _transition(
        self, keys: Iterable[str], change: Callable[[ObjectRecord], ObjectRecord], states: Collection[State]
    ) -> int:
        key_list = list(keys)

        def fn(w: _Write) -> int:
            n = 0
            for key in key_list:
                old = w.get(key)
                if old is None or old.state not in states:
                    continue
                w.replace(old, change(old))
                n += 1
            return n

        return self._write(fn)

    def purge_tombstones(self, now_ms: int, retention_ms: int) -> int:
        """Drop DELETED and GONE records whose deleted_ms is more than
        ``retention_ms`` before ``now_ms``; returns how many."""
        if retention_ms < 0:
            raise ValueError(f"retention_ms must be >= 0, got {retention_ms}")
        cutoff = now_ms - retention_ms
        total = 0

        def fn(w: _Write) -> int:
            expired: list[str] = []
            for raw_ms, raw_key in w.txn.cursor(db=self._tombs):
                if _U64.unpack(raw_ms)[0] >= cutoff or len(expired) == PURGE_PER_TXN:
                    break
                expired.append(bytes(raw_key).decode("utf-8"))
            for key in expired:
                old = w.get(key)
                if old is None or old.state not in TOMBSTONE_STATES:
                    raise RegistryCorruptError(
                        f"registry {self.path}: tombstone index lists {key!r}, whose record is "
                        f"{'missing' if old is None else old.state.value}",
                        key=key,
                    )
                w.replace(old, None)
            return len(expired)

        while True:
            n = self._write(fn)
            total += n
            if n < PURGE_PER_TXN:
                return total

    @property
    def cluster_id(self) -> uuid.UUID | None:
        """The cluster this registry is bound to (:meth:`bind_cluster`), or None."""
        raw = self.meta_get(_META_CLUSTER)
        return None if raw is None else uuid.UUID(str(raw))

    def bind_cluster(self, cluster_id: uuid.UUID) -> None:
        """Bind this registry to ``cluster_id`` on first use, or check that it
        is bound to it: :class:`ClusterMismatchError` names both otherwise.
        A registry's records, plan and positions describe one cluster's
        objects; managing another with them is the misconfiguration this
        refuses (design.md, "Deletion safety", step 0)."""
        assert isinstance(cluster_id, uuid.UUID), cluster_id

        def fn(w: _Write) -> None:
            raw = w.txn.get(_META_CLUSTER.encode(), db=self._meta)
            if raw is None:
                w.meta_put(_META_CLUSTER, str(cluster_id))
                return
            bound = uuid.UUID(str(msgpack.unpackb(raw, raw=False)))
            check_same_cluster("the cluster metadata", cluster_id, f"the registry {self.path}", bound)

        self._write(fn)

    def meta_set(self, name: str, value: Any) -> None:
        """Set a meta value (msgpack-able), e.g. last_full_scan_ms.  The
        names the registry maintains itself are refused."""
        if name in _RESERVED_META or name.startswith(_COUNT_PREFIX):
            raise ValueError(f"meta {name!r} is maintained by the registry")
        self._write(lambda w: w.meta_put(name, value))

    # --------------------------------------------------------------- checks

    def check(self) -> list[str]:
        """Recompute the indexes and counts from ``objects`` and compare:
        a list of problems, empty when consistent (tests call it)."""
        problems: list[str] = []
        with self._read() as txn:
            counts: dict[State, list[int]] = {s: [0, 0] for s in State}
            by_state: set[tuple[bytes, bytes]] = set()
            tombs: set[tuple[bytes, bytes]] = set()
            planned: set[bytes] = set()
            for raw_key, raw in txn.cursor(db=self._objects):
                rec = self._decode(bytes(raw_key).decode("utf-8", "replace"), bytes(raw))
                counts[rec.state][0] += 1
                counts[rec.state][1] += rec.size
                by_state.add((rec.state.value.encode(), bytes(raw_key)))
                if rec.state in TOMBSTONE_STATES:
                    tombs.add((_U64.pack(rec.deleted_ms), bytes(raw_key)))
                if rec.state == State.PLANNED:
                    planned.add(bytes(raw_key))
            if {(bytes(k), bytes(v)) for k, v in txn.cursor(db=self._by_state)} != by_state:
                problems.append("state index differs from the records")
            if {(bytes(k), bytes(v)) for k, v in txn.cursor(db=self._tombs)} != tombs:
                problems.append("tombstone index differs from the records")
            if {bytes(k) for k in txn.cursor(db=self._plan).iternext(values=False)} != planned:
                problems.append("delete plan differs from the PLANNED records")
        stored = self.counts()
        for state in State:
            if stored[state] != tuple(counts[state]):
                problems.append(f"count of {state.value} is {stored[state]}, records say {tuple(counts[state])}")
        return problems


class _Write:
    """One write transaction: every record change goes through
    :meth:`replace`, which keeps the indexes and counts in step."""

    def __init__(self, reg: Registry, txn: lmdb.Transaction) -> None:
        self.reg = reg
        self.txn = txn
        self._deltas: dict[State, list[int]] = {}

    def get(self, key: str) -> ObjectRecord | None:
        return self.reg._get(self.txn, key)

    def replace(self, old: ObjectRecord | None, new: ObjectRecord | None, *, planned_ms: int | None = None) -> None:
        """``old`` (as stored, or None) becomes ``new`` (None: removed)."""
        reg, txn = self.reg, self.txn
        key = new.key if new is not None else old.key if old is not None else ""
        kb = _key_bytes(key)
        assert old is None or old.key == key
        if new is not None and new.state == State.PLANNED and (old is None or old.state != State.PLANNED):
            if planned_ms is None:
                raise ValueError(f"{key!r}: only Registry.plan makes a record PLANNED")
            txn.put(kb, _U64.pack(planned_ms), db=reg._plan)
        if old is not None:
            txn.delete(old.state.value.encode(), kb, db=reg._by_state)
            if old.state in TOMBSTONE_STATES:
                txn.delete(_U64.pack(old.deleted_ms), kb, db=reg._tombs)
            if old.state == State.PLANNED and (new is None or new.state != State.PLANNED):
                txn.delete(kb, db=reg._plan)
            self._count(old.state, -1, -old.size)
        if new is None:
            txn.delete(kb, db=reg._objects)
            return
        if new.state in TOMBSTONE_STATES and new.deleted_ms < 0:
            raise ValueError(f"{key!r}: a {new.state.value} record needs deleted_ms")
        txn.put(kb, msgpack.packb(new.to_doc(), use_bin_type=True), db=reg._objects)
        txn.put(new.state.value.encode(), kb, db=reg._by_state)
        if new.state in TOMBSTONE_STATES:
            txn.put(_U64.pack(new.deleted_ms), kb, db=reg._tombs)
        self._count(new.state, 1, new.size)

    def _count(self, state: State, files: int, size: int) -> None:
        d = self._deltas.setdefault(state, [0, 0])
        d[0] += files
        d[1] += size

    def flush_counts(self) -> None:
        for state, (files, size) in self._deltas.items():
            name = f"{_COUNT_PREFIX}{state.value}".encode()
            raw = self.txn.get(name, db=self.reg._meta)
            old_files, old_size = msgpack.unpackb(raw) if raw is not None else (0, 0)
            new_files, new_size = old_files + files, old_size + size
            # A negative count means a write bypassed replace(): a bug.
            assert new_files >= 0 and new_size >= 0, (state, new_files, new_size)
            self.txn.put(name, msgpack.packb([new_files, new_size]), db=self.reg._meta)
        self._deltas.clear()

    def set_positions(self, positions: Mapping[str, str]) -> None:
        for shard, key in positions.items():
            self.txn.put(shard.encode(), _key_bytes(key), db=self.reg._shards)

    def meta_put(self, name: str, value: Any) -> None:
        self.txn.put(name.encode(), msgpack.packb(value, use_bin_type=True), db=self.reg._meta)

    def meta_add(self, name: str, amount: int) -> None:
        raw = self.txn.get(name.encode(), db=self.reg._meta)
        self.meta_put(name, (0 if raw is None else int(msgpack.unpackb(raw))) + amount)
