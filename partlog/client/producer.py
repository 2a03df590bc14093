"""The client library's producer: :class:`Producer`, speaking the broker RPC.

Batches are real Kafka v2 record batches (``partlog.kafka.record_batch``), the
bytes a Kafka client sends: the brokers' Kafka front end passes the same
batches through as is.

Producer (idempotent by default, as Kafka's since 3.0):

* records accumulate per partition for ``linger_ms``, then become one batch
  per partition; batches for one broker travel in one produce request;
* a producer in AZ ``z`` sends each partition to its representative in ``z``
  (the ``metadata`` RPC answers it);
* at most ``max_in_flight`` (5) requests per broker, and at most one batch
  per partition per request, so at most 5 batches of a partition are in flight:
  Kafka's idempotence window;
* a retriable error re-sends the SAME batch (same sequence) after
  ``retry_backoff_ms``, until ``delivery_timeout_ms``; the leader's
  duplicate detection makes that exactly-once.  Later batches of the partition
  are held back while an earlier one waits for its retry, so sequences reach
  the leader in order;
* a partition the metadata does not name waits for a view that does, and
  fails after ``topic_missing_ms_max`` (librdkafka's
  ``topic.metadata.propagation.max.ms``) or the delivery timeout;
* a sequenced batch that fails for good bumps the partition's producer epoch
  (KIP-360) before the next batch goes out: the leader never saw that
  batch's sequences, and would refuse the next ones as out of order.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from ssl import SSLContext
from typing import Any

from partlog.client.connections import (
    REQUEST_TIMEOUT_MS_DEFAULT,
    STALE_METADATA,
    ClusterView,
    Connections,
    checked_answer,
)
from partlog.kafka.batch_header import increment_sequence, restamp_producer
from partlog.kafka.errors import Errors
from partlog.kafka.record_batch import build_record_batch
from partlog.kafka.records import TopicIdPartition
from partlog.rpc.client import RpcConnectionError, RpcRemoteError, RpcTimeoutError
from partlog.rpc.wire import WireError, dec_errors, enc_tp
from partlog.runtime import SYSTEM_CLOCK, Clock

log = logging.getLogger(__name__)

# Kafka producer defaults.
MAX_IN_FLIGHT_DEFAULT = 5
DELIVERY_TIMEOUT_MS_DEFAULT = 120_000
# librdkafka's topic.metadata.propagation.max.ms: how long a partition may be
# missing from the metadata (a topic being created, a controller that lost
# its brokers for a moment) before its records fail UNKNOWN_TOPIC_OR_PARTITION.
TOPIC_MISSING_MS_MAX_DEFAULT = 30_000
# Kafka's producer epoch is an int16; a bump past it is refused, not wrapped.
PRODUCER_EPOCH_MAX = 32_767
RETRY_BACKOFF_MS_DEFAULT = 100
# The RPC waits this much longer than the request timeout the broker
# enforces, so the broker's own REQUEST_TIMED_OUT answer arrives first.
RPC_TIMEOUT_MARGIN_MS = 5_000
LINGER_MS_DEFAULT = 5
BATCH_BYTES_MAX_DEFAULT = 1024 * 1024
# Bytes of batches in one produce request: well under the RPC frame limit
# (64 MiB), like Kafka's max.request.size bounds a request.
REQUEST_BYTES_MAX_DEFAULT = 8 * 1024 * 1024


class ProduceError(Exception):
    def __init__(self, error: Errors, message: str | None = None) -> None:
        super().__init__(f"{error.name}: {message}" if message else error.name)
        self.error = error


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    topic_id_partition: TopicIdPartition
    offset: int
    log_append_time: int


@dataclass(slots=True)
class _Batch:
    tp: TopicIdPartition
    data: bytes
    futures: list[asyncio.Future[RecordMetadata]]
    base_sequence: int
    created: float
    attempts: int = 0


@dataclass(slots=True)
class _PartitionState:
    # (key, value, timestamp ms, monotonic send time, future)
    pending: list[tuple[bytes | None, bytes | None, int, float, asyncio.Future[RecordMetadata]]] = field(
        default_factory=list
    )
    pending_bytes: int = 0
    next_sequence: int = 0
    ready: deque[_Batch] = field(default_factory=deque)  # built, in sequence order, not in flight
    inflight: int = 0
    # A batch of ours was acknowledged: the leader knows this producer.
    leader_knows: bool = False
    # The last sequence number an acks=all acknowledgement covered (None: none yet).
    acked_through: int | None = None
    # Added to the producer's epoch in this partition's batches: one per epoch
    # bump after a sequenced batch failed for good (see Producer._bump_epoch).
    epoch_bump: int = 0
    # A sequenced batch failed for good: the leader may never see its
    # sequences, so the next ones would be refused as out of order for ever.
    needs_bump: bool = False
    # Since when (monotonic s) the metadata has not named this partition.
    missing_since: float | None = None


class Producer:
    def __init__(
        self,
        bootstrap: tuple[str, int] | Sequence[tuple[str, int]],
        *,
        az: str | None = None,
        secret: bytes | None = None,
        ssl: SSLContext | None = None,
        idempotent: bool = True,
        acks: int = -1,
        linger_ms: int = LINGER_MS_DEFAULT,
        max_in_flight: int = MAX_IN_FLIGHT_DEFAULT,
        batch_bytes_max: int = BATCH_BYTES_MAX_DEFAULT,
        request_bytes_max: int = REQUEST_BYTES_MAX_DEFAULT,
        delivery_timeout_ms: int = DELIVERY_TIMEOUT_MS_DEFAULT,
        retry_backoff_ms: int = RETRY_BACKOFF_MS_DEFAULT,
        request_timeout_ms: int = REQUEST_TIMEOUT_MS_DEFAULT,
        clock: Clock = SYSTEM_CLOCK,
        transactional: tuple[int, int] | None = None,
        transactional_id: str | None = None,
        topic_missing_ms_max: int = TOPIC_MISSING_MS_MAX_DEFAULT,
    ) -> None:
        if not 1 <= max_in_flight <= 5 and idempotent:
            raise ValueError(f"max_in_flight must be in [1, 5] for an idempotent producer, got {max_in_flight}")
        if acks not in (0, 1, -1):
            raise ValueError(f"acks must be 0, 1 or -1, got {acks}")
        if idempotent and acks != -1:
            # As Kafka: idempotence needs acks=all.
            raise ValueError("an idempotent producer needs acks=-1 (all)")
        if transactional is not None and not idempotent:
            raise ValueError("a transactional producer is idempotent")
        if transactional_id is not None and transactional is None:
            raise ValueError("transactional_id needs transactional=(producer id, epoch)")
        # Record timestamps (wall ms), linger, delivery and request deadlines.
        self.clock = clock
        self.az = az
        self.acks = acks
        self.idempotent = idempotent
        self.linger_ms = linger_ms
        self.max_in_flight = max_in_flight
        self.batch_bytes_max = batch_bytes_max
        self.request_bytes_max = request_bytes_max
        self.delivery_timeout_ms = delivery_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.request_timeout_ms = request_timeout_ms
        self.topic_missing_ms_max = topic_missing_ms_max
        self.conns = Connections(bootstrap, secret=secret, ssl=ssl)
        # A transactional producer's (producer id, epoch), as its transaction
        # coordinator's InitProducerId answered the caller: its batches carry
        # the transactional bit; AddPartitionsToTxn and EndTxn are the caller's.
        self.transactional = transactional is not None
        self.producer_id, self.producer_epoch = transactional if transactional is not None else (-1, -1)
        # Sent with every produce request: the leaders verify the
        # transaction's first batch on each partition with its coordinator.
        self.transactional_id = transactional_id
        self._parts: dict[TopicIdPartition, _PartitionState] = {}
        self._broker_slots: dict[int, asyncio.Semaphore] = {}
        self._wake = asyncio.Event()
        # True while the send loop sleeps with nothing to do (send() wakes it).
        self._idle = False
        self._sender: asyncio.Task[None] | None = None
        self._requests: set[asyncio.Task[None]] = set()
        self._closing = False
        self.stats = {"requests": 0, "batches": 0, "retries": 0, "errors": 0, "epoch_bumps": 0}
        self.latencies_ms: list[float] = []
        self._metadata_stale = False
        self._next_metadata_ms = 0.0

    async def start(self) -> None:
        await self.conns.load_metadata(self.az)
        if self.idempotent and not self.transactional:
            self.producer_id, self.producer_epoch = await self._init_producer_id()
        self._sender = asyncio.ensure_future(self._send_loop())

    async def _init_producer_id(self) -> tuple[int, int]:
        """InitProducerId, retried while the broker answers a retriable error
        (it has no id block yet), up to the request timeout."""
        deadline = self.clock.monotonic() + self.request_timeout_ms / 1000
        while True:
            client = await self.conns._get(self.conns.bootstrap)
            try:
                body = checked_answer(
                    "init_producer_id", await client.call("init_producer_id", {}, timeout_ms=self.request_timeout_ms)
                )
            except WireError as e:
                raise ProduceError(Errors.UNKNOWN_SERVER_ERROR, f"InitProducerId: {e}") from e
            err = dec_errors(body.get("error", 0), "init_producer_id.error")
            if err == Errors.NONE:
                return int(body["producer_id"]), int(body["producer_epoch"])
            if not err.retriable or self.clock.monotonic() > deadline:
                raise ProduceError(err, "InitProducerId failed")
            await asyncio.sleep(0.1)

    @property
    def view(self) -> ClusterView:
        assert self.conns.view is not None, "start() first"
        return self.conns.view

    def send(
        self, tp: TopicIdPartition, value: bytes | None, key: bytes | None = None, timestamp_ms: int | None = None
    ) -> asyncio.Future[RecordMetadata]:
        """Queue one record; the future resolves with its offset once acknowledged."""
        if self._closing:
            raise RuntimeError("producer is closed")
        fut: asyncio.Future[RecordMetadata] = asyncio.get_running_loop().create_future()
        st = self._parts.setdefault(tp, _PartitionState())
        ts = timestamp_ms if timestamp_ms is not None else self.clock.wall_ms()
        st.pending.append((key, value, ts, self.clock.monotonic(), fut))
        st.pending_bytes += len(value or b"") + len(key or b"") + 20
        if st.pending_bytes >= self.batch_bytes_max or self._idle:
            self._wake.set()
        return fut

    async def flush(self) -> None:
        futs = [f for st in self._parts.values() for *_, f in st.pending]
        futs += [f for st in self._parts.values() for b in st.ready for f in b.futures]
        self._wake.set()
        while self._requests or any(st.pending or st.ready or st.inflight for st in self._parts.values()):
            self._wake.set()
            await asyncio.sleep(self.linger_ms / 1000 or 0.001)
        await asyncio.gather(*futs, return_exceptions=True)

    async def close(self) -> None:
        await self.flush()
        self._closing = True
        if self._sender is not None:
            self._sender.cancel()
            await asyncio.gather(self._sender, return_exceptions=True)
        await self.conns.close()

    # ------------------------------------------------------------- sending

    def _build(self, tp: TopicIdPartition, st: _PartitionState) -> None:
        """Close one batch from the partition's pending records.

        Called only when no batch of the partition waits to be sent, so
        records keep accumulating while requests are in flight: under load
        batches grow instead of queueing up (Kafka's accumulator does the
        same)."""
        take, size = 0, 0
        while take < len(st.pending) and (take == 0 or size < self.batch_bytes_max):
            k, v, *_ = st.pending[take]
            size += len(v or b"") + len(k or b"") + 20
            take += 1
        records, st.pending = st.pending[:take], st.pending[take:]
        st.pending_bytes = max(0, st.pending_bytes - size)
        seq = st.next_sequence if self.idempotent else -1
        data = build_record_batch(
            [(k, v, ts) for k, v, ts, _, _ in records],
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch + st.epoch_bump,
            base_sequence=seq,
            transactional=self.transactional,
        )
        if self.idempotent:
            st.next_sequence = increment_sequence(st.next_sequence, len(records))
        # created = the oldest record's send time: delivery timeout and
        # latency count from send(), as a user sees them.
        st.ready.append(_Batch(tp, data, [f for *_, f in records], seq, records[0][3]))

    async def _send_loop(self) -> None:
        # asyncio.timeout, not wait_for: Python 3.11's wait_for can swallow a
        # cancel that races the event, and close() then waits forever.
        while not self._closing:
            # Idle (nothing pending, nothing to send): sleep until a record
            # arrives instead of polling every linger_ms; the first record
            # then starts the linger, as in Kafka's producer.
            idle = not any(st.pending or st.ready for st in self._parts.values())
            self._idle = idle
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(None if idle else self.linger_ms / 1000):
                    await self._wake.wait()
            self._idle = False
            self._wake.clear()
            if idle and not self._closing:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.linger_ms / 1000):
                        await self._wake.wait()  # a full batch ends the linger early
                self._wake.clear()
            await self._refresh_metadata_if_stale()
            for tp, st in self._parts.items():
                if st.pending and not st.ready:
                    self._build(tp, st)
            self._dispatch()

    async def _refresh_metadata_if_stale(self) -> None:
        """After a broker failed or answered "not the leader", reload the
        cluster view (at most once per retry backoff), as Kafka's producer
        requests a metadata update."""
        now = self.clock.monotonic()
        if not self._metadata_stale or now < self._next_metadata_ms / 1000:
            return
        self._next_metadata_ms = (now * 1000) + self.retry_backoff_ms
        try:
            await self.conns.load_metadata(self.az)
            self._metadata_stale = False
        except (RpcConnectionError, RpcTimeoutError, RpcRemoteError, OSError) as e:
            log.info("metadata refresh failed: %s", e)

    def _dispatch(self) -> None:
        """Group ready batches by target broker, one batch per partition per request."""
        by_broker: dict[int, list[_Batch]] = {}
        for tp, st in self._parts.items():
            if st.needs_bump:
                if st.inflight:
                    continue  # the answers in flight decide what the leader has
                self._bump_epoch(st)
            # The head batch waits while any batch of the partition is in
            # flight once it has been retried: order matters more than speed.
            if not st.ready or (st.ready[0].attempts and st.inflight):
                continue
            if st.inflight >= self.max_in_flight:
                continue
            # Until the leader knows this producer, one batch at a time: a
            # leader accepts any sequence from a producer it does not know, so
            # a second batch committed while the first failed (its WAL upload
            # failed, its commit was lost) would leave a gap that the first
            # one's retries could never fill (OUT_OF_ORDER_SEQUENCE_NUMBER).
            # Once it knows us, its sequence check refuses such a batch.
            if self.idempotent and not st.leader_knows and st.inflight:
                continue
            topic = next((n for n, (tid, _) in self.view.topics.items() if tid == tp.topic_id), None)
            meta = None if topic is None else self.view.topics[topic][1].get(tp.partition)
            if meta is None:
                # Not in the metadata: a topic being created, deleted, or a
                # view taken while the controller had lost its brokers.  Wait
                # for a view that names it, as Kafka's producers do, and fail
                # only after topic_missing_ms_max.  Regression (found by the
                # deterministic simulation, seed 11 at PYTHONHASHSEED=84):
                # failing at once on one such view dropped sequenced batches,
                # and the next ones were refused as out of order for ever.
                self._metadata_stale = True
                now = self.clock.monotonic()
                if st.missing_since is None:
                    st.missing_since = now
                if (now - st.missing_since) * 1000 >= self.topic_missing_ms_max:
                    self._fail_ready(st, Errors.UNKNOWN_TOPIC_OR_PARTITION)
                else:
                    self._expire_ready(st)
                continue
            st.missing_since = None
            if meta.target < 0 or meta.target not in self.view.brokers:
                # No leader right now (or its representative is gone): wait
                # for the metadata to name one; delivery.timeout.ms still runs.
                self._metadata_stale = True
                self._expire_ready(st)
                continue
            by_broker.setdefault(meta.target, []).append(st.ready[0])
        for broker, batches in by_broker.items():
            slots = self._broker_slots.setdefault(broker, asyncio.Semaphore(self.max_in_flight))
            if slots.locked():
                continue
            # Bounded request size: the rest waits for the next round.
            size = 0
            taken: list[_Batch] = []
            for b in batches:
                if taken and size + len(b.data) > self.request_bytes_max:
                    break
                size += len(b.data)
                taken.append(b)
                st = self._parts[b.tp]
                st.ready.popleft()
                st.inflight += 1
            task = asyncio.ensure_future(self._request(broker, slots, taken))
            self._requests.add(task)
            task.add_done_callback(self._requests.discard)

    def _fail_ready(self, st: _PartitionState, error: Errors, message: str | None = None) -> None:
        for b in st.ready:
            self._fail_batch(st, b, error, message)
        st.ready.clear()

    def _expire_ready(self, st: _PartitionState) -> None:
        """Fail the waiting batches older than delivery_timeout_ms (Kafka's
        producer expires batches in its accumulator the same way)."""
        now = self.clock.monotonic()
        while st.ready and (now - st.ready[0].created) * 1000 >= self.delivery_timeout_ms:
            b = st.ready.popleft()
            self._fail_batch(st, b, Errors.REQUEST_TIMED_OUT, f"expired: no leader for {self.delivery_timeout_ms} ms")

    def _fail_batch(self, st: _PartitionState, b: _Batch, error: Errors, message: str | None = None) -> None:
        """Fail one batch for good.  A sequenced batch of an idempotent
        producer leaves a gap the leader may never see filled: the
        partition's epoch is bumped before its next batch goes out."""
        self.stats["errors"] += 1
        for f in b.futures:
            if not f.done():
                f.set_exception(ProduceError(error, message))
        if b.base_sequence >= 0 and not self.transactional:
            st.needs_bump = True

    def _bump_epoch(self, st: _PartitionState) -> None:
        """KIP-360's epoch bump of an idempotent producer, for one partition.

        Leaders keep producer state per partition, and a higher epoch starting
        at sequence 0 opens a fresh window (Kafka's checkProducerEpoch), so
        the bump is local and per partition; Kafka's producer bumps one epoch
        for all partitions and re-sequences those that need it.  The batches
        not yet acknowledged are re-sequenced from 0 under the new epoch (as
        ``ProducerBatch.resetProducerState``); one that had been sent may then
        be written twice, as in Kafka's producer.  Called with nothing of the
        partition in flight.
        """
        st.needs_bump = False
        epoch = self.producer_epoch + st.epoch_bump + 1
        if epoch > PRODUCER_EPOCH_MAX:
            # Kafka's producer takes a new producer id here; 32,767 bumps of
            # one partition mean something else is wrong: fail, do not wrap.
            message = "producer epoch exhausted in this partition"
            for *_, f in st.pending:
                if not f.done():
                    f.set_exception(ProduceError(Errors.INVALID_PRODUCER_EPOCH, message))
            st.pending, st.pending_bytes = [], 0
            self._fail_ready(st, Errors.INVALID_PRODUCER_EPOCH, message)
            st.needs_bump = False
            return
        st.epoch_bump += 1
        seq = 0
        for b in st.ready:
            b.data = restamp_producer(b.data, producer_epoch=epoch, base_sequence=seq)
            b.base_sequence = seq
            seq = increment_sequence(seq, len(b.futures))
        st.next_sequence = seq
        st.leader_knows = False
        st.acked_through = None
        self.stats["epoch_bumps"] += 1

    async def _request(self, broker: int, slots: asyncio.Semaphore, batches: list[_Batch]) -> None:
        async with slots:
            self.stats["requests"] += 1
            self.stats["batches"] += len(batches)
            results: list[Any] | None = None
            error = Errors.NETWORK_EXCEPTION
            try:
                client = await self.conns.broker(broker)
                request: dict[str, Any] = {
                    "batches": [[*enc_tp(b.tp), b.data] for b in batches],
                    "timeout_ms": self.request_timeout_ms,
                    "acks": self.acks,
                }
                if self.transactional_id is not None:
                    request["transactional_id"] = self.transactional_id
                body = await client.call("produce", request, timeout_ms=self.request_timeout_ms + RPC_TIMEOUT_MARGIN_MS)
                results = body["results"]
            except RpcTimeoutError:
                error = Errors.REQUEST_TIMED_OUT
                self._metadata_stale = True
            except (RpcConnectionError, OSError):
                await self.conns.drop(broker)
                self._metadata_stale = True
            except RpcRemoteError as e:
                log.warning("produce to broker %d refused: %s", broker, e)
                error = Errors.INVALID_REQUEST
            except Exception:  # anything else fails these batches, never the accounting
                log.exception("produce to broker %d failed", broker)
                error = Errors.UNKNOWN_SERVER_ERROR
            if results is not None and (
                type(results) is not list
                or len(results) != len(batches)
                or not all(type(r) is list and len(r) == 5 for r in results)
            ):
                log.warning("produce to broker %d: malformed answer", broker)
                results, error = None, Errors.UNKNOWN_SERVER_ERROR
            for i, b in enumerate(batches):
                st = self._parts[b.tp]
                st.inflight -= 1
                if results is not None:
                    err_code, base, append_time, _, message = results[i]
                    err = Errors(err_code) if err_code in Errors._value2member_map_ else Errors.UNKNOWN_SERVER_ERROR
                else:
                    err, base, append_time, message = error, -1, -1, None
                if (
                    err == Errors.OUT_OF_ORDER_SEQUENCE_NUMBER
                    and self.idempotent
                    and self.acks == -1
                    and _written_before(b, st.acked_through)
                ):
                    # The leader refuses a retry whose sequence it has passed:
                    # a later batch of ours was acknowledged with acks=all by a
                    # leader that knew us, and a leader takes sequences only in
                    # order, so this batch is in the log before it, committed.
                    # Its first answer was lost (a commit whose reply never came
                    # back to the AZ representative).  As Kafka's producer does
                    # for DUPLICATE_SEQUENCE_NUMBER: success, offset unknown
                    # (-1).  Regression (found by the deterministic
                    # simulation, seed 2): this batch was retried for ever.
                    err, base, append_time = Errors.NONE, -1, -1
                if err == Errors.NONE:
                    st.leader_knows = True
                    if self.idempotent and self.acks == -1 and b.base_sequence >= 0:
                        last = _last_sequence(b)
                        if st.acked_through is None or _seq_after(last, st.acked_through):
                            st.acked_through = last
                    self.latencies_ms.append((self.clock.monotonic() - b.created) * 1000)
                    for j, f in enumerate(b.futures):
                        if not f.done():
                            # acks=0: no offsets known (-1), as Kafka's producer.
                            offset = base + j if base >= 0 else -1
                            f.set_result(RecordMetadata(b.tp, offset, append_time))
                    continue
                retriable = err.retriable or err == Errors.OUT_OF_ORDER_SEQUENCE_NUMBER
                if err in STALE_METADATA:
                    self._metadata_stale = True
                age_ms = (self.clock.monotonic() - b.created) * 1000
                if retriable and age_ms < self.delivery_timeout_ms:
                    self.stats["retries"] += 1
                    b.attempts += 1
                    self._requeue(st, b)
                else:
                    self._fail_batch(st, b, err, message)
            if results is None or any(r[0] != 0 for r in results):
                await asyncio.sleep(self.retry_backoff_ms / 1000)
            self._wake.set()

    def _requeue(self, st: _PartitionState, b: _Batch) -> None:
        # Keep sequence order among batches waiting to be (re)sent.
        st.ready.append(b)
        st.ready = deque(sorted(st.ready, key=lambda x: _seq_key(x.base_sequence, st.next_sequence)))


