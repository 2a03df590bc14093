"""The simulation's consume-transform-produce workload, exactly once end to
end: transactional "transformers" read an input partition read_committed,
write one output record per input record, and commit their input position
in the same transaction.

Topics (created beside the fuzz topic when ``Shape.txn_transformers`` > 0):
``dst-in`` (one partition per transformer; the transactional producers of
:mod:`simulations.dst.txn` write into it with the other partitions they
pick, committing and aborting), ``dst-out`` (:data:`OUTPUT_PARTITIONS`) and
``dst-state`` (one partition per transformer).

Transformer ``x<az><i>`` (transactional id the same), one incarnation at a
time: InitProducerId (fencing the last incarnation's open transaction: its
abort markers are written before the answer), then its committed position
read back read_committed from its state partition, then transactions: a
read_committed ``Consumer`` poll of its input from that position, each
record ``v`` at offset ``o`` of input partition ``p`` transformed to
``"<txn key>:<p>@<o>"`` on an output partition, and the position after the
poll as ``"<txn key>:pos=<n>"`` on the state partition, all in one
transaction; then commit, or (``CTP_ABORT_SHARE``) abort and seek back to
the last committed position, as a Kafka application does.  A restart (the
fault) kills the process mid-transaction.

The model of offsets in the transaction.  No Kafka front end or group
coordinator runs here, so the position is not a TxnOffsetCommit to
``__consumer_offsets``: it is a transactional record in the transformer's
own state partition, which is what ``__consumer_offsets`` holds for it in
Kafka (the group coordinator writes a TxnOffsetCommit as a transactional
batch into the group's offsets partition, the transaction's markers reach
that partition like any other, and only a COMMIT makes the offset
visible).  Reading the position back is reading the state partition to its
end with READ_COMMITTED on its leader (what the group coordinator's load
does), once nothing of the transformer is pending there: Kafka's OffsetFetch
answers UNSTABLE_OFFSET_COMMIT meanwhile (KIP-447), and here InitProducerId
already waited for the fenced transaction's markers.  The group
coordinator's own pending-offsets rule (TxnOffsetCommit held per producer,
applied on COMMIT, dropped on ABORT) is tested against the real
``GroupCoordinator`` in tests/unit; what this workload checks is the
end-to-end contract on the real leaders under faults: every committed input
record appears exactly once among the committed outputs, in input order
per input partition (:func:`simulations.dst.invariants.check_consume_transform_produce`).

With the injected bug ``ctp_position_before_output`` a transformer commits
its position in a transaction of its own before the outputs' (as an
application committing offsets outside the transaction): an output
transaction that aborts, or a crash between the two, loses input records.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from partlog import injected_bugs
from partlog.broker.server import Broker
from partlog.client import Consumer, CorruptRecordError, Producer, RecordMetadata
from partlog.kafka.errors import Errors
from partlog.kafka.records import TopicIdPartition
from simulations.dst.cluster import Cluster
from simulations.dst.journal import Journal
from simulations.dst.runtime import run_node
from simulations.dst.txn import (
    SimTxnCoordinator,
    Txn,
    TxnLedger,
    acknowledged,
    crash_producer,
    read_committed_from,
    start_producer,
)

INPUT_TOPIC = "dst-in"
OUTPUT_TOPIC = "dst-out"
STATE_TOPIC = "dst-state"
OUTPUT_PARTITIONS = 3
CTP_ABORT_SHARE = 0.15  # of a transformer's transactions it aborts itself
RECORDS_PER_TXN_MAX = 16  # input records transformed in one transaction
POSITION_PREFIX = b"pos="


@dataclass(frozen=True)
class _Process:
    """One incarnation of a transformer, as its transactions need it."""

    name: str  # the transactional id
    pid: int
    epoch: int
    producer: Producer
    restart: asyncio.Event
    in_partition: int


@dataclass(frozen=True)
class CtpTopics:
    inputs: list[TopicIdPartition]  # transformer i reads inputs[i]
    outputs: list[TopicIdPartition]
    states: list[TopicIdPartition]  # transformer i's position: states[i]

    @property
    def all(self) -> list[TopicIdPartition]:
        return self.inputs + self.outputs + self.states


async def create_topics(cluster: Cluster, transformers: int) -> CtpTopics:
    """The three topics, created with the fuzz topic's replication; back
    once every partition has a leader (or after 10 s)."""
    assert cluster.admin is not None and transformers > 0
    rf = min(cluster.shape.replication_factor, len(cluster.az_of))
    sizes = {INPUT_TOPIC: transformers, OUTPUT_TOPIC: OUTPUT_PARTITIONS, STATE_TOPIC: transformers}
    answers = await cluster.admin.create_topics({name: (n, rf) for name, n in sizes.items()})
    made: dict[str, list[TopicIdPartition]] = {}
    for name, n in sizes.items():
        answer = answers[name]
        assert not isinstance(answer, Errors), (name, answer)
        made[name] = [TopicIdPartition(answer.topic_id, p) for p in range(n)]
    topics = CtpTopics(made[INPUT_TOPIC], made[OUTPUT_TOPIC], made[STATE_TOPIC])
    for _ in range(200):
        if all(any(b.replicas.is_leader(tp) for b in cluster.brokers.values()) for tp in topics.all):
            break
        await asyncio.sleep(0.05)
    return topics


def parse_output(value: bytes) -> tuple[int, int] | None:
    """(input partition, input offset) of an output record's value."""
    tail = value.split(b":", 1)[-1]
    p, sep, o = tail.partition(b"@")
    if not sep or not p.isdigit() or not o.isdigit():
        return None
    return int(p), int(o)


