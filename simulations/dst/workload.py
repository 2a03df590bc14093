"""The simulation's workload: the real ``Producer`` clients sending to the
cluster under Kafka's three delivery contracts, the ledger of what was
sent and acknowledged, and the verifier that reads everything back at
the end.

Producer kinds: ``idempotent`` (acks=all, exactly once, in order),
``plain`` (acks=all without idempotence: duplicates allowed) and
``acks1`` (a failover may lose them: counted, not required).  A
producer is a node of its own (``p-<az>-...``) and restarts as a new
incarnation (a new producer id) when the faults say so.  What the ledger
must satisfy is judged in :mod:`simulations.dst.invariants`; two checks
are made here, as the answers come: no offset acknowledged twice with
acks=all, and no gap in what the verifier reads.
"""

from __future__ import annotations

import asyncio
import functools
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from partlog.client import Consumer, CorruptRecordError, Producer, RecordMetadata
from partlog.kafka.records import TopicIdPartition
from simulations.dst.cluster import Cluster
from simulations.dst.config import Shape
from simulations.dst.journal import Journal
from simulations.dst.runtime import run_node


@dataclass
class Ledger:
    """What the producers sent and what the cluster acknowledged."""

    # (tp, offset) -> value, for acks=all acknowledgements.
    acked: dict[tuple[TopicIdPartition, int], bytes] = field(default_factory=dict)
    # (tp, offset) -> value, for acks=1 acknowledgements.
    acked1: dict[tuple[TopicIdPartition, int], bytes] = field(default_factory=dict)
    # Acknowledged with the offset unknown: value -> partition.
    acked_unplaced: dict[bytes, TopicIdPartition] = field(default_factory=dict)
    # Producer name -> "idempotent", "plain" (acks=all) or "acks1".
    kind_of: dict[str, str] = field(default_factory=dict)
    sent: set[bytes] = field(default_factory=set)
    sent_order: dict[tuple[str, TopicIdPartition], list[bytes]] = field(default_factory=dict)
    # Log start offsets DeleteRecords set: records below are gone by design.
    deleted_below: dict[TopicIdPartition, int] = field(default_factory=dict)
    # Counted by the verification at the end.
    lost_acks1: int = 0
    verified: int = 0

    def kind_of_value(self, value: bytes) -> str:
        return self.kind_of.get(value.split(b":", 1)[0].decode(), "")


