"""Explicit Kafka-semantics cases on MetadataStore (real LMDB, real v2 batches).

Each test states one rule of Kafka's produce/fetch/list/delete path as
design.md describes it and checks the store follows it; every test ends with
``store.check() == []``.
"""

from __future__ import annotations

import random
import threading
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatch

from partlog import (
    BatchInfo,
    CommitBatchResponse,
    CreateTopicAndPartitionsRequest,
    DeleteRecordsRequest,
    Errors,
    FileUsage,
    FindBatchRequest,
    ListOffsetsRequest,
    MetadataStore,
    TimestampType,
    TopicIdPartition,
)
from partlog.kafka.batch_header import ATTR_TIMESTAMP_TYPE, HEADER_SIZE, BatchHeader
from tests.batches import build_batch, request, wal_key
from tests.clock import Clock

T0 = 1_700_000_000_000
SEQ_MAX = 2**31 - 1
EARLIEST = ListOffsetsRequest.EARLIEST_TIMESTAMP
LATEST = ListOffsetsRequest.LATEST_TIMESTAMP
MAX_TS = ListOffsetsRequest.MAX_TIMESTAMP
BIG = 1 << 30


@pytest.fixture
def clock() -> Clock:
    return Clock(T0)


@pytest.fixture
def store(tmp_path: Path, clock: Clock) -> Iterator[MetadataStore]:
    with MetadataStore.open(tmp_path / "s", sync=False, clock=clock, map_size_bytes=1 << 24) as s:
        yield s
        assert s.check() == []


def topic(store: MetadataStore, partitions: int = 1, /, **configs: str | int) -> list[TopicIdPartition]:
    tid = uuid.uuid4()
    store.create_topic_and_partitions([CreateTopicAndPartitionsRequest(tid, f"t-{tid.hex[:6]}", partitions, configs)])
    return [TopicIdPartition(tid, p) for p in range(partitions)]


def commit(
    store: MetadataStore, items: Sequence[tuple[TopicIdPartition, bytes]], *, key: str | None = None
) -> list[CommitBatchResponse]:
    """Commit ``items`` as one WAL object (batches laid out back to back)."""
    reqs = []
    off = 0
    for i, (tp, batch) in enumerate(items):
        reqs.append(request(tp, batch, byte_offset=off, request_id=i))
        off += len(batch)
    return store.commit_file(key or wal_key(store._clock()), 1, max(off, 1), reqs)


def commit1(store: MetadataStore, tp: TopicIdPartition, batch: bytes) -> CommitBatchResponse:
    [r] = commit(store, [(tp, batch)])
    return r


def idem(pid: int, epoch: int, seq: int, records: int = 1, ts: int = T0, value_bytes: int = 10) -> bytes:
    return build_batch(
        records, producer_id=pid, producer_epoch=epoch, base_sequence=seq, timestamp_ms=ts, value_bytes=value_bytes
    )


def fetch_all(store: MetadataStore, tp: TopicIdPartition) -> list[BatchInfo]:
    lso = store.partition_state(tp)["log_start_offset"]
    [r] = store.find_batches([FindBatchRequest(tp, lso, BIG)], BIG)
    assert r.errors == Errors.NONE
    return list(r.batches)


def leo(store: MetadataStore, tp: TopicIdPartition) -> int:
    return store.partition_state(tp)["log_end_offset"]


def ok(r: CommitBatchResponse) -> tuple[Errors, int, bool]:
    return r.errors, r.assigned_base_offset, r.is_duplicate


def lo(store: MetadataStore, tp: TopicIdPartition, ts: int) -> tuple[Errors, int, int]:
    [r] = store.list_offsets([ListOffsetsRequest(tp, ts)])
    return r.errors, r.timestamp, r.offset


# ------------------------------------------------------------ idempotence


def test_idempotence_window_is_five_batches(store: MetadataStore) -> None:
    [tp] = topic(store)
    batches = [idem(7, 0, 2 * i, records=2) for i in range(6)]
    offsets = [commit1(store, tp, b).assigned_base_offset for b in batches]
    assert offsets == [0, 2, 4, 6, 8, 10]
    # The oldest (6th from the end) fell out of the window: not a duplicate, not in sequence.
    assert ok(commit1(store, tp, batches[0])) == (Errors.OUT_OF_ORDER_SEQUENCE_NUMBER, -1, False)
    # Each of the last 5 is a duplicate answered with its original offset, in any order.
    for i in (3, 1, 5, 2, 4):
        r = commit1(store, tp, batches[i])
        assert ok(r) == (Errors.NONE, offsets[i], True)
        assert r.log_start_offset == 0
    # All five again in one call: still duplicates, nothing appended.
    resps = commit(store, [(tp, b) for b in batches[1:]])
    assert [ok(r) for r in resps] == [(Errors.NONE, o, True) for o in offsets[1:]]
    assert leo(store, tp) == 12
    assert len(fetch_all(store, tp)) == 6
    # Same first sequence, different last sequence: not a duplicate.
    assert commit1(store, tp, idem(7, 0, 10, records=1)).errors == Errors.OUT_OF_ORDER_SEQUENCE_NUMBER
    # The next in sequence goes on, and then the window has moved by one.
    assert ok(commit1(store, tp, idem(7, 0, 12))) == (Errors.NONE, 12, False)
    assert commit1(store, tp, batches[1]).errors == Errors.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert ok(commit1(store, tp, batches[2])) == (Errors.NONE, 4, True)


