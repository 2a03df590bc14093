"""Producers as partlog's own client behaves (``partlog/client/producer.py``), for
calibration against a real cluster: records one at a time, batched per
partition every linger, one produce request per destination broker with
at most 5 in flight to each (records keep accumulating meanwhile, so
batches grow with the latency).

This is a closed loop, unlike :class:`simulations.producers.ProducerGroup`'s
Poisson sends: the batch rate depends on the answers.  Each producer of a
group (``count``) is its own client with its own partition state.
Latency per batch from its oldest record's ``send()`` to the answer is
what partlog's client measures (``Producer.latencies_ms``, which ``partlog
cluster`` reports), so it is recorded here too.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Sequence

from partlog.client.producer import MAX_IN_FLIGHT_DEFAULT
from partlog.controller.cluster_meta import StaticMetadata
from partlog.kafka.records import TopicIdPartition
from simulations.batches import BatchTemplates
from simulations.context import ProduceRequest, SimContext
from simulations.producers import PRODUCER_GONE, retry_backoff_ms
from simulations.scenario import ProducerSpec, Routing

# A v2 record's bytes beyond its value (attributes, varint lengths and
# deltas, an empty key and no headers): about 8 for small values.
RECORD_OVERHEAD_BYTES = 8
BATCH_HEADER_BYTES = 61


class _Batch:
    """A closed batch: its records' send() times, its attempts so far and
    when it was first sent (delivery.timeout.ms counts from there)."""

    __slots__ = ("attempts", "first_ms", "not_before_ms", "times")

    def __init__(self, times: list[float]) -> None:
        self.times = times
        self.attempts = 0
        self.first_ms = -1.0
        # A retried batch waits for its backoff.
        self.not_before_ms = 0.0


class RecordProducer:
    """One client: ``records_per_s`` records (Poisson) to uniformly chosen
    partitions, sent as ``partlog/client/producer.py``'s producer sends them:

    * every ``linger_ms`` while it has work, each partition with pending
      records and no batch waiting closes one batch of them;
    * each waiting head batch goes to its destination broker, one batch per
      partition per request, at most ``MAX_IN_FLIGHT_DEFAULT`` (5) requests
      in flight per broker, so at most 5 batches of a partition in flight;
    * idle, it sleeps until a record arrives, which starts the linger."""

    def __init__(
        self,
        ctx: SimContext,
        spec: ProducerSpec,
        routing: Routing,
        view: StaticMetadata,
        templates: BatchTemplates,
        partitions: list[TopicIdPartition],
        rng: random.Random,
    ) -> None:
        self.ctx = ctx
        self.spec = spec
        self.routing = routing
        self.view = view
        self.alive = True
        self._templates = templates
        self._partitions = partitions
        self._rng = rng
        self._rate_per_ms = spec.records_per_s / 1000
        # partition index -> arrival times of records not yet in a batch
        self._pending: dict[int, list[float]] = {}
        # partition index -> closed batches waiting to be sent
        self._ready: dict[int, deque[_Batch]] = {}
        # partition index -> batches in flight; broker -> requests in flight
        self._inflight: dict[int, int] = {}
        self._slots: dict[int, int] = {}
        self._tick_at: float | None = None
        # id(request) -> (its broker, its batches as (partition index, batch))
        self._requests: dict[int, tuple[int, list[tuple[int, _Batch]]]] = {}
        self._index = {tp: i for i, tp in enumerate(partitions)}

    def set_view(self, view: StaticMetadata) -> None:
        self.view = view

    def start(self) -> None:
        self.ctx.loop.after(self._rng.expovariate(self._rate_per_ms), self._record)

    def _record(self) -> None:
        if not self.alive:
            return
        loop = self.ctx.loop
        loop.after(self._rng.expovariate(self._rate_per_ms), self._record)
        i = self._rng.randrange(len(self._partitions))
        self._pending.setdefault(i, []).append(loop.now_ms)
        self._wake(self.spec.linger_ms)

    def _wake(self, after_ms: float) -> None:
        """Run the send loop after ``after_ms`` unless it runs sooner."""
        loop = self.ctx.loop
        when = loop.now_ms + after_ms
        if self._tick_at is None or when < self._tick_at:
            self._tick_at = when
            loop.at(when, self._tick, when)

    def _busy(self) -> bool:
        return bool(self._pending) or any(self._ready.values())

    def _batch(self, records: int) -> bytes:
        return self._templates.get(BATCH_HEADER_BYTES + records * (self.spec.record_bytes + RECORD_OVERHEAD_BYTES))

    def _tick(self, when: float) -> None:
        if when != self._tick_at or not self.alive:
            return
        self._tick_at = None
        for i in list(self._pending):
            if not self._ready.get(i):
                self._ready.setdefault(i, deque()).append(_Batch(self._pending.pop(i)))
        self._dispatch()
        if self._busy():
            self._wake(max(self.spec.linger_ms, 1))

    def _destination(self, tp: TopicIdPartition) -> int | None:
        view = self.view
        if self.routing is Routing.ANY_BROKER:
            local = view.brokers_in(self.spec.az) or sorted(b.broker_id for b in view.brokers())
            return local[self._rng.randrange(len(local))] if local else None
        if self.routing is Routing.AZ_REPRESENTATIVE:
            return view.produce_target(tp, self.spec.az)
        return view.leader_of(tp)

    def _dispatch(self) -> None:
        by_target: dict[int, list[int]] = {}
        now = self.ctx.loop.now_ms
        for i, q in self._ready.items():
            if not q or self._inflight.get(i, 0) >= MAX_IN_FLIGHT_DEFAULT or q[0].not_before_ms > now:
                continue
            dest = self._destination(self._partitions[i])
            if dest is not None:
                by_target.setdefault(dest, []).append(i)
        if not by_target:
            return
        ctx = self.ctx
        sendable = {d: idx for d, idx in by_target.items() if self._slots.get(d, 0) < MAX_IN_FLIGHT_DEFAULT}
        if not sendable:
            return
        send_id = ctx.recorder.send_started(now, len(sendable))
        for dest, idx in sendable.items():
            self._slots[dest] = self._slots.get(dest, 0) + 1
            batches = []
            for i in idx:
                b = self._ready[i].popleft()
                if b.first_ms < 0:
                    b.first_ms = now
                batches.append((i, b))
                self._inflight[i] = self._inflight.get(i, 0) + 1
            self._send(send_id, dest, batches)

    def _send(self, send_id: int, dest: int, batches: list[tuple[int, _Batch]]) -> None:
        ctx = self.ctx
        rec = ctx.recorder
        target = ctx.produce_targets[dest]
        wire = tuple((self._partitions[i], self._batch(len(b.times))) for i, b in batches)
        nbytes = sum(len(b) for _, b in wire)
        req = ProduceRequest(
            self.spec.az,
            ctx.loop.now_ms,
            send_id,
            wire,
            nbytes,
            self.spec.acks_all,
            self.spec.request_timeout_ms,
            self._failed,
            min(b.first_ms for _, b in batches),
            max(b.attempts for _, b in batches),
            self._answered,
        )
        self._requests[id(req)] = (dest, batches)
        rec.produce_requests += 1
        rec.produce_bytes += nbytes
        if target.az != self.spec.az:
            rec.cross_az_data_bytes += nbytes
        ctx.loop.at(ctx.loop.now_ms + ctx.network.one_way_ms(self.spec.az, target.az), target.on_produce, req)

    def _answered(self, req: ProduceRequest, arrival_ms: float) -> None:
        """Every batch of ``req`` was acknowledged; the producer learns it at ``arrival_ms``."""
        self.ctx.loop.at(arrival_ms, self._settle, req, frozenset())

    def _settle(
        self, req: ProduceRequest, failed: frozenset[TopicIdPartition], retry_after_ms: float | None = None
    ) -> None:
        dest, batches = self._requests.pop(id(req))
        self._slots[dest] -= 1
        rec = self.ctx.recorder
        now = self.ctx.loop.now_ms
        for i, b in batches:
            self._inflight[i] -= 1
            if self._partitions[i] not in failed:
                if b.times:
                    rec.batch_latencies.append(now - b.times[0])
            elif retry_after_ms is not None:
                # Kafka's producer re-sends the same batch, ahead of later
                # ones, after the backoff.
                b.attempts += 1
                b.not_before_ms = now + retry_after_ms
                self._ready.setdefault(i, deque()).appendleft(b)
        if self._busy():
            self._wake(self.spec.linger_ms)

    def _failed(self, req: ProduceRequest, batches: Sequence[tuple[TopicIdPartition, bytes]], why: str) -> bool:
        """Kafka's retries: the failed batches wait at the head of their
        partitions' queues for the backoff, unless delivery.timeout.ms would
        pass first (then they fail)."""
        spec = self.spec
        rec = self.ctx.recorder
        now = self.ctx.loop.now_ms
        attempt = req.attempt + 1
        backoff = retry_backoff_ms(spec, attempt, self._rng)
        # (req.first_sent_ms: the earliest first send of its batches)
        if not self.alive:
            self._settle(req, frozenset(tp for tp, _ in batches))
            rec.failed(now, req.send_id, 1, len(batches), PRODUCER_GONE)
            return True
        retry = spec.retries and now + backoff - req.first_sent_ms < spec.delivery_timeout_ms
        self._settle(req, frozenset(tp for tp, _ in batches), backoff if retry else None)
        if retry:
            rec.retried(now, req.send_id, len(batches), why)
            # This request is settled; its batches go out again after the backoff.
            rec.requests_replaced(req.send_id, 0)
            self._wake(backoff)
        return retry
