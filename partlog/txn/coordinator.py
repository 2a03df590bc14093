"""Kafka's transaction coordinator, sans-IO: the transactions of one
``__transaction_state`` partition.

This is Kafka's ``TransactionMetadata`` state machine and the checks of its
``TransactionCoordinator`` (transaction version 1: the client bumps no epoch
in EndTxn, KIP-890 part 2 is not served).  A transactional id moves through

    Empty -> Ongoing -> PrepareCommit -> CompleteCommit -> Ongoing ...
                     -> PrepareAbort  -> CompleteAbort  -> ...
    Empty / Complete* -> Dead (expired: a tombstone)

Every change is made in two steps, as Kafka's ``prepareTransitionTo`` and
``completeTransitionTo``: a request that changes state returns a
:class:`Transition` (the record to write) and marks the id *pending*; the
shell writes ``transition.after`` to the log (acks=all) and then calls
:meth:`Transactions.complete`, or :meth:`Transactions.revert` when the write
failed.  While a transition is pending, every other request for the id is
answered CONCURRENT_TRANSACTIONS (the client retries).  So the state held
here is exactly the replay of the records written so far (``replay``), which
is how a new coordinator rebuilds it.

When a Prepare* record is durable, :meth:`complete` returns the pending
Complete* transition: the shell sends the markers of the transaction's
partitions, then writes it.  Markers are sent only after the Prepare record is
durable, so a new coordinator that finds Prepare* in the log sends them again
(:meth:`Transactions.recover`).

Time comes in as ``now_ms``; new producer ids from a callback (the shell's
producer-id block).  Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from enum import Enum, IntEnum

from partlog.kafka.errors import Errors
from partlog.kafka.records import TopicIdPartition

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
# Producer epochs are int16s.  Kafka hands a client no epoch >= 32766
# (``isEpochExhausted``) so that it can always fence that client with one
# more bump; an InitProducerId past it gets a new producer id instead.
PRODUCER_EPOCH_MAX = 32767
PRODUCER_EPOCH_EXHAUSTED = PRODUCER_EPOCH_MAX - 1
# Kafka's transaction.max.timeout.ms default: a longer transaction.timeout.ms
# is refused (INVALID_TRANSACTION_TIMEOUT).
TRANSACTION_MAX_TIMEOUT_MS_DEFAULT = 900_000
# Kafka's transactional.id.expiration.ms default (7 days): an id idle this
# long (no transaction open) is removed, with a tombstone in the log.
TRANSACTIONAL_ID_EXPIRATION_MS_DEFAULT = 7 * 24 * 3600 * 1000
# Transactional ids one coordinator partition holds in memory; a new id past
# it is answered COORDINATOR_NOT_AVAILABLE (retriable), so runaway clients
# cost bounded memory (Kafka has no bound).
TRANSACTIONAL_IDS_MAX = 100_000
# Partitions in one transaction (Kafka has none; each is a marker to send and
# 20 bytes of every record of the id).
TXN_PARTITIONS_MAX = 10_000
# Transitions one timer pass starts (timeouts, expirations): the rest wait
# for the next pass.
TRANSITIONS_PER_PASS_MAX = 1_000


class TxnState(IntEnum):
    """Kafka's ``TransactionState``, with its ids (the log stores them)."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """The name DescribeTransactions and ListTransactions answer."""
        return _NAMES[self]

    @classmethod
    def from_kafka_name(cls, name: str) -> TxnState | None:
        return _BY_NAME.get(name)


_NAMES = {
    TxnState.EMPTY: "Empty",
    TxnState.ONGOING: "Ongoing",
    TxnState.PREPARE_COMMIT: "PrepareCommit",
    TxnState.PREPARE_ABORT: "PrepareAbort",
    TxnState.COMPLETE_COMMIT: "CompleteCommit",
    TxnState.COMPLETE_ABORT: "CompleteAbort",
    TxnState.DEAD: "Dead",
    TxnState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
_BY_NAME = {v: k for k, v in _NAMES.items()}

# Kafka's validPreviousStates, checked on every transition.  PrepareEpochFence
# is never written: a fence is written as PrepareAbort with the bumped epoch.
_VALID_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    TxnState.EMPTY: frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT}),
    TxnState.ONGOING: frozenset({TxnState.ONGOING, TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT}),
    TxnState.PREPARE_COMMIT: frozenset({TxnState.ONGOING}),
    TxnState.PREPARE_ABORT: frozenset({TxnState.ONGOING}),
    TxnState.COMPLETE_COMMIT: frozenset({TxnState.PREPARE_COMMIT}),
    TxnState.COMPLETE_ABORT: frozenset({TxnState.PREPARE_ABORT}),
    TxnState.DEAD: frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT}),
}
_IDLE = frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT})


