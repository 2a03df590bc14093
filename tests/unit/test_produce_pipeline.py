"""The sans-IO produce pipeline against a model: every produce request is
answered exactly once, commits go one per leader broker per WAL file and in
file order, memory accounting returns to zero."""

from __future__ import annotations

import itertools
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from partlog.kafka.errors import Errors
from partlog.kafka.records import CommitBatchResponse, TopicIdPartition
from partlog.produce.pipeline import (
    BatchResult,
    ProduceConfig,
    ProducePipeline,
    Reply,
    SendCommit,
    Upload,
)
from partlog.produce.rotation import RotationReason
from partlog.wal.key import parse_wal_key
from partlog.wal.segment import check_segment
from tests.batches import build_batch

T0 = 1_700_000_000_000
TOPIC = uuid.UUID(int=42)
TPS = [TopicIdPartition(TOPIC, p) for p in range(6)]
LEADERS = {tp: tp.partition % 3 for tp in TPS}  # brokers 0, 1, 2
BATCHES = [build_batch(n, value_bytes=v) for n in (1, 3) for v in (10, 400)]


def _pipeline(**config: int) -> ProducePipeline:
    counter = itertools.count()
    return ProducePipeline(
        0,
        ProduceConfig(**config),  # type: ignore[arg-type]
        leader_of=LEADERS.get,
        rand_hex=lambda: f"{next(counter):x}",
    )


class PipelineVsModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = T0
        self.p = _pipeline(
            commit_interval_ms=250, buffer_bytes_max=3000, inflight_bytes_max=20_000, uploads_inflight_max=2
        )
        self.next_produce = 0
        self.sent: dict[int, list[tuple[TopicIdPartition, bytes]]] = {}  # unanswered produce requests
        self.answered: dict[int, Reply] = {}
        self.uploads: dict[int, Upload] = {}  # in flight
        self.upload_finished: set[int] = set()
        self.commits: dict[tuple[int, int], SendCommit] = {}  # (segment, leader) pending
        self.commit_keys_seen: set[tuple[int, int]] = set()
        self.segments_seen = 0
        self.offsets = dict.fromkeys(TPS, 0)

    def _apply(self, actions: list[Upload | SendCommit | Reply]) -> None:
        for a in actions:
            if isinstance(a, Upload):
                assert a.segment_id not in self.uploads
                footer = check_segment(a.data, key=a.key)
                assert footer.broker_id == 0
                self.uploads[a.segment_id] = a
                self.segments_seen += 1
            elif isinstance(a, SendCommit):
                key = (a.segment_id, a.leader_broker_id)
                assert key not in self.commit_keys_seen, "two commits to one leader for one file"
                self.commit_keys_seen.add(key)
                # File order: every earlier segment finished uploading.
                assert all(s in self.upload_finished for s in range(a.segment_id))
                assert a.segment_id in self.upload_finished
                assert all(LEADERS[r.topic_id_partition] == a.leader_broker_id for r in a.requests)
                upload_data = self.uploads[a.segment_id].data
                for r in a.requests:
                    batch = upload_data[r.byte_offset : r.byte_offset + r.size]
                    assert batch[:61] == r.header
                self.commits[key] = a
            else:
                assert a.produce_id in self.sent, f"reply to unknown or answered produce {a.produce_id}"
                batches = self.sent.pop(a.produce_id)
                assert [r.topic_id_partition for r in a.results] == [tp for tp, _ in batches]
                self.answered[a.produce_id] = a

    @rule(
        picks=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 3)), min_size=1, max_size=5),
        urgent=st.booleans(),
    )
    def produce(self, picks: list[tuple[int, int]], urgent: bool) -> None:
        batches = [(TPS[t], BATCHES[b]) for t, b in picks]
        size = sum(len(b) for _, b in batches)
        if size > self.p.room_bytes():
            return  # the shell would wait
        pid = self.next_produce
        self.next_produce += 1
        self.sent[pid] = batches
        self._apply(self.p.produce(pid, batches, self.now, urgent=urgent))
        if urgent:
            assert self.p.next_deadline_ms() is None, "an urgent request waits for no timer"

    @rule()
    def produce_corrupt(self) -> None:
        batches = [(TPS[0], BATCHES[0][:-1]), (TPS[1], BATCHES[0])]
        if sum(len(b) for _, b in batches) > self.p.room_bytes():
            return
        pid = self.next_produce
        self.next_produce += 1
        self.sent[pid] = batches
        self._apply(self.p.produce(pid, batches, self.now))
        if pid in self.answered:
            pytest.fail("a request with one good batch must not be answered before its commit")

    @rule(ms=st.sampled_from([1, 100, 250, 600]))
    def tick(self, ms: int) -> None:
        self.now += ms
        self._apply(self.p.tick(self.now))

    @precondition(lambda self: bool(set(self.uploads) - self.upload_finished))
    @rule(data=st.data(), ok=st.booleans())
    def finish_upload(self, data: st.DataObject, ok: bool) -> None:
        sid = data.draw(st.sampled_from(sorted(set(self.uploads) - self.upload_finished)))
        self.upload_finished.add(sid)
        self._apply(self.p.upload_done(sid, self.now, None if ok else "injected"))

    @precondition(lambda self: bool(self.commits))
    @rule(data=st.data(), ok=st.booleans())
    def finish_commit(self, data: st.DataObject, ok: bool) -> None:
        key = data.draw(st.sampled_from(sorted(self.commits)))
        c = self.commits.pop(key)
        if not ok:
            self._apply(self.p.commit_done(c.segment_id, c.leader_broker_id, None, self.now))
            return
        responses = []
        for r in c.requests:
            base = self.offsets[r.topic_id_partition]
            self.offsets[r.topic_id_partition] += r.last_offset - r.base_offset + 1
            responses.append(CommitBatchResponse(Errors.NONE, base, -1, 0, False, r))
        self._apply(self.p.commit_done(c.segment_id, c.leader_broker_id, responses, self.now))

    @invariant()
    def accounting(self) -> None:
        unanswered = sum(sum(len(b) for _, b in batches) for pid, batches in self.sent.items())
        # Requests whose batches were all corrupt are answered at once and never counted.
        assert self.p.inflight_bytes == unanswered
        assert self.p.produces_inflight == len(self.sent)
        assert len(set(self.uploads) - self.upload_finished) <= 2

    def teardown(self) -> None:
        # Drain: flush, finish everything; every request gets its answer.
        self._apply(self.p.flush(self.now))
        for _ in range(1000):
            pending = sorted(set(self.uploads) - self.upload_finished)
            if pending:
                self.upload_finished.add(pending[0])
                self._apply(self.p.upload_done(pending[0], self.now))
            elif self.commits:
                key = min(self.commits)
                c = self.commits.pop(key)
                self._apply(self.p.commit_done(c.segment_id, c.leader_broker_id, None, self.now))
            else:
                break
        assert not self.sent, f"unanswered: {sorted(self.sent)}"
        assert self.p.inflight_bytes == 0 and self.p.segments_open == 0


