"""Transactions on a partlog cluster: Kafka's transaction coordinator.

As in Kafka, a transactional id belongs to one partition of an internal
topic, ``__transaction_state`` (``abs(java_hash(id)) % partitions``), and its
coordinator is that partition's leader; the coordinator epoch written into
markers is that partition's leader epoch.  The state of every id is a record
in that partition, written through the broker's own produce path with
acks=all (:mod:`partlog.txn.log`), so a new coordinator rebuilds it by
replaying the partition before it answers (COORDINATOR_LOAD_IN_PROGRESS
meanwhile).  The rules are the sans-IO :class:`partlog.txn.coordinator.Transactions`;
this shell performs its transitions: write the record, then complete the
transition (or revert it when the write failed).

Markers: once a Prepare* record is durable, the coordinator asks each
partition's leader to append a COMMIT or ABORT marker
(:meth:`BrokerPort.write_txn_markers`), retrying until every marker is
written or this broker stops being the coordinator, then writes Complete*.
A new coordinator that finds Prepare* in the log sends its markers again
(markers are idempotent for the leader).  A timer aborts transactions past
their timeout and removes ids idle for ``transactional.id.expiration.ms``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from partlog.controller.cluster_meta import TopicInfo
from partlog.kafka.errors import Errors
from partlog.kafka.record_batch import build_record_batch, parse_records
from partlog.kafka.records import TopicIdPartition, TxnMarkerRequest
from partlog.kafka_front.group_coordinator import partition_for
from partlog.kafka_front.internal_log import (
    batches,
    coordinator_of,
    ensure_internal_topic,
    internal_topic,
    read_to_end,
)
from partlog.kafka_front.port import BrokerPort
from partlog.txn import log as txn_log
from partlog.txn.coordinator import (
    TRANSACTION_MAX_TIMEOUT_MS_DEFAULT,
    TRANSACTIONAL_ID_EXPIRATION_MS_DEFAULT,
    Transactions,
    Transition,
    TransitionKind,
    TxnMetadata,
)

log = logging.getLogger(__name__)

TXN_STATE_TOPIC = txn_log.TXN_STATE_TOPIC
TXN_STATE_PARTITIONS_DEFAULT = txn_log.TXN_STATE_PARTITIONS_DEFAULT
# Kafka's transaction.state.log.replication.factor is 3.
TXN_STATE_REPLICATION_FACTOR = 3
# How long a request waits for its partition's load before
# COORDINATOR_LOAD_IN_PROGRESS (the client retries).
LOAD_WAIT_MS = 5_000
# Kafka's request.timeout.ms for the coordinator's own appends and markers.
WRITE_TIMEOUT_MS = 5_000
# Between rounds of markers (or of a Complete* write) that did not all
# succeed: Kafka's retry.backoff.ms, growing to this.
RETRY_BACKOFF_MS_MIN = 100
RETRY_BACKOFF_MS_MAX = 2_000
# How long an AddPartitionsToTxn (or AddOffsetsToTxn) waits while the same
# id's previous transaction has its markers and Complete* written, before
# it is answered CONCURRENT_TRANSACTIONS (the client retries; librdkafka
# after 20 ms).  Answered as a retry would be, one round trip earlier.
ADD_HOLD_MS = 1_000
# How often the timer looks for partitions of __transaction_state this
# broker came to lead or lost (Kafka learns it from LeaderAndIsr); it also
# wakes at the nearest timeout (Kafka checks every 10 s,
# transaction.abort.timed.out.transaction.cleanup.interval.ms).
LEADERSHIP_POLL_MS = 1_000
# The steps ``observe_step`` times: a record written (``write_`` and the
# transition's kind: ``write_add``, ``write_end`` the Prepare*, ...), the
# markers of one transaction all written, and Prepare* durable to Complete*
# durable (while the id's next AddPartitionsToTxn is answered
# CONCURRENT_TRANSACTIONS).
STEPS = (*(f"write_{k.value}" for k in TransitionKind), "markers", "prepared_to_complete")
# Marker errors after which this coordinator stops sending: a newer
# coordinator (or producer epoch) took over (Kafka's
# TransactionMarkerRequestCompletionHandler).
_FENCED = frozenset({Errors.INVALID_PRODUCER_EPOCH, Errors.PRODUCER_FENCED, Errors.TRANSACTION_COORDINATOR_FENCED})


@dataclass(slots=True)
class _TxnPartition:
    """One ``__transaction_state`` partition this broker leads."""

    index: int
    tp: TopicIdPartition
    coordinator_epoch: int
    txns: Transactions
    loaded: asyncio.Event
    # Records of the partition that did not decode while loading.
    skipped: int = 0
    # After a timer transition failed to be written: no timer transition
    # before this time (wall ms), so a log that fails fast is not spun on.
    retry_at_ms: int = -1
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    # Per transactional id whose markers and Complete* are being written:
    # set when that ends (written, or given up).
    completing: dict[str, asyncio.Event] = field(default_factory=dict)


class TxnCoordinator:
    """The transaction coordinator of one broker (for the partitions of
    ``__transaction_state`` it leads)."""

    def __init__(
        self,
        broker: BrokerPort,
        *,
        partitions: int = TXN_STATE_PARTITIONS_DEFAULT,
        max_timeout_ms: int = TRANSACTION_MAX_TIMEOUT_MS_DEFAULT,
        expiration_ms: int = TRANSACTIONAL_ID_EXPIRATION_MS_DEFAULT,
    ) -> None:
        self.broker = broker
        self.partitions = partitions
        self.max_timeout_ms = max_timeout_ms
        self.expiration_ms = expiration_ms
        self._parts: dict[int, _TxnPartition] = {}
        self._creating = asyncio.Lock()
        self._spare_pids: list[int] = []
        self._wake = asyncio.Event()
        self._timer: asyncio.Task[None] | None = None
        self._closed = False
        # Counted for the listener's metrics (partlog_kafka_txn_*).
        self.stats = {
            "markers_written": 0,
            "marker_retries": 0,
            "timeouts": 0,
            "expirations": 0,
            "concurrent_transactions": 0,
            "adds_held": 0,
        }
        # ``observe_step(step, seconds)``: the time of one step of a
        # transaction here (see ``STEPS``); the listener points it at its
        # histogram (partlog_kafka_txn_step_seconds).
        self.observe_step: Callable[[str, float], None] = lambda _step, _s: None

    def start(self) -> None:
        if self._timer is None:
            self._timer = asyncio.ensure_future(self._tick_loop())

    async def close(self) -> None:
        self._closed = True
        tasks = [t for p in self._parts.values() for t in p.tasks]
        if self._timer is not None:
            tasks.append(self._timer)
            self._timer = None
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        self._parts.clear()

    # ------------------------------------------------------------ placement

    def _topic(self) -> TopicInfo | None:
        return internal_topic(self.broker, TXN_STATE_TOPIC)

    async def ensure_topic(self) -> TopicInfo | None:
        """``__transaction_state``, created through the controller on first
        use (as Kafka creates it on the first FindCoordinator of key type 1)."""
        return await ensure_internal_topic(
            self.broker, TXN_STATE_TOPIC, self.partitions, TXN_STATE_REPLICATION_FACTOR, self._creating
        )

    async def find_coordinator(self, transactional_id: str) -> tuple[Errors, int]:
        """(error, broker id) of the coordinator of ``transactional_id``."""
        t = await self.ensure_topic()
        return coordinator_of(t, partition_for(transactional_id, t.num_partitions) if t is not None else 0)

    def _is_current(self, part: _TxnPartition) -> bool:
        """This broker still coordinates ``part`` at the epoch it loaded."""
        return (
            not self._closed
            and self._parts.get(part.index) is part
            and self.broker.leader_epoch(part.tp) == part.coordinator_epoch
        )

    async def _partition(self, transactional_id: str) -> tuple[Errors, _TxnPartition | None]:
        """The loaded partition of ``transactional_id`` when this broker
        leads it; else NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS."""
        if not transactional_id:
            return Errors.INVALID_REQUEST, None
        t = self._topic()
        if t is None:
            return Errors.NOT_COORDINATOR, None
        tp = TopicIdPartition(t.topic_id, partition_for(transactional_id, t.num_partitions))
        part = self._claim(tp)
        if part is None:
            # Led here by the metadata, not yet by the replica (at start): Kafka's loading answer.
            p = self.broker.metadata.partition(tp)
            loading = p is not None and p.leader == self.broker.broker_id and not self._closed
            return Errors.COORDINATOR_LOAD_IN_PROGRESS if loading else Errors.NOT_COORDINATOR, None
        if not part.loaded.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(LOAD_WAIT_MS / 1000):
                    await part.loaded.wait()
            if not part.loaded.is_set():
                return Errors.COORDINATOR_LOAD_IN_PROGRESS, None
        if not self._is_current(part):
            return Errors.NOT_COORDINATOR, None
        return Errors.NONE, part

    def _claim(self, tp: TopicIdPartition) -> _TxnPartition | None:
        """``tp``'s state when this broker leads it, its load begun when it
        just became the leader (at a new epoch); None, and the old state
        dropped, when it does not lead it."""
        epoch = self.broker.leader_epoch(tp)
        part = self._parts.get(tp.partition)
        if part is not None and (epoch is None or part.coordinator_epoch != epoch or part.tp != tp):
            self._drop(part)
            part = None
        if epoch is None or self._closed:
            return None
        if part is None:
            txns = Transactions(max_timeout_ms=self.max_timeout_ms, expiration_ms=self.expiration_ms)
            part = _TxnPartition(tp.partition, tp, epoch, txns, asyncio.Event())
            self._parts[tp.partition] = part
            self._spawn(part, self._load(part))
        return part

    def claim_partitions(self) -> None:
        """Load every ``__transaction_state`` partition this broker has come
        to lead and forget those it no longer leads, as Kafka's onElection /
        onResignation: a prepared transaction is finished and an open one
        timed out without waiting for a client to ask."""
        t = self._topic()
        for part in list(self._parts.values()):
            if t is None or part.tp.topic_id != t.topic_id or part.index >= t.num_partitions:
                self._drop(part)
        if t is not None:
            for index in range(t.num_partitions):
                self._claim(TopicIdPartition(t.topic_id, index))

    def _drop(self, part: _TxnPartition) -> None:
        """This broker no longer coordinates ``part``: forget it (its marker
        and write tasks stop; the new coordinator finishes their work)."""
        if self._parts.get(part.index) is part:
            del self._parts[part.index]
        for t in part.tasks:
            t.cancel()
        part.loaded.set()

    def _spawn(self, part: _TxnPartition, coro: Any) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        part.tasks.add(task)
        task.add_done_callback(part.tasks.discard)

    async def _load(self, part: _TxnPartition) -> None:
        def apply(data: bytes, offset: int) -> int:
            for header, batch in batches(data):
                try:
                    records = [(r.key, r.value, r.offset) for r in parse_records(part.tp, batch, offset)]
                except Exception as e:  # undecodable: skipped, as a consumer would fail on it
                    part.skipped += 1
                    log.warning("%s: batch at %d of %s skipped: %s", TXN_STATE_TOPIC, header.base_offset, part.tp, e)
                else:
                    part.skipped += txn_log.replay(part.txns, records)
                offset = max(offset, header.base_offset + header.last_offset_delta + 1)
            return offset

        try:
            await read_to_end(self.broker, part.tp, apply)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("loading transactions from %s failed; the next request tries again", part.tp)
            self._drop(part)
            return
        recovered = part.txns.recover()
        part.loaded.set()
        log.info("transactions loaded from %s: %d ids, %d to complete", part.tp, len(part.txns), len(recovered))
        for t in recovered:
            self._spawn_finish(part, t)
        self._wake.set()

    # -------------------------------------------------------------- writes

    async def _write(self, part: _TxnPartition, transition: Transition) -> Errors:
        """Write ``transition``'s record (acks=all); NONE once it is durable
        and this broker still coordinates the partition (Kafka's
        appendTransactionToLog, with its error translation)."""
        key, value = txn_log.encode(transition.after)
        batch = build_record_batch([(key, value, self.broker.clock.wall_ms())])
        start = self.broker.clock.monotonic()
        try:
            [result] = await self.broker.produce([(part.tp, batch)], acks=-1, timeout_ms=WRITE_TIMEOUT_MS, urgent=True)
            error = _append_error(result.error)
            self.observe_step(f"write_{transition.kind.value}", self.broker.clock.monotonic() - start)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # the broker's produce path failed: as a timeout
            log.warning("writing %s to %s failed: %s", transition.transactional_id, part.tp, e)
            error = Errors.COORDINATOR_NOT_AVAILABLE
        if error == Errors.NONE and not self._is_current(part):
            # Leadership moved while the write was in flight: the new
            # coordinator may have loaded without it (design doc).
            error = Errors.NOT_COORDINATOR
        return error

    async def _perform(self, part: _TxnPartition, transition: Transition) -> Errors:
        """Write ``transition`` and complete it, or revert it; once a
        Prepare* is complete, its markers are sent in the background."""
        error = await self._write(part, transition)
        if not self._is_current(part):
            self._drop(part)  # its state goes with it: the new coordinator has its own
            return Errors.NOT_COORDINATOR
        if error != Errors.NONE:
            part.txns.revert(transition)
            # The id is due again (the timer skipped it while pending).
            self._wake.set()
            return error
        follow = part.txns.complete(transition)
        if follow is not None:
            self._spawn_finish(part, follow)
        self._wake.set()
        return Errors.NONE

    def _spawn_finish(self, part: _TxnPartition, complete: Transition) -> None:
        """Start ``_finish``; until it ends, the id's next AddPartitionsToTxn
        waits for it (``add_partitions``)."""
        done = part.completing[complete.transactional_id] = asyncio.Event()
        self._spawn(part, self._finish(part, complete, done))

    async def _finish(self, part: _TxnPartition, complete: Transition, done: asyncio.Event) -> None:
        """Send the markers of a prepared transaction, then write Complete*;
        both retried until done or this broker stops coordinating."""
        meta = complete.before
        assert meta is not None and complete.kind == TransitionKind.COMPLETE
        try:
            await self._markers_then_complete(part, complete, meta)
        finally:
            if part.completing.get(complete.transactional_id) is done:
                del part.completing[complete.transactional_id]
            done.set()

    async def _markers_then_complete(self, part: _TxnPartition, complete: Transition, meta: TxnMetadata) -> None:
        start = self.broker.clock.monotonic()
        left = set(meta.partitions)
        backoff_ms = RETRY_BACKOFF_MS_MIN
        while left:
            if not self._is_current(part):
                return
            existing = {t.topic_id for t in self.broker.metadata.topics()}
            # A partition of a deleted topic gets no marker (as Kafka: its
            # leader is unknown because the topic is gone).
            left = {tp for tp in left if tp.topic_id in existing}
            todo = sorted(left, key=lambda tp: (tp.topic_id, tp.partition))
            markers = [TxnMarkerRequest(tp, meta.producer_id, meta.producer_epoch, part.coordinator_epoch,
                                        meta.committing) for tp in todo]  # fmt: skip
            if not markers:
                break
            try:
                errors = await self.broker.write_txn_markers(markers, timeout_ms=WRITE_TIMEOUT_MS)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # as a retriable failure of every marker
                log.warning("markers of %s failed: %s", complete.transactional_id, e)
                errors = [Errors.REQUEST_TIMED_OUT] * len(markers)
            for tp, error in zip(todo, errors, strict=True):
                if error == Errors.NONE or error in (Errors.UNSUPPORTED_VERSION, Errors.UNSUPPORTED_FOR_MESSAGE_FORMAT):
                    left.discard(tp)
                    self.stats["markers_written"] += error == Errors.NONE
                elif error in _FENCED:
                    log.warning("markers of %s to %s: %s; a newer coordinator took over",
                                complete.transactional_id, tp, error.name)  # fmt: skip
                    return
            if left:
                self.stats["marker_retries"] += len(left)
                await self.broker.clock.sleep(backoff_ms / 1000)
                backoff_ms = min(backoff_ms * 2, RETRY_BACKOFF_MS_MAX)
        self.observe_step("markers", self.broker.clock.monotonic() - start)
        backoff_ms = RETRY_BACKOFF_MS_MIN
        while self._is_current(part):
            error = await self._write(part, complete)
            if error == Errors.NONE:
                part.txns.complete(complete)
                self.observe_step("prepared_to_complete", self.broker.clock.monotonic() - start)
                self._wake.set()
                return
            log.info("writing %s of %s: %s; retrying", complete.after.state.kafka_name,
                     complete.transactional_id, error.name)  # fmt: skip
            await self.broker.clock.sleep(backoff_ms / 1000)
            backoff_ms = min(backoff_ms * 2, RETRY_BACKOFF_MS_MAX)

    async def _new_producer_id(self) -> None:
        """Keep one producer id at hand for the core's callback (it is
        synchronous; the broker's producer-id block may need a round trip)."""
        if not self._spare_pids:
            pid = await self.broker.init_producer_id()
            if pid is not None:
                self._spare_pids.append(pid)

    def _take_producer_id(self) -> int | None:
        return self._spare_pids.pop() if self._spare_pids else None

    # ------------------------------------------------------------ requests

    async def init_producer_id(
        self, transactional_id: str, timeout_ms: int, expected: tuple[int, int] | None
    ) -> tuple[Errors, int, int]:
        """InitProducerId with a transactional id: (error, producer id, epoch)."""
        error, part = await self._partition(transactional_id)
        if part is None:
            return error, -1, -1
        await self._new_producer_id()
        if not self._is_current(part):
            return Errors.NOT_COORDINATOR, -1, -1
        now = self.broker.clock.wall_ms()
        got = part.txns.init_producer_id(transactional_id, timeout_ms, expected, now, self._take_producer_id)
        if isinstance(got, Errors):
            return got, -1, -1
        error = await self._perform(part, got)
        if error != Errors.NONE:
            return error, -1, -1
        if got.kind == TransitionKind.FENCE:
            # As Kafka: the open transaction is being aborted; the client
            # retries and gets the next epoch once it completes.
            return Errors.CONCURRENT_TRANSACTIONS, -1, -1
        return Errors.NONE, got.after.producer_id, got.after.producer_epoch

    async def add_partitions(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Sequence[TopicIdPartition]
    ) -> Errors:
        """AddPartitionsToTxn (and AddOffsetsToTxn with the group's offsets partition)."""
        error, part = await self._partition(transactional_id)
        if part is None:
            return error
        now = self.broker.clock.wall_ms()
        got = part.txns.add_partitions(transactional_id, producer_id, producer_epoch, partitions, now)
        done = part.completing.get(transactional_id)
        if got == Errors.CONCURRENT_TRANSACTIONS and done is not None:
            # The client's next transaction starts while this one's markers
            # and Complete* are written: wait for them (bounded) rather than
            # have it retry, and answer as its retry would be answered.
            self.stats["adds_held"] += 1
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(ADD_HOLD_MS / 1000):
                    await done.wait()
            if not self._is_current(part):
                return Errors.NOT_COORDINATOR
            now = self.broker.clock.wall_ms()
            got = part.txns.add_partitions(transactional_id, producer_id, producer_epoch, partitions, now)
        if isinstance(got, Errors):
            # CONCURRENT_TRANSACTIONS: the client retries (librdkafka after 20 ms).
            self.stats["concurrent_transactions"] += got == Errors.CONCURRENT_TRANSACTIONS
            return got
        return await self._perform(part, got)

    async def verify(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Sequence[TopicIdPartition]
    ) -> list[Errors]:
        """KIP-890 part 1: a partition leader asks whether ``partitions`` are
        in the open transaction (:meth:`Transactions.verify`); NOT_COORDINATOR
        or COORDINATOR_LOAD_IN_PROGRESS for all when this broker cannot answer."""
        error, part = await self._partition(transactional_id)
        if part is None:
            return [error] * len(partitions)
        return part.txns.verify(transactional_id, producer_id, producer_epoch, partitions)

    def coordinator_broker(self, transactional_id: str) -> int | None:
        """The broker coordinating ``transactional_id`` now (the leader of its
        ``__transaction_state`` partition), None when unknown; creates nothing."""
        t = self._topic()
        if t is None:
            return None
        error, broker_id = coordinator_of(t, partition_for(transactional_id, t.num_partitions))
        return broker_id if error == Errors.NONE else None

    async def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool) -> Errors:
        """EndTxn: NONE once the Prepare* record is durable (the markers follow)."""
        error, part = await self._partition(transactional_id)
        if part is None:
            return error
        now = self.broker.clock.wall_ms()
        got = part.txns.end_txn(transactional_id, producer_id, producer_epoch, commit, now)
        if isinstance(got, Errors):
            return got
        return await self._perform(part, got)

    async def describe(self, transactional_id: str) -> tuple[Errors, TxnMetadata | None]:
        """DescribeTransactions of one id: TRANSACTIONAL_ID_NOT_FOUND when unknown."""
        error, part = await self._partition(transactional_id)
        if part is None:
            return error, None
        meta = part.txns.get(transactional_id)
        if meta is None:
            return Errors.TRANSACTIONAL_ID_NOT_FOUND, None
        return Errors.NONE, meta

    def transactions_here(self) -> tuple[Errors, list[TxnMetadata]]:
        """ListTransactions: every id this broker coordinates;
        COORDINATOR_LOAD_IN_PROGRESS (with those loaded) while a partition loads."""
        error, out = Errors.NONE, list[TxnMetadata]()
        for part in list(self._parts.values()):
            if not self._is_current(part):
                continue
            if not part.loaded.is_set():
                error = Errors.COORDINATOR_LOAD_IN_PROGRESS
                continue
            out.extend(part.txns)
        return error, out

    # --------------------------------------------------------------- timer

    async def _tick_loop(self) -> None:
        nearest: int | None = None
        changed = True
        while True:
            self.claim_partitions()
            if changed:
                # Deadlines are recomputed (a pass over every id) only after
                # a change, not on every leadership poll.
                self._wake.clear()
                due = [(p.txns.next_deadline_ms(), p.retry_at_ms) for p in self._parts.values() if p.loaded.is_set()]
                nearest = min((max(d, retry) for d, retry in due if d is not None), default=None)
                changed = False
            now = self.broker.clock.wall_ms()
            if nearest is not None and now >= nearest:
                self.tick(now)
                changed = True
                await asyncio.sleep(0)  # the transitions started run before the next pass
                continue
            delay_ms = LEADERSHIP_POLL_MS if nearest is None else min(nearest - now, LEADERSHIP_POLL_MS)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay_ms / 1000):
                    await self._wake.wait()
                    changed = True

    def tick(self, now_ms: int) -> None:
        """Abort the transactions past their timeout and expire idle ids
        (Kafka's abortTimedOutTransactions and removeExpiredTransactionalIds)."""
        for part in list(self._parts.values()):
            if not part.loaded.is_set() or not self._is_current(part) or now_ms < part.retry_at_ms:
                continue
            for t in part.txns.timed_out(now_ms):
                self.stats["timeouts"] += 1
                log.info("transaction of %s timed out: aborting it (epoch %d)", t.transactional_id,
                         t.after.producer_epoch)  # fmt: skip
                self._spawn(part, self._background(part, t))
            for t in part.txns.expired(now_ms):
                self.stats["expirations"] += 1
                self._spawn(part, self._background(part, t))

    async def _background(self, part: _TxnPartition, transition: Transition) -> None:
        error = await self._perform(part, transition)
        if error != Errors.NONE:
            part.retry_at_ms = self.broker.clock.wall_ms() + RETRY_BACKOFF_MS_MAX
            log.info("%s of %s not written: %s; the timer tries again in %d ms", transition.kind.value,
                     transition.transactional_id, error.name, RETRY_BACKOFF_MS_MAX)  # fmt: skip


def _append_error(e: Errors) -> Errors:
    """Kafka's translation of the transaction log's append error for the
    client (TransactionStateManager.appendTransactionToLog)."""
    if e == Errors.NONE:
        return e
    if e in (Errors.UNKNOWN_TOPIC_OR_PARTITION, Errors.NOT_ENOUGH_REPLICAS,
             Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND, Errors.REQUEST_TIMED_OUT) or e >= 10_000:  # fmt: skip
        return Errors.COORDINATOR_NOT_AVAILABLE
    if e in (Errors.NOT_LEADER_OR_FOLLOWER, Errors.KAFKA_STORAGE_ERROR):
        return Errors.NOT_COORDINATOR
    if e in (Errors.MESSAGE_TOO_LARGE, Errors.RECORD_LIST_TOO_LARGE):
        return Errors.UNKNOWN_SERVER_ERROR
    return e


__all__ = ["TXN_STATE_PARTITIONS_DEFAULT", "TXN_STATE_TOPIC", "TxnCoordinator"]
