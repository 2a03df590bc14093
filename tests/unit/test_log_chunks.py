"""The log's chunked layout (layout.CHUNK_ENTRIES_MAX entries per LMDB value)
against one entry per value, the format-1 layout.

A run of commits, checkpoints, truncations (follower and DeleteRecords),
resets and reopens is applied twice: once with chunks of one entry, once with
chunks of at most three, so that every cut falls at the start, the middle and
the end of a chunk.  Everything a caller can see must be the same: reads from
every offset, partition states, producer states (what a truncation rebuilds
from the log), file usage, and ``check()``.  A format-1 store opens as
format 2 unchanged.
"""

from __future__ import annotations

import random
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import lmdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from partlog import (
    CommitBatchRequest,
    CreateTopicAndPartitionsRequest,
    DeleteRecordsRequest,
    FindBatchRequest,
    MetadataStore,
    TopicIdPartition,
)
from partlog.kafka.batch_header import increment_sequence
from partlog.store import StoreError, layout
from partlog.wal.key import make_wal_key
from tests.batches import build_batch, request
from tests.clock import Clock

T0 = 1_700_000_000_000
BIG = 1 << 30
TOPIC = uuid.UUID(int=7)
TPS = [TopicIdPartition(TOPIC, p) for p in range(2)]

ops = st.lists(
    st.one_of(
        # commit: partition, batches, records per batch, producer (None: plain)
        st.tuples(
            st.just("commit"), st.integers(0, 1), st.integers(1, 5), st.integers(1, 3), st.sampled_from([None, 1, 2])
        ),
        st.tuples(st.just("checkpoint")),
        st.tuples(st.just("reopen"), st.booleans()),
        # cut points as fractions of [log start, log end]
        st.tuples(st.just("truncate"), st.integers(0, 1), st.floats(0, 1)),
        st.tuples(st.just("delete_records"), st.integers(0, 1), st.floats(0, 1)),
        st.tuples(st.just("reset"), st.integers(0, 1)),
    ),
    min_size=1,
    max_size=30,
)


def base(e: Any) -> int:
    """Base offset of a replicated entry (its stored header's first field)."""
    return int(layout.I64.unpack_from(e.header)[0])


def key(created_ms: int, n: int) -> str:
    """The same WAL object keys in both runs."""
    return str(make_wal_key("w", created_ms, 1, f"{n:032x}"))


@contextmanager
def chunk_size(n: int) -> Iterator[None]:
    old = layout.CHUNK_ENTRIES_MAX
    layout.CHUNK_ENTRIES_MAX = n
    try:
        yield
    finally:
        layout.CHUNK_ENTRIES_MAX = old


def open_store(path: Path, clock: Clock) -> MetadataStore:
    # Inline checkpoints, only when asked (or at close): chunks hold several commits.
    return MetadataStore.open(
        path, sync=False, clock=clock, map_size_bytes=1 << 24, checkpoint_thread=False, checkpoint_groups_max=1000
    )


def observe(store: MetadataStore) -> dict[str, Any]:
    """Everything a caller sees of the two partitions."""
    out: dict[str, Any] = {"check": store.check(), "usage": sorted(store.file_usage().items())}
    for tp in TPS:
        st_ = store.partition_state(tp)
        out[f"{tp} state"] = st_
        reads = {}
        for offset in range(st_["log_start_offset"], st_["log_end_offset"] + 1):
            [r] = store.find_batches([FindBatchRequest(tp, offset, BIG)], BIG)
            reads[offset] = (r.errors, [(b.metadata.base_offset, b.metadata.last_offset) for b in r.batches])
        out[f"{tp} reads"] = reads
        if st_["log_end_offset"] > st_["log_start_offset"]:
            log = store.read_log(tp, st_["log_start_offset"], BIG)
            out[f"{tp} log"] = [(e.header, e.object_key, e.byte_offset) for e in log.entries]
    out["producers"] = sorted((k, v) for k, v in store._producers.cache.items())
    return out


def run(ops_: list[tuple[Any, ...]], path: Path) -> list[dict[str, Any]]:
    clock = Clock(T0)
    seqs: dict[tuple[int, int], int] = {}
    seen: list[dict[str, Any]] = []
    store = open_store(path, clock)
    try:
        store.create_topic_and_partitions([CreateTopicAndPartitionsRequest(TOPIC, "t", len(TPS))])
        n = 0
        for op in ops_:
            kind = op[0]
            if kind == "commit":
                _, p, batches, records, pid = op
                reqs: list[CommitBatchRequest] = []
                for _ in range(batches):
                    if pid is None:
                        b = build_batch(records, timestamp_ms=clock.now)
                    else:
                        seq = seqs.get((p, pid), 0)
                        b = build_batch(
                            records, producer_id=pid, producer_epoch=0, base_sequence=seq, timestamp_ms=clock.now
                        )
                        seqs[(p, pid)] = increment_sequence(seq, records)
                    reqs.append(request(TPS[p], b, byte_offset=1 + len(reqs) * len(b), request_id=len(reqs)))
                n += 1
                resp = store.commit_file(key(clock.now, n), 1, 1 << 20, reqs)
                seen.append({"commit": [(r.errors, r.assigned_base_offset) for r in resp]})
            elif kind == "checkpoint":
                store._checkpoint()
            elif kind == "reopen":
                store.close(checkpoint=op[1])
                store = open_store(path, clock)
            else:
                tp = TPS[op[1]]
                st_ = store.partition_state(tp)
                lso, leo = st_["log_start_offset"], st_["log_end_offset"]
                if kind == "truncate":
                    offset = lso + round(op[2] * (leo - lso))
                    seen.append({"truncated": store.truncate_to(tp, offset)})
                    # A truncated sequence is sent again: the rebuilt state decides.
                    seqs.clear()
                elif kind == "delete_records":
                    offset = lso + round(op[2] * (st_["high_watermark"] - lso))
                    [r] = store.delete_records([DeleteRecordsRequest(tp, offset)])
                    seen.append({"deleted": (r.errors, r.low_watermark)})
                else:
                    store.reset_to(tp, leo + 3)
                    seqs.clear()
            seen.append(observe(store))
        store.close()
        store = open_store(path, clock)
        seen.append(observe(store))
    finally:
        store.close()
    return seen


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops_=ops)
def test_chunks_of_three_behave_as_one_entry_per_value(ops_: list[tuple[Any, ...]]) -> None:
    same_with_chunks_of_one_and_three(ops_)