def test_in_order_gap_and_duplicate_within_one_call(store: MetadataStore) -> None:
    """Batches of one partition in one call see the state the previous one left."""
    tp0, tp1 = topic(store, 2)
    b0, b1, b2 = idem(9, 0, 0, 3), idem(9, 0, 3, 2), idem(9, 0, 6)  # b2 skips seq 5
    resps = commit(store, [(tp0, b0), (tp1, b0), (tp0, b1), (tp0, b0), (tp0, b2), (tp1, b1)])
    assert [ok(r) for r in resps] == [
        (Errors.NONE, 0, False),
        (Errors.NONE, 0, False),  # producer state is per partition
        (Errors.NONE, 3, False),
        (Errors.NONE, 0, True),
        (Errors.OUT_OF_ORDER_SEQUENCE_NUMBER, -1, False),
        (Errors.NONE, 3, False),
    ]
    assert (leo(store, tp0), leo(store, tp1)) == (5, 5)


def test_sequence_wraps_after_int32_max(store: MetadataStore) -> None:
    [tp] = topic(store)
    # An unknown producer may start anywhere, here 3 below the wrap: 2^31-3 .. 2^31-1.
    a = idem(5, 0, SEQ_MAX - 2, records=3)
    assert ok(commit1(store, tp, a)) == (Errors.NONE, 0, False)
    # 2^31 is not a sequence: after 2^31-1 comes 0.
    assert commit1(store, tp, idem(5, 0, 1)).errors == Errors.OUT_OF_ORDER_SEQUENCE_NUMBER
    b = idem(5, 0, 0, records=2)  # 0..1
    assert ok(commit1(store, tp, b)) == (Errors.NONE, 3, False)
    # A batch spanning the wrap.
    [tp2] = topic(store)
    c = idem(6, 0, SEQ_MAX - 1, records=4)  # 2^31-2, 2^31-1, 0, 1
    assert ok(commit1(store, tp2, c)) == (Errors.NONE, 0, False)
    [info] = fetch_all(store, tp2)
    assert (info.metadata.base_sequence, info.metadata.last_sequence) == (SEQ_MAX - 1, 1)
    assert ok(commit1(store, tp2, c)) == (Errors.NONE, 0, True)  # its duplicate is recognised
    assert commit1(store, tp2, idem(6, 0, 3)).errors == Errors.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert ok(commit1(store, tp2, idem(6, 0, 2))) == (Errors.NONE, 4, False)
    assert ok(commit1(store, tp, b)) == (Errors.NONE, 3, True)


def test_epoch_bump_requires_seq_zero_and_clears_window(store: MetadataStore) -> None:
    [tp] = topic(store)
    e0 = [idem(8, 0, i) for i in range(3)]
    assert [commit1(store, tp, b).assigned_base_offset for b in e0] == [0, 1, 2]
    # Higher epoch, sequence not 0: out of order; and it changes nothing.
    assert commit1(store, tp, idem(8, 1, 3)).errors == Errors.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert commit1(store, tp, idem(8, 1, 1)).errors == Errors.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert ok(commit1(store, tp, e0[0])) == (Errors.NONE, 0, True)  # epoch 0 still current
    # Higher epoch at sequence 0: accepted, a fresh window.
    assert ok(commit1(store, tp, idem(8, 1, 0))) == (Errors.NONE, 3, False)
    # Epoch 0's batches are now from a lower epoch, not duplicates.
    for b in e0:
        assert ok(commit1(store, tp, b)) == (Errors.INVALID_PRODUCER_EPOCH, -1, False)
    # Epoch 1 seq 1 is a new batch, not the old epoch-0 seq-1 batch at offset 1.
    assert ok(commit1(store, tp, idem(8, 1, 1))) == (Errors.NONE, 4, False)
    assert ok(commit1(store, tp, idem(8, 1, 1))) == (Errors.NONE, 4, True)
    # Bump again, straight from a later sequence.
    assert ok(commit1(store, tp, idem(8, 5, 0, records=3))) == (Errors.NONE, 5, False)
    assert commit1(store, tp, idem(8, 1, 2)).errors == Errors.INVALID_PRODUCER_EPOCH
    assert leo(store, tp) == 8


def test_lower_epoch_is_invalid_producer_epoch(store: MetadataStore) -> None:
    [tp] = topic(store)
    assert commit1(store, tp, idem(3, 4, 0)).errors == Errors.NONE
    for epoch, seq in ((3, 1), (0, 0), (3, 0)):
        assert ok(commit1(store, tp, idem(3, epoch, seq))) == (Errors.INVALID_PRODUCER_EPOCH, -1, False)
    assert commit1(store, tp, idem(3, 4, 1)).errors == Errors.NONE


@pytest.mark.parametrize("first_seq", [0, 1, 42, 1_000_000, SEQ_MAX])
def test_unknown_producer_accepts_any_sequence(store: MetadataStore, first_seq: int) -> None:
    [tp] = topic(store)
    assert ok(commit1(store, tp, idem(77, 2, first_seq, records=2))) == (Errors.NONE, 0, False)
    nxt = (first_seq + 2) % 2**31
    assert commit1(store, tp, idem(77, 2, (nxt + 1) % 2**31)).errors == Errors.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert ok(commit1(store, tp, idem(77, 2, nxt))) == (Errors.NONE, 2, False)