def parse_position(value: bytes) -> int | None:
    tail = value.split(b":", 1)[-1]
    return int(tail[len(POSITION_PREFIX) :]) if tail.startswith(POSITION_PREFIX) else None


class Transformers:
    """One transformer per input partition of ``topics`` (module doc)."""

    def __init__(
        self,
        seed: int,
        cluster: Cluster,
        journal: Journal,
        ledger: TxnLedger,
        coordinator: SimTxnCoordinator,
        restarts: dict[str, asyncio.Event],
        topics: CtpTopics,
    ) -> None:
        self.seed = seed
        self.cluster = cluster
        self.journal = journal
        self.ledger = ledger
        self.coordinator = coordinator
        self.restarts = restarts
        self.topics = topics
        # Set once the input partitions take no more records (the producers
        # ended): a transformer then stops when it has caught up.
        self.inputs_done = False
        self.names: list[str] = []

    def start(self, on_read: Callable[[TopicIdPartition, int, bytes], None]) -> list[asyncio.Task[Any]]:
        azs = sorted(set(self.cluster.az_of.values()))
        out = []
        for i in range(len(self.topics.inputs)):
            az = azs[i % len(azs)]
            name = f"x{az}{i}"
            self.names.append(name)
            out.append(run_node(f"p-{az}-ctp{i}", self._run(name, az, i, on_read)))
        return out

    async def _run(self, name: str, az: str, i: int, on_read: Callable[[TopicIdPartition, int, bytes], None]) -> None:
        rng = random.Random(f"{self.seed}/ctp/{name}")
        restart = self.restarts.setdefault(name, asyncio.Event())
        incarnation = 0
        while True:
            restart.clear()
            if await self._incarnation(name, az, i, rng, incarnation, restart, on_read):
                return
            incarnation += 1

    async def _incarnation(
        self,
        name: str,
        az: str,
        i: int,
        rng: random.Random,
        incarnation: int,
        restart: asyncio.Event,
        on_read: Callable[[TopicIdPartition, int, bytes], None],
    ) -> bool:
        """One transformer process; True once it caught up with inputs that
        take no more records."""
        inp, state = self.topics.inputs[i], self.topics.states[i]
        pid, epoch = await self.coordinator.init_producer_id(name)
        committed = await self._committed_position(state, restart)
        if committed is None:
            return False  # restarted while reading it
        producer = await start_producer(self.cluster, az, pid, epoch)
        consumer = Consumer(self.cluster.bootstrap(), max_wait_ms=200, isolation_level="read_committed")
        n = 0
        try:
            while True:
                try:
                    await consumer.start()
                    break
                except Exception:  # no broker reachable yet: retry
                    await asyncio.sleep(0.5)
            consumer.assign([inp], committed)
            while not restart.is_set():
                try:
                    records = [r for r in await consumer.poll() if r.value is not None]
                except CorruptRecordError as e:
                    self.journal.violated(f"{name}: read_committed: corrupt batches: {e}")
                    return False
                except Exception:  # a broker went away mid-fetch: poll again
                    await asyncio.sleep(0.2)
                    continue
                if not records:
                    if self.inputs_done and self._caught_up(inp, consumer.positions[inp]):
                        return True
                    await asyncio.sleep(0.1)
                    continue
                records = records[:RECORDS_PER_TXN_MAX]
                for r in records:
                    assert r.value is not None
                    on_read(inp, r.offset, r.value)
                after = records[-1].offset + 1 if len(records) == RECORDS_PER_TXN_MAX else consumer.positions[inp]
                commit = rng.random() >= CTP_ABORT_SHARE
                outs = [(self.topics.outputs[rng.randrange(OUTPUT_PARTITIONS)], r.offset) for r in records]
                me = _Process(name, pid, epoch, producer, restart, inp.partition)
                if injected_bugs.on("ctp_position_before_output"):
                    # The position first, in a transaction of its own.
                    if not await self._transaction(me, f"{name}.{incarnation}.{n}", [], (state, after), True):
                        return False
                    n += 1
                    committed = after
                    ok = await self._transaction(me, f"{name}.{incarnation}.{n}", outs, None, commit)
                else:
                    ok = await self._transaction(me, f"{name}.{incarnation}.{n}", outs, (state, after), commit)
                n += 1
                if not ok:
                    return False  # fenced, a batch failed, or the process died: a new incarnation
                if commit:
                    committed = after
                consumer.positions[inp] = committed  # after an abort: back to the committed position
            return False
        finally:
            crash_producer(producer)
            with contextlib.suppress(Exception):
                await producer.conns.close()
            with contextlib.suppress(Exception):
                await consumer.close()

    async def _transaction(
        self,
        me: _Process,
        key: str,
        outs: list[tuple[TopicIdPartition, int]],
        position: tuple[TopicIdPartition, int] | None,
        commit: bool,
    ) -> bool:
        """One transaction of ``me``: ``outs`` (output partition, input
        offset) and the ``position`` record; False unless it ended as asked."""
        tps = frozenset([tp for tp, _ in outs] + ([position[0]] if position is not None else []))
        if await self.coordinator.add_partitions(me.name, me.pid, me.epoch, tps) != Errors.NONE:
            return False
        txn = Txn(key, me.name, me.pid, me.epoch, tps)
        self.ledger.txns[key] = txn
        self.ledger.open[me.name] = txn
        sends = [(tp, f"{key}:{me.in_partition}@{offset}".encode()) for tp, offset in outs]
        if position is not None:
            sends.append((position[0], f"{key}:{POSITION_PREFIX.decode()}{position[1]}".encode()))
        futs = []
        for tp, value in sends:
            txn.sent[value] = tp
            fut = me.producer.send(tp, value)
            fut.add_done_callback(functools.partial(self._on_ack, txn, value))
            futs.append(fut)
        if not await acknowledged(futs, me.restart):
            return False  # the process dies (None), or a batch failed (its sequence is lost)
        return await self.coordinator.end_txn(me.name, me.pid, me.epoch, commit) == Errors.NONE

    @staticmethod
    def _on_ack(txn: Txn, value: bytes, fut: asyncio.Future[RecordMetadata]) -> None:
        if not fut.cancelled() and fut.exception() is None:
            txn.acked[value] = fut.result().offset

    async def _committed_position(self, state: TopicIdPartition, restart: asyncio.Event) -> int | None:
        """The last committed position in ``state``, read to its end with
        READ_COMMITTED on its leader once nothing is pending there (LSO =
        HWM = log end); 0 without one; None on a restart meanwhile."""
        while not restart.is_set():
            leader = self._leader(state)
            if leader is not None:
                bid, broker = leader
                store = broker.store
                try:
                    end = store.log_end_offset(state)
                    stable = store.last_stable_offset(state) == store.high_watermark(state) == end
                except Exception:  # the store closed meanwhile
                    stable = False
                if stable:
                    got = await read_committed_from(bid, broker, state, whole=True)
                    if got is not None:
                        positions = [p for _, v in sorted(got.items()) if (p := parse_position(v)) is not None]
                        return positions[-1] if positions else 0
            await asyncio.sleep(0.2)
        return None

    def _leader(self, tp: TopicIdPartition) -> tuple[int, Broker] | None:
        """The live broker leading ``tp`` at the highest leader epoch."""
        best: tuple[int, int, Broker] | None = None
        for bid, broker in sorted(self.cluster.brokers.items()):
            if broker.store._closed or not broker.replicas.is_leader(tp):
                continue
            epoch = broker.replicas.leader_epoch(tp) or 0
            if best is None or epoch > best[0]:
                best = (epoch, bid, broker)
        return None if best is None else (best[1], best[2])

    def _caught_up(self, inp: TopicIdPartition, position: int) -> bool:
        """The harness's stop rule (it sees the leader): nothing open in the
        input and the position at its end."""
        leader = self._leader(inp)
        if leader is None:
            return False
        store = leader[1].store
        try:
            end = store.log_end_offset(inp)
            stable = store.last_stable_offset(inp) == store.high_watermark(inp) == end
        except Exception:  # the store closed meanwhile
            return False
        return stable and position >= end
