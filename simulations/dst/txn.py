"""The simulation's transactional workload: transactional producers, the
transaction coordinator's stand-in that decides and sends their markers,
and a read_committed reader, on the partition leaders' real transaction
state (the store's ongoing transactions, LSO and aborted index).

* :class:`SimTxnCoordinator`: Kafka's decisions by the real sans-IO core
  (:class:`partlog.txn.coordinator.Transactions`: InitProducerId with its
  epoch bump and fence, AddPartitionsToTxn, EndTxn, timeouts), its records
  kept in memory instead of ``__transaction_state`` (durable by fiat: the
  Kafka front end, where the real shell runs, is not simulated).  It lives
  on one broker: the markers go through that broker's
  ``Broker.write_txn_markers`` as its node, retried until every marker is
  written, as the real coordinator does.  A crash of that broker is a
  coordinator crash: the next live broker takes over with the coordinator
  epoch + 1, replays the records and sends the markers of every
  transaction found prepared again (``Transactions.recover``).
* Transactional producers (``t<az><i>``, transactional id the same): the
  real ``Producer`` with ``transactional=(producer id, epoch)``, one
  transaction at a time over 1-4 partitions, then commit or abort.  A
  producer restart (the fault) abandons the transaction mid-way; the new
  incarnation's InitProducerId fences it (abort markers with the epoch
  bumped), and a batch of the fenced epoch is then sent again to a
  partition of the fenced transaction: its leader must refuse it.
* A read_committed ``Consumer`` reads every partition from the leaders
  while the run goes on; :meth:`TxnWorkload.read_replicas` reads every
  replica (leader or follower) with READ_COMMITTED fetches at the end.

What must hold is judged in :mod:`simulations.dst.invariants`; the ledger
(:class:`TxnLedger`) says what each transaction wrote and how it ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import random
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from partlog import injected_bugs
from partlog.broker.server import Broker
from partlog.client import Consumer, CorruptRecordError, Producer, RecordMetadata
from partlog.kafka.batch_header import BatchHeader
from partlog.kafka.errors import Errors
from partlog.kafka.record_batch import build_record_batch, read_records
from partlog.kafka.records import FindBatchRequest, IsolationLevel, TopicIdPartition, TxnMarkerRequest
from partlog.txn.coordinator import Transactions, Transition, TransitionKind, TxnMetadata, TxnState
from simulations.dst.cluster import Cluster
from simulations.dst.config import Shape
from simulations.dst.journal import Journal
from simulations.dst.runtime import run_node
from simulations.dst.workload import Ledger

# The coordinator's marker retries: Kafka's backoff, as the real shell's.
MARKER_BACKOFF_S = (0.1, 2.0)
MARKER_TIMEOUT_MS = 3_000
# Answers to a marker that only a newer coordinator or producer epoch
# explains: in the simulation nobody is newer than the stand-in.
_FENCED = frozenset({Errors.INVALID_PRODUCER_EPOCH, Errors.PRODUCER_FENCED, Errors.TRANSACTION_COORDINATOR_FENCED})
# The leader's answers to a batch of a fenced producer epoch.
FENCED_BATCH_ERRORS = frozenset({Errors.INVALID_PRODUCER_EPOCH, Errors.PRODUCER_FENCED})
# Of the transactions, those that also write to a transformer's input
# partition (simulations/dst/ctp.py), when there are transformers.
INPUT_SHARE = 0.6
# Bytes of one READ_COMMITTED fetch of a replica at the end.
READ_BYTES = 1 << 20


@dataclass
class Txn:
    """One transaction: what it wrote, and the coordinator's decision."""

    key: str  # its records' value prefix: "<transactional id>.<incarnation>.<n>"
    transactional_id: str
    producer_id: int
    producer_epoch: int
    partitions: frozenset[TopicIdPartition]
    # value -> partition, as sent; value -> offset, as acknowledged (-1: unknown).
    sent: dict[bytes, TopicIdPartition] = field(default_factory=dict)
    acked: dict[bytes, int] = field(default_factory=dict)
    # "commit" or "abort" once the coordinator's Prepare* is written.
    outcome: str | None = None


@dataclass
class TxnLedger:
    """The transactions of the run, by value prefix, and the open one per id."""

    txns: dict[str, Txn] = field(default_factory=dict)
    open: dict[str, Txn] = field(default_factory=dict)
    read_committed: int = 0  # records the read_committed reader was given
    fenced_batches_refused: int = 0
    markers_written: int = 0

    def txn_of(self, value: bytes) -> Txn | None:
        return self.txns.get(value.split(b":", 1)[0].decode(errors="replace"))