def test_producer_expiry(tmp_path: Path) -> None:
    clock = Clock(T0)
    expiry = 60_000
    with MetadataStore.open(tmp_path / "s", sync=False, clock=clock, producer_id_expiration_ms=expiry) as store:
        [tp] = topic(store)
        first = idem(12, 0, 0, ts=T0)
        assert ok(commit1(store, tp, first)) == (Errors.NONE, 0, False)
        # Expiry is measured from the last batch's (max) timestamp, exactly.
        clock.now = T0 + expiry - 1
        assert commit1(store, tp, idem(12, 0, 50, ts=clock.now)).errors == Errors.OUT_OF_ORDER_SEQUENCE_NUMBER
        assert ok(commit1(store, tp, first)) == (Errors.NONE, 0, True)
        clock.now = T0 + expiry
        # Expired: as if never seen, so any sequence (and any epoch) is accepted...
        assert ok(commit1(store, tp, idem(12, 0, 50, ts=clock.now))) == (Errors.NONE, 1, False)
        # ...and the new entry is enforced from there on.
        assert commit1(store, tp, idem(12, 0, 52, ts=clock.now)).errors == Errors.OUT_OF_ORDER_SEQUENCE_NUMBER
        assert ok(commit1(store, tp, idem(12, 0, 51, ts=clock.now))) == (Errors.NONE, 2, False)
        # The resent first batch after expiry is no duplicate any more: a lower epoch
        # would now be refused, but after a second expiry it appends again.
        clock.now += expiry
        assert ok(commit1(store, tp, first)) == (Errors.NONE, 3, False)
        # Expired entries are removed by enforce_retention; the behaviour is the same after.
        clock.now += expiry
        store.enforce_retention()
        assert ok(commit1(store, tp, idem(12, 3, 9, ts=clock.now))) == (Errors.NONE, 4, False)
        assert store.check() == []
    # Producer state survives a reopen.
    with MetadataStore.open(tmp_path / "s", sync=False, clock=clock, producer_id_expiration_ms=expiry) as store:
        assert ok(commit1(store, tp, idem(12, 3, 9, ts=clock.now))) == (Errors.NONE, 4, True)
        assert commit1(store, tp, idem(12, 2, 10, ts=clock.now)).errors == Errors.INVALID_PRODUCER_EPOCH


def test_producer_expiry_uses_batch_timestamp_not_append_clock(tmp_path: Path) -> None:
    """Kafka expires by the last batch's max timestamp: an old CreateTime batch
    leaves a producer that is already expired."""
    clock = Clock(T0)
    with MetadataStore.open(tmp_path / "s", sync=False, clock=clock, producer_id_expiration_ms=60_000) as store:
        [tp] = topic(store)
        assert commit1(store, tp, idem(1, 0, 0, ts=T0 - 60_000)).errors == Errors.NONE
        assert ok(commit1(store, tp, idem(1, 0, 7))) == (Errors.NONE, 1, False)
        assert commit1(store, tp, idem(1, 0, 9)).errors == Errors.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_no_producer_id_is_never_deduplicated(store: MetadataStore) -> None:
    [tp] = topic(store)
    b = build_batch(3, timestamp_ms=T0)
    resps = commit(store, [(tp, b), (tp, b)])
    assert [ok(r) for r in resps] == [(Errors.NONE, 0, False), (Errors.NONE, 3, False)]
    for i in range(7):
        assert ok(commit1(store, tp, b)) == (Errors.NONE, 6 + 3 * i, False)
    infos = fetch_all(store, tp)
    assert len(infos) == 9
    assert all(i.metadata.producer_id == -1 and i.metadata.base_sequence == -1 for i in infos)


# ------------------------------------------------------- timestamps, epochs


def test_log_append_time(store: MetadataStore, clock: Clock) -> None:
    [tp] = topic(store, **{"message.timestamp.type": "LogAppendTime"})
    clock.now = T0 + 5_000
    # Producer timestamps are ignored (even ones CreateTime would refuse).
    batches = [
        idem(4, 0, 0, records=3, ts=T0, value_bytes=100),
        build_batch(2, timestamp_ms=T0 - 10**10, value_bytes=7),
        build_batch(2, timestamp_ms=T0 + 10**10, value_bytes=7, compression=1),
    ]
    resps = commit(store, [(tp, b) for b in batches])
    assert [(r.errors, r.assigned_base_offset, r.log_append_time) for r in resps] == [
        (Errors.NONE, 0, clock.now),
        (Errors.NONE, 3, clock.now),
        (Errors.NONE, 5, clock.now),
    ]
    infos = fetch_all(store, tp)
    assert len(infos) == 3
    for info, batch in zip(infos, batches, strict=True):
        md = info.metadata
        assert md.log_append_timestamp == clock.now
        assert md.timestamp_type == TimestampType.LOG_APPEND_TIME
        h = BatchHeader.parse(md.header)
        assert h.max_timestamp == clock.now
        assert h.attributes & ATTR_TIMESTAMP_TYPE
        assert h.base_offset == md.base_offset
        # The stored header spliced over the uploaded batch is a valid Kafka batch.
        kb = DefaultRecordBatch(md.header + batch[HEADER_SIZE:])
        assert kb.validate_crc()
        assert kb.timestamp_type == 1 and kb.max_timestamp == clock.now
    # A duplicate is answered with the ORIGINAL append time.
    appended_at = clock.now
    clock.now += 1_000
    r = commit1(store, tp, batches[0])
    assert (r.errors, r.assigned_base_offset, r.is_duplicate, r.log_append_time) == (Errors.NONE, 0, True, appended_at)
    # ListOffsets uses the append time.
    assert lo(store, tp, MAX_TS) == (Errors.NONE, appended_at, 0)
    assert lo(store, tp, T0 + 10**9) == (Errors.NONE, -1, -1)
    assert lo(store, tp, T0) == (Errors.NONE, appended_at, 0)


