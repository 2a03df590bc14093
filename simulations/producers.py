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

import random

from partlog.controller.cluster_meta import StaticMetadata
from partlog.kafka.records import TopicIdPartition
from simulations.batches import BatchTemplates
from simulations.context import ProduceRequest, SimContext
from simulations.scenario import ProducerSpec, Routing


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
    ) -> None:
        """``send_rng`` draws send times and partitions (the same in every
        design run with one seed); ``route_rng`` the any-broker choices."""
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
        self._rate_per_ms = spec.count * spec.sends_per_s / 1000

    def set_view(self, view: StaticMetadata) -> None:
        self.view = view

    def start(self) -> None:
        self.ctx.loop.after(self._send_rng.expovariate(self._rate_per_ms), self._send)

    def _send(self) -> None:
        if not self.alive:
            return
        ctx = self.ctx
        loop = ctx.loop
        loop.after(self._send_rng.expovariate(self._rate_per_ms), self._send)
        spec = self.spec
        parts = self._partitions
        chosen = [parts[i] for i in self._send_rng.sample(self._indices, spec.partitions_per_send)]
        view = self.view
        az = spec.az
        rec = ctx.recorder
        by_target: dict[int, list[TopicIdPartition]] = {}
        unroutable = 0
        if self.routing is Routing.ANY_BROKER:
            local = view.brokers_in(az)
            if local:
                by_target[self._route_rng.choice(local)] = chosen
            else:
                unroutable = len(chosen)
        else:
            representative = self.routing is Routing.AZ_REPRESENTATIVE
            for tp in chosen:
                dest = view.produce_target(tp, az) if representative else view.leader_of(tp)
                if dest is None:
                    unroutable += 1
                else:
                    by_target.setdefault(dest, []).append(tp)
        now = loop.now_ms
        send_id = rec.send_started(now, 0 if unroutable else len(by_target))
        if unroutable:
            # No leader known (offline partitions): the producer holds these,
            # and the send as a whole fails.
            rec.sends_failed += 1
            rec.failed(now, None, 0, unroutable, "no_leader")
        batch = self._batch
        net = ctx.network
        for target_id, tps in by_target.items():
            target = ctx.produce_targets[target_id]
            nbytes = len(batch) * len(tps)
            req = ProduceRequest(az, now, send_id, tuple((tp, batch) for tp in tps), nbytes, spec.acks_all)
            rec.produce_requests += 1
            rec.produce_bytes += nbytes
            if target.az != az:
                rec.cross_az_data_bytes += nbytes
            loop.at(now + net.one_way_ms(az, target.az), target.on_produce, req)
