"""The transactional producer's client-side states (partlog.client.txn_state)
against a small model of Kafka's rules: which calls are allowed in which
state, which error each refused call raises, and what failures do; and the
broker RPC's transaction methods on a broker without a Kafka front end."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from partlog.broker.txn_rpc import TxnRpc
from partlog.client.producer import ProduceError
from partlog.client.txn_state import ProducerFencedError, TransactionStateError, TxnState, TxnStates, txn_error
from partlog.kafka.errors import Errors

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