def test_create_time_response_and_stored_header(store: MetadataStore) -> None:
    [tp] = topic(store)
    batch = build_batch(4, timestamp_ms=T0 - 100, value_bytes=9)
    r = commit1(store, tp, batch)
    assert (r.errors, r.log_append_time) == (Errors.NONE, -1)  # Kafka: -1 for CreateTime
    [info] = fetch_all(store, tp)
    md = info.metadata
    assert md.log_append_timestamp == -1
    assert md.timestamp_type == TimestampType.CREATE_TIME
    assert md.batch_max_timestamp == T0 - 100 + 3
    assert md.header[8:12] == batch[8:12] and md.header[16:HEADER_SIZE] == batch[16:HEADER_SIZE]
    assert DefaultRecordBatch(md.header + batch[HEADER_SIZE:]).validate_crc()


def test_leader_epoch_stamped_and_cached(store: MetadataStore) -> None:
    tp, other = topic(store, 2)
    assert store.leader_epoch_cache(tp) == [(0, 0)]
    commit(store, [(tp, build_batch(2)), (tp, build_batch(1))])
    store.set_leader_epoch(tp, 3)
    store.set_leader_epoch(tp, 3)  # same epoch: no change
    commit(store, [(tp, build_batch(4)), (other, build_batch(1))])
    store.set_leader_epoch(tp, 7)
    commit1(store, tp, build_batch(1))
    assert store.leader_epoch_cache(tp) == [(0, 0), (3, 3), (7, 7)]
    assert store.leader_epoch_cache(other) == [(0, 0)]
    assert store.partition_state(tp)["leader_epoch"] == 7
    infos = fetch_all(store, tp)
    assert [(i.metadata.base_offset, i.metadata.partition_leader_epoch) for i in infos] == [
        (0, 0),
        (2, 0),
        (3, 3),
        (7, 7),
    ]
    for i in infos:
        assert int.from_bytes(i.metadata.header[12:16], "big", signed=True) == i.metadata.partition_leader_epoch
        assert int.from_bytes(i.metadata.header[0:8], "big", signed=True) == i.metadata.base_offset
    [o] = fetch_all(store, other)
    assert o.metadata.partition_leader_epoch == 0
    with pytest.raises(ValueError, match="leader epoch 2 < current 7"):
        store.set_leader_epoch(tp, 2)
    with pytest.raises(KeyError):
        store.set_leader_epoch(TopicIdPartition(uuid.uuid4(), 0), 1)
    with pytest.raises(KeyError):
        store.leader_epoch_cache(TopicIdPartition(tp.topic_id, 5))
    assert store.leader_epoch_cache(tp) == [(0, 0), (3, 3), (7, 7)]


# -------------------------------------------------------------- list_offsets