PipelineVsModel.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
test_pipeline_model = PipelineVsModel.TestCase


def test_one_commit_per_leader_per_file_and_answers() -> None:
    # A grace as long as the interval: the interval-only rule (the early
    # closes are tests/unit/test_rotation_model.py's).
    p = _pipeline(commit_interval_ms=250, rotation_grace_ms=250)
    batch = BATCHES[0]
    acts = p.produce(1, [(tp, batch) for tp in TPS], T0)
    assert acts == [] and p.next_deadline_ms() == T0 + 250
    assert p.tick(T0 + 249) == []
    [up] = p.tick(T0 + 250)
    assert isinstance(up, Upload) and up.key.endswith(".wal") and "/1700000000250-0-" in up.key
    commits = p.upload_done(up.segment_id, T0 + 300)
    assert [c.leader_broker_id for c in commits if isinstance(c, SendCommit)] == [0, 1, 2]
    assert p.stats.commit_fanout == [3]
    replies = []
    for c in commits:
        assert isinstance(c, SendCommit) and len(c.requests) == 2
        resps = [CommitBatchResponse(Errors.NONE, 7, -1, 0, False, r) for r in c.requests]
        replies += p.commit_done(c.segment_id, c.leader_broker_id, resps, T0 + 310)
    [reply] = replies
    assert isinstance(reply, Reply) and reply.produce_id == 1
    assert [r.topic_id_partition for r in reply.results] == TPS
    assert all(r == BatchResult(r.topic_id_partition, Errors.NONE, 7, -1, 0) for r in reply.results)
    assert p.inflight_bytes == 0


