"""The WAL rotation rule (partlog.produce.rotation) in the real pipeline,
against a small reference model: arrivals, upload and commit completions
and clock advances drawn by hypothesis, the shell calling ``tick`` at every
``next_deadline_ms`` as a correct one does.  After every step:

* no file stays open past its interval deadline;
* with nothing in flight, a non-empty file closes once it is
  ``rotation_grace_ms`` old, unless the budget (the model's own bucket) has
  no token then, and an early close happens only when the model allows it;
* in any 1 s window, early closes (idle, round_done) <= burst + budget,
  and all closes <= burst + budget + the window's forced closes (interval,
  size, urgent): the bound design.md states.
"""

from __future__ import annotations

import itertools
import uuid
from fractions import Fraction

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from partlog.kafka.errors import Errors
from partlog.kafka.records import CommitBatchResponse, TopicIdPartition
from partlog.produce.pipeline import ProduceConfig, ProducePipeline, Reply, SendCommit, Upload
from partlog.produce.rotation import EARLY_REASONS, RotationReason, burst_tokens
from tests.batches import build_batch

T0 = 1_700_000_000_000
TOPIC = uuid.UUID(int=7)
TPS = [TopicIdPartition(TOPIC, p) for p in range(4)]
LEADERS = {tp: tp.partition % 2 for tp in TPS}  # brokers 0 and 1
BATCHES = [build_batch(1, value_bytes=v) for v in (10, 900)]
BUFFER_BYTES_MAX = 2500
WINDOW_MS = 1000


class ModelBucket:
    """The budget as the rule states it, in exact fractions of a token."""

    def __init__(self, per_s: int) -> None:
        self.rate = Fraction(per_s, 1000)  # tokens a ms
        self.cap = Fraction(burst_tokens(per_s))
        self.level = self.cap
        self.at: int | None = None

    def level_at(self, now: int) -> Fraction:
        if self.at is None:
            return self.level
        return min(self.cap, self.level + self.rate * max(0, now - self.at))

    def close(self, now: int, early: bool) -> None:
        level = self.level_at(now)
        assert not early or level >= 1, f"an early close at {now - T0} with {float(level):.3f} tokens"
        self.level = level - 1 if early else max(-self.cap, level - 1)
        self.at = now


class RotationVsModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = T0
        self.next_produce = 0
        self.unanswered: set[int] = set()
        self.uploading: dict[int, Upload] = {}
        self.upload_result: dict[int, bool] = {}  # segment -> ok
        self.commits: dict[tuple[int, int], SendCommit] = {}
        self.closes: list[tuple[int, RotationReason]] = []
        self.segments = 0
        # The open file as the model sees it: opened at, whether idle then.
        self.opened: tuple[int, bool] | None = None
        self.idle_since: int | None = T0 - 10**9

    @initialize(
        interval=st.sampled_from([20, 50, 250]),
        grace=st.sampled_from([0, 2, 10]),
        per_s=st.sampled_from([1, 5, 20, 200]),
    )
    def setup(self, interval: int, grace: int, per_s: int) -> None:
        self.interval, self.grace, self.per_s = interval, grace, per_s
        self.bucket = ModelBucket(per_s)
        keys = itertools.count()
        self.p = ProducePipeline(
            0,
            ProduceConfig(
                commit_interval_ms=interval,
                buffer_bytes_max=BUFFER_BYTES_MAX,
                inflight_bytes_max=1 << 20,
                # Every close is an Upload action at once (none waits for a slot).
                uploads_inflight_max=1000,
                rotation_grace_ms=grace,
                wal_puts_per_s_max=per_s,
            ),
            leader_of=LEADERS.get,
            rand_hex=lambda: f"{next(keys):x}",
        )

    # ------------------------------------------------------------ model

    def _busy(self) -> bool:
        """A closed segment is still in its round: its upload, an earlier
        one's (its commits wait for it), or one of its commits."""
        for s in range(self.segments):
            if s not in self.upload_result:
                return True
            if self.upload_result[s] and any(k[0] == s for k in self.commits):
                return True
        return False

    def _apply(self, actions: list[Upload | SendCommit | Reply]) -> None:
        for a in actions:
            if isinstance(a, Upload):
                assert self.opened is not None, "a close with no file open"
                opened, opened_idle = self.opened
                early = a.reason in EARLY_REASONS
                if early:
                    # Allowed only with nothing in flight, past the grace.
                    assert self.idle_since is not None, f"{a.reason} close with a round in flight"
                    assert self.now >= opened + self.grace and self.now >= self.idle_since
                    want = RotationReason.IDLE if opened_idle else RotationReason.ROUND_DONE
                    assert a.reason == want, (a.reason, want)
                elif a.reason == RotationReason.INTERVAL:
                    assert self.now >= opened + self.interval
                self.bucket.close(self.now, early)
                self.closes.append((self.now, a.reason))
                assert a.segment_id == self.segments
                self.segments += 1
                self.uploading[a.segment_id] = a
                self.opened = None
                self.idle_since = None
            elif isinstance(a, SendCommit):
                self.commits[(a.segment_id, a.leader_broker_id)] = a
            else:
                self.unanswered.discard(a.produce_id)

    def _after_input(self, actions: list[Upload | SendCommit | Reply], opens: bool = False) -> None:
        """What the pipeline did, action by action.  The model looks at
        idleness before each close (a close that ends an input follows the
        answers and commits the input caused) and at the input's end.
        ``opens``: a produce, whose batches open a file when none is open (a
        size or urgent close inside it closes the one open then)."""
        for a in actions:
            if isinstance(a, Upload):
                self._update_idle()
                if opens:
                    self._opening()
            self._apply([a])
        self._update_idle()
        if opens and self.p.next_deadline_ms() is not None:
            self._opening()

    def _update_idle(self) -> None:
        if not self._busy() and self.idle_since is None:
            self.idle_since = self.now

    def _opening(self) -> None:
        if self.opened is None:
            self.opened = (self.now, self.idle_since is not None)

    # ------------------------------------------------------------ rules

    @rule(big=st.booleans(), n=st.integers(1, 3), urgent=st.booleans())
    def produce(self, big: bool, n: int, urgent: bool) -> None:
        pid = self.next_produce
        self.next_produce += 1
        batches = [(TPS[(pid + i) % len(TPS)], BATCHES[big]) for i in range(n)]
        self.unanswered.add(pid)
        self._after_input(self.p.produce(pid, batches, self.now, urgent=urgent), opens=True)

    @rule(ms=st.sampled_from([0, 1, 2, 3, 7, 20, 60, 300, 1100]))
    def advance(self, ms: int) -> None:
        """The clock moves; the shell ticks at each deadline on the way."""
        target = self.now + ms
        for _ in range(10_000):
            deadline = self.p.next_deadline_ms()
            if deadline is None or deadline > target:
                break
            self.now = max(self.now, deadline)
            closes = self.segments
            self._after_input(self.p.tick(self.now))
            assert self.segments > closes or (self.p.next_deadline_ms() or target + 1) > self.now, (
                "tick at the deadline did nothing and the deadline did not move: a shell would spin"
            )
            self.check_rule()
        else:
            raise AssertionError("no end of deadlines")
        self.now = target
        self._after_input(self.p.tick(self.now))

    @precondition(lambda self: bool(set(self.uploading) - set(self.upload_result)))
    @rule(data=st.data(), ok=st.booleans())
    def finish_upload(self, data: st.DataObject, ok: bool) -> None:
        sid = data.draw(st.sampled_from(sorted(set(self.uploading) - set(self.upload_result))))
        self.upload_result[sid] = ok
        self._after_input(self.p.upload_done(sid, self.now, None if ok else "injected"))

    @precondition(lambda self: bool(self.commits))
    @rule(data=st.data())
    def finish_commit(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(self.commits)))
        c = self.commits.pop(key)
        responses = [CommitBatchResponse(Errors.NONE, 0, -1, 0, False, r) for r in c.requests]
        self._after_input(self.p.commit_done(c.segment_id, c.leader_broker_id, responses, self.now))

    # ------------------------------------------------------------ checks

    @invariant()
    def check_rule(self) -> None:
        if not hasattr(self, "p"):
            return
        assert (self.opened is not None) == (self.p.next_deadline_ms() is not None)
        if self.opened is not None:
            opened, _ = self.opened
            assert self.now < opened + self.interval, f"a file open {self.now - opened} ms, past its interval"
            if self.idle_since is not None:
                early = max(opened + self.grace, self.idle_since)
                assert not (self.now >= early and self.bucket.level_at(self.now) >= 1), (
                    f"nothing in flight, a file {self.now - opened} ms old (grace {self.grace}) "
                    f"and {float(self.bucket.level_at(self.now)):.2f} tokens, still open"
                )

    @invariant()
    def check_budget(self) -> None:
        if not hasattr(self, "p"):
            return
        burst = burst_tokens(self.per_s)
        for i, (start, _) in enumerate(self.closes):
            window = [c for c in self.closes[i:] if c[0] < start + WINDOW_MS]
            early = sum(1 for _, r in window if r in EARLY_REASONS)
            forced = len(window) - early
            assert early <= burst + self.per_s, f"{early} early closes in 1 s, budget {self.per_s} + burst {burst}"
            assert len(window) <= burst + self.per_s + forced

    def teardown(self) -> None:
        if not hasattr(self, "p"):
            return
        assert self.p.stats.rotations == {
            r: sum(1 for _, why in self.closes if why == r) for r in {why for _, why in self.closes}
        }