async def _as_node(node: str, coro: Coroutine[Any, Any, Any]) -> tuple[bool, Any]:
    """Run ``coro`` as a task of ``node`` (a broker's call runs in that
    broker's process); (False, None) when the node crashed meanwhile."""
    task = run_node(node, coro)
    await asyncio.wait([task])
    if task.cancelled():
        return False, None
    exc = task.exception()
    return (False, exc) if exc is not None else (True, task.result())


class SimTxnCoordinator:
    """The transaction coordinator's stand-in (module doc)."""

    def __init__(self, cluster: Cluster, journal: Journal, ledger: TxnLedger, timeout_ms: int) -> None:
        self.cluster = cluster
        self.journal = journal
        self.ledger = ledger
        self.timeout_ms = timeout_ms
        self.core = Transactions()
        # The records of __transaction_state, in order (None: a tombstone).
        self.records: list[tuple[str, TxnMetadata | None]] = []
        self.host_id = -1
        self.host: Broker | None = None
        self.coordinator_epoch = -1
        # Transactional id -> the task sending its markers (on the host's node).
        self.finishing: dict[str, asyncio.Task[None]] = {}
        # Faults (simulations/dst/faults.py): crash the host once the first
        # marker of the next decided transaction is written (the call
        # crashes it), and lose the next marker calls ("request": never
        # sent; "answer": written, the answer lost).
        self.crash_at_markers: Callable[[int], Coroutine[Any, Any, None]] | None = None
        self.lose_markers: list[str] = []

    def _live_host(self) -> Broker | None:
        """The host broker; a new one (a coordinator failover) when it
        crashed; None while no broker is up."""
        b = self.cluster.brokers.get(self.host_id)
        if b is not None and b is self.host and not b.store._closed:
            return b
        alive = sorted(bid for bid, x in self.cluster.brokers.items() if not x.store._closed)
        if not alive:
            return None
        new = next((bid for bid in alive if bid > self.host_id), alive[0])
        moved = self.host is not None
        self.host_id, self.host = new, self.cluster.brokers[new]
        self.coordinator_epoch += 1
        if moved:
            # The old host's state is gone with it: a new core replays the
            # records, and finishes what was prepared.
            self.journal.event(f"txn coordinator on broker {new}, epoch {self.coordinator_epoch}")
            for task in self.finishing.values():
                task.cancel()
            self.finishing.clear()
            self.core = Transactions()
            for tid, meta in self.records:
                self.core.replay(tid, meta)
            for complete in self.core.recover():
                self._finish(complete)
        return self.host

    def _now_ms(self, host: Broker) -> int:
        return host.clock.wall_ms()

    def _write(self, t: Transition) -> None:
        """The transition's record is durable (here: at once); apply it.
        With the injected bug ``txn_markers_before_prepare`` a Prepare*
        record is written only once its markers are (a coordinator that
        crashes meanwhile leaves no trace of the decision)."""
        after = t.after
        record = (t.transactional_id, None if after.state == TxnState.DEAD else after)
        prepare = after.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)
        late = prepare and injected_bugs.on("txn_markers_before_prepare")
        if not late:
            self.records.append(record)
        follow = self.core.complete(t)
        if prepare:
            txn = self.ledger.open.pop(t.transactional_id, None)
            if txn is not None:
                txn.outcome = "commit" if after.state == TxnState.PREPARE_COMMIT else "abort"
        if follow is not None:
            self._finish(follow, record if late else None)

    def _finish(self, complete: Transition, late: tuple[str, TxnMetadata | None] | None = None) -> None:
        assert self.host is not None
        tid = complete.transactional_id
        self.finishing[tid] = run_node(
            f"b{self.host_id}", self._send_markers(self.host, self.coordinator_epoch, complete, late)
        )

    async def _send_markers(
        self,
        host: Broker,
        coordinator_epoch: int,
        complete: Transition,
        late: tuple[str, TxnMetadata | None] | None,
    ) -> None:
        """Every marker of a prepared transaction, retried until written;
        then Complete* (``late``: the Prepare* record, first).  Runs as the
        host's node: its crash ends it."""
        meta = complete.before
        assert meta is not None and complete.kind == TransitionKind.COMPLETE
        left = sorted(meta.partitions, key=lambda tp: (str(tp.topic_id), tp.partition))
        backoff_s = MARKER_BACKOFF_S[0]
        crash, self.crash_at_markers = self.crash_at_markers, None
        while left:
            # The crash fault: the first marker alone, then the host crashes
            # (the rest unsent), as between two leaders' WriteTxnMarkers.
            sending = left[:1] if crash is not None else left
            markers = [
                TxnMarkerRequest(tp, meta.producer_id, meta.producer_epoch, coordinator_epoch, meta.committing)
                for tp in sending
            ]
            errors = await self._marker_call(host, markers)
            if crash is not None:
                # The crash cancels this task, unless it did not happen (the faults stopped).
                await asyncio.wait([run_node("world", crash(self.host_id))])
                crash = None
            still = [tp for tp in left if tp not in sending]
            for tp, error in zip(sending, errors, strict=True):
                if error == Errors.NONE:
                    self.ledger.markers_written += 1
                    continue
                if error in _FENCED:
                    self.journal.violated(
                        f"{tp}: the marker of {complete.transactional_id} (producer {meta.producer_id} epoch "
                        f"{meta.producer_epoch}, coordinator epoch {coordinator_epoch}) refused: {error.name}"
                    )
                still.append(tp)
            left = still
            if left:
                await asyncio.sleep(backoff_s)
                backoff_s = min(backoff_s * 2, MARKER_BACKOFF_S[1])
        if coordinator_epoch != self.coordinator_epoch:
            return  # a failover took over (this task is being cancelled)
        if late is not None:
            self.records.append(late)
        self._write(complete)
        self.finishing.pop(complete.transactional_id, None)

    async def _marker_call(self, host: Broker, markers: list[TxnMarkerRequest]) -> list[Errors]:
        """One WriteTxnMarkers call of the host: per marker its error (a
        lost request or answer, the fault: REQUEST_TIMED_OUT for each)."""
        lost = self.lose_markers.pop(0) if self.lose_markers else None
        if lost is not None:
            self.journal.count("txn_markers_lost", f"{lost} of {len(markers)} markers")
        if lost == "request":
            await asyncio.sleep(MARKER_TIMEOUT_MS / 1000)
            return [Errors.REQUEST_TIMED_OUT] * len(markers)
        try:
            errors = await host.write_txn_markers(markers, timeout_ms=MARKER_TIMEOUT_MS)
        except Exception:  # as the real shell: a retriable failure of every marker
            errors = [Errors.REQUEST_TIMED_OUT] * len(markers)
        return errors if lost is None else [Errors.REQUEST_TIMED_OUT] * len(markers)

    async def _retry(self, call: Callable[[Broker], Errors | Transition]) -> Errors | Transition:
        """``call`` on the live coordinator until it is not
        CONCURRENT_TRANSACTIONS (a transition completing: the client retries)."""
        while True:
            host = self._live_host()
            if host is not None:
                result = call(host)
                if result not in (Errors.CONCURRENT_TRANSACTIONS, Errors.COORDINATOR_NOT_AVAILABLE):
                    return result
            await asyncio.sleep(0.1)

    async def init_producer_id(self, tid: str) -> tuple[int, int]:
        """InitProducerId for a producer that knows no id (a new incarnation):
        an open transaction of the id is fenced first."""
        pid: int | None = None
        while True:
            host = self._live_host()
            if host is None:
                await asyncio.sleep(0.2)
                continue
            if pid is None and self.core.get(tid) is None:
                # A new id: from the host's producer-id block (the real RPC path).
                ok, got = await _as_node(f"b{self.host_id}", host.init_producer_id())
                pid = got if ok and isinstance(got, int) else None
                if pid is None:
                    await asyncio.sleep(0.2)
                continue
            new_id = functools.partial(_given, pid)
            result = self.core.init_producer_id(tid, self.timeout_ms, None, self._now_ms(host), new_id)
            if result in (Errors.CONCURRENT_TRANSACTIONS, Errors.COORDINATOR_NOT_AVAILABLE):
                if result == Errors.COORDINATOR_NOT_AVAILABLE:
                    pid = None
                await asyncio.sleep(0.1)
                continue
            if isinstance(result, Errors):
                self.journal.violated(f"InitProducerId {tid}: {result.name}")
            self._write(result)
            if result.kind == TransitionKind.INIT:
                return result.after.producer_id, result.after.producer_epoch
            # A fence: its abort markers go first; the retry gets CONCURRENT_TRANSACTIONS meanwhile.
            await asyncio.sleep(0.1)

    async def add_partitions(self, tid: str, pid: int, epoch: int, tps: frozenset[TopicIdPartition]) -> Errors:
        result = await self._retry(lambda h: self.core.add_partitions(tid, pid, epoch, tps, self._now_ms(h)))
        if isinstance(result, Errors):
            return result
        self._write(result)
        return Errors.NONE

    async def end_txn(self, tid: str, pid: int, epoch: int, commit: bool) -> Errors:
        result = await self._retry(lambda h: self.core.end_txn(tid, pid, epoch, commit, self._now_ms(h)))
        if isinstance(result, Errors):
            return result
        self._write(result)
        return Errors.NONE

    async def run_timer(self) -> None:
        """Kafka's abort of timed-out transactions (with an epoch bump), and
        a failover noticed within a second of the host's crash."""
        while True:
            await asyncio.sleep(1.0)
            host = self._live_host()
            if host is not None:
                for t in self.core.timed_out(self._now_ms(host)):
                    self._write(t)

    def busy(self) -> bool:
        """Markers still to send, or a transaction still open."""
        return bool(self.finishing) or any(m.state == TxnState.ONGOING for m in self.core)


