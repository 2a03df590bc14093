"""A leader's replica set changing at the same leader epoch (reassignment,
``ReplicaState.replicas_changed``): the model of test_replica_state with a
controller that adds and removes replicas under the ISR traffic."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from partlog.kafka.errors import Errors
from partlog.replication.replica_state import AckResult, ReplicaState

LAG_MS = 1000
BROKERS = (2, 3, 4, 5)  # besides the leader, 1
MIN_ISR = 2


class ReassignMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.s = ReplicaState(
            leader_id=1, replicas=(1, 2, 3), min_insync_replicas=MIN_ISR, replica_lag_time_max_ms=LAG_MS
        )
        self.now = 0
        # What each broker holds; a broker added anew starts empty (it
        # dropped its log when it was removed).
        self.follower_leo = dict.fromkeys(BROKERS, 0)
        self.hwm_seen = 0
        self.waiting: dict[int, int] = {}
        self.next_token = 0
        self.controller_replicas: tuple[int, ...] = (1, 2, 3)
        self.controller_isr = {1, 2, 3}
        self.controller_pe = 0
        # Brokers that dropped their log (removed, then added anew) while
        # the leader's view may still count them in the ISR: they lost what
        # they held, but the controller no longer elects them, and the
        # leader's proposals, at a stale partition epoch, are refused.
        self.dropped: set[int] = set()
        # Dropped brokers that have not fetched since: the leader's view of
        # their log end may predate the drop (it missed their removal).
        self.unfetched: set[int] = set()

    def _min_isr(self) -> int:
        return min(MIN_ISR, len(self.s.replicas))

    def _done(self, results: list[AckResult]) -> None:
        for r in results:
            assert r.token in self.waiting, "completed twice or never waited"
            assert self.waiting.pop(r.token) == r.required_offset <= self.s.high_watermark
            want = Errors.NONE if len(self.s.isr) >= self._min_isr() else Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND
            assert r.error == want

    @rule(n=st.integers(1, 5), acks_all=st.booleans())
    def append(self, n: int, acks_all: bool) -> None:
        if acks_all and self.s.check_acks_all() != Errors.NONE:
            assert len(self.s.isr) < self._min_isr()
            return
        token = None
        if acks_all:
            token = self.next_token
            self.next_token += 1
            self.waiting[token] = self.s.log_end_offset + n
        self._done(self.s.leader_appended(self.s.log_end_offset + n, self.now, token))

    @precondition(lambda self: len(self.s.replicas) > 1)
    @rule(data=st.data())
    def fetch(self, data: st.DataObject) -> None:
        follower = data.draw(st.sampled_from([r for r in self.s.replicas if r != 1]))
        offset = data.draw(st.integers(self.follower_leo[follower], self.s.log_end_offset))
        self.follower_leo[follower] = offset
        self.unfetched.discard(follower)
        self._done(self.s.follower_fetch(follower, offset, self.now))

    @rule(ms=st.sampled_from([10, 500, LAG_MS + 1]))
    def tick(self, ms: int) -> None:
        self.now += ms

    @rule(
        outcome=st.sampled_from(["commit", "refuse", "lost_applied", "lost_not_applied"]),
        expand_for=st.sampled_from([None, *BROKERS]),
    )
    def alter_isr(self, outcome: str, expand_for: int | None) -> None:
        if expand_for in self.unfetched:
            # The shell proposes for a follower only on its fetch, which
            # first reports its log end (the fetch rule).
            expand_for = None
        proposal = self.s.isr_proposal(self.now, expand_for)
        if proposal is None:
            return
        assert set(proposal) <= set(self.s.replicas)
        stale = self.s.partition_epoch != self.controller_pe
        if outcome == "refuse" or (stale and outcome == "commit"):
            self.s.isr_failed()
            return
        applied = not stale and outcome in ("commit", "lost_applied")
        if applied:
            # Not stale: the leader knows the controller's replicas.
            assert set(proposal) <= set(self.controller_replicas)
            if set(proposal) != self.controller_isr:
                self.controller_isr = set(proposal)
                self.controller_pe += 1
        if outcome == "commit":
            self._done(self.s.isr_committed(set(self.controller_isr), self.controller_pe))
        else:
            self.s.isr_failed(outcome_unknown=True)

    @rule(data=st.data(), deliver=st.booleans())
    def reassign(self, data: st.DataObject, deliver: bool) -> None:
        """The controller adds replicas (Kafka's first step: the union) or
        removes ones (the last step, or a cancellation); the ISR keeps the
        members still replicas.  The leader learns it now or later."""
        others = data.draw(st.lists(st.sampled_from(BROKERS), unique=True, max_size=len(BROKERS)))
        replicas = (1, *others)
        for r in set(replicas) - set(self.controller_replicas):
            self.follower_leo[r] = 0  # a fresh replica: an empty log
            self.dropped.add(r)
            self.unfetched.add(r)
        self.controller_replicas = replicas
        self.controller_isr = (self.controller_isr & set(replicas)) | {1}
        self.controller_pe += 1
        if deliver:
            self.metadata_push()

    @rule()
    def metadata_push(self) -> None:
        if self.controller_pe <= self.s.partition_epoch:
            return
        if self.controller_replicas != self.s.replicas:
            results = self.s.replicas_changed(
                self.controller_replicas, set(self.controller_isr), self.controller_pe, self.now
            )
        else:
            results = self.s.isr_committed(set(self.controller_isr), self.controller_pe)
        self._done(results)
        assert not self.dropped & self.s.maximal_isr
        self.dropped.clear()

    @invariant()
    def rules_hold(self) -> None:
        s = self.s
        assert 1 in s.isr
        assert s.high_watermark >= self.hwm_seen, "HWM went back"
        self.hwm_seen = s.high_watermark
        assert s.high_watermark <= s.log_end_offset
        # Only replicas count, in the ISR or in a change the leader awaits.
        assert s.maximal_isr <= set(s.replicas)
        # Safety: nobody the controller may elect lacks anything below the HWM.
        assert all(self.follower_leo[r] >= s.high_watermark for r in s.maximal_isr - self.dropped if r != 1)
        assert all(self.follower_leo[r] >= s.high_watermark for r in self.controller_isr if r != 1)
        # Progress: enough in sync and every replica at the end: all is committed.
        at_end = all(self.follower_leo[r] == s.log_end_offset for r in s.replicas if r != 1)
        if len(s.isr) >= self._min_isr() and at_end:
            assert s.high_watermark == s.log_end_offset
        assert all(req > s.high_watermark for req in self.waiting.values())
        assert s.waiting == len(self.waiting)


ReassignMachine.TestCase.settings = settings(max_examples=200, stateful_step_count=50, deadline=None)
test_reassignment_machine = ReassignMachine.TestCase


def test_an_added_replica_neither_holds_the_hwm_back_nor_joins_before_catching_up() -> None:
    s = ReplicaState(leader_id=1, replicas=(1, 2), min_insync_replicas=2, replica_lag_time_max_ms=100)
    s.leader_appended(10, 0)
    s.follower_fetch(2, 10, 0)
    assert s.high_watermark == 10
    assert s.replicas_changed((1, 2, 3), (1, 2), 1, 50) == []
    assert s.replicas == (1, 2, 3) and s.isr == {1, 2}
    s.leader_appended(15, 60)
    s.follower_fetch(2, 15, 60)
    assert s.high_watermark == 15  # broker 3, at 0, does not hold it back
    s.follower_fetch(3, 0, 70)  # its first fetch does not count it as caught up
    s.leader_appended(20, 80)
    s.follower_fetch(2, 20, 80)
    assert s.high_watermark == 20
    assert s.isr_proposal(80, expand_for=3) is None
    s.follower_fetch(3, 20, 90)  # at the HWM: it joins on its fetch
    assert s.isr_proposal(90, expand_for=3) == (1, 2, 3)
    s.isr_committed((1, 2, 3), 2)
    # The old replica leaves; the leader forgets it.
    assert s.replicas_changed((1, 3), (1, 3), 3, 100) == []
    assert s.isr == {1, 3} and s.maximal_isr == {1, 3}
    with pytest.raises(ValueError, match="not a follower"):
        s.follower_fetch(2, 20, 110)


def test_a_removal_drops_a_pending_change_and_completes_waiting_acks() -> None:
    s = ReplicaState(leader_id=1, replicas=(1, 2, 3), min_insync_replicas=2, replica_lag_time_max_ms=100)
    s.follower_fetch(3, 0, 0)
    s.leader_appended(5, 10, wait_token=1)
    s.follower_fetch(3, 5, 20)  # 2 lags and holds the HWM back
    assert s.high_watermark == 0
    assert s.isr_proposal(110) == (1, 3)  # 2 lags; the answer is lost
    s.isr_failed(outcome_unknown=True)
    # 2 is removed (partition epoch 1): the HWM no longer waits for it.
    assert s.replicas_changed((1, 3), (1, 3), 1, 120) == [AckResult(5, 1, Errors.NONE)]
    assert s.maximal_isr == {1, 3} and s.high_watermark == 5
    # A stale push changes nothing; a leader outside the replicas is a bug.
    assert s.replicas_changed((1, 2, 3), (1, 2, 3), 0, 220) == [] and s.replicas == (1, 3)
    with pytest.raises(ValueError, match="leader"):
        s.replicas_changed((2, 3), (2, 3), 2, 230)


def test_a_new_leader_does_not_wait_for_a_replica_outside_the_isr() -> None:
    """The leader moved while an added replica was catching up: as in
    Kafka's resetReplicaState, only ISR members count as caught up when the
    leadership starts, so the HWM does not wait for the others' lag time."""
    s = ReplicaState(leader_id=1, replicas=(1, 2, 3), isr={1, 2}, replica_lag_time_max_ms=100, start_ms=1000)
    s.leader_appended(10, 1000)
    s.follower_fetch(2, 10, 1010)
    assert s.high_watermark == 10  # broker 3 (log end 0) is not waited for
    s.follower_fetch(3, 0, 1020)
    s.follower_fetch(3, 10, 1030)  # caught up as of its previous fetch, at the HWM: it joins
    assert s.isr_proposal(1030, expand_for=3) == (1, 2, 3)
