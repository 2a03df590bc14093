"""Which calls a transactional producer allows in which state: Kafka's
client-side ``TransactionManager.State`` and its checks, sans-IO.

States and the calls that move between them (as Kafka's producer):

* UNINITIALIZED --init_transactions--> INITIALIZING --> READY
  (a failed init goes back to UNINITIALIZED and may be called again);
* READY --begin_transaction--> IN_TRANSACTION;
* IN_TRANSACTION --commit_transaction--> COMMITTING --> READY;
* IN_TRANSACTION or ABORTABLE_ERROR --abort_transaction--> ABORTING --> READY;
* a commit or abort that timed out stays COMMITTING / ABORTING and only the
  same call may be made again (Kafka: "retry the same operation");
* a failed send or AddPartitionsToTxn --> ABORTABLE_ERROR: sends and commit
  raise that error, only abort is allowed;
* fencing (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH) and the other fatal
  errors --> FATAL_ERROR: every call raises the error.

A call not allowed in the current state raises
:class:`TransactionStateError` (Kafka's IllegalStateException) and changes
nothing.
"""

from __future__ import annotations

import enum

from partlog.client.producer import ProduceError
from partlog.kafka.errors import Errors

# Errors a transactional producer cannot go on after (Kafka's fatal errors
# for a transactional producer): it must be closed.
FATAL_ERRORS = frozenset(
    {
        Errors.PRODUCER_FENCED,
        Errors.INVALID_PRODUCER_EPOCH,
        Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        Errors.INVALID_TXN_STATE,
        Errors.INVALID_PRODUCER_ID_MAPPING,
        Errors.UNSUPPORTED_VERSION,
        Errors.INVALID_TRANSACTION_TIMEOUT,
    }
)


class TxnState(enum.Enum):
    UNINITIALIZED = "UNINITIALIZED"
    INITIALIZING = "INITIALIZING"
    READY = "READY"
    IN_TRANSACTION = "IN_TRANSACTION"
    COMMITTING = "COMMITTING"
    ABORTING = "ABORTING"
    ABORTABLE_ERROR = "ABORTABLE_ERROR"
    FATAL_ERROR = "FATAL_ERROR"


class TransactionStateError(RuntimeError):
    """A call the producer's state does not allow (Kafka's IllegalStateException)."""


class ProducerFencedError(ProduceError):
    """A newer producer with the same transactional id fenced this one
    (Kafka's ProducerFencedException): close it."""


def txn_error(error: Errors, message: str | None = None) -> ProduceError:
    """The exception a client sees for ``error``."""
    if error in (Errors.PRODUCER_FENCED, Errors.INVALID_PRODUCER_EPOCH):
        return ProducerFencedError(error, message)
    return ProduceError(error, message)


class TxnStates:
    """The state of one transactional producer; see the module doc."""

    def __init__(self) -> None:
        self.state = TxnState.UNINITIALIZED
        # The error of ABORTABLE_ERROR or FATAL_ERROR.
        self.error: ProduceError | None = None

    def _refuse(self, call: str) -> None:
        if self.state == TxnState.FATAL_ERROR:
            assert self.error is not None
            raise self.error
        raise TransactionStateError(f"cannot {call} in state {self.state.name}")

    def init_transactions(self) -> None:
        if self.state != TxnState.UNINITIALIZED:
            self._refuse("init_transactions")
        self.state = TxnState.INITIALIZING

    def begin_transaction(self) -> None:
        if self.state != TxnState.READY:
            self._refuse("begin_transaction")
        self.state = TxnState.IN_TRANSACTION

    def send(self) -> None:
        if self.state == TxnState.ABORTABLE_ERROR:
            assert self.error is not None
            raise self.error
        if self.state != TxnState.IN_TRANSACTION:
            self._refuse("send")

    def commit_transaction(self) -> None:
        if self.state == TxnState.ABORTABLE_ERROR:
            assert self.error is not None
            raise self.error
        if self.state not in (TxnState.IN_TRANSACTION, TxnState.COMMITTING):
            self._refuse("commit_transaction")
        self.state = TxnState.COMMITTING

    def abort_transaction(self) -> None:
        if self.state not in (TxnState.IN_TRANSACTION, TxnState.ABORTABLE_ERROR, TxnState.ABORTING):
            self._refuse("abort_transaction")
        # The abortable error is settled by this abort: it is not kept, so
        # an abort that then fails keeps the error it fails with.
        self.state, self.error = TxnState.ABORTING, None

    def completed(self) -> None:
        """InitProducerId or EndTxn succeeded: READY (an abortable error
        forgotten once its transaction is aborted)."""
        assert self.state in (TxnState.INITIALIZING, TxnState.COMMITTING, TxnState.ABORTING), self.state
        self.state, self.error = TxnState.READY, None

    def init_failed(self) -> None:
        """InitProducerId failed with a retriable error or timed out."""
        assert self.state == TxnState.INITIALIZING, self.state
        self.state = TxnState.UNINITIALIZED

    def failed(self, error: ProduceError) -> None:
        """A send, AddPartitionsToTxn or EndTxn failed with ``error``:
        fatal errors end the producer, others the transaction (first error wins)."""
        if self.state == TxnState.FATAL_ERROR:
            return
        if error.error in FATAL_ERRORS:
            self.state, self.error = TxnState.FATAL_ERROR, error
        elif self.state in (TxnState.IN_TRANSACTION, TxnState.COMMITTING):
            self.state, self.error = TxnState.ABORTABLE_ERROR, error
        elif self.state == TxnState.INITIALIZING:
            self.state, self.error = TxnState.FATAL_ERROR, error


__all__ = [
    "FATAL_ERRORS",
    "ProducerFencedError",
    "TransactionStateError",
    "TxnState",
    "TxnStates",
    "txn_error",
]