class TxnWorkload:
    """The transactional producers and the read_committed reader of ``shape``."""

    def __init__(
        self,
        seed: int,
        shape: Shape,
        cluster: Cluster,
        journal: Journal,
        ledger: Ledger,
        restarts: dict[str, asyncio.Event],
        producing: Callable[[], bool],
    ) -> None:
        self.seed = seed
        self.shape = shape
        self.cluster = cluster
        self.journal = journal
        self.main = ledger
        self.restarts = restarts
        self.producing = producing
        self.ledger = TxnLedger()
        self.coordinator = SimTxnCoordinator(cluster, journal, self.ledger, shape.txn_timeout_ms)
        self.reader_stop = False
        # Per producer: the next sequence of each partition when its last
        # incarnation ended (a late batch of it continues there).
        self.last_sequences: dict[str, dict[TopicIdPartition, int]] = {}
        # The consume-transform-produce topics' partitions (simulations/dst/ctp.py,
        # set before start): the producers write into the inputs too, the
        # reader and the checks read them all.
        self.inputs: list[TopicIdPartition] = []
        self.extra: list[TopicIdPartition] = []

    @property
    def partitions(self) -> list[TopicIdPartition]:
        """Every partition transactions write to."""
        return self.cluster.partitions + self.extra

    def start(self, on_read: Callable[[TopicIdPartition, int, bytes], None]) -> list[asyncio.Task[Any]]:
        """The producers (returned: the world waits for them), the
        coordinator's timer and the reader (ended with the run)."""
        run_node("txc", self.coordinator.run_timer())
        run_node("rc-reader", self._read_committed(on_read))
        azs = sorted(set(self.cluster.az_of.values()))
        out = []
        for i in range(self.shape.txn_producers):
            az = azs[i % len(azs)]
            out.append(run_node(f"p-{az}-txn{i}", self._produce(f"t{az}{i}", az)))
        return out

    async def _produce(self, name: str, az: str) -> None:
        self.main.kind_of[name] = "transactional"
        rng = random.Random(f"{self.seed}/txn/{name}")
        restart = self.restarts.setdefault(name, asyncio.Event())
        incarnation = 0
        while self.producing():
            restart.clear()
            await self._incarnation(name, az, rng, incarnation, restart)
            incarnation += 1

    async def _incarnation(
        self, name: str, az: str, rng: random.Random, incarnation: int, restart: asyncio.Event
    ) -> None:
        """One producer process: InitProducerId (fencing the last one's open
        transaction), then transactions until a restart or the end."""
        fenced = self.ledger.open.get(name)
        pid, epoch = await self.coordinator.init_producer_id(name)
        if fenced is not None and fenced.outcome == "abort":
            await self._send_fenced_batch(fenced, self.last_sequences.get(name, {}))
        producer = await start_producer(self.cluster, az, pid, epoch)
        interval = 1.0 / self.shape.rate_per_txn_producer
        n = 0
        try:
            while self.producing() and not restart.is_set():
                k = rng.randint(1, min(4, len(self.cluster.partitions)))
                tps = frozenset(rng.sample(self.cluster.partitions, k))
                if self.inputs and rng.random() < INPUT_SHARE:
                    tps |= {rng.choice(self.inputs)}
                records = rng.randint(*self.shape.txn_records)
                commit = rng.random() >= self.shape.txn_abort_share
                if await self.coordinator.add_partitions(name, pid, epoch, tps) != Errors.NONE:
                    return  # fenced (timed out): a new incarnation
                txn = Txn(f"{name}.{incarnation}.{n}", name, pid, epoch, tps)
                n += 1
                self.ledger.txns[txn.key] = txn
                self.ledger.open[name] = txn
                futs = []
                order = sorted(tps, key=lambda tp: tp.partition)
                for i in range(records):
                    tp = order[rng.randrange(len(order))]
                    value = f"{txn.key}:{i}".encode()
                    self.main.sent.add(value)
                    txn.sent[value] = tp
                    fut = producer.send(tp, value)
                    fut.add_done_callback(functools.partial(self._on_ack, txn, value))
                    futs.append(fut)
                    await asyncio.sleep(interval)
                    if restart.is_set():
                        return  # the process dies mid-transaction
                ok = await acknowledged(futs, restart)
                if ok is None:
                    return  # the process dies before every record is acknowledged
                if await self.coordinator.end_txn(name, pid, epoch, commit and ok) != Errors.NONE or not ok:
                    return  # fenced, or a batch failed (its sequence is lost): a new incarnation
        finally:
            self.last_sequences[name] = {tp: st.next_sequence for tp, st in producer._parts.items()}
            crash_producer(producer)
            with contextlib.suppress(Exception):
                await producer.conns.close()

    def _on_ack(self, txn: Txn, value: bytes, fut: asyncio.Future[RecordMetadata]) -> None:
        if fut.cancelled() or fut.exception() is not None:
            return
        txn.acked[value] = fut.result().offset

    async def _send_fenced_batch(self, fenced: Txn, sequences: dict[TopicIdPartition, int]) -> None:
        """A batch of the fenced epoch, as a late retry of the dead process
        would arrive, to a partition of the fenced transaction (its leader
        holds the abort marker of the bumped epoch): it must be refused."""
        tp = min(fenced.partitions, key=lambda t: t.partition)
        seq = sequences.get(tp, 0)
        value = f"{fenced.key}:late".encode()
        self.main.sent.add(value)
        fenced.sent[value] = tp
        data = build_record_batch(
            [(None, value, self.cluster.now_ms())],
            producer_id=fenced.producer_id,
            producer_epoch=fenced.producer_epoch,
            base_sequence=seq,
            transactional=True,
        )
        for _ in range(5):
            alive = sorted(b for b, x in self.cluster.brokers.items() if not x.store._closed)
            if not alive:
                return
            bid = alive[0]
            ok, results = await _as_node(f"b{bid}", self.cluster.brokers[bid].produce([(tp, data)], acks=-1))
            if not ok:
                continue
            error = results[0].error
            if error in FENCED_BATCH_ERRORS:
                self.ledger.fenced_batches_refused += 1
                return
            if error == Errors.NONE:
                self.journal.violated(
                    f"{tp}: a batch of fenced producer {fenced.producer_id} epoch {fenced.producer_epoch} "
                    f"was accepted at offset {results[0].base_offset} after its abort marker"
                )
            await asyncio.sleep(0.5)

    async def _read_committed(self, on_read: Callable[[TopicIdPartition, int, bytes], None]) -> None:
        """A read_committed consumer of every partition, from the leaders,
        for the whole run; every record it is given is judged."""
        consumer = Consumer(
            self.cluster.bootstrap(), max_wait_ms=200, auto_offset_reset="earliest", isolation_level="read_committed"
        )
        while True:
            try:
                await consumer.start()
                break
            except Exception:
                await asyncio.sleep(0.5)
        consumer.assign(self.partitions, 0)
        while not self.reader_stop:
            try:
                records = await consumer.poll()
            except CorruptRecordError as e:
                self.journal.violated(f"read_committed: corrupt batches: {e}")
            except Exception:  # a broker went away mid-fetch: poll again
                await asyncio.sleep(0.2)
                continue
            for r in records:
                if r.value is not None:
                    self.ledger.read_committed += 1
                    on_read(r.topic_id_partition, r.offset, r.value)
            if not records:
                await asyncio.sleep(0.1)

    async def quiesce(self, within_s: float) -> bool:
        """Wait until every transaction is decided and its markers written."""
        deadline = self.cluster.loop.time() + within_s
        while self.coordinator.busy() or self.ledger.open:
            if self.cluster.loop.time() > deadline:
                return False
            await asyncio.sleep(0.5)
        return True

    async def read_replicas(self) -> dict[tuple[int, TopicIdPartition], dict[int, bytes]]:
        """Every live replica read with READ_COMMITTED fetches from its log
        start to its LSO, through ``Broker.fetch`` (any replica serves) and
        the consumer's ``read_records``: (broker, partition) -> offset -> value."""
        out: dict[tuple[int, TopicIdPartition], dict[int, bytes]] = {}
        for bid in sorted(self.cluster.brokers):
            broker = self.cluster.brokers[bid]
            for tp in self.partitions:
                if broker.store._closed or not broker.serves(tp):
                    continue
                got = await read_committed_from(bid, broker, tp)
                out[(bid, tp)] = got if got is not None else {}
        return out


