"""The pure Sequencer against the reference model of Kafka, without LMDB.

A hypothesis state machine keeps the Sequencer's state in plain dicts
(:class:`MemoryState`, applying each returned delta as the store's commit
path does) and drives :class:`partlog.store.sequencer.Sequencer` and
:class:`tests.reference_model.KafkaModel` with the same commits of real Kafka
v2 batches: idempotent producers in order, resends (duplicates, also at the
edge of the 5-batch window), gaps, stale and bumped epochs, sequences
wrapping at 2^31-1, clock jumps across producer expiry and the commit
deadline, timestamps outside ``message.timestamp.after.max.ms``, LogAppendTime
topics, unknown partitions, malformed keys, short objects, new leader epochs
and log starts moved by DeleteRecords.

After every step: the answers are equal; each partition's log end, live
counters and new entries (offsets, the stored headers byte for byte with
their CRCs, the WAL reference, the times) are the model's; every producer's
window is the model's; file ids are stable per object key and batch ids
unique; and the Sequencer changed nothing it was given.  It runs in seconds:
the fast tier's check of the commit path's rules.
"""

from __future__ import annotations

import functools
import uuid
from dataclasses import dataclass, field

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from partlog.kafka.errors import Errors
from partlog.kafka.producer_state import ProducerEntry
from partlog.kafka.records import TopicIdPartition
from partlog.kafka.topic_config import TopicConfig
from partlog.store.layout import ENTRY_SIZE, Entry, Part, chunk_entry
from partlog.store.sequencer import NEXT_BATCH_ID, NEXT_FILE_ID, CommitCall, CommitDelta, Sequencer, prepare
from partlog.wal.key import make_wal_key
from tests.batches import build_batch, request
from tests.reference_model import SEQUENCE_MODULUS, KafkaModel, last_sequence, next_sequence

T0 = 1_700_000_000_000
COMMIT_DEADLINE_MS = 5_000
PRODUCER_EXPIRY_MS = 20_000
PRODUCER_IDS = (-1, 21, 22)
MAX_EPOCH = 2
SEQ_MAX = SEQUENCE_MODULUS - 1
START_SEQUENCES = (0, 0, 0, 7, SEQ_MAX - 2, SEQ_MAX)
# Batch timestamps relative to now: mostly current; old (a producer whose
# last batch is this old is expired at once); around 1 h in the future,
# Kafka's message.timestamp.after.max.ms.
TS_OFFSETS = (0, 0, 0, -1, -PRODUCER_EXPIRY_MS, 3_599_999, 3_600_001)
CLOCK_STEPS = (1, 999, COMMIT_DEADLINE_MS + 1, PRODUCER_EXPIRY_MS - 1, PRODUCER_EXPIRY_MS)
KEY_AGES = (0, 0, 0, 0, COMMIT_DEADLINE_MS, COMMIT_DEADLINE_MS + 1)
SEQ_MODES = ("next",) * 6 + ("dup", "dup", "gap", "stale", "bump", "random")


@functools.cache
def cached_batch(records: int, pid: int, epoch: int, seq: int, ts: int) -> bytes:
    return build_batch(records, producer_id=pid, producer_epoch=epoch, base_sequence=seq, timestamp_ms=ts)


