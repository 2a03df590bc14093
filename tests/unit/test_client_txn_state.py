"""The transactional producer's client-side states (partlog.client.txn_state)
against a small model of Kafka's rules: which calls are allowed in which
state, which error each refused call raises, and what failures do; and the
broker RPC's transaction methods on a broker without a Kafka front end;
the coordinator calls' retries, backoff and deadline on a manual clock."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from partlog.broker.txn_rpc import TxnRpc
from partlog.client.producer import ProduceError
from partlog.client.txn_producer import TransactionalProducer, TxnTimeoutError
from partlog.client.txn_state import ProducerFencedError, TransactionStateError, TxnState, TxnStates, txn_error
from partlog.kafka.errors import Errors
from partlog.runtime import ManualClock

S = TxnState
# Model: the states each call is allowed in, and the state it moves to.
ALLOWED = {
    "init_transactions": ({S.UNINITIALIZED}, S.INITIALIZING),
    "begin_transaction": ({S.READY}, S.IN_TRANSACTION),
    "commit_transaction": ({S.IN_TRANSACTION, S.COMMITTING}, S.COMMITTING),
    "abort_transaction": ({S.IN_TRANSACTION, S.ABORTABLE_ERROR, S.ABORTING}, S.ABORTING),
}
ABORTABLE = [Errors.OUT_OF_ORDER_SEQUENCE_NUMBER, Errors.MESSAGE_TOO_LARGE, Errors.TOPIC_AUTHORIZATION_FAILED]
FATAL = [Errors.PRODUCER_FENCED, Errors.INVALID_PRODUCER_EPOCH, Errors.INVALID_TXN_STATE]


class TxnStatesMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.real = TxnStates()
        self.state = S.UNINITIALIZED
        self.error: Errors | None = None

    def _expect_refused(self, call: str) -> None:
        """The model's answer to a refused call: the fatal error, the
        abortable one (send, commit), else a state error; nothing changes."""
        before = self.real.state
        raises_error = self.state == S.FATAL_ERROR or (
            self.state == S.ABORTABLE_ERROR and call in ("send", "commit_transaction")
        )
        if raises_error:
            with pytest.raises(ProduceError) as e:
                getattr(self.real, call)()
            assert e.value.error == self.error
        else:
            with pytest.raises(TransactionStateError):
                getattr(self.real, call)()
        assert self.real.state == before

    @rule(call=st.sampled_from(sorted(ALLOWED)))
    def call(self, call: str) -> None:
        allowed, after = ALLOWED[call]
        if self.state in allowed:
            getattr(self.real, call)()
            self.state = after
        else:
            self._expect_refused(call)

    @rule()
    def send(self) -> None:
        if self.state == S.IN_TRANSACTION:
            self.real.send()
        else:
            self._expect_refused("send")

    @rule()
    def coordinator_answers(self) -> None:
        """InitProducerId or EndTxn succeeded."""
        if self.state in (S.INITIALIZING, S.COMMITTING, S.ABORTING):
            self.real.completed()
            self.state, self.error = S.READY, None

    @rule()
    def init_times_out(self) -> None:
        if self.state == S.INITIALIZING:
            self.real.init_failed()
            self.state = S.UNINITIALIZED

    @rule(error=st.sampled_from(ABORTABLE + FATAL))
    def fails(self, error: Errors) -> None:
        """A record, AddPartitionsToTxn or EndTxn failed with ``error``."""
        self.real.failed(txn_error(error))
        if self.state == S.FATAL_ERROR:
            return
        if error in FATAL:
            self.state, self.error = S.FATAL_ERROR, error
        elif self.state in (S.IN_TRANSACTION, S.COMMITTING):
            self.state, self.error = S.ABORTABLE_ERROR, error
        elif self.state == S.INITIALIZING:
            self.state, self.error = S.FATAL_ERROR, error

    @invariant()
    def same(self) -> None:
        assert self.real.state == self.state
        assert (self.real.error.error if self.real.error is not None else None) == (
            self.error if self.state in (S.ABORTABLE_ERROR, S.FATAL_ERROR) else None
        )
        if self.state == S.FATAL_ERROR and self.error in (Errors.PRODUCER_FENCED, Errors.INVALID_PRODUCER_EPOCH):
            assert isinstance(self.real.error, ProducerFencedError)


TestTxnStates = TxnStatesMachine.TestCase
TestTxnStates.settings = settings(max_examples=200, stateful_step_count=30, deadline=None)


def test_a_broker_without_a_front_end_has_no_coordinator() -> None:
    rpc = TxnRpc()
    base = {"transactional_id": "t", "producer_id": 1, "producer_epoch": 0}

    async def run() -> None:
        init = await rpc.init_producer_id({"transactional_id": "t"})
        assert init == {"error": int(Errors.COORDINATOR_NOT_AVAILABLE), "producer_id": -1, "producer_epoch": -1}
        add = await rpc.add_partitions_to_txn({**base, "partitions": [[b"\1" * 16, 0], [b"\2" * 16, 1]]})
        assert add == {"partitions": [[int(Errors.COORDINATOR_NOT_AVAILABLE)]] * 2}
        assert await rpc.end_txn({**base, "committed": 1}) == {"error": int(Errors.COORDINATOR_NOT_AVAILABLE)}
        # Producer id and epoch: both or neither (Kafka's INVALID_REQUEST).
        half = await rpc.init_producer_id({"transactional_id": "t", "producer_id": 5})
        assert half["error"] == int(Errors.INVALID_REQUEST)

    asyncio.run(run())


class _Scripted(TransactionalProducer):
    """The coordinator's answers scripted, no network."""

    def __init__(self, answers: list[Errors], clock: ManualClock, max_block_ms: int = 10_000) -> None:
        super().__init__(("127.0.0.1", 1), "t", clock=clock, max_block_ms=max_block_ms, retry_backoff_ms=100,
                         retry_backoff_max_ms=400)  # fmt: skip
        self.answers = answers
        self.asked: list[tuple[float, int | None]] = []

    async def _call_once(self, method: str, body: dict[str, Any]) -> tuple[Errors, dict[str, Any]]:
        self.asked.append((self.clock.monotonic(), self._coordinator))
        error = self.answers.pop(0)
        if error in (Errors.NOT_COORDINATOR, Errors.NETWORK_EXCEPTION):
            self._coordinator = None
        elif self._coordinator is None:
            self._coordinator = 7  # what fresh metadata would name
        return error, {"error": int(error)}


