"""Model-based test: MetadataStore against an independent model of Kafka partitions.

A hypothesis state machine drives a real store (LMDB in a temp dir, a fake
clock) and :class:`tests.reference_model.KafkaModel` with the same operations:
commits of real Kafka v2 batches (idempotent producers in order, duplicates,
gaps, stale and bumped epochs, sequences wrapping at 2^31-1), clock jumps
across producer expiry and the commit deadline, DeleteRecords, retention,
topic creation and deletion, leader epochs and reopening the store.  Every
answer is compared, and after every step so are file_usage(), the partition
states, a full fetch of every partition and ``check() == []``.
"""

from __future__ import annotations

import dataclasses
import functools
import shutil
import tempfile
import uuid

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from partlog import (
    CreateTopicAndPartitionsRequest,
    DeleteRecordsRequest,
    FindBatchRequest,
    FindBatchResponse,
    ListOffsetsRequest,
    MetadataStore,
    TopicIdPartition,
)
from partlog.store import SegmentSwap
from partlog.store.compaction import SegmentRewrite
from partlog.wal.key import make_wal_key
from tests.batches import build_batch, request
from tests.clock import Clock
from tests.reference_model import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    RETENTION_MS_DEFAULT,
    SEQUENCE_MODULUS,
    KafkaModel,
    last_sequence,
    next_sequence,
)

T0 = 1_700_000_000_000
COMMIT_DEADLINE_MS = 5_000
PRODUCER_EXPIRY_MS = 20_000
PRODUCER_IDS = (-1, 11, 12, 13)
MAX_EPOCH = 2
MAX_TOPICS = 4
MAX_PARTITIONS = 4
SEQ_MAX = SEQUENCE_MODULUS - 1
# Where an unknown producer starts: mostly 0, sometimes just before the wrap.
START_SEQUENCES = (0, 0, 0, 5, SEQ_MAX - 3, SEQ_MAX - 1, SEQ_MAX)
# Batch timestamps relative to now: mostly current; old ones (retention,
# expiry: a producer whose batch is old enough is expired at once); and
# around message.timestamp.after.max.ms (1 h in the future) for CreateTime.
TS_OFFSETS = (0, 0, 0, 0, -1, -999, -PRODUCER_EXPIRY_MS, -45_000, -RETENTION_MS_DEFAULT, 3_599_997, 3_600_001)
CLOCK_STEPS = (
    1,
    50,
    999,
    COMMIT_DEADLINE_MS,
    COMMIT_DEADLINE_MS + 1,
    PRODUCER_EXPIRY_MS - 1,
    PRODUCER_EXPIRY_MS,
    45_000,
    RETENTION_MS_DEFAULT + 1,
)
KEY_AGES = (0, 0, 0, 1, -1_000, COMMIT_DEADLINE_MS, COMMIT_DEADLINE_MS + 1, 3 * COMMIT_DEADLINE_MS)
SEQ_MODES = ("next",) * 6 + ("dup", "dup", "gap", "stale", "bump", "random")
SEQ_MODES_HAPPY = ("next",) * 8 + ("dup", "bump")
TS_OFFSETS_HAPPY = (0, 0, 0, -1, -999, -45_000)


@functools.cache
def cached_batch(records: int, pid: int, epoch: int, seq: int, ts: int, value_bytes: int) -> bytes:
    return build_batch(
        records, producer_id=pid, producer_epoch=epoch, base_sequence=seq, timestamp_ms=ts, value_bytes=value_bytes
    )


# (records, producer id, epoch, base sequence, timestamp, value bytes)
BatchParams = tuple[int, int, int, int, int, int]

topic_specs = st.tuples(
    st.integers(1, 3),  # partitions
    st.booleans(),  # LogAppendTime
    st.sampled_from([None, None, 30_000, 300_000]),  # retention.ms (None: Kafka's default, 7 days)
    st.sampled_from([None, None, 300, 1_000, 3_000]),  # retention.bytes
)


class StoreVsModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.path = tempfile.mkdtemp(prefix="partlog-model-")
        self.clock = Clock(T0)
        self.store = self._open()
        self.model = KafkaModel(commit_deadline_ms=COMMIT_DEADLINE_MS, producer_id_expiration_ms=PRODUCER_EXPIRY_MS)
        self.all_topics: list[uuid.UUID] = []  # ever created, deleted ones included
        self.keys: list[tuple[str, int]] = []  # object keys used, with created_ms
        self.segments_made = 0
        self.sent: dict[tuple[TopicIdPartition, int], list[BatchParams]] = {}  # recent sends, for resends
        self.batch_ids: dict[tuple[TopicIdPartition, int], int] = {}  # (tp, base offset) -> batch_id seen

    def _open(self) -> MetadataStore:
        return MetadataStore.open(
            self.path,
            sync=False,
            commit_deadline_ms=COMMIT_DEADLINE_MS,
            producer_id_expiration_ms=PRODUCER_EXPIRY_MS,
            clock=self.clock,
            map_size_bytes=1 << 24,
            # Checkpoints inline and often, so that runs mix reads served
            # from the journal's overlay, from LMDB, and from both.
            checkpoint_thread=False,
            checkpoint_groups_max=3,
        )

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.path, ignore_errors=True)

    # ------------------------------------------------------------ helpers

    def live_tps(self) -> list[TopicIdPartition]:
        return sorted(self.model.partitions, key=lambda tp: (str(tp.topic_id), tp.partition))

    def some_tp(self, data: st.DataObject) -> TopicIdPartition:
        """A live partition mostly; sometimes one of a deleted topic or past the partition count."""
        unknown = [TopicIdPartition(t, 0) for t in self.all_topics if t not in self.model.topics][-1:]
        unknown += [TopicIdPartition(t, topic.num_partitions) for t, topic in self.model.topics.items()][:1]
        return data.draw(st.sampled_from(self.live_tps() * 8 + unknown))

    def _create(self, spec: tuple[int, bool, int | None, int | None]) -> None:
        partitions, log_append, retention_ms, retention_bytes = spec
        configs: dict[str, str | int] = {}
        if log_append:
            configs["message.timestamp.type"] = "LogAppendTime"
        if retention_ms is not None:
            configs["retention.ms"] = retention_ms
        if retention_bytes is not None:
            configs["retention.bytes"] = str(retention_bytes)
        tid = uuid.UUID(int=len(self.all_topics) + 1)  # deterministic: hypothesis replays runs
        name = f"t{len(self.all_topics)}"
        self.store.create_topic_and_partitions([CreateTopicAndPartitionsRequest(tid, name, partitions, configs)])
        self.model.create_topic(tid, name, partitions, configs)
        self.all_topics.append(tid)

    def _normalise(self, resp: FindBatchResponse) -> FindBatchResponse:
        """Record batch ids (stable per batch, unique) and blank them for comparison."""
        out = []
        for info in resp.batches:
            md = info.metadata
            seen = self.batch_ids.setdefault((md.topic_id_partition, md.base_offset), info.batch_id)
            assert seen == info.batch_id, f"batch id of {md.topic_id_partition}@{md.base_offset} changed"
            out.append(dataclasses.replace(info, batch_id=-1))
        return dataclasses.replace(resp, batches=tuple(out))

    # ------------------------------------------------------------ rules

    @initialize(specs=st.lists(topic_specs, min_size=1, max_size=3))
    def create_initial_topics(self, specs: list[tuple[int, bool, int | None, int | None]]) -> None:
        for spec in specs:
            self._create(spec)

    @precondition(lambda self: len(self.model.topics) < MAX_TOPICS)
    @rule(spec=topic_specs)
    def create_topic(self, spec: tuple[int, bool, int | None, int | None]) -> None:
        self._create(spec)

    @precondition(lambda self: bool(self.model.topics))
    @rule(data=st.data())
    def add_partitions(self, data: st.DataObject) -> None:
        tid = data.draw(st.sampled_from(sorted(self.model.topics, key=str)))
        topic = self.model.topics[tid]
        n = data.draw(st.integers(1, MAX_PARTITIONS))  # <= current: a no-op
        self.store.create_topic_and_partitions([CreateTopicAndPartitionsRequest(tid, topic.name, n)])
        self.model.create_topic(tid, topic.name, n, {})

    @rule(data=st.data())
    def commit(self, data: st.DataObject) -> None:
        """Anything goes: stale and malformed keys, short objects, bad sequences."""
        self._commit(data, happy=False)

    @rule(data=st.data())
    def commit_happy(self, data: st.DataObject) -> None:
        """A fresh, well-formed object; producers mostly in order (resends still happen)."""
        self._commit(data, happy=True)

    @rule(data=st.data())
    def commit_happy_too(self, data: st.DataObject) -> None:
        """The same again: hypothesis has no rule weights, and commits should dominate."""
        self._commit(data, happy=True)

    @precondition(lambda self: bool(self.model.partitions))
    @rule(data=st.data())
    def fill_window_then_resend(self, data: st.DataObject) -> None:
        """Several in-order batches of one producer, then a resend of one of
        its last 8: exercises the edge of the 5-batch duplicate window, which
        random interleaving reaches too rarely."""
        tp = data.draw(st.sampled_from(self.live_tps()))
        pid = data.draw(st.sampled_from(PRODUCER_IDS[1:]))
        self._commit(data, happy=True, focus=(tp, pid, "next", data.draw(st.integers(4, 7))))
        self._commit(data, happy=True, focus=(tp, pid, "dup", 1))

    def _commit(
        self, data: st.DataObject, *, happy: bool, focus: tuple[TopicIdPartition, int, str, int] | None = None
    ) -> None:
        now = self.clock.now
        key_mode = "new" if happy else data.draw(st.sampled_from(["new"] * 6 + ["reuse", "malformed"]))
        if key_mode == "reuse" and self.keys:
            key, created_ms = data.draw(st.sampled_from(self.keys))
        elif key_mode == "malformed":
            key, created_ms = "wal/zz/not-a-wal-key", now
        else:
            created_ms = now - (0 if happy else data.draw(st.sampled_from(KEY_AGES)))
            key = str(make_wal_key("wal", created_ms, 1, f"{len(self.keys):x}"))
            self.keys.append((key, created_ms))

        # What the clients believe: (epoch, next sequence) per (partition, producer),
        # advanced optimistically as batches are added to this request.
        client: dict[tuple[TopicIdPartition, int], tuple[int, int]] = {}
        items = []
        byte_offset = 1
        count = focus[3] if focus else data.draw(st.integers(1, 6))
        for i in range(count):
            if focus:
                tp, pid, mode = focus[0], focus[1], focus[2]
            else:
                tp, pid, mode = self.some_tp(data), data.draw(st.sampled_from(PRODUCER_IDS)), None
            params = self._draw_params(data, tp, pid, client, now, happy, mode)
            batch = cached_batch(*params)
            items.append((request(tp, batch, byte_offset=byte_offset, request_id=i), batch))
            byte_offset += len(batch)
        file_size = byte_offset
        size_mode = "exact" if happy else data.draw(st.sampled_from(["exact"] * 6 + ["short", "zero"]))
        if size_mode == "short":
            file_size -= 1  # the last batch overruns the object
        elif size_mode == "zero":
            file_size = 0

        reqs = [req for req, _ in items]
        got = self.store.commit_file(key, 1, file_size, reqs)
        want = self.model.commit_file(
            key=key, key_valid=key_mode != "malformed", created_ms=created_ms, file_size=file_size, items=items, now=now
        )
        assert got == want
        for r in got:
            event(f"commit: {r.errors.name}{' duplicate' if r.is_duplicate else ''}")
            if r.request.base_sequence > SEQ_MAX - 4 and r.errors == 0:
                event("commit: accepted near the sequence wrap")

    def _draw_params(
        self,
        data: st.DataObject,
        tp: TopicIdPartition,
        pid: int,
        client: dict[tuple[TopicIdPartition, int], tuple[int, int]],
        now: int,
        happy: bool,
        mode: str | None = None,
    ) -> BatchParams:
        records = data.draw(st.integers(1, 4))
        ts = now + data.draw(st.sampled_from(TS_OFFSETS_HAPPY if happy else TS_OFFSETS))
        value_bytes = data.draw(st.sampled_from([5, 40, 150]))
        if pid < 0:
            return (records, -1, -1, -1, ts, value_bytes)
        ck = (tp, pid)
        history = self.sent.setdefault(ck, [])
        if ck not in client:
            entry = self.model.producers.get(ck)
            if entry is not None and now - entry.last_timestamp < PRODUCER_EXPIRY_MS:
                client[ck] = (entry.epoch, next_sequence(entry.window[-1].last_seq))
            else:
                client[ck] = (data.draw(st.integers(0, MAX_EPOCH)), data.draw(st.sampled_from(START_SEQUENCES)))
        epoch, seq = client[ck]
        if mode is None:
            mode = data.draw(st.sampled_from(SEQ_MODES_HAPPY if happy else SEQ_MODES))
        if mode == "dup" and history:
            return data.draw(st.sampled_from(history))  # a resend: the very same batch
        if mode == "gap":
            seq = (seq + data.draw(st.integers(1, 3))) % SEQUENCE_MODULUS
        elif mode == "stale" and epoch > 0:
            epoch -= 1
        elif mode == "bump":
            epoch = min(epoch + 1, MAX_EPOCH)
            seq = data.draw(st.sampled_from([0, 0, 0, 1, seq]))
        elif mode == "random":
            epoch = data.draw(st.integers(0, MAX_EPOCH))
            seq = data.draw(st.sampled_from(START_SEQUENCES))
        params = (records, pid, epoch, seq, ts, value_bytes)
        client[ck] = (epoch, next_sequence(last_sequence(seq, records - 1)))
        history.append(params)
        del history[:-8]
        return params

    @rule(step=st.sampled_from(CLOCK_STEPS))
    def advance_clock(self, step: int) -> None:
        self.clock.now += step

    @precondition(lambda self: bool(self.all_topics))
    @rule(data=st.data())
    def delete_records(self, data: st.DataObject) -> None:
        reqs = []
        for _ in range(data.draw(st.integers(1, 2))):
            tp = self.some_tp(data)
            part = self.model.partitions.get(tp)
            offsets = [-2, -1, 0]
            if part is not None:
                offsets += [part.log_start - 1, part.log_start, part.log_start + 1, part.hwm, part.hwm + 1]
                for b in part.batches:
                    offsets += [b.base, (b.base + b.last + 1) // 2, b.last, b.last + 1]
            reqs.append((tp, data.draw(st.sampled_from(offsets))))
        got = self.store.delete_records([DeleteRecordsRequest(tp, off) for tp, off in reqs])
        assert got == self.model.delete_records(reqs)

    @precondition(lambda self: bool(self.all_topics))
    @rule(data=st.data())
    def swap_to_segment(self, data: st.DataObject) -> None:
        """Issue 31's reference swap: a range of batches, mostly a valid one
        (whole batches below the HWM, the right size), sometimes misaligned,
        past the HWM, the wrong size, or a segment already referenced."""
        tp = self.some_tp(data)
        part = self.model.partitions.get(tp)
        batches = [] if part is None else [b for b in part.batches if b.last < part.hwm]
        valid = bool(batches) and data.draw(st.integers(0, 3)) > 0
        if valid:
            i = data.draw(st.integers(0, len(batches) - 1))
            j = data.draw(st.integers(i, min(len(batches) - 1, i + 4)))
            start, end = batches[i].base, batches[j].last
            size = sum(b.size for b in batches[i : j + 1])
        else:
            start = data.draw(st.integers(-1, 40))
            end = start + data.draw(st.integers(-1, 6))
            size = data.draw(st.integers(0, 5000))
        start += data.draw(st.sampled_from([0, 0, 0, 0, 1, -1]))
        size += data.draw(st.sampled_from([0, 0, 0, 0, 1]))
        used = sorted({b.key for p in self.model.partitions.values() for b in p.batches if b.key.startswith("tiered/")})
        tiered = [] if part is None else part.segments
        pick = data.draw(st.integers(0, 5))
        if tiered and pick == 0:
            start, end, size, key = data.draw(st.sampled_from(tiered))  # a retry
        elif used and pick == 1:
            key = data.draw(st.sampled_from(used))  # a key in use elsewhere
        else:
            self.segments_made += 1
            key = f"tiered/{self.segments_made:x}.log"
        req = SegmentSwap(tp, start, end, key, size, uploader=1)
        got = self.store.swap_to_segment(req)
        want, moved = self.model.swap_to_segment(tp, start, end, key, size)
        assert (got.error, got.moved) == (want, moved), (req, got)
        event(f"swap: {want.name}")

    @precondition(lambda self: any(p.segments for p in self.model.partitions.values()))
    @rule(data=st.data())
    def rewrite_segments(self, data: st.DataObject) -> None:
        """The cleaner's swap: adjacent rows replaced by one segment whose
        batches are smaller (emptied headers), sometimes with the wrong
        rows, a size off, a header short, or a retry."""
        tp = data.draw(st.sampled_from(sorted((t for t, p in self.model.partitions.items() if p.segments), key=str)))
        part = self.model.partitions[tp]
        i = data.draw(st.integers(0, len(part.segments) - 1))
        j = data.draw(st.integers(i, min(len(part.segments) - 1, i + 2)))
        rows = part.segments[i : j + 1]
        start, end = rows[0][0], rows[-1][1]
        replaced = tuple(r[3] for r in rows)
        headers: list[bytes] = []
        if start >= part.log_start:
            for e in self.store.read_log(tp, start, 1 << 40).entries:
                if e.base_offset > end:
                    break
                shrink = data.draw(st.booleans())
                size = 61 + (e.size - 61) // 2 if shrink else e.size
                h = bytearray(e.header)
                h[8:12] = (size - 12).to_bytes(4, "big")
                if shrink:
                    h[57:61] = (0).to_bytes(4, "big")  # fewer records: none
                headers.append(bytes(h))
        mutation = data.draw(st.sampled_from(["none"] * 5 + ["rows", "size", "short", "retry"]))
        self.segments_made += 1
        key = f"tiered/{self.segments_made:x}.log"
        if mutation == "rows" and len(replaced) > 1:
            replaced = replaced[1:]
        elif mutation == "short" and headers:
            headers = headers[:-1]
        elif mutation == "retry":
            key = rows[0][3]
        sizes = [int.from_bytes(h[8:12], "big") + 12 for h in headers]
        size = sum(sizes) + (1 if mutation == "size" else 0)
        req = SegmentRewrite(tp, start, end, key, size, 1, replaced, tuple(headers))
        got = self.store.swap_to_segment(req)
        want, moved = self.model.rewrite_segments(tp, start, end, key, size, replaced, headers)
        assert (got.error, got.moved) == (want, moved), (req, got)
        event(f"rewrite: {want.name}")

    @rule(explicit_now=st.booleans())
    def enforce_retention(self, explicit_now: bool) -> None:
        got = self.store.enforce_retention(self.clock.now if explicit_now else None)
        assert got == self.model.enforce_retention(self.clock.now)

    @precondition(lambda self: len(self.model.topics) >= 2)
    @rule(data=st.data())
    def delete_topic(self, data: st.DataObject) -> None:
        # Now and then the list repeats a topic or names one already deleted.
        tids = [data.draw(st.sampled_from(self.all_topics))]
        if data.draw(st.integers(0, 3)) == 0:
            tids.append(data.draw(st.sampled_from(self.all_topics)))
        self.store.delete_topics(tids)
        self.model.delete_topics(tids)

    @precondition(lambda self: bool(self.model.partitions))
    @rule(data=st.data())
    def set_leader_epoch(self, data: st.DataObject) -> None:
        tp = data.draw(st.sampled_from(self.live_tps()))
        epoch = self.model.partitions[tp].leader_epoch + data.draw(st.sampled_from([-1, 0, 1, 1, 3]))
        if self.model.set_leader_epoch(tp, epoch):
            self.store.set_leader_epoch(tp, epoch)
        else:
            with pytest.raises(ValueError):
                self.store.set_leader_epoch(tp, epoch)

    @rule(clean=st.booleans())
    def reopen(self, clean: bool) -> None:
        """A restart: a clean close applies the journal; without, it leaves
        the unapplied groups, as a crash does, and open replays them."""
        self.store.close(checkpoint=clean)
        self.store = self._open()

    @rule()
    def checkpoint(self) -> None:
        self.store._checkpoint()
        assert self.store._overlay == ()

    @rule(garbage=st.binary(min_size=1, max_size=200))
    def torn_tail(self, garbage: bytes) -> None:
        """A crash while a record that was never acknowledged was being
        written: bytes after the last record.  Recovery must stop there."""
        journal = self.store._journal
        segment, pos = journal._segments[journal._segment_first], journal._pos
        self.store.close(checkpoint=False)
        with open(segment, "r+b") as f:
            f.seek(pos)
            f.write(garbage)
        self.store = self._open()

    @precondition(lambda self: bool(self.all_topics))
    @rule(data=st.data())
    def find_batches(self, data: st.DataObject) -> None:
        reqs = []
        for _ in range(data.draw(st.integers(1, 3))):
            tp = self.some_tp(data)
            part = self.model.partitions.get(tp)
            offsets = [0]
            if part is not None:
                offsets += [part.log_start - 1, part.log_start, part.log_start + 1, part.hwm - 1, part.hwm]
                offsets += [part.hwm + 1]
                for b in part.batches:
                    offsets += [b.base, b.last]
            offset = data.draw(st.sampled_from(offsets))
            reqs.append(FindBatchRequest(tp, offset, data.draw(st.sampled_from([1, 100, 300, 1 << 20]))))
        fetch_max = data.draw(st.sampled_from([1, 200, 600, 1 << 20]))
        got = [self._normalise(r) for r in self.store.find_batches(reqs, fetch_max)]
        assert got == self.model.find_batches(reqs, fetch_max)

    @precondition(lambda self: bool(self.all_topics))
    @rule(data=st.data())
    def list_offsets(self, data: st.DataObject) -> None:
        reqs = []
        for _ in range(data.draw(st.integers(1, 4))):
            tp = self.some_tp(data)
            part = self.model.partitions.get(tp)
            targets = [EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP, 0, self.clock.now, self.clock.now + 10**9]
            if part is not None:
                for b in part.batches:
                    targets += [b.effective_ts - 1, b.effective_ts, b.effective_ts + 1]
            reqs.append(ListOffsetsRequest(tp, data.draw(st.sampled_from(targets))))
        got = self.store.list_offsets(reqs)
        assert got == [self.model.list_offset(r.topic_id_partition, r.timestamp) for r in reqs]

    # ------------------------------------------------------------ invariants

    @invariant()
    def same_state(self) -> None:
        assert self.store.check() == []
        assert self.store.file_usage() == self.model.file_usage()
        tps = self.live_tps()
        assert sorted(self.store.partitions(), key=lambda tp: (str(tp.topic_id), tp.partition)) == tps
        for tp in tps:
            assert self.store.partition_state(tp) == self.model.partition_state(tp), tp
            segs = [(g.start_offset, g.end_offset, g.size, g.object_key) for g in self.store.segments(tp)]
            assert segs == self.model.partitions[tp].segments, tp
        # Everything readable from every log start, in one fetch.
        reqs = [FindBatchRequest(tp, self.model.partitions[tp].log_start, 1 << 30) for tp in tps]
        got = [self._normalise(r) for r in self.store.find_batches(reqs, 1 << 30)]
        assert got == self.model.find_batches(reqs, 1 << 30)
        live_ids = [self.batch_ids[(tp, b.base)] for tp in tps for b in self.model.partitions[tp].batches]
        assert len(set(live_ids)) == len(live_ids), "two live batches share a batch_id"
        keys = [k for k, _ in self.keys] + [f"tiered/{i:x}.log" for i in range(1, self.segments_made + 1)]
        assert self.store.referenced_files(keys) == self.model.referenced_keys()


StoreVsModel.TestCase.settings = settings(
    max_examples=200,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
test_store_matches_kafka_model = pytest.mark.slow(StoreVsModel.TestCase)
