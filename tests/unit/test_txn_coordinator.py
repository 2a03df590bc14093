"""The transaction coordinator's core against a small reference model.

The model (``_Model``) is Kafka's TransactionCoordinator reduced to what a
client can observe: for each transactional id its producer id and epoch, the
phase of its transaction and the partitions in it, and for each request the
answer.  The machine drives ``partlog.txn.coordinator.Transactions`` with
InitProducerId (fresh, KIP-360 retries, stale clients), AddPartitionsToTxn,
EndTxn, timeouts and expirations; every transition it returns is written to a
fake log or fails, at a moment the machine picks (so requests meet pending
transitions), and a coordinator restart replays the log.  Invariants besides
the model's answers:

* the state held is the replay of the records written (a new coordinator
  rebuilds exactly it), and a restart finds every Prepare* to finish;
* a (producer id, epoch) is handed to a client once, and epochs of one
  producer id only grow;
* a client fenced (a later epoch handed out, or its transaction aborted by a
  timeout) never gets a request through again;
* a transaction's markers name exactly the partitions added to it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from partlog.kafka.errors import Errors
from partlog.kafka.records import TopicIdPartition
from partlog.txn import log as txn_log
from partlog.txn.coordinator import (
    PRODUCER_EPOCH_MAX,
    Transactions,
    Transition,
    TransitionKind,
    TxnMetadata,
    TxnState,
)

IDS = ("a", "b")
TPS = tuple(TopicIdPartition(uuid.UUID(int=t + 1), p) for t in range(2) for p in range(2))
TIMEOUT_MAX_MS = 60_000
EXPIRATION_MS = 200_000

S = TxnState
# Requests from a fenced client, now and then.
STALE = st.sampled_from([False, False, False, True])


@dataclass(frozen=True)
class _Model:
    """What the coordinator should hold for one id."""

    pid: int
    prev_pid: int
    epoch: int
    last_epoch: int
    timeout_ms: int
    state: TxnState
    parts: frozenset[TopicIdPartition]
    start_ms: int
    update_ms: int


def _model_init(
    m: _Model | None, busy: bool, timeout_ms: int, expected: tuple[int, int] | None, now: int, pid: int
) -> tuple[Errors, _Model | None, TransitionKind | None]:
    """Kafka's handleInitProducerId, as a table."""
    if not 0 < timeout_ms <= TIMEOUT_MAX_MS:
        return Errors.INVALID_TRANSACTION_TIMEOUT, None, None
    if busy:
        return Errors.CONCURRENT_TRANSACTIONS, None, None
    if m is None:
        return Errors.NONE, _Model(pid, -1, 0, -1, timeout_ms, S.EMPTY, frozenset(), -1, now), TransitionKind.INIT
    if expected is not None:
        valid = m.epoch == -1 or expected[0] == m.pid or (expected[0] == m.prev_pid and expected[1] >= 32766)
        if not valid:
            return Errors.PRODUCER_FENCED, None, None
    if m.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
        return Errors.CONCURRENT_TRANSACTIONS, None, None
    if m.state == S.ONGOING:
        fenced = replace(m, epoch=m.epoch + 1, last_epoch=-1, state=S.PREPARE_ABORT, update_ms=now)
        return Errors.NONE, fenced, TransitionKind.FENCE
    idle = replace(m, prev_pid=m.pid, timeout_ms=timeout_ms, state=S.EMPTY, parts=frozenset(), start_ms=-1,
                   update_ms=now)  # fmt: skip
    if m.epoch >= 32766 and (expected is None or expected[1] == m.epoch):
        last = m.epoch if expected is not None else -1
        return Errors.NONE, replace(idle, pid=pid, epoch=0, last_epoch=last), TransitionKind.INIT
    if expected is None:
        return Errors.NONE, replace(idle, epoch=m.epoch + 1, last_epoch=-1), TransitionKind.INIT
    if expected[1] == m.epoch:
        return Errors.NONE, replace(idle, epoch=m.epoch + 1, last_epoch=m.epoch), TransitionKind.INIT
    if expected[1] == m.last_epoch:
        return Errors.NONE, idle, TransitionKind.INIT
    return Errors.PRODUCER_FENCED, None, None


