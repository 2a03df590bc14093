"""The pipelined group commit: ordering, grouping, exclusivity and fail-stop.

First against GroupCommitPipeline alone (fake stages that record what they
saw), then through MetadataStore with real LMDB and concurrent threads.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from partlog import (
    CommitBatchRequest,
    CreateTopicAndPartitionsRequest,
    DeleteRecordsRequest,
    Errors,
    FindBatchRequest,
    MetadataStore,
    StoreError,
    TopicIdPartition,
)
from partlog.store.group_commit import GroupCommitPipeline, PipelineFailedError, Write
from tests.batches import build_batch, request, wal_key

NOW = 1_700_000_000_000


@dataclass
class _Group:
    payloads: list[int] = field(default_factory=list)
    results: list[Any] = field(default_factory=list)
    errors: list[BaseException | None] = field(default_factory=list)


class _Recorder:
    """Fake stages: sequencing assigns increasing numbers, commit records order."""

    def __init__(self, fail_on_group: int = -1) -> None:
        self.sequenced: list[int] = []
        self.committed: list[int] = []
        self.groups = 0
        self.fail_on_group = fail_on_group
        self.lock = threading.Lock()
        self.active = {"seq": 0, "commit": 0}

    def prepare(self, writes: list[Write], into: _Group | None) -> _Group:
        with self.lock:
            self.active["seq"] += 1
            assert self.active["seq"] == 1, "two sequencers at once"
        group = into if into is not None else _Group()
        for w in writes:
            self.sequenced.append(w.payload)
            group.payloads.append(w.payload)
            group.results.append(len(self.sequenced))
            group.errors.append(ValueError("odd") if w.payload == -1 else None)
        time.sleep(random.random() / 5000)
        with self.lock:
            self.active["seq"] -= 1
        return group

    def apply(self, group: _Group) -> None:
        with self.lock:
            self.active["commit"] += 1
            assert self.active["commit"] == 1, "two committers at once"
        time.sleep(random.random() / 2000)  # an "fsync"
        self.groups += 1
        try:
            if self.groups == self.fail_on_group:
                raise OSError("disk on fire")
            self.committed.extend(group.payloads)
        finally:
            with self.lock:
                self.active["commit"] -= 1


def _run_threads(n: int, fn: Any) -> list[BaseException]:
    errors: list[BaseException] = []

    def wrap(i: int) -> None:
        try:
            fn(i)
        except BaseException as e:  # collected for the assertion
            errors.append(e)

    threads = [threading.Thread(target=wrap, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
        assert not t.is_alive(), "pipeline deadlocked"
    return errors


def test_pipeline_commits_in_sequence_order_and_answers_each_write() -> None:
    rec = _Recorder()
    pipe: GroupCommitPipeline[_Group] = GroupCommitPipeline(prepare=rec.prepare, apply=rec.apply, group_weight_max=8)
    answers: dict[int, int] = {}

    def worker(i: int) -> None:
        for j in range(60):
            payload = i * 1000 + j
            answers[payload] = pipe.submit(payload, weight=1 + (j % 3))

    assert _run_threads(6, worker) == []
    # Committed exactly what was sequenced, in the same order, once each.
    assert rec.committed == rec.sequenced
    assert sorted(rec.committed) == sorted(answers)
    # Each write got the result computed for it while sequencing.
    assert all(rec.sequenced[answers[p] - 1] == p for p in answers)
    # Per thread, writes were sequenced in submission order.
    for i in range(6):
        mine = [p for p in rec.sequenced if p // 1000 == i]
        assert mine == sorted(mine)
    # Grouping happened: fewer commits than writes.
    assert rec.groups < len(answers)


def test_pipeline_reports_per_write_errors_without_failing_others() -> None:
    rec = _Recorder()
    pipe: GroupCommitPipeline[_Group] = GroupCommitPipeline(prepare=rec.prepare, apply=rec.apply, group_weight_max=8)
    with pytest.raises(ValueError, match="odd"):
        pipe.submit(-1)
    assert pipe.submit(5) == 2
    assert pipe.failed is None


def test_pipeline_fails_stop_after_a_commit_error() -> None:
    rec = _Recorder(fail_on_group=3)
    pipe: GroupCommitPipeline[_Group] = GroupCommitPipeline(prepare=rec.prepare, apply=rec.apply, group_weight_max=4)
    acked: list[int] = []

    def worker(i: int) -> None:
        for j in range(40):
            pipe.submit(i * 1000 + j)
            acked.append(i * 1000 + j)

    errors = _run_threads(4, worker)
    assert errors and all(isinstance(e, PipelineFailedError) for e in errors)
    assert isinstance(pipe.failed, OSError)
    # Nothing acknowledged that was not committed; nothing committed after the failure.
    assert set(acked) <= set(rec.committed)
    with pytest.raises(PipelineFailedError):
        pipe.submit(1)
    with pytest.raises(PipelineFailedError):
        pipe.exclusive(lambda: None)


def _submitter(pipe: GroupCommitPipeline[_Group], outcome: dict[int, BaseException | int]) -> Callable[[int], None]:
    """``submit(payload)`` recording the answer or the exception in ``outcome``."""

    def submit(payload: int) -> None:
        try:
            outcome[payload] = pipe.submit(payload)
        except BaseException as e:  # collected for the assertion
            outcome[payload] = e

    return submit


def test_a_group_sequenced_while_a_commit_fails_is_failed_not_committed() -> None:
    """Regression: the sequencer released the lock to prepare group 2 while
    group 1's commit failed.  ``_fail`` cleared the slots it could see; group 2
    came back afterwards and was either committed after the failure (a new
    slot) or lost in a cleared slot, its callers parked for ever (CI saw that
    as "pipeline deadlocked")."""
    seq2_started, release_seq2 = threading.Event(), threading.Event()
    apply1_started, release_apply1 = threading.Event(), threading.Event()
    applied: list[list[int]] = []

    def prepare(writes: list[Write], into: _Group | None) -> _Group:
        group = into if into is not None else _Group()
        if writes[0].payload == 2:
            seq2_started.set()
            assert release_seq2.wait(10)
        for w in writes:
            group.payloads.append(w.payload)
            group.results.append(w.payload)
            group.errors.append(None)
        return group

    def apply(group: _Group) -> None:
        applied.append(list(group.payloads))
        if 1 in group.payloads:
            apply1_started.set()
            assert release_apply1.wait(10)
            raise OSError("disk on fire")

    pipe: GroupCommitPipeline[_Group] = GroupCommitPipeline(prepare=prepare, apply=apply, group_weight_max=4)
    outcome: dict[int, BaseException | int] = {}
    submit = _submitter(pipe, outcome)

    a = threading.Thread(target=submit, args=(1,))
    a.start()
    assert apply1_started.wait(10)
    b = threading.Thread(target=submit, args=(2,))
    b.start()
    assert seq2_started.wait(10)
    release_apply1.set()
    a.join(10)
    release_seq2.set()
    b.join(10)
    assert not a.is_alive() and not b.is_alive(), "pipeline deadlocked"
    assert isinstance(outcome[1], PipelineFailedError)
    assert isinstance(outcome[2], PipelineFailedError)
    assert applied == [[1]], "nothing may be committed after a failed commit"


def test_a_commit_that_ends_after_the_sequencer_failed_answers_the_failure() -> None:
    """Regression: ``prepare`` raised (a bug) while group 1 was committing;
    the committer then popped a slot ``_fail`` had already cleared and its
    caller got an IndexError instead of PipelineFailedError."""
    apply1_started, release_apply1 = threading.Event(), threading.Event()

    def prepare(writes: list[Write], into: _Group | None) -> _Group:
        if writes[0].payload == 2:
            raise RuntimeError("a sequencing bug")
        group = into if into is not None else _Group()
        for w in writes:
            group.payloads.append(w.payload)
            group.results.append(w.payload)
            group.errors.append(None)
        return group

    def apply(group: _Group) -> None:
        apply1_started.set()
        assert release_apply1.wait(10)

    pipe: GroupCommitPipeline[_Group] = GroupCommitPipeline(prepare=prepare, apply=apply, group_weight_max=4)
    outcome: dict[int, BaseException | int] = {}
    submit = _submitter(pipe, outcome)

    a = threading.Thread(target=submit, args=(1,))
    a.start()
    assert apply1_started.wait(10)
    submit(2)
    release_apply1.set()
    a.join(10)
    assert not a.is_alive(), "pipeline deadlocked"
    assert isinstance(outcome[2], PipelineFailedError)
    assert isinstance(outcome[1], PipelineFailedError), outcome[1]


def test_exclusive_runs_alone_with_the_pipeline_drained() -> None:
    rec = _Recorder()
    pipe: GroupCommitPipeline[_Group] = GroupCommitPipeline(prepare=rec.prepare, apply=rec.apply, group_weight_max=8)
    seen: list[tuple[int, int]] = []

    def exclusive() -> None:
        with rec.lock:
            assert rec.active == {"seq": 0, "commit": 0}
        seen.append((len(rec.sequenced), len(rec.committed)))

    def worker(i: int) -> None:
        for j in range(40):
            if i == 0 and j % 5 == 0:
                pipe.exclusive(exclusive)
            else:
                pipe.submit(i * 1000 + j)

    assert _run_threads(4, worker) == []
    assert seen and all(s == c for s, c in seen), "exclusive ran with sequenced-but-uncommitted writes"


# ----------------------------------------------------------------- the store


def _store_setup(
    path: Path, partitions: int = 4, *, checkpoint_thread: bool = True
) -> tuple[MetadataStore, list[TopicIdPartition]]:
    store = MetadataStore.open(path, clock=lambda: NOW, checkpoint_thread=checkpoint_thread)
    tid = uuid.uuid4()
    store.create_topic_and_partitions([CreateTopicAndPartitionsRequest(tid, "t", partitions)])
    return store, [TopicIdPartition(tid, p) for p in range(partitions)]


def test_concurrent_commits_and_deletes_keep_the_log_exact(tmp_path: Path) -> None:
    store, tps = _store_setup(tmp_path / "s")
    acked: dict[tuple[TopicIdPartition, int], str] = {}
    lock = threading.Lock()

    def producer(i: int) -> None:
        rng = random.Random(i)
        seqs = dict.fromkeys(tps, 0)
        for _ in range(25):
            key = wal_key(NOW, broker_id=i)
            reqs: list[CommitBatchRequest] = []
            for tp in rng.sample(tps, 2):
                n = rng.randint(1, 3)
                batch = build_batch(n, producer_id=100 + i, producer_epoch=0, base_sequence=seqs[tp], timestamp_ms=NOW)
                seqs[tp] += n
                reqs.append(request(tp, batch, byte_offset=1 + 100 * len(reqs)))
            for r in store.commit_file(key, i, 10_000, reqs):
                assert r.errors == Errors.NONE and not r.is_duplicate, r
                with lock:
                    acked[(r.request.topic_id_partition, r.assigned_base_offset)] = key
            if i == 0 and rng.random() < 0.3:
                store.delete_records([DeleteRecordsRequest(rng.choice(tps), -1)])
                store.enforce_retention()

    assert _run_threads(4, producer) == []
    assert store.check() == []
    for tp in tps:
        state = store.partition_state(tp)
        [found] = store.find_batches([FindBatchRequest(tp, state["log_start_offset"], 1 << 30)], 1 << 30)
        for b in found.batches:
            assert acked[(tp, b.metadata.base_offset)] == b.object_key
        # Offsets are contiguous: every acked batch at or after the start is found.
        live = sorted(o for (t, o) in acked if t == tp and o >= state["log_start_offset"])
        assert [b.metadata.base_offset for b in found.batches][-len(live) :] == live[-len(live) :] if live else True
    store.close()


def test_a_failed_commit_stops_the_store_and_reopen_has_only_acknowledged_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, tps = _store_setup(tmp_path / "s", partitions=1)
    tp = tps[0]
    ok = store.commit_file(wal_key(NOW), 1, 10_000, [request(tp, build_batch(2, timestamp_ms=NOW))])
    assert ok[0].errors == Errors.NONE

    def broken(group: object) -> None:
        raise OSError("EIO")

    monkeypatch.setattr(store, "_commit_group", broken)
    # The pipeline captured the bound method at open: patch the pipeline's stage.
    monkeypatch.setattr(store._pipeline, "_apply", broken)
    with pytest.raises(StoreError, match="EIO"):
        store.commit_file(wal_key(NOW), 1, 10_000, [request(tp, build_batch(3, timestamp_ms=NOW))])
    with pytest.raises(StoreError):
        store.commit_file(wal_key(NOW), 1, 10_000, [request(tp, build_batch(1, timestamp_ms=NOW))])
    with pytest.raises(StoreError):
        store.delete_records([DeleteRecordsRequest(tp, -1)])
    store.close()
    with MetadataStore.open(tmp_path / "s", clock=lambda: NOW) as again:
        assert again.partition_state(tp)["log_end_offset"] == 2
        assert again.check() == []
        r = again.commit_file(wal_key(NOW), 1, 10_000, [request(tp, build_batch(1, timestamp_ms=NOW))])
        assert r[0].assigned_base_offset == 2


def test_pending_reference_is_visible_before_the_commit_is_durable(tmp_path: Path) -> None:
    """referenced_files() must count a reference from the moment it was sequenced."""
    # Checkpoints only when asked, so the pending state below is observable.
    store, tps = _store_setup(tmp_path / "s", partitions=1, checkpoint_thread=False)
    key = wal_key(NOW)
    seen: list[set[str]] = []
    real_apply = store._pipeline._apply

    def slow_apply(group: Any) -> None:
        seen.append(store.referenced_files([key]))
        real_apply(group)

    store._pipeline._apply = slow_apply
    store.commit_file(key, 1, 10_000, [request(tps[0], build_batch(1, timestamp_ms=NOW))])
    assert seen == [{key}]
    assert store.referenced_files([key]) == {key}
    # Durable in the journal, not yet in LMDB: still pending; a checkpoint
    # applies it and only then releases the pending entry.
    assert store._index.pending != {}
    store._checkpoint()
    assert store._index.pending == {}
    assert store.referenced_files([key]) == {key}
    store.close()
