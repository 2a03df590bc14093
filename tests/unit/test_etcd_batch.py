"""The acting controller's batching on etcd (partlog/controller/etcd_batch.py),
sans-IO: every change lands in exactly one chunk, in order; each chunk is
within both limits (ops counted as compares plus puts, and the request's
bytes checked against the protobuf etcd receives); each partition keeps
its own guards; after a lost compare only the changes whose guards all
still hold are written again."""

from __future__ import annotations

import uuid

import aetcd.rpc as rpc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from partlog.controller.cluster_meta import NO_LEADER, PartitionInfo
from partlog.controller.etcd_batch import (
    TXN_OPS_MAX,
    TXN_REQUEST_BYTES_MAX,
    Chunk,
    Guard,
    chunk_changes,
    guards_of,
    still_valid,
)
from partlog.controller.etcd_controller import PartitionChange
from partlog.controller.etcd_layout import Keys
from partlog.kafka.records import TopicIdPartition

KEYS = Keys("/cluster")
CANDIDATE = Guard(KEYS.candidate(0x1234), "create", 7)
TOPICS = [(f"topic-{i}", uuid.UUID(int=i + 1), 10 + i) for i in range(4)]


@st.composite
def changes(draw: st.DrawFn) -> list[PartitionChange]:
    n = draw(st.integers(0, 200))
    out = []
    seen: set[tuple[int, int]] = set()
    # Each broker's epoch is one value in a plan (one view).
    epochs = {b: draw(st.integers(1, 10**6)) for b in range(1, 8)}
    for _ in range(n):
        t = draw(st.integers(0, len(TOPICS) - 1))
        p = draw(st.integers(0, 9_999))
        if (t, p) in seen:
            continue
        seen.add((t, p))
        name, tid, rev = TOPICS[t]
        replicas = tuple(draw(st.lists(st.integers(1, 7), min_size=1, max_size=5, unique=True)))
        leader = draw(st.sampled_from((NO_LEADER, *replicas)))
        old = PartitionInfo(replicas[0], 3, replicas, replicas, 4)
        new = PartitionInfo(leader, 4, replicas, replicas if leader != NO_LEADER else (), 5)
        epoch = 0 if leader == NO_LEADER else epochs[leader]
        part_rev = draw(st.integers(0, 10**9))
        out.append(PartitionChange(TopicIdPartition(tid, p), old, new, "fenced", False, part_rev, name, rev, epoch))
    return out


def _txn_bytes(chunk: Chunk) -> int:
    """The size of the TxnRequest etcd would receive (failure reads included)."""
    compare = []
    for g in chunk.compares:
        c = rpc.Compare(key=g.key, result=rpc.Compare.EQUAL)
        if g.target == "create":
            c.target, c.create_revision = rpc.Compare.CREATE, g.revision
        else:
            c.target, c.mod_revision = rpc.Compare.MOD, g.revision
        compare.append(c)
    success = [rpc.RequestOp(request_put=rpc.PutRequest(key=k, value=v)) for k, v in chunk.puts]
    failure = [rpc.RequestOp(request_range=rpc.RangeRequest(key=g.key)) for g in chunk.compares]
    return int(rpc.TxnRequest(compare=compare, success=success, failure=failure).ByteSize())


@settings(max_examples=150, deadline=None)
@given(changes(), st.integers(6, 200), st.integers(1024, 64 * 1024))
def test_chunks_hold_every_change_once_within_both_limits(todo: list[PartitionChange], ops: int, size: int) -> None:
    got = chunk_changes(todo, KEYS, CANDIDATE, ops_max=ops, bytes_max=size)
    assert [ch for c in got for ch in c.changes] == todo  # once each, in order
    for c in got:
        assert c.changes, "an empty chunk"
        assert c.ops() <= ops and c.request_bytes() <= size
        assert _txn_bytes(c) <= c.request_bytes()  # the estimate bounds the wire
        assert c.compares[0] == CANDIDATE
        assert len({(g.key, g.target) for g in c.compares}) == len(c.compares)
        assert len({k for k, _ in c.puts}) == len(c.puts)
        assert [k for k, _ in c.puts] == [KEYS.part(ch.tp) for ch in c.changes]
        for ch in c.changes:  # each partition keeps every guard of its own
            assert set(guards_of(ch, KEYS)) <= set(c.compares)


def test_default_limits_are_below_etcds_defaults() -> None:
    assert TXN_OPS_MAX < 128 and TXN_REQUEST_BYTES_MAX < 1536 * 1024


@given(changes())
@settings(max_examples=50, deadline=None)
def test_default_chunks_fill_up(todo: list[PartitionChange]) -> None:
    """Few transactions: every chunk but the last is nearly full."""
    got = chunk_changes(todo, KEYS, CANDIDATE)
    for c in got[:-1]:
        assert c.ops() > TXN_OPS_MAX - 6


def test_a_change_over_the_limits_alone_is_refused() -> None:
    tp = TopicIdPartition(uuid.UUID(int=1), 0)
    p = PartitionInfo(1, 0, (1, 2), (1, 2), 0)
    ch = PartitionChange(tp, p, PartitionInfo(2, 1, (1, 2), (2,), 1), "r", False, 0, "t", 1, 5)
    with pytest.raises(ValueError, match="over the limits"):
        chunk_changes([ch], KEYS, CANDIDATE, ops_max=4)


@settings(max_examples=100, deadline=None)
@given(changes(), st.data())
def test_after_a_lost_compare_only_unmoved_changes_are_kept(todo: list[PartitionChange], data: st.DataObject) -> None:
    for chunk in chunk_changes(todo, KEYS, CANDIDATE):
        moved = data.draw(st.sets(st.sampled_from([g.key for g in chunk.compares])))
        now: dict[bytes, tuple[int, int] | None] = {}
        for g in chunk.compares:
            create, mod = (g.revision, 0) if g.target == "create" else (0, g.revision)
            now[g.key] = (create + 1, mod + 1) if g.key in moved else (create, mod)
        keep, dropped = still_valid(chunk, KEYS, now)
        assert sorted(map(id, keep + dropped)) == sorted(map(id, chunk.changes))
        if CANDIDATE.key in moved:
            assert keep == []  # deposed: nothing is written
            continue
        for ch in keep:  # never written over a state that moved
            assert not {g.key for g in guards_of(ch, KEYS)} & moved
        for ch in dropped:
            assert {g.key for g in guards_of(ch, KEYS)} & moved
        # What is left fits one chunk again.
        if keep:
            assert len(chunk_changes(keep, KEYS, CANDIDATE)) == 1


def test_absent_keys_read_as_revision_zero() -> None:
    assert Guard(b"k", "mod", 0).holds(None) and not Guard(b"k", "mod", 3).holds(None)
    assert Guard(b"k", "create", 5).holds((5, 9)) and not Guard(b"k", "mod", 5).holds((5, 9))