def test_list_offsets(store: MetadataStore, clock: Clock) -> None:
    [tp] = topic(store)
    assert lo(store, tp, EARLIEST) == (Errors.NONE, -1, 0)
    assert lo(store, tp, LATEST) == (Errors.NONE, -1, 0)
    assert lo(store, tp, MAX_TS) == (Errors.NONE, -1, -1)
    assert lo(store, tp, T0) == (Errors.NONE, -1, -1)
    # Max timestamps per batch (2 records each, so base ts = max - 1):
    #   offsets 0-1: +10, 2-3: +50, 4-5: +30, 6-7: +50, 8-9: +20
    maxes = [10, 50, 30, 50, 20]
    commit(store, [(tp, build_batch(2, timestamp_ms=T0 + m - 1)) for m in maxes])
    assert lo(store, tp, EARLIEST) == (Errors.NONE, -1, 0)
    assert lo(store, tp, LATEST) == (Errors.NONE, -1, 10)
    assert lo(store, tp, MAX_TS) == (Errors.NONE, T0 + 50, 2)  # the FIRST batch holding the max
    # By timestamp: the first batch whose max timestamp >= target.
    assert lo(store, tp, 0) == (Errors.NONE, T0 + 10, 0)
    assert lo(store, tp, T0 + 10) == (Errors.NONE, T0 + 10, 0)
    assert lo(store, tp, T0 + 11) == (Errors.NONE, T0 + 50, 2)
    assert lo(store, tp, T0 + 50) == (Errors.NONE, T0 + 50, 2)
    assert lo(store, tp, T0 + 51) == (Errors.NONE, -1, -1)
    # Start inside the max-timestamp batch (mid-batch): answers are clipped to the start.
    store.delete_records([DeleteRecordsRequest(tp, 3)])
    assert lo(store, tp, EARLIEST) == (Errors.NONE, -1, 3)
    assert lo(store, tp, MAX_TS) == (Errors.NONE, T0 + 50, 3)
    assert lo(store, tp, T0 + 1) == (Errors.NONE, T0 + 50, 3)
    # Start past the first max-timestamp batch: the next batch holding the max.
    store.delete_records([DeleteRecordsRequest(tp, 4)])
    assert lo(store, tp, MAX_TS) == (Errors.NONE, T0 + 50, 6)
    assert lo(store, tp, T0 + 1) == (Errors.NONE, T0 + 30, 4)
    # Entries' running max is still +50 from the deleted batch: +40 must skip batch 4-5 (+30).
    assert lo(store, tp, T0 + 40) == (Errors.NONE, T0 + 50, 6)
    assert lo(store, tp, T0 + 31) == (Errors.NONE, T0 + 50, 6)
    assert lo(store, tp, T0 + 30) == (Errors.NONE, T0 + 30, 4)
    # Start past every +50 batch.
    store.delete_records([DeleteRecordsRequest(tp, 8)])
    assert lo(store, tp, MAX_TS) == (Errors.NONE, T0 + 20, 8)
    assert lo(store, tp, T0 + 20) == (Errors.NONE, T0 + 20, 8)
    assert lo(store, tp, T0 + 21) == (Errors.NONE, -1, -1)
    assert lo(store, tp, T0 + 45) == (Errors.NONE, -1, -1)
    # New batches after deletion.
    commit(store, [(tp, build_batch(1, timestamp_ms=T0 + 15)), (tp, build_batch(1, timestamp_ms=T0 + 25))])
    assert lo(store, tp, MAX_TS) == (Errors.NONE, T0 + 25, 11)
    assert lo(store, tp, T0 + 21) == (Errors.NONE, T0 + 25, 11)
    assert lo(store, tp, LATEST) == (Errors.NONE, -1, 12)
    # Everything deleted.
    store.delete_records([DeleteRecordsRequest(tp, -1)])
    assert lo(store, tp, EARLIEST) == (Errors.NONE, -1, 12)
    assert lo(store, tp, LATEST) == (Errors.NONE, -1, 12)
    assert lo(store, tp, MAX_TS) == (Errors.NONE, -1, -1)
    assert lo(store, tp, T0) == (Errors.NONE, -1, -1)
    # Unknown partition.
    assert lo(store, TopicIdPartition(tp.topic_id, 1), LATEST)[0] == Errors.UNKNOWN_TOPIC_OR_PARTITION


def test_list_offsets_max_timestamp_after_reopen(tmp_path: Path) -> None:
    clock = Clock(T0)
    with MetadataStore.open(tmp_path / "s", sync=False, clock=clock) as store:
        [tp] = topic(store)
        commit(store, [(tp, build_batch(1, timestamp_ms=T0 + m)) for m in (5, 9, 3, 9, 1)])
        store.delete_records([DeleteRecordsRequest(tp, 2)])
    with MetadataStore.open(tmp_path / "s", readonly=True) as ro:
        assert lo(ro, tp, MAX_TS) == (Errors.NONE, T0 + 9, 3)
        assert lo(ro, tp, T0 + 4) == (Errors.NONE, T0 + 9, 3)
    with MetadataStore.open(tmp_path / "s", sync=False, clock=clock) as store:
        assert lo(store, tp, MAX_TS) == (Errors.NONE, T0 + 9, 3)
        commit1(store, tp, build_batch(1, timestamp_ms=T0 + 9))
        assert lo(store, tp, MAX_TS) == (Errors.NONE, T0 + 9, 3)
        store.delete_records([DeleteRecordsRequest(tp, 4)])
        assert lo(store, tp, MAX_TS) == (Errors.NONE, T0 + 9, 5)
        assert store.check() == []


# -------------------------------------------------------------- find_batches


def test_find_batches_kip74(store: MetadataStore) -> None:
    a, b, c = topic(store, 3)
    big = build_batch(1, value_bytes=5000)
    small = build_batch(1, value_bytes=10)
    commit(store, [(a, big), (a, small), (b, small), (b, small), (c, big)])
    s_big, s_small = len(big), len(small)
    # The first batch is returned although it exceeds both limits; nothing after it.
    ra, rb, rc = store.find_batches([FindBatchRequest(x, 0, 1000) for x in (a, b, c)], 1000)
    assert [i.metadata.base_offset for i in ra.batches] == [0]
    assert ra.batches[0].metadata.byte_size == s_big > 1000
    assert (rb.errors, rb.batches, rb.high_watermark) == (Errors.NONE, (), 2)
    assert (rc.errors, rc.batches) == (Errors.NONE, ())
    # The exception goes to the first partition WITH data: an empty one before it does not count.
    ra, rc = store.find_batches([FindBatchRequest(a, 2, 100), FindBatchRequest(c, 0, 100)], 100)
    assert (ra.errors, ra.batches, ra.high_watermark) == (Errors.NONE, (), 2)
    assert [i.metadata.byte_size for i in rc.batches] == [s_big]
    # ... and only to the first: a later partition's oversized first batch is not returned.
    rb, rc = store.find_batches([FindBatchRequest(b, 0, BIG), FindBatchRequest(c, 0, BIG)], 2 * s_small + 100)
    assert len(rb.batches) == 2 and rc.batches == ()
    # max_partition_fetch_bytes limits each partition; fetch_max_bytes the whole fetch.
    rb, ra = store.find_batches([FindBatchRequest(b, 0, s_small), FindBatchRequest(a, 1, BIG)], BIG)
    assert [i.metadata.base_offset for i in rb.batches] == [0]
    assert [i.metadata.base_offset for i in ra.batches] == [1]
    rb, ra = store.find_batches([FindBatchRequest(b, 0, BIG), FindBatchRequest(a, 1, BIG)], 2 * s_small)
    assert len(rb.batches) == 2 and ra.batches == ()
    rb, ra = store.find_batches([FindBatchRequest(b, 0, BIG), FindBatchRequest(a, 1, BIG)], 3 * s_small)
    assert len(rb.batches) == 2 and len(ra.batches) == 1
    # Everything fits: all batches, object key and byte ranges as committed.
    ra, rb, rc = store.find_batches([FindBatchRequest(x, 0, BIG) for x in (a, b, c)], BIG)
    assert [i.metadata.byte_offset for i in ra.batches] == [0, s_big]
    assert [i.metadata.byte_offset for i in rb.batches] == [s_big + s_small, s_big + 2 * s_small]
    assert len({i.object_key for r in (ra, rb, rc) for i in r.batches}) == 1
    assert len({i.batch_id for r in (ra, rb, rc) for i in r.batches}) == 5