def test_rotation_by_size_and_upload_limit() -> None:
    batch = build_batch(1, value_bytes=1000)
    p = _pipeline(buffer_bytes_max=2 * len(batch), uploads_inflight_max=1, inflight_bytes_max=1 << 20)
    ups = []
    for i in range(6):
        ups += p.produce(i, [(TPS[0], batch)], T0)
    # Three segments closed by size, but only one uploads at a time.
    assert [type(a) for a in ups] == [Upload]
    acts = p.upload_done(ups[0].segment_id, T0)  # type: ignore[union-attr]
    assert [type(a) for a in acts] == [Upload, SendCommit]


def test_failed_upload_fails_its_requests_retriably() -> None:
    p = _pipeline()
    p.produce(1, [(TPS[0], BATCHES[0]), (TPS[1], BATCHES[1])], T0)
    [up] = p.flush(T0)
    assert isinstance(up, Upload)
    [reply] = p.upload_done(up.segment_id, T0, "S3 503 SlowDown")
    assert isinstance(reply, Reply)
    assert {r.error for r in reply.results} == {Errors.KAFKA_STORAGE_ERROR}
    assert all(r.error.retriable and "SlowDown" in (r.error_message or "") for r in reply.results)


def test_commit_deadline_is_mapped_to_a_kafka_error() -> None:
    p = _pipeline()
    p.produce(1, [(TPS[0], BATCHES[0])], T0)
    [up] = p.flush(T0)
    [c] = p.upload_done(up.segment_id, T0)  # type: ignore[union-attr]
    assert isinstance(c, SendCommit)
    resp = CommitBatchResponse(Errors.COMMIT_DEADLINE_EXCEEDED, -1, -1, -1, False, c.requests[0])
    [reply] = p.commit_done(c.segment_id, c.leader_broker_id, [resp], T0)
    assert isinstance(reply, Reply) and reply.results[0].error == Errors.REQUEST_TIMED_OUT


def test_unknown_leader_and_oversized_request() -> None:
    p = _pipeline(inflight_bytes_max=5000, buffer_bytes_max=5000)
    stranger = TopicIdPartition(uuid.uuid4(), 0)
    p.produce(1, [(stranger, BATCHES[0])], T0)
    [up] = p.flush(T0)
    [reply] = p.upload_done(up.segment_id, T0)  # type: ignore[union-attr]
    assert isinstance(reply, Reply) and reply.results[0].error == Errors.NOT_LEADER_OR_FOLLOWER
    big = build_batch(1, value_bytes=6000)
    [reply] = p.produce(2, [(TPS[0], big)], T0)
    assert isinstance(reply, Reply) and reply.results[0].error == Errors.RECORD_LIST_TOO_LARGE


def test_config_validation() -> None:
    with pytest.raises(ValueError, match="commit_interval_ms must be > 0"):
        ProduceConfig(commit_interval_ms=0)
    with pytest.raises(ValueError, match="inflight_bytes_max"):
        ProduceConfig(buffer_bytes_max=10, inflight_bytes_max=5)