def same_with_chunks_of_one_and_three(ops_: list[tuple[Any, ...]]) -> None:
    with tempfile.TemporaryDirectory() as d:
        with chunk_size(1):
            single = run(ops_, Path(d) / "one")
        with chunk_size(3):
            chunks = run(ops_, Path(d) / "three")
    assert len(single) == len(chunks)
    for i, (a, b) in enumerate(zip(single, chunks, strict=True)):
        assert a == b, f"step {i}: {ops_}"
    assert all(not s.get("check") for s in chunks), "check() found a problem"


def test_a_partition_with_many_entries_in_one_checkpoint_is_split_into_chunks(tmp_path: Path) -> None:
    """200 batches of one partition in one checkpoint: ceil(200/64) values,
    each read back exactly, and a cut in the middle of a chunk keeps the rest."""
    clock = Clock(T0)
    with open_store(tmp_path / "s", clock) as store:
        store.create_topic_and_partitions([CreateTopicAndPartitionsRequest(TOPIC, "t", 1)])
        tp = TPS[0]
        b = build_batch(2, timestamp_ms=T0)
        for i in range(200):
            store.commit_file(key(T0, i), 1, 1 << 20, [request(tp, b)])
        store._checkpoint()
        with store._env.read() as txn:
            values = [bytes(v) for _, v in txn.cursor(db=store._env.log)]
        assert [len(v) // layout.ENTRY_SIZE for v in values] == [64, 64, 64, 8]
        log = store.read_log(tp, 0, BIG)
        assert [base(e) for e in log.entries] == list(range(0, 400, 2))
        assert store.truncate_to(tp, 131) == 135  # the entry 130-131 and everything after go
        [r] = store.delete_records([DeleteRecordsRequest(tp, 71)])
        assert r.low_watermark == 71
        log = store.read_log(tp, 71, BIG)
        assert [base(e) for e in log.entries] == list(range(70, 130, 2))
        assert store.check() == []


def set_version(path: Path, version: int) -> None:
    env = lmdb.open(str(path), max_dbs=16, map_size=1 << 24)
    meta = env.open_db(b"meta", create=False)  # not inside a transaction: it would wait for itself
    with env.begin(write=True) as txn:
        txn.put(b"version", layout.U64.pack(version), db=meta)
    env.close()


def test_a_format_1_store_opens_and_is_marked_format_2(tmp_path: Path) -> None:
    clock = Clock(T0)
    path = tmp_path / "s"
    with chunk_size(1), open_store(path, clock) as store:
        store.create_topic_and_partitions([CreateTopicAndPartitionsRequest(TOPIC, "t", 1)])
        for i in range(5):
            store.commit_file(key(T0, i), 1, 1 << 20, [request(TPS[0], build_batch(1, timestamp_ms=T0))])
    set_version(path, 1)
    with open_store(path, clock) as store:
        assert [base(e) for e in store.read_log(TPS[0], 0, BIG).entries] == [0, 1, 2, 3, 4]
        assert store.check() == []
    env = lmdb.open(str(path), max_dbs=16, map_size=1 << 24)
    meta = env.open_db(b"meta", create=False)  # not inside a transaction: it would wait for itself
    with env.begin() as txn:
        assert txn.get(b"version", db=meta) == layout.U64.pack(2)
    env.close()


def test_a_store_of_a_newer_format_is_refused_in_one_line(tmp_path: Path) -> None:
    clock = Clock(T0)
    path = tmp_path / "s"
    open_store(path, clock).close()
    set_version(path, 3)
    with pytest.raises(StoreError, match="store format 3"):
        open_store(path, clock)


def test_random_shapes_smoke() -> None:
    """One longer deterministic run of the differential test (seeded)."""
    rng = random.Random(5)
    run_ops: list[tuple[Any, ...]] = []
    for _ in range(60):
        k = rng.random()
        if k < 0.6:
            run_ops.append(("commit", rng.randrange(2), rng.randint(1, 5), rng.randint(1, 3), rng.choice([None, 1])))
        elif k < 0.75:
            run_ops.append(("checkpoint",))
        elif k < 0.85:
            run_ops.append(("truncate", rng.randrange(2), rng.random()))
        else:
            run_ops.append(("delete_records", rng.randrange(2), rng.random()))
    same_with_chunks_of_one_and_three(run_ops)