def test_find_batches_offsets(store: MetadataStore) -> None:
    [tp] = topic(store)
    commit(store, [(tp, build_batch(3)), (tp, build_batch(4)), (tp, build_batch(2))])  # 0-2, 3-6, 7-8
    for offset, bases in ((0, [0, 3, 7]), (2, [0, 3, 7]), (3, [3, 7]), (5, [3, 7]), (8, [7])):
        [r] = store.find_batches([FindBatchRequest(tp, offset, BIG)], BIG)
        assert (r.errors, [i.metadata.base_offset for i in r.batches]) == (Errors.NONE, bases), offset
        assert (r.log_start_offset, r.high_watermark) == (0, 9)
    [r] = store.find_batches([FindBatchRequest(tp, 9, BIG)], BIG)
    assert (r.errors, r.batches, r.high_watermark) == (Errors.NONE, (), 9)
    [r] = store.find_batches([FindBatchRequest(tp, 10, BIG)], BIG)
    assert (r.errors, r.log_start_offset, r.high_watermark) == (Errors.OFFSET_OUT_OF_RANGE, 0, 9)
    store.delete_records([DeleteRecordsRequest(tp, 4)])
    [r] = store.find_batches([FindBatchRequest(tp, 3, BIG)], BIG)
    assert (r.errors, r.log_start_offset) == (Errors.OFFSET_OUT_OF_RANGE, 4)
    [r] = store.find_batches([FindBatchRequest(tp, 4, BIG)], BIG)
    assert [i.metadata.base_offset for i in r.batches] == [3, 7]  # the batch holding the start
    [r] = store.find_batches([FindBatchRequest(TopicIdPartition(uuid.uuid4(), 0), 0, BIG)], BIG)
    assert r.errors == Errors.UNKNOWN_TOPIC_OR_PARTITION


# ------------------------------------------------------------------ deletion


def test_delete_records(store: MetadataStore) -> None:
    tp, other = topic(store, 2)
    key = wal_key(T0)
    b3 = build_batch(3)
    commit(store, [(tp, b3), (tp, b3), (tp, b3), (other, b3)], key=key)  # tp: 0-2, 3-5, 6-8
    assert store.file_usage() == {key: FileUsage(4, 4 * len(b3))}

    def dr(offset: int, t: TopicIdPartition = tp) -> tuple[Errors, int]:
        [r] = store.delete_records([DeleteRecordsRequest(t, offset)])
        return r.errors, r.low_watermark

    assert dr(10) == (Errors.OFFSET_OUT_OF_RANGE, -1)  # beyond the HWM
    assert dr(-2) == (Errors.OFFSET_OUT_OF_RANGE, -1)
    assert dr(0) == (Errors.NONE, 0)
    # Mid-batch: the batch stays, with its file reference.
    assert dr(4) == (Errors.NONE, 4)
    assert [i.metadata.base_offset for i in fetch_all(store, tp)] == [3, 6]
    assert store.file_usage() == {key: FileUsage(3, 3 * len(b3))}
    assert store.partition_state(tp)["live_batches"] == 2
    # Below the current start: a no-op answering the current start.
    assert dr(2) == (Errors.NONE, 4)
    assert dr(4) == (Errors.NONE, 4)
    # A commit after it reports the new log start.
    r = commit1(store, tp, b3)
    assert (r.assigned_base_offset, r.log_start_offset) == (9, 4)
    # Exactly at a batch boundary.
    assert dr(6) == (Errors.NONE, 6)
    assert [i.metadata.base_offset for i in fetch_all(store, tp)] == [6, 9]
    # -1: the HWM; the log is empty but keeps its end offset.
    assert dr(-1) == (Errors.NONE, 12)
    assert store.partition_state(tp) == {
        "log_start_offset": 12,
        "log_end_offset": 12,
        "high_watermark": 12,
        "leader_epoch": 0,
        "live_batches": 0,
        "live_bytes": 0,
    }
    assert store.file_usage() == {key: FileUsage(1, len(b3))}  # other's batch
    assert dr(-1, other) == (Errors.NONE, 3)
    assert store.file_usage() == {}
    assert store.referenced_files([key]) == set()
    assert dr(0, TopicIdPartition(uuid.uuid4(), 0)) == (Errors.UNKNOWN_TOPIC_OR_PARTITION, -1)
    # Appends continue from the end.
    assert commit1(store, tp, b3).assigned_base_offset == 12
    # Several requests in one call, including for the same partition.
    rs = store.delete_records(
        [DeleteRecordsRequest(tp, 13), DeleteRecordsRequest(tp, 14), DeleteRecordsRequest(tp, 99)]
    )
    assert [(r.errors, r.low_watermark) for r in rs] == [
        (Errors.NONE, 13),
        (Errors.NONE, 14),
        (Errors.OFFSET_OUT_OF_RANGE, -1),
    ]


