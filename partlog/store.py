"""MetadataStore: one broker's metadata logs, in one LMDB environment.

Each partition this broker leads (or, later, follows) has a metadata log of
entries ``[patched 61-byte v2 batch header | WAL reference]``, sequenced exactly
as a Kafka partition leader sequences its log.  The API mirrors KIP-1164's
BatchCoordinator, per leader (see :mod:`partlog.records`).

Layout (named LMDB databases; integers big-endian so keys sort numerically):

* ``meta``      counters (next partition/file/batch id) and the format version
* ``topics``    topic_id(16) -> msgpack [name, num_partitions, configs]
* ``tp``        topic_id(16) partition(4) -> part_id(4)
* ``parts``     part_id(4) -> partition state (:class:`_Part`)
* ``log``       part_id(4) base_offset(8) -> entry (:data:`_ENTRY_TAIL`)
* ``producers`` part_id(4) producer_id(8) -> ProducerEntry.encode()
* ``epochs``    part_id(4) leader_epoch(4) -> start_offset(8)
* ``files``     object_key -> file_id, live_batches, live_bytes, uploader, file_size
* ``file_ids``  file_id(8) -> object_key

Writes go through a group commit: concurrent callers queue their operations,
one of them (the leader) runs every queued operation in ONE write transaction
and commits it (one fsync with ``sync=True``), then wakes the others.  Each
operation validates everything before it writes anything, so one caller's bad
input never reaches another caller's commit.  The in-memory caches (partition
states, producer states) change only after the transaction committed: the
operations write to a staging overlay that is thrown away on abort and retry.

Readers use their own read transactions and read state from LMDB, never from
the caches, so a ``readonly=True`` store in another process sees the same.

Replication (Kafka-style, per partition): the leader's :meth:`MetadataStore.read_log`
hands out entries as :class:`ReplicatedEntry` values; a follower's store
appends them with :meth:`MetadataStore.append_replicated` in the leader's exact
offsets and epochs, and cuts a divergent suffix with
:meth:`MetadataStore.truncate_to` or restarts with :meth:`MetadataStore.reset_to`.
With ``auto_high_watermark=False`` the owner drives the high watermark
(:meth:`MetadataStore.set_high_watermark`) from its replicas' progress; that
value lives in memory and reaches disk with the next write of the partition.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import lmdb
import msgpack

from partlog import batch_header as bh
from partlog import injected_bugs
from partlog.batch_header import BatchHeader, increment_sequence, patch_header
from partlog.crc32c import crc32c
from partlog.errors import Errors
from partlog.group_commit import GroupCommitPipeline, PipelineFailedError, Write
from partlog.lmdb_gate import LmdbGate
from partlog.producer_state import (
    NUM_BATCHES_TO_RETAIN,
    PRODUCER_ID_EXPIRATION_MS_DEFAULT,
    AppendedBatch,
    ProducerEntry,
    after_append,
    check_append,
)
from partlog.records import (
    BatchInfo,
    BatchMetadata,
    CommitBatchRequest,
    CommitBatchResponse,
    CreateTopicAndPartitionsRequest,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    FileUsage,
    FindBatchRequest,
    FindBatchResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    TimestampType,
    TopicIdPartition,
)
from partlog.topic_config import TopicConfig
from partlog.wal_key import OBJECT_KEY_BYTES_MAX, WalKeyError, parse_wal_key

log = logging.getLogger(__name__)

T = TypeVar("T")
# py-lmdb types values as bytes or memoryview; without buffers=True they are bytes.
_Buf = bytes | memoryview

FORMAT_VERSION = 1

# Commit deadline: a leader refuses batches of WAL objects older than this,
# measured from created_ms in the key.  It bounds how long an uploaded object
# can still gain its first reference, which is what lets walmgr delete orphans.
# KIP-1163 budgets upload p99 at 200-400 ms; 30 s leaves room for retries.
COMMIT_DEADLINE_MS_DEFAULT = 30_000
# Initial LMDB map size.  It is address space, not disk; it grows by doubling
# when full (MapFullError never reaches a caller) up to MAP_SIZE_BYTES_MAX.
MAP_SIZE_BYTES_DEFAULT = 1 << 30
MAP_SIZE_BYTES_MAX = 1 << 40
MAP_SIZE_BYTES_MIN = 1 << 16
# A group commit stops taking queued writes after this many batches, so one
# transaction (and the latency of everyone in it) stays bounded.
GROUP_COMMIT_BATCHES_MAX = 8192

_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_INT32_MAX = (1 << 31) - 1
_INT64_MAX = (1 << 63) - 1
_PART_KEY = struct.Struct(">IQ")  # part_id, base_offset
_PRODUCER_KEY = struct.Struct(">Iq")
_EPOCH_KEY = struct.Struct(">Ii")
_I64 = struct.Struct(">q")
# file_id, byte_offset, size, log_append_time, batch_max_timestamp (as sent),
# running max of effective timestamps, batch_id; then CRC-32C of everything.
_ENTRY_TAIL = struct.Struct(">QQIqqqQ")
_ENTRY_CRC = struct.Struct(">I")
# A whole entry with the header spliced from pieces: base offset, header[8:12],
# leader epoch, header[16:61], then the tail, in one pack call.
_ENTRY_PLAIN = struct.Struct(">q4si45sQQIqqqQ")
ENTRY_SIZE = bh.HEADER_SIZE + _ENTRY_TAIL.size + _ENTRY_CRC.size
_FILE = struct.Struct(">QqqiQ")  # file_id, live_batches, live_bytes, uploader, file_size
_PART_STATE = struct.Struct(">16siqqqiqqqqq")
_LEADER_EPOCH = struct.Struct(">i")
_LAST_OFFSET_DELTA = struct.Struct(">i")
_HEADER_UNPACK = struct.Struct(">qiibIhiqqqhii").unpack


class StoreError(Exception):
    """An operating error of the store (I/O, a corrupt environment)."""


class CorruptEntryError(StoreError):
    """An entry failed its CRC or does not parse; the message says where."""


class ReplicationError(StoreError):
    """Replicated entries a follower cannot append (not contiguous with its log,
    a leader epoch going backwards, a malformed entry); the message names the
    partition and offset.  Nothing was written."""


class OffsetOutOfRangeError(StoreError):
    """:meth:`MetadataStore.read_log` from an offset outside [log start, log end].

    Carries the leader's bounds so a follower can decide what to do (Kafka's
    follower: below the log start, restart there with ``reset_to``).
    """

    def __init__(self, message: str, *, log_start_offset: int, log_end_offset: int) -> None:
        super().__init__(message)
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


@dataclass(frozen=True, slots=True)
class ReplicatedEntry:
    """One metadata-log entry as a leader hands it to its followers.

    Everything a follower needs to store the entry exactly as the leader did,
    except what is local to each store (file and batch ids, the running max
    timestamp), which the follower assigns itself.
    """

    # The stored 61-byte header: base offset and partition leader epoch patched.
    header: bytes
    object_key: str
    byte_offset: int
    size: int
    log_append_time: int  # -1 unless LogAppendTime
    batch_max_timestamp: int  # as sent by the producer
    uploader_broker_id: int
    file_size: int

    @property
    def base_offset(self) -> int:
        return int(_I64.unpack_from(self.header, 0)[0])

    @property
    def last_offset(self) -> int:
        return self.base_offset + int(_LAST_OFFSET_DELTA.unpack_from(self.header, 23)[0])

    @property
    def partition_leader_epoch(self) -> int:
        return int(_LEADER_EPOCH.unpack_from(self.header, 12)[0])


@dataclass(frozen=True, slots=True)
class LogRead:
    """A leader's answer to a follower fetch (:meth:`MetadataStore.read_log`)."""

    entries: tuple[ReplicatedEntry, ...]
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    leader_epoch: int


@dataclass(slots=True)
class _Part:
    """Mutable state of one partition; copied before a transaction changes it."""

    part_id: int
    tp: TopicIdPartition
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    leader_epoch: int
    live_bytes: int
    live_batches: int
    running_max_timestamp: int
    max_timestamp: int  # -1: none
    # base offset of the first batch holding max_timestamp; -1: none, -2: unknown (rescan)
    max_timestamp_offset: int

    def copy(self) -> _Part:
        return _Part(
            self.part_id,
            self.tp,
            self.log_start_offset,
            self.log_end_offset,
            self.high_watermark,
            self.leader_epoch,
            self.live_bytes,
            self.live_batches,
            self.running_max_timestamp,
            self.max_timestamp,
            self.max_timestamp_offset,
        )

    def pack(self) -> bytes:
        return _PART_STATE.pack(
            self.tp.topic_id.bytes,
            self.tp.partition,
            self.log_start_offset,
            self.log_end_offset,
            self.high_watermark,
            self.leader_epoch,
            self.live_bytes,
            self.live_batches,
            self.running_max_timestamp,
            self.max_timestamp,
            self.max_timestamp_offset,
        )

    @classmethod
    def unpack(cls, part_id: int, data: _Buf) -> _Part:
        tid, p, lso, leo, hwm, epoch, lbytes, lbatches, rmax, mts, mto = _PART_STATE.unpack(data)
        return cls(
            part_id, TopicIdPartition(uuid.UUID(bytes=tid), p), lso, leo, hwm, epoch, lbytes, lbatches, rmax, mts, mto
        )


@dataclass(slots=True)
class _Topic:
    name: str
    num_partitions: int
    config: TopicConfig


@dataclass(frozen=True, slots=True)
class _Entry:
    """A decoded metadata-log entry."""

    header: BatchHeader
    raw_header: bytes
    file_id: int
    byte_offset: int
    size: int
    log_append_time: int
    batch_max_timestamp: int
    running_max_timestamp: int
    batch_id: int

    @property
    def base_offset(self) -> int:
        return self.header.base_offset

    @property
    def last_offset(self) -> int:
        return self.header.base_offset + self.header.last_offset_delta

    @property
    def effective_timestamp(self) -> int:
        """The timestamp ListOffsets and retention use (the stored maxTimestamp)."""
        return self.header.max_timestamp


def _decode_entry(value: _Buf, where: str) -> _Entry:
    if len(value) != ENTRY_SIZE:
        raise CorruptEntryError(f"{where}: entry is {len(value)} bytes, expected {ENTRY_SIZE}")
    body = value[: ENTRY_SIZE - _ENTRY_CRC.size]
    (stored,) = _ENTRY_CRC.unpack_from(value, len(body))
    if crc32c(body) != stored:
        raise CorruptEntryError(f"{where}: entry CRC mismatch")
    raw_header = bytes(body[: bh.HEADER_SIZE])
    return _Entry(BatchHeader.parse(raw_header), raw_header, *_ENTRY_TAIL.unpack_from(body, bh.HEADER_SIZE))