class CommitWindowVsModel(RuleBasedStateMachine):
    """The pipeline's order rules against a small reference model:

    * admission: a ticket is admissible exactly when no earlier ticket waits
      and its bytes fit (or nothing is in flight), so requests are produced
      in arrival order;
    * commits: per leader, at most N sent and not done, sent in release
      order (WAL-file order); a held commit goes out as soon as a slot frees.
    """

    def __init__(self) -> None:
        super().__init__()
        self.now = T0
        self.n = 0
        self.p: ProducePipeline
        self.waiting: list[tuple[int, int, list[tuple[TopicIdPartition, bytes]]]] = []  # (ticket, bytes, batches)
        self.admitted: list[int] = []  # tickets, in admission order
        self.next_produce = 0
        self.unanswered: dict[int, int] = {}  # produce id -> bytes
        self.uploading: set[int] = set()
        self.out: dict[int, list[SendCommit]] = {}  # leader -> sent, not done (send order)
        self.sent_order: dict[int, list[int]] = {}  # leader -> segment ids, in send order
        self.model_held: dict[int, list[int]] = {}  # leader -> released segment ids waiting for a slot

    @initialize(n=st.integers(1, 2))
    def setup(self, n: int) -> None:
        self.n = n
        self.p = _pipeline(
            commit_interval_ms=100,
            buffer_bytes_max=2000,
            inflight_bytes_max=6000,
            uploads_inflight_max=3,
            commits_in_flight_max=n,
        )

    def _apply(self, actions: list[Upload | SendCommit | Reply], *, from_commit_done: bool = False) -> None:
        sends = [a for a in actions if isinstance(a, SendCommit)]
        if from_commit_done:
            # Freed slots' commits come first.
            assert actions[: len(sends)] == sends
        for a in actions:
            if isinstance(a, Upload):
                self.uploading.add(a.segment_id)
            elif isinstance(a, SendCommit):
                leader = a.leader_broker_id
                held = self.model_held.get(leader, [])
                assert held and held[0] == a.segment_id, f"leader {leader}: sent {a.segment_id}, model says {held}"
                held.pop(0)
                self.out.setdefault(leader, []).append(a)
                self.sent_order.setdefault(leader, []).append(a.segment_id)
            else:
                self.unanswered.pop(a.produce_id)

    def _release(self) -> None:
        """The model's release: last_released's commits join their leaders' queues."""
        for r in self.p.last_released:
            assert list(r.leaders) == sorted(set(r.leaders))
            for leader in r.leaders:
                self.model_held.setdefault(leader, []).append(r.segment_id)

    @rule(sizes=st.lists(st.sampled_from([0, 1, 2, 3]), min_size=1, max_size=3), parts=st.integers(0, 5))
    def arrive_rule(self, sizes: list[int], parts: int) -> None:
        self.arrive(sizes, parts)

    def arrive(self, sizes: list[int], parts: int) -> None:
        batches = [(TPS[(parts + i) % len(TPS)], BATCHES[s]) for i, s in enumerate(sizes)]
        nbytes = sum(len(b) for _, b in batches)
        self.waiting.append((self.p.arrive(nbytes), nbytes, batches))

    @precondition(lambda self: bool(self.waiting))
    @rule(data=st.data())
    def try_admit(self, data: st.DataObject) -> None:
        self._try_admit(data.draw(st.integers(0, len(self.waiting) - 1)))

    def try_admit_head(self) -> None:
        self._try_admit(0)

    def _try_admit(self, i: int) -> None:
        ticket, nbytes, batches = self.waiting[i]
        fits = nbytes <= 6000 - sum(self.unanswered.values()) or not self.unanswered
        assert self.p.admissible(ticket) == (i == 0 and fits)
        if i == 0 and fits:
            self.waiting.pop(0)
            self.p.leave(ticket)
            self.admitted.append(ticket)
            pid = self.next_produce
            self.next_produce += 1
            self.unanswered[pid] = nbytes
            self._apply(self.p.produce(pid, batches, self.now))

    @precondition(lambda self: bool(self.waiting))
    @rule(data=st.data())
    def give_up(self, data: st.DataObject) -> None:
        i = data.draw(st.integers(0, len(self.waiting) - 1))
        self.p.leave(self.waiting.pop(i)[0])

    @rule(ms=st.sampled_from([10, 100]))
    def tick(self, ms: int) -> None:
        self.now += ms
        self._apply(self.p.tick(self.now))

    @precondition(lambda self: bool(self.uploading))
    @rule(data=st.data(), ok=st.booleans())
    def finish_upload(self, data: st.DataObject, ok: bool) -> None:
        sid = data.draw(st.sampled_from(sorted(self.uploading)))
        self.uploading.discard(sid)
        actions = self.p.upload_done(sid, self.now, None if ok else "injected")
        self._release()
        self._apply(actions)

    @rule(k=st.integers(1, 4))
    def burst(self, k: int) -> None:
        """``k`` one-batch segments to every leader, all uploaded at once: a
        burst of released commits."""
        for _ in range(k):
            self.arrive([0] * len(TPS), 0)
            self.try_admit_head()
            self._apply(self.p.flush(self.now))
        while self.uploading:
            sid = min(self.uploading)
            self.uploading.discard(sid)
            actions = self.p.upload_done(sid, self.now)
            self._release()
            self._apply(actions)

    @precondition(lambda self: any(self.out.values()))
    @rule(data=st.data(), ok=st.booleans())
    def finish_commit(self, data: st.DataObject, ok: bool) -> None:
        leader = data.draw(st.sampled_from(sorted(k for k, v in self.out.items() if v)))
        c = self.out[leader].pop(data.draw(st.integers(0, len(self.out[leader]) - 1)))
        responses = [CommitBatchResponse(Errors.NONE, 0, -1, 0, False, r) for r in c.requests] if ok else None
        self._apply(self.p.commit_done(c.segment_id, leader, responses, self.now), from_commit_done=True)

    @invariant()
    def window_and_order(self) -> None:
        for leader in set(self.out) | set(self.model_held):
            out, held = len(self.out.get(leader, [])), len(self.model_held.get(leader, []))
            assert out <= self.n and self.p.commits_out(leader) == out
            assert self.p.commits_held(leader) == held
            assert not held or out == self.n, f"leader {leader}: {held} held with a free slot"
            order = self.sent_order.get(leader, [])
            assert order == sorted(order) and len(set(order)) == len(order), f"leader {leader}: sent {order}"
        assert self.admitted == sorted(self.admitted)
        assert self.p.inflight_bytes == sum(self.unanswered.values())