def is_epoch_exhausted(epoch: int) -> bool:
    return epoch >= PRODUCER_EPOCH_EXHAUSTED


@dataclass(frozen=True, slots=True)
class TxnMetadata:
    """One transactional id's state: exactly what one log record holds."""

    transactional_id: str
    producer_id: int
    # The producer id before the last rotation (an InitProducerId retry
    # after an epoch exhaustion names it).
    previous_producer_id: int
    producer_epoch: int
    # The epoch before the last bump by the same producer (KIP-360: a retried
    # InitProducerId names it and gets the current epoch back); -1 after a
    # new producer fenced the old one.
    last_producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicIdPartition]
    # When the first partition was added (-1 when no transaction is open).
    start_ms: int
    last_update_ms: int

    def __post_init__(self) -> None:
        assert self.producer_id >= 0, self
        assert self.state == TxnState.DEAD or 0 <= self.producer_epoch <= PRODUCER_EPOCH_MAX, self
        assert self.state in (TxnState.ONGOING, TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT) or not self.partitions

    @property
    def committing(self) -> bool:
        return self.state in (TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT)


class TransitionKind(Enum):
    """Why a transition was made: the shell answers the request by it."""

    INIT = "init"  # InitProducerId: answer (producer id, epoch) once written
    FENCE = "fence"  # InitProducerId found a transaction open: abort it, answer CONCURRENT_TRANSACTIONS
    ADD = "add"  # AddPartitionsToTxn / AddOffsetsToTxn
    END = "end"  # EndTxn: answer once the Prepare record is written
    TIMEOUT = "timeout"  # the transaction's timeout passed: abort with an epoch bump
    COMPLETE = "complete"  # the markers are written: Complete*
    EXPIRE = "expire"  # transactional.id.expiration.ms passed: a tombstone


@dataclass(frozen=True, slots=True)
class Transition:
    """A prepared change of one id: ``after`` is the record to write
    (state DEAD: a tombstone); ``before`` is None for a new id."""

    kind: TransitionKind
    before: TxnMetadata | None
    after: TxnMetadata

    @property
    def transactional_id(self) -> str:
        return self.after.transactional_id


