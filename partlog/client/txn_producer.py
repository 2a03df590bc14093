"""The client library's transactional producer: :class:`TransactionalProducer`,
Kafka's transactional ``KafkaProducer`` on the broker RPC.

A class of its own rather than a mode of :class:`Producer`: its calls
(``init_transactions``, ``begin``/``commit``/``abort_transaction``) and the
states that allow them (:mod:`partlog.client.txn_state`) are a different API;
it sends its records through a :class:`Producer` made for each producer
epoch (``transactional=(id, epoch)``, ``transactional_id=``), so batching,
retries and sequences are the idempotent producer's.

The transaction coordinator of a transactional id is the leader of its
``__transaction_state`` partition (``partition_for(id, partitions)``), found
in metadata; before the topic exists (it is created by the first
InitProducerId) any broker is asked.  Every coordinator call
(``init_producer_id`` with the id, ``add_partitions_to_txn``, ``end_txn``)
is retried with growing backoff (``retry_backoff_ms`` to
``retry_backoff_max_ms``) while the answer is retriable
(:data:`RETRIABLE`), looking the coordinator up again after
NOT_COORDINATOR or a lost connection, until ``max_block_ms`` (Kafka's
``max.block.ms``) has passed: then :class:`TxnTimeoutError`, and the same
call may be made again.

Each partition joins the transaction (AddPartitionsToTxn) before its first
record is handed to the inner producer: records sent to a partition not yet
added wait, in order, for the add (partitions are added together when they
come while one add is in flight).  Commit waits for every record of the
transaction; a failed record or add makes the transaction abortable only
(its error is raised by send and commit), fencing ends the producer
(:class:`ProducerFencedError`).  An abort after records failed bumps the
producer's epoch (KIP-360) so that the next transaction starts with fresh
sequences.  Time comes from the ``clock`` (deadlines and backoff).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from ssl import SSLContext
from typing import Any

from partlog.client.connections import REQUEST_TIMEOUT_MS_DEFAULT, Connections, checked_answer
from partlog.client.producer import (
    DELIVERY_TIMEOUT_MS_DEFAULT,
    LINGER_MS_DEFAULT,
    ProduceError,
    Producer,
    RecordMetadata,
)
from partlog.client.txn_state import TxnState, TxnStates, txn_error
from partlog.kafka.coordinator_key import partition_for
from partlog.kafka.errors import Errors
from partlog.kafka.records import TopicIdPartition
from partlog.rpc.client import RpcClient, RpcConnectionError, RpcRemoteError, RpcTimeoutError
from partlog.rpc.wire import WireError, dec_errors, enc_tp
from partlog.runtime import SYSTEM_CLOCK, Clock
from partlog.txn.log import TXN_STATE_TOPIC

log = logging.getLogger(__name__)

# Kafka's producer defaults: transaction.timeout.ms, max.block.ms (bounds
# init_transactions, commit and abort), retry.backoff.ms and
# retry.backoff.max.ms.
TRANSACTION_TIMEOUT_MS_DEFAULT = 60_000
MAX_BLOCK_MS_DEFAULT = 60_000
RETRY_BACKOFF_MS_DEFAULT = 100
RETRY_BACKOFF_MAX_MS_DEFAULT = 1_000
# Coordinator answers worth asking again (after a backoff).
RETRIABLE = frozenset(
    {
        Errors.CONCURRENT_TRANSACTIONS,
        Errors.COORDINATOR_LOAD_IN_PROGRESS,
        Errors.NOT_COORDINATOR,
        Errors.COORDINATOR_NOT_AVAILABLE,
        Errors.NETWORK_EXCEPTION,
        Errors.REQUEST_TIMED_OUT,
    }
)
# After these the coordinator is looked up again in fresh metadata.
_RELOCATE = frozenset({Errors.NOT_COORDINATOR, Errors.COORDINATOR_NOT_AVAILABLE, Errors.NETWORK_EXCEPTION})


class TxnTimeoutError(ProduceError):
    """The coordinator gave no final answer within ``max_block_ms``
    (Kafka's TimeoutException): the same call may be made again."""


class TransactionalProducer:
    def __init__(
        self,
        bootstrap: tuple[str, int] | Sequence[tuple[str, int]],
        transactional_id: str,
        *,
        az: str | None = None,
        secret: bytes | None = None,
        ssl: SSLContext | None = None,
        transaction_timeout_ms: int = TRANSACTION_TIMEOUT_MS_DEFAULT,
        max_block_ms: int = MAX_BLOCK_MS_DEFAULT,
        retry_backoff_ms: int = RETRY_BACKOFF_MS_DEFAULT,
        retry_backoff_max_ms: int = RETRY_BACKOFF_MAX_MS_DEFAULT,
        linger_ms: int = LINGER_MS_DEFAULT,
        delivery_timeout_ms: int = DELIVERY_TIMEOUT_MS_DEFAULT,
        request_timeout_ms: int = REQUEST_TIMEOUT_MS_DEFAULT,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        if not transactional_id:
            raise ValueError("a transactional producer needs a non-empty transactional_id")
        if not 0 < retry_backoff_ms <= retry_backoff_max_ms:
            raise ValueError("need 0 < retry_backoff_ms <= retry_backoff_max_ms")
        if transaction_timeout_ms <= 0 or max_block_ms <= 0:
            raise ValueError("transaction_timeout_ms and max_block_ms must be positive")
        self.transactional_id = transactional_id
        self.az = az
        self.secret, self.ssl = secret, ssl
        self.transaction_timeout_ms = transaction_timeout_ms
        self.max_block_ms = max_block_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.retry_backoff_max_ms = retry_backoff_max_ms
        self.linger_ms = linger_ms
        self.delivery_timeout_ms = delivery_timeout_ms
        self.request_timeout_ms = request_timeout_ms
        self.clock = clock
        self.conns = Connections(bootstrap, secret=secret, ssl=ssl)
        self.states = TxnStates()
        self.producer_id, self.producer_epoch = -1, -1
        self._producer: Producer | None = None
        self._coordinator: int | None = None
        # The open transaction: partitions added, records waiting for their
        # partition's add (in send order), every record's future.
        self._added: set[TopicIdPartition] = set()
        self._held: dict[TopicIdPartition, list[tuple[bytes | None, bytes | None, int, asyncio.Future[Any]]]] = {}
        self._adder: asyncio.Task[None] | None = None
        self._records: list[asyncio.Future[RecordMetadata]] = []
        # Records failed in this transaction: its abort bumps the epoch.
        self._records_failed = False
        self.stats = {"coordinator_calls": 0, "coordinator_retries": 0, "relocations": 0}

    # ---------------------------------------------------------- the API

    async def init_transactions(self) -> None:
        """Get the producer id and epoch from the coordinator (fencing any
        older producer of this id and ending its open transaction)."""
        self.states.init_transactions()
        try:
            await self.conns.load_metadata(self.az)
            await self._init_producer_id(None)
        except ProduceError as e:
            if isinstance(e, TxnTimeoutError) or e.error in RETRIABLE:
                self.states.init_failed()
            else:
                self.states.failed(e)
            raise
        except BaseException:
            self.states.init_failed()
            raise
        self.states.completed()

    def begin_transaction(self) -> None:
        self.states.begin_transaction()

    def send(
        self, tp: TopicIdPartition, value: bytes | None, key: bytes | None = None, timestamp_ms: int | None = None
    ) -> asyncio.Future[RecordMetadata]:
        """Queue one record in the open transaction (as :meth:`Producer.send`)."""
        self.states.send()
        assert self._producer is not None
        ts = timestamp_ms if timestamp_ms is not None else self.clock.wall_ms()
        loop = asyncio.get_running_loop()
        # The record's outcome is tracked on a future the caller never holds:
        # a caller that cancels its own (a wait_for that timed out) must not
        # hide a failure from commit_transaction.
        tracked: asyncio.Future[RecordMetadata]
        if tp in self._added:
            tracked = self._producer.send(tp, value, key, ts)
        else:
            tracked = loop.create_future()
            self._held.setdefault(tp, []).append((key, value, ts, tracked))
            if self._adder is None or self._adder.done():
                self._adder = asyncio.ensure_future(self._add_held())
        tracked.add_done_callback(self._record_done)
        self._records.append(tracked)
        outer: asyncio.Future[RecordMetadata] = loop.create_future()
        _chain(tracked, outer)
        return outer

    async def commit_transaction(self) -> None:
        """Wait for every record of the transaction, then commit it (EndTxn)."""
        self.states.commit_transaction()
        await self._drain()
        failed = next((f.exception() for f in self._records if not f.cancelled() and f.exception() is not None), None)
        if failed is not None:
            # _record_done moved the state to ABORTABLE_ERROR or FATAL_ERROR.
            raise self.states.error or failed
        if self._added:
            await self._end_txn(commit=True)
        self._new_transaction()
        self.states.completed()

    async def abort_transaction(self) -> None:
        """Wait for the records in flight, then abort the transaction."""
        self.states.abort_transaction()
        await self._drain()
        self._raise_if_fatal()
        if self._added:
            await self._end_txn(commit=False)
        if self._records_failed:
            # Sequences of failed batches are unknown to us now: a new epoch
            # starts them again (KIP-360; the coordinator bumps it).
            try:
                await self._init_producer_id((self.producer_id, self.producer_epoch))
            except ProduceError as e:
                if not isinstance(e, TxnTimeoutError):
                    self.states.failed(e)
                raise
        self._new_transaction()
        self.states.completed()

    async def close(self) -> None:
        """Abort an open transaction (best effort, as Kafka's close), stop."""
        if self.states.state in (TxnState.IN_TRANSACTION, TxnState.ABORTABLE_ERROR):
            try:
                await self.abort_transaction()
            except (ProduceError, RpcConnectionError, OSError) as e:
                log.info("%s: abort on close failed: %s", self.transactional_id, e)
        if self._adder is not None:
            self._adder.cancel()
            await asyncio.gather(self._adder, return_exceptions=True)
        if self._producer is not None:
            await self._producer.close()
        await self.conns.close()

    def _raise_if_fatal(self) -> None:
        if self.states.state == TxnState.FATAL_ERROR:
            assert self.states.error is not None
            raise self.states.error

    # ---------------------------------------------------------- records

    def _record_done(self, fut: asyncio.Future[Any]) -> None:
        if fut.cancelled() or fut.exception() is None:
            return
        e = fut.exception()
        self._records_failed = True
        if isinstance(e, ProduceError):
            self.states.failed(txn_error(e.error, str(e)))

    async def _add_held(self) -> None:
        """AddPartitionsToTxn for the partitions with held records, then
        hand their records to the producer; again for those held meanwhile."""
        while self._held:
            tps = list(self._held)
            try:
                await self._add_partitions(tps)
            except ProduceError as e:
                for tp in tps:
                    for *_, f in self._held.pop(tp):
                        if not f.done():
                            f.set_exception(e)
                return
            assert self._producer is not None
            self._added.update(tps)
            for tp in tps:
                for key, value, ts, outer in self._held.pop(tp):
                    _chain(self._producer.send(tp, value, key, ts), outer)

    async def _drain(self) -> None:
        """Every add done and every record of the transaction answered."""
        if self._adder is not None:
            await asyncio.gather(self._adder, return_exceptions=True)
        if self._producer is not None:
            await self._producer.flush()
        await asyncio.gather(*self._records, return_exceptions=True)

    def _new_transaction(self) -> None:
        self._added.clear()
        self._records.clear()
        self._records_failed = False

    # ------------------------------------------------------- coordinator

    async def _init_producer_id(self, expected: tuple[int, int] | None) -> None:
        body: dict[str, Any] = {
            "transactional_id": self.transactional_id,
            "transaction_timeout_ms": self.transaction_timeout_ms,
        }
        if expected is not None:
            body["producer_id"], body["producer_epoch"] = expected
        answer = await self._call("init_producer_id", body)
        pid, epoch = int(answer["producer_id"]), int(answer["producer_epoch"])
        if self._producer is not None:
            await self._producer.close()
        self.producer_id, self.producer_epoch = pid, epoch
        self._producer = Producer(
            self.conns.bootstraps,
            az=self.az,
            secret=self.secret,
            ssl=self.ssl,
            linger_ms=self.linger_ms,
            delivery_timeout_ms=self.delivery_timeout_ms,
            request_timeout_ms=self.request_timeout_ms,
            retry_backoff_ms=self.retry_backoff_ms,
            clock=self.clock,
            transactional=(pid, epoch),
            transactional_id=self.transactional_id,
        )
        await self._producer.start()

    async def _add_partitions(self, tps: list[TopicIdPartition]) -> None:
        body = {
            "transactional_id": self.transactional_id,
            "producer_id": self.producer_id,
            "producer_epoch": self.producer_epoch,
            "partitions": [enc_tp(tp) for tp in tps],
        }
        await self._call("add_partitions_to_txn", body)

    async def _end_txn(self, *, commit: bool) -> None:
        body = {
            "transactional_id": self.transactional_id,
            "producer_id": self.producer_id,
            "producer_epoch": self.producer_epoch,
            "committed": int(commit),
        }
        try:
            await self._call("end_txn", body)
        except ProduceError as e:
            if not isinstance(e, TxnTimeoutError):
                self.states.failed(e)
            raise

    async def _call(self, method: str, body: dict[str, Any]) -> dict[str, Any]:
        """``method`` answered by the coordinator: retried while retriable,
        until ``max_block_ms``; the answer, or the error raised."""
        deadline = self.clock.monotonic() + self.max_block_ms / 1000
        backoff_ms = self.retry_backoff_ms
        while True:
            self.stats["coordinator_calls"] += 1
            error, answer = await self._call_once(method, body)
            if error == Errors.NONE:
                return answer
            if error not in RETRIABLE:
                raise txn_error(error, f"{method} of {self.transactional_id!r}")
            if error in _RELOCATE:
                self._coordinator = None
            if self.clock.monotonic() + backoff_ms / 1000 > deadline:
                what = f"{method} of {self.transactional_id!r}: no answer in {self.max_block_ms} ms"
                raise TxnTimeoutError(error, what)
            self.stats["coordinator_retries"] += 1
            await self.clock.sleep(backoff_ms / 1000)
            backoff_ms = min(backoff_ms * 2, self.retry_backoff_max_ms)

    async def _call_once(self, method: str, body: dict[str, Any]) -> tuple[Errors, dict[str, Any]]:
        broker: int | None = None
        try:
            broker = await self._find_coordinator()
            client = await (self.conns.broker(broker) if broker is not None else self._any_broker())
            got = await client.call(method, body, timeout_ms=self.request_timeout_ms)
            answer = checked_answer(method, got)
            if method == "add_partitions_to_txn":
                errors = [dec_errors(row[0], method) for row in answer["partitions"]]
                if len(errors) != len(body["partitions"]):
                    raise WireError(f"{method}: {len(errors)} answers for {len(body['partitions'])} partitions")
                # As Kafka's producer: the error that is not "not attempted".
                error = next((e for e in errors if e not in (Errors.NONE, Errors.OPERATION_NOT_ATTEMPTED)), Errors.NONE)
            else:
                error = dec_errors(answer["error"], method)
            return error, answer
        except RpcTimeoutError:
            return Errors.REQUEST_TIMED_OUT, {}
        except (RpcConnectionError, OSError) as e:
            log.info("%s to broker %s failed: %s", method, broker, e)
            if broker is not None:
                await self.conns.drop(broker)
            return Errors.NETWORK_EXCEPTION, {}
        except (RpcRemoteError, WireError) as e:
            raise ProduceError(Errors.UNKNOWN_SERVER_ERROR, f"{method}: {e}") from e

    async def _find_coordinator(self) -> int | None:
        """The coordinator's broker id from fresh metadata (cached until it
        answers NOT_COORDINATOR); None while ``__transaction_state`` has no
        leader for the id, or does not exist yet."""
        if self._coordinator is not None:
            return self._coordinator
        self.stats["relocations"] += 1
        view = await self.conns.load_metadata(self.az)
        topic = view.topics.get(TXN_STATE_TOPIC)
        if topic is None or not topic[1]:
            return None
        meta = topic[1].get(partition_for(self.transactional_id, len(topic[1])))
        if meta is None or meta.leader < 0 or meta.leader not in view.brokers:
            return None
        self._coordinator = meta.leader
        return meta.leader

    async def _any_broker(self) -> RpcClient:
        return await self.conns._get(self.conns.bootstrap)


def _chain(inner: asyncio.Future[RecordMetadata], outer: asyncio.Future[Any]) -> None:
    def copy(f: asyncio.Future[RecordMetadata]) -> None:
        if outer.done():
            return
        if f.cancelled():
            outer.cancel()
            return
        error = f.exception()
        if error is not None:
            outer.set_exception(error)
        else:
            outer.set_result(f.result())

    inner.add_done_callback(copy)


__all__ = [
    "MAX_BLOCK_MS_DEFAULT",
    "RETRIABLE",
    "RETRY_BACKOFF_MAX_MS_DEFAULT",
    "RETRY_BACKOFF_MS_DEFAULT",
    "TRANSACTION_TIMEOUT_MS_DEFAULT",
    "TransactionalProducer",
    "TxnTimeoutError",
]
