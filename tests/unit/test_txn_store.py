"""Transactions on a partition leader's store (issue 28, part A), real LMDB.

* The marker's control batch is Kafka's, byte for byte (kafka-python reads
  it back, CRC included) and served inline by the fetch path.
* Kafka's errors: hostile markers (unknown partitions, old producer and
  coordinator epochs, values out of range), INVALID_TXN_STATE, the group
  coordinator's NO_SEQUENCE batches, control batches from producers.
* A hypothesis state machine of one partition's leader (transactional and
  plain appends from a few producers, markers with good and stale epochs,
  HWM moves, DeleteRecords, reopen and crash) against a small reference
  model of the LSO, the aborted index and read_committed visibility (Kafka's
  ``collectAbortedTxns``); a follower fed the leader's entries, truncated
  and fed again, derives the same state.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from kafka.record.default_records import DefaultRecordBatch

from partlog.fetch.reads import assemble, plan_reads
from partlog.kafka.control_batch import CONTROL_BATCH_SIZE, control_batch, control_header, end_txn_marker
from partlog.kafka.errors import Errors
from partlog.kafka.producer_state import ProducerEntry
from partlog.kafka.record_batch import build_record_batch
from partlog.kafka.records import (
    AbortedTxn,
    CreateTopicAndPartitionsRequest,
    DeleteRecordsRequest,
    FindBatchRequest,
    IsolationLevel,
    ListOffsetsRequest,
    TopicIdPartition,
    TxnMarkerRequest,
    TxnMarkerResponse,
)
from partlog.store import MetadataStore, OffsetOutOfRangeError
from tests.batches import request, wal_key
from tests.clock import Clock

T0 = 1_700_000_000_000
BIG = 1 << 30
RC = IsolationLevel.READ_COMMITTED


def batch(pid: int, epoch: int, seq: int, *, txn: bool, records: int = 1) -> bytes:
    return build_record_batch(
        [(None, b"v", T0 + i) for i in range(records)],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        transactional=txn,
    )


def open_store(path: Path | str, clock: Clock, *, auto_high_watermark: bool = True) -> MetadataStore:
    return MetadataStore.open(
        path, sync=False, clock=clock, map_size_bytes=1 << 24, auto_high_watermark=auto_high_watermark
    )


def make_topic(stores: list[MetadataStore], **configs: str | int) -> TopicIdPartition:
    tid = uuid.uuid4()
    for s in stores:
        s.create_topic_and_partitions([CreateTopicAndPartitionsRequest(tid, f"t-{tid.hex[:6]}", 1, configs)])
    return TopicIdPartition(tid, 0)


def commit(store: MetadataStore, tp: TopicIdPartition, data: bytes) -> tuple[Errors, int]:
    [r] = store.commit_file(wal_key(T0), 1, len(data) + 1, [request(tp, data, byte_offset=1)])
    return r.errors, r.assigned_base_offset


def marker(tp: TopicIdPartition, pid: int, epoch: int, ce: int, committed: bool) -> TxnMarkerRequest:
    return TxnMarkerRequest(tp, pid, epoch, ce, committed)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MetadataStore]:
    with open_store(tmp_path / "s", Clock(T0)) as s:
        yield s
        assert s.check() == []


# ------------------------------------------------------------ the control batch


@pytest.mark.parametrize("committed", [True, False])
@pytest.mark.parametrize("log_append_time", [True, False])
def test_control_batch_is_kafkas(committed: bool, log_append_time: bool) -> None:
    header = control_header(
        base_offset=41,
        partition_leader_epoch=3,
        producer_id=7,
        producer_epoch=2,
        timestamp=T0,
        log_append_time=log_append_time,
        committed=committed,
        coordinator_epoch=9,
    )
    data = control_batch(header, committed, 9)
    assert len(data) == CONTROL_BATCH_SIZE
    b = DefaultRecordBatch(data)
    assert b.validate_crc() and b.is_control_batch and b.is_transactional
    assert (b.base_offset, b.producer_id, b.producer_epoch, b.base_sequence) == (41, 7, 2, -1)
    [r] = list(b)
    # Kafka's ControlRecordType key (version 0, type) and EndTransactionMarker value (version 0, epoch).
    assert r.key == bytes([0, 0, 0, 1 if committed else 0])
    assert r.value == bytes([0, 0, 0, 0, 0, 9])
    assert end_txn_marker(data) == (committed, 9)
    assert end_txn_marker(batch(1, 0, 0, txn=True)) is None


def test_producer_entry_keeps_its_transaction() -> None:
    from partlog.kafka.producer_state import AppendedBatch, ProducerWindow

    plain = ProducerEntry(3, (AppendedBatch(0, 1, 10, 11, T0, -1),), T0)
    txn = plain._replace(txn_first_offset=10, coordinator_epoch=4)
    # Without transaction fields the bytes are those of before transactions.
    assert len(plain.encode()) == 11 + 40 and len(txn.encode()) == 11 + 12 + 40
    for entry in (plain, txn, ProducerEntry(0, (), T0, -1, 2)):
        raw = entry.encode()
        assert ProducerEntry.decode(raw) == entry
        window = ProducerWindow.from_encoded(raw)
        assert window.encoded() == raw and window.entry() == entry
    # A producer with an ongoing transaction never expires (Kafka's isProducerExpired).
    assert plain.is_expired(T0 + 10**12, 1) and not txn.is_expired(T0 + 10**12, 1)
    assert not ProducerWindow.from_encoded(txn.encode()).expired(T0 + 10**12, 1)


# ------------------------------------------------------------ Kafka's errors


def test_hostile_markers(store: MetadataStore) -> None:
    tp = make_topic([store])
    unknown = TopicIdPartition(uuid.uuid4(), 0)
    assert commit(store, tp, batch(5, 3, 0, txn=True)) == (Errors.NONE, 0)
    got = store.write_txn_markers(
        [
            marker(unknown, 5, 3, 0, True),  # UNKNOWN_TOPIC_OR_PARTITION
            marker(tp, 5, 2, 0, True),  # an older producer epoch
            marker(tp, 5, 3, -1, True),  # no coordinator epoch: out of range
            marker(tp, -1, 3, 0, True),  # no producer
            marker(tp, 5, 3, 4, False),  # aborts the transaction
            marker(tp, 5, 3, 3, True),  # an older coordinator epoch
            marker(tp, 6, 0, 0, True),  # a producer never seen: written all the same
        ],
        T0,
    )
    assert got == [
        TxnMarkerResponse(Errors.UNKNOWN_TOPIC_OR_PARTITION, -1),
        TxnMarkerResponse(Errors.INVALID_PRODUCER_EPOCH, -1),
        TxnMarkerResponse(Errors.INVALID_REQUEST, -1),
        TxnMarkerResponse(Errors.INVALID_REQUEST, -1),
        TxnMarkerResponse(Errors.NONE, 1),
        TxnMarkerResponse(Errors.TRANSACTION_COORDINATOR_FENCED, -1),
        TxnMarkerResponse(Errors.NONE, 2),
    ]
    [rc] = store.find_batches([FindBatchRequest(tp, 0, BIG, RC)], BIG)
    assert [b.metadata.base_offset for b in rc.batches] == [0, 1, 2]
    assert rc.aborted == (AbortedTxn(5, 0),)
    # Markers are no file references: one WAL object, one batch.
    assert [u.live_batches for u in store.file_usage().values()] == [1]
    assert store.partition_state(tp)["live_batches"] == 3


def test_producer_rules(store: MetadataStore) -> None:
    tp = make_topic([store])
    assert commit(store, tp, batch(5, 0, 0, txn=True)) == (Errors.NONE, 0)
    # A plain batch inside a transaction: Kafka's INVALID_TXN_STATE.
    assert commit(store, tp, batch(5, 0, 1, txn=False))[0] == Errors.INVALID_TXN_STATE
    # A retry of the transactional batch is still its duplicate.
    assert commit(store, tp, batch(5, 0, 0, txn=True)) == (Errors.NONE, 0)
    assert store.last_stable_offset(tp) == 0
    # The group coordinator's batches carry no sequence (AppendOrigin.COORDINATOR).
    assert commit(store, tp, batch(9, 4, -1, txn=True)) == (Errors.NONE, 1)
    assert commit(store, tp, batch(9, 4, -1, txn=True)) == (Errors.NONE, 2)
    assert commit(store, tp, batch(9, 3, -1, txn=True))[0] == Errors.INVALID_PRODUCER_EPOCH
    assert commit(store, tp, batch(9, 4, -1, txn=False))[0] == Errors.INVALID_RECORD
    # A producer may not send control batches.
    fake = control_batch(control_header(base_offset=0, partition_leader_epoch=0, producer_id=5, producer_epoch=0,
                                        timestamp=T0, log_append_time=False, committed=True, coordinator_epoch=0),
                         True, 0)  # fmt: skip
    assert commit(store, tp, fake)[0] == Errors.INVALID_RECORD
    assert store.write_txn_markers([marker(tp, 5, 0, 0, True)], T0) == [TxnMarkerResponse(Errors.NONE, 3)]
    assert store.last_stable_offset(tp) == 1  # producer 9's transaction is open
    assert store.write_txn_markers([marker(tp, 9, 4, 0, False)], T0) == [TxnMarkerResponse(Errors.NONE, 4)]
    assert store.last_stable_offset(tp) == 5
    # After the marker the producer writes plain batches again, in sequence.
    assert commit(store, tp, batch(5, 0, 1, txn=False)) == (Errors.NONE, 5)
    [rc] = store.find_batches([FindBatchRequest(tp, 0, BIG, RC)], BIG)
    assert rc.aborted == (AbortedTxn(9, 1),) and rc.last_stable_offset == 6
    [lo] = store.list_offsets([ListOffsetsRequest(tp, ListOffsetsRequest.LATEST_TIMESTAMP, RC)])
    assert lo.offset == 6


def test_fetch_serves_the_inline_marker(store: MetadataStore) -> None:
    tp = make_topic([store], **{"message.timestamp.type": "LogAppendTime"})
    data = batch(5, 0, 0, txn=True, records=3)
    commit(store, tp, data)
    store.write_txn_markers([marker(tp, 5, 0, 2, True)], T0 + 7)
    [f] = store.find_batches([FindBatchRequest(tp, 0, BIG, RC)], BIG)
    reads = plan_reads(f.batches)
    assert [r.key for r in reads] == [f.batches[0].object_key]  # no read for the marker
    bytes_of = {r.key: (r.offset, b"\0" + data) for r in reads}
    [pd] = assemble({tp: f.batches}, {k: (off - 1, payload) for k, (off, payload) in bytes_of.items()})
    assert pd.error == Errors.NONE
    mark = DefaultRecordBatch(pd.records[len(data) :])
    assert mark.validate_crc() and mark.is_control_batch and mark.base_offset == 3
    assert mark.timestamp_type == 1 and mark.max_timestamp == T0 + 7
    assert end_txn_marker(pd.records[len(data) :]) == (True, 2)


def test_retention_reset_deletion_and_read_only_stores(tmp_path: Path) -> None:
    clock = Clock(T0)
    store = open_store(tmp_path / "s", clock)
    tp = make_topic([store], **{"retention.ms": 1000})
    other = make_topic([store])
    for t in (tp, other):
        commit(store, t, batch(5, 0, 0, txn=True))
        store.write_txn_markers([marker(t, 5, 0, 0, False)], T0)  # aborted: [0, 1]
        commit(store, t, batch(5, 0, 1, txn=True))  # ongoing from 2
    assert aborted_index(store, tp) == [(1, 5, 0, 2)]
    want = {t: store.find_batches([FindBatchRequest(t, 0, BIG, RC)], BIG) for t in (tp, other)}
    assert want[tp][0].aborted == (AbortedTxn(5, 0),) and want[tp][0].last_stable_offset == 2
    # A read-only store sees the same, from LMDB and the journal's overlay.
    store.close(checkpoint=False)
    with MetadataStore.open(tmp_path / "s", readonly=True) as ro:
        for t in (tp, other):
            assert ro.last_stable_offset(t) == 2
            assert ro.find_batches([FindBatchRequest(t, 0, BIG, RC)], BIG) == want[t]
    with open_store(tmp_path / "s", clock) as store:
        # Retention (every timestamp is T0) deletes up to the HWM, past the
        # ABORT marker and the open transaction's start: the index entry goes,
        # the transaction stays open, the LSO is the log start.
        clock.now = T0 + 10_000
        assert store.enforce_retention() == {tp: 3}
        assert aborted_index(store, tp) == [] and aborted_index(store, other) == [(1, 5, 0, 2)]
        assert store.last_stable_offset(tp) == 3
        store.write_txn_markers([marker(tp, 5, 0, 0, True)], clock.now)
        assert store.last_stable_offset(tp) == 4
        # DeleteRecords past the open transaction's start: the LSO is never below the log start.
        [r] = store.delete_records([DeleteRecordsRequest(other, 3)])
        assert r.low_watermark == 3 and store.last_stable_offset(other) == 3
        assert aborted_index(store, other) == []
        assert store.check() == []
        store.reset_to(other, 10)
        assert store.last_stable_offset(other) == 10 and aborted_index(store, other) == []
        # The producer's transaction went with the log: a plain batch is no INVALID_TXN_STATE.
        assert commit(store, other, batch(5, 0, 2, txn=False)) == (Errors.NONE, 10)
        store.delete_topics([tp.topic_id])
        assert store.check() == []


def test_inline_marker_crosses_the_replication_wire(tmp_path: Path) -> None:
    import msgpack

    from partlog.rpc.wire import ReplicaFetchResult, dec_replica_fetch_response, enc_replica_fetch_response

    clock = Clock(T0)
    with (
        open_store(tmp_path / "l", clock) as leader,
        open_store(tmp_path / "f", clock, auto_high_watermark=False) as follower,
    ):
        tp = make_topic([leader, follower])
        commit(leader, tp, batch(5, 0, 0, txn=True))
        leader.write_txn_markers([marker(tp, 5, 0, 3, False)], T0)
        read = leader.read_log(tp, 0, BIG)
        assert [e.object_key == "" for e in read.entries] == [False, True]
        body = enc_replica_fetch_response([ReplicaFetchResult(Errors.NONE, 2, 0, 2, entries=read.entries)])
        [got] = dec_replica_fetch_response(msgpack.unpackb(msgpack.packb(body), raw=False), 1)
        assert got.entries == read.entries
        follower.append_replicated(tp, got.entries, leader_high_watermark=2, leader_log_start_offset=0)
        [f] = follower.find_batches([FindBatchRequest(tp, 0, BIG, RC)], BIG)
        assert f.aborted == (AbortedTxn(5, 0),) and f.last_stable_offset == 2
        assert (
            f.batches[1].metadata.inline
            == leader.find_batches([FindBatchRequest(tp, 1, BIG)], BIG)[0].batches[0].metadata.inline
        )
        assert follower.check() == [] and follower.file_usage() == leader.file_usage()


# ------------------------------------------------------------ the model


Completed = tuple[int, int, int]
Aborted = tuple[int, int, int, int]


@dataclass
class Producer:
    epoch: int = 0
    seq: int = 0
    known: bool = False


@dataclass
class Model:
    """One partition: its entries (base, last, pid, kind, coordinator epoch),
    kinds "plain", "txn", "commit", "abort"; every derived state is a
    replay of them, as Kafka's leader derives it."""

    entries: list[tuple[int, int, int, str, int]] = field(default_factory=list)
    producers: dict[int, Producer] = field(default_factory=dict)
    log_start: int = 0
    hwm: int = 0

    @property
    def leo(self) -> int:
        return self.entries[-1][1] + 1 if self.entries else 0

    def replay(self, upto: int | None = None) -> tuple[dict[int, int], dict[int, int], list[Completed], list[Aborted]]:
        """(txn first offset by pid, coordinator epoch by pid, completed
        (first, pid, marker), aborted index (last, pid, first, lso))."""
        first: dict[int, int] = {}
        ce: dict[int, int] = {}
        completed: list[tuple[int, int, int]] = []
        aborted: list[Aborted] = []
        for base, _, pid, kind, cep in self.entries:
            if upto is not None and base >= upto:
                break
            if kind == "txn":
                if first.get(pid, -1) < 0:
                    first[pid] = base
            elif kind in ("commit", "abort"):
                f = first.get(pid, -1)
                if f >= 0:
                    completed.append((f, pid, base))
                    if kind == "abort":
                        others = [v for q, v in first.items() if q != pid and v >= 0]
                        aborted.append((base, pid, f, min(others) if others else base + 1))
                first[pid] = -1
                ce[pid] = cep
        return first, ce, completed, aborted

    def lso(self, log_start: int, hwm: int, upto: int | None = None) -> int:
        first, _, completed, _ = self.replay(upto)
        unstable = [f for f in first.values() if f >= 0] + [f for f, _, m in completed if m >= hwm]
        return min(max(min(unstable), log_start), hwm) if unstable else hwm

    def aborted_index(self, log_start: int, upto: int | None = None) -> list[Aborted]:
        return [a for a in self.replay(upto)[3] if a[0] >= log_start]

    def collect(self, fetch_offset: int, upper: int) -> tuple[AbortedTxn, ...]:
        out = []
        for last, pid, first, lso in self.aborted_index(self.log_start):
            if last < fetch_offset:
                continue
            if first < upper:
                out.append(AbortedTxn(pid, first))
            if lso >= upper:
                break
        return tuple(out)


