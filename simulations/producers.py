"""Simulated producers: Poisson sends from one AZ, each naming a few
distinct partitions, split into produce requests by a routing policy.

A group of ``count`` producers sending ``sends_per_s`` each is one Poisson
process at the summed rate (superposition gives the same arrivals).  A send
is what a Kafka producer's sender thread drains in one round: batches for
``partitions_per_send`` partitions; like Kafka's, it makes one produce
request per destination broker.  Routing reads the real
:class:`StaticMetadata` as this AZ's clients last learned it.
"""

from __future__ import annotations

import bisect
import itertools
import math
import random
from collections.abc import Sequence

from partlog.controller.cluster_meta import StaticMetadata
from partlog.kafka.records import TopicIdPartition
from simulations.batches import BatchTemplates
from simulations.context import ProduceRequest, SimContext
from simulations.scenario import ProducerSpec, Routing

# KIP-580: each retry's backoff is jittered by +-20%.
RETRY_JITTER = 0.2
# The failure reason of batches whose producer died (its AZ was lost).
PRODUCER_GONE = "producer_gone"


def retry_backoff_ms(spec: ProducerSpec, attempt: int, rng: random.Random) -> float:
    """Kafka's ``ExponentialBackoff.backoff(attempt - 1)`` (KIP-580):
    retry.backoff.ms doubled per attempt up to the exponent that reaches
    retry.backoff.max.ms, jittered by +-20%, then capped at the max (the
    jitter never exceeds it); a constant backoff (max <= base) has no jitter."""
    base, cap = spec.retry_backoff_ms, spec.retry_backoff_max_ms
    if cap <= base:
        return float(min(base, cap))
    exp_max = math.log(cap / max(base, 1)) / math.log(2)
    term = max(base, 1) * 2 ** min(attempt - 1, exp_max)
    return min(float(cap), term * rng.uniform(1 - RETRY_JITTER, 1 + RETRY_JITTER))