def _model_request(m: _Model | None, busy: bool, pid: int, epoch: int) -> Errors | None:
    """The checks AddPartitionsToTxn and EndTxn share, in Kafka's order."""
    if m is None or m.pid != pid:
        return Errors.INVALID_PRODUCER_ID_MAPPING
    if m.epoch != epoch:
        return Errors.PRODUCER_FENCED
    if busy:
        return Errors.CONCURRENT_TRANSACTIONS
    return None


def _as_model(meta: TxnMetadata) -> _Model:
    return _Model(meta.producer_id, meta.previous_producer_id, meta.producer_epoch, meta.last_producer_epoch,
                  meta.timeout_ms, meta.state, meta.partitions, meta.start_ms, meta.last_update_ms)  # fmt: skip


class TxnMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 1_000
        self.txns = self._new_txns()
        self.model: dict[str, _Model] = {}
        # Transitions prepared, not yet written or failed, with the model's
        # state after them.
        self.inflight: dict[str, tuple[Transition, _Model | None]] = {}
        self.log: list[tuple[bytes, bytes | None]] = []
        self.next_pid = 1_000
        # Every (producer id, epoch) a client was given, and by which id.
        self.handed: dict[tuple[int, int], str] = {}
        # The (producer id, epoch) of each id's clients, newest last.
        self.clients: dict[str, list[tuple[int, int]]] = {t: [] for t in IDS}
        # Partitions added in each id's open transaction (for the markers).
        self.added: dict[str, frozenset[TopicIdPartition]] = {}

    @staticmethod
    def _new_txns() -> Transactions:
        return Transactions(max_timeout_ms=TIMEOUT_MAX_MS, expiration_ms=EXPIRATION_MS)

    def _new_pid(self) -> int:
        self.next_pid += 1
        return self.next_pid

    def _prepared(self, t: Transition, want: _Model | None, kind: TransitionKind) -> None:
        assert t.kind == kind, (t, kind)
        tid = t.transactional_id
        if want is not None:
            assert _as_model(t.after) == want, (t.after, want)
        else:
            assert t.after.state == S.DEAD
        if t.after.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            # The markers to send name exactly the partitions added.
            assert t.after.partitions == self.added.get(tid, frozenset()), (t.after, self.added.get(tid))
        self.inflight[tid] = (t, want)

    # ------------------------------------------------------------ requests

    @rule(tid=st.sampled_from(IDS), timeout=st.sampled_from([10_000, 30_000, 30_000, 30_000, 0, 90_000]),
          which=st.sampled_from(["none", "none", "newest", "newest", "older", "bogus"]))  # fmt: skip
    def init_producer_id(self, tid: str, timeout: int, which: str) -> None:
        mine = self.clients[tid]
        expected: tuple[int, int] | None = None
        if which == "newest" and mine:
            expected = mine[-1]
        elif which == "older" and len(mine) >= 2:
            expected = mine[-2]
        elif which == "bogus":
            expected = (7, 3)
        m = self.model.get(tid)
        pid_before = self.next_pid
        got = self.txns.init_producer_id(tid, timeout, expected, self.now, self._new_pid)
        used_pid = self.next_pid if self.next_pid != pid_before else self.next_pid + 1
        error, want, kind = _model_init(m, tid in self.inflight, timeout, expected, self.now, used_pid)
        if error != Errors.NONE:
            assert got == error, (got, error)
            return
        assert isinstance(got, Transition) and kind is not None, got
        self._prepared(got, want, kind)

    @rule(tid=st.sampled_from(IDS), stale=STALE, parts=st.sets(st.sampled_from(TPS), min_size=1))
    def add_partitions(self, tid: str, stale: bool, parts: set[TopicIdPartition]) -> None:
        mine = self.clients[tid]
        if not mine or (stale and len(mine) < 2):
            return
        pid, epoch = mine[-2] if stale else mine[-1]
        m = self.model.get(tid)
        got = self.txns.add_partitions(tid, pid, epoch, parts, self.now)
        error = _model_request(m, tid in self.inflight, pid, epoch)
        if error is None:
            assert m is not None
            if m.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                error = Errors.CONCURRENT_TRANSACTIONS
            elif m.state == S.ONGOING and parts <= m.parts:
                error = Errors.NONE
        if error is not None:
            assert got == error, (got, error)
            return
        assert m is not None and isinstance(got, Transition), got
        start = m.start_ms if m.state == S.ONGOING else self.now
        want = replace(m, state=S.ONGOING, parts=m.parts | parts, start_ms=start, update_ms=self.now)
        self._prepared(got, want, TransitionKind.ADD)

    @rule(tid=st.sampled_from(IDS), stale=STALE, commit=st.booleans())
    def end_txn(self, tid: str, stale: bool, commit: bool) -> None:
        mine = self.clients[tid]
        if not mine or (stale and len(mine) < 2):
            return
        pid, epoch = mine[-2] if stale else mine[-1]
        m = self.model.get(tid)
        got = self.txns.end_txn(tid, pid, epoch, commit, self.now)
        error = _model_request(m, tid in self.inflight, pid, epoch)
        if error is None:
            assert m is not None
            prepare, complete = (S.PREPARE_COMMIT, S.COMPLETE_COMMIT) if commit else (S.PREPARE_ABORT, S.COMPLETE_ABORT)
            if m.state == S.ONGOING:
                assert isinstance(got, Transition), got
                self._prepared(got, replace(m, state=prepare, update_ms=self.now), TransitionKind.END)
                return
            answers = {complete: Errors.NONE, prepare: Errors.CONCURRENT_TRANSACTIONS}
            error = answers.get(m.state, Errors.INVALID_TXN_STATE)
        assert got == error, (got, error)

    # --------------------------------------------------------------- time

    @rule(ms=st.sampled_from([1, 1_000, 1_000, 1_000, 5_000, 5_000, 40_000, 250_000]))
    def advance(self, ms: int) -> None:
        self.now += ms

    @rule()
    def timer(self) -> None:
        self._abort_timed_out()
        self._expire()

    def _abort_timed_out(self) -> None:
        got = {t.transactional_id: t for t in self.txns.timed_out(self.now)}
        due = {tid for tid, m in self.model.items()
               if m.state == S.ONGOING and tid not in self.inflight
               and m.start_ms + m.timeout_ms < self.now}  # fmt: skip
        assert set(got) == due, (set(got), due)
        for tid, t in got.items():
            m = self.model[tid]
            want = replace(m, epoch=m.epoch + 1, last_epoch=-1, state=S.PREPARE_ABORT, update_ms=self.now)
            self._prepared(t, want, TransitionKind.TIMEOUT)

    def _expire(self) -> None:
        got = {t.transactional_id: t for t in self.txns.expired(self.now)}
        due = {tid for tid, m in self.model.items()
               if m.state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT) and tid not in self.inflight
               and m.update_ms + EXPIRATION_MS <= self.now}  # fmt: skip
        assert set(got) == due, (set(got), due)
        for t in got.values():
            self._prepared(t, None, TransitionKind.EXPIRE)

    # ---------------------------------------------------------- the log

    @precondition(lambda self: bool(self.inflight))
    @rule(data=st.data(), ok=st.sampled_from([True, True, True, False]))
    def finish_write(self, data: st.DataObject, ok: bool) -> None:
        tid = data.draw(st.sampled_from(sorted(self.inflight)))
        t, want = self.inflight.pop(tid)
        if not ok and t.kind != TransitionKind.COMPLETE:
            self.txns.revert(t)
            return
        self.log.append(txn_log.encode(t.after))
        follow = self.txns.complete(t)
        if want is None:
            self.model.pop(tid, None)
        else:
            self.model[tid] = want
        if t.kind == TransitionKind.INIT:
            handed = (t.after.producer_id, t.after.producer_epoch)
            owner = self.handed.setdefault(handed, tid)
            assert owner == tid, (handed, owner, tid)
            mine = self.clients[tid]
            if not mine or mine[-1] != handed:  # a KIP-360 retry gets the same epoch back
                if mine and mine[-1][0] == handed[0]:
                    assert handed[1] > mine[-1][1], (mine, handed)
                mine.append(handed)
            self.added[tid] = frozenset()
        elif t.kind == TransitionKind.ADD:
            self.added[tid] = t.after.partitions
        elif t.kind in (TransitionKind.FENCE, TransitionKind.TIMEOUT):
            # The producer of the aborted transaction is fenced: a newer epoch.
            self.clients[tid].append((t.after.producer_id, t.after.producer_epoch))
        elif t.kind == TransitionKind.EXPIRE:
            self.clients[tid].append((-2, -2))  # whoever held the id is unknown now
        if t.after.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            assert follow is not None and follow.kind == TransitionKind.COMPLETE
            done = S.COMPLETE_COMMIT if t.after.state == S.PREPARE_COMMIT else S.COMPLETE_ABORT
            assert want is not None
            self._prepared(follow, replace(want, state=done, parts=frozenset()), TransitionKind.COMPLETE)
            self.added.pop(tid, None)
        else:
            assert follow is None

    @rule()
    def restart(self) -> None:
        """A new coordinator: what was in flight is lost, the log replayed."""
        self.inflight.clear()
        self.txns = self._new_txns()
        skipped = txn_log.replay(self.txns, ((k, v, i) for i, (k, v) in enumerate(self.log)))
        assert skipped == 0
        for t in self.txns.recover():
            m = self.model[t.transactional_id]
            done = S.COMPLETE_COMMIT if m.state == S.PREPARE_COMMIT else S.COMPLETE_ABORT
            self._prepared(t, replace(m, state=done, parts=frozenset()), TransitionKind.COMPLETE)

    # -------------------------------------------------------- invariants

    @invariant()
    def state_is_the_models(self) -> None:
        held = {m.transactional_id: _as_model(m) for m in self.txns}
        assert held == self.model, (held, self.model)
        for tid, (t, _) in self.inflight.items():
            assert self.txns.pending(tid) is t

    @invariant()
    def state_is_the_replay_of_the_log(self) -> None:
        fresh = self._new_txns()
        txn_log.replay(fresh, ((k, v, i) for i, (k, v) in enumerate(self.log)))
        assert {m.transactional_id: m for m in fresh} == {m.transactional_id: m for m in self.txns}

    @invariant()
    def fenced_clients_get_nothing_through(self) -> None:
        for tid, mine in self.clients.items():
            for pid, epoch in mine[:-1]:
                for got in (self.txns.add_partitions(tid, pid, epoch, TPS[:1], self.now),
                            self.txns.end_txn(tid, pid, epoch, True, self.now)):  # fmt: skip
                    assert got in (Errors.PRODUCER_FENCED, Errors.INVALID_PRODUCER_ID_MAPPING), (tid, pid, epoch, got)