class Workload:
    """The producers of ``shape`` and what they were told (:class:`Ledger`)."""

    def __init__(self, seed: int, shape: Shape, cluster: Cluster, journal: Journal) -> None:
        self.seed = seed
        self.shape = shape
        self.cluster = cluster
        self.journal = journal
        self.loop = cluster.loop
        self.ledger = Ledger()
        # Producer name -> set to make it start a new incarnation.
        self.restarts: dict[str, asyncio.Event] = {}
        self.live_producers: dict[str, Producer] = {}
        # While None, producers go on; then they stop at this virtual time.
        self.stop_at: float | None = None

    def start(self) -> list[asyncio.Task[Any]]:
        """Every producer of the shape, as a task of its own node."""
        azs = sorted(set(self.cluster.az_of.values()))
        producers = [
            run_node(f"p-{az}-{i}", self._produce(f"p{az}{i}", az, "idempotent"))
            for az in azs
            for i in range(self.shape.producers_per_az)
        ]
        for i in range(self.shape.plain_producers):
            az = azs[i % len(azs)]
            producers.append(run_node(f"p-{az}-plain{i}", self._produce(f"q{az}{i}", az, "plain")))
        for i in range(self.shape.acks1_producers):
            az = azs[(i + 1) % len(azs)]
            producers.append(run_node(f"p-{az}-acks1{i}", self._produce(f"r{az}{i}", az, "acks1")))
        return producers

    def _producing(self) -> bool:
        return self.stop_at is None or self.loop.time() < self.stop_at

    def _on_ack(self, producer: str, tp: TopicIdPartition, value: bytes, fut: asyncio.Future[RecordMetadata]) -> None:
        if fut.cancelled() or fut.exception() is not None:
            return
        md = fut.result()
        ledger = self.ledger
        if ledger.kind_of[producer] == "acks1":
            # May be lost in a failover (Kafka's contract for acks=1).  A
            # stale leader (cut off from the controller, not yet told) still
            # takes acks=1 writes at offsets the new leader has committed, as
            # in Kafka; they are truncated.  A current leader writing over a
            # committed offset shows in the acks=all read-back instead.
            where = (tp, md.offset)
            old = ledger.acked.get(where)
            if old is not None and old != value:
                self.journal.event(
                    f"{tp} offset {md.offset}: acks=1 {value!r} acknowledged where acks=all holds {old!r}"
                )
            ledger.acked1[where] = value
            return
        if md.offset < 0:
            # Acknowledged with its offset unknown (a retry the leader had
            # already taken): it must still be read back exactly once.
            ledger.acked_unplaced[value] = tp
            return
        where = (tp, md.offset)
        old = ledger.acked.get(where)
        if old is not None and old != value:
            self.journal.violated(f"{tp} offset {md.offset} acknowledged for {old!r} and {value!r}")
        ledger.acked[where] = value

    async def _produce(self, name: str, az: str, kind: str) -> None:
        self.ledger.kind_of[name] = kind
        bootstrap = self.cluster.bootstrap()
        rng = random.Random(hash((self.seed, name)) & 0xFFFFFFFF)
        restart = self.restarts.setdefault(name, asyncio.Event())
        seq = 0
        while self._producing():
            restart.clear()
            seq = await self._produce_as(name, az, kind, bootstrap, rng, seq, restart)

    async def _produce_as(
        self,
        name: str,
        az: str,
        kind: str,
        bootstrap: list[tuple[str, int]],
        rng: random.Random,
        seq: int,
        restart: asyncio.Event,
    ) -> int:
        """One producer incarnation (a producer id); the next sequence number."""
        producer = Producer(
            bootstrap,
            az=az,
            acks=1 if kind == "acks1" else -1,
            idempotent=kind == "idempotent",
            linger_ms=5,
            delivery_timeout_ms=600_000,
            clock=self.cluster.clock,
        )
        self.live_producers[name] = producer
        while True:
            try:
                await producer.start()
                break
            except Exception:  # no broker reachable yet: retry
                await asyncio.sleep(0.5)
        rate = self.shape.rate_per_producer if kind == "idempotent" else self.shape.rate_per_plain_producer
        interval = 1.0 / rate
        try:
            while self._producing() and not restart.is_set():
                tp = self.cluster.partitions[rng.randrange(len(self.cluster.partitions))]
                value = f"{name}:{seq}".encode()
                seq += 1
                self.ledger.sent.add(value)
                self.ledger.sent_order.setdefault((name, tp), []).append(value)
                fut = producer.send(tp, value)
                fut.add_done_callback(functools.partial(self._on_ack, name, tp, value))
                await asyncio.sleep(interval)
            await producer.flush()
        finally:
            await producer.close()
        return seq

    def stuck(self) -> dict[str, dict[str, tuple[int, int, int]]]:
        """Per producer, the partitions it still holds records for:
        (pending, ready batches, in flight)."""
        stuck: dict[str, dict[str, tuple[int, int, int]]] = {}
        for name, p in self.live_producers.items():
            parts = {
                str(tp.partition): (len(st.pending), len(st.ready), st.inflight)
                for tp, st in p._parts.items()
                if st.pending or st.ready or st.inflight
            }
            if parts:
                stuck[name] = parts
        return stuck

    async def read_back(
        self, markers: Callable[[TopicIdPartition], set[int]] | None = None
    ) -> tuple[dict[tuple[TopicIdPartition, int], bytes], dict[TopicIdPartition, int]]:
        """Read every partition from its log start to its HWM: what was
        read, (partition, offset) -> value, and where each partition's log
        started for the reader (DeleteRecords and retention removed what
        lies below, by design)."""
        partitions = self.cluster.partitions
        # auto.offset.reset=earliest: retention may move a log start past the
        # reader, as it does past any consumer.
        consumer = Consumer(self.cluster.bootstrap(), max_wait_ms=100, auto_offset_reset="earliest")
        await run_node("verifier", consumer.start())
        for tp in partitions:
            consumer.assign([tp], self.ledger.deleted_below.get(tp, 0))
        want = {tp: max((o for (t, o) in self.ledger.acked if t == tp), default=-1) for tp in partitions}

        def behind(tp: TopicIdPartition) -> bool:
            pos = consumer.positions[tp]
            return pos <= want[tp] or pos < consumer.high_watermarks.get(tp, pos + 1)

        seen: dict[tuple[TopicIdPartition, int], bytes] = {}
        deadline = self.loop.time() + 60
        while any(behind(tp) for tp in partitions):
            if self.loop.time() > deadline:
                missing = {
                    tp: (consumer.positions[tp], want[tp], consumer.high_watermarks.get(tp))
                    for tp in partitions
                    if behind(tp)
                }
                self.journal.violated(f"records not readable within 60 s: position/last acked/HWM {missing}")
            before = dict(consumer.positions)
            try:
                records = await run_node("verifier", consumer.poll())
            except CorruptRecordError as e:
                self.journal.violated(f"corrupt batches: {e}")
            for r in records:
                tp = r.topic_id_partition
                # No gaps: each fetch continues where the last one ended
                # (past transaction markers: no records there).
                if r.offset != before[tp] and (markers is None or not _only_markers(markers, tp, before[tp], r.offset)):
                    self.journal.violated(f"{tp}: read offset {r.offset} after {before[tp] - 1} (a gap)")
                before[tp] = r.offset + 1
                if r.value is None:
                    continue
                seen[(tp, r.offset)] = r.value
        await consumer.close()
        start = dict(self.ledger.deleted_below)
        for tp, resets in consumer.resets.items():
            for frm, to, hwm in resets:
                self.journal.event(f"verifier: {tp.partition} reset from {frm} to the log start {to} (HWM {hwm})")
                if to > hwm or to < frm:
                    self.journal.violated(f"{tp}: reset from {frm} to a log start of {to}, HWM {hwm}")
                start[tp] = max(start.get(tp, 0), to)
        return seen, start


def _only_markers(markers: Callable[[TopicIdPartition], set[int]], tp: TopicIdPartition, frm: int, to: int) -> bool:
    """Offsets ``frm`` to ``to`` - 1 of ``tp`` all hold markers."""
    return to > frm and set(range(frm, to)) <= markers(tp)