@dataclass
class MemoryState:
    """A :class:`SequencerState` in dicts, advanced by the deltas."""

    parts: dict[TopicIdPartition, Part] = field(default_factory=dict)
    topics: dict[uuid.UUID, TopicConfig] = field(default_factory=dict)
    producers: dict[tuple[int, int], bytes] = field(default_factory=dict)
    files: dict[str, int] = field(default_factory=dict)
    counters: dict[bytes, int] = field(default_factory=dict)
    entries: dict[TopicIdPartition, list[Entry]] = field(default_factory=dict)

    def part(self, tp: TopicIdPartition) -> Part | None:
        return self.parts.get(tp)

    def topic_config(self, topic_id: uuid.UUID) -> TopicConfig:
        return self.topics[topic_id]

    def producer(self, part_id: int, producer_id: int) -> bytes | None:
        return self.producers.get((part_id, producer_id))

    def file_id(self, object_key: str) -> int:
        return self.files.get(object_key, -1)

    def counter(self, name: bytes) -> int:
        return self.counters.get(name, 0)

    def owner_high_watermark(self, tp: TopicIdPartition) -> int | None:
        return None

    def txns(self, part_id: int) -> bytes:
        return b""  # no transactional batches here (tests/unit/test_txn_store.py)

    def guard(self, tp: TopicIdPartition, producer_id: int) -> int:
        return 0  # no verification here (tests/unit/test_txn_verification.py)

    def apply(self, call: CommitCall, delta: CommitDelta) -> list[Entry]:
        """Install ``delta`` as the store does; returns the new entries."""
        by_id = {part.part_id: tp for tp, part in self.parts.items()}
        self.parts.update(delta.parts)
        self.producers.update(delta.producers)
        self.counters.update(delta.counters)
        new: list[Entry] = []
        for part_id, run in delta.runs.items():
            assert run and len(run) % ENTRY_SIZE == 0
            tp = by_id[part_id]
            got = [chunk_entry(run, i, tp, -1) for i in range(len(run) // ENTRY_SIZE)]  # checks each CRC
            self.entries.setdefault(tp, []).extend(got)
            new += got
        if delta.file is not None:
            fid, nb, nbytes, _, _ = delta.file
            assert self.files.setdefault(call.object_key, fid) == fid, "a second file id for one object"
            assert (nb, nbytes) == (len(new), sum(e.size for e in new))
            assert {e.file_id for e in new} == {fid}
        else:
            assert not new
        return new


class SequencerVsModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = T0
        self.state = MemoryState()
        self.model = KafkaModel(commit_deadline_ms=COMMIT_DEADLINE_MS, producer_id_expiration_ms=PRODUCER_EXPIRY_MS)
        self.sequencer = Sequencer(
            commit_deadline_ms=COMMIT_DEADLINE_MS,
            producer_id_expiration_ms=PRODUCER_EXPIRY_MS,
            auto_high_watermark=True,
        )
        self.keys: list[tuple[str, int]] = []  # object keys used, with created_ms
        self.sent: dict[tuple[TopicIdPartition, int], list[tuple[int, int, int, int, int]]] = {}
        self.batch_ids: list[int] = []

    def tps(self) -> list[TopicIdPartition]:
        return sorted(self.model.partitions, key=lambda tp: (tp.topic_id.int, tp.partition))

    @initialize(specs=st.lists(st.tuples(st.integers(1, 3), st.booleans()), min_size=1, max_size=3))
    def create_topics(self, specs: list[tuple[int, bool]]) -> None:
        for partitions, log_append in specs:
            tid = uuid.UUID(int=len(self.model.topics) + 1)
            configs: dict[str, str | int] = {"message.timestamp.type": "LogAppendTime"} if log_append else {}
            self.model.create_topic(tid, f"t{tid.int}", partitions, configs)
            self.state.topics[tid] = TopicConfig().with_configs(configs)
            for p in range(partitions):
                part_id = self.state.counters.get(b"next_part_id", 0)
                self.state.counters[b"next_part_id"] = part_id + 1
                tp = TopicIdPartition(tid, p)
                self.state.parts[tp] = Part(part_id, tp, 0, 0, 0, 0, 0, 0, -1, -1, -1)

    @rule(data=st.data())
    def commit(self, data: st.DataObject) -> None:
        now = self.now
        key_mode = data.draw(st.sampled_from(["new"] * 6 + ["reuse", "malformed"]))
        if key_mode == "reuse" and self.keys:
            key, created_ms = data.draw(st.sampled_from(self.keys))
        elif key_mode == "malformed":
            key, created_ms = "wal/zz/not-a-wal-key", now
        else:
            created_ms = now - data.draw(st.sampled_from(KEY_AGES))
            key = str(make_wal_key("wal", created_ms, 1, f"{len(self.keys):x}"))
            self.keys.append((key, created_ms))
        client: dict[tuple[TopicIdPartition, int], tuple[int, int]] = {}
        unknown = TopicIdPartition(uuid.UUID(int=999), 0)
        items = []
        byte_offset = 1
        for i in range(data.draw(st.integers(1, 6))):
            tp = data.draw(st.sampled_from([*self.tps() * 6, unknown]))
            params = self._draw_params(data, tp, data.draw(st.sampled_from(PRODUCER_IDS)), client)
            batch = cached_batch(*params)
            items.append((request(tp, batch, byte_offset=byte_offset, request_id=i), batch))
            byte_offset += len(batch)
        file_size = byte_offset - data.draw(st.sampled_from([0] * 6 + [1, byte_offset]))  # exact, short, zero

        call = prepare(key, 1, file_size, [req for req, _ in items])
        before = {tp: part.pack() for tp, part in self.state.parts.items()}
        producers_before = dict(self.state.producers)
        got, delta = self.sequencer.commit(self.state, call, now)
        # Pure: the state it was given is unchanged; only the delta says what changed.
        assert {tp: part.pack() for tp, part in self.state.parts.items()} == before
        assert self.state.producers == producers_before
        want = self.model.commit_file(
            key=key, key_valid=key_mode != "malformed", created_ms=created_ms, file_size=file_size, items=items, now=now
        )
        assert got == want
        new = self.state.apply(call, delta)
        self.batch_ids += [e.batch_id for e in new]
        for r in got:
            event(f"commit: {r.errors.name}{' duplicate' if r.is_duplicate else ''}")
        # The entries appended are the accepted batches that are no duplicates.
        appended = [r.assigned_base_offset for r in got if r.errors == Errors.NONE and not r.is_duplicate]
        assert sorted(e.base_offset for e in new) == sorted(appended)

    def _draw_params(
        self,
        data: st.DataObject,
        tp: TopicIdPartition,
        pid: int,
        client: dict[tuple[TopicIdPartition, int], tuple[int, int]],
    ) -> tuple[int, int, int, int, int]:
        records = data.draw(st.integers(1, 3))
        ts = self.now + data.draw(st.sampled_from(TS_OFFSETS))
        if pid < 0:
            return (records, -1, -1, -1, ts)
        ck = (tp, pid)
        history = self.sent.setdefault(ck, [])
        if ck not in client:
            entry = self.model.producers.get(ck)
            if entry is not None and self.now - entry.last_timestamp < PRODUCER_EXPIRY_MS:
                client[ck] = (entry.epoch, next_sequence(entry.window[-1].last_seq))
            else:
                client[ck] = (data.draw(st.integers(0, MAX_EPOCH)), data.draw(st.sampled_from(START_SEQUENCES)))
        epoch, seq = client[ck]
        mode = data.draw(st.sampled_from(SEQ_MODES))
        if mode == "dup" and history:
            return data.draw(st.sampled_from(history))  # a resend: the very same batch
        if mode == "gap":
            seq = (seq + data.draw(st.integers(1, 3))) % SEQUENCE_MODULUS
        elif mode == "stale" and epoch > 0:
            epoch -= 1
        elif mode == "bump":
            epoch = min(epoch + 1, MAX_EPOCH)
            seq = data.draw(st.sampled_from([0, 0, 1, seq]))
        elif mode == "random":
            epoch = data.draw(st.integers(0, MAX_EPOCH))
            seq = data.draw(st.sampled_from(START_SEQUENCES))
        params = (records, pid, epoch, seq, ts)
        client[ck] = (epoch, next_sequence(last_sequence(seq, records - 1)))
        history.append(params)
        del history[:-8]
        return params

    @rule(step=st.sampled_from(CLOCK_STEPS))
    def advance_clock(self, step: int) -> None:
        self.now += step

    @rule(data=st.data())
    def new_leader_epoch(self, data: st.DataObject) -> None:
        """An exclusive write between commits: the Sequencer stamps the new epoch."""
        tp = data.draw(st.sampled_from(self.tps()))
        epoch = self.model.partitions[tp].leader_epoch + data.draw(st.integers(1, 2))
        assert self.model.set_leader_epoch(tp, epoch)
        part = self.state.parts[tp].copy()
        part.leader_epoch = epoch
        self.state.parts[tp] = part

    @precondition(lambda self: any(p.batches for p in self.model.partitions.values()))
    @rule(data=st.data())
    def delete_records(self, data: st.DataObject) -> None:
        """An exclusive write between commits: the log start moves (answers carry it)."""
        tp = data.draw(st.sampled_from([tp for tp in self.tps() if self.model.partitions[tp].batches]))
        batches = self.model.partitions[tp].batches
        offset = data.draw(st.sampled_from([b.base for b in batches] + [b.last + 1 for b in batches]))
        [r] = self.model.delete_records([(tp, offset)])
        assert r.errors == Errors.NONE
        kept = [e for e in self.state.entries.get(tp, []) if e.last_offset >= r.low_watermark]
        self.state.entries[tp] = kept
        part = self.state.parts[tp].copy()
        part.log_start_offset = r.low_watermark
        part.live_batches, part.live_bytes = len(kept), sum(e.size for e in kept)
        self.state.parts[tp] = part

    @invariant()
    def same_state(self) -> None:
        for tp in self.tps():
            mp, part = self.model.partitions[tp], self.state.parts[tp]
            assert (part.log_start_offset, part.log_end_offset, part.high_watermark, part.leader_epoch) == (
                mp.log_start,
                mp.log_end,
                mp.hwm,
                mp.leader_epoch,
            ), tp
            assert (part.live_batches, part.live_bytes) == (len(mp.batches), sum(b.size for b in mp.batches)), tp
            entries = self.state.entries.get(tp, [])
            assert [e.raw_header for e in entries] == [b.header for b in mp.batches], tp
            assert [(e.byte_offset, e.size, e.log_append_time, e.batch_max_timestamp) for e in entries] == [
                (b.byte_offset, b.size, b.log_append_time, b.max_ts_sent) for b in mp.batches
            ], tp
            assert [e.effective_timestamp for e in entries] == [b.effective_ts for b in mp.batches], tp
        files = {e.file_id for es in self.state.entries.values() for e in es}
        assert files <= set(self.state.files.values())
        assert len(set(self.batch_ids)) == len(self.batch_ids), "a batch id given twice"
        assert self.state.counters.get(NEXT_BATCH_ID, 0) >= len(self.batch_ids)
        assert self.state.counters.get(NEXT_FILE_ID, 0) == len(self.state.files)
        self._same_producers()

    def _same_producers(self) -> None:
        by_id = {part.part_id: tp for tp, part in self.state.parts.items()}
        mine = {(by_id[p], pid): ProducerEntry.decode(raw) for (p, pid), raw in self.state.producers.items()}
        assert set(mine) == set(self.model.producers)
        for key, want in self.model.producers.items():
            got = mine[key]
            assert got.producer_epoch == want.epoch, key
            assert got.last_timestamp == want.last_timestamp, key
            # The model keeps Kafka's BatchMetadata.timestamp: the append time, else the max timestamp.
            batches = got.batches
            window = [(b.first_seq, b.last_seq, b.first_offset, b.log_append_time, b.max_timestamp) for b in batches]
            assert [(f, la, off, t if t != -1 else m) for f, la, off, t, m in window] == [
                (w.first_seq, w.last_seq, w.base_offset, w.timestamp) for w in want.window
            ], key


SequencerVsModel.TestCase.settings = settings(
    max_examples=100,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
test_sequencer_matches_kafka_model = SequencerVsModel.TestCase