TxnMachine.TestCase.settings = settings(max_examples=400, stateful_step_count=80, deadline=None)
TestTxnCoordinator = TxnMachine.TestCase


# ------------------------------------------------------------ edge cases


def _meta(tid: str = "t", **kw: object) -> TxnMetadata:
    base = TxnMetadata(tid, 5, -1, 0, -1, 10_000, S.EMPTY, frozenset(), -1, 0)
    return replace(base, **kw)  # type: ignore[arg-type]


def _write(txns: Transactions, got: Errors | Transition) -> TxnMetadata:
    assert isinstance(got, Transition), got
    txns.complete(got)
    return got.after


def test_epoch_exhaustion_rotates_the_producer_id() -> None:
    txns = Transactions()
    txns.replay("t", _meta(producer_epoch=32765))
    pids = iter([77, 78])
    after = _write(txns, txns.init_producer_id("t", 10_000, None, 1, lambda: next(pids)))
    assert (after.producer_id, after.producer_epoch) == (5, 32766)
    after = _write(txns, txns.init_producer_id("t", 10_000, (5, 32766), 2, lambda: next(pids)))
    assert (after.producer_id, after.producer_epoch, after.previous_producer_id) == (77, 0, 5)
    assert after.last_producer_epoch == 32766
    # A retry of that rotation (the answer was lost) gets the same id and epoch.
    after = _write(txns, txns.init_producer_id("t", 10_000, (5, 32766), 3, lambda: next(pids)))
    assert (after.producer_id, after.producer_epoch) == (77, 0)


