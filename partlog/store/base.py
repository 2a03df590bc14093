"""The store's foundation: opening and closing the LMDB environment, read and
write transactions (exclusive writes, map growth), the in-memory caches and
the staging of one write's changes until they are known to stand.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Self

import lmdb
import msgpack

from partlog.kafka.producer_state import (
    PRODUCER_ID_EXPIRATION_MS_DEFAULT,
    ProducerEntry,
)
from partlog.kafka.records import (
    TopicIdPartition,
)
from partlog.kafka.topic_config import TopicConfig
from partlog.lmdb_gate import LmdbGate
from partlog.store.group_commit import GroupCommitPipeline, PipelineFailedError, Write
from partlog.store.journal import JOURNAL_SEGMENT_BYTES_DEFAULT, Journal, JournalError
from partlog.store.layout import (
    CHECKPOINT_BACKLOG_GROUPS_MAX_DEFAULT,
    CHECKPOINT_GROUPS_MAX_DEFAULT,
    CHECKPOINT_INTERVAL_MS_DEFAULT,
    COMMIT_DEADLINE_MS_DEFAULT,
    DB_NAMES,
    FORMAT_VERSION,
    FORMAT_VERSIONS_READABLE,
    GROUP_COMMIT_BATCHES_MAX,
    KEY_CLUSTER_ID,
    KEY_JOURNAL_APPLIED,
    MAP_SIZE_BYTES_DEFAULT,
    MAP_SIZE_BYTES_MAX,
    MAP_SIZE_BYTES_MIN,
    PRODUCER_KEY,
    U32,
    U64,
    CommitGroup,
    Part,
    StoreError,
    StoreInconsistentError,
    T,
    Topic,
)
from partlog.store.view import ReadView, Txn, overlay_part

# One logger for the whole store: operators filter on partlog.store.
log = logging.getLogger("partlog.store")


class Staged:
    """The changes one write makes, kept aside until they are known to stand.

    Exclusive writes (``txn`` given) stage partition, topic, producer and
    counter changes here and write them in ``flush``; the caches change only
    after the transaction committed.  Sequenced commits (``txn`` None) stage the
    same and also collect their log entries and file-reference deltas; the
    caches change as soon as the write was sequenced without error.
    """

    def __init__(self, store: StoreBase, txn: lmdb.Transaction | None) -> None:
        self.store = store
        self.txn = txn
        self._reader: Txn | None = txn
        self._owns_reader = False
        self.parts: dict[TopicIdPartition, Part | None] = {}
        self.topics: dict[uuid.UUID, Topic | None] = {}
        # Producer states as ProducerEntry.encode() bytes (None: deleted).
        self.producers: dict[tuple[int, int], bytes | None] = {}
        self.counters: dict[bytes, int] = {}
        # Sequenced commits only: log puts per part_id and file deltas
        # [file_id, batches, bytes, uploader, size].
        self.by_part: dict[int, list[bytes]] = {}
        self.files: dict[str, list[int]] = {}
        # In-memory high watermarks to install after commit: tp -> (value,
        # lowers).  A raise never undoes a concurrent set_high_watermark; only
        # truncation and reset may lower the value.
        self.hwms: dict[TopicIdPartition, tuple[int, bool]] = {}

    @property
    def wtxn(self) -> lmdb.Transaction:
        """The write transaction of an exclusive write."""
        assert self.txn is not None, "not an exclusive write"
        return self.txn

    def reader(self) -> Txn:
        """A transaction to read committed state (opened on first use)."""
        if self._reader is None:
            self._reader = self.store._begin_read()
            self._owns_reader = True
        return self._reader

    def close(self) -> None:
        if self._owns_reader and isinstance(self._reader, ReadView):
            self.store._end_read(self._reader)
            self._reader = None
            self._owns_reader = False

    def part(self, tp: TopicIdPartition) -> Part | None:
        """The partition, copied into this write on first touch."""
        if tp in self.parts:
            return self.parts[tp]
        cached = self.store._parts.get(tp)
        if cached is None:
            return None
        mine = cached.copy()
        if self.txn is not None:
            # An exclusive write persists the in-memory high watermark for
            # free, and its checks ("never past the HWM") see the same value
            # readers do.  (The pipeline is drained: the cache is durable.)
            mine.high_watermark = self.store._effective_hwm(cached)
        self.parts[tp] = mine
        return mine

    def topic(self, topic_id: uuid.UUID) -> Topic | None:
        if topic_id in self.topics:
            return self.topics[topic_id]
        return self.store._topics.get(topic_id)

    def producer_raw(self, part_id: int, producer_id: int) -> bytes | None:
        """The producer's state, encoded, as this write sees it."""
        key = (part_id, producer_id)
        if key in self.producers:
            return self.producers[key]
        # Every entry written since open is cached, so a cache miss means the
        # committed state is current for this key.  The cache is asked here,
        # before self.reader(), which would open a read transaction.
        cached = self.store._producers.get(key)
        if cached is not None:
            return cached
        return self.store._load_producer_raw(self.reader(), part_id, producer_id)

    def set_producer(self, part_id: int, producer_id: int, entry: ProducerEntry | None) -> None:
        self.producers[(part_id, producer_id)] = None if entry is None else entry.encode()

    def next_id(self, name: bytes) -> int:
        value = self.counters.get(name)
        if value is None:
            value = self.store._next_ids.get(name, 0)
        self.counters[name] = value + 1
        return value

    def flush(self) -> None:
        """Write the staged partition states, producers and counters (exclusive writes)."""
        s = self.store
        txn = self.txn
        assert txn is not None
        for part in self.parts.values():
            if part is not None:
                txn.put(U32.pack(part.part_id), part.pack(), db=s._db_parts)
        for (part_id, pid), raw in self.producers.items():
            key = PRODUCER_KEY.pack(part_id, pid)
            if raw is None:
                txn.delete(key, db=s._db_producers)
            else:
                txn.put(key, raw, db=s._db_producers)
        for name, value in self.counters.items():
            txn.put(name, U64.pack(value), db=s._db_meta)

    def apply_to_caches(self) -> None:
        s = self.store
        for tp, part in self.parts.items():
            if part is None:
                s._parts.pop(tp, None)
                with s._hwm_lock:
                    s._hwms.pop(tp, None)
            else:
                s._parts[tp] = part
        if self.hwms:
            with s._hwm_lock:
                for tp, (value, lowers) in self.hwms.items():
                    current = s._hwms.get(tp)
                    s._hwms[tp] = value if lowers or current is None else max(current, value)
        for tid, topic in self.topics.items():
            if topic is None:
                s._topics.pop(tid, None)
            else:
                s._topics[tid] = topic
        for key, raw in self.producers.items():
            if raw is None:
                s._producers.pop(key, None)
            else:
                s._producers[key] = raw
        s._next_ids.update(self.counters)


