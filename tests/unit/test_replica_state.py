"""ISR, HWM and acks=all completion (Kafka's Partition rules) as a state machine."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from partlog.kafka.errors import Errors
from partlog.replication.replica_state import AckResult, ReplicaState

LAG_MS = 1000


def settle(s: ReplicaState, now: int) -> list[AckResult]:
    """Ask for the ISR the leader wants and commit it at once (a controller that agrees)."""
    proposal = s.isr_proposal(now)
    if proposal is None:
        return []
    return s.isr_committed(set(proposal), s.partition_epoch + 1)


class ReplicaMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.s = ReplicaState(leader_id=1, replicas=(1, 2, 3), min_insync_replicas=2, replica_lag_time_max_ms=LAG_MS)
        self.now = 0
        self.follower_leo = {2: 0, 3: 0}
        self.hwm_seen = 0
        self.expected_hwm = 0
        self.waiting: dict[int, int] = {}  # token -> required offset
        self.next_token = 0
        # What the controller holds (it may differ from the leader's view
        # when an answer is lost).
        self.controller_isr = {1, 2, 3}
        self.controller_pe = 0

    def _done(self, results: list[AckResult]) -> None:
        for r in results:
            assert r.token in self.waiting, "completed twice or never waited"
            assert self.waiting.pop(r.token) == r.required_offset <= self.s.high_watermark
            want = Errors.NONE if len(self.s.isr) >= 2 else Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND
            assert r.error == want

    def _frozen_under_min_isr(self, before: int) -> None:
        # KIP-966 strict min ISR: no HWM progress below the minimum.
        if len(self.s.isr) < 2:
            assert self.s.high_watermark == before

    @rule(n=st.integers(1, 5), acks_all=st.booleans())
    def append(self, n: int, acks_all: bool) -> None:
        if acks_all and self.s.check_acks_all() != Errors.NONE:
            assert len(self.s.isr) < 2
            return
        token = None
        if acks_all:
            token = self.next_token
            self.next_token += 1
            self.waiting[token] = self.s.log_end_offset + n
        before = self.s.high_watermark
        self._done(self.s.leader_appended(self.s.log_end_offset + n, self.now, token))
        self._frozen_under_min_isr(before)

    @rule(follower=st.sampled_from([2, 3]), data=st.data())
    def fetch(self, follower: int, data: st.DataObject) -> None:
        offset = data.draw(st.integers(self.follower_leo[follower], self.s.log_end_offset))
        self.follower_leo[follower] = offset
        before = self.s.high_watermark
        self._done(self.s.follower_fetch(follower, offset, self.now))
        self._frozen_under_min_isr(before)

    @rule(ms=st.sampled_from([10, 500, LAG_MS + 1]))
    def tick(self, ms: int) -> None:
        self.now += ms

    @rule(
        outcome=st.sampled_from(["commit", "refuse", "lost_applied", "lost_not_applied"]),
        expand_for=st.sampled_from([None, 2, 3]),
    )
    def alter_isr(self, outcome: str, expand_for: int | None) -> None:
        # expand_for: as on a fetch of that follower; None: the periodic check.
        isr = set(self.s.isr) | self.s._uncertain
        proposal = self.s.isr_proposal(self.now, expand_for)
        if proposal is None:
            return
        assert 1 in proposal
        # Only the fetching follower may join.
        assert set(proposal) - isr <= ({expand_for} if expand_for is not None else set())
        # The controller: a stale partition epoch is refused; the ISR it
        # holds is answered unchanged; anything else is committed.
        stale = self.s.partition_epoch != self.controller_pe
        if outcome == "refuse" or (stale and outcome == "commit"):
            self.s.isr_failed()
            return
        applied = not stale and outcome in ("commit", "lost_applied")
        if applied and set(proposal) != self.controller_isr:
            self.controller_isr = set(proposal)
            self.controller_pe += 1
        if outcome == "commit":
            self._done(self.s.isr_committed(set(self.controller_isr), self.controller_pe))
        else:
            self.s.isr_failed(outcome_unknown=True)  # the answer was lost

    @rule()
    def metadata_push(self) -> None:
        """The controller's state reaches the leader (as the shell applies a
        newer partition epoch from the metadata)."""
        if self.controller_pe > self.s.partition_epoch:
            self._done(self.s.isr_committed(set(self.controller_isr), self.controller_pe))

    @invariant()
    def rules_hold(self) -> None:
        s = self.s
        assert 1 in s.isr
        assert s.high_watermark >= self.hwm_seen, "HWM went back"
        self.hwm_seen = s.high_watermark
        assert s.high_watermark <= s.log_end_offset
        # Safety: no replica the controller may elect lacks anything below
        # the HWM, even when the leader's view lags the controller's.
        assert s.isr <= s.maximal_isr
        assert all(self.follower_leo[r] >= s.high_watermark for r in s.maximal_isr if r != 1)
        assert all(self.follower_leo[r] >= s.high_watermark for r in self.controller_isr if r != 1)
        # Progress: with enough replicas in sync and everyone caught up, all is committed.
        if len(s.isr) >= 2 and all(leo == s.log_end_offset for leo in self.follower_leo.values()):
            assert s.high_watermark == s.log_end_offset
        # Nothing waits that the HWM already passed.
        assert all(req > s.high_watermark for req in self.waiting.values())
        assert s.waiting == len(self.waiting)


ReplicaMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
test_replica_state_machine = ReplicaMachine.TestCase


def test_lagging_follower_leaves_and_rejoins_the_isr() -> None:
    s = ReplicaState(leader_id=1, replicas=(1, 2), min_insync_replicas=2, replica_lag_time_max_ms=100)
    assert s.leader_appended(10, 0, wait_token=7) == []
    assert s.follower_fetch(2, 10, 50) == [AckResult(10, 7, Errors.NONE)]  # HWM 10: the ack completes
    s.leader_appended(20, 60)
    # Behind the leader (20), but at the leader's end as of the previous fetch
    # (10): caught up as of that fetch, at 50 ms.
    s.follower_fetch(2, 12, 70)
    assert settle(s, 150) == [] and 2 in s.isr
    assert s.isr_proposal(151) == (1,)  # not caught up for more than 100 ms
    # Until the controller commits the shrink, the follower holds the HWM back.
    assert s.high_watermark == 12 and s.isr == {1, 2}
    assert s.isr_committed({1}, 1) == [] and s.isr == {1}
    assert s.check_acks_all() == Errors.NOT_ENOUGH_REPLICAS
    assert s.high_watermark == 12  # under min.insync.replicas: the HWM stays (KIP-966)
    s.leader_appended(25, 200)
    assert s.high_watermark == 12
    s.follower_fetch(2, 25, 210)  # past the HWM: rejoins (on its fetch)
    assert s.isr_proposal(210, expand_for=2) == (1, 2)
    # A pending expansion already counts for the HWM, not for acks=all.
    assert s.maximal_isr == {1, 2} and s.check_acks_all() == Errors.NOT_ENOUGH_REPLICAS
    s.isr_committed((1, 2), 2)
    assert s.isr == {1, 2} and s.check_acks_all() == Errors.NONE and s.high_watermark == 25
    # A stale push (older partition epoch) changes nothing.
    assert s.isr_committed({1}, 1) == [] and s.isr == {1, 2}


def test_an_ack_waits_while_the_isr_is_under_the_minimum() -> None:
    s = ReplicaState(leader_id=1, replicas=(1, 2, 3), min_insync_replicas=2, replica_lag_time_max_ms=100)
    s.follower_fetch(2, 0, 0)
    s.follower_fetch(3, 0, 0)
    s.leader_appended(5, 10, wait_token=1)
    assert s.isr_proposal(500) == (1,)
    # Under the minimum the HWM stays, so the append is not acknowledged (it
    # times out in the shell, as Kafka's DelayedProduce).
    assert s.isr_committed({1}, 1) == [] and s.waiting == 1 and s.high_watermark == 0


def test_a_caught_up_follower_about_to_join_holds_the_hwm_back() -> None:
    s = ReplicaState(leader_id=1, replicas=(1, 2), isr={1}, replica_lag_time_max_ms=100)
    s.leader_appended(5, 200)  # the follower has not been caught up for 200 ms
    assert s.high_watermark == 5
    s.follower_fetch(2, 5, 210)  # caught up, not yet in the ISR
    s.leader_appended(9, 220)
    assert s.high_watermark == 5  # Kafka's shouldWaitForReplicaToJoinIsr
    s.eligible = lambda r: False  # fenced: it cannot join, so it does not count
    s.leader_appended(10, 230)
    assert s.high_watermark == 10


def test_a_caught_up_followers_fetch_advances_an_hwm_that_time_released() -> None:
    """The fast path of a re-fetch at the log end is taken only with the HWM
    there too: below it, the fetch may be what releases the HWM."""
    s = ReplicaState(leader_id=1, replicas=(1, 2, 3), isr={1, 2}, replica_lag_time_max_ms=100)
    s.follower_fetch(3, 0, 10)  # caught up (at 0), not in the ISR: holds the HWM back
    s.leader_appended(5, 20)
    s.follower_fetch(2, 5, 30)
    assert s.high_watermark == 0
    s.follower_fetch(2, 5, 200)  # 3 no longer caught up within the lag: it stops holding back
    assert s.high_watermark == 5


def test_leadership_lost_fails_the_waiting_appends() -> None:
    s = ReplicaState(leader_id=1, replicas=(1, 2), start_ms=1000)
    s.leader_appended(3, 1000, wait_token=4)
    assert s.isr_proposal(1500) is None  # followers count as caught up when leadership starts
    assert s.fail_waiting(Errors.NOT_LEADER_OR_FOLLOWER) == [AckResult(3, 4, Errors.NOT_LEADER_OR_FOLLOWER)]
    assert s.waiting == 0


def test_bad_configs() -> None:
    with pytest.raises(ValueError, match="not one of the replicas"):
        ReplicaState(leader_id=9, replicas=(1, 2))
    with pytest.raises(ValueError, match="min_insync_replicas"):
        ReplicaState(leader_id=1, replicas=(1, 2), min_insync_replicas=0)
    # More than the replicas, as Kafka allows: the effective minimum is the replica count.
    big = ReplicaState(leader_id=1, replicas=(1, 2), min_insync_replicas=3)
    assert big.effective_min_isr == 2 and big.check_acks_all() == Errors.NONE
    s = ReplicaState(leader_id=1, replicas=(1, 2))
    with pytest.raises(ValueError, match="past the log end"):
        s.follower_fetch(2, 5, 0)
    with pytest.raises(ValueError, match="not a follower"):
        s.follower_fetch(3, 0, 0)


def test_an_ineligible_replica_is_not_proposed_for_the_isr() -> None:
    s = ReplicaState(leader_id=1, replicas=(1, 2), isr={1}, eligible=lambda r: r != 2)
    s.leader_appended(5, 0)
    s.follower_fetch(2, 5, 10)  # caught up, but its broker is fenced
    assert s.isr_proposal(10, expand_for=2) is None
    s.eligible = None
    assert s.isr_proposal(10, expand_for=2) == (1, 2)


def test_a_follower_that_stopped_fetching_does_not_rejoin_on_the_periodic_check() -> None:
    """Regression (DST seed 29 with min.insync.replicas=2): a follower cut
    off at the HWM (which then stays, under the minimum ISR) was added back
    by every periodic check and dropped by the next, without fetching; its
    log start never learned what the leader's retention removed, and walmgr,
    having asked the ISR of the moment, deleted an object it still named."""
    s = ReplicaState(leader_id=1, replicas=(1, 2), min_insync_replicas=2, replica_lag_time_max_ms=100)
    s.leader_appended(5, 0)
    s.follower_fetch(2, 5, 10)
    s.leader_appended(9, 20)  # the follower stops fetching at 5
    assert s.isr_proposal(200) == (1,)
    s.isr_committed({1}, 1)
    assert s.high_watermark == 5  # under the minimum: the HWM stays at the follower's end
    for now in range(250, 2000, 250):  # the periodic checks: no expansion
        assert s.isr_proposal(now) is None
    s.follower_fetch(2, 9, 2000)  # it fetches again: now it may join
    assert s.isr_proposal(2000, expand_for=2) == (1, 2)


def test_an_expansion_whose_answer_was_lost_counts_until_settled() -> None:
    """Regression (review of the DST fixes): a lost AlterPartition answer
    dropped the expansion, though the controller may have committed it; the
    HWM could then pass the new member, which the controller may elect, and
    walmgr's check did not have to name it.  It stays in the maximal ISR
    until an answer settles the ISR."""
    s = ReplicaState(leader_id=1, replicas=(1, 2), isr={1}, min_insync_replicas=1, replica_lag_time_max_ms=100)
    s.leader_appended(5, 0)
    s.follower_fetch(2, 5, 10)
    assert s.isr_proposal(10, expand_for=2) == (1, 2)
    s.isr_failed(outcome_unknown=True)  # a timeout: the controller may hold {1, 2}
    assert s.maximal_isr == {1, 2} and s.isr == {1}
    s.leader_appended(9, 20)  # the follower stops fetching at 5
    assert s.high_watermark == 5  # it may be in the ISR: the HWM waits
    # The periodic check asks again, even with nothing to change, and the
    # controller's answer settles it: it never committed the expansion.
    assert s.isr_proposal(300) == (1,)
    s.isr_committed({1}, 0)
    assert s.maximal_isr == {1} and s.high_watermark == 9
    # A refusal (a definite answer) adds nothing.
    s.follower_fetch(2, 9, 310)
    assert s.isr_proposal(310, expand_for=2) == (1, 2)
    s.isr_failed()
    assert s.maximal_isr == {1}


def _state(s: ReplicaState) -> tuple[object, ...]:
    followers = {r: (f.log_end_offset, f.last_caught_up_ms, f.last_fetch_leader_leo, f.last_fetch_ms)
                 for r, f in s._followers.items()}  # fmt: skip
    return (s.high_watermark, s.log_end_offset, sorted(s.isr), s._pending, s._uncertain, s._now_ms,
            [(w.required_offset, w.token) for w in s._waiting], followers)  # fmt: skip


class FastFetchMachine(RuleBasedStateMachine):
    """``follower_fetch``'s fast path (a caught-up follower fetching again)
    changes exactly what the full ``_follower_fetch`` would: two states, fed
    the same steps, one through each, stay equal and answer alike."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = (
            ReplicaState(leader_id=1, replicas=(1, 2, 3), min_insync_replicas=2, replica_lag_time_max_ms=LAG_MS)
            for _ in range(2)
        )
        self.now = 0
        self.token = 0

    @rule(n=st.integers(0, 3), acks_all=st.booleans())
    def append(self, n: int, acks_all: bool) -> None:
        token = None
        if acks_all:
            token, self.token = self.token, self.token + 1
        leo = self.a.log_end_offset + n
        assert self.a.leader_appended(leo, self.now, token) == self.b.leader_appended(leo, self.now, token)

    @rule(follower=st.sampled_from([2, 3]), data=st.data())
    def fetch(self, follower: int, data: st.DataObject) -> None:
        low = self.a._followers[follower].log_end_offset
        offset = data.draw(st.sampled_from(sorted({low, self.a.log_end_offset, (low + self.a.log_end_offset) // 2})))
        got = self.a.follower_fetch(follower, offset, self.now)
        assert got == self.b._follower_fetch(follower, self.b._followers[follower], offset, self.now)

    @rule(follower=st.sampled_from([2, 3]), data=st.data(), check_only=st.booleans())
    def quiet_fetch(self, follower: int, data: st.DataObject, check_only: bool) -> None:
        # The quiet lane's fetch: taken only where the fast path would be,
        # moving what the full path would; anything else changes nothing.
        low = self.a._followers[follower].log_end_offset
        offset = data.draw(st.sampled_from(sorted({low, self.a.log_end_offset})))
        before = _state(self.a)
        taken = self.a.quiet_fetch(follower, offset, None if check_only else self.now)
        f = self.b._followers[follower]
        fast = offset == self.b.log_end_offset == f.log_end_offset == self.b.high_watermark and not self.b._waiting
        assert taken == (fast and follower in self.b.isr)
        if taken and not check_only:
            assert self.b._follower_fetch(follower, f, offset, self.now) == []
        else:
            assert _state(self.a) == before

    @rule(ms=st.sampled_from([0, 10, 500, LAG_MS + 1]))
    def tick(self, ms: int) -> None:
        self.now += ms

    @rule(expand_for=st.sampled_from([None, 2, 3]))
    def alter_isr(self, expand_for: int | None) -> None:
        proposal = self.a.isr_proposal(self.now, expand_for)
        assert proposal == self.b.isr_proposal(self.now, expand_for)
        if proposal is not None:
            epoch = self.a.partition_epoch + 1
            assert self.a.isr_committed(set(proposal), epoch) == self.b.isr_committed(set(proposal), epoch)

    @invariant()
    def the_same(self) -> None:
        assert _state(self.a) == _state(self.b)


FastFetchMachine.TestCase.settings = settings(max_examples=200, stateful_step_count=40, deadline=None)
test_the_fast_fetch_path_changes_what_the_full_one_would = FastFetchMachine.TestCase