RotationVsModel.TestCase.settings = settings(max_examples=300, stateful_step_count=60, deadline=None)
test_rotation_model = RotationVsModel.TestCase


def _one(p: ProducePipeline, pid: int, now: int) -> list[Upload | SendCommit | Reply]:
    return p.produce(pid, [(TPS[0], BATCHES[0])], now)


def test_an_idle_broker_closes_after_the_grace_and_the_next_file_when_the_round_completes() -> None:
    p = ProducePipeline(
        0, ProduceConfig(commit_interval_ms=50, rotation_grace_ms=2), leader_of=LEADERS.get, rand_hex=lambda: "a"
    )
    assert _one(p, 1, T0) == [] and p.next_deadline_ms() == T0 + 2
    assert p.tick(T0 + 1) == []
    [up] = p.tick(T0 + 2)
    assert isinstance(up, Upload) and up.reason == RotationReason.IDLE
    # A request during the round: its file waits for the round (not the grace).
    assert _one(p, 2, T0 + 5) == [] and p.next_deadline_ms() == T0 + 55
    [commit] = p.upload_done(up.segment_id, T0 + 8)
    assert isinstance(commit, SendCommit)
    resp = [CommitBatchResponse(Errors.NONE, 0, -1, 0, False, r) for r in commit.requests]
    reply, up2 = p.commit_done(commit.segment_id, commit.leader_broker_id, resp, T0 + 12)
    assert isinstance(reply, Reply) and isinstance(up2, Upload) and up2.reason == RotationReason.ROUND_DONE
    assert p.stats.rotations == {"idle": 1, "round_done": 1}


def test_at_the_budget_a_file_waits_for_a_token_or_its_interval() -> None:
    # 1 PUT/s, a burst of 1: the second idle file waits for the token.
    p = ProducePipeline(
        0,
        ProduceConfig(commit_interval_ms=2000, rotation_grace_ms=0, wal_puts_per_s_max=1),
        leader_of=LEADERS.get,
        rand_hex=lambda: "a",
    )
    [up] = _one(p, 1, T0)
    assert isinstance(up, Upload) and up.reason == RotationReason.IDLE
    p.upload_done(up.segment_id, T0, "injected")
    assert _one(p, 2, T0 + 10) == []
    assert p.rotation.budget_waits == 1 and p.next_deadline_ms() == T0 + 1000
    [up2] = p.tick(T0 + 1000)
    assert isinstance(up2, Upload) and up2.reason == RotationReason.IDLE
    p.upload_done(up2.segment_id, T0 + 1000, "injected")
    # An interval shorter than the token's wait: the interval closes it.
    q = ProducePipeline(
        0,
        ProduceConfig(commit_interval_ms=300, rotation_grace_ms=0, wal_puts_per_s_max=1),
        leader_of=LEADERS.get,
        rand_hex=lambda: "a",
    )
    [up] = _one(q, 1, T0)
    q.upload_done(up.segment_id, T0, "injected")  # type: ignore[union-attr]
    assert _one(q, 2, T0 + 10) == [] and q.next_deadline_ms() == T0 + 310
    [up3] = q.tick(T0 + 310)
    assert isinstance(up3, Upload) and up3.reason == RotationReason.INTERVAL


def test_the_default_budget_is_one_put_per_commit_interval() -> None:
    assert ProduceConfig(commit_interval_ms=50).puts_per_s_max() == 20
    assert ProduceConfig().puts_per_s_max() == 4  # KIP-1163's 250 ms
    assert ProduceConfig(commit_interval_ms=300).puts_per_s_max() == 4  # rounded up
    assert ProduceConfig(commit_interval_ms=50, wal_puts_per_s_max=7).puts_per_s_max() == 7
    for bad in ({"wal_puts_per_s_max": 0}, {"rotation_grace_ms": -1}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            ProduceConfig(**bad)  # type: ignore[arg-type]


def test_a_wall_clock_stepped_back_does_not_keep_a_file_open() -> None:
    # The shell passes wall-clock milliseconds; an NTP step back of an hour
    # must not keep the open file (and every produce in it) for that hour.
    p = ProducePipeline(
        0, ProduceConfig(commit_interval_ms=50, rotation_grace_ms=2), leader_of=LEADERS.get, rand_hex=lambda: "a"
    )
    assert _one(p, 1, T0) == []
    [up] = p.tick(T0 + 2)  # an idle close: its round is in flight from here
    assert isinstance(up, Upload)
    assert _one(p, 2, T0 + 5) == []  # waits for the round, or its interval
    stepped = T0 + 5 - 3_600_000
    closed = [a for now in range(stepped, stepped + 51) for a in p.tick(now) if isinstance(a, Upload)]
    assert closed, "the file stayed open after the clock stepped back"