class StoreBase:
    """State and plumbing every part of the store shares (see the package doc)."""

    def __init__(
        self,
        env: lmdb.Environment,
        *,
        path: str,
        readonly: bool,
        sync: bool,
        commit_deadline_ms: int,
        producer_id_expiration_ms: int,
        clock: Callable[[], int],
        group_commit_batches_max: int,
        auto_high_watermark: bool = True,
        checkpoint_groups_max: int = CHECKPOINT_GROUPS_MAX_DEFAULT,
        checkpoint_interval_ms: int = CHECKPOINT_INTERVAL_MS_DEFAULT,
        checkpoint_thread: bool = True,
        journal_segment_bytes: int = JOURNAL_SEGMENT_BYTES_DEFAULT,
        checkpoint_backlog_groups_max: int = CHECKPOINT_BACKLOG_GROUPS_MAX_DEFAULT,
    ) -> None:
        self._env = env
        self.path = path
        self.readonly = readonly
        self.sync = sync
        self.auto_high_watermark = auto_high_watermark
        self.commit_deadline_ms = commit_deadline_ms
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.group_commit_batches_max = group_commit_batches_max
        self.checkpoint_groups_max = checkpoint_groups_max
        self.checkpoint_interval_ms = checkpoint_interval_ms
        self.checkpoint_backlog_groups_max = checkpoint_backlog_groups_max
        self._clock = clock
        # The journal and the overlay (checkpoint.py, view.py): groups that
        # are durable in the journal, not yet applied to LMDB, oldest first.
        # Replaced, never mutated, so a reader can hold a snapshot of it.
        self._overlay: tuple[CommitGroup, ...] = ()
        self._overlay_lock = threading.Lock()
        self._overlay_since = 0.0
        # Serialises LMDB write transactions of checkpoints and exclusive writes.
        self._checkpoint_lock = threading.Lock()
        self._checkpoint_wake = threading.Condition()
        self._checkpointer: threading.Thread | None = None
        self._checkpointer_stop = False
        self._followed_seq = 0  # readonly: the last journal seq seen
        try:
            self._journal = Journal(
                os.path.join(path, "journal"), sync=sync, segment_bytes=journal_segment_bytes, readonly=readonly
            )
        except (OSError, ValueError, JournalError) as e:
            env.close()
            raise StoreError(f"{path}: cannot open the journal: {e}") from e
        try:
            dbs = [env.open_db(name, create=not readonly) for name in DB_NAMES]
        except lmdb.Error as e:
            # A read-only open of an LMDB environment that is not a partlog
            # store has no such named databases (lmdb.NotFoundError).
            env.close()
            raise StoreError(f"{path}: not a partlog metadata store: {e}") from e
        (
            self._db_meta,
            self._db_topics,
            self._db_tp,
            self._db_parts,
            self._db_log,
            self._db_producers,
            self._db_epochs,
            self._db_files,
            self._db_file_ids,
        ) = dbs
        self._parts: dict[TopicIdPartition, Part] = {}
        self._topics: dict[uuid.UUID, Topic] = {}
        # Producer states, encoded (ProducerEntry.encode): a fifth of the
        # memory of the tuples, and nothing for the garbage collector to scan.
        self._producers: dict[tuple[int, int], bytes] = {}
        self._next_ids: dict[bytes, int] = {}
        self._closed = False
        self._pipeline: GroupCommitPipeline[CommitGroup] = GroupCommitPipeline(
            prepare=self._sequence_group,
            apply=self._commit_group,
            group_weight_max=group_commit_batches_max,
            name=path,
        )
        # WAL objects referenced by sequenced, not yet committed commits:
        # key -> [file_id, batches].  referenced_files() counts them, so a
        # reference is visible from the moment the deadline check passed.
        self._pending_files: dict[str, list[int]] = {}
        self._pending_lock = threading.Lock()
        # High watermarks the owner set (set_high_watermark) or replication
        # raised, ahead of what is persisted: advancing them must not cost a
        # write transaction per fetch.  Readers take max(persisted, this),
        # capped at their snapshot's log end; the next write of the
        # partition persists it.  Written under _hwm_lock (monotonic raises
        # must not race); read lock-free (one dict lookup).
        self._hwms: dict[TopicIdPartition, int] = {}
        self._hwm_lock = threading.Lock()
        # Map growth needs no live transaction in this process.
        self._gate = LmdbGate(lambda: StoreError(f"{self.path}: store is closed"))
        # Counters for metrics and benchmarks.
        self.stats = {
            "group_commits": 0,
            "map_resizes": 0,
            "checkpoints": 0,
            "checkpointed_groups": 0,
            "replayed_groups": 0,
            # commits that waited for a checkpoint: the thread fell behind
            "checkpoint_backpressure": 0,
        }
        self._open_args: dict[str, Any] | None = None
        self._check_version()
        if readonly:
            # What the journal holds beyond the index; every read follows
            # the live journal of a writer in another process from here.
            self._overlay = self._replayed_overlay()
        else:
            self._recover_journal()
            self._load_caches()
            if checkpoint_thread:
                self._start_checkpointer()

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        sync: bool = True,
        readonly: bool = False,
        commit_deadline_ms: int = COMMIT_DEADLINE_MS_DEFAULT,
        producer_id_expiration_ms: int = PRODUCER_ID_EXPIRATION_MS_DEFAULT,
        clock: Callable[[], int] | None = None,
        map_size_bytes: int = MAP_SIZE_BYTES_DEFAULT,
        group_commit_batches_max: int = GROUP_COMMIT_BATCHES_MAX,
        auto_high_watermark: bool = True,
        cluster_id: uuid.UUID | None = None,
        checkpoint_groups_max: int = CHECKPOINT_GROUPS_MAX_DEFAULT,
        checkpoint_interval_ms: int = CHECKPOINT_INTERVAL_MS_DEFAULT,
        checkpoint_thread: bool = True,
        journal_segment_bytes: int = JOURNAL_SEGMENT_BYTES_DEFAULT,
        checkpoint_backlog_groups_max: int | None = None,
    ) -> Self:
        """Open (creating unless ``readonly``) the store in directory ``path``.

        ``clock`` returns milliseconds since the epoch (default: wall clock).
        With ``sync=True`` every returned write is on disk.  With ``sync=False``
        a process crash loses nothing, but a machine crash or power loss may
        undo the last writes (LMDB's MDB_NOSYNC: the store stays intact only
        on a file system that preserves write order).
        With ``auto_high_watermark=True`` (no replication) a commit moves the
        high watermark to the log end; with False the owner moves it with
        :meth:`set_high_watermark` as its replicas catch up.
        ``cluster_id``: :meth:`bind_cluster` to it (not with ``readonly``).
        A commit is acknowledged once its group's journal record is written
        (and synced with ``sync``); a checkpoint applies durable groups to
        LMDB once ``checkpoint_groups_max`` wait or the oldest waited
        ``checkpoint_interval_ms``, in a background thread unless
        ``checkpoint_thread`` is False (then inline, by count only: the
        deterministic simulation's mode).  When the thread falls behind and
        ``checkpoint_backlog_groups_max`` groups wait, the commit stage runs
        the checkpoint itself before it acknowledges more (backpressure: the
        overlay's memory and read cost stay bounded); default the larger of
        256 and 4 x ``checkpoint_groups_max``.
        ``journal_segment_bytes``: the size of each preallocated journal file.
        Raises :class:`StoreError` if the directory is not a store, or one of
        another cluster.
        """
        if commit_deadline_ms <= 0:
            raise ValueError(f"commit_deadline_ms must be > 0, got {commit_deadline_ms}")
        if producer_id_expiration_ms <= 0:
            raise ValueError(f"producer_id_expiration_ms must be > 0, got {producer_id_expiration_ms}")
        if group_commit_batches_max <= 0:
            raise ValueError(f"group_commit_batches_max must be > 0, got {group_commit_batches_max}")
        if checkpoint_groups_max <= 0:
            raise ValueError(f"checkpoint_groups_max must be > 0, got {checkpoint_groups_max}")
        if checkpoint_interval_ms <= 0:
            raise ValueError(f"checkpoint_interval_ms must be > 0, got {checkpoint_interval_ms}")
        if checkpoint_backlog_groups_max is None:
            checkpoint_backlog_groups_max = max(CHECKPOINT_BACKLOG_GROUPS_MAX_DEFAULT, 4 * checkpoint_groups_max)
        if checkpoint_backlog_groups_max < checkpoint_groups_max:
            raise ValueError(
                f"checkpoint_backlog_groups_max must be >= checkpoint_groups_max ({checkpoint_groups_max}),"
                f" got {checkpoint_backlog_groups_max}"
            )
        if not MAP_SIZE_BYTES_MIN <= map_size_bytes <= MAP_SIZE_BYTES_MAX:
            # Below the minimum, creating the named databases alone fills the
            # map before the store can grow it.
            raise ValueError(
                f"map_size_bytes must be in [{MAP_SIZE_BYTES_MIN}, {MAP_SIZE_BYTES_MAX}], got {map_size_bytes}"
            )
        path = os.fspath(path)
        if readonly and not os.path.exists(os.path.join(path, "data.mdb")):
            raise StoreError(f"{path}: no metadata store here (data.mdb missing)")
        if not readonly:
            os.makedirs(path, exist_ok=True)
        try:
            env = lmdb.open(
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
        store = cls(
            env,
            path=path,
            readonly=readonly,
            sync=sync,
            commit_deadline_ms=commit_deadline_ms,
            producer_id_expiration_ms=producer_id_expiration_ms,
            clock=clock or (lambda: time.time_ns() // 1_000_000),
            group_commit_batches_max=group_commit_batches_max,
            auto_high_watermark=auto_high_watermark,
            checkpoint_groups_max=checkpoint_groups_max,
            checkpoint_interval_ms=checkpoint_interval_ms,
            checkpoint_thread=checkpoint_thread,
            journal_segment_bytes=journal_segment_bytes,
            checkpoint_backlog_groups_max=checkpoint_backlog_groups_max,
        )
        # What reopen() needs to open the same store again.
        store._open_args = {
            "sync": sync,
            "readonly": readonly,
            "commit_deadline_ms": commit_deadline_ms,
            "producer_id_expiration_ms": producer_id_expiration_ms,
            "clock": clock,
            "map_size_bytes": map_size_bytes,
            "group_commit_batches_max": group_commit_batches_max,
            "auto_high_watermark": auto_high_watermark,
            "checkpoint_groups_max": checkpoint_groups_max,
            "checkpoint_interval_ms": checkpoint_interval_ms,
            "checkpoint_thread": checkpoint_thread,
            "journal_segment_bytes": journal_segment_bytes,
            "checkpoint_backlog_groups_max": checkpoint_backlog_groups_max,
        }
        if cluster_id is not None:
            try:
                store.bind_cluster(cluster_id)
            except BaseException:
                store.close()
                raise
        return store

    @property
    def failed(self) -> BaseException | None:
        """Why the store fail-stopped (a commit's I/O failed), or None.
        Every write then raises StoreError until :meth:`reopen`."""
        return self._pipeline.failed

    def reopen(self) -> None:
        """Recover from a fail-stop in place: wait for the operations in
        flight, close the environment, and open it again, reloading every
        cache from disk, as a restart would.  Nothing acknowledged is lost
        (acknowledged means durable); what the failed commits sequenced was
        never acknowledged and is gone.  High watermarks set in memory stay
        (they only ever covered durable entries).  The object stays the same,
        so its owners (the broker, replication) keep their reference."""
        args = self._open_args
        if args is None:
            raise StoreError(f"{self.path}: only a store made by MetadataStore.open can be reopened")
        hwms = dict(self._hwms)
        reopens = self.stats.get("reopens", 0)
        self.close()
        # Opened without its own checkpoint thread: the thread and the
        # pipeline must be bound to this object, which keeps its identity.
        fresh = type(self).open(self.path, **{**args, "checkpoint_thread": False})
        self.__dict__.update(fresh.__dict__)
        self._pipeline = GroupCommitPipeline(
            prepare=self._sequence_group,
            apply=self._commit_group,
            group_weight_max=self.group_commit_batches_max,
            name=self.path,
        )
        if args["checkpoint_thread"] and not self.readonly:
            self._start_checkpointer()
        with self._hwm_lock:
            for tp, hwm in hwms.items():
                if tp in self._parts:
                    self._hwms[tp] = max(hwm, self._hwms.get(tp, -1))
        self.stats["reopens"] = reopens + 1

    def close(self, *, checkpoint: bool = True) -> None:
        """Close the environment once the operations in flight (in other
        threads: an asyncio shell's worker threads outlive a cancelled task)
        have ended; new ones are refused with StoreError.  Closing LMDB under
        a running transaction would crash the process.

        With ``checkpoint`` (and no fail-stop) the journal is applied first,
        so the LMDB files alone hold everything; without, what the journal
        holds beyond the index stays there, as a crash leaves it, and the
        next open applies it (the simulations' crash)."""
        self._stop_checkpointer()
        if self._gate.close():
            self._closed = True
            if checkpoint and not self.readonly and self._pipeline.failed is None:
                try:
                    self._checkpoint()
                except Exception:
                    # Nothing is lost: the next open replays the journal.
                    log.exception("checkpoint at close failed path=%s", self.path)
            self._env.close()
            self._journal.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_version(self) -> None:
        with self._read() as txn:
            raw = txn.get(b"version", db=self._db_meta)
        if raw is None:
            if self.readonly:
                raise StoreError(f"{self.path}: not initialised as a partlog metadata store")
            with self._env.begin(write=True) as txn:
                txn.put(b"version", U64.pack(FORMAT_VERSION), db=self._db_meta)
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
                    txn.put(b"version", U64.pack(FORMAT_VERSION), db=self._db_meta)

    def _load_caches(self) -> None:
        with self._read() as txn:
            for key, value in txn.cursor(db=self._db_topics):
                name, n, configs = msgpack.unpackb(value)
                self._topics[uuid.UUID(bytes=bytes(key))] = Topic(name, n, TopicConfig().with_configs(configs))
            for key, value in txn.cursor(db=self._db_parts):
                part = Part.unpack(U32.unpack(key)[0], value)
                self._parts[part.tp] = part
            for name in (b"next_part_id", b"next_file_id", b"next_batch_id"):
                raw = txn.get(name, db=self._db_meta)
                self._next_ids[name] = U64.unpack(raw)[0] if raw else 0

    def _begin_read(self) -> ReadView:
        """A read snapshot: the overlay first, the LMDB transaction second
        (the order view.py's argument needs)."""
        self._gate.enter_read()
        try:
            if self.readonly:
                self._follow_journal()
            groups = self._overlay
            try:
                txn = self._env.begin(write=False)
            except lmdb.MapResizedError:
                # Another process grew the map: adopt its size.
                self._env.set_mapsize(0)
                txn = self._env.begin(write=False)
        except BaseException:
            self._gate.exit_read()
            raise
        if groups:
            raw = txn.get(KEY_JOURNAL_APPLIED, db=self._db_meta)
            applied = -1 if raw is None else int(U64.unpack(raw)[0])
            if groups[0].seq <= applied:
                groups = tuple(g for g in groups if g.seq > applied)
        return ReadView(txn, groups)

    def _end_read(self, view: ReadView) -> None:
        view.txn.abort()
        self._gate.exit_read()

    @contextmanager
    def _read(self) -> Iterator[ReadView]:
        txn = self._begin_read()
        try:
            yield txn
        finally:
            self._end_read(txn)

    def _abort_write(self, txn: lmdb.Transaction) -> None:
        # py-lmdb >= 2.0 aborts only with no reader in this process (lmdb_gate).
        with self._gate.readers_drained():
            txn.abort()

    def _grow_map(self) -> None:
        """Double the LMDB map; waits until this process has no open readers."""
        with self._gate.readers_drained():
            size = self._env.info()["map_size"]
            if size * 2 > MAP_SIZE_BYTES_MAX:
                raise StoreError(f"{self.path}: LMDB map would exceed {MAP_SIZE_BYTES_MAX} bytes")
            self._env.set_mapsize(size * 2)
            self.stats["map_resizes"] += 1
            log.info("lmdb map grown path=%s map_size_bytes=%d", self.path, size * 2)

    def _check_writable(self) -> None:
        if self._closed:
            raise StoreError(f"{self.path}: store is closed")
        if self.readonly:
            raise StoreError(f"{self.path}: store is open read-only")

    def _write(self, fn: Callable[[Staged], T]) -> T:
        """Run ``fn`` alone in its own write transaction, the pipeline drained.

        For the writes that read what earlier writes wrote (deletions, topic
        changes, epochs).  ``fn`` validates before it writes; if it raises,
        the transaction is aborted and nothing changes.
        """
        return self._exclusive(lambda: self._run_exclusive(fn))

    def _exclusive(self, fn: Callable[[], T]) -> T:
        """``fn`` alone, the pipeline drained (a write in flight for ``close``).

        A failed check of the durable state (:func:`verify`) fail-stops the
        store, as a failed commit does: nothing may be written on it until
        :meth:`reopen` reloads the state from disk."""
        with self._writing():
            try:
                return self._pipeline.exclusive(fn)
            except PipelineFailedError as e:
                raise StoreError(str(e)) from e
            except StoreInconsistentError as e:
                log.error("store inconsistent, fail-stopped path=%s: %s", self.path, e)
                self._pipeline.fail_stop(e)
                raise

    @contextmanager
    def _writing(self) -> Iterator[None]:
        """Count a write in flight, so that ``close`` waits for it."""
        self._check_writable()
        with self._gate.writing():
            yield

    def _run_exclusive(self, fn: Callable[[Staged], T]) -> T:
        # First everything acknowledged goes to LMDB: the write reads and
        # changes LMDB alone, and no checkpoint may run beside it.
        with self._checkpoint_lock:
            self._checkpoint_locked()
            return self._run_exclusive_locked(fn)

    def _run_exclusive_locked(self, fn: Callable[[Staged], T]) -> T:
        def attempt(txn: lmdb.Transaction) -> tuple[Staged, T]:
            staged = Staged(self, txn)
            result = fn(staged)
            staged.flush()
            return staged, result

        staged, result = self._in_write_txn(attempt)
        staged.apply_to_caches()
        self.stats["group_commits"] += 1
        return result

    def _in_write_txn(self, fn: Callable[[lmdb.Transaction], T]) -> T:
        """``fn`` in one committed write transaction; a full map is grown
        and ``fn`` run again in a new one (so ``fn`` must only stage)."""
        while True:
            txn = self._env.begin(write=True)
            try:
                result = fn(txn)
                txn.commit()
            except lmdb.MapFullError:
                self._abort_write(txn)
                self._grow_map()
                continue
            except BaseException:
                self._abort_write(txn)
                raise
            return result

    def _load_producer_raw(self, txn: Txn, part_id: int, producer_id: int) -> bytes | None:
        key = (part_id, producer_id)
        raw = self._producers.get(key)
        if raw is None:
            stored = txn.get(PRODUCER_KEY.pack(part_id, producer_id), db=self._db_producers)
            if stored is None:
                return None
            raw = bytes(stored)
            ProducerEntry.decode(raw)  # a malformed value fails here, where it is read
            self._producers[key] = raw
        return raw

    @property
    def cluster_id(self) -> uuid.UUID | None:
        """The cluster this store belongs to (:meth:`bind_cluster`), or None."""
        with self._read() as txn:
            raw = txn.get(KEY_CLUSTER_ID, db=self._db_meta)
        return None if raw is None else uuid.UUID(bytes=bytes(raw))

    def bind_cluster(self, cluster_id: uuid.UUID) -> None:
        """Record that this store belongs to cluster ``cluster_id``, or check
        that it already does: raises :class:`StoreError` naming both ids when
        it belongs to another.  A broker binds its store at start, so a data
        directory of one cluster is never served as part of another (its
        references would answer the other cluster's walmgr)."""
        assert isinstance(cluster_id, uuid.UUID), cluster_id
        current = self.cluster_id
        if current == cluster_id:
            return
        if current is not None:
            raise StoreError(f"{self.path}: store belongs to cluster {current}, not to cluster {cluster_id}")

        def fn(s: Staged) -> None:
            raw = s.wtxn.get(KEY_CLUSTER_ID, db=self._db_meta)
            if raw is not None and bytes(raw) != cluster_id.bytes:  # bound meanwhile by another caller
                raise StoreError(
                    f"{self.path}: store belongs to cluster {uuid.UUID(bytes=bytes(raw))}, not to cluster {cluster_id}"
                )
            s.wtxn.put(KEY_CLUSTER_ID, cluster_id.bytes, db=self._db_meta)

        self._write(fn)

    def _read_part(self, txn: Txn, tp: TopicIdPartition) -> Part | None:
        raw = txn.get(tp.topic_id.bytes + U32.pack(tp.partition), db=self._db_tp)
        if raw is None:
            return None
        part_id = U32.unpack(raw)[0]
        state = overlay_part(txn, part_id) or txn.get(raw, db=self._db_parts)
        if state is None:
            return None
        part = Part.unpack(part_id, state)
        # Every read path works with the effective high watermark.
        part.high_watermark = self._effective_hwm(part)
        return part

    def _effective_hwm(self, part: Part) -> int:
        """The high watermark readers use: the persisted one, or the in-memory
        one when it is ahead, capped at ``part``'s log end (a reader's
        snapshot may predate entries the in-memory value already covers).
        A ``readonly`` store in another process has no in-memory values and
        sees the persisted one, which may lag until the next write of the
        partition."""
        mem = self._hwms.get(part.tp)
        if mem is None or mem <= part.high_watermark:
            return part.high_watermark
        return mem if mem < part.log_end_offset else part.log_end_offset

    def _known_part(self, tp: TopicIdPartition) -> Part:
        if self.readonly:
            # A read-only store keeps no caches: read what is durable.
            with self._read() as txn:
                part = self._read_part(txn, tp)
        else:
            part = self._parts.get(tp)
        if part is None:
            raise KeyError(f"unknown partition {tp}")
        return part

    # Provided by the sequencing and checkpoint modules.

    def _sequence_group(self, writes: list[Write], into: CommitGroup | None) -> CommitGroup:
        raise NotImplementedError

    def _checkpoint(self) -> int:
        """Apply every durable group of the overlay to LMDB in one
        transaction; returns how many.  Serialised with exclusive writes."""
        with self._checkpoint_lock:
            return self._checkpoint_locked()

    def _checkpoint_locked(self) -> int:
        raise NotImplementedError

    def _recover_journal(self) -> None:
        raise NotImplementedError

    def _replayed_overlay(self) -> tuple[CommitGroup, ...]:
        raise NotImplementedError

    def _follow_journal(self) -> None:
        raise NotImplementedError

    def _start_checkpointer(self) -> None:
        raise NotImplementedError

    def _stop_checkpointer(self) -> None:
        raise NotImplementedError

    def _commit_group(self, group: CommitGroup) -> None:
        raise NotImplementedError
