"""Design (b): KIP-1164's central batch coordinator, as a commit target.

Every broker's pipeline sends each WAL file's commit to this one node (its
``leader_of`` answers the coordinator for every partition), so a file costs
exactly one commit RPC, cross-AZ for brokers outside the coordinator's AZ.
The commits themselves run on a real :class:`MetadataStore` (sequencing,
offsets); the latency is KIP-1163's coordinator commit latency.  The
coordinator's own state is replicated (KIP-1164 keeps it in a topic) with
``coordinator_replication_factor`` replicas, one per other AZ first, the
rest in its own AZ; as partlog's followers, each replica fetches a commit's
entries (one ``replica_fetch`` answer, sized by the real encoder) and has
them one network one-way plus its own append (``follower_apply``) after the
coordinator appended them.  Its commit latency (KIP-1163's figure) already
includes its replication, so that is not added to the answer.
"""

from __future__ import annotations

from partlog.kafka.errors import Errors
from partlog.produce.pipeline import SendCommit
from partlog.store import MetadataStore
from simulations.context import CommitSender, SimContext
from simulations.latency import LatencySampler
from simulations.topology import COORDINATOR_ID
from simulations.wire_bytes import commit_response_bytes, replica_fetch_response_bytes


class SimCoordinator:
    def __init__(
        self, ctx: SimContext, az: str, store: MetadataStore, commit: LatencySampler, follower_apply: LatencySampler
    ) -> None:
        self.ctx = ctx
        self.node_id = COORDINATOR_ID
        self.az = az
        self.alive = True
        self.store = store
        self._commit = commit
        self._follower_apply = follower_apply
        scenario = ctx.scenario
        replicas = scenario.commit.coordinator_replication_factor - 1
        other_azs = [a for a in scenario.cluster.azs if a != az]
        # The AZ of each replica of its state: other AZs first, then its own.
        self._replica_azs = other_azs[:replicas] + [az] * max(0, replicas - len(other_azs))
        self._timeout_ms = scenario.commit.commit_rpc_timeout_ms

    def receive_commit(self, sender: CommitSender, c: SendCommit, sent_ms: float) -> None:
        ctx = self.ctx
        loop = ctx.loop
        if not self.alive:
            # Nobody answers: the sender's RPC times out.
            loop.at(
                max(loop.now_ms, sent_ms + self._timeout_ms), sender.commit_answered, c, None, Errors.REQUEST_TIMED_OUT
            )
            return
        rec = ctx.recorder
        rec.commit_received(self.node_id, True)
        responses = self.store.commit_file(c.key, sender.node_id, c.file_size, list(c.requests))
        if self._replica_azs:
            net = ctx.network
            fetch_bytes = 0
            lag = 0.0
            for replica_az in self._replica_azs:
                lag = max(lag, net.one_way_ms(self.az, replica_az) + self._follower_apply.sample())
                if replica_az != self.az:
                    if not fetch_bytes:
                        fetch_bytes = replica_fetch_response_bytes(c.key, sender.node_id, c.file_size, c.requests)
                    rec.cross_az_replication_bytes += fetch_bytes
            rec.replication_lag_ms.append(lag)
        if sender.az != self.az:
            # (the request's bytes are counted by the sender)
            rec.cross_az_commit_bytes += commit_response_bytes(responses)
        ready = loop.now_ms + self._commit.sample()
        back = ctx.network.deliver_at(self.node_id, sender.node_id, self.az, sender.az, ready)
        loop.at(back, sender.commit_answered, c, responses, Errors.NONE)
