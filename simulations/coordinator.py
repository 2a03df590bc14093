"""Design (b): KIP-1164's central batch coordinator, as a commit target.

Every broker's pipeline sends each WAL file's commit to this one node (its
``leader_of`` answers the coordinator for every partition), so a file costs
exactly one commit RPC, cross-AZ for brokers outside the coordinator's AZ.
The commits themselves run on a real :class:`MetadataStore` (sequencing,
offsets).  Its cost is the same model as a partlog leader's
(:mod:`simulations.commit_server`: a FIFO group-commit server), with the
scenario's coordinator store, by default the leaders' own.

Its state is replicated (KIP-1164 keeps it in a topic) with
``coordinator_replication_factor`` replicas, one per other AZ first, the
rest in its own AZ.  As partlog's followers, each replica fetches a commit's
entries (one ``replica_fetch`` answer, sized by the real encoder) and has
them one network one-way plus its own append (``follower_apply``) after the
coordinator appended them; an acks=all commit is answered after the slowest
replica's round trip plus its append, exactly as a partlog leader answers
one (the same rule on both sides).
"""

from __future__ import annotations

from collections.abc import Sequence

from partlog.kafka.errors import Errors
from partlog.kafka.records import CommitBatchResponse
from partlog.produce.pipeline import SendCommit
from partlog.store import MetadataStore
from simulations.commit_server import CommitServer
from simulations.context import CommitSender, SimContext
from simulations.latency import LatencySampler
from simulations.scenario import FailureMode
from simulations.topology import COORDINATOR_ID
from simulations.wire_bytes import commit_response_bytes, replica_fetch_response_bytes


class SimCoordinator:
    def __init__(
        self, ctx: SimContext, az: str, store: MetadataStore, server: CommitServer, follower_apply: LatencySampler
    ) -> None:
        self.ctx = ctx
        self.node_id = COORDINATOR_ID
        self.az = az
        self.alive = True
        self.dead_mode = FailureMode.REFUSE
        self.store = store
        self.server = server
        self._follower_apply = follower_apply
        scenario = ctx.scenario
        replicas = scenario.commit.coordinator_replication_factor - 1
        other_azs = [a for a in scenario.cluster.azs if a != az]
        # The AZ of each replica of its state: other AZs first, then its own.
        self._replica_azs = other_azs[:replicas] + [az] * max(0, replicas - len(other_azs))

    def fail(self, mode: FailureMode = FailureMode.REFUSE) -> None:
        """It dies with what its store's queue held.  Its state survives in
        its replicas (KIP-1164's topic)."""
        self.alive = False
        self.dead_mode = mode
        self.server.abort()

    def take_over(self, az: str, live_azs: Sequence[str]) -> None:
        """A replica in ``az`` is the coordinator now, with the same state
        (the same store: what was committed stays committed); its replicas
        are in the other live AZs first."""
        self.az = az
        self.alive = True
        self.set_live_azs(live_azs)

    def set_live_azs(self, live_azs: Sequence[str]) -> None:
        """Its replicas are placed again over ``live_azs`` (the lost AZs'
        replicas left the state topic's ISR at their fencing)."""
        replicas = self.ctx.scenario.commit.coordinator_replication_factor - 1
        others = [a for a in live_azs if a != self.az]
        self._replica_azs = others[:replicas] + [self.az] * max(0, replicas - len(others))

    def receive_commit(self, sender: CommitSender, c: SendCommit, sent_ms: float) -> None:
        if not self.alive:
            self.ctx.dead_commit_target(self, sender, c, sent_ms, self.dead_mode)
            return
        self.ctx.recorder.commit_received(self.node_id, True)
        responses = self.store.commit_file(c.key, sender.node_id, c.file_size, list(c.requests))
        self.server.submit(len(c.requests), self._committed, sender, c, responses, sent_ms)

    def _committed(
        self, sender: CommitSender, c: SendCommit, responses: list[CommitBatchResponse], sent_ms: float
    ) -> None:
        if not self.alive:
            self.ctx.dead_commit_target(self, sender, c, sent_ms, self.dead_mode)
            return
        ctx = self.ctx
        rec = ctx.recorder
        net = ctx.network
        wait = 0.0
        if self._replica_azs:
            rec.replica_fetches += len(self._replica_azs)
            fetch_bytes = 0
            lag = 0.0
            ack = 0.0
            now = ctx.loop.now_ms
            for replica_az in self._replica_azs:
                until = ctx.az_dead_until_ms.get(replica_az)
                if until is not None:
                    # A replica in a lost AZ, not yet out of the ISR: acks=all waits.
                    ack = max(ack, until - now)
                    continue
                rtt = net.rtt_ms(self.az, replica_az)
                apply = self._follower_apply.sample()
                lag = max(lag, rtt / 2 + apply)
                ack = max(ack, rtt + apply)
                if replica_az != self.az:
                    if not fetch_bytes:
                        fetch_bytes = replica_fetch_response_bytes(c.key, sender.node_id, c.file_size, c.requests)
                    rec.cross_az_replication_bytes += fetch_bytes
            rec.replication_lag_ms.append(lag)
            if any(c.acks_all):
                wait = ack
        ctx.loop.after(wait, self._answer, sender, c, responses, sent_ms)

    def _answer(
        self, sender: CommitSender, c: SendCommit, responses: list[CommitBatchResponse], sent_ms: float
    ) -> None:
        """After the replication wait: answer, if still alive then."""
        ctx = self.ctx
        if not self.alive:
            ctx.dead_commit_target(self, sender, c, sent_ms, self.dead_mode)
            return
        if sender.az != self.az:
            # (the request's bytes are counted by the sender)
            ctx.recorder.cross_az_commit_bytes += commit_response_bytes(responses)
        back = ctx.network.deliver_at(self.node_id, sender.node_id, self.az, sender.az, ctx.loop.now_ms)
        ctx.loop.at(back, sender.commit_answered, c, responses, Errors.NONE)
