"""Crash safety: SIGKILL a committing process at random moments, reopen, verify.

tests/crash_worker.py commits with ``sync=True`` from several threads (group
commit), idempotent producers over several partitions, plus some
delete_records, and prints what each RETURNED call acknowledged.  After every
kill the store is reopened here and checked:

* ``check() == []``: entry CRCs, contiguous offsets, counters, file index;
* every acknowledged batch is at its acknowledged offsets with its object key
  and producer fields, unless an acknowledged or later DeleteRecords removed it
  (then it lies wholly below the log start);
* no partial commit: the batches of one commit_file call (one object key) are
  in the store all or none (less those wholly below the log start), and
  ``file_usage`` counts exactly those;
* every entry belongs to a call the worker started;
* the next round's commits continue at the log end offset, without gaps;
* after restart, an acknowledged idempotent batch resent is a duplicate with its
  original offset, and the producers continue their sequences from the store.

The worker also copies a followed topic from a leader's store, as a broker's
fetcher does (the follower's appends, through the journal or, at a new
leader epoch, exclusive), and truncates it back: after every kill each
followed log is a prefix of the leader's, at least as long as its last
acknowledged append left it (shorter only by a truncation in flight).
"""

from __future__ import annotations

import itertools
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from partlog import (
    BatchInfo,
    CommitBatchRequest,
    CreateTopicAndPartitionsRequest,
    Errors,
    FindBatchRequest,
    MetadataStore,
    TopicIdPartition,
)
from partlog.kafka.batch_header import BatchHeader
from partlog.store import ReplicatedEntry
from tests.batches import build_batch, request, wal_key
from tests.paths import REPO

PARTITIONS = 4  # as tests/crash_worker.py
FOLLOWED = 2  # as tests/crash_worker.py
SOURCE_BATCHES = 300  # per followed partition, a new leader epoch every 100
BIG = 1 << 40


@dataclass
class Batch:
    partition: int
    pid: int
    seq: int
    records: int
    base: int = -1
    last: int = -1
    header: bytes = b""


@dataclass
class Call:
    key: str
    round: int
    batches: list[Batch]
    acked: bool = False


@dataclass
class History:
    calls: dict[str, Call] = field(default_factory=dict)
    deleted_to: list[int] = field(default_factory=lambda: [0] * PARTITIONS)  # max acknowledged low watermark
    # The followed logs' ends the last acknowledged append or truncation left.
    fleo: list[int] = field(default_factory=lambda: [0] * FOLLOWED)
    # Targets of a truncation not (yet) acknowledged, else None.
    ftrunc: list[int] | None = None