class ProducerGroup:
    def __init__(
        self,
        ctx: SimContext,
        spec: ProducerSpec,
        routing: Routing,
        view: StaticMetadata,
        templates: BatchTemplates,
        partitions: list[TopicIdPartition],
        *,
        send_rng: random.Random,
        route_rng: random.Random,
        retry_rng: random.Random | None = None,
    ) -> None:
        """``send_rng`` draws send times and partitions (the same in every
        design run with one seed); ``route_rng`` the any-broker choices;
        ``retry_rng`` the retry backoff's jitter."""
        self.ctx = ctx
        self.spec = spec
        self.routing = routing
        self.view = view
        self.alive = True
        self._batch = templates.get(spec.batch_bytes)
        self._partitions = partitions
        self._indices = range(len(partitions))
        self._send_rng = send_rng
        self._route_rng = route_rng
        self._retry_rng = retry_rng or random.Random(0)
        self._rate_per_ms = spec.count * spec.sends_per_s / 1000
        # Zipf weights of the partitions (cumulative), when skewed.
        self._cum_weights: list[float] | None = None
        if spec.skew > 0:
            self._cum_weights = list(itertools.accumulate(1.0 / (k + 1) ** spec.skew for k in self._indices))

    def set_view(self, view: StaticMetadata) -> None:
        self.view = view

    def start(self) -> None:
        self.ctx.loop.after(self._send_rng.expovariate(self._rate_per_ms), self._send)

    def _choose(self) -> list[TopicIdPartition]:
        k = self.spec.partitions_per_send
        rng = self._send_rng
        cum = self._cum_weights
        if cum is None:
            return [self._partitions[i] for i in rng.sample(self._indices, k)]
        # Distinct partitions by weight: draws until k are distinct (bounded),
        # the rest uniformly among those not drawn.
        total = cum[-1]
        chosen: dict[int, None] = {}
        for _ in range(20 * k):
            chosen[bisect.bisect_left(cum, rng.random() * total)] = None
            if len(chosen) == k:
                break
        if len(chosen) < k:
            rest = [i for i in self._indices if i not in chosen]
            chosen.update(dict.fromkeys(rng.sample(rest, k - len(chosen))))
        return [self._partitions[i] for i in chosen]

    def _route(self, tps: Sequence[TopicIdPartition]) -> tuple[dict[int, list[TopicIdPartition]], int]:
        """Destination broker -> its partitions, by this AZ's view; and how
        many partitions have no known destination."""
        view = self.view
        az = self.spec.az
        by_target: dict[int, list[TopicIdPartition]] = {}
        unroutable = 0
        if self.routing is Routing.ANY_BROKER:
            # KIP-1163: a broker of the client's AZ, or any broker when its AZ has none.
            local = view.brokers_in(az) or sorted(b.broker_id for b in view.brokers())
            if local:
                by_target[self._route_rng.choice(local)] = list(tps)
            else:
                unroutable = len(tps)
        else:
            representative = self.routing is Routing.AZ_REPRESENTATIVE
            for tp in tps:
                dest = view.produce_target(tp, az) if representative else view.leader_of(tp)
                if dest is None:
                    unroutable += 1
                else:
                    by_target.setdefault(dest, []).append(tp)
        return by_target, unroutable

    def _send(self) -> None:
        if not self.alive:
            return
        ctx = self.ctx
        loop = ctx.loop
        loop.after(self._send_rng.expovariate(self._rate_per_ms), self._send)
        by_target, unroutable = self._route(self._choose())
        now = loop.now_ms
        rec = ctx.recorder
        send_id = rec.send_started(now, 0 if unroutable else len(by_target))
        if unroutable:
            # No leader known (offline partitions): the producer holds these,
            # and the send as a whole fails.
            rec.sends_failed += 1
            rec.sends_failed_live += 1
            rec.failed(now, None, 0, unroutable, "no_leader")
        batch = self._batch
        self._dispatch(send_id, {t: [(tp, batch) for tp in tps] for t, tps in by_target.items()}, -1.0, 0)

    def _dispatch(
        self,
        send_id: int,
        by_target: dict[int, list[tuple[TopicIdPartition, bytes]]],
        first_sent_ms: float,
        attempt: int,
    ) -> None:
        ctx = self.ctx
        loop = ctx.loop
        now = loop.now_ms
        rec = ctx.recorder
        spec = self.spec
        az = spec.az
        net = ctx.network
        retry = self._retry if spec.retries else None
        for target_id, batches in by_target.items():
            target = ctx.produce_targets[target_id]
            nbytes = sum(len(b) for _, b in batches)
            req = ProduceRequest(
                az,
                now,
                send_id,
                tuple(batches),
                nbytes,
                spec.acks_all,
                spec.request_timeout_ms,
                retry,
                first_sent_ms,
                attempt,
            )
            rec.produce_requests += 1
            rec.produce_bytes += nbytes
            if target.az != az:
                rec.cross_az_data_bytes += nbytes
            loop.at(now + net.one_way_ms(az, target.az), target.on_produce, req)

    # -------------------------------------------------------------- retries

    def _retry(self, req: ProduceRequest, batches: Sequence[tuple[TopicIdPartition, bytes]], why: str) -> bool:
        """Kafka's producer on a failed request: the batches go again after
        the backoff, unless delivery.timeout.ms would pass first."""
        spec = self.spec
        if not batches:
            return False
        if not self.alive:
            # Its AZ was lost with it: the batches die with the producer,
            # which is not a failure a live client would see.
            self.ctx.recorder.failed(self.ctx.loop.now_ms, req.send_id, 1, len(batches), PRODUCER_GONE)
            return True
        loop = self.ctx.loop
        attempt = req.attempt + 1
        backoff = retry_backoff_ms(spec, attempt, self._retry_rng)
        if loop.now_ms + backoff - req.since_ms >= spec.delivery_timeout_ms:
            return False
        self.ctx.recorder.retried(loop.now_ms, req.send_id, len(batches), why)
        loop.after(backoff, self._resend, req, tuple(batches), attempt)
        return True

    def _resend(self, req: ProduceRequest, batches: tuple[tuple[TopicIdPartition, bytes], ...], attempt: int) -> None:
        rec = self.ctx.recorder
        now = self.ctx.loop.now_ms
        if not self.alive:
            rec.failed(now, req.send_id, 1, len(batches), PRODUCER_GONE)
            return
        by_tp = dict(batches)
        by_target, unroutable = self._route([tp for tp, _ in batches])
        if unroutable:
            rec.failed(now, req.send_id, 1, len(batches), "no_leader")
            return
        # The failed request is replaced by one per destination now.
        rec.requests_replaced(req.send_id, len(by_target))
        grouped = {t: [(tp, by_tp[tp]) for tp in tps] for t, tps in by_target.items()}
        self._dispatch(req.send_id, grouped, req.since_ms, attempt)