@pytest.mark.parametrize(
    "retriable",
    [Errors.CONCURRENT_TRANSACTIONS, Errors.COORDINATOR_LOAD_IN_PROGRESS, Errors.NOT_COORDINATOR],
)
def test_retriable_answers_are_retried_with_growing_backoff(retriable: Errors) -> None:
    clock = ManualClock()
    p = _Scripted([retriable] * 4 + [Errors.NONE], clock)

    async def run() -> None:
        start = clock.monotonic()
        await p._call("end_txn", {})
        waits = [round((t - start) * 1000) for t, _ in p.asked]
        assert waits == [0, 100, 300, 700, 1100]  # 100, 200, 400, then capped at 400

    asyncio.run(run())
    assert p.stats["coordinator_retries"] == 4


def test_no_final_answer_within_max_block_ms_is_a_timeout() -> None:
    clock = ManualClock()
    p = _Scripted([Errors.COORDINATOR_LOAD_IN_PROGRESS] * 100, clock, max_block_ms=1_000)

    async def run() -> None:
        start = clock.monotonic()
        with pytest.raises(TxnTimeoutError) as e:
            await p._call("end_txn", {})
        assert e.value.error == Errors.COORDINATOR_LOAD_IN_PROGRESS
        assert clock.monotonic() - start <= 1.0

    asyncio.run(run())


@pytest.mark.parametrize("fatal", [Errors.PRODUCER_FENCED, Errors.INVALID_PRODUCER_EPOCH, Errors.INVALID_TXN_STATE])
def test_a_final_error_is_raised_at_once(fatal: Errors) -> None:
    p = _Scripted([fatal], ManualClock())
    with pytest.raises(ProduceError) as e:
        asyncio.run(p._call("end_txn", {}))
    assert e.value.error == fatal
    assert isinstance(e.value, ProducerFencedError) == (fatal != Errors.INVALID_TXN_STATE)
    assert len(p.asked) == 1


class _FailingProducer:
    """Stands in for the epoch's Producer: every batch fails at flush, as a
    leader's refusal (INVALID_TXN_STATE from verification) would."""

    def __init__(self) -> None:
        self.futs: list[asyncio.Future[Any]] = []

    def send(self, tp: Any, value: Any, key: Any, ts: int) -> asyncio.Future[Any]:
        f: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.futs.append(f)
        return f

    async def flush(self) -> None:
        for f in self.futs:
            if not f.done():
                f.set_exception(ProduceError(Errors.INVALID_TXN_STATE))


def test_a_record_whose_future_the_caller_cancelled_still_fails_the_commit() -> None:
    """Review finding: a caller that gave up waiting on a record (wait_for
    timing out cancels its future) hid the record's later failure, and
    commit_transaction sent EndTxn(commit) without it."""
    import uuid

    from partlog.kafka.records import TopicIdPartition

    async def main() -> list[bool]:
        p = TransactionalProducer(("127.0.0.1", 1), "t", clock=ManualClock())
        p.states.init_transactions()
        p.states.completed()
        p._producer = _FailingProducer()  # type: ignore[assignment]
        tp = TopicIdPartition(uuid.uuid4(), 0)
        p._added.add(tp)
        p.begin_transaction()
        fut = p.send(tp, b"v")
        fut.cancel()
        ended: list[bool] = []

        async def end(*, commit: bool) -> None:
            ended.append(commit)

        p._end_txn = end  # type: ignore[method-assign]
        with pytest.raises(ProduceError):
            await p.commit_transaction()
        return ended

    assert asyncio.run(main()) == []


def test_an_abort_settles_the_abortable_error() -> None:
    """Found by the state machine above in CI: after an abortable error,
    abort_transaction kept the error while ABORTING."""
    s = TxnStates()
    s.init_transactions()
    s.completed()
    s.begin_transaction()
    s.failed(txn_error(Errors.OUT_OF_ORDER_SEQUENCE_NUMBER))
    s.abort_transaction()
    assert s.state == S.ABORTING and s.error is None