# Sequence numbers wrap from 2^31-1 to 0 (Kafka's DefaultRecordBatch.incrementSequence).
SEQUENCE_MODULUS = 1 << 31


def _seq_key(seq: int, next_seq: int) -> int:
    """Order of sequences that may have wrapped at 2^31-1, relative to the next one."""
    return (seq - next_seq) % SEQUENCE_MODULUS


def _seq_after(a: int, b: int) -> bool:
    """``a`` comes after ``b`` (within half the sequence space, across a wrap)."""
    return 0 < (a - b) % SEQUENCE_MODULUS < SEQUENCE_MODULUS // 2


def _last_sequence(b: _Batch) -> int:
    """The sequence number of ``b``'s last record (wrapped)."""
    return (b.base_sequence + len(b.futures) - 1) % SEQUENCE_MODULUS


def _written_before(b: _Batch, acked_through: int | None) -> bool:
    """Every sequence of ``b`` is at or before ``acked_through``."""
    if acked_through is None or b.base_sequence < 0:
        return False
    last = _last_sequence(b)
    return last == acked_through or _seq_after(acked_through, last)


__all__ = [
    "BATCH_BYTES_MAX_DEFAULT",
    "DELIVERY_TIMEOUT_MS_DEFAULT",
    "LINGER_MS_DEFAULT",
    "MAX_IN_FLIGHT_DEFAULT",
    "REQUEST_BYTES_MAX_DEFAULT",
    "RETRY_BACKOFF_MS_DEFAULT",
    "RPC_TIMEOUT_MARGIN_MS",
    "SEQUENCE_MODULUS",
    "ProduceError",
    "Producer",
    "RecordMetadata",
]