PIDS = (1, 2, 3)
COORD_PID = 9  # only NO_SEQUENCE batches, as the group coordinator writes


def aborted_index(store: MetadataStore, tp: TopicIdPartition) -> list[tuple[int, int, int, int]]:
    """White-box: the whole aborted index as readers see it."""
    part_id = store._catalog.parts[tp].part_id
    with store._read() as view:
        return [tuple(int(x) for x in e) for e in store._txns.aborted(view, part_id)]  # type: ignore[misc]


def txn_producers(store: MetadataStore, tp: TopicIdPartition) -> dict[int, tuple[int, int, int]]:
    """White-box: each producer's (epoch, ongoing first offset, coordinator epoch)."""
    part_id = store._catalog.parts[tp].part_id
    out = {}
    with store._read() as txn:
        rows = [*txn.cursor(db=store._env.producers), *(kv for g in txn.groups for kv in g.producers.items())]
        for k, v in rows:
            if int.from_bytes(k[:4], "big") == part_id:
                e = ProducerEntry.decode(bytes(v))
                out[int.from_bytes(k[4:], "big", signed=True)] = (
                    e.producer_epoch,
                    e.txn_first_offset,
                    e.coordinator_epoch,
                )
    return out


class LeaderVsModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="txn-store-")
        self.clock = Clock(T0)
        self.leader = open_store(Path(self.dir) / "leader", self.clock, auto_high_watermark=False)
        self.follower = open_store(Path(self.dir) / "follower", self.clock, auto_high_watermark=False)
        self.model = Model()
        self.tp = make_topic([self.leader, self.follower])

    def teardown(self) -> None:
        try:
            assert self.leader.check() == []
            assert self.follower.check() == []
        finally:
            self.leader.close()
            self.follower.close()
            shutil.rmtree(self.dir, ignore_errors=True)

    @initialize()
    def start(self) -> None:
        self.leader.set_leader_epoch(self.tp, 1)

    # ------------------------------------------------------------ appends

    @rule(pid=st.sampled_from(PIDS), txn=st.booleans(), records=st.integers(1, 3), stale=st.booleans())
    def append(self, pid: int, txn: bool, records: int, stale: bool) -> None:
        p = self.model.producers.setdefault(pid, Producer())
        epoch = p.epoch - 1 if stale and p.epoch > 0 else p.epoch
        first, _, _, _ = self.model.replay()
        if p.known and epoch < p.epoch:
            want = Errors.INVALID_PRODUCER_EPOCH
        elif first.get(pid, -1) >= 0 and not txn:
            want = Errors.INVALID_TXN_STATE
        else:
            want = Errors.NONE
        err, offset = commit(self.leader, self.tp, batch(pid, epoch, p.seq, txn=txn, records=records))
        assert err == want
        if err == Errors.NONE:
            assert offset == self.model.leo
            self.model.entries.append((offset, offset + records - 1, pid, "txn" if txn else "plain", -1))
            p.seq += records
            p.known = True

    @rule()
    def coordinator_append(self) -> None:
        p = self.model.producers.setdefault(COORD_PID, Producer())
        err, offset = commit(self.leader, self.tp, batch(COORD_PID, p.epoch, -1, txn=True))
        assert (err, offset) == (Errors.NONE, self.model.leo)
        self.model.entries.append((offset, offset, COORD_PID, "txn", -1))
        p.known = True

    @rule(
        pid=st.sampled_from((*PIDS, COORD_PID)),
        committed=st.booleans(),
        epoch_step=st.sampled_from((0, 0, 0, 1, -1)),
        ce_step=st.sampled_from((0, 0, 1, -1)),
    )
    def end_txn(self, pid: int, committed: bool, epoch_step: int, ce_step: int) -> None:
        p = self.model.producers.setdefault(pid, Producer())
        epoch = p.epoch + epoch_step
        _, ces, _, _ = self.model.replay()
        ce = max(0, ces.get(pid, 0) + ce_step)
        if epoch < 0:
            return
        if p.known and epoch < p.epoch:
            want = Errors.INVALID_PRODUCER_EPOCH
        elif ces.get(pid, -1) > ce:
            want = Errors.TRANSACTION_COORDINATOR_FENCED
        else:
            want = Errors.NONE
        self.clock.now += 1
        [got] = self.leader.write_txn_markers([marker(self.tp, pid, epoch, ce, committed)], self.clock.now)
        assert got.error == want
        if want == Errors.NONE:
            assert got.offset == self.model.leo
            self.model.entries.append((got.offset, got.offset, pid, "commit" if committed else "abort", ce))
            if epoch != p.epoch:
                p.seq = 0  # a new epoch starts an empty window
            p.epoch = epoch
            p.known = True

    # ------------------------------------------------------------ the HWM, deletion, restarts

    @rule(data=st.data())
    def move_hwm(self, data: st.DataObject) -> None:
        target = data.draw(st.integers(self.model.hwm, self.model.leo))
        assert self.leader.set_high_watermark(self.tp, target) == target
        self.model.hwm = target

    @rule(data=st.data())
    def delete_records(self, data: st.DataObject) -> None:
        self.replicate()  # the follower never falls below the log start here
        offset = data.draw(st.integers(self.model.log_start, self.model.hwm))
        [r] = self.leader.delete_records([DeleteRecordsRequest(self.tp, offset)])
        assert r.errors == Errors.NONE
        self.model.log_start = max(self.model.log_start, offset)

    @rule(crash=st.booleans())
    def restart(self, crash: bool) -> None:
        before = self.observed(self.leader)
        self.leader.close(checkpoint=not crash)
        self.leader = open_store(Path(self.dir) / "leader", self.clock, auto_high_watermark=False)
        # The owner re-derives the HWM after a restart (it may lag when persisted).
        self.leader.set_high_watermark(self.tp, self.model.hwm)
        assert self.observed(self.leader) == before

    # ------------------------------------------------------------ the follower

    def replicate(self) -> None:
        for _ in range(1000):
            offset = self.follower.log_end_offset(self.tp)
            try:
                read = self.leader.read_log(self.tp, offset, 300)
            except OffsetOutOfRangeError as e:
                raise AssertionError("the follower fell below the log start") from e
            self.follower.append_replicated(
                self.tp,
                read.entries,
                leader_high_watermark=read.high_watermark,
                leader_log_start_offset=read.log_start_offset,
            )
            if not read.entries:
                return

    @rule(data=st.data())
    def follower_truncates_and_catches_up(self, data: st.DataObject) -> None:
        self.replicate()
        # A divergent suffix lies above the HWM (a truncation below it, after
        # an unclean election, may clamp first offsets below the log start:
        # docs/design/transactions.md).
        floor = max(self.model.log_start, self.follower.high_watermark(self.tp))
        bases = [b for b, _, _, _, _ in self.model.entries if b >= floor]
        if not bases:
            return
        cut = data.draw(st.sampled_from(bases))
        self.follower.truncate_to(self.tp, cut)
        f = self.follower
        hwm = f.high_watermark(self.tp)
        start = f.log_start_offset(self.tp)
        # As if the suffix had never been appended.
        assert f.log_end_offset(self.tp) == cut
        assert f.last_stable_offset(self.tp) == self.model.lso(start, hwm, cut)
        assert aborted_index(f, self.tp) == self.model.aborted_index(start, cut)
        first, ces, _, _ = self.model.replay(cut)
        for pid, (_, txn_first, ce) in txn_producers(f, self.tp).items():
            # Below the log start a first offset is as good as the log
            # start, and a coordinator epoch may be lost (docs/design/transactions.md).
            want = first.get(pid, -1)
            assert (txn_first >= 0) == (want >= 0), pid
            assert max(txn_first, start) == max(want, start), pid
            if any(e[2] == pid and e[3] in ("commit", "abort") and start <= e[0] < cut for e in self.model.entries):
                assert ce == ces.get(pid, -1), pid
        self.replicate()
        assert self.observed(self.follower, txns=True) == self.observed(self.leader, txns=True)

    # ------------------------------------------------------------ invariants

    def observed(self, store: MetadataStore, *, txns: bool = False) -> object:
        tp = self.tp
        [f] = store.find_batches([FindBatchRequest(tp, store.log_start_offset(tp), BIG, RC)], BIG)
        out: list[object] = [
            store.last_stable_offset(tp),
            store.high_watermark(tp),
            aborted_index(store, tp),
            # batch ids are each store's own
            (f.errors, f.log_start_offset, f.high_watermark, f.last_stable_offset, f.aborted),
            [(b.object_key, b.metadata) for b in f.batches],
        ]
        if txns:
            out.append(txn_producers(store, tp))
        return out

    @invariant()
    def leader_matches_model(self) -> None:
        m = self.model
        tp = self.tp
        lso = m.lso(m.log_start, m.hwm)
        assert 0 <= m.log_start <= lso <= m.hwm
        assert self.leader.last_stable_offset(tp) == lso
        [lo] = self.leader.list_offsets([ListOffsetsRequest(tp, ListOffsetsRequest.LATEST_TIMESTAMP, RC)])
        assert lo.offset == lso
        assert aborted_index(self.leader, tp) == m.aborted_index(m.log_start)
        live = [e for e in m.entries if e[1] >= m.log_start]
        for base, _, _, _, _ in [(m.log_start, 0, 0, "", 0), *live]:
            if base < m.log_start:
                continue
            [rc, ru] = self.leader.find_batches(
                [FindBatchRequest(tp, base, BIG, RC), FindBatchRequest(tp, base, BIG)], BIG * 2
            )
            assert rc.errors == ru.errors == Errors.NONE
            assert rc.last_stable_offset == ru.last_stable_offset == lso
            want = [e for e in live if e[1] >= base and e[1] < lso]
            assert [b.metadata.base_offset for b in rc.batches] == [e[0] for e in want]
            assert rc.aborted == (m.collect(base, want[-1][1] + 1) if want else ())
            assert ru.aborted == ()
            for b, e in zip(rc.batches, want, strict=True):
                if e[3] in ("commit", "abort"):
                    assert b.object_key == "" and end_txn_marker(b.metadata.inline) == (e[3] == "commit", e[4])
                else:
                    assert b.object_key and not b.metadata.inline
        # Markers never reference a WAL object.
        data_live = [e for e in live if e[3] in ("plain", "txn")]
        assert sum(u.live_batches for u in self.leader.file_usage().values()) == len(data_live)


LeaderVsModel.TestCase.settings = settings(
    max_examples=30,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_leader_matches_model = LeaderVsModel.TestCase