class Worker:
    """One run of tests/crash_worker.py, its stdout collected by a thread."""

    def __init__(self, path: Path, tid: uuid.UUID, rnd: int, seed: int, source: tuple[Path, uuid.UUID]) -> None:
        args = [str(path), str(tid), str(rnd), str(seed), str(source[0]), str(source[1])]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.crash_worker", *args],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.lines: list[bytes] = []
        self.started = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            if line.startswith(b'{"e":"start"'):
                self.started.set()
        self.started.set()  # EOF: do not keep a waiter waiting

    def kill(self) -> list[dict[str, object]]:
        """SIGKILL the worker; the complete lines it wrote, parsed."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)
        self._reader.join(timeout=30)
        assert self.proc.stderr is not None
        self.stderr = self.proc.stderr.read().decode(errors="replace")
        self.proc.stderr.close()
        events = []
        for line in self.lines:
            if not line.endswith(b"\n"):
                continue  # cut by the kill: not acknowledged
            events.append(json.loads(line))
        return events


def _fetch_all(store: MetadataStore, tp: TopicIdPartition) -> list[BatchInfo]:
    lso = store.partition_state(tp)["log_start_offset"]
    [r] = store.find_batches([FindBatchRequest(tp, lso, BIG)], BIG)
    assert r.errors == Errors.NONE, r
    return list(r.batches)


def _record(history: History, events: list[dict[str, object]], rnd: int) -> dict[str, object]:
    start: dict[str, object] = {}
    for ev in events:
        kind = ev["e"]
        if kind == "start":
            start = ev
        elif kind == "begin":
            key = str(ev["k"])
            batches = [Batch(int(p), int(q), int(s), int(n)) for p, q, s, n in ev["b"]]  # type: ignore[attr-defined]
            history.calls[key] = Call(key, rnd, batches)
        elif kind == "ack":
            call = history.calls[str(ev["k"])]
            call.acked = True
            for b, (p, base, last), h in zip(call.batches, ev["o"], ev["h"], strict=True):  # type: ignore[call-overload]
                assert b.partition == p
                b.base, b.last, b.header = int(base), int(last), bytes.fromhex(h)
                assert b.last - b.base + 1 == b.records
        elif kind == "ftrunc":
            history.ftrunc = [int(x) for x in ev["to"]]  # type: ignore[attr-defined]
        elif kind == "fack":
            history.fleo = [int(x) for x in ev["leo"]]  # type: ignore[attr-defined]
            history.ftrunc = None
        elif kind == "del":
            p = int(ev["p"])  # type: ignore[call-overload]
            history.deleted_to[p] = max(history.deleted_to[p], int(ev["lw"]))  # type: ignore[call-overload]
        else:
            pytest.fail(f"worker reported {ev}")
    return start


def _verify(store: MetadataStore, tid: uuid.UUID, history: History, prev_leo: list[int], rnd: int, ctx: str) -> None:
    assert store.check() == [], ctx
    tps = [TopicIdPartition(tid, p) for p in range(PARTITIONS)]
    states = [store.partition_state(tp) for tp in tps]
    lso = [s["log_start_offset"] for s in states]
    leo = [s["log_end_offset"] for s in states]
    entries = {p: {i.metadata.base_offset: i for i in _fetch_all(store, tps[p])} for p in range(PARTITIONS)}
    usage = store.file_usage()
    by_key: dict[str, list[BatchInfo]] = {}
    for p in range(PARTITIONS):
        assert lso[p] >= history.deleted_to[p], f"{ctx}: acknowledged DeleteRecords lost on p{p}"
        for info in entries[p].values():
            by_key.setdefault(info.object_key, []).append(info)
    # Every entry comes from a call the worker started.
    unknown = set(by_key) - set(history.calls)
    assert not unknown, f"{ctx}: entries of unknown object keys {unknown}"
    for key, call in history.calls.items():
        present = sorted(
            by_key.get(key, []), key=lambda i: (i.metadata.topic_id_partition.partition, i.metadata.base_offset)
        )
        live_usage = usage[key].live_batches if key in usage else 0
        assert live_usage == len(present), f"{ctx}: file_usage of {key} is {live_usage}, store holds {len(present)}"
        if call.acked:
            # Acknowledged: every batch at its offsets, or wholly below the log start.
            expect_live = 0
            for b in call.batches:
                if b.last < lso[b.partition]:
                    continue
                expect_live += 1
                stored = entries[b.partition].get(b.base)
                assert stored is not None, f"{ctx}: acknowledged batch {b} of {key} missing (lso {lso[b.partition]})"
                md = stored.metadata
                assert (stored.object_key, md.last_offset, md.producer_id, md.base_sequence) == (
                    key,
                    b.last,
                    b.pid,
                    b.seq,
                ), f"{ctx}: {b} of {key} is stored as {md}"
                assert md.header[21:] == b.header[21:], ctx  # the CRC-covered part is as uploaded
            assert expect_live == len(present), f"{ctx}: {key} has {len(present)} entries, expected {expect_live}"
        elif present:
            # In flight at a kill, and durable: all its batches, in order, per
            # partition; only a prefix may be missing, and only below the log start.
            for p in {b.partition for b in call.batches}:
                mine = [b for b in call.batches if b.partition == p]
                got = [i for i in present if i.metadata.topic_id_partition.partition == p]
                assert len(got) <= len(mine), ctx
                missing = len(mine) - len(got)
                for b, info in zip(mine[missing:], got, strict=True):
                    md = info.metadata
                    assert (md.producer_id, md.base_sequence, md.last_offset - md.base_offset + 1) == (
                        b.pid,
                        b.seq,
                        b.records,
                    ), f"{ctx}: partial or reordered commit {key}: {b} vs {md}"
                for i, j in itertools.pairwise(got):
                    assert j.metadata.base_offset == i.metadata.last_offset + 1, f"{ctx}: {key} not contiguous"
                if missing:
                    first = got[0].metadata.base_offset if got else None
                    assert (first is not None and first <= lso[p]) or (first is None and lso[p] > 0), (
                        f"{ctx}: {key} lost {missing} batch(es) on p{p} that are not below the log start {lso[p]}"
                    )
    # The round continued each log exactly at the end offset it found.
    if rnd >= 0:
        for p in range(PARTITIONS):
            bases = [
                i.metadata.base_offset
                for k, infos in by_key.items()
                if history.calls[k].round == rnd
                for i in infos
                if i.metadata.topic_id_partition.partition == p
            ]
            if bases and lso[p] <= prev_leo[p]:
                assert min(bases) == prev_leo[p], f"{ctx}: round {rnd} started p{p} at {min(bases)}, not {prev_leo[p]}"
    for p in range(PARTITIONS):
        for call in history.calls.values():
            for b in call.batches:
                if call.acked and b.partition == p:
                    assert b.last < leo[p], ctx


def _source(path: Path) -> tuple[uuid.UUID, list[list[ReplicatedEntry]]]:
    """A leader's store with the followed topic (idempotent and plain
    batches, a new leader epoch every 100 batches); its logs."""
    fid = uuid.uuid4()
    tps = [TopicIdPartition(fid, p) for p in range(FOLLOWED)]
    with MetadataStore.open(path, sync=False) as leader:
        leader.create_topic_and_partitions([CreateTopicAndPartitionsRequest(fid, "followed", FOLLOWED)])
        seq = 0
        for i in range(SOURCE_BATCHES):
            if i % 100 == 0:
                for tp in tps:
                    leader.set_leader_epoch(tp, i // 100 + 1)
            now = int(time.time() * 1000)
            reqs, off = [], 0
            for tp in tps:
                b = build_batch(2, producer_id=7, producer_epoch=0, base_sequence=seq, timestamp_ms=now)
                if i % 3 == 0:
                    b = build_batch(1, timestamp_ms=now)
                reqs.append(request(tp, b, byte_offset=off))
                off += len(b)
            if i % 3:
                seq += 2
            for r in leader.commit_file(wal_key(now, broker_id=50), 50, off, reqs):
                assert r.errors == Errors.NONE, r
        return fid, [list(leader.read_log(tp, 0, BIG).entries) for tp in tps]


def _cut_at(entries: list[ReplicatedEntry], target: int) -> int:
    """Where ``truncate_to(target)`` ends a log of ``entries``: the base of
    the first entry whose last offset is >= ``target`` (else ``target``)."""
    for e in entries:
        h = BatchHeader.parse(e.header)
        if h.base_offset + h.last_offset_delta >= target:
            return min(target, h.base_offset)
    return target


def _verify_follower(
    store: MetadataStore, fid: uuid.UUID, logs: list[list[ReplicatedEntry]], history: History, ctx: str
) -> list[int]:
    """Each followed log is a prefix of the leader's, holding everything the
    last acknowledged step left, less only a truncation in flight; its log ends."""
    leos = []
    for p in range(FOLLOWED):
        tp = TopicIdPartition(fid, p)
        leo = store.log_end_offset(tp)
        entries = list(store.read_log(tp, 0, BIG).entries) if leo else []
        assert entries == logs[p][: len(entries)], f"{ctx}: followed p{p} is not a prefix of the leader's log"
        floor = history.fleo[p]
        if history.ftrunc is not None:
            # truncate_to(target) cuts at the base of the batch holding the
            # target: the log may end below the target itself.
            floor = min(floor, _cut_at(logs[p], history.ftrunc[p]))
        assert leo >= floor, f"{ctx}: followed p{p} ends at {leo}, acknowledged up to {history.fleo[p]}"
        leos.append(leo)
    return leos


# Kills that land before the worker said "start": in its imports, or while
# its open replays the journal the previous kill left (recovery killed).
EARLY_KILL_SHARE = 0.2


@pytest.mark.slow
@pytest.mark.timeout(0)  # bounded by --kills; each round by the waits below
def test_sigkill_during_commits(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """``--kills`` SIGKILLs (200 by default; ``pytest --kills 1000`` soaks)."""
    kills = int(request.config.getoption("kills"))
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    path = tmp_path / "store"
    tid = uuid.uuid4()
    history = History()
    leo = [0] * PARTITIONS
    acked_total = early = 0
    # The topic exists before the first worker: a kill before a worker is
    # ready may land before it could create it (CI, round 1).
    fid, source_logs = _source(tmp_path / "source")
    with MetadataStore.open(path, sync=True) as store:
        store.create_topic_and_partitions(
            [
                CreateTopicAndPartitionsRequest(tid, "crash", PARTITIONS),
                CreateTopicAndPartitionsRequest(fid, "followed", FOLLOWED),
            ]
        )
    fleo = [0] * FOLLOWED
    for rnd in range(1, kills + 1):
        ctx = f"seed {seed} round {rnd}"
        worker = Worker(path, tid, rnd, seed, (tmp_path / "source", fid))
        if rng.random() < EARLY_KILL_SHARE:
            time.sleep(rng.uniform(0.0, 0.4))
        else:
            assert worker.started.wait(timeout=60), ctx
            time.sleep(rng.uniform(0.0, 0.25))
        events = worker.kill()
        assert worker.proc.returncode == -signal.SIGKILL, f"{ctx}: worker exited by itself: {worker.stderr}"
        start = _record(history, events, rnd)
        if start:
            # It found exactly the logs we verified after the previous kill.
            assert start["leo"] == leo and start["fleo"] == fleo, ctx
        else:
            early += 1
        with MetadataStore.open(path, sync=True) as store:
            _verify(store, tid, history, leo, rnd, ctx)
            leo = [store.partition_state(TopicIdPartition(tid, p))["log_end_offset"] for p in range(PARTITIONS)]
            fleo = history.fleo = _verify_follower(store, fid, source_logs, history, ctx)
            history.ftrunc = None
        acked = sum(1 for c in history.calls.values() if c.acked and c.round == rnd)
        acked_total += acked
    # The kills landed while calls were in flight, not only between them.
    assert acked_total > kills, f"seed {seed}: only {acked_total} acknowledged calls"
    assert any(not c.acked for c in history.calls.values()), f"seed {seed}: no call was in flight at a kill"
    print(f"seed {seed}: {kills} kills ({early} before the worker was ready), {acked_total} acknowledged calls")

    with MetadataStore.open(path, sync=True) as store:
        _check_after_restart(store, tid, history, seed)


@pytest.mark.timeout(120)
def test_acknowledged_batch_resent_after_kill_is_duplicate(tmp_path: Path) -> None:
    seed = random.randrange(1 << 30)
    tid = uuid.uuid4()
    history = History()
    fid, source_logs = _source(tmp_path / "source")
    worker = Worker(tmp_path / "store", tid, 1, seed, (tmp_path / "source", fid))
    assert worker.started.wait(timeout=60)
    # Kill once enough has been acknowledged (not a timing assertion: we wait for output).
    deadline = time.monotonic() + 30
    while sum(line.startswith(b'{"e":"ack"') for line in worker.lines) < 20 and time.monotonic() < deadline:
        time.sleep(0.01)
    _record(history, worker.kill(), 1)
    with MetadataStore.open(tmp_path / "store", sync=True) as store:
        _verify(store, tid, history, [0] * PARTITIONS, 1, f"seed {seed}")
        _verify_follower(store, fid, source_logs, history, f"seed {seed}")
        _check_after_restart(store, tid, history, seed)


def _check_after_restart(store: MetadataStore, tid: uuid.UUID, history: History, seed: int) -> None:
    ctx = f"seed {seed} after restart"
    tps = [TopicIdPartition(tid, p) for p in range(PARTITIONS)]
    leo_before = [store.partition_state(tp)["log_end_offset"] for tp in tps]
    # The last acknowledged batch of each (producer, partition) is in the producer's
    # window (a thread has one call in flight, with <= 2 batches per partition):
    # resent after the restart it is a duplicate answered with its original offset.
    last_acked: dict[tuple[int, int], Batch] = {}
    for call in history.calls.values():
        if call.acked:
            for b in call.batches:
                if b.pid >= 0:
                    last_acked[(b.pid, b.partition)] = b  # calls of one producer are in order
    assert last_acked, ctx
    reqs = [CommitBatchRequest.from_header(i, tps[b.partition], 0, b.header) for i, b in enumerate(last_acked.values())]
    file_size = max(r.size for r in reqs)
    resps = store.commit_file(wal_key(int(time.time() * 1000)), 9, file_size, reqs)
    for b, r in zip(last_acked.values(), resps, strict=True):
        assert (r.errors, r.is_duplicate, r.assigned_base_offset) == (Errors.NONE, True, b.base), f"{ctx}: {b} -> {r}"
    assert [store.partition_state(tp)["log_end_offset"] for tp in tps] == leo_before, ctx
    # Producers continue from the state the store recovered (including batches
    # that were durable but never acknowledged): the next sequence after the
    # highest one in the log is accepted, a gap is not.
    for p, tp in enumerate(tps):
        infos = _fetch_all(store, tp)
        pids = {i.metadata.producer_id for i in infos if i.metadata.producer_id >= 0}
        for pid in sorted(pids)[-2:]:
            last = max(
                (i for i in infos if i.metadata.producer_id == pid), key=lambda i: i.metadata.base_offset
            ).metadata
            nxt = last.last_sequence + 1
            gap = build_batch(
                1, producer_id=pid, producer_epoch=0, base_sequence=nxt + 1, timestamp_ms=int(time.time() * 1000)
            )
            ok = build_batch(
                2, producer_id=pid, producer_epoch=0, base_sequence=nxt, timestamp_ms=int(time.time() * 1000)
            )
            r_gap, r_ok = store.commit_file(
                wal_key(int(time.time() * 1000)), 9, len(gap) + len(ok),
                [request(tp, gap, byte_offset=0), request(tp, ok, byte_offset=len(gap))],
            )  # fmt: skip
            leo = store.partition_state(tp)["log_end_offset"]
            assert r_gap.errors == Errors.OUT_OF_ORDER_SEQUENCE_NUMBER, f"{ctx}: p{p} pid {pid}"
            assert (r_ok.errors, r_ok.assigned_base_offset) == (Errors.NONE, leo - 2), f"{ctx}: p{p} pid {pid}"
            assert BatchHeader.parse(ok).base_sequence == nxt
    assert store.check() == [], ctx