class Transactions:
    """The transactions of one ``__transaction_state`` partition."""

    def __init__(
        self,
        *,
        max_timeout_ms: int = TRANSACTION_MAX_TIMEOUT_MS_DEFAULT,
        expiration_ms: int = TRANSACTIONAL_ID_EXPIRATION_MS_DEFAULT,
        ids_max: int = TRANSACTIONAL_IDS_MAX,
    ) -> None:
        assert max_timeout_ms > 0 and expiration_ms > 0 and ids_max > 0
        self.max_timeout_ms = max_timeout_ms
        self.expiration_ms = expiration_ms
        self.ids_max = ids_max
        self._txns: dict[str, TxnMetadata] = {}
        self._pending: dict[str, Transition] = {}

    # ------------------------------------------------------------ reading

    def get(self, transactional_id: str) -> TxnMetadata | None:
        return self._txns.get(transactional_id)

    def pending(self, transactional_id: str) -> Transition | None:
        return self._pending.get(transactional_id)

    def __iter__(self) -> Iterator[TxnMetadata]:
        return iter(list(self._txns.values()))

    def __len__(self) -> int:
        return len(self._txns)

    # ----------------------------------------------------------- requests

    def init_producer_id(
        self,
        transactional_id: str,
        timeout_ms: int,
        expected: tuple[int, int] | None,
        now_ms: int,
        new_producer_id: Callable[[], int | None],
    ) -> Errors | Transition:
        """InitProducerId with a transactional id (``expected``: the
        (producer id, epoch) a KIP-360 client names, or None).  A
        :class:`Transition` of kind INIT (answer its producer id and epoch
        once written) or FENCE (an open transaction is aborted first: answer
        CONCURRENT_TRANSACTIONS once written; the client retries), or the
        error to answer.  ``new_producer_id`` is called only when a new id
        is needed; None from it is COORDINATOR_NOT_AVAILABLE."""
        if not transactional_id:
            return Errors.INVALID_REQUEST
        if not 0 < timeout_ms <= self.max_timeout_ms:
            return Errors.INVALID_TRANSACTION_TIMEOUT
        if transactional_id in self._pending:
            return Errors.CONCURRENT_TRANSACTIONS
        meta = self._txns.get(transactional_id)
        if meta is None:
            if len(self._txns) + len(self._pending) >= self.ids_max:
                return Errors.COORDINATOR_NOT_AVAILABLE
            pid = new_producer_id()
            if pid is None:
                return Errors.COORDINATOR_NOT_AVAILABLE
            # As Kafka: a new id starts Empty with no epoch and takes the
            # usual bump to epoch 0 (whatever the client expected).
            after = TxnMetadata(transactional_id, pid, NO_PRODUCER_ID, 0, NO_PRODUCER_EPOCH, timeout_ms,
                                TxnState.EMPTY, frozenset(), -1, now_ms)  # fmt: skip
            return self._prepare(TransitionKind.INIT, None, after)
        if expected is not None and not _valid_producer_id(meta, expected):
            return Errors.PRODUCER_FENCED
        state = meta.state
        if state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            return Errors.CONCURRENT_TRANSACTIONS
        if state == TxnState.ONGOING:
            return self._prepare(TransitionKind.FENCE, meta, _fenced(meta, now_ms))
        assert state in _IDLE, meta
        if is_epoch_exhausted(meta.producer_epoch) and (expected is None or expected[1] == meta.producer_epoch):
            pid = new_producer_id()
            if pid is None:
                return Errors.COORDINATOR_NOT_AVAILABLE
            last = meta.producer_epoch if expected is not None else NO_PRODUCER_EPOCH
            after = replace(meta, producer_id=pid, previous_producer_id=meta.producer_id, producer_epoch=0,
                            last_producer_epoch=last, timeout_ms=timeout_ms, state=TxnState.EMPTY,
                            start_ms=-1, last_update_ms=now_ms)  # fmt: skip
            return self._prepare(TransitionKind.INIT, meta, after)
        # Kafka's prepareIncrementProducerEpoch.
        if expected is None:
            epoch, last = meta.producer_epoch + 1, NO_PRODUCER_EPOCH
        elif meta.producer_epoch == NO_PRODUCER_EPOCH or expected[1] == meta.producer_epoch:
            epoch, last = meta.producer_epoch + 1, meta.producer_epoch
        elif expected[1] == meta.last_producer_epoch:
            # A retry of a bump that succeeded: the same epoch again.
            epoch, last = meta.producer_epoch, meta.last_producer_epoch
        else:
            return Errors.PRODUCER_FENCED
        after = replace(meta, previous_producer_id=meta.producer_id, producer_epoch=epoch, last_producer_epoch=last,
                        timeout_ms=timeout_ms, state=TxnState.EMPTY, start_ms=-1, last_update_ms=now_ms)  # fmt: skip
        return self._prepare(TransitionKind.INIT, meta, after)

    def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicIdPartition],
        now_ms: int,
    ) -> Errors | Transition:
        """AddPartitionsToTxn (and AddOffsetsToTxn, with the group's offsets
        partition): NONE when they are all in the transaction already, the
        error, or the Ongoing transition to write."""
        meta = self._producer(transactional_id, producer_id, producer_epoch)
        if isinstance(meta, Errors):
            return meta
        if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            return Errors.CONCURRENT_TRANSACTIONS
        added = frozenset(partitions)
        if meta.state == TxnState.ONGOING and added <= meta.partitions:
            return Errors.NONE
        together = meta.partitions | added
        if len(together) > TXN_PARTITIONS_MAX:
            return Errors.INVALID_REQUEST
        start_ms = now_ms if meta.state in _IDLE else meta.start_ms
        after = replace(meta, state=TxnState.ONGOING, partitions=together, start_ms=start_ms, last_update_ms=now_ms)
        return self._prepare(TransitionKind.ADD, meta, after)

    def verify(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Sequence[TopicIdPartition]
    ) -> list[Errors]:
        """KIP-890 part 1, a leader's question (Kafka's verify-only
        AddPartitionsToTxn, ``handleVerifyPartitionsInTransaction``): per
        partition NONE when it is in the open transaction of (producer id,
        epoch).  In Kafka's order: INVALID_REQUEST without an id,
        INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED, CONCURRENT_TRANSACTIONS
        in Prepare*; a partition not in the transaction is INVALID_TXN_STATE
        (what Kafka's leader answers clients without TRANSACTION_ABORTABLE).
        A pending transition is not checked, as Kafka: memory holds only
        what is durable, and the leader's guard does the final check."""
        if not transactional_id:
            return [Errors.INVALID_REQUEST] * len(partitions)
        meta = self._txns.get(transactional_id)
        error = Errors.NONE
        if meta is None or meta.producer_id != producer_id:
            error = Errors.INVALID_PRODUCER_ID_MAPPING
        elif meta.producer_epoch != producer_epoch:
            error = Errors.PRODUCER_FENCED
        elif meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            error = Errors.CONCURRENT_TRANSACTIONS
        if error != Errors.NONE or meta is None:
            return [error] * len(partitions)
        return [Errors.NONE if tp in meta.partitions else Errors.INVALID_TXN_STATE for tp in partitions]

    def end_txn(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool, now_ms: int
    ) -> Errors | Transition:
        """EndTxn from the client (TV1: the epoch must be the current one).
        NONE for a retry of an end already complete, the error, or the
        Prepare* transition to write (answer NONE once written)."""
        meta = self._producer(transactional_id, producer_id, producer_epoch)
        if isinstance(meta, Errors):
            return meta
        state = meta.state
        if state == TxnState.ONGOING:
            target = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
            return self._prepare(TransitionKind.END, meta, replace(meta, state=target, last_update_ms=now_ms))
        if state == (TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT):
            return Errors.NONE
        if state == (TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT):
            return Errors.CONCURRENT_TRANSACTIONS
        return Errors.INVALID_TXN_STATE

    def _producer(self, transactional_id: str, producer_id: int, producer_epoch: int) -> Errors | TxnMetadata:
        """The checks AddPartitionsToTxn and EndTxn share, in Kafka's order:
        the id's metadata when the request's producer is its current one."""
        if not transactional_id:
            return Errors.INVALID_REQUEST
        meta = self._txns.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            return Errors.INVALID_PRODUCER_ID_MAPPING
        if meta.producer_epoch != producer_epoch:
            return Errors.PRODUCER_FENCED
        if transactional_id in self._pending:
            return Errors.CONCURRENT_TRANSACTIONS
        return meta

    # ------------------------------------------------------------- timers

    def timed_out(self, now_ms: int) -> list[Transition]:
        """Kafka's abortTimedOutTransactions: every open transaction past its
        timeout is aborted with an epoch bump (fencing its producer), as
        prepared PrepareAbort transitions to write."""
        out: list[Transition] = []
        for meta in list(self._txns.values()):
            if len(out) >= TRANSITIONS_PER_PASS_MAX:
                break
            if (
                meta.state == TxnState.ONGOING
                and meta.transactional_id not in self._pending
                and meta.start_ms + meta.timeout_ms < now_ms
            ):
                out.append(self._prepare(TransitionKind.TIMEOUT, meta, _fenced(meta, now_ms)))
        return out

    def expired(self, now_ms: int) -> list[Transition]:
        """Kafka's removeExpiredTransactionalIds: every id with no open
        transaction, idle for ``expiration_ms``, as a prepared tombstone."""
        out: list[Transition] = []
        for meta in list(self._txns.values()):
            if len(out) >= TRANSITIONS_PER_PASS_MAX:
                break
            if (
                meta.state in _IDLE
                and meta.transactional_id not in self._pending
                and meta.last_update_ms + self.expiration_ms <= now_ms
            ):
                after = replace(meta, state=TxnState.DEAD, partitions=frozenset())
                out.append(self._prepare(TransitionKind.EXPIRE, meta, after))
        return out

    def next_deadline_ms(self) -> int | None:
        """The earliest time :meth:`timed_out` or :meth:`expired` has work."""
        due = None
        for meta in self._txns.values():
            if meta.transactional_id in self._pending:
                continue
            if meta.state == TxnState.ONGOING:
                at = meta.start_ms + meta.timeout_ms + 1
            elif meta.state in _IDLE:
                at = meta.last_update_ms + self.expiration_ms
            else:
                continue
            due = at if due is None else min(due, at)
        return due

    # -------------------------------------------------------- the log side

    def complete(self, transition: Transition) -> Transition | None:
        """``transition`` is durable: apply it.  After a Prepare* record, the
        Complete* transition is returned, already pending: send the markers
        of ``transition.after.partitions``, then write it."""
        tid = transition.transactional_id
        assert self._pending.get(tid) is transition, (tid, transition)
        del self._pending[tid]
        after = transition.after
        if after.state == TxnState.DEAD:
            self._txns.pop(tid, None)
            return None
        self._txns[tid] = after
        if after.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            return self._prepare(TransitionKind.COMPLETE, after, _completed(after))
        return None

    def revert(self, transition: Transition) -> None:
        """The write of ``transition`` failed: the id is as before it."""
        tid = transition.transactional_id
        assert self._pending.get(tid) is transition, (tid, transition)
        assert transition.kind != TransitionKind.COMPLETE, "a Complete* write is retried, never reverted"
        del self._pending[tid]

    def replay(self, transactional_id: str, meta: TxnMetadata | None) -> None:
        """One record of the log, in log order (None: a tombstone)."""
        assert not self._pending, "replay happens before any request"
        if meta is None:
            self._txns.pop(transactional_id, None)
        else:
            assert meta.transactional_id == transactional_id and meta.state != TxnState.DEAD
            self._txns[transactional_id] = meta

    def recover(self) -> list[Transition]:
        """After the replay: every transaction found in Prepare* gets its
        Complete* transition, pending, as after a fresh Prepare write (the
        shell sends its markers again: they may never have been sent)."""
        assert not self._pending
        out: list[Transition] = []
        for meta in list(self._txns.values()):
            if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                out.append(self._prepare(TransitionKind.COMPLETE, meta, _completed(meta)))
        return out

    def _prepare(self, kind: TransitionKind, before: TxnMetadata | None, after: TxnMetadata) -> Transition:
        tid = after.transactional_id
        assert tid not in self._pending, tid
        assert self._txns.get(tid) is before, (tid, before)
        if before is not None:
            assert before.state in _VALID_PREVIOUS[after.state], (before.state, after.state)
        else:
            assert after.state == TxnState.EMPTY and after.producer_epoch == 0
        t = Transition(kind, before, after)
        self._pending[tid] = t
        return t