def test_fencing_an_open_transaction_at_the_last_epoch() -> None:
    txns = Transactions()
    tp = TPS[0]
    txns.replay("t", _meta(producer_epoch=32766, state=S.ONGOING, partitions=frozenset({tp}), start_ms=1))
    got = txns.init_producer_id("t", 10_000, None, 2, lambda: 9)
    assert isinstance(got, Transition) and got.kind == TransitionKind.FENCE
    assert got.after.producer_epoch == PRODUCER_EPOCH_MAX and got.after.state == S.PREPARE_ABORT
    complete = txns.complete(got)
    assert complete is not None
    txns.complete(complete)
    after = _write(txns, txns.init_producer_id("t", 10_000, None, 3, lambda: 9))
    assert (after.producer_id, after.producer_epoch) == (9, 0)


def test_no_producer_id_to_be_had_is_retriable() -> None:
    txns = Transactions()
    assert txns.init_producer_id("t", 10_000, None, 1, lambda: None) == Errors.COORDINATOR_NOT_AVAILABLE
    assert txns.get("t") is None and txns.pending("t") is None


def test_empty_transactional_id_is_invalid() -> None:
    txns = Transactions()
    assert txns.init_producer_id("", 10_000, None, 1, lambda: 1) == Errors.INVALID_REQUEST
    assert txns.add_partitions("", 1, 0, TPS, 1) == Errors.INVALID_REQUEST
    assert txns.end_txn("", 1, 0, True, 1) == Errors.INVALID_REQUEST