class _Staged:
    """The changes one write makes, kept aside until they are known to stand.

    Exclusive writes (``txn`` given) stage partition, topic, producer and
    counter changes here and write them in ``flush``; the caches change only
    after the transaction committed.  Sequenced commits (``txn`` None) stage the
    same and also collect their log entries and file-reference deltas; the
    caches change as soon as the write was sequenced without error.
    """

    def __init__(self, store: MetadataStore, txn: lmdb.Transaction | None) -> None:
        self.store = store
        self.txn = txn
        self._reader: lmdb.Transaction | None = txn
        self._owns_reader = False
        self.parts: dict[TopicIdPartition, _Part | None] = {}
        self.topics: dict[uuid.UUID, _Topic | None] = {}
        self.producers: dict[tuple[int, int], ProducerEntry | None] = {}
        self.counters: dict[bytes, int] = {}
        # Sequenced commits only: log puts and file deltas [file_id, batches, bytes, uploader, size].
        self.log_puts: list[tuple[bytes, bytes]] = []
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

    def reader(self) -> lmdb.Transaction:
        """A transaction to read committed state (opened on first use)."""
        if self._reader is None:
            self._reader = self.store._begin_read()
            self._owns_reader = True
        return self._reader

    def close(self) -> None:
        if self._owns_reader and self._reader is not None:
            self.store._end_read(self._reader)
            self._reader = None
            self._owns_reader = False

    def part(self, tp: TopicIdPartition) -> _Part | None:
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

    def topic(self, topic_id: uuid.UUID) -> _Topic | None:
        if topic_id in self.topics:
            return self.topics[topic_id]
        return self.store._topics.get(topic_id)

    def producer(self, part_id: int, producer_id: int) -> ProducerEntry | None:
        key = (part_id, producer_id)
        if key in self.producers:
            return self.producers[key]
        # Every entry written since open is cached, so a cache miss means the
        # committed state is current for this key.
        return self.store._load_producer(self.reader(), part_id, producer_id)

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
                txn.put(_U32.pack(part.part_id), part.pack(), db=s._db_parts)
        for (part_id, pid), entry in self.producers.items():
            key = _PRODUCER_KEY.pack(part_id, pid)
            if entry is None:
                txn.delete(key, db=s._db_producers)
            else:
                txn.put(key, entry.encode(), db=s._db_producers)
        for name, value in self.counters.items():
            txn.put(name, _U64.pack(value), db=s._db_meta)

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
        for key, entry in self.producers.items():
            if entry is None:
                s._producers.pop(key, None)
            else:
                s._producers[key] = entry
        s._next_ids.update(self.counters)


@dataclass(slots=True)
class _CommitGroup:
    """A sequenced group of commit_file calls: outcomes and the bytes to write."""

    results: list[Any]
    errors: list[BaseException | None]
    log_puts: list[tuple[bytes, bytes]]
    files: dict[str, list[int]]
    parts: dict[int, bytes]
    producers: dict[bytes, bytes]
    counters: dict[bytes, int]


_KEY_CLUSTER_ID = b"cluster_id"  # in `meta`: the cluster this store belongs to (16 bytes)
_DB_NAMES = (b"meta", b"topics", b"tp", b"parts", b"log", b"producers", b"epochs", b"files", b"file_ids")


