"""MetadataStore: one broker's metadata logs, in one LMDB environment.

Each partition this broker leads or follows has a metadata log of entries ``[patched 61-byte v2 batch header | WAL
reference]``: as leader it sequences commits exactly as a Kafka partition leader sequences its log, as follower it
appends the leader's entries at the leader's offsets and epochs (:meth:`MetadataStore.read_log`,
:meth:`~MetadataStore.append_replicated`, :meth:`~MetadataStore.truncate_to`, :meth:`~MetadataStore.reset_to`; with
``auto_high_watermark=False`` the owner drives the high watermark).  The API mirrors KIP-1164's BatchCoordinator, per
leader (:mod:`partlog.kafka.records`).

Concurrent ``commit_file`` calls are sequenced into a group against the in-memory state, made durable by ONE journal
append before anyone is answered, and applied to LMDB later by checkpoints; every other write runs exclusively
(:mod:`~partlog.store.writes`).  Each operation validates before it writes.  A failed commit, or a failed check of the
durable state (:func:`layout.verify <partlog.store.layout.verify>`), fail-stops the store until :meth:`reopen
<MetadataStore.reopen>`. Readers read LMDB plus the overlay of durable groups not yet applied, never the caches, so a
``readonly`` store in another process, which follows the journal, sees the same.

:class:`MetadataStore` is the facade and the only public class.  As Kafka's ``UnifiedLog`` owns ``LocalLog``,
``ProducerStateManager`` and ``LeaderEpochFileCache``, it owns components, each with its own state:

* :mod:`~partlog.store.env`: the LMDB environment (transactions, map growth, the gate closing waits for);
  :mod:`~partlog.store.catalog`: topics, partition states, id counters and in-memory high watermarks;
* :mod:`~partlog.store.log`: the log chunks (entries: read, append, cut); :mod:`~partlog.store.index`: file
  references, pending ones too (walmgr's), and :mod:`~partlog.store.release_grace`: those released a moment ago;
* :mod:`~partlog.store.epochs`, :mod:`~partlog.store.producers`, :mod:`~partlog.store.txns`: the leader-epoch cache,
  the producer table, the partitions' transactions and aborted-transaction index; :mod:`~partlog.store.verification`:
  KIP-890 guards, in memory;
* :mod:`~partlog.store.sequencer`: the pure :class:`Sequencer` (Kafka's sequencing of a commit: state in, answers and
  a delta out), and :mod:`~partlog.store.markers` (a transaction marker's);
* :mod:`~partlog.store.writes` (on :mod:`~partlog.store.group_commit`), :mod:`~partlog.store.checkpoint` (with
  :mod:`~partlog.store.journal`) and :mod:`~partlog.store.view`: the write paths, durability and recovery, and what
  readers see; :mod:`~partlog.store.staged`: how writes see state;
* ``reads``, ``replication``, ``retention``, ``topics``, ``check``: operations that span components; ``layout``:
  formats, records, errors; ``options``: open's; ``shutdown``: the unclean-shutdown marker.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Self

from partlog.kafka.producer_state import PRODUCER_ID_EXPIRATION_MS_DEFAULT
from partlog.kafka.records import (
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
    LogRead,
    ReplicatedEntry,
    TopicIdPartition,
    TxnMarkerRequest,
    TxnMarkerResponse,
)
from partlog.kafka.topic_config import TopicConfig
from partlog.runtime import SYSTEM_CLOCK
from partlog.store import compaction, retention, shutdown, topics
from partlog.store.catalog import Catalog
from partlog.store.check import check_store
from partlog.store.checkpoint import Checkpointer
from partlog.store.compaction import SegmentRewrite
from partlog.store.env import open_files
from partlog.store.epochs import EpochCache
from partlog.store.follower_commit import FollowerCall, ReplicaAppend, ReplicaWrites
from partlog.store.index import FileIndex
from partlog.store.journal import JOURNAL_SEGMENT_BYTES_DEFAULT
from partlog.store.layout import (
    CHECKPOINT_GROUPS_MAX_DEFAULT,
    CHECKPOINT_INTERVAL_MS_DEFAULT,
    COMMIT_DEADLINE_MS_DEFAULT,
    ENTRY_SIZE,
    FORMAT_VERSION,
    GROUP_COMMIT_BATCHES_MAX,
    KEY_CLUSTER_ID,
    MAP_SIZE_BYTES_DEFAULT,
    MAP_SIZE_BYTES_MAX,
    MAP_SIZE_BYTES_MIN,
    CommitGroup,
    CorruptEntryError,
    OffsetOutOfRangeError,
    ReplicationError,
    StoreError,
    StoreInconsistentError,
    T,
)
from partlog.store.log import LogChunks
from partlog.store.markers import prepare_markers
from partlog.store.options import StoreOptions
from partlog.store.producers import ProducerTable
from partlog.store.reads import LogReader
from partlog.store.release_grace import RELEASED_KEYS_MAX, ReleaseGrace
from partlog.store.replication import FollowerLog
from partlog.store.segments import Segment, SegmentSwap, SegmentSwapResult
from partlog.store.sequencer import prepare
from partlog.store.staged import Staged
from partlog.store.txns import TxnTable
from partlog.store.verification import GuardKey, VerificationGuards, txn_open
from partlog.store.view import Views
from partlog.store.writes import Writes

__all__ = [
    "COMMIT_DEADLINE_MS_DEFAULT",
    "ENTRY_SIZE",
    "FORMAT_VERSION",
    "GROUP_COMMIT_BATCHES_MAX",
    "MAP_SIZE_BYTES_DEFAULT",
    "MAP_SIZE_BYTES_MAX",
    "MAP_SIZE_BYTES_MIN",
    "CorruptEntryError",
    "LogRead",
    "MetadataStore",
    "OffsetOutOfRangeError",
    "ReplicaAppend",
    "ReplicatedEntry",
    "ReplicationError",
    "Segment",
    "SegmentSwap",
    "SegmentSwapResult",
    "StoreError",
    "StoreInconsistentError",
]

log = logging.getLogger(__name__)


class MetadataStore:
    """The metadata logs of all partitions of one broker (see the package doc).

    The API mirrors KIP-1164's BatchCoordinator, per leader.  Thread-safe:
    any number of threads may call any method; writes from concurrent callers
    share transactions (group commit).  Made by :meth:`open`."""

    def __init__(self, path: str, options: StoreOptions) -> None:
        self.path = path
        self._options = options
        self.readonly = options.readonly
        self.sync = options.sync
        self.auto_high_watermark = options.auto_high_watermark
        self.commit_deadline_ms = options.commit_deadline_ms
        self.producer_id_expiration_ms = options.producer_id_expiration_ms
        self.group_commit_batches_max = options.group_commit_batches_max
        self.checkpoint_groups_max = options.checkpoint_groups_max
        self.checkpoint_interval_ms = options.checkpoint_interval_ms
        self.checkpoint_backlog_groups_max = options.backlog_groups_max
        # close() is final and excludes reopen(): a reopen in a worker thread must not open
        # an environment nobody closes after the owner closed.
        self._lifecycle, self._shut = threading.Lock(), False
        self.verification = VerificationGuards()  # KIP-890's, in memory; they outlive a reopen too
        # Outlives a reopen (a follower's holds span it); an open starts a blanket grace, unless new.
        self.release_grace = ReleaseGrace(options.release_grace_ms, options.monotonic or SYSTEM_CLOCK.monotonic)
        if os.path.exists(os.path.join(path, "data.mdb")):
            self.release_grace.opened()
        self.unclean_shutdown = not self.readonly and shutdown.opened(path, sync=options.sync, boot_id=options.boot_id)
        self._attach()

    def _attach(self) -> None:
        """Open the environment and the journal, build the components on
        them, and bring them up to date (recovery, or following the journal
        when ``readonly``): what :meth:`open` and :meth:`reopen` share.  The
        store takes them only once all is done: a reopen that fails leaves
        it closed and failed, to be reopened again."""
        o = self._options
        env, journal = open_files(self.path, o)
        stats = env.stats
        clock = o.clock or SYSTEM_CLOCK.wall_ms
        catalog, index, epochs = Catalog(env), FileIndex(env), EpochCache(env)
        producers, txns = ProducerTable(env), TxnTable(env)
        index.grace = self.release_grace
        log_chunks = LogChunks(env, index)
        checkpoints = Checkpointer(
            env,
            journal,
            catalog=catalog,
            index=index,
            log=log_chunks,
            producers=producers,
            txns=txns,
            stats=stats,
            groups_max=o.checkpoint_groups_max,
            interval_ms=o.checkpoint_interval_ms,
            backlog_groups_max=o.backlog_groups_max,
            monotonic=o.monotonic or SYSTEM_CLOCK.monotonic,
        )
        views = Views(env, lambda: checkpoints.overlay, checkpoints.follow if o.readonly else None)
        writes = Writes(
            env,
            checkpoints,
            views,
            catalog=catalog,
            producers=producers,
            index=index,
            txns=txns,
            epochs=epochs,
            options=o,
            clock=clock,
            commit_group=self._commit_group,
            stats=stats,
            guards=self.verification,
        )
        env.check_version()
        if o.readonly:
            # What the journal holds beyond the index; every read follows
            # the live journal of a writer in another process from here.
            checkpoints.replay_overlay()
        else:
            checkpoints.recover()
            with env.read() as txn:
                catalog.load(txn)
            if o.checkpoint_thread:
                checkpoints.start_thread(self.path, writes.pipeline)
        self.stats, self._env, self._journal, self._clock, self._closed = stats, env, journal, clock, False
        self._catalog, self._index, self._log, self._epochs, self._txns = catalog, index, log_chunks, epochs, txns
        self._producers, self._checkpoints, self._views, self._writes = producers, checkpoints, views, writes
        self._pipeline = writes.pipeline
        self._topics = topics.PartitionDrops(catalog, log_chunks, producers, epochs, txns)
        self._read = views.read  # a view: LMDB plus the journal's overlay
        self._reads = LogReader(
            views, catalog=catalog, log=log_chunks, index=index, epochs=epochs, txns=txns, readonly=o.readonly
        )
        self.verification.txn_open = functools.partial(txn_open, catalog, producers, views.read)
        self._follower = FollowerLog(
            catalog=catalog,
            log=log_chunks,
            index=index,
            epochs=epochs,
            producers=producers,
            txns=txns,
            clock=clock,
            producer_id_expiration_ms=o.producer_id_expiration_ms,
        )
        self._replica = ReplicaWrites(self._follower, self._submit_follower, self._write, clock)

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
        monotonic: Callable[[], float] | None = None,
        map_size_bytes: int = MAP_SIZE_BYTES_DEFAULT,
        group_commit_batches_max: int = GROUP_COMMIT_BATCHES_MAX,
        auto_high_watermark: bool = True,
        cluster_id: uuid.UUID | None = None,
        checkpoint_groups_max: int = CHECKPOINT_GROUPS_MAX_DEFAULT,
        checkpoint_interval_ms: int = CHECKPOINT_INTERVAL_MS_DEFAULT,
        checkpoint_thread: bool = True,
        journal_segment_bytes: int = JOURNAL_SEGMENT_BYTES_DEFAULT,
        checkpoint_backlog_groups_max: int | None = None,
        release_grace_ms: int = 0,
        boot_id: str | None = None,
    ) -> Self:
        """Open (creating unless ``readonly``) the store in directory ``path``, replaying its journal.  The
        options are :class:`~partlog.store.options.StoreOptions` (each explained there); ``cluster_id``:
        :meth:`bind_cluster` to it (not with ``readonly``).  ``unclean_shutdown``: whether the previous run may
        have lost acknowledged writes (KIP-966: :mod:`partlog.store.shutdown`, ``boot_id``).  Raises ValueError
        for an option out of range, :class:`StoreError` if the directory is not a store, or one of another cluster.
        """
        options = StoreOptions(
            sync=sync, readonly=readonly, commit_deadline_ms=commit_deadline_ms,
            producer_id_expiration_ms=producer_id_expiration_ms, clock=clock, monotonic=monotonic,
            map_size_bytes=map_size_bytes, group_commit_batches_max=group_commit_batches_max,
            auto_high_watermark=auto_high_watermark, checkpoint_groups_max=checkpoint_groups_max,
            checkpoint_interval_ms=checkpoint_interval_ms, checkpoint_thread=checkpoint_thread,
            journal_segment_bytes=journal_segment_bytes, release_grace_ms=release_grace_ms,
            checkpoint_backlog_groups_max=checkpoint_backlog_groups_max, boot_id=boot_id,
        )  # fmt: skip
        store = cls(os.fspath(path), options)
        if cluster_id is not None:
            try:
                store.bind_cluster(cluster_id)
            except BaseException:
                store.close()
                raise
        return store

    @property
    def failed(self) -> BaseException | None:
        """Why the store fail-stopped (a commit's I/O failed, or a check of
        its durable state), or None.  Every write then raises StoreError
        until :meth:`reopen`."""
        return self._pipeline.failed

    def reopen(self) -> None:
        """Recover from a fail-stop in place: wait for the operations in
        flight, close the environment, and open it again, reloading every
        cache from disk, as a restart would.  Nothing acknowledged is lost
        (acknowledged means durable); what the failed commits sequenced was
        never acknowledged and is gone.  High watermarks set in memory stay
        (they only ever covered durable entries).  The object stays the same,
        so its owners (the broker, replication) keep their reference."""
        with self._lifecycle:
            if self._shut:
                raise StoreError(f"{self.path}: the store was closed; it is not reopened")
            hwms, reopens = dict(self._catalog.hwms), self.stats.get("reopens", 0)
            self._close_env(checkpoint=True)
            self.release_grace.opened()
            self._attach()
            self._catalog.restore_hwms(hwms)
            self.stats["reopens"] = reopens + 1

    def close(self, *, checkpoint: bool = True) -> None:
        """Close, for good (a later :meth:`reopen` raises StoreError), once the
        operations in flight in other threads have ended (closing LMDB under a
        transaction would crash the process); new ones get StoreError.  With
        ``checkpoint`` (and no fail-stop) the journal is applied first;
        without, it stays for the next open to replay (the simulations' crash)."""
        with self._lifecycle:
            self._shut = True
            if self._close_env(checkpoint=checkpoint):
                shutdown.closed_cleanly(self.path)

    def _close_env(self, *, checkpoint: bool) -> bool:
        """True: closed with everything on disk (checkpointed, LMDB synced)."""
        self._checkpoints.stop_thread()
        if not self._env.gate.close():
            return False
        self._closed, clean = True, checkpoint and not self.readonly and self._pipeline.failed is None
        if clean:
            try:
                self._checkpoints.checkpoint()
            except Exception:
                # Nothing is lost: the next open replays the journal.
                log.exception("checkpoint at close failed path=%s", self.path)
                clean = False
        self._env.close(sync=clean)
        self._journal.close()
        return clean

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ plumbing

    @property
    def _overlay(self) -> tuple[CommitGroup, ...]:
        return self._checkpoints.overlay

    def _checkpoint(self) -> int:
        """Apply every durable group to LMDB now; returns how many."""
        return self._checkpoints.checkpoint()

    def _check_writable(self) -> None:
        if self._closed:
            raise StoreError(f"{self.path}: store is closed")
        if self.readonly:
            raise StoreError(f"{self.path}: store is open read-only")

    @contextmanager
    def _writing(self) -> Iterator[None]:
        """Count a write in flight, so that ``close`` waits for it."""
        self._check_writable()
        with self._env.gate.writing():
            yield

    def _exclusive(self, fn: Callable[[], T]) -> T:
        """``fn`` alone, the pipeline drained, counted as a write in flight."""
        with self._writing():
            return self._writes.exclusive(fn)

    def _write(self, fn: Callable[[Staged], T]) -> T:
        """Run ``fn`` alone in its own write transaction, the pipeline drained
        and the journal applied first (LMDB then holds everything
        acknowledged).  ``fn`` validates before it writes; if it raises, the
        transaction is aborted and nothing changes."""
        return self._exclusive(lambda: self._writes.staged(fn))

    # ------------------------------------------------------------ the commit path

    def commit_file(
        self,
        object_key: str,
        uploader_broker_id: int,
        file_size: int,
        batches: Sequence[CommitBatchRequest],
        guards: Mapping[GuardKey, int] | None = None,
    ) -> list[CommitBatchResponse]:
        """Sequence and append the batches of one WAL object (one commit RPC).

        All accepted batches are appended in ONE transaction; responses come in
        request order.  A batch that fails validation gets its Kafka error and
        leaves the others unaffected.  Batches of one partition are appended in
        request order, each seeing the producer state the previous one left.
        ``guards``: the tokens of ``verification.begin`` (KIP-890)."""
        self._check_writable()
        # Stateless checks in the caller's thread: they overlap another fsync.
        call = prepare(object_key, uploader_broker_id, file_size, batches, guards)
        with self._writing():
            return self._writes.submit(call)

    def write_txn_markers(self, markers: Sequence[TxnMarkerRequest], now_ms: int) -> list[TxnMarkerResponse]:
        """Kafka's leader side of WriteTxnMarkers (:mod:`partlog.store.markers`):
        one control batch (inline, timestamp ``now_ms``) per marker at its
        partition's log end, group committed; answers in request order."""
        with self._writing():
            return self._writes.submit_markers(prepare_markers(markers, now_ms))

    def _submit_follower(self, call: FollowerCall) -> list[int | ReplicationError | KeyError | None]:
        with self._writing():
            return self._writes.submit_follower(call)

    def _commit_group(self, group: CommitGroup) -> None:
        """Pipeline stage 2: the group's journal append (its durability)."""
        self._checkpoints.commit(group)

    def flush(self) -> None:
        """Apply everything acknowledged to the LMDB index now (a checkpoint
        with the pipeline drained): afterwards LMDB alone holds every
        acknowledged commit, as a backup or another process reading the
        files directly needs."""
        self._check_writable()
        self._write(lambda s: None)

    def copy_to(self, directory: str) -> None:
        """Write a consistent copy of the store into the empty ``directory``:
        the journal applied first, then LMDB's copy (everything acknowledged)."""

        def copy() -> None:
            with self._checkpoints.applied():
                self._env.copy(directory)

        self._exclusive(copy)

    def store_stats(self) -> dict[str, int]:
        """Counters and gauges for metrics: group commits, checkpoints and the groups they applied, groups
        replayed at open, map resizes, the journal's records and bytes, the overlay's length, the grace."""
        return {
            **self.stats,
            "journal_records": self._journal.stats["records"],
            "journal_bytes": self._journal.stats["bytes"],
            "overlay_groups": len(self._checkpoints.overlay),
            "checkpoint_groups_max": self.checkpoint_groups_max,
            "checkpoint_backlog_groups_max": self.checkpoint_backlog_groups_max,
            "release_grace_keys": self.release_grace.size(), "release_grace_blankets": self.release_grace.blankets,
            "release_grace_keys_max": RELEASED_KEYS_MAX,
            **self._reads.stats,
        }  # fmt: skip

    # ------------------------------------------------------------ topics and the cluster

    @property
    def cluster_id(self) -> uuid.UUID | None:
        """The cluster this store belongs to (:meth:`bind_cluster`), or None."""
        with self._read() as txn:
            raw = txn.get(KEY_CLUSTER_ID, db=self._env.meta)
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
        self._write(lambda s: topics.bind_cluster_id(s, self._env.meta, cluster_id, self.path))

    def create_topic_and_partitions(self, requests: Iterable[CreateTopicAndPartitionsRequest]) -> None:
        """Create topics and their partitions; idempotent for existing ones.

        A request for an existing topic with more partitions adds the missing
        ones (Kafka's CreatePartitions).  Raises ValueError for a bad request
        (negative partition count, invalid config), before anything changes.
        """
        reqs = list(requests)
        configs = topics.configs_of(reqs)
        self._write(lambda s: topics.create_topics(s, self._catalog, self._epochs, reqs, configs))

    def alter_topic_configs(self, topic_id: uuid.UUID, configs: dict[str, str | int]) -> None:
        """Change topic configs (Kafka names); raises KeyError for an unknown topic."""
        self._write(lambda s: topics.alter_topic(s, self._catalog, topic_id, configs))

    def delete_topics(self, topic_ids: Iterable[uuid.UUID]) -> None:
        """Delete topics: their logs, producer states, epochs and file references."""
        ids = set(topic_ids)
        self._write(lambda s: topics.delete_topics(s, self._topics, ids))

    def drop_partition_logs(self, tps: Iterable[TopicIdPartition]) -> list[TopicIdPartition]:
        """Empty the logs of partitions this broker no longer replicates (:meth:`topics.PartitionDrops.renew`);
        returns those that held anything.  Unknown partitions are skipped."""
        wanted = list(tps)
        return self._write(lambda s: self._topics.renew(s, wanted))

    def topic_config(self, topic_id: uuid.UUID) -> TopicConfig:
        """The topic's config, from the durable state; KeyError for an unknown topic."""
        return self._reads.topic_config(topic_id)

    def topics(self) -> dict[uuid.UUID, tuple[str, int]]:
        """topic_id -> (name, partitions) of every topic, durable (a ``readonly`` store sees them)."""
        return self._reads.topics()

    def partitions(self) -> list[TopicIdPartition]:
        return self._reads.partitions()

    # ------------------------------------------------------------ reads

    def find_batches(self, requests: Sequence[FindBatchRequest], fetch_max_bytes: int) -> list[FindBatchResponse]:
        """Coordinates of the batches a fetch at each request's offset returns.
        As Kafka (KIP-74): batches up to the high watermark (READ_COMMITTED:
        the LSO, with the aborted transactions overlapping them), within each
        request's ``max_partition_fetch_bytes`` and ``fetch_max_bytes`` overall,
        but the first batch of the first partition that has data is returned
        even if it exceeds both, so consumers always progress.  As Kafka's
        ``LocalLog.read``, an offset in [HWM, log end] gets an empty answer
        and only one past the log end is out of range: a new leader whose HWM
        still lags the old one's must not send consumers into an offset reset.
        """
        return self._reads.find_batches(requests, fetch_max_bytes)

    def list_offsets(self, requests: Sequence[ListOffsetsRequest]) -> list[ListOffsetsResponse]:
        """Kafka ListOffsets at batch granularity (see design.md)."""
        return self._reads.list_offsets(requests)

    def log_end_offset(self, tp: TopicIdPartition) -> int:
        """The log end offset, from memory (no transaction); on a leader it includes commits
        sequenced, not yet durable (at most two groups ahead).  KeyError: unknown."""
        return self._reads.known_part(tp).log_end_offset

    def log_start_offset(self, tp: TopicIdPartition) -> int:
        """The partition's log start offset, from memory (KeyError: unknown)."""
        return self._reads.known_part(tp).log_start_offset

    def log_bounds(self, tp: TopicIdPartition) -> tuple[int, int, int]:
        """(log end, log start, high watermark) in one lookup (a replica fetch asks for every partition)."""
        part = self._reads.known_part(tp)
        return part.log_end_offset, part.log_start_offset, self._catalog.effective_hwm(part)

    def last_stable_offset(self, tp: TopicIdPartition) -> int:
        """Kafka's LSO (:func:`partlog.store.txns.last_stable_offset`), from memory (KeyError: unknown)."""
        return self._reads.last_stable_offset(tp)

    def high_watermark(self, tp: TopicIdPartition) -> int:
        """The effective HWM (persisted or in memory, whichever is ahead, at most the log end); KeyError: unknown."""
        return self._catalog.effective_hwm(self._reads.known_part(tp))

    def partition_state(self, tp: TopicIdPartition) -> dict[str, int]:
        """log_start_offset, log_end_offset, high_watermark, leader_epoch, live_batches, live_bytes."""
        return self._reads.partition_state(tp)

    def references_held(self, object_keys: Iterable[str]) -> set[str]:
        """The ``object_keys`` an entry references (above the HWM, not yet durable too: store.md) or a row names."""
        keys = list(object_keys)
        return self._index.referenced(self._views, keys) | self._reads.segment_row_keys(keys)

    def referenced_files(self, object_keys: Iterable[str]) -> set[str]:
        """walmgr's answer: :meth:`references_held`, and what ``partlog.store.release_grace`` covers, asked
        last: a release is noted before its write commits, so a key the index no longer holds is covered by then."""
        keys = list(object_keys)
        return self.references_held(keys) | self.release_grace.covered(keys)

    def file_usage(self) -> dict[str, FileUsage]:
        """Live batches and bytes per referenced WAL object."""
        with self._read() as txn:
            return self._index.usage(txn)

    def check(self) -> list[str]:
        """The problems a full check finds: entry CRCs, offsets, counters, transactions, the file index."""
        return check_store(
            self._views, catalog=self._catalog, log=self._log, epochs=self._epochs, index=self._index, txns=self._txns
        )

    # ------------------------------------------------------------ leader epochs and replication

    def set_leader_epoch(self, tp: TopicIdPartition, leader_epoch: int) -> None:
        """Lead at ``leader_epoch`` (>= the current): new entries get it, the epoch cache its start."""
        self._write(lambda s: self._epochs.become_leader(s, tp, leader_epoch))

    def leader_epoch_cache(self, tp: TopicIdPartition) -> list[tuple[int, int]]:
        """(leader_epoch, start_offset) pairs, ascending."""
        return self._reads.leader_epoch_cache(tp)

    def latest_leader_epochs(self, tps: Sequence[TopicIdPartition]) -> list[int]:
        """The newest epoch of each cache, -1 if empty: one LMDB read for all."""
        return self._reads.latest_leader_epochs(tps)

    def partition_version(self, tp: TopicIdPartition) -> object:
        """A token (``is``) replaced by each write to the partition, once sequenced (copy on write)."""
        return self._reads.known_part(tp)

    def partition_version_is(self, version: object) -> bool:  # still current (LogReader.version_is)
        return self._reads.version_is(version)

    def read_log(
        self, tp: TopicIdPartition, from_offset: int, max_bytes: int, max_entries: int | None = None
    ) -> LogRead:
        """The leader's side of a follower fetch: entries from ``from_offset`` (the batch holding it, if it falls
        inside one) in offset order, above the HWM too (followers replicate everything).  At least one entry if
        there is any, then as many as keep the referenced batch bytes within ``max_bytes`` and the count within
        ``max_entries`` (what a fetch response carries).  One read transaction: the entries and the offsets
        returned with them are one snapshot.

        Raises :class:`OffsetOutOfRangeError` when ``from_offset`` is below
        the log start or past the log end, KeyError for an unknown partition."""
        return self._reads.read_log(tp, from_offset, max_bytes, max_entries)

    def set_high_watermark(self, tp: TopicIdPartition, high_watermark: int) -> int:
        """Advance the partition's high watermark to ``high_watermark``, capped
        at the log end; never lowers it.  Returns the effective HWM.

        Called by a leader after every commit and follower fetch, so it writes
        nothing: the value lives in memory, every read path of this store uses
        it at once, and the next write of the partition (a commit, a deletion,
        a replicated append) persists it.  After a restart, or in a
        ``readonly`` store in another process, the persisted value may lag;
        the owner re-derives the HWM from its replicas.  KeyError: unknown."""
        self._check_writable()
        return self._catalog.set_high_watermark(tp, high_watermark)

    def append_replicated_fetch(self, appends: Sequence[ReplicaAppend]) -> list[int | ReplicationError | KeyError]:
        """The follower's appends of one replica fetch response, one store
        write for all its partitions (:mod:`~partlog.store.follower_commit`):
        per partition, in order, its new log end offset, or the
        :class:`ReplicationError` (nothing of it written) or KeyError (unknown
        partition) it failed with alone.  Each is :meth:`append_replicated`'s."""
        self._check_writable()
        return self._replica.append(appends)

    def append_replicated(
        self,
        tp: TopicIdPartition,
        entries: Iterable[ReplicatedEntry],
        *,
        leader_high_watermark: int,
        leader_log_start_offset: int,
    ) -> int:
        """One partition's :meth:`append_replicated_fetch`: the new log end
        offset, or its ReplicationError or KeyError raised (docs/design/store.md,
        "The follower's appends")."""
        append = ReplicaAppend(tp, list(entries), leader_high_watermark, leader_log_start_offset)
        [outcome] = self.append_replicated_fetch([append])
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def truncate_to(self, tp: TopicIdPartition, offset: int) -> int:
        """Remove the follower's divergent suffix: every entry whose last
        offset is >= ``offset`` (Kafka's ``truncateTo``, at a batch boundary),
        in one transaction (:meth:`FollowerLog.truncate
        <partlog.store.replication.FollowerLog.truncate>` says what follows);
        returns the number of entries removed.  ValueError for ``offset``
        below the log start, KeyError for an unknown partition."""
        return self._write(lambda s: self._follower.truncate(s, tp, offset))

    def reset_to(self, tp: TopicIdPartition, offset: int) -> None:
        """Empty the partition's log and restart it at ``offset`` (Kafka's
        ``truncateFullyAndStartAt``, :meth:`FollowerLog.reset
        <partlog.store.replication.FollowerLog.reset>`), for a follower whose
        log end fell below the leader's log start.  KeyError for an unknown
        partition, ValueError for a negative offset."""
        if offset < 0:
            raise ValueError(f"partition {tp}: cannot reset to negative offset {offset}")
        self._write(lambda s: self._follower.reset(s, tp, offset))

    # ------------------------------------------------------------ deletion

    def swap_to_segment(self, req: SegmentSwap | SegmentRewrite, *, replicated: bool = False) -> SegmentSwapResult:
        """Move a range's references to a tiered segment, or swap in its cleaned copy (:mod:`.compaction`)."""
        swap = functools.partial(compaction.swap, replicated=replicated)
        return self._write(lambda s: swap(s, self._catalog, self._log, self._index, req, now_ms=self._clock()))

    def segments(self, tp: TopicIdPartition, from_start: int = 0, rows_max: int | None = None) -> list[Segment]:
        """The partition's tiered segments from ``from_start`` on, at most ``rows_max`` ([] if unknown)."""
        with self._views.read() as view:
            part = self._catalog.parts.get(tp)
            return [] if part is None else list(self._log.segments(view, part, from_start, rows_max))

    def delete_records(self, requests: Sequence[DeleteRecordsRequest]) -> list[DeleteRecordsResponse]:
        """Advance log start offsets (Kafka DeleteRecords; -1 means the HWM)."""
        reqs = list(requests)
        return self._write(lambda s: retention.delete_records(s, self._log, self._txns, reqs))

    def enforce_retention(self, now_ms: int | None = None) -> dict[TopicIdPartition, int]:
        """Apply retention.ms and retention.bytes to every partition batch by batch, never past the HWM, and
        expire producer states.  Returns the new log start offsets of the partitions that changed."""
        now = self._clock() if now_ms is None else now_ms
        return self._write(
            lambda s: retention.enforce_retention(
                s, self._catalog, self._log, self._producers, self._txns, now, self.producer_id_expiration_ms
            )
        )