async def read_committed_from(
    bid: int, broker: Broker, tp: TopicIdPartition, *, whole: bool = False
) -> dict[int, bytes] | None:
    """``tp``'s replica on ``broker`` read with READ_COMMITTED fetches from
    its log start to its LSO, through ``Broker.fetch`` (as its node) and the
    consumer's ``read_records``: offset -> value (what it read before 20
    failed fetches or a fetch without progress: None with ``whole``); None
    when it has no such partition."""
    got: dict[int, bytes] = {}
    try:
        pos = broker.store.log_start_offset(tp)
        end = broker.store.last_stable_offset(tp)
    except KeyError:
        return None
    failures = 0
    while pos < end and failures < 20:
        req = FindBatchRequest(tp, pos, READ_BYTES, IsolationLevel.READ_COMMITTED)
        ok, body = await _as_node(f"b{bid}", broker.fetch([req], max_wait_ms=0, min_bytes=0, max_bytes=READ_BYTES))
        row = body["partitions"][0] if ok else None
        if row is None or row[0] != Errors.NONE:
            failures += 1
            await asyncio.sleep(0.1)
            continue
        records, after = read_records(tp, row[3], pos, [(int(p), int(f)) for p, f in row[6]])
        for r in records:
            if r.value is not None:
                got[r.offset] = r.value
        if after <= pos:
            break
        pos = after
    return None if whole and pos < end else got