CommitWindowVsModel.TestCase.settings = settings(max_examples=200, stateful_step_count=60, deadline=None)
test_commit_window_model = CommitWindowVsModel.TestCase


@settings(max_examples=200, deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.booleans(), st.integers(0, len(BATCHES) - 1), st.integers(0, 300)), min_size=1, max_size=30
    )
)
def test_urgent_closes_at_once_others_by_timer_or_size(steps: list[tuple[bool, int, int]]) -> None:
    """An urgent request's batches never wait for the timer: its produce
    closes the segment holding them.  A request that is not urgent closes a
    segment only when it is full (or the timer's ``tick`` is due), and is
    never counted as an early close."""
    buffer_bytes_max = 3000
    # Uploads never wait for a slot here: each close is an Upload action.
    p = _pipeline(
        commit_interval_ms=250, buffer_bytes_max=buffer_bytes_max, inflight_bytes_max=10**7, uploads_inflight_max=100
    )
    now = T0
    for pid, (urgent, b, advance) in enumerate(steps):
        now += advance
        deadline = p.next_deadline_ms()
        ticked = p.tick(now)
        assert (deadline is not None and now >= deadline) == bool(ticked)
        closed, early = p.segments_open, p.stats.early_closes
        actions = p.produce(pid, [(TPS[pid % len(TPS)], BATCHES[b])], now, urgent=urgent)
        uploads = [a for a in actions if isinstance(a, Upload)]
        if urgent:
            assert p.next_deadline_ms() is None and p.segments_open == closed + 1
            # Early unless its batches filled the segment (the footer may take
            # a file past buffer_bytes_max: the reason says which it was).
            assert p.stats.early_closes == early + (len(uploads) == 1 and uploads[0].reason is RotationReason.URGENT)
        else:
            assert p.stats.early_closes == early
            assert all(len(u.data) >= buffer_bytes_max for u in uploads)
            assert p.segments_open == closed + len(uploads)


def test_each_request_carries_its_own_transactional_id() -> None:
    """Two produce requests naming one producer id under different
    transactional ids (a client claiming another's producer id) share a WAL
    file: the commit names each request's own id, so the leader verifies
    each on its own (KIP-890, as Kafka verifies each produce request)."""
    p = _pipeline(commit_interval_ms=250)
    tp = TPS[0]
    victim = build_batch(1, producer_id=9, producer_epoch=0, base_sequence=0)
    impostor = build_batch(1, producer_id=9, producer_epoch=0, base_sequence=1)
    plain = build_batch(1)
    assert p.produce(1, [(tp, victim)], T0, transactional_id="victim") == []
    assert p.produce(2, [(tp, plain)], T0) == []
    [up] = [a for a in p.produce(3, [(tp, impostor)], T0, transactional_id="impostor", urgent=True)
            if isinstance(a, Upload)]  # fmt: skip
    [commit] = [c for c in p.upload_done(up.segment_id, T0 + 1) if isinstance(c, SendCommit)]
    assert len(commit.requests) == 3
    assert commit.transactional_ids == ((0, "victim"), (2, "impostor"))


def test_a_clock_stepped_back_never_names_a_file_before_its_footer() -> None:
    """Regression (`fuzz --tiering` seed 5): the wall clock stepped back while
    a file was open, and the key (named at the close) said an earlier time
    than the footer (the opening); walmgr held that file INVALID for ever."""
    p = _pipeline(commit_interval_ms=250, rotation_grace_ms=250)
    assert p.produce(1, [(TPS[0], BATCHES[0])], T0 + 1_000) == []
    [up] = p.tick(T0 + 1_000 - 150)  # the clock stepped back 150 ms; the file closes (rotation rule)
    assert isinstance(up, Upload)
    footer = check_segment(up.data, key=up.key)
    assert parse_wal_key(up.key).created_ms >= footer.created_ms == T0 + 1_000