def test_ids_beyond_the_bound_are_refused() -> None:
    txns = Transactions(ids_max=1)
    _write(txns, txns.init_producer_id("a", 10_000, None, 1, lambda: 1))
    assert txns.init_producer_id("b", 10_000, None, 1, lambda: 2) == Errors.COORDINATOR_NOT_AVAILABLE


def test_records_round_trip_and_hostile_ones_are_skipped() -> None:
    meta = _meta(state=S.ONGOING, partitions=frozenset(TPS), start_ms=3, last_update_ms=4, previous_producer_id=2)
    key, value = txn_log.encode(meta)
    assert txn_log.decode_key(key) == "t" and txn_log.decode_value("t", value) == meta
    assert txn_log.encode(replace(meta, state=S.DEAD, partitions=frozenset()))[1] is None
    empty = txn_log.encode_value(replace(meta, state=S.EMPTY, partitions=frozenset()))
    assert value is not None and empty is not None
    txns = Transactions()
    bad = [
        (b"\xc1", value),
        (key, b"\xc1"),
        (key, value[:-1]),
        (txn_log.encode_key(""), value),
        (key, empty[:-1]),
    ]
    assert txn_log.replay(txns, [(k, v, i) for i, (k, v) in enumerate(bad)] + [(key, value, 9)]) == len(bad)
    assert txns.get("t") == meta
    assert txn_log.replay(txns, [(key, None, 10)]) == 0
    assert txns.get("t") is None