def test_retention_by_time(store: MetadataStore, clock: Clock) -> None:
    tp, tp2 = topic(store, 2, **{"retention.ms": 1000})
    [keep] = topic(store, **{"retention.ms": -1})
    ages = [5000, 3000, 1001, 1000, 10]  # offsets 0..4
    k1, k2 = wal_key(T0), wal_key(T0)
    commit(store, [(tp, build_batch(1, timestamp_ms=T0 - a)) for a in ages[:3]], key=k1)
    commit(
        store,
        [(tp, build_batch(1, timestamp_ms=T0 - a)) for a in ages[3:]] + [(keep, build_batch(1, timestamp_ms=0))],
        key=k2,
    )
    commit1(store, tp2, build_batch(1, timestamp_ms=T0 + 10))
    # older than now - retention.ms: strictly
    assert store.enforce_retention() == {tp: 3}
    assert [i.metadata.base_offset for i in fetch_all(store, tp)] == [3, 4]
    assert k1 not in store.file_usage()
    assert store.enforce_retention() == {}
    # With an explicit time.
    assert store.enforce_retention(T0 + 2000) == {tp: 5, tp2: 1}
    assert store.partition_state(tp)["log_start_offset"] == 5
    assert lo(store, tp, EARLIEST) == (Errors.NONE, -1, 5)
    assert store.file_usage() == {k2: FileUsage(1, len(build_batch(1, timestamp_ms=0)))}
    # retention.ms=-1 keeps even a batch from 1970.
    assert [i.metadata.base_offset for i in fetch_all(store, keep)] == [0]
    store.alter_topic_configs(keep.topic_id, {"retention.ms": 10})
    assert store.enforce_retention() == {keep: 1}
    assert store.file_usage() == {}


def test_retention_by_bytes(store: MetadataStore) -> None:
    [tp] = topic(store)
    b = build_batch(2, value_bytes=50)
    s = len(b)
    commit(store, [(tp, b)] * 5)  # offsets 0..9, 5 batches of s bytes
    assert store.enforce_retention() == {}  # retention.bytes=-1 by default
    # Remove the oldest batch while the rest is still >= retention.bytes.
    store.alter_topic_configs(tp.topic_id, {"retention.bytes": 3 * s + 1})
    assert store.enforce_retention() == {tp: 2}  # 4 batches = 4s stay >= 3s+1, 3s would not
    assert store.partition_state(tp)["live_bytes"] == 4 * s
    store.alter_topic_configs(tp.topic_id, {"retention.bytes": 2 * s})
    assert store.enforce_retention() == {tp: 6}  # exactly 2s left
    store.alter_topic_configs(tp.topic_id, {"retention.bytes": 0})
    assert store.enforce_retention() == {tp: 10}
    assert store.partition_state(tp)["live_batches"] == 0
    assert store.file_usage() == {}


def test_retention_log_append_time_uses_append_time(store: MetadataStore, clock: Clock) -> None:
    configs: dict[str, str | int] = {"message.timestamp.type": "LogAppendTime", "retention.ms": 1000}
    [tp] = topic(store, **configs)
    commit1(store, tp, build_batch(1, timestamp_ms=0))  # a producer timestamp from 1970
    assert store.enforce_retention() == {}
    clock.now += 1001
    assert store.enforce_retention() == {tp: 1}


def test_delete_topics_frees_file_references(store: MetadataStore) -> None:
    t1 = topic(store, 2)
    t2 = topic(store, 1)
    key = wal_key(T0)
    b = build_batch(1)
    commit(store, [(t1[0], idem(5, 0, 0)), (t1[1], b), (t2[0], b), (t1[0], b)], key=key)
    assert store.file_usage()[key].live_batches == 4
    store.delete_topics([t1[0].topic_id])
    assert store.file_usage() == {key: FileUsage(1, len(b))}
    assert store.referenced_files([key]) == {key}
    assert set(store.partitions()) == {t2[0]}
    [r] = store.find_batches([FindBatchRequest(t1[0], 0, BIG)], BIG)
    assert r.errors == Errors.UNKNOWN_TOPIC_OR_PARTITION
    assert commit1(store, t1[0], b).errors == Errors.UNKNOWN_TOPIC_OR_PARTITION
    assert store.delete_records([DeleteRecordsRequest(t1[1], -1)])[0].errors == Errors.UNKNOWN_TOPIC_OR_PARTITION
    with pytest.raises(KeyError):
        store.topic_config(t1[0].topic_id)
    store.delete_topics([t1[0].topic_id, uuid.uuid4()])  # unknown ids: no-op
    store.delete_topics([t2[0].topic_id])
    assert store.file_usage() == {}
    assert store.referenced_files([key]) == set()
    assert store.partitions() == []
    # Re-created under the same id: a fresh log and no producer state.
    store.create_topic_and_partitions([CreateTopicAndPartitionsRequest(t1[0].topic_id, "again", 1)])
    assert ok(commit1(store, t1[0], idem(5, 0, 9))) == (Errors.NONE, 0, False)
    assert store.leader_epoch_cache(t1[0]) == [(0, 0)]


