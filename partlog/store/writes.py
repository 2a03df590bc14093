"""The store's two ways to write, on one group-commit pipeline
(:mod:`partlog.store.group_commit`):

* **sequenced commits** (``commit_file``, and ``write_txn_markers``
  through :mod:`partlog.store.markers`, which clear the producers'
  verification guards, :mod:`partlog.store.verification`): stage 1 runs the
  :class:`~partlog.store.sequencer.Sequencer` for each queued call against
  the caches (:class:`~partlog.store.staged.CacheState`), installs its delta
  in the caches, which then run ahead of disk, and collects the deltas into
  a group; stage 2 makes the group durable with one journal append
  (:meth:`Checkpointer.commit <partlog.store.checkpoint.Checkpointer.commit>`).
* **a follower's appends** (:mod:`partlog.store.follower_commit`): one
  :class:`~partlog.store.follower_commit.FollowerCall` per fetch response,
  sequenced in stage 1 beside the commits, its changes in the same group
  and the same journal append.
* **exclusive writes** (topics, epochs, truncation, deletion, the rare
  follower appends that start an epoch or move the log start): the
  pipeline drained and the journal applied, one LMDB write
  transaction staging its changes (:class:`~partlog.store.staged.Staged`),
  which reach the caches only once it committed.

A failed commit fail-stops the pipeline (the group commit does it); so does
a failed check of the durable state in an exclusive write
(:class:`~partlog.store.layout.StoreInconsistentError`): every later write
raises :class:`StoreError` until the store is reopened.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import lmdb

from partlog.kafka.errors import Errors
from partlog.kafka.records import CommitBatchResponse, TopicIdPartition, TxnMarkerResponse
from partlog.store.catalog import Catalog
from partlog.store.checkpoint import Checkpointer
from partlog.store.env import LmdbEnv
from partlog.store.epochs import EpochCache
from partlog.store.follower_commit import FollowerCall, FollowerDelta, Outcome, sequence_follower
from partlog.store.group_commit import GroupCommitPipeline, PipelineFailedError, Write
from partlog.store.index import FileIndex
from partlog.store.layout import PRODUCER_KEY, CommitGroup, Part, StoreError, StoreInconsistentError, T
from partlog.store.markers import MarkerCall, sequence_markers
from partlog.store.options import StoreOptions
from partlog.store.producers import ProducerTable
from partlog.store.sequencer import CommitCall, CommitDelta, Sequencer
from partlog.store.staged import CacheState, Staged
from partlog.store.txns import TxnTable
from partlog.store.verification import VerificationGuards
from partlog.store.view import Views

log = logging.getLogger(__name__)


class Writes:
    """Sequenced commits and exclusive writes (see the module doc), with the
    store's ``options``.  ``commit_group`` is pipeline stage 2; ``clock``
    gives the time a commit is sequenced at (ms since the epoch)."""

    def __init__(
        self,
        env: LmdbEnv,
        checkpoints: Checkpointer,
        views: Views,
        *,
        catalog: Catalog,
        producers: ProducerTable,
        index: FileIndex,
        txns: TxnTable,
        epochs: EpochCache,
        options: StoreOptions,
        clock: Callable[[], int],
        commit_group: Callable[[CommitGroup], None],
        stats: dict[str, int],
        guards: VerificationGuards,
    ) -> None:
        self._env = env
        self._checkpoints = checkpoints
        self._catalog = catalog
        self._producers = producers
        self._index = index
        self._txns = txns
        self._epochs = epochs
        self._sequencer = Sequencer(
            commit_deadline_ms=options.commit_deadline_ms,
            producer_id_expiration_ms=options.producer_id_expiration_ms,
            auto_high_watermark=options.auto_high_watermark,
        )
        self._clock = clock
        self._stats = stats
        self._guards = guards
        self._state = CacheState(catalog, producers, txns, index, views, guards)
        self.pipeline: GroupCommitPipeline[CommitGroup] = GroupCommitPipeline(
            prepare=self._sequence_group,
            apply=commit_group,
            group_weight_max=options.group_commit_batches_max,
            name=env.path,
        )

    # ------------------------------------------------------------ sequenced commits

    def submit(self, call: CommitCall) -> list[CommitBatchResponse]:
        """Sequence ``call`` in a group and return its answers once the group
        is durable; StoreError if the pipeline failed."""
        try:
            result: list[CommitBatchResponse] = self.pipeline.submit(call, len(call.batches))
        except PipelineFailedError as e:
            raise StoreError(str(e)) from e
        return result

    def submit_markers(self, call: MarkerCall) -> list[TxnMarkerResponse]:
        """:meth:`submit` for transaction markers (same groups, same order)."""
        try:
            result: list[TxnMarkerResponse] = self.pipeline.submit(call, len(call.markers))
        except PipelineFailedError as e:
            raise StoreError(str(e)) from e
        return result

    def submit_follower(self, call: FollowerCall) -> list[Outcome | None]:
        """:meth:`submit` for a follower's appends (same groups, same order):
        :func:`~partlog.store.follower_commit.sequence_follower`'s answers."""
        weight = max(1, sum(len(items) for _a, items, _h in call.appends))
        try:
            result: list[Outcome | None] = self.pipeline.submit(call, weight)
        except PipelineFailedError as e:
            raise StoreError(str(e)) from e
        return result

    def _sequence_follower(self, call: FollowerCall) -> tuple[list[Outcome | None], FollowerDelta]:
        state = self._state
        return sequence_follower(
            state,
            call,
            latest_epoch=lambda part_id: self._epochs.latest(state.snapshot(), [part_id])[0],
            effective_hwm=self._catalog.effective_hwm,
            producer_id_expiration_ms=self._sequencer.producer_id_expiration_ms,
        )

    def _sequence_group(self, writes: list[Write], into: CommitGroup | None) -> CommitGroup:
        """Pipeline stage 1: sequence queued calls against the caches, which
        then run ahead of disk until stage 2; into ``into`` (a group not yet
        committing) when given."""
        group = into if into is not None else CommitGroup([], [], {}, {}, {}, {}, {})
        state = self._state
        sequencer = self._sequencer
        for w in writes:
            call: CommitCall | MarkerCall | FollowerCall = w.payload
            result: list[CommitBatchResponse] | list[TxnMarkerResponse] | list[Outcome | None]
            delta: CommitDelta | FollowerDelta
            try:
                if isinstance(call, FollowerCall):
                    result, delta = self._sequence_follower(call)
                elif isinstance(call, MarkerCall):
                    result, delta = sequence_markers(
                        state,
                        call,
                        producer_id_expiration_ms=sequencer.producer_id_expiration_ms,
                        auto_high_watermark=sequencer.auto_high_watermark,
                    )
                    # Kafka clears a producer's verification guard when its
                    # marker is appended: the transaction it verified ended.
                    self._guards.clear(
                        (m.topic_id_partition, m.producer_id)
                        for m, r in zip(call.markers, result, strict=True)
                        if r.error == Errors.NONE
                    )
                else:
                    now = -1 if call.key_error else self._clock()
                    result, delta = sequencer.commit(state, call, now)
            except Exception as e:  # a bug in one write must not fail the others
                log.exception("a commit failed while sequencing")
                group.results.append(None)
                group.errors.append(StoreError(f"{self._env.path}: commit failed: {e!r}"))
                continue
            finally:
                state.release()
            if isinstance(delta, FollowerDelta):
                files = delta.files
            else:
                assert isinstance(call, CommitCall | MarkerCall)
                files = {}
                if delta.file is not None:
                    assert isinstance(call, CommitCall)
                    files[call.object_key] = delta.file
            self._install(group, delta.parts, delta.producers, delta.counters, delta.runs, files)
            if delta.txns:
                self._txns.install(delta.txns)
                group.txns.update(delta.txns)
            for part_id, records in delta.aborted.items():
                group.aborted.setdefault(part_id, []).extend(records)
            group.results.append(result)
            group.errors.append(None)
        return group

    def _install(
        self,
        group: CommitGroup,
        parts: dict[TopicIdPartition, Part],
        producers: dict[tuple[int, int], bytes],
        counters: dict[bytes, int],
        runs: dict[int, bytes],
        files: dict[str, list[int]],
    ) -> None:
        """A sequenced call's changes: into the caches, which run ahead of
        disk from here, and into ``group``, its journal record."""
        self._catalog.install_sequenced(parts, counters)
        self._producers.install(producers)
        for part_id, run in runs.items():
            mine = group.by_part.get(part_id)
            if mine is None:
                group.by_part[part_id] = [run]
            else:
                mine.append(run)
        for object_key, (fid, nb, nbytes, uploader, size) in files.items():
            # referenced_files() sees it from this step on: the one that
            # checked the commit deadline (a leader's commit).
            self._index.add_pending(object_key, fid, nb)
            acc = group.files.setdefault(object_key, [fid, 0, 0, uploader, size])
            acc[1] += nb
            acc[2] += nbytes
        for part in parts.values():
            group.parts[part.part_id] = part.pack()
        for (part_id, pid), raw in producers.items():
            group.producers[PRODUCER_KEY.pack(part_id, pid)] = raw
        group.counters.update(counters)

    # ------------------------------------------------------------ exclusive writes

    def exclusive(self, fn: Callable[[], T]) -> T:
        """``fn`` alone, with the pipeline drained.  A failed check of the
        durable state fail-stops the store, as a failed commit does: nothing
        may be written on it until it is reopened from disk."""
        try:
            return self.pipeline.exclusive(fn)
        except PipelineFailedError as e:
            raise StoreError(str(e)) from e
        except StoreInconsistentError as e:
            log.error("store inconsistent, fail-stopped path=%s: %s", self._env.path, e)
            self.pipeline.fail_stop(e)
            raise

    def staged(self, fn: Callable[[Staged], T]) -> T:
        """Inside :meth:`exclusive`: ``fn`` in one write transaction of an
        LMDB that holds everything acknowledged (the journal applied first),
        its staged changes cached once the transaction committed."""

        def attempt(txn: lmdb.Transaction) -> tuple[Staged, T]:
            staged = Staged(self._catalog, self._producers, self._txns, txn)
            result = fn(staged)
            staged.flush()
            return staged, result

        with self._checkpoints.applied():
            staged, result = self._env.write(attempt)
            staged.install()
            self._stats["group_commits"] += 1
            return result