class MetadataStore:
    """The metadata logs of all partitions of one broker (see module doc).

    Thread-safe: any number of threads may call any method; writes from
    concurrent callers share transactions (group commit).
    """

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
    ) -> None:
        self._env = env
        self.path = path
        self.readonly = readonly
        self.sync = sync
        self.auto_high_watermark = auto_high_watermark
        self.commit_deadline_ms = commit_deadline_ms
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.group_commit_batches_max = group_commit_batches_max
        self._clock = clock
        try:
            dbs = [env.open_db(name, create=not readonly) for name in _DB_NAMES]
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
        self._parts: dict[TopicIdPartition, _Part] = {}
        self._topics: dict[uuid.UUID, _Topic] = {}
        self._producers: dict[tuple[int, int], ProducerEntry] = {}
        self._next_ids: dict[bytes, int] = {}
        self._closed = False
        self._pipeline: GroupCommitPipeline[_CommitGroup] = GroupCommitPipeline(
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
        self.stats = {"group_commits": 0, "map_resizes": 0}
        self._open_args: dict[str, Any] | None = None
        self._check_version()
        if not readonly:
            self._load_caches()

    # ------------------------------------------------------------------ life

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
    ) -> MetadataStore:
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
        Raises :class:`StoreError` if the directory is not a store, or one of
        another cluster.
        """
        if commit_deadline_ms <= 0:
            raise ValueError(f"commit_deadline_ms must be > 0, got {commit_deadline_ms}")
        if producer_id_expiration_ms <= 0:
            raise ValueError(f"producer_id_expiration_ms must be > 0, got {producer_id_expiration_ms}")
        if group_commit_batches_max <= 0:
            raise ValueError(f"group_commit_batches_max must be > 0, got {group_commit_batches_max}")
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
        fresh = MetadataStore.open(self.path, **args)
        self.__dict__.update(fresh.__dict__)
        with self._hwm_lock:
            for tp, hwm in hwms.items():
                if tp in self._parts:
                    self._hwms[tp] = max(hwm, self._hwms.get(tp, -1))
        self.stats["reopens"] = reopens + 1

    def close(self) -> None:
        """Close the environment once the operations in flight (in other
        threads: an asyncio shell's worker threads outlive a cancelled task)
        have ended; new ones are refused with StoreError.  Closing LMDB under
        a running transaction would crash the process."""
        if self._gate.close():
            self._closed = True
            self._env.close()

    def __enter__(self) -> MetadataStore:
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
                txn.put(b"version", _U64.pack(FORMAT_VERSION), db=self._db_meta)
        elif _U64.unpack(raw)[0] != FORMAT_VERSION:
            raise StoreError(f"{self.path}: store format {_U64.unpack(raw)[0]}, this code reads {FORMAT_VERSION}")

    def _load_caches(self) -> None:
        with self._read() as txn:
            for key, value in txn.cursor(db=self._db_topics):
                name, n, configs = msgpack.unpackb(value)
                self._topics[uuid.UUID(bytes=bytes(key))] = _Topic(name, n, TopicConfig().with_configs(configs))
            for key, value in txn.cursor(db=self._db_parts):
                part = _Part.unpack(_U32.unpack(key)[0], value)
                self._parts[part.tp] = part
            for name in (b"next_part_id", b"next_file_id", b"next_batch_id"):
                raw = txn.get(name, db=self._db_meta)
                self._next_ids[name] = _U64.unpack(raw)[0] if raw else 0

    # -------------------------------------------------------------- plumbing

    def _begin_read(self) -> lmdb.Transaction:
        self._gate.enter_read()
        try:
            try:
                return self._env.begin(write=False)
            except lmdb.MapResizedError:
                # Another process grew the map: adopt its size.
                self._env.set_mapsize(0)
                return self._env.begin(write=False)
        except BaseException:
            self._gate.exit_read()
            raise

    def _end_read(self, txn: lmdb.Transaction) -> None:
        txn.abort()
        self._gate.exit_read()

    @contextmanager
    def _read(self) -> Iterator[lmdb.Transaction]:
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

    def _write(self, fn: Callable[[_Staged], T]) -> T:
        """Run ``fn`` alone in its own write transaction, the pipeline drained.

        For the writes that read what earlier writes wrote (deletions, topic
        changes, epochs).  ``fn`` validates before it writes; if it raises,
        the transaction is aborted and nothing changes.
        """
        with self._writing():
            try:
                return self._pipeline.exclusive(lambda: self._run_exclusive(fn))
            except PipelineFailedError as e:
                raise StoreError(str(e)) from e

    @contextmanager
    def _writing(self) -> Iterator[None]:
        """Count a write in flight, so that ``close`` waits for it."""
        self._check_writable()
        with self._gate.writing():
            yield

    def _run_exclusive(self, fn: Callable[[_Staged], T]) -> T:
        while True:
            txn = self._env.begin(write=True)
            staged = _Staged(self, txn)
            try:
                result = fn(staged)
                staged.flush()
                txn.commit()
            except lmdb.MapFullError:
                self._abort_write(txn)
                self._grow_map()
                continue
            except BaseException:
                self._abort_write(txn)
                raise
            staged.apply_to_caches()
            self.stats["group_commits"] += 1
            return result

    def _sequence_group(self, writes: list[Write], into: _CommitGroup | None) -> _CommitGroup:
        """Pipeline stage 1: sequence queued commit_file calls against the
        in-memory state, which then runs ahead of disk until stage 2.  Appends
        to ``into`` (a group not yet committing) when given."""
        group = into if into is not None else _CommitGroup([], [], [], {}, {}, {}, {})
        for w in writes:
            staged = _Staged(self, None)
            try:
                result = self._commit(staged, *w.payload)
            except Exception as e:  # a bug in one write must not fail the others
                log.exception("commit_file failed while sequencing")
                group.results.append(None)
                group.errors.append(StoreError(f"{self.path}: commit_file failed: {e!r}"))
                continue
            finally:
                staged.close()
            staged.apply_to_caches()
            group.results.append(result)
            group.errors.append(None)
            group.log_puts.extend(staged.log_puts)
            if staged.files:
                with self._pending_lock:
                    for key, (fid, nb, nbytes, uploader, size) in staged.files.items():
                        pending = self._pending_files.setdefault(key, [fid, 0])
                        pending[1] += nb
                        acc = group.files.setdefault(key, [fid, 0, 0, uploader, size])
                        acc[1] += nb
                        acc[2] += nbytes
            for part in staged.parts.values():
                assert part is not None
                group.parts[part.part_id] = part.pack()
            for (part_id, pid), entry in staged.producers.items():
                assert entry is not None
                group.producers[_PRODUCER_KEY.pack(part_id, pid)] = entry.encode()
            group.counters.update(staged.counters)
        return group

    def _commit_group(self, group: _CommitGroup) -> None:
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
                        txn.put(k, _FILE.pack(fid, nb, nbytes, uploader, size), db=self._db_files)
                        txn.put(_U64.pack(fid), k, db=self._db_file_ids)
                    else:
                        old_fid, old_nb, old_nbytes, old_uploader, old_size = _FILE.unpack(raw)
                        assert old_fid == fid, f"{object_key}: file_id {old_fid} on disk, {fid} sequenced"
                        record = _FILE.pack(fid, old_nb + nb, old_nbytes + nbytes, old_uploader, old_size)
                        txn.put(k, record, db=self._db_files)
                txn.cursor(db=self._db_parts).putmulti([(_U32.pack(p), v) for p, v in group.parts.items()])
                if group.producers:
                    txn.cursor(db=self._db_producers).putmulti(list(group.producers.items()))
                for name, counter in group.counters.items():
                    txn.put(name, _U64.pack(counter), db=self._db_meta)
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

    def _load_producer(self, txn: lmdb.Transaction, part_id: int, producer_id: int) -> ProducerEntry | None:
        key = (part_id, producer_id)
        entry = self._producers.get(key)
        if entry is None:
            raw = txn.get(_PRODUCER_KEY.pack(part_id, producer_id), db=self._db_producers)
            if raw is None:
                return None
            entry = ProducerEntry.decode(bytes(raw))
            self._producers[key] = entry
        return entry

    # ---------------------------------------------------------- file index

    def _resolve_file(self, s: _Staged, object_key: str) -> int:
        """The file_id of ``object_key`` if some commit (pending or durable)
        references it, else -1.  Checks the pending map BEFORE opening the
        read snapshot: a pending entry leaves the map only after its commit is
        durable, so one of the two always sees it."""
        with self._pending_lock:
            pending = self._pending_files.get(object_key)
        if pending is not None:
            return pending[0]
        raw = s.reader().get(object_key.encode(), db=self._db_files)
        return -1 if raw is None else int(_FILE.unpack(raw)[0])

    def _file_adjust(self, txn: lmdb.Transaction, file_id: int, batches: int, nbytes: int) -> None:
        key = txn.get(_U64.pack(file_id), db=self._db_file_ids)
        assert key is not None, f"entry references unknown file_id {file_id}"
        raw = txn.get(key, db=self._db_files)
        assert raw is not None, f"file index lost {key!r}"
        fid, live_batches, live_bytes, uploader, fsize = _FILE.unpack(raw)
        live_batches += batches
        live_bytes += nbytes
        assert live_batches >= 0 and live_bytes >= 0, f"negative reference count for {key!r}"
        if live_batches == 0:
            txn.delete(key, db=self._db_files)
            txn.delete(_U64.pack(file_id), db=self._db_file_ids)
        else:
            txn.put(key, _FILE.pack(fid, live_batches, live_bytes, uploader, fsize), db=self._db_files)

    # ---------------------------------------------------------------- topics

    @property
    def cluster_id(self) -> uuid.UUID | None:
        """The cluster this store belongs to (:meth:`bind_cluster`), or None."""
        with self._read() as txn:
            raw = txn.get(_KEY_CLUSTER_ID, db=self._db_meta)
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

        def fn(s: _Staged) -> None:
            raw = s.wtxn.get(_KEY_CLUSTER_ID, db=self._db_meta)
            if raw is not None and bytes(raw) != cluster_id.bytes:  # bound meanwhile by another caller
                raise StoreError(
                    f"{self.path}: store belongs to cluster {uuid.UUID(bytes=bytes(raw))}, not to cluster {cluster_id}"
                )
            s.wtxn.put(_KEY_CLUSTER_ID, cluster_id.bytes, db=self._db_meta)

        self._write(fn)

    def create_topic_and_partitions(self, requests: Iterable[CreateTopicAndPartitionsRequest]) -> None:
        """Create topics and their partitions; idempotent for existing ones.

        A request for an existing topic with more partitions adds the missing
        ones (Kafka's CreatePartitions).  Raises ValueError for a bad request
        (negative partition count, invalid config), before anything changes.
        """
        reqs = list(requests)
        configs: list[TopicConfig] = []
        for r in reqs:
            if r.num_partitions <= 0:
                raise ValueError(f"topic {r.topic_name!r}: num_partitions must be > 0, got {r.num_partitions}")
            configs.append(TopicConfig().with_configs(r.configs))

        def fn(s: _Staged) -> None:
            for r, cfg in zip(reqs, configs, strict=True):
                topic = s.topic(r.topic_id)
                if topic is not None:
                    if r.num_partitions <= topic.num_partitions:
                        continue
                    first = topic.num_partitions
                    topic = _Topic(topic.name, r.num_partitions, topic.config)
                else:
                    first = 0
                    topic = _Topic(r.topic_name, r.num_partitions, cfg)
                s.topics[r.topic_id] = topic
                s.wtxn.put(
                    r.topic_id.bytes,
                    msgpack.packb([topic.name, topic.num_partitions, topic.config.to_configs()]),
                    db=self._db_topics,
                )
                for p in range(first, r.num_partitions):
                    tp = TopicIdPartition(r.topic_id, p)
                    part_id = s.next_id(b"next_part_id")
                    s.wtxn.put(r.topic_id.bytes + _U32.pack(p), _U32.pack(part_id), db=self._db_tp)
                    s.wtxn.put(_EPOCH_KEY.pack(part_id, 0), _I64.pack(0), db=self._db_epochs)
                    s.parts[tp] = _Part(part_id, tp, 0, 0, 0, 0, 0, 0, -1, -1, -1)

        self._write(fn)

    def alter_topic_configs(self, topic_id: uuid.UUID, configs: dict[str, str | int]) -> None:
        """Change topic configs (Kafka names); raises KeyError for an unknown topic."""

        def fn(s: _Staged) -> None:
            topic = s.topic(topic_id)
            if topic is None:
                raise KeyError(f"unknown topic {topic_id}")
            topic = _Topic(topic.name, topic.num_partitions, topic.config.with_configs(configs))
            s.topics[topic_id] = topic
            s.wtxn.put(
                topic_id.bytes,
                msgpack.packb([topic.name, topic.num_partitions, topic.config.to_configs()]),
                db=self._db_topics,
            )

        self._write(fn)

    def delete_topics(self, topic_ids: Iterable[uuid.UUID]) -> None:
        """Delete topics: their logs, producer states, epochs and file references."""
        ids = set(topic_ids)

        def fn(s: _Staged) -> None:
            for tid in ids:
                topic = s.topic(tid)
                if topic is None:
                    continue
                for p in range(topic.num_partitions):
                    tp = TopicIdPartition(tid, p)
                    part = s.part(tp)
                    if part is None:
                        continue
                    self._drop_entries(s, part, until_offset=None)
                    self._drop_prefix_keys(s.wtxn, self._db_producers, _U32.pack(part.part_id))
                    for k in {k for k in (*self._producers, *s.producers) if k[0] == part.part_id}:
                        s.producers[k] = None
                    self._drop_prefix_keys(s.wtxn, self._db_epochs, _U32.pack(part.part_id))
                    s.wtxn.delete(_U32.pack(part.part_id), db=self._db_parts)
                    s.wtxn.delete(tid.bytes + _U32.pack(p), db=self._db_tp)
                    s.parts[tp] = None
                s.wtxn.delete(tid.bytes, db=self._db_topics)
                s.topics[tid] = None

        self._write(fn)

    def _drop_prefix_keys(self, txn: lmdb.Transaction, db: Any, prefix: bytes) -> None:
        cur = txn.cursor(db=db)
        if cur.set_range(prefix):
            while cur.key()[: len(prefix)] == prefix:
                if not cur.delete():
                    break

    def topic_config(self, topic_id: uuid.UUID) -> TopicConfig:
        with self._read() as txn:
            raw = txn.get(topic_id.bytes, db=self._db_topics)
        if raw is None:
            raise KeyError(f"unknown topic {topic_id}")
        return TopicConfig().with_configs(msgpack.unpackb(raw)[2])

    # --------------------------------------------------------------- commit

    def commit_file(
        self,
        object_key: str,
        uploader_broker_id: int,
        file_size: int,
        batches: Sequence[CommitBatchRequest],
    ) -> list[CommitBatchResponse]:
        """Sequence and append the batches of one WAL object (one commit RPC).

        All accepted batches are appended in ONE transaction; responses come in
        request order.  A batch that fails validation gets its Kafka error and
        leaves the others unaffected.  Batches of one partition are appended in
        request order, each seeing the producer state the previous one left.
        """
        self._check_writable()
        batches = list(batches)
        # Everything that needs no state is checked here, in the caller's
        # thread, so it overlaps another group's fsync instead of the
        # sequencing stage.
        key_error = Errors.NONE
        created_ms = -1
        try:
            created_ms = parse_wal_key(object_key).created_ms
        except WalKeyError as e:
            log.warning("commit refused: %s", e)
            key_error = Errors.INVALID_REQUEST
        # Values this call will pack into fixed-width fields (the uploader is
        # an int32, sizes and offsets int64s): refused here, per call, so no
        # input can make the commit stage fail and fail-stop the store.
        if type(uploader_broker_id) is not int or not 0 <= uploader_broker_id <= _INT32_MAX:
            log.warning("commit refused: uploader %r is not a broker id", uploader_broker_id)
            key_error = Errors.INVALID_REQUEST
        if type(file_size) is not int or not 0 < file_size <= _INT64_MAX:
            key_error = Errors.INVALID_REQUEST
            file_size = 1  # every batch is then outside it: INVALID_REQUEST
        checked = [_check_batch(req, file_size) for req in batches]
        try:
            with self._writing():
                result: list[CommitBatchResponse] = self._pipeline.submit(
                    (object_key, created_ms, key_error, uploader_broker_id, file_size, batches, checked), len(batches)
                )
        except PipelineFailedError as e:
            raise StoreError(str(e)) from e
        return result

    def _commit(
        self,
        s: _Staged,
        object_key: str,
        created_ms: int,
        key_error: Errors,
        uploader: int,
        file_size: int,
        batches: list[CommitBatchRequest],
        checked: list[tuple[int, ...] | Errors],
    ) -> list[CommitBatchResponse]:
        if key_error:
            return [_error(key_error, b) for b in batches]
        # The deadline is checked while sequencing; the reference becomes
        # visible to referenced_files() in the same step (_pending_files).
        now = self._clock()
        if now - created_ms > self.commit_deadline_ms:
            log.info(
                "commit refused: deadline object_key=%s age_ms=%d commit_deadline_ms=%d",
                object_key,
                now - created_ms,
                self.commit_deadline_ms,
            )
            return [_error(Errors.COMMIT_DEADLINE_EXCEEDED, b) for b in batches]
        file_id = self._resolve_file(s, object_key)

        # Responses by request index; batches are processed partition by
        # partition (request order within each), which is all Kafka orders.
        responses: list[CommitBatchResponse | None] = [None] * len(batches)
        by_tp: dict[TopicIdPartition, list[int]] = {}
        for i, req in enumerate(batches):
            by_tp.setdefault(req.topic_id_partition, []).append(i)
        added_batches = 0
        added_bytes = 0
        expiration_ms = self.producer_id_expiration_ms
        log_puts = s.log_puts
        entry_pack = _ENTRY_PLAIN.pack
        crc_pack = _ENTRY_CRC.pack
        key_pack = _PART_KEY.pack
        producers = s.producers
        auto_hwm = self.auto_high_watermark
        hwms = self._hwms
        batch_id = s.next_id(b"next_batch_id")
        # The loop below runs once per batch: partition fields live in locals
        # and are written back once per partition.
        for tp, indices in by_tp.items():
            part = s.part(tp)
            if part is None:
                for i in indices:
                    responses[i] = _error(Errors.UNKNOWN_TOPIC_OR_PARTITION, batches[i])
                continue
            topic = s.topic(tp.topic_id)
            assert topic is not None
            cfg = topic.config
            log_append = cfg.message_timestamp_type == TimestampType.LOG_APPEND_TIME
            size_max = cfg.max_message_bytes
            if log_append:
                ts_min, ts_max = -(2**63), 2**63  # LogAppendTime: producer timestamps are not checked
            else:
                ts_min = now - cfg.message_timestamp_before_max_ms
                ts_max = now + cfg.message_timestamp_after_max_ms
            leader_epoch = part.leader_epoch
            part_id = part.part_id
            lso = part.log_start_offset
            leo = part.log_end_offset
            running_max = part.running_max_timestamp
            live_bytes = part.live_bytes
            live_batches = part.live_batches
            for i in indices:
                req = batches[i]
                h = checked[i]
                if type(h) is not tuple:
                    responses[i] = _error(h, req)  # type: ignore[arg-type]
                    continue
                size = req.size
                if size > size_max:
                    responses[i] = _error(Errors.MESSAGE_TOO_LARGE, req)
                    continue
                # Kafka's LogValidator.validateTimestamp, on the batch's first
                # and max timestamps (records are not read): NO_TIMESTAMP (-1)
                # is exempt from the range check; a producer may not set the
                # LogAppendTime bit on a LogAppendTime topic, nor on a record
                # without timestamp.
                base_ts = h[7]
                max_ts = h[8]
                producer_lat = h[5] & bh.ATTR_TIMESTAMP_TYPE
                if log_append:
                    bad_ts = producer_lat
                else:
                    bad_ts = (
                        (base_ts != -1 and not ts_min <= base_ts <= ts_max)
                        or (max_ts != -1 and not ts_min <= max_ts <= ts_max)
                        or (producer_lat and base_ts == -1)
                    )
                if bad_ts:
                    responses[i] = _error(Errors.INVALID_TIMESTAMP, req)
                    continue
                delta = h[6]
                pid = h[9]
                entry: ProducerEntry | None = None
                if pid >= 0:
                    pepoch, first_seq = h[10], h[11]
                    last_seq = increment_sequence(first_seq, delta)
                    key = (part_id, pid)
                    entry = producers[key] if key in producers else s.producer(part_id, pid)
                    if entry is not None and now - entry.last_timestamp >= expiration_ms:
                        entry = None  # expired: as if never seen
                    if entry is not None:
                        dup = entry.find_duplicate(pepoch, first_seq, last_seq)
                        if dup is not None:
                            # Kafka answers a duplicate with the batch's
                            # max timestamp (its append time on LogAppendTime).
                            dup_time = dup.log_append_time if dup.log_append_time != -1 else dup.max_timestamp
                            responses[i] = CommitBatchResponse(Errors.NONE, dup.first_offset, dup_time, lso, True, req)
                            continue
                        perr = check_append(entry, pepoch, first_seq)
                        if perr:
                            responses[i] = _error(perr, req)
                            continue
                # Accepted: sequence it.
                if file_id < 0:
                    file_id = s.next_id(b"next_file_id")
                base = leo
                header = req.header
                if log_append:
                    append_time = effective_ts = now
                    stored = patch_header(
                        header, base_offset=base, partition_leader_epoch=leader_epoch, log_append_time=now
                    )
                else:
                    append_time = -1
                    effective_ts = max_ts
                    # A producer-set LogAppendTime bit is cleared, as Kafka does.
                    stored = (
                        patch_header(
                            header,
                            base_offset=base,
                            partition_leader_epoch=leader_epoch,
                            log_append_time=None,
                            create_time=True,
                        )
                        if producer_lat
                        else b""
                    )
                if effective_ts > running_max:
                    running_max = effective_ts
                if effective_ts > part.max_timestamp and part.max_timestamp_offset != -2:
                    part.max_timestamp = effective_ts
                    part.max_timestamp_offset = base
                if stored:
                    body = stored + _ENTRY_TAIL.pack(
                        file_id, req.byte_offset, size, append_time, max_ts, running_max, batch_id
                    )
                else:
                    # Offset and epoch lie outside the batch CRC: splice them in.
                    body = entry_pack(
                        base,
                        header[8:12],
                        leader_epoch,
                        header[16:],
                        file_id,
                        req.byte_offset,
                        size,
                        -1,
                        max_ts,
                        running_max,
                        batch_id,
                    )
                batch_id += 1
                log_puts.append((key_pack(part_id, base), body + crc_pack(crc32c(body))))
                leo = base + delta + 1
                live_bytes += size
                live_batches += 1
                added_batches += 1
                added_bytes += size
                if pid >= 0:
                    producers[key] = after_append(
                        entry, pepoch, AppendedBatch(first_seq, last_seq, base, leo - 1, max_ts, append_time)
                    )
                responses[i] = CommitBatchResponse(Errors.NONE, base, append_time, lso, False, req)
            part.log_end_offset = leo
            part.running_max_timestamp = running_max
            part.live_bytes = live_bytes
            part.live_batches = live_batches
            if auto_hwm:
                # No replication: the leader's log end is its high watermark.
                part.high_watermark = leo
            else:
                # The owner drives the HWM; persist what it set so far.
                mem = hwms.get(tp)
                if mem is not None and mem > part.high_watermark:
                    part.high_watermark = mem if mem < leo else leo
        s.counters[b"next_batch_id"] = batch_id
        if added_batches:
            s.files[object_key] = [file_id, added_batches, added_bytes, uploader, file_size]
        return responses  # type: ignore[return-value]  # every slot is filled

    # ---------------------------------------------------------- leadership

    def set_leader_epoch(self, tp: TopicIdPartition, leader_epoch: int) -> None:
        """Become leader at ``leader_epoch`` (>= the current one): new entries are
        stamped with it, and the epoch cache records where it starts."""

        def fn(s: _Staged) -> None:
            part = s.part(tp)
            if part is None:
                raise KeyError(f"unknown partition {tp}")
            if leader_epoch < part.leader_epoch:
                raise ValueError(f"{tp}: leader epoch {leader_epoch} < current {part.leader_epoch}")
            if leader_epoch > part.leader_epoch:
                part.leader_epoch = leader_epoch
                self._assign_epoch(s.wtxn, part.part_id, leader_epoch, part.log_end_offset)

        self._write(fn)

    def _assign_epoch(self, txn: lmdb.Transaction, part_id: int, leader_epoch: int, start_offset: int) -> None:
        """Kafka's ``LeaderEpochFileCache.assign``: record where ``leader_epoch``
        starts, first dropping entries that would no longer be monotonic (a
        later or equal epoch, or a start at or after ``start_offset``: an
        epoch that wrote nothing).  Leader (``set_leader_epoch``) and follower
        (``append_replicated``) apply the same rule, so their caches agree."""
        prefix = _U32.pack(part_id)
        cur = txn.cursor(db=self._db_epochs)
        doomed = []
        found = _last_under(cur, prefix)
        while found and cur.key()[:4] == prefix:
            epoch = _EPOCH_KEY.unpack(cur.key())[1]
            if epoch < leader_epoch and _I64.unpack(cur.value())[0] < start_offset:
                break
            doomed.append(bytes(cur.key()))
            found = cur.prev()
        for key in doomed:
            txn.delete(key, db=self._db_epochs)
        txn.put(_EPOCH_KEY.pack(part_id, leader_epoch), _I64.pack(start_offset), db=self._db_epochs)

    def _latest_epoch(self, txn: lmdb.Transaction, part_id: int) -> int:
        """The newest epoch in the partition's epoch cache, -1 if it is empty."""
        prefix = _U32.pack(part_id)
        cur = txn.cursor(db=self._db_epochs)
        if _last_under(cur, prefix) and cur.key()[:4] == prefix:
            return int(_EPOCH_KEY.unpack(cur.key())[1])
        return -1

    def leader_epoch_cache(self, tp: TopicIdPartition) -> list[tuple[int, int]]:
        """(leader_epoch, start_offset) pairs, ascending."""
        with self._read() as txn:
            part = self._read_part(txn, tp)
            if part is None:
                raise KeyError(f"unknown partition {tp}")
            prefix = _U32.pack(part.part_id)
            out = []
            cur = txn.cursor(db=self._db_epochs)
            if cur.set_range(prefix):
                for k, v in cur:
                    if k[:4] != prefix:
                        break
                    out.append((_EPOCH_KEY.unpack(k)[1], _I64.unpack(v)[0]))
            return out

    # --------------------------------------------------------------- reads

    def _read_part(self, txn: lmdb.Transaction, tp: TopicIdPartition) -> _Part | None:
        raw = txn.get(tp.topic_id.bytes + _U32.pack(tp.partition), db=self._db_tp)
        if raw is None:
            return None
        part_id = _U32.unpack(raw)[0]
        state = txn.get(raw, db=self._db_parts)
        if state is None:
            return None
        part = _Part.unpack(part_id, state)
        # Every read path works with the effective high watermark.
        part.high_watermark = self._effective_hwm(part)
        return part

    def _effective_hwm(self, part: _Part) -> int:
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

    def _entries(self, txn: lmdb.Transaction, part: _Part, from_offset: int = 0) -> Iterator[tuple[_Buf, _Entry]]:
        """Entries of ``part`` whose base offset >= ``from_offset``, ascending."""
        prefix = _U32.pack(part.part_id)
        cur = txn.cursor(db=self._db_log)
        if not cur.set_range(_PART_KEY.pack(part.part_id, max(from_offset, 0))):
            return
        for k, v in cur:
            if k[:4] != prefix:
                return
            yield k, _decode_entry(v, f"partition {part.tp} offset {_PART_KEY.unpack(k)[1]}")

    def _entry_containing(self, txn: lmdb.Transaction, part: _Part, offset: int) -> tuple[bytes, _Entry] | None:
        """The entry whose offset range contains ``offset``, if any."""
        cur = txn.cursor(db=self._db_log)
        key = _PART_KEY.pack(part.part_id, offset)
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
        entry = _decode_entry(v, f"partition {part.tp} offset {_PART_KEY.unpack(k)[1]}")
        if entry.base_offset <= offset <= entry.last_offset:
            return bytes(k), entry
        return None

    def _batch_info(self, txn: lmdb.Transaction, tp: TopicIdPartition, e: _Entry, keys: dict[int, str]) -> BatchInfo:
        object_key = keys.get(e.file_id)
        if object_key is None:
            raw = txn.get(_U64.pack(e.file_id), db=self._db_file_ids)
            if raw is None:
                raise CorruptEntryError(f"partition {tp} offset {e.base_offset}: unknown file_id {e.file_id}")
            object_key = bytes(raw).decode()
            keys[e.file_id] = object_key
        h = e.header
        return BatchInfo(
            e.batch_id,
            object_key,
            BatchMetadata(
                tp,
                e.byte_offset,
                e.size,
                e.base_offset,
                e.last_offset,
                e.log_append_time,
                e.batch_max_timestamp,
                h.timestamp_type,
                h.producer_id,
                h.producer_epoch,
                h.base_sequence,
                h.last_sequence,
                h.partition_leader_epoch,
                e.raw_header,
            ),
        )

    def find_batches(self, requests: Sequence[FindBatchRequest], fetch_max_bytes: int) -> list[FindBatchResponse]:
        """Coordinates of the batches a fetch at each request's offset returns.

        As Kafka (KIP-74): batches up to the high watermark, within each
        request's ``max_partition_fetch_bytes`` and ``fetch_max_bytes`` overall,
        but the first batch of the first partition that has data is returned
        even if it exceeds both, so consumers always progress.  As Kafka's
        ``LocalLog.read``, an offset in [HWM, log end] gets an empty answer
        and only one past the log end is out of range: a new leader whose HWM
        still lags the old one's must not send consumers into an offset reset.
        """
        out: list[FindBatchResponse] = []
        remaining = fetch_max_bytes
        min_one = True
        keys: dict[int, str] = {}
        with self._read() as txn:
            for req in requests:
                part = self._read_part(txn, req.topic_id_partition)
                if part is None:
                    out.append(FindBatchResponse(Errors.UNKNOWN_TOPIC_OR_PARTITION, (), -1, -1))
                    continue
                lso, hwm = part.log_start_offset, part.high_watermark
                if req.offset < lso or req.offset > part.log_end_offset:
                    out.append(FindBatchResponse(Errors.OFFSET_OUT_OF_RANGE, (), lso, hwm))
                    continue
                if req.offset >= hwm:
                    out.append(FindBatchResponse(Errors.NONE, (), lso, hwm))
                    continue
                limit = min(req.max_partition_fetch_bytes, remaining)
                found: list[BatchInfo] = []
                used = 0
                try:
                    first = self._entry_containing(txn, part, req.offset)
                    if first is None:
                        raise CorruptEntryError(f"partition {part.tp}: no entry holds offset {req.offset}")
                    for _, e in self._entries(txn, part, first[1].base_offset):
                        if e.last_offset >= hwm:
                            break
                        if used + e.size > limit and not (min_one and not found):
                            break
                        found.append(self._batch_info(txn, part.tp, e, keys))
                        used += e.size
                except CorruptEntryError as e:
                    log.error("corrupt metadata entry: %s", e)
                    out.append(FindBatchResponse(Errors.CORRUPT_MESSAGE, (), lso, hwm, str(e)))
                    continue
                if found:
                    min_one = False
                remaining = max(0, remaining - used)
                out.append(FindBatchResponse(Errors.NONE, tuple(found), lso, hwm))
        return out

    def list_offsets(self, requests: Sequence[ListOffsetsRequest]) -> list[ListOffsetsResponse]:
        """Kafka ListOffsets at batch granularity (see design.md)."""
        out: list[ListOffsetsResponse] = []
        with self._read() as txn:
            for req in requests:
                tp = req.topic_id_partition
                part = self._read_part(txn, tp)
                if part is None:
                    out.append(ListOffsetsResponse(Errors.UNKNOWN_TOPIC_OR_PARTITION, tp, -1, -1))
                    continue
                try:
                    ts, offset = self._list_offset(txn, part, req.timestamp)
                except CorruptEntryError as e:
                    log.error("corrupt metadata entry: %s", e)
                    out.append(ListOffsetsResponse(Errors.CORRUPT_MESSAGE, tp, -1, -1))
                    continue
                out.append(ListOffsetsResponse(Errors.NONE, tp, ts, offset))
        return out

    def _list_offset(self, txn: lmdb.Transaction, part: _Part, target: int) -> tuple[int, int]:
        if target == ListOffsetsRequest.EARLIEST_TIMESTAMP:
            return -1, part.log_start_offset
        if target == ListOffsetsRequest.LATEST_TIMESTAMP:
            return -1, part.high_watermark
        if target == ListOffsetsRequest.MAX_TIMESTAMP:
            # As Kafka's Partition.fetchOffsetForTimestamp: the batch holding
            # the log's largest timestamp, or nothing while it is not below
            # the HWM (only possible when the owner drives the HWM).
            if part.max_timestamp_offset == -1:
                return -1, -1
            if part.max_timestamp_offset >= 0:
                best_ts, best_off = part.max_timestamp, part.max_timestamp_offset
                if part.high_watermark < part.log_end_offset:
                    hit = self._entry_containing(txn, part, best_off)
                    if hit is None or hit[1].last_offset >= part.high_watermark:
                        return -1, -1
                return best_ts, max(best_off, part.log_start_offset)
            best_ts, best_off, best_last = -1, -1, -1
            for _, e in self._entries(txn, part):
                if e.effective_timestamp > best_ts:
                    best_ts, best_off, best_last = e.effective_timestamp, e.base_offset, e.last_offset
            if best_off < 0 or best_last >= part.high_watermark:
                return -1, -1
            return best_ts, max(best_off, part.log_start_offset)
        if target < 0:
            return -1, -1
        return self._offset_for_timestamp(txn, part, target)

    def _offset_for_timestamp(self, txn: lmdb.Transaction, part: _Part, target: int) -> tuple[int, int]:
        """First batch (below the HWM) whose max timestamp >= target.

        Entries carry the running max of timestamps, which is monotonic, so a
        binary search over offsets finds the first entry whose running max
        reaches ``target``.  Only if batches before the log start pushed the
        running max up does the answer need a forward scan.
        """
        first = self._entry_containing(txn, part, part.log_start_offset)
        if first is None:
            return -1, -1
        # g(x) = "the first entry at or after offset x has running max >= target"
        # is monotonic in x; find the smallest such x in [first base, HWM].
        lo, hi = first[1].base_offset, part.high_watermark
        while lo < hi:
            mid = (lo + hi) // 2
            hit = next(self._entries(txn, part, mid), None)
            if hit is None or hit[1].last_offset >= part.high_watermark or hit[1].running_max_timestamp >= target:
                hi = mid
            else:
                lo = hit[1].base_offset + 1
        hit = next(self._entries(txn, part, lo), None)
        if hit is None or hit[1].last_offset >= part.high_watermark:
            return -1, -1
        e = hit[1]
        if e.effective_timestamp < target:
            # Running max was raised by batches deleted before the log start:
            # scan forward for the first batch that reaches target itself.
            for _, later in self._entries(txn, part, e.base_offset):
                if later.last_offset >= part.high_watermark:
                    return -1, -1
                if later.effective_timestamp >= target:
                    e = later
                    break
            else:
                return -1, -1
        return e.effective_timestamp, max(e.base_offset, part.log_start_offset)

    # ------------------------------------------------------------ deletion

    def delete_records(self, requests: Sequence[DeleteRecordsRequest]) -> list[DeleteRecordsResponse]:
        """Advance log start offsets (Kafka DeleteRecords; -1 means the HWM)."""
        reqs = list(requests)

        def fn(s: _Staged) -> list[DeleteRecordsResponse]:
            out = []
            for r in reqs:
                part = s.part(r.topic_id_partition)
                if part is None:
                    out.append(DeleteRecordsResponse(Errors.UNKNOWN_TOPIC_OR_PARTITION, -1))
                    continue
                offset = part.high_watermark if r.offset == -1 else r.offset
                if offset < 0 or offset > part.high_watermark:
                    out.append(DeleteRecordsResponse(Errors.OFFSET_OUT_OF_RANGE, -1))
                    continue
                if offset > part.log_start_offset:
                    part.log_start_offset = offset
                    self._drop_entries(s, part, until_offset=offset)
                out.append(DeleteRecordsResponse(Errors.NONE, part.log_start_offset))
            return out

        return self._write(fn)

    def _drop_entries(self, s: _Staged, part: _Part, until_offset: int | None) -> int:
        """Delete entries wholly below ``until_offset`` (all if None); returns count.

        Keeps the partition's live counters and the file index exact.
        """
        txn = s.wtxn
        per_file: dict[int, list[int]] = {}
        cur = txn.cursor(db=self._db_log)
        prefix = _U32.pack(part.part_id)
        dropped = 0
        if cur.set_range(prefix):
            while cur.key()[:4] == prefix:
                k = cur.key()
                e = _decode_entry(cur.value(), f"partition {part.tp} offset {_PART_KEY.unpack(k)[1]}")
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

    def enforce_retention(self, now_ms: int | None = None) -> dict[TopicIdPartition, int]:
        """Apply retention.ms and retention.bytes to every partition, as Kafka's
        log cleaner does for deleted segments, batch by batch, never past the
        HWM; expire producer states.  Returns the new log start offsets of the
        partitions that changed."""
        now = self._clock() if now_ms is None else now_ms

        def fn(s: _Staged) -> dict[TopicIdPartition, int]:
            changed: dict[TopicIdPartition, int] = {}
            for tp in list(self._parts):
                # A write earlier in this transaction may have changed it.
                cached = s.parts[tp] if tp in s.parts else self._parts[tp]
                topic = s.topic(tp.topic_id)
                if cached is None or topic is None or cached.live_batches == 0:
                    continue
                cfg = topic.config
                new_lso = self._retention_point(s.wtxn, cached, self._effective_hwm(cached), cfg, now)
                if new_lso > cached.log_start_offset:
                    part = s.part(tp)
                    assert part is not None
                    self._drop_entries(s, part, until_offset=new_lso)
                    part.log_start_offset = new_lso
                    changed[tp] = new_lso
            self._expire_producers(s, now)
            return changed

        return self._write(fn)

    def _retention_point(self, txn: lmdb.Transaction, part: _Part, hwm: int, cfg: TopicConfig, now: int) -> int:
        """The base offset of the first batch retention keeps (or the HWM)."""
        if cfg.retention_ms < 0 and cfg.retention_bytes < 0:
            return part.log_start_offset
        size = part.live_bytes
        point = part.log_start_offset
        for _, e in self._entries(txn, part):
            if e.last_offset >= hwm and not injected_bugs.on("retention_past_hwm"):
                break
            by_time = cfg.retention_ms >= 0 and e.effective_timestamp < now - cfg.retention_ms
            by_size = cfg.retention_bytes >= 0 and size - e.size >= cfg.retention_bytes
            if not (by_time or by_size):
                break
            size -= e.size
            point = e.last_offset + 1
        return point

    def _expire_producers(self, s: _Staged, now: int) -> None:
        cur = s.wtxn.cursor(db=self._db_producers)
        for k, v in cur:
            entry = ProducerEntry.decode(bytes(v))
            if entry.is_expired(now, self.producer_id_expiration_ms):
                part_id, pid = _PRODUCER_KEY.unpack(k)
                if (part_id, pid) not in s.producers:
                    s.producers[(part_id, pid)] = None

    # ---------------------------------------------------------- replication

    def log_end_offset(self, tp: TopicIdPartition) -> int:
        """The partition's log end offset, from memory: no transaction.  On a
        leader it includes commits sequenced but not yet durable (at most two
        groups ahead).  KeyError for an unknown partition."""
        return self._known_part(tp).log_end_offset

    def log_start_offset(self, tp: TopicIdPartition) -> int:
        """The partition's log start offset, from memory.  KeyError for an
        unknown partition."""
        return self._known_part(tp).log_start_offset

    def high_watermark(self, tp: TopicIdPartition) -> int:
        """The effective high watermark (persisted or set in memory, whichever
        is ahead, capped at the log end), from memory.  KeyError for an
        unknown partition."""
        return self._effective_hwm(self._known_part(tp))

    def _known_part(self, tp: TopicIdPartition) -> _Part:
        if self.readonly:
            # A read-only store keeps no caches: read what is durable.
            with self._read() as txn:
                part = self._read_part(txn, tp)
        else:
            part = self._parts.get(tp)
        if part is None:
            raise KeyError(f"unknown partition {tp}")
        return part

    def set_high_watermark(self, tp: TopicIdPartition, high_watermark: int) -> int:
        """Advance the partition's high watermark to ``high_watermark``, capped
        at the log end; never lowers it.  Returns the effective HWM.

        Called by a leader after every commit and follower fetch, so it writes
        nothing: the value lives in memory, every read path of this store uses
        it at once, and the next write of the partition (a commit, a deletion,
        a replicated append) persists it.  After a restart, or in a
        ``readonly`` store in another process, the persisted value may lag;
        the owner re-derives the HWM from its replicas.  KeyError for an
        unknown partition.
        """
        self._check_writable()
        with self._hwm_lock:
            part = self._parts.get(tp)
            if part is None:
                raise KeyError(f"unknown partition {tp}")
            current = self._effective_hwm(part)
            target = min(high_watermark, part.log_end_offset)
            if target <= current:
                return current
            self._hwms[tp] = target
            return target

    def read_log(
        self, tp: TopicIdPartition, from_offset: int, max_bytes: int, max_entries: int | None = None
    ) -> LogRead:
        """The leader's side of a follower fetch: entries from ``from_offset``
        (the batch holding it, if it falls inside one) in offset order, above
        the HWM too (followers replicate everything).  At least one entry if
        there is any, then as many as keep the referenced batch bytes within
        ``max_bytes`` and the count within ``max_entries`` (what a fetch
        response carries).  One read transaction, so the entries and the offsets
        returned with them are one snapshot.

        Raises :class:`OffsetOutOfRangeError` when ``from_offset`` is below
        the log start or past the log end, KeyError for an unknown partition.
        """
        with self._read() as txn:
            part = self._read_part(txn, tp)
            if part is None:
                raise KeyError(f"unknown partition {tp}")
            lso, leo = part.log_start_offset, part.log_end_offset
            if not lso <= from_offset <= leo:
                raise OffsetOutOfRangeError(
                    f"partition {tp}: offset {from_offset} is outside the log [{lso}, {leo}]",
                    log_start_offset=lso,
                    log_end_offset=leo,
                )
            out: list[ReplicatedEntry] = []
            if from_offset < leo:
                first = self._entry_containing(txn, part, from_offset)
                if first is None:
                    raise CorruptEntryError(f"partition {tp}: no entry holds offset {from_offset}")
                # file_id -> (object key, uploader, file size): entries of one
                # WAL object come in runs, so each is looked up once.
                files: dict[int, tuple[str, int, int]] = {}
                used = 0
                for _, e in self._entries(txn, part, first[1].base_offset):
                    if out and (used + e.size > max_bytes or (max_entries is not None and len(out) >= max_entries)):
                        break
                    f = files.get(e.file_id)
                    if f is None:
                        f = files[e.file_id] = self._file_of(txn, tp, e)
                    out.append(
                        ReplicatedEntry(
                            e.raw_header,
                            f[0],
                            e.byte_offset,
                            e.size,
                            e.log_append_time,
                            e.batch_max_timestamp,
                            f[1],
                            f[2],
                        )
                    )
                    used += e.size
            return LogRead(tuple(out), lso, leo, part.high_watermark, part.leader_epoch)

    def _file_of(self, txn: lmdb.Transaction, tp: TopicIdPartition, e: _Entry) -> tuple[str, int, int]:
        """Object key, uploader and file size of the WAL object ``e`` references."""
        raw_key = txn.get(_U64.pack(e.file_id), db=self._db_file_ids)
        raw = None if raw_key is None else txn.get(raw_key, db=self._db_files)
        if raw_key is None or raw is None:
            raise CorruptEntryError(f"partition {tp} offset {e.base_offset}: unknown file_id {e.file_id}")
        _, _, _, uploader, file_size = _FILE.unpack(raw)
        return bytes(raw_key).decode(), uploader, file_size

    def append_replicated(
        self,
        tp: TopicIdPartition,
        entries: Iterable[ReplicatedEntry],
        *,
        leader_high_watermark: int,
        leader_log_start_offset: int,
    ) -> int:
        """The follower's append of entries from the leader's :meth:`read_log`;
        returns the new log end offset.

        As Kafka's follower (``AppendOrigin.REPLICATION``): the entries keep
        the leader's offsets, headers and epochs; nothing is re-sequenced and
        producer sequences are not checked, but producer state advances as on
        the leader, so this store can take over as leader and still answer a
        retry of a batch the old leader wrote as a duplicate.  A new epoch in
        the entries starts an epoch-cache entry at its first offset.  Then
        the log start follows the leader's (never past the log end) and the
        HWM rises to the leader's (capped at the log end), persisted in the
        same transaction.  Empty ``entries`` only moves log start and HWM,
        without a write transaction unless the log start moves.

        Raises :class:`ReplicationError` (naming partition and offset, nothing
        written) when the entries do not continue this log, an epoch goes
        backwards, or an entry is malformed; KeyError for an unknown partition.
        """
        self._check_writable()
        items = list(entries)
        # Stateless checks in the caller's thread, before the pipeline drains.
        headers = [_check_replicated(tp, e) for e in items]
        if not items:
            cached = self._parts.get(tp)
            if cached is None:
                raise KeyError(f"unknown partition {tp}")
            if min(leader_log_start_offset, cached.log_end_offset) <= cached.log_start_offset:
                self.set_high_watermark(tp, leader_high_watermark)
                return cached.log_end_offset

        def fn(s: _Staged) -> int:
            part = s.part(tp)
            if part is None:
                raise KeyError(f"unknown partition {tp}")
            txn = s.wtxn
            part_id = part.part_id
            latest_epoch = self._latest_epoch(txn, part_id)
            # Validate everything against this log before writing anything.
            expect = part.log_end_offset
            if headers and part.live_batches == 0:
                h0 = headers[0]
                if h0.base_offset < expect <= h0.base_offset + h0.last_offset_delta:
                    # The leader's log start lies inside its first batch (a
                    # DeleteRecords) and this empty log starts there: take the
                    # whole batch, the log start stays inside it, as Kafka's
                    # follower restarts its log at the batch's base offset.
                    expect = h0.base_offset
            epoch = latest_epoch
            for h in headers:
                if h.base_offset != expect:
                    raise ReplicationError(
                        f"partition {tp}: replicated entry at offset {h.base_offset} does not continue the log: "
                        f"expected offset {expect}"
                    )
                if h.partition_leader_epoch < epoch:
                    raise ReplicationError(
                        f"partition {tp}: replicated entry at offset {h.base_offset} has leader epoch "
                        f"{h.partition_leader_epoch}, below {epoch}"
                    )
                epoch = h.partition_leader_epoch
                expect = h.base_offset + h.last_offset_delta + 1

            now = self._clock()
            expiration_ms = self.producer_id_expiration_ms
            # object key -> [file_id, batches, bytes, uploader, file size]
            files: dict[str, list[int]] = {}
            puts: list[tuple[bytes, bytes]] = []
            running_max = part.running_max_timestamp
            epoch = latest_epoch
            for e, h in zip(items, headers, strict=True):
                acc = files.get(e.object_key)
                if acc is None:
                    file_id = self._resolve_file(s, e.object_key)
                    if file_id < 0:
                        file_id = s.next_id(b"next_file_id")
                    acc = files[e.object_key] = [file_id, 0, 0, e.uploader_broker_id, e.file_size]
                acc[1] += 1
                acc[2] += e.size
                base = h.base_offset
                last = base + h.last_offset_delta
                # The stored maxTimestamp is what ListOffsets and retention use
                # (the append time on LogAppendTime topics), as on the leader.
                effective_ts = h.max_timestamp
                if effective_ts > running_max:
                    running_max = effective_ts
                if effective_ts > part.max_timestamp and part.max_timestamp_offset != -2:
                    part.max_timestamp = effective_ts
                    part.max_timestamp_offset = base
                body = e.header + _ENTRY_TAIL.pack(
                    acc[0],
                    e.byte_offset,
                    e.size,
                    e.log_append_time,
                    e.batch_max_timestamp,
                    running_max,
                    s.next_id(b"next_batch_id"),
                )
                puts.append((_PART_KEY.pack(part_id, base), body + _ENTRY_CRC.pack(crc32c(body))))
                if h.partition_leader_epoch > epoch:
                    epoch = h.partition_leader_epoch
                    self._assign_epoch(txn, part_id, epoch, base)
                pid = h.producer_id
                if pid >= 0:
                    entry = s.producer(part_id, pid)
                    if entry is not None and now - entry.last_timestamp >= expiration_ms:
                        entry = None  # expired, as the leader's lookup decides
                    s.producers[(part_id, pid)] = after_append(
                        entry,
                        h.producer_epoch,
                        AppendedBatch(
                            h.base_sequence, h.last_sequence, base, last, e.batch_max_timestamp, e.log_append_time
                        ),
                    )
                part.live_batches += 1
                part.live_bytes += e.size
                part.log_end_offset = last + 1
            if puts:
                _, added = txn.cursor(db=self._db_log).putmulti(puts, overwrite=False)
                assert added == len(puts), "a replicated entry overwrote one past the log end"
            for object_key, (file_id, nb, nbytes, uploader, file_size) in files.items():
                self._file_add(txn, object_key, file_id, nb, nbytes, uploader, file_size)
            part.running_max_timestamp = running_max
            if epoch > part.leader_epoch:
                part.leader_epoch = epoch
            leo = part.log_end_offset
            new_lso = min(leader_log_start_offset, leo)
            if new_lso > part.log_start_offset:
                part.log_start_offset = new_lso
                self._drop_entries(s, part, until_offset=new_lso)
            # Kafka's follower HWM: the leader's, capped at the log end, and
            # never below the log start; ours also never goes down here.
            hwm = max(part.high_watermark, min(leader_high_watermark, leo), part.log_start_offset)
            part.high_watermark = hwm
            s.hwms[tp] = (hwm, False)
            return leo

        return self._write(fn)

    def _file_add(
        self, txn: lmdb.Transaction, object_key: str, file_id: int, batches: int, nbytes: int, uploader: int, size: int
    ) -> None:
        """Add references to the file index, as a group commit does: the first
        reference records uploader and size, later ones only count."""
        k = object_key.encode()
        raw = txn.get(k, db=self._db_files)
        if raw is None:
            txn.put(k, _FILE.pack(file_id, batches, nbytes, uploader, size), db=self._db_files)
            txn.put(_U64.pack(file_id), k, db=self._db_file_ids)
            return
        old_fid, old_nb, old_nbytes, old_uploader, old_size = _FILE.unpack(raw)
        assert old_fid == file_id, f"{object_key}: file_id {old_fid} on disk, {file_id} resolved"
        txn.put(
            k, _FILE.pack(file_id, old_nb + batches, old_nbytes + nbytes, old_uploader, old_size), db=self._db_files
        )

    def truncate_to(self, tp: TopicIdPartition, offset: int) -> int:
        """Remove the follower's divergent suffix: every entry whose last
        offset is >= ``offset`` (Kafka's ``truncateTo``, at a batch boundary:
        the log end becomes the base of the first entry removed).  Returns the
        number of entries removed; 0 if ``offset`` is at or past the log end
        (epochs starting at the log end still go, as in Kafka).

        In one transaction: the removed entries' file references, epoch-cache
        entries starting at or after the new log end, and the HWM (persisted
        and in memory; the only call that lowers it) capped at the new log
        end; producers that had a batch in the suffix get their state rebuilt
        from their remaining entries (deleted if none remain), so a truncated
        sequence can be sent again.  The log start stays unless the cut
        batch held it (then it becomes the new log end: the log is empty).

        Raises ValueError for ``offset`` below the log start, KeyError for an
        unknown partition.
        """

        def fn(s: _Staged) -> int:
            cached = self._parts.get(tp)
            if cached is None:
                raise KeyError(f"unknown partition {tp}")
            if offset < cached.log_start_offset:
                raise ValueError(
                    f"partition {tp}: cannot truncate to offset {offset}, "
                    f"below the log start offset {cached.log_start_offset}"
                )
            if offset >= cached.log_end_offset:
                # No entry goes, but as Kafka an epoch this replica started
                # as leader without appending anything does: the new
                # leader's entries may carry older epochs.
                self._truncate_epochs(s.wtxn, cached.part_id, cached.log_end_offset)
                return 0
            part = s.part(tp)
            assert part is not None
            txn = s.wtxn
            first = self._entry_containing(txn, part, offset)
            if first is None:
                raise CorruptEntryError(f"partition {tp}: no entry holds offset {offset}")
            new_leo = first[1].base_offset
            removed, pids = self._drop_suffix(s, part, new_leo)
            part.log_end_offset = new_leo
            part.log_start_offset = min(part.log_start_offset, new_leo)
            part.high_watermark = min(part.high_watermark, new_leo)
            s.hwms[tp] = (part.high_watermark, True)
            if part.max_timestamp_offset >= new_leo:
                part.max_timestamp_offset = -2  # rescanned on demand, as after a deletion
            if part.live_batches == 0:
                part.max_timestamp, part.max_timestamp_offset = -1, -1
            # The last remaining entry holds the exact running max of the prefix.
            prefix = _U32.pack(part.part_id)
            cur = txn.cursor(db=self._db_log)
            if _last_under(cur, prefix) and cur.key()[:4] == prefix:
                last = _decode_entry(cur.value(), f"partition {tp} offset {_PART_KEY.unpack(cur.key())[1]}")
                part.running_max_timestamp = last.running_max_timestamp
            else:
                part.running_max_timestamp = -1
            self._truncate_epochs(txn, part.part_id, new_leo)
            self._rebuild_producers(s, part, pids)
            return removed

        return self._write(fn)

    def _truncate_epochs(self, txn: lmdb.Transaction, part_id: int, end_offset: int) -> None:
        """Kafka's ``LeaderEpochFileCache.truncateFromEnd``: drop the epochs
        starting at or after ``end_offset`` (start offsets ascend with the
        epochs, so they are the newest ones)."""
        prefix = _U32.pack(part_id)
        cur = txn.cursor(db=self._db_epochs)
        doomed = []
        found = _last_under(cur, prefix)
        while found and cur.key()[:4] == prefix and _I64.unpack(cur.value())[0] >= end_offset:
            doomed.append(bytes(cur.key()))
            found = cur.prev()
        for key in doomed:
            txn.delete(key, db=self._db_epochs)

    def _drop_suffix(self, s: _Staged, part: _Part, from_offset: int) -> tuple[int, set[int]]:
        """Delete entries with base offset >= ``from_offset``, keeping the live
        counters and the file index exact; returns how many, and the producer
        ids they held."""
        txn = s.wtxn
        per_file: dict[int, list[int]] = {}
        pids: set[int] = set()
        cur = txn.cursor(db=self._db_log)
        prefix = _U32.pack(part.part_id)
        dropped = 0
        if cur.set_range(_PART_KEY.pack(part.part_id, from_offset)):
            while cur.key()[:4] == prefix:
                k = cur.key()
                e = _decode_entry(cur.value(), f"partition {part.tp} offset {_PART_KEY.unpack(k)[1]}")
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

    def _rebuild_producers(self, s: _Staged, part: _Part, pids: set[int]) -> None:
        """Producer state of ``pids`` as replaying the partition's remaining
        entries gives it (Kafka's ``rebuildProducerState`` after a truncation).

        A window holds only the trailing batches of the producer's latest
        epoch, at most NUM_BATCHES_TO_RETAIN, so one backward scan from the
        log end finds them all and stops once every producer is complete.
        """
        if not pids:
            return
        open_pids = set(pids)
        found: dict[int, list[_Entry]] = {}
        prefix = _U32.pack(part.part_id)
        cur = s.wtxn.cursor(db=self._db_log)
        positioned = _last_under(cur, prefix)
        while open_pids and positioned and cur.key()[:4] == prefix:
            e = _decode_entry(cur.value(), f"partition {part.tp} offset {_PART_KEY.unpack(cur.key())[1]}")
            pid = e.header.producer_id
            if pid in open_pids:
                newest_first = found.setdefault(pid, [])
                if newest_first and e.header.producer_epoch != newest_first[0].header.producer_epoch:
                    open_pids.discard(pid)  # an older epoch: its batches left the window
                else:
                    newest_first.append(e)
                    if len(newest_first) == NUM_BATCHES_TO_RETAIN:
                        open_pids.discard(pid)
            positioned = cur.prev()
        for pid in pids:
            entry: ProducerEntry | None = None
            for e in reversed(found.get(pid, [])):
                h = e.header
                entry = after_append(
                    entry,
                    h.producer_epoch,
                    AppendedBatch(
                        h.base_sequence,
                        h.last_sequence,
                        e.base_offset,
                        e.last_offset,
                        e.batch_max_timestamp,
                        e.log_append_time,
                    ),
                )
            s.producers[(part.part_id, pid)] = entry

    def reset_to(self, tp: TopicIdPartition, offset: int) -> None:
        """Empty the partition's log and restart it at ``offset`` (Kafka's
        ``truncateFullyAndStartAt``), for a follower whose log end fell below
        the leader's log start: every entry and its file references, the
        producer states and the epoch cache go; log start, log end and HWM
        become ``offset``.  KeyError for an unknown partition, ValueError for
        a negative offset."""
        if offset < 0:
            raise ValueError(f"partition {tp}: cannot reset to negative offset {offset}")

        def fn(s: _Staged) -> None:
            part = s.part(tp)
            if part is None:
                raise KeyError(f"unknown partition {tp}")
            self._drop_entries(s, part, until_offset=None)
            part.log_start_offset = part.log_end_offset = part.high_watermark = offset
            part.running_max_timestamp = part.max_timestamp = part.max_timestamp_offset = -1
            s.hwms[tp] = (offset, True)
            prefix = _U32.pack(part.part_id)
            self._drop_prefix_keys(s.wtxn, self._db_producers, prefix)
            for k in {k for k in (*self._producers, *s.producers) if k[0] == part.part_id}:
                s.producers[k] = None
            self._drop_prefix_keys(s.wtxn, self._db_epochs, prefix)

        self._write(fn)

    # ------------------------------------------------------ file references

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
            return {
                bytes(k).decode(): FileUsage(_FILE.unpack(v)[1], _FILE.unpack(v)[2])
                for k, v in txn.cursor(db=self._db_files)
            }

    # ----------------------------------------------------------- inspection

    def partitions(self) -> list[TopicIdPartition]:
        with self._read() as txn:
            return [_Part.unpack(_U32.unpack(k)[0], v).tp for k, v in txn.cursor(db=self._db_parts)]

    def topics(self) -> dict[uuid.UUID, tuple[str, int]]:
        """topic_id -> (name, number of partitions) of every topic, from the
        durable state (so a ``readonly`` store in another process sees them)."""
        with self._read() as txn:
            out: dict[uuid.UUID, tuple[str, int]] = {}
            for k, v in txn.cursor(db=self._db_topics):
                name, n, _ = msgpack.unpackb(v)
                out[uuid.UUID(bytes=bytes(k))] = (str(name), int(n))
            return out

    def partition_state(self, tp: TopicIdPartition) -> dict[str, int]:
        """log_start_offset, log_end_offset, high_watermark, leader_epoch, live_batches, live_bytes."""
        with self._read() as txn:
            part = self._read_part(txn, tp)
        if part is None:
            raise KeyError(f"unknown partition {tp}")
        return {
            "log_start_offset": part.log_start_offset,
            "log_end_offset": part.log_end_offset,
            "high_watermark": part.high_watermark,
            "leader_epoch": part.leader_epoch,
            "live_batches": part.live_batches,
            "live_bytes": part.live_bytes,
        }

    def check(self) -> list[str]:
        """Full consistency check: every entry's CRC, contiguous offsets, the
        partition counters and the file index recomputed from the logs.
        Returns the problems found (empty when the store is sound)."""
        problems: list[str] = []
        usage: dict[int, list[int]] = {}
        with self._read() as txn:
            for pk, pv in txn.cursor(db=self._db_parts):
                part = _Part.unpack(_U32.unpack(pk)[0], pv)
                expect = None
                batches = nbytes = 0
                first = True
                try:
                    for _, e in self._entries(txn, part):
                        if first and not e.base_offset <= part.log_start_offset <= e.last_offset:
                            problems.append(f"{part.tp}: log start {part.log_start_offset} not in first batch")
                        first = False
                        if expect is not None and e.base_offset != expect:
                            problems.append(f"{part.tp}: gap or overlap at offset {e.base_offset}, expected {expect}")
                        expect = e.last_offset + 1
                        batches += 1
                        nbytes += e.size
                        acc = usage.setdefault(e.file_id, [0, 0])
                        acc[0] += 1
                        acc[1] += e.size
                except CorruptEntryError as err:
                    problems.append(str(err))
                    continue
                if expect is None and part.log_start_offset != part.log_end_offset:
                    problems.append(
                        f"{part.tp}: empty log but start {part.log_start_offset} != end {part.log_end_offset}"
                    )
                if expect is not None and expect != part.log_end_offset:
                    problems.append(f"{part.tp}: last entry ends at {expect}, log end is {part.log_end_offset}")
                if (batches, nbytes) != (part.live_batches, part.live_bytes):
                    problems.append(
                        f"{part.tp}: counters say {part.live_batches} batches/{part.live_bytes} bytes, "
                        f"log has {batches}/{nbytes}"
                    )
                # The persisted values; the in-memory HWM only ever lies in
                # [persisted HWM, log end] too.
                if not part.log_start_offset <= part.high_watermark <= part.log_end_offset:
                    problems.append(
                        f"{part.tp}: log start {part.log_start_offset}, high watermark {part.high_watermark} "
                        f"and log end {part.log_end_offset} out of order"
                    )
                # The epoch cache: start offsets ascending with the epochs, none past the log end.
                prefix = _U32.pack(part.part_id)
                ecur = txn.cursor(db=self._db_epochs)
                previous = 0
                if ecur.set_range(prefix):
                    for k, v in ecur:
                        if k[:4] != prefix:
                            break
                        epoch, start = _EPOCH_KEY.unpack(k)[1], _I64.unpack(v)[0]
                        if not previous <= start <= part.log_end_offset:
                            problems.append(f"{part.tp}: epoch {epoch} starts at {start}, out of order")
                        previous = start
            index: dict[int, list[int]] = {}
            for k, v in txn.cursor(db=self._db_files):
                fid, nb, nbytes, _, _ = _FILE.unpack(v)
                index[fid] = [nb, nbytes]
                back = txn.get(_U64.pack(fid), db=self._db_file_ids)
                if back is None or bytes(back) != bytes(k):
                    problems.append(f"file index: {bytes(k).decode()!r} has no reverse entry")
        if index != usage:
            problems.append(f"file index differs from the logs: index={index} logs={usage}")
        for tp, mem in list(self._hwms.items()):
            cached = self._parts.get(tp)
            if cached is None or mem > cached.log_end_offset:
                problems.append(f"{tp}: in-memory high watermark {mem} past the log end or of no partition")
        return problems


def _check_replicated(tp: TopicIdPartition, e: ReplicatedEntry) -> BatchHeader:
    """Stateless checks of one replicated entry; returns its parsed header.

    The leader validated the batch when it committed it; these catch a broken
    transfer or a broker bug before it reaches this log.  The batch CRC is not
    checked: the records are not here.
    """
    if len(e.header) != bh.HEADER_SIZE:
        raise ReplicationError(f"partition {tp}: replicated header is {len(e.header)} bytes, expected {bh.HEADER_SIZE}")
    h = BatchHeader.parse(e.header)
    where = f"partition {tp}: replicated entry at offset {h.base_offset}"
    if h.magic != bh.MAGIC_V2:
        raise ReplicationError(f"{where}: magic {h.magic}, expected {bh.MAGIC_V2}")
    if h.size < bh.HEADER_SIZE or h.size != e.size:
        raise ReplicationError(f"{where}: size {e.size} disagrees with the header's batch length {h.batch_length}")
    if h.base_offset < 0 or h.last_offset_delta < 0:
        raise ReplicationError(f"{where}: bad offsets (last offset delta {h.last_offset_delta})")
    if h.partition_leader_epoch < 0:
        raise ReplicationError(f"{where}: no partition leader epoch ({h.partition_leader_epoch})")
    if not 0 < len(e.object_key.encode()) <= OBJECT_KEY_BYTES_MAX:
        raise ReplicationError(f"{where}: object key {e.object_key!r} is empty or over {OBJECT_KEY_BYTES_MAX} bytes")
    if e.file_size <= 0 or e.byte_offset < 0 or e.byte_offset + e.size > e.file_size:
        raise ReplicationError(
            f"{where}: byte range [{e.byte_offset}, {e.byte_offset + e.size}) outside file size {e.file_size}"
        )
    if h.timestamp_type == TimestampType.LOG_APPEND_TIME:
        if e.log_append_time != h.max_timestamp:
            raise ReplicationError(f"{where}: log append time {e.log_append_time}, header says {h.max_timestamp}")
    elif e.log_append_time != -1 or e.batch_max_timestamp != h.max_timestamp:
        raise ReplicationError(
            f"{where}: CreateTime batch with log append time {e.log_append_time} "
            f"or max timestamp {e.batch_max_timestamp} != header's {h.max_timestamp}"
        )
    if h.producer_id >= 0:
        if h.producer_epoch < 0 or h.base_sequence < 0:
            raise ReplicationError(f"{where}: producer {h.producer_id} without epoch or sequence")
    elif h.producer_id != bh.NO_PRODUCER_ID:
        raise ReplicationError(f"{where}: producer id {h.producer_id}")
    return h


def _last_under(cur: lmdb.Cursor, prefix: bytes) -> bool:
    """Position ``cur`` on the last key before the first key above every key
    starting with ``prefix``; the caller checks that key's prefix.  False if
    there is no such key."""
    # Every key under the prefix is shorter than this bound and sorts below it.
    if cur.set_range(prefix + b"\xff" * 16):
        return bool(cur.prev())
    return bool(cur.last())


def _error(err: Errors, req: CommitBatchRequest) -> CommitBatchResponse:
    return CommitBatchResponse(err, -1, -1, -1, False, req)


def _check_batch(req: CommitBatchRequest, file_size: int) -> tuple[int, ...] | Errors:
    """Stateless checks of one batch (Kafka's LogValidator role).

    Returns the header's fields as a tuple (BatchHeader field order) when
    valid, else the error.  Runs once per batch, so it avoids objects.
    """
    header = req.header
    if len(header) != bh.HEADER_SIZE:
        return Errors.CORRUPT_MESSAGE
    h = _HEADER_UNPACK(header)
    # 0 base_offset 1 batch_length 2 leader_epoch 3 magic 4 crc 5 attributes
    # 6 last_offset_delta 7 base_ts 8 max_ts 9 producer_id 10 epoch 11 base_seq 12 count
    if h[3] != bh.MAGIC_V2:
        return Errors.CORRUPT_MESSAGE
    size = req.size
    if h[1] + bh.LOG_OVERHEAD < bh.HEADER_SIZE or size != h[1] + bh.LOG_OVERHEAD:
        return Errors.CORRUPT_MESSAGE
    if type(req.byte_offset) is not int or req.byte_offset < 0 or req.byte_offset + size > file_size:
        return Errors.INVALID_REQUEST
    delta = h[6]
    if delta < 0 or h[12] != delta + 1:
        return Errors.INVALID_RECORD
    pid = h[9]
    base_seq = h[11]
    if (
        req.last_offset - req.base_offset != delta
        or req.producer_id != pid
        or req.producer_epoch != h[10]
        or req.base_sequence != base_seq
        or req.last_sequence != (bh.NO_SEQUENCE if base_seq == bh.NO_SEQUENCE else increment_sequence(base_seq, delta))
        or req.batch_max_timestamp != h[8]
        or req.message_timestamp_type != (h[5] & bh.ATTR_TIMESTAMP_TYPE) >> 3
    ):
        return Errors.INVALID_REQUEST
    if h[5] & (bh.ATTR_TRANSACTIONAL | bh.ATTR_CONTROL):
        return Errors.INVALID_RECORD  # transactions are not supported (design.md)
    if pid >= 0:
        if h[10] < 0 or h[11] < 0:
            return Errors.INVALID_RECORD
    elif pid != bh.NO_PRODUCER_ID:
        return Errors.INVALID_RECORD
    return h
