"""The follower side of metadata-log replication in MetadataStore.

A leader store commits through ``commit_file``; a follower store copies its
log through ``read_log`` / ``append_replicated`` (as a broker's fetcher
will), truncates a divergent suffix with ``truncate_to`` and restarts with
``reset_to``.  Real LMDB, real v2 batches; every store ends with
``check() == []``.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from partlog import (
    CommitBatchResponse,
    CreateTopicAndPartitionsRequest,
    DeleteRecordsRequest,
    Errors,
    FindBatchRequest,
    ListOffsetsRequest,
    MetadataStore,
    TopicIdPartition,
)
from partlog.kafka.batch_header import BatchHeader
from partlog.kafka.leader_epochs import diverging_epoch, truncation_offset
from partlog.kafka.producer_state import ProducerEntry
from partlog.store import (
    LogRead,
    OffsetOutOfRangeError,
    ReplicaAppend,
    ReplicatedEntry,
    ReplicationError,
    StoreError,
)
from tests.batches import build_batch, request, wal_key
from tests.clock import Clock

T0 = 1_700_000_000_000
BIG = 1 << 30
EARLIEST = ListOffsetsRequest.EARLIEST_TIMESTAMP
LATEST = ListOffsetsRequest.LATEST_TIMESTAMP
MAX_TS = ListOffsetsRequest.MAX_TIMESTAMP


def open_store(path: Path | str, clock: Clock, *, auto_high_watermark: bool = True) -> MetadataStore:
    return MetadataStore.open(
        path, sync=False, clock=clock, map_size_bytes=1 << 24, auto_high_watermark=auto_high_watermark
    )


@pytest.fixture
def clock() -> Clock:
    return Clock(T0)


@pytest.fixture
def leader(tmp_path: Path, clock: Clock) -> Iterator[MetadataStore]:
    with open_store(tmp_path / "leader", clock) as s:
        yield s
        assert s.check() == []


@pytest.fixture
def follower(tmp_path: Path, clock: Clock) -> Iterator[MetadataStore]:
    # A broker's follower drives its HWM from the leader's: auto off.
    with open_store(tmp_path / "follower", clock, auto_high_watermark=False) as s:
        yield s
        assert s.check() == []


def topic(stores: Sequence[MetadataStore], partitions: int = 1, **configs: str | int) -> list[TopicIdPartition]:
    """The same topic (same id) on every store, as replicas of it."""
    tid = uuid.uuid4()
    req = CreateTopicAndPartitionsRequest(tid, f"t-{tid.hex[:6]}", partitions, configs)
    for s in stores:
        s.create_topic_and_partitions([req])
    return [TopicIdPartition(tid, p) for p in range(partitions)]


def commit(
    store: MetadataStore, items: Sequence[tuple[TopicIdPartition, bytes]], *, uploader: int = 1
) -> list[CommitBatchResponse]:
    """Commit ``items`` as one WAL object, batches back to back after a 1-byte lead."""
    reqs = []
    off = 1
    for i, (tp, batch) in enumerate(items):
        reqs.append(request(tp, batch, byte_offset=off, request_id=i))
        off += len(batch)
    return store.commit_file(wal_key(store._clock(), uploader), uploader, off + 7, reqs)


def commit1(store: MetadataStore, tp: TopicIdPartition, batch: bytes) -> CommitBatchResponse:
    [r] = commit(store, [(tp, batch)])
    assert r.errors == Errors.NONE, r
    return r


def idem(pid: int, epoch: int, seq: int, records: int = 1, ts: int = T0) -> bytes:
    return build_batch(records, producer_id=pid, producer_epoch=epoch, base_sequence=seq, timestamp_ms=ts)


def plain(records: int = 1, ts: int = T0, value_bytes: int = 10) -> bytes:
    return build_batch(records, timestamp_ms=ts, value_bytes=value_bytes)


def replicate(
    leader: MetadataStore, follower: MetadataStore, tp: TopicIdPartition, max_bytes: int = 0, rounds: int = 10_000
) -> int:
    """Fetch rounds as a follower's fetcher runs them: from the follower's log
    end, restarting at the leader's log start when below it.  Stops after
    ``rounds`` or at the first empty read (caught up, HWM passed on).
    Returns the rounds that appended."""
    appended = 0
    for _ in range(rounds):
        offset = follower.log_end_offset(tp)
        try:
            read = leader.read_log(tp, offset, max_bytes)
        except OffsetOutOfRangeError as e:
            assert offset < e.log_start_offset, e
            follower.reset_to(tp, e.log_start_offset)
            continue
        follower.append_replicated(
            tp, read.entries, leader_high_watermark=read.high_watermark, leader_log_start_offset=read.log_start_offset
        )
        if not read.entries:
            break
        appended += 1
    return appended


def whole_log(store: MetadataStore, tp: TopicIdPartition) -> tuple[ReplicatedEntry, ...]:
    lso = store.partition_state(tp)["log_start_offset"]
    return store.read_log(tp, lso, BIG).entries


def producers(store: MetadataStore, tp: TopicIdPartition) -> dict[int, ProducerEntry]:
    """The partition's durable producer states (white-box: there is no public
    accessor, and behaviour tests cannot see a whole window at once)."""
    part_id = store._catalog.parts[tp].part_id
    out = {}
    with store._read() as txn:
        # LMDB, then the journal's groups not yet applied to it, newest last.
        rows = [*txn.cursor(db=store._env.producers), *(kv for g in txn.groups for kv in g.producers.items())]
        for k, v in rows:
            pid_part, pid = int.from_bytes(k[:4], "big"), int.from_bytes(k[4:], "big", signed=True)
            if pid_part == part_id:
                out[pid] = ProducerEntry.decode(bytes(v))
    return out


def view(store: MetadataStore, tp: TopicIdPartition, *, skip: Sequence[str] = ()) -> dict[str, Any]:
    """Everything a client or walmgr can observe of one partition (batch ids,
    which are store-local, left out), less the ``skip`` keys."""
    state = store.partition_state(tp)
    [fetch] = store.find_batches([FindBatchRequest(tp, state["log_start_offset"], BIG)], BIG)
    targets = [EARLIEST, LATEST, MAX_TS, T0 - 1, T0, T0 + 1, T0 + 5, T0 + 10**9]
    offsets = store.list_offsets([ListOffsetsRequest(tp, t) for t in targets])
    epochs = store.leader_epoch_cache(tp)
    # The replica fetches' one-lookup form agrees with the whole cache.
    assert store.latest_leader_epochs([tp]) == [epochs[-1][0] if epochs else -1]
    out = {
        "state": state,
        "fetch": (fetch.errors, fetch.log_start_offset, fetch.high_watermark),
        "batches": [(b.object_key, b.metadata) for b in fetch.batches],
        "offsets": [(r.errors, r.timestamp, r.offset) for r in offsets],
        "epochs": epochs,
        "log": whole_log(store, tp),
        "producers": producers(store, tp),
    }
    return {k: v for k, v in out.items() if k not in skip}


def files(store: MetadataStore, keys: Sequence[str]) -> tuple[Any, ...]:
    return store.file_usage(), store.referenced_files(keys)


def all_keys(store: MetadataStore, tps: Sequence[TopicIdPartition]) -> list[str]:
    return sorted({e.object_key for tp in tps for e in whole_log(store, tp)})


# ------------------------------------------------------------ convergence


def test_follower_converges_in_small_steps_and_takes_over(
    leader: MetadataStore, follower: MetadataStore, clock: Clock
) -> None:
    tp, tp1 = topic([leader, follower], 2)
    [lat] = topic([leader, follower], 1, **{"message.timestamp.type": "LogAppendTime"})
    tps = [tp, tp1, lat]
    commit(leader, [(tp, idem(7, 0, 0, records=3)), (tp1, plain(2)), (lat, idem(9, 0, 0, records=2))])
    clock.now += 5
    commit(leader, [(tp, idem(7, 0, 3, records=2)), (tp, plain(4, ts=T0 + 3)), (lat, idem(9, 0, 2))])
    leader.set_leader_epoch(tp, 2)
    leader.set_leader_epoch(lat, 1)
    clock.now += 5
    r_last = commit(leader, [(tp, idem(7, 0, 5)), (tp1, idem(8, 3, 10, records=2)), (lat, idem(9, 0, 3))])
    commit(leader, [(tp, idem(8, 0, 0)), (tp, plain(1, ts=T0 + 7))])
    for p in tps:
        # max_bytes 0: one entry per round, the slowest possible follower.
        assert replicate(leader, follower, p, max_bytes=0) == leader.partition_state(p)["live_batches"]
    keys = all_keys(leader, tps)
    assert files(follower, [*keys, "nope"]) == files(leader, [*keys, "nope"])
    for p in tps:
        assert view(follower, p) == view(leader, p)
    assert leader.leader_epoch_cache(tp) == [(0, 0), (2, 9)]
    assert follower.high_watermark(tp) == leader.high_watermark(tp) == 12
    assert leader.check() == [] and follower.check() == []

    # Promotion: retries of batches the old leader wrote are duplicates with
    # the original offsets (and, on LogAppendTime, the original append time).
    follower.set_leader_epoch(tp, 3)
    follower.set_leader_epoch(lat, 2)
    clock.now += 1000
    dup = commit1(follower, tp, idem(7, 0, 5))
    assert (dup.is_duplicate, dup.assigned_base_offset) == (True, r_last[0].assigned_base_offset)
    dup_lat = commit1(follower, lat, idem(9, 0, 3))
    assert (dup_lat.is_duplicate, dup_lat.assigned_base_offset, dup_lat.log_append_time) == (
        True,
        r_last[2].assigned_base_offset,
        r_last[2].log_append_time,
    )
    nxt = commit1(follower, tp, idem(7, 0, 6))
    assert (nxt.is_duplicate, nxt.assigned_base_offset) == (False, 12)
    assert commit1(follower, tp1, idem(8, 3, 12)).assigned_base_offset == 4
    assert commit(follower, [(tp, idem(7, 0, 9))])[0].errors == Errors.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert follower.leader_epoch_cache(tp) == [(0, 0), (2, 9), (3, 12)]


def test_both_sides_drive_the_hwm(tmp_path: Path, clock: Clock) -> None:
    """As a replicated broker runs them: auto_high_watermark off on both,
    the leader's HWM set from the follower's progress."""
    with (
        open_store(tmp_path / "l", clock, auto_high_watermark=False) as leader,
        open_store(tmp_path / "f", clock, auto_high_watermark=False) as follower,
    ):
        [tp] = topic([leader, follower])
        for i in range(4):
            commit1(leader, tp, plain(i + 1))
        assert leader.high_watermark(tp) == 0
        replicate(leader, follower, tp, max_bytes=0, rounds=2)
        # The follower holds [0, 3); the leader learns it from the next fetch.
        assert follower.log_end_offset(tp) == 3 and follower.high_watermark(tp) == 0
        assert leader.set_high_watermark(tp, follower.log_end_offset(tp)) == 3
        replicate(leader, follower, tp, max_bytes=BIG)
        assert follower.high_watermark(tp) == 3
        assert leader.set_high_watermark(tp, follower.log_end_offset(tp)) == 10
        replicate(leader, follower, tp)
        assert follower.high_watermark(tp) == 10
        assert view(follower, tp) == view(leader, tp)
        assert leader.check() == [] and follower.check() == []


# ---------------------------------------------------------------- read_log


def test_read_log_bounds_and_sizes(tmp_path: Path, clock: Clock) -> None:
    with open_store(tmp_path / "l", clock, auto_high_watermark=False) as leader:
        [tp] = topic([leader])
        sizes = []
        for i in range(5):
            b = plain(2, value_bytes=100 * (i + 1))
            commit1(leader, tp, b)
            sizes.append(len(b))
        leader.set_high_watermark(tp, 4)
        read = leader.read_log(tp, 0, 0)
        assert isinstance(read, LogRead)
        assert [e.base_offset for e in read.entries] == [0]  # at least one entry
        assert (read.log_start_offset, read.log_end_offset, read.high_watermark, read.leader_epoch) == (0, 10, 4, 0)
        read = leader.read_log(tp, 0, sizes[0] + sizes[1])
        assert [e.base_offset for e in read.entries] == [0, 2]
        read = leader.read_log(tp, 0, sizes[0] + sizes[1] - 1)
        assert [e.base_offset for e in read.entries] == [0]
        # From inside a batch: that batch.  Above the HWM: included.
        read = leader.read_log(tp, 5, BIG)
        assert [(e.base_offset, e.last_offset) for e in read.entries] == [(4, 5), (6, 7), (8, 9)]
        assert [e.size for e in read.entries] == sizes[2:]
        e = read.entries[0]
        assert (e.uploader_broker_id, e.log_append_time, e.batch_max_timestamp, e.partition_leader_epoch) == (
            1,
            -1,
            T0 + 1,
            0,
        )
        assert e.file_size > e.byte_offset + e.size and e.object_key.startswith("wal/")
        assert leader.read_log(tp, 10, BIG).entries == ()
        leader.delete_records([DeleteRecordsRequest(tp, 3)])
        assert [x.base_offset for x in leader.read_log(tp, 3, BIG).entries] == [2, 4, 6, 8]
        for bad in (2, 11):
            with pytest.raises(OffsetOutOfRangeError, match=rf"{tp}: offset {bad} is outside the log \[3, 10\]") as ei:
                leader.read_log(tp, bad, BIG)
            assert (ei.value.log_start_offset, ei.value.log_end_offset) == (3, 10)
        with pytest.raises(KeyError):
            leader.read_log(TopicIdPartition(uuid.uuid4(), 0), 0, BIG)
        assert leader.check() == []


# ------------------------------------------------------------ truncation


def test_truncate_to_removes_references_exactly_and_rebuilds_producers(
    tmp_path: Path, leader: MetadataStore, follower: MetadataStore, clock: Clock
) -> None:
    [tp] = topic([leader, follower])
    # Offsets: pid 7 epoch 0 seq 0..1 @0, plain @2, pid 7 seq 2 @3, pid 8 @4,
    # pid 7 seq 3..4 @5 (same object as @4), pid 8 @7, pid 7 epoch 1 seq 0 @8,
    # pid 9 @9.
    commit(leader, [(tp, idem(7, 0, 0, records=2)), (tp, plain())])
    commit(leader, [(tp, idem(7, 0, 2))])
    commit(leader, [(tp, idem(8, 0, 0)), (tp, idem(7, 0, 3, records=2))])
    leader.set_leader_epoch(tp, 1)
    commit(leader, [(tp, idem(8, 0, 1)), (tp, idem(7, 1, 0)), (tp, idem(9, 0, 0))])
    replicate(leader, follower, tp)
    assert view(follower, tp)["log"] == view(leader, tp)["log"]
    assert follower.leader_epoch_cache(tp) == [(0, 0), (1, 7)]

    # A store that only ever had the prefix [0, 5).
    with open_store(tmp_path / "prefix", clock, auto_high_watermark=False) as prefix:
        topic_req = CreateTopicAndPartitionsRequest(tp.topic_id, "p", 1)
        prefix.create_topic_and_partitions([topic_req])
        while prefix.log_end_offset(tp) < 5:
            read = leader.read_log(tp, prefix.log_end_offset(tp), 0)
            prefix.append_replicated(tp, read.entries, leader_high_watermark=5, leader_log_start_offset=0)
        assert follower.truncate_to(tp, 6) == 4  # inside [5, 6]: that batch goes too
        keys = all_keys(leader, [tp])
        assert files(follower, keys) == files(prefix, keys)
        assert files(follower, keys) != files(leader, keys)
        # The partition's leader epoch is the newest it saw, not a log property.
        assert view(follower, tp, skip=["state"]) == view(prefix, tp, skip=["state"])
        assert follower.partition_state(tp) == prefix.partition_state(tp) | {"leader_epoch": 1}
        assert follower.partition_state(tp)["high_watermark"] == 5
        assert follower.leader_epoch_cache(tp) == [(0, 0)]
        assert prefix.check() == []
    assert follower.truncate_to(tp, 5) == 0 and follower.truncate_to(tp, 99) == 0
    # Producer states are what the remaining log says: pid 7 is back in
    # epoch 0 after seq 2, pid 8 after seq 0, pid 9 unknown again.
    assert set(producers(follower, tp)) == {7, 8}
    assert producers(follower, tp)[7].producer_epoch == 0
    assert [b.last_seq for b in producers(follower, tp)[7].batches] == [1, 2]

    follower.set_leader_epoch(tp, 2)
    assert commit1(follower, tp, idem(7, 0, 2)).is_duplicate  # still in the window
    r = commit1(follower, tp, idem(7, 0, 3, records=2))  # truncated: accepted again
    assert (r.is_duplicate, r.assigned_base_offset) == (False, 5)
    r = commit1(follower, tp, idem(8, 0, 1))
    assert (r.is_duplicate, r.assigned_base_offset) == (False, 7)
    r = commit1(follower, tp, idem(9, 0, 40))  # unknown producer: any sequence
    assert (r.is_duplicate, r.assigned_base_offset) == (False, 8)
    assert follower.leader_epoch_cache(tp) == [(0, 0), (2, 5)]


def test_truncate_to_refuses_below_log_start_and_lowers_hwm(leader: MetadataStore, follower: MetadataStore) -> None:
    [tp] = topic([leader, follower])
    for _ in range(4):
        commit1(leader, tp, plain(2))
    leader.delete_records([DeleteRecordsRequest(tp, 3)])
    replicate(leader, follower, tp)
    before = view(follower, tp), files(follower, all_keys(leader, [tp]))
    with pytest.raises(ValueError, match=rf"{tp}: cannot truncate to offset 2, below the log start offset 3"):
        follower.truncate_to(tp, 2)
    assert (view(follower, tp), files(follower, all_keys(leader, [tp]))) == before
    with pytest.raises(KeyError):
        follower.truncate_to(TopicIdPartition(uuid.uuid4(), 0), 0)
    assert follower.high_watermark(tp) == 8
    assert follower.truncate_to(tp, 6) == 1
    assert (follower.log_end_offset(tp), follower.high_watermark(tp)) == (6, 6)
    assert follower.set_high_watermark(tp, 100) == 6
    # The log start inside the cut batch: the log empties at its base.
    assert follower.truncate_to(tp, 3) == 2
    st_ = follower.partition_state(tp)
    assert (st_["log_start_offset"], st_["log_end_offset"], st_["high_watermark"]) == (2, 2, 2)
    assert follower.file_usage() == {}
    # Fetching on: below the leader's log start, so restart there (the
    # epoch cache then starts with the first entry fetched, as in Kafka).
    replicate(leader, follower, tp)
    assert view(follower, tp, skip=["epochs"]) == view(leader, tp, skip=["epochs"])
    assert follower.leader_epoch_cache(tp) == [(0, 2)]


def test_reset_to_and_a_log_start_inside_a_batch(leader: MetadataStore, follower: MetadataStore) -> None:
    [tp] = topic([leader, follower])
    commit1(leader, tp, idem(5, 0, 0, records=3))
    commit1(leader, tp, idem(5, 0, 3, records=3))
    commit1(leader, tp, plain(2))
    replicate(leader, follower, tp)
    follower.reset_to(tp, 100)
    assert follower.partition_state(tp) == {
        "log_start_offset": 100,
        "log_end_offset": 100,
        "high_watermark": 100,
        "leader_epoch": 0,
        "live_batches": 0,
        "live_bytes": 0,
    }
    assert follower.file_usage() == {} and follower.leader_epoch_cache(tp) == []
    assert producers(follower, tp) == {}
    assert follower.check() == []
    with pytest.raises(ValueError, match="negative"):
        follower.reset_to(tp, -1)

    # The leader's log start inside its first batch (DeleteRecords at 4 in
    # [3, 6)): a fresh follower restarts at 4 and takes the whole batch.
    leader.delete_records([DeleteRecordsRequest(tp, 4)])
    follower.reset_to(tp, 0)
    replicate(leader, follower, tp)
    # A restarted follower knows only the epochs and producer batches it fetched.
    assert view(follower, tp, skip=["epochs", "producers"]) == view(leader, tp, skip=["epochs", "producers"])
    assert follower.leader_epoch_cache(tp) == [(0, 3)]
    assert [b.first_seq for b in producers(follower, tp)[5].batches] == [3]
    assert follower.partition_state(tp)["log_start_offset"] == 4
    assert [e.base_offset for e in whole_log(follower, tp)] == [3, 6]
    keys = all_keys(leader, [tp])
    assert files(follower, keys) == files(leader, keys)
    follower.set_leader_epoch(tp, 1)
    assert commit1(follower, tp, idem(5, 0, 3, records=3)).assigned_base_offset == 3  # duplicate, as on the leader


def test_log_start_follows_the_leader(leader: MetadataStore, follower: MetadataStore) -> None:
    [tp] = topic([leader, follower])
    for _ in range(3):
        commit1(leader, tp, plain(2))
    replicate(leader, follower, tp)
    before = follower.stats["group_commits"]
    # Nothing changes but the HWM: no write transaction.
    assert follower.append_replicated(tp, [], leader_high_watermark=6, leader_log_start_offset=0) == 6
    assert follower.stats["group_commits"] == before
    leader.delete_records([DeleteRecordsRequest(tp, 3)])
    assert follower.append_replicated(tp, [], leader_high_watermark=6, leader_log_start_offset=3) == 6
    assert follower.stats["group_commits"] == before + 1
    assert follower.partition_state(tp)["log_start_offset"] == 3
    keys = all_keys(leader, [tp])
    assert files(follower, keys) == files(leader, keys)
    # Never past the log end.
    follower.truncate_to(tp, 4)
    assert follower.append_replicated(tp, [], leader_high_watermark=6, leader_log_start_offset=6) == 4
    assert follower.partition_state(tp)["log_start_offset"] == 4
    assert follower.file_usage() == {}


# --------------------------------------------------------------- errors


def test_bad_appends_name_partition_and_offset_and_change_nothing(
    leader: MetadataStore, follower: MetadataStore
) -> None:
    [tp] = topic([leader, follower])
    commit1(leader, tp, plain(2))
    commit1(leader, tp, plain(3))
    leader.set_leader_epoch(tp, 4)
    commit1(leader, tp, plain(1))
    log = whole_log(leader, tp)
    replicate(leader, follower, tp, rounds=1)  # [0, 2)
    keys = all_keys(leader, [tp])
    before = view(follower, tp), files(follower, keys), follower.stats["group_commits"]

    def unchanged() -> None:
        assert (view(follower, tp), files(follower, keys)) == before[:2]
        assert follower.check() == []

    def bad(entries: Sequence[ReplicatedEntry], match: str) -> None:
        with pytest.raises(ReplicationError, match=match):
            follower.append_replicated(tp, entries, leader_high_watermark=6, leader_log_start_offset=0)
        unchanged()

    bad([log[2]], rf"{tp}: replicated entry at offset 5 does not continue the log: expected offset 2")
    bad([log[0]], rf"{tp}: replicated entry at offset 0 does not continue the log: expected offset 2")
    bad([log[1], log[1]], rf"{tp}: replicated entry at offset 2 does not continue the log: expected offset 5")

    def with_epoch(e: ReplicatedEntry, epoch: int) -> ReplicatedEntry:
        return dataclasses.replace(e, header=e.header[:12] + epoch.to_bytes(4, "big", signed=True) + e.header[16:])

    # Within the entries, then against this log's epoch cache.
    bad(
        [with_epoch(log[1], 3), with_epoch(log[2], 2)],
        rf"{tp}: replicated entry at offset 5 has leader epoch 2, below 3",
    )
    good = follower.append_replicated(tp, [with_epoch(log[1], 3)], leader_high_watermark=0, leader_log_start_offset=0)
    assert good == 5 and follower.leader_epoch_cache(tp) == [(0, 0), (3, 2)]
    before = view(follower, tp), files(follower, keys), 0
    bad([with_epoch(log[2], 1)], rf"{tp}: replicated entry at offset 5 has leader epoch 1, below 3")
    # Malformed entries: refused before any state is read.
    e = log[2]
    at5 = rf"{tp}: replicated entry at offset 5"
    bad([dataclasses.replace(e, size=e.size + 1)], f"{at5}: size")
    bad([dataclasses.replace(e, header=e.header[:60])], rf"{tp}: replicated header is 60 bytes")
    bad([dataclasses.replace(e, file_size=e.byte_offset)], f"{at5}: byte range")
    bad([dataclasses.replace(e, object_key="")], f"{at5}: object key")
    bad([dataclasses.replace(e, log_append_time=T0)], f"{at5}: CreateTime")
    with pytest.raises(KeyError):
        follower.append_replicated(
            TopicIdPartition(uuid.uuid4(), 0), [], leader_high_watermark=0, leader_log_start_offset=0
        )
    # And the right entries still go in.
    replicate(leader, follower, tp)
    assert follower.leader_epoch_cache(tp) == [(0, 0), (3, 2), (4, 5)]


def test_one_write_per_fetch_and_a_bad_partition_fails_alone(leader: MetadataStore, follower: MetadataStore) -> None:
    tps = topic([leader, follower], 3)
    for _ in range(2):
        commit(leader, [(tp, plain(2)) for tp in tps])
    logs = [whole_log(leader, tp) for tp in tps]
    unknown = TopicIdPartition(uuid.uuid4(), 0)
    writes = follower.stats["group_commits"]
    outcomes = follower.append_replicated_fetch(
        [
            ReplicaAppend(tps[0], logs[0], 4, 0),
            ReplicaAppend(tps[1], logs[1][1:], 4, 0),  # does not continue the log
            ReplicaAppend(unknown, [], 4, 0),
            ReplicaAppend(tps[2], logs[2][:1], 4, 0),
        ]
    )
    assert outcomes[0] == 4 and outcomes[3] == 2
    assert isinstance(outcomes[1], ReplicationError) and f"{tps[1]}: replicated entry at offset 2" in str(outcomes[1])
    assert isinstance(outcomes[2], KeyError)
    assert follower.stats["group_commits"] == writes + 1  # one store write for the whole fetch
    assert [follower.log_end_offset(tp) for tp in tps] == [4, 0, 2]
    assert [follower.high_watermark(tp) for tp in tps] == [4, 0, 2]
    assert whole_log(follower, tps[0]) == logs[0] and whole_log(follower, tps[2]) == logs[2][:1]


def test_unknown_partitions_and_read_only_stores(tmp_path: Path, clock: Clock) -> None:
    with open_store(tmp_path / "s", clock, auto_high_watermark=False) as s:
        [tp] = topic([s])
        commit1(s, tp, plain(3))
        s.set_high_watermark(tp, 2)
        commit1(s, tp, plain(1))  # persists the HWM
        unknown = TopicIdPartition(uuid.uuid4(), 0)
        for call in (s.log_end_offset, s.high_watermark, lambda p: s.set_high_watermark(p, 1)):
            with pytest.raises(KeyError):
                call(unknown)
        assert s.set_high_watermark(tp, 4) == 4  # in memory only
    # Another process (LMDB allows one open per process: after close) sees
    # the persisted value, which lags.
    with MetadataStore.open(tmp_path / "s", readonly=True) as ro:
        assert (ro.log_end_offset(tp), ro.high_watermark(tp)) == (4, 2)
        assert ro.read_log(tp, 0, BIG).high_watermark == 2
        writes: list[Callable[[], object]] = [
            lambda: ro.set_high_watermark(tp, 4),
            lambda: ro.append_replicated(tp, [], leader_high_watermark=4, leader_log_start_offset=0),
            lambda: ro.truncate_to(tp, 0),
            lambda: ro.reset_to(tp, 0),
        ]
        for w in writes:
            with pytest.raises(StoreError, match="read-only"):
                w()
        with pytest.raises(KeyError):
            ro.high_watermark(TopicIdPartition(uuid.uuid4(), 0))


# -------------------------------------------------- auto_high_watermark off


def test_owner_driven_high_watermark(tmp_path: Path, clock: Clock) -> None:
    with open_store(tmp_path / "s", clock, auto_high_watermark=False) as s:
        [tp] = topic([s], 1, **{"retention.ms": 1000})
        commit1(s, tp, plain(2, ts=T0 - 5000))
        commit1(s, tp, plain(3, ts=T0 + 2))
        commit1(s, tp, plain(1, ts=T0 + 9))
        st_ = s.partition_state(tp)
        assert (st_["log_end_offset"], st_["high_watermark"]) == (6, 0)
        [r] = s.find_batches([FindBatchRequest(tp, 0, BIG)], BIG)
        assert (r.errors, r.batches, r.high_watermark) == (Errors.NONE, (), 0)
        assert s.list_offsets([ListOffsetsRequest(tp, LATEST)])[0].offset == 0
        assert s.enforce_retention(T0) == {}  # never past the HWM

        assert s.set_high_watermark(tp, 2) == 2
        assert s.set_high_watermark(tp, 1) == 2  # never lowered
        [r] = s.find_batches([FindBatchRequest(tp, 0, BIG)], BIG)
        assert [b.metadata.base_offset for b in r.batches] == [0] and r.high_watermark == 2
        # From the HWM to the log end an empty answer (as Kafka), past it out of range.
        for offset, err in ((2, Errors.NONE), (4, Errors.NONE), (6, Errors.NONE), (7, Errors.OFFSET_OUT_OF_RANGE)):
            [r] = s.find_batches([FindBatchRequest(tp, offset, BIG)], BIG)
            assert (r.errors, r.batches) == (err, ())
        assert s.set_high_watermark(tp, 5) == 5
        targets = (LATEST, MAX_TS, T0 + 2, T0 + 9)
        answers = s.list_offsets([ListOffsetsRequest(tp, t) for t in targets])
        # The max timestamp lies in [5, 6), above the HWM: no answer yet, as Kafka.
        assert [(r.timestamp, r.offset) for r in answers] == [(-1, 5), (-1, -1), (T0 + 4, 2), (-1, -1)]
        assert s.set_high_watermark(tp, 100) == 6  # capped at the log end
        [r_max] = s.list_offsets([ListOffsetsRequest(tp, MAX_TS)])
        assert (r_max.timestamp, r_max.offset) == (T0 + 9, 5)
        assert s.enforce_retention(T0) == {tp: 2}
        assert s.delete_records([DeleteRecordsRequest(tp, -1)])[0].low_watermark == 6
        assert s.check() == []

    # Persisted by the next write of the partition; until then in memory only.
    with open_store(tmp_path / "t", clock, auto_high_watermark=False) as s:
        [tp, other] = topic([s], 2)
        commit1(s, tp, plain(2))
        commit1(s, tp, plain(2))
        s.set_high_watermark(tp, 2)
        commit1(s, other, plain(1))  # another partition: does not persist tp's
    with open_store(tmp_path / "t", clock, auto_high_watermark=False) as s:
        assert s.high_watermark(tp) == 0
        s.set_high_watermark(tp, 2)
        commit1(s, tp, plain(1))
        assert s.partition_state(tp)["high_watermark"] == 2
    with open_store(tmp_path / "t", clock, auto_high_watermark=False) as s:
        assert s.high_watermark(tp) == 2 and s.partition_state(tp)["high_watermark"] == 2
        assert s.check() == []


def test_auto_high_watermark_keeps_hwm_at_log_end(leader: MetadataStore) -> None:
    [tp] = topic([leader])
    commit1(leader, tp, plain(3))
    assert leader.high_watermark(tp) == leader.log_end_offset(tp) == 3
    assert leader.set_high_watermark(tp, 1) == 3


# ------------------------------------------------------------ divergence


def test_divergent_suffix_is_truncated_by_epoch_and_converges(leader: MetadataStore, follower: MetadataStore) -> None:
    """The follower led epoch 1 and wrote entries nobody else has; the real
    leader of epoch 2 wrote others.  Kafka's divergence arithmetic
    (partlog.kafka.leader_epochs) finds the cut; the follower then converges."""
    [tp] = topic([leader, follower])
    commit1(leader, tp, idem(3, 0, 0, records=2))
    replicate(leader, follower, tp)
    follower.set_leader_epoch(tp, 1)
    commit1(follower, tp, idem(3, 0, 2, records=3))  # never replicated
    commit1(follower, tp, plain(2))
    leader.set_leader_epoch(tp, 2)
    commit1(leader, tp, idem(3, 0, 2))
    commit1(leader, tp, plain(4))
    for _ in range(3):
        fetch_offset = follower.log_end_offset(tp)
        last_epoch = whole_log(follower, tp)[-1].partition_leader_epoch
        div = diverging_epoch(leader.leader_epoch_cache(tp), leader.log_end_offset(tp), fetch_offset, last_epoch)
        if div is None:
            break
        offset, _ = truncation_offset(follower.leader_epoch_cache(tp), fetch_offset, follower.high_watermark(tp), div)
        follower.truncate_to(tp, offset)
    assert follower.log_end_offset(tp) == 2
    replicate(leader, follower, tp)
    assert view(follower, tp) == view(leader, tp)
    keys = sorted(set(all_keys(leader, [tp])) | {"gone"})
    assert files(follower, keys) == files(leader, keys)


def test_an_epoch_led_without_appends_is_truncated_away(leader: MetadataStore, follower: MetadataStore) -> None:
    """This replica became leader of epoch 5 and appended nothing; the real
    leader's log goes on with epoch-0 entries.  As Kafka, truncating at the
    log end drops the empty epoch so those entries can be appended."""
    [tp] = topic([leader, follower])
    commit1(leader, tp, plain(2))
    replicate(leader, follower, tp)
    follower.set_leader_epoch(tp, 5)
    commit1(leader, tp, plain(1))
    with pytest.raises(ReplicationError, match=rf"{tp}: replicated entry at offset 2 has leader epoch 0, below 5"):
        replicate(leader, follower, tp)
    assert follower.leader_epoch_cache(tp) == [(0, 0), (5, 2)]
    assert follower.truncate_to(tp, 2) == 0
    assert follower.leader_epoch_cache(tp) == [(0, 0)]
    replicate(leader, follower, tp)
    assert view(follower, tp, skip=["state"]) == view(leader, tp, skip=["state"])


# ------------------------------------------------------- property test

OP_KINDS = ("commit",) * 4 + ("replicate",) * 3 + ("truncate",) * 2 + ("epoch", "tick")
BATCH_KINDS = ("plain", "p1", "p2", "p1", "dup", "bump")


@st.composite
def an_op(draw: st.DrawFn) -> tuple[str, Any]:
    kind = draw(st.sampled_from(OP_KINDS))
    arg: Any = None
    if kind == "commit":
        arg = draw(st.lists(st.sampled_from(BATCH_KINDS), min_size=1, max_size=3))
    elif kind == "replicate":
        arg = (draw(st.integers(1, 4)), draw(st.sampled_from([0, 100, 250, BIG])))
    elif kind == "truncate":
        arg = draw(st.floats(0, 1))
    return kind, arg


OPS = st.lists(an_op(), min_size=10, max_size=40)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS)
def test_follower_log_is_always_a_prefix_of_the_leaders(ops: list[tuple[str, Any]]) -> None:
    root = tempfile.mkdtemp(prefix="partlog-repl-")
    clock = Clock(T0)
    try:
        with (
            open_store(f"{root}/l", clock) as leader,
            open_store(f"{root}/f", clock, auto_high_watermark=False) as follower,
        ):
            [tp] = topic([leader, follower])
            # Per producer: (epoch, next sequence, last batch sent).
            clients: dict[int, tuple[int, int, bytes | None]] = {1: (0, 0, None), 2: (0, 0, None)}
            for op, arg in ops:
                if op == "commit":
                    items = []
                    for kind in arg:
                        if kind == "plain":
                            items.append((tp, plain(2, ts=clock.now)))
                            continue
                        pid = 2 if kind == "p2" else 1
                        epoch, seq, last = clients[pid]
                        if kind == "dup" and last is not None:
                            items.append((tp, last))
                            continue
                        if kind == "bump":
                            epoch, seq = epoch + 1, 0
                        b = idem(pid, epoch, seq, records=1 + seq % 3, ts=clock.now)
                        clients[pid] = (epoch, seq + 1 + seq % 3, b)
                        items.append((tp, b))
                    assert all(r.errors == Errors.NONE for r in commit(leader, items))
                elif op == "epoch":
                    leader.set_leader_epoch(tp, leader.partition_state(tp)["leader_epoch"] + 1)
                elif op == "replicate":
                    rounds, max_bytes = arg
                    replicate(leader, follower, tp, max_bytes=max_bytes, rounds=rounds)
                elif op == "truncate":
                    st_ = follower.partition_state(tp)
                    lso, leo = st_["log_start_offset"], st_["log_end_offset"]
                    follower.truncate_to(tp, lso + int((leo - lso) * arg))
                else:
                    clock.now += 1
                mine, theirs = whole_log(follower, tp), whole_log(leader, tp)
                assert mine == theirs[: len(mine)]
                assert follower.check() == [] and leader.check() == []
                assert follower.high_watermark(tp) <= follower.log_end_offset(tp)
            replicate(leader, follower, tp)
            assert whole_log(follower, tp) == whole_log(leader, tp)
            mine_v, theirs_v = view(follower, tp), view(leader, tp)
            leo = leader.log_end_offset(tp)
            # An epoch that wrote nothing yet is known only to its leader.
            for v in (mine_v, theirs_v):
                v["epochs"] = [(e, s) for e, s in v["epochs"] if s < leo]
                v["state"] = v["state"] | {"leader_epoch": None}
            assert mine_v == theirs_v
            keys = [*all_keys(leader, [tp]), "x"]
            assert files(follower, keys) == files(leader, keys)
            assert follower.check() == [] and leader.check() == []
    finally:
        shutil.rmtree(root, ignore_errors=True)


# ------------------------------------------ the journal path, crashes, leader commits beside

JOURNAL_OPS = (
    ("commit",) * 4
    + ("replicate",) * 4
    + ("lead", "concurrent", "truncate", "epoch", "delete", "checkpoint", "crash", "reopen", "tick")
)


def open_follower(path: str, clock: Clock) -> MetadataStore:
    """Checkpoints inline and often: reads come from the overlay, LMDB and both."""
    return MetadataStore.open(
        path,
        sync=False,
        clock=clock,
        map_size_bytes=1 << 24,
        auto_high_watermark=False,
        checkpoint_thread=False,
        checkpoint_groups_max=3,
    )


def fetch_round(leader: MetadataStore, follower: MetadataStore, tps: Sequence[TopicIdPartition], entries: int) -> None:
    """One fetch response for every partition of ``tps``, applied in one call."""
    appends = []
    for tp in tps:
        offset = follower.log_end_offset(tp)
        try:
            read = leader.read_log(tp, offset, BIG, entries)
        except OffsetOutOfRangeError as e:
            assert offset < e.log_start_offset, e
            follower.reset_to(tp, e.log_start_offset)
            continue
        appends.append(ReplicaAppend(tp, read.entries, read.high_watermark, read.log_start_offset))
    for outcome in follower.append_replicated_fetch(appends):
        assert not isinstance(outcome, BaseException), outcome


def last_offset(e: ReplicatedEntry) -> int:
    h = BatchHeader.parse(e.header)
    return h.base_offset + h.last_offset_delta


def acknowledged(store: MetadataStore, tps: Sequence[TopicIdPartition]) -> list[Any]:
    return [
        (whole_log(store, tp), producers(store, tp), store.leader_epoch_cache(tp), store.log_end_offset(tp))
        for tp in tps
    ]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(st.tuples(st.sampled_from(JOURNAL_OPS), st.integers(0, 1 << 16)), min_size=10, max_size=40))
def test_follower_appends_through_the_journal_survive_crashes(ops: list[tuple[str, int]]) -> None:
    """Follower appends (the journal path, and the exclusive one for new
    epochs and log start moves) interleaved with the follower's own leader
    commits (in the same groups when concurrent), checkpoints, truncations
    and crashes: what an append acknowledged survives a crash exactly, the
    follower's logs stay prefixes of the leader's, and converge."""
    root = tempfile.mkdtemp(prefix="partlog-repl-journal-")
    clock = Clock(T0)
    try:
        with open_store(f"{root}/l", clock) as leader:
            follower = open_follower(f"{root}/f", clock)
            try:
                tps = topic([leader, follower], 2)
                [own] = topic([follower])
                seqs = {tp: 0 for tp in tps}
                for op, n in ops:
                    tp = tps[n % 2]
                    if op == "commit":
                        items = []
                        for k in range(1 + n % 3):
                            t = tps[(n >> k) % 2]
                            if (n >> 4) % 2:
                                items.append((t, idem(5, 0, seqs[t], records=2, ts=clock.now)))
                                seqs[t] += 2
                            else:
                                items.append((t, plain(1 + k, ts=clock.now)))
                        assert all(r.errors == Errors.NONE for r in commit(leader, items))
                    elif op == "replicate":
                        fetch_round(leader, follower, tps, 1 + n % 4)
                    elif op == "lead":
                        commit1(follower, own, plain(2, ts=clock.now))
                    elif op == "concurrent":
                        # The follower's leader commits share groups with its appends.
                        done = threading.Event()

                        def lead(store: MetadataStore = follower, done: threading.Event = done) -> None:
                            while not done.is_set():
                                commit1(store, own, plain(1, ts=clock.now))

                        th = threading.Thread(target=lead)
                        th.start()
                        try:
                            for k in range(3):
                                fetch_round(leader, follower, tps, 1 + (n >> k) % 3)
                        finally:
                            done.set()
                            th.join()
                    elif op == "truncate":
                        st_ = follower.partition_state(tp)
                        lso, leo = st_["log_start_offset"], st_["log_end_offset"]
                        follower.truncate_to(tp, lso + (leo - lso) * (n % 5) // 4)
                    elif op == "epoch":
                        leader.set_leader_epoch(tp, leader.partition_state(tp)["leader_epoch"] + 1)
                    elif op == "delete":
                        state = leader.partition_state(tp)
                        target = state["log_start_offset"] + (state["high_watermark"] - state["log_start_offset"]) // 2
                        leader.delete_records([DeleteRecordsRequest(tp, target)])
                    elif op == "checkpoint":
                        follower._checkpoint()
                    elif op in ("crash", "reopen"):
                        before = acknowledged(follower, [*tps, own])
                        follower.close(checkpoint=op == "reopen")
                        follower = open_follower(f"{root}/f", clock)
                        assert acknowledged(follower, [*tps, own]) == before
                    else:
                        clock.now += 1 + n % 3
                    for t in tps:
                        # Above the leader's log start, a prefix of its log.
                        theirs = whole_log(leader, t)
                        start = leader.partition_state(t)["log_start_offset"]
                        mine = [e for e in whole_log(follower, t) if last_offset(e) >= start]
                        assert mine == list(theirs[: len(mine)])
                        assert follower.high_watermark(t) <= follower.log_end_offset(t)
                    assert follower.check() == [] and leader.check() == []
                for _ in range(10_000):
                    if all(follower.log_end_offset(t) == leader.log_end_offset(t) for t in tps):
                        break
                    fetch_round(leader, follower, tps, 4)
                fetch_round(leader, follower, tps, 4)  # the HWM
                keys = [*all_keys(leader, tps), "x"]
                assert files(follower, keys)[1] == files(leader, keys)[1]
                for t in tps:
                    assert whole_log(follower, t) == whole_log(leader, t)
                    assert follower.high_watermark(t) == leader.high_watermark(t)
                assert follower.check() == []
            finally:
                follower.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_a_checkpoint_during_a_follower_append_hides_no_reference(tmp_path: Path, clock: Clock) -> None:
    """One WAL object holds batches of a partition this broker leads and of
    one it follows.  A checkpoint that applies the leader's commit (and
    releases its pending reference) while the follower's append is being
    sequenced must not make the append draw a second file id for the object:
    the append resolves its object keys before its LMDB snapshot opens."""
    with open_store(tmp_path / "l", clock) as leader, open_follower(str(tmp_path / "f"), clock) as follower:
        [tp] = topic([leader, follower])
        [own] = topic([follower])
        key = wal_key(clock.now)
        [r] = leader.commit_file(key, 1, 1000, [request(tp, plain(1), byte_offset=0)])
        assert r.errors == Errors.NONE
        [r] = follower.commit_file(key, 1, 1000, [request(own, plain(1), byte_offset=500)])
        assert r.errors == Errors.NONE and follower._overlay  # pending, not yet in LMDB
        epochs = follower._epochs
        real = epochs.latest

        def latest_then_checkpoint(txn: Any, part_ids: list[int]) -> list[int]:
            value = real(txn, part_ids)
            follower._checkpoint()  # as the checkpoint thread may, right now
            return value

        epochs.latest = latest_then_checkpoint  # type: ignore[method-assign]
        try:
            fetch_round(leader, follower, [tp], 1)
        finally:
            del epochs.latest
        follower._checkpoint()
        assert follower.check() == []
        assert follower.file_usage()[key].live_batches == 2
