"""Design (c): classic Kafka replication, for its cross-AZ bytes and a
first-order latency.

No pipeline and no object store: a producer sends each partition's batches
to its leader, wherever it is; the leader appends and the followers fetch
the records.  Cross-AZ data: the produce request when the leader is in
another AZ, plus one copy per follower in another AZ.  Latency: network to
the leader, an append (the same apply model as partlog's leader), with
acks=all the slowest follower's round trip plus its append
(``follower_apply``), and back; replication lag, as for partlog, the slowest
follower's one-way plus its append.  Disk and bandwidth queueing are not
modelled.
"""

from __future__ import annotations

from partlog.controller.cluster_meta import StaticMetadata
from simulations.context import ProduceRequest, SimContext
from simulations.latency import LatencySampler
from simulations.scenario import FailureMode


class ClassicLeader:
    def __init__(
        self,
        ctx: SimContext,
        broker_id: int,
        view: StaticMetadata,
        apply: LatencySampler,
        follower_apply: LatencySampler,
    ) -> None:
        self.ctx = ctx
        self.node_id = broker_id
        self.az = ctx.broker_azs[broker_id]
        self.alive = True
        self.dead_mode = FailureMode.REFUSE
        self.view = view
        self._apply = apply
        self._follower_apply = follower_apply

    def set_view(self, view: StaticMetadata) -> None:
        self.view = view

    def fail(self, mode: FailureMode = FailureMode.REFUSE) -> None:
        self.alive = False
        self.dead_mode = mode

    def on_produce(self, req: ProduceRequest) -> None:
        ctx = self.ctx
        rec = ctx.recorder
        if not self.alive:
            ctx.dead_target(req, self.dead_mode)
            return
        azs = ctx.broker_azs
        me = self.node_id
        followers: set[int] = set()
        cross_bytes = 0
        not_led = []
        for tp, batch in req.batches:
            p = self.view.partition(tp)
            if p is None or p.leader != me:
                not_led.append((tp, batch))
                continue
            for r in p.isr:
                if r != me:
                    followers.add(r)
                    if azs[r] != self.az:
                        cross_bytes += len(batch)
        rec.cross_az_data_bytes += cross_bytes
        net = ctx.network
        done = ctx.loop.now_ms + self._apply.sample()
        if followers:
            rec.replica_fetches += len(followers)
            lag = 0.0
            ack = 0.0
            for f in sorted(followers):
                stall = ctx.ack_stall_ms(f)
                if stall is not None:
                    ack = max(ack, stall)
                    continue
                rtt = net.rtt_ms(self.az, azs[f])
                apply = self._follower_apply.sample()
                lag = max(lag, rtt / 2 + apply)
                ack = max(ack, rtt + apply)
            rec.replication_lag_ms.append(lag)
            if req.acks_all:
                done += ack
        arrival = done + net.one_way_ms(self.az, req.producer_az)
        if not_led:
            # The batches it leads are appended; the others fail (and the
            # producer retries them, by then perhaps at the new leader).
            ctx.loop.at(arrival, ctx.produce_failed, req, tuple(not_led), "not_leader_or_follower")
            return
        ctx.produce_answered(req, arrival)