async def start_producer(cluster: Cluster, az: str, pid: int, epoch: int) -> Producer:
    """A transactional ``Producer`` of (``pid``, ``epoch``), started once a broker answers."""
    producer = Producer(
        cluster.bootstrap(),
        az=az,
        linger_ms=5,
        delivery_timeout_ms=600_000,
        clock=cluster.clock,
        transactional=(pid, epoch),
    )
    while True:
        try:
            await producer.start()
            return producer
        except Exception:  # no broker reachable yet: retry
            await asyncio.sleep(0.5)


async def acknowledged(futs: list[asyncio.Future[RecordMetadata]], restart: asyncio.Event) -> bool | None:
    """Wait for every record's answer: True when all were acknowledged,
    False when one failed, None when ``restart`` (the process dies) came first."""
    restarted: asyncio.Future[Any] = asyncio.ensure_future(restart.wait())
    waiting: set[asyncio.Future[Any]] = set(futs)
    while waiting and not restarted.done():
        _, waiting = await asyncio.wait(waiting | {restarted}, return_when=asyncio.FIRST_COMPLETED)
        waiting.discard(restarted)
    restarted.cancel()
    if restart.is_set():
        return None
    return all(not f.cancelled() and f.exception() is None for f in futs)


def control_offsets(cluster: Cluster, tp: TopicIdPartition) -> set[int]:
    """The offsets of the markers (control batches) in ``tp``'s log on its
    leader: a consumer is given no record there."""
    for broker in cluster.brokers.values():
        if broker.store._closed or not broker.replicas.is_leader(tp):
            continue
        start = broker.store.log_start_offset(tp)
        if start >= broker.store.log_end_offset(tp):
            return set()
        entries = broker.store.read_log(tp, start, 1 << 40).entries
        return {h.base_offset for h in (BatchHeader.parse(e.header) for e in entries) if h.is_control}
    return set()


def crash_producer(producer: Producer) -> None:
    """The producer's process ends: its tasks stop (the caller closes its
    connections); requests already on the wire still arrive (late batches)."""
    producer._closing = True
    if producer._sender is not None:
        producer._sender.cancel()
    for t in list(producer._requests):
        t.cancel()


def _given(value: int | None) -> int | None:
    return value