def _valid_producer_id(meta: TxnMetadata, expected: tuple[int, int]) -> bool:
    """Kafka's isValidProducerId: a client naming its (producer id, epoch)
    is fenced unless the id has no epoch yet, it names the current producer
    id (its epoch is checked next), or it names the previous one with an
    exhausted epoch (a retry of the rotation)."""
    pid, epoch = expected
    return (
        meta.producer_epoch == NO_PRODUCER_EPOCH
        or pid == meta.producer_id
        or (pid == meta.previous_producer_id and is_epoch_exhausted(epoch))
    )


def _fenced(meta: TxnMetadata, now_ms: int) -> TxnMetadata:
    """Kafka's epoch fence: the open transaction aborted with the epoch
    bumped, so its producer's later requests and batches are refused."""
    assert meta.state == TxnState.ONGOING and meta.producer_epoch < PRODUCER_EPOCH_MAX, meta
    return replace(meta, state=TxnState.PREPARE_ABORT, producer_epoch=meta.producer_epoch + 1,
                   last_producer_epoch=NO_PRODUCER_EPOCH, last_update_ms=now_ms)  # fmt: skip


def _completed(meta: TxnMetadata) -> TxnMetadata:
    state = TxnState.COMPLETE_COMMIT if meta.state == TxnState.PREPARE_COMMIT else TxnState.COMPLETE_ABORT
    return replace(meta, state=state, partitions=frozenset())


__all__ = [
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "PRODUCER_EPOCH_MAX",
    "TRANSACTIONAL_ID_EXPIRATION_MS_DEFAULT",
    "TRANSACTION_MAX_TIMEOUT_MS_DEFAULT",
    "Transactions",
    "Transition",
    "TransitionKind",
    "TxnMetadata",
    "TxnState",
    "is_epoch_exhausted",
]
