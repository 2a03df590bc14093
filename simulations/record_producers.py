"""Producers as partlog's own client behaves (``partlog/client.py``), for
calibration against a real cluster: records one at a time, batched per
partition, sent when the linger ends, at most one batch of a partition in
flight (records keep accumulating meanwhile, so batches grow with the
latency), one produce request per destination broker.

This is a closed loop, unlike :class:`simulations.producers.ProducerGroup`'s
Poisson sends: the batch rate depends on the answers.  Each producer of a
group (``count``) is its own client with its own partition state.
Latency per batch from its oldest record's ``send()`` to the answer is
what partlog's client measures (``Producer.latencies_ms``, which ``partlog
cluster`` reports), so it is recorded here too.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from partlog.controller.cluster_meta import StaticMetadata
from partlog.kafka.records import TopicIdPartition
from simulations.batches import BatchTemplates
from simulations.context import ProduceRequest, SimContext
from simulations.producers import RETRY_JITTER
from simulations.scenario import ProducerSpec, Routing

# A v2 record's bytes beyond its value (attributes, varint lengths and
# deltas, an empty key and no headers): about 8 for small values.
RECORD_OVERHEAD_BYTES = 8
BATCH_HEADER_BYTES = 61


class RecordProducer:
    """One client: ``records_per_s`` records (Poisson) to uniformly chosen
    partitions."""

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
        # partition index -> arrival times of the records of its batch in flight
        self._inflight: dict[int, list[float]] = {}
        self._drain_at: float | None = None
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
        if i not in self._inflight:
            self._schedule_drain(self.spec.linger_ms)

    def _schedule_drain(self, after_ms: float) -> None:
        loop = self.ctx.loop
        when = loop.now_ms + after_ms
        if self._drain_at is None or when < self._drain_at:
            self._drain_at = when
            loop.at(when, self._drain, when)

    def _batch(self, records: int) -> bytes:
        return self._templates.get(BATCH_HEADER_BYTES + records * (self.spec.record_bytes + RECORD_OVERHEAD_BYTES))

    def _drain(self, when: float) -> None:
        if when != self._drain_at or not self.alive:
            return
        self._drain_at = None
        ready = [i for i in self._pending if i not in self._inflight]
        if not ready:
            return
        by_target: dict[int, list[int]] = {}
        unroutable: list[int] = []
        az = self.spec.az
        view = self.view
        representative = self.routing is Routing.AZ_REPRESENTATIVE
        local = view.brokers_in(az) if self.routing is Routing.ANY_BROKER else []
        for i in ready:
            tp = self._partitions[i]
            if self.routing is Routing.ANY_BROKER:
                dest = local[self._rng.randrange(len(local))] if local else None
            else:
                dest = view.produce_target(tp, az) if representative else view.leader_of(tp)
            if dest is None:
                unroutable.append(i)
            else:
                by_target.setdefault(dest, []).append(i)
        ctx = self.ctx
        rec = ctx.recorder
        now = ctx.loop.now_ms
        send_id = rec.send_started(now, len(by_target))
        for i in ready:
            if i not in unroutable:
                self._inflight[i] = self._pending.pop(i)
        for dest, idx in by_target.items():
            self._send(send_id, dest, idx, now, 0)
        if unroutable:
            self._schedule_drain(self.spec.retry_backoff_ms)

    def _send(self, send_id: int, dest: int, idx: Sequence[int], first_ms: float, attempt: int) -> None:
        ctx = self.ctx
        rec = ctx.recorder
        target = ctx.produce_targets[dest]
        batches = tuple((self._partitions[i], self._batch(len(self._inflight[i]))) for i in idx)
        nbytes = sum(len(b) for _, b in batches)
        req = ProduceRequest(
            self.spec.az,
            ctx.loop.now_ms,
            send_id,
            batches,
            nbytes,
            self.spec.acks_all,
            self.spec.request_timeout_ms,
            self._failed,
            first_ms if attempt else -1.0,
            attempt,
            self._answered,
        )
        rec.produce_requests += 1
        rec.produce_bytes += nbytes
        if target.az != self.spec.az:
            rec.cross_az_data_bytes += nbytes
        ctx.loop.at(ctx.loop.now_ms + ctx.network.one_way_ms(self.spec.az, target.az), target.on_produce, req)

    def _answered(self, req: ProduceRequest, arrival_ms: float) -> None:
        """Every batch of ``req`` was acknowledged; the producer learns it at ``arrival_ms``."""
        self.ctx.loop.at(arrival_ms, self._acked, req)

    def _acked(self, req: ProduceRequest) -> None:
        rec = self.ctx.recorder
        now = self.ctx.loop.now_ms
        for tp, _ in req.batches:
            times = self._inflight.pop(self._index[tp], [])
            if times:
                rec.batch_latencies.append(now - times[0])
        if self._pending:
            self._schedule_drain(self.spec.linger_ms)

    def _failed(self, req: ProduceRequest, batches: Sequence[tuple[TopicIdPartition, bytes]], why: str) -> bool:
        """Kafka's retries: the failed partitions' records go back to the
        head of their pending lists and are drained again after the backoff,
        unless delivery.timeout.ms would pass first (then they fail)."""
        spec = self.spec
        rec = self.ctx.recorder
        now = self.ctx.loop.now_ms
        attempt = req.attempt + 1
        backoff = min(spec.retry_backoff_max_ms, spec.retry_backoff_ms * 2 ** min(attempt - 1, 30))
        backoff *= self._rng.uniform(1 - RETRY_JITTER, 1 + RETRY_JITTER)
        retry = self.alive and spec.retries and now + backoff - req.since_ms < spec.delivery_timeout_ms
        failed = {tp for tp, _ in batches}
        for tp, _ in req.batches:
            i = self._index[tp]
            times = self._inflight.pop(i, [])
            if tp not in failed:
                if times:
                    rec.batch_latencies.append(now - times[0])
            elif retry:
                self._pending[i] = times + self._pending.get(i, [])
        if retry:
            rec.retried(now, req.send_id, len(batches), why)
            # This request is settled; its records go out in a later drain.
            rec.requests_replaced(req.send_id, 0)
            self._schedule_drain(backoff)
        elif self._pending:
            self._schedule_drain(spec.linger_ms)
        return retry