def test_create_topic_idempotent_and_growing(store: MetadataStore) -> None:
    tid = uuid.uuid4()
    store.create_topic_and_partitions([CreateTopicAndPartitionsRequest(tid, "orders", 2, {"retention.ms": 5000})])
    tp0 = TopicIdPartition(tid, 0)
    commit1(store, tp0, build_batch(3))
    # Same request again, and with fewer partitions or other configs: nothing changes.
    store.create_topic_and_partitions([CreateTopicAndPartitionsRequest(tid, "orders", 2)])
    store.create_topic_and_partitions([CreateTopicAndPartitionsRequest(tid, "renamed", 1, {"retention.ms": 1})])
    assert sorted(p.partition for p in store.partitions()) == [0, 1]
    assert leo(store, tp0) == 3
    assert store.topic_config(tid).retention_ms == 5000
    # More partitions: the missing ones are added, existing ones keep their logs.
    store.create_topic_and_partitions([CreateTopicAndPartitionsRequest(tid, "orders", 4)])
    assert sorted(p.partition for p in store.partitions()) == [0, 1, 2, 3]
    assert leo(store, tp0) == 3
    assert commit1(store, TopicIdPartition(tid, 3), build_batch(1)).assigned_base_offset == 0
    assert commit1(store, TopicIdPartition(tid, 4), build_batch(1)).errors == Errors.UNKNOWN_TOPIC_OR_PARTITION
    assert store.leader_epoch_cache(TopicIdPartition(tid, 2)) == [(0, 0)]
    # Several topics in one call, one of them already there.
    tid2 = uuid.uuid4()
    store.create_topic_and_partitions(
        [CreateTopicAndPartitionsRequest(tid, "orders", 4), CreateTopicAndPartitionsRequest(tid2, "other", 1)]
    )
    assert len(store.partitions()) == 5
    with pytest.raises(ValueError, match="num_partitions"):
        store.create_topic_and_partitions([CreateTopicAndPartitionsRequest(uuid.uuid4(), "x", 0)])
    assert len(store.partitions()) == 5


# --------------------------------------------------------------- concurrency


def test_concurrent_commits_group_commit(tmp_path: Path) -> None:
    threads_n, calls = 4, 25
    with MetadataStore.open(tmp_path / "s", sync=True) as store:
        tps = topic(store, 3)
        results: dict[int, list[tuple[TopicIdPartition, int, int, int, int]]] = {}
        errors: list[BaseException] = []
        start = threading.Barrier(threads_n)

        def worker(t: int) -> None:
            try:
                rng = random.Random(t)
                pid = 1000 + t
                seqs = dict.fromkeys(tps, 0)
                mine = results.setdefault(t, [])
                start.wait()
                for _ in range(calls):
                    items = []
                    for tp in rng.sample(tps, rng.randint(1, 3)):
                        n = rng.randint(1, 3)
                        items.append((tp, idem(pid, 0, seqs[tp], records=n)))
                        items.append((tp, build_batch(1)))  # a non-idempotent one in between
                        seqs[tp] += n
                    for (tp, batch), r in zip(items, commit(store, items), strict=True):
                        assert (r.errors, r.is_duplicate) == (Errors.NONE, False)
                        h = BatchHeader.parse(batch)
                        mine.append((tp, h.producer_id, h.base_sequence, r.assigned_base_offset, h.record_count))
            except BaseException as e:
                errors.append(e)

        workers = [threading.Thread(target=worker, args=(t,)) for t in range(threads_n)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        assert errors == []
        assert store.check() == []
        acked = {(tp, base): (pid, seq, n) for rs in results.values() for tp, pid, seq, base, n in rs}
        for tp in tps:
            infos = fetch_all(store, tp)
            # Contiguous offsets from 0, every acknowledged batch at its offset, nothing else.
            expect = 0
            for i in infos:
                md = i.metadata
                assert md.base_offset == expect
                expect = md.last_offset + 1
                pid, seq, n = acked.pop((tp, md.base_offset))
                assert (md.producer_id, md.base_sequence, md.last_offset - md.base_offset + 1) == (pid, seq, n)
            assert expect == leo(store, tp)
            # Per producer, sequences in offset order are consecutive from 0.
            for t in range(threads_n):
                seqs = [
                    (i.metadata.base_sequence, i.metadata.last_sequence)
                    for i in infos
                    if i.metadata.producer_id == 1000 + t
                ]
                nxt = 0
                for first, last in seqs:
                    assert first == nxt
                    nxt = last + 1
        assert acked == {}
        assert sum(len(r) for r in results.values()) == sum(len(fetch_all(store, tp)) for tp in tps)


def test_retention_skips_compact_only_topics(store: MetadataStore) -> None:
    # As Kafka's deleteOldSegments: retention deletes only with cleanup.policy=delete.
    configs: dict[str, str | int] = {"retention.bytes": 0, "cleanup.policy": "compact"}
    [tp] = topic(store, **configs)
    commit(store, [(tp, build_batch(1))] * 3)
    assert store.enforce_retention() == {}
    store.alter_topic_configs(tp.topic_id, {"cleanup.policy": "compact,delete"})
    assert store.enforce_retention() == {tp: 3}
