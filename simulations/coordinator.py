"""Design (b): KIP-1164's central batch coordinator, as a commit target.

Every broker's pipeline sends each WAL file's commit to this one node (its
``leader_of`` answers the coordinator for every partition), so a file costs
exactly one commit RPC, cross-AZ for brokers outside the coordinator's AZ.
The commits themselves run on a real :class:`MetadataStore` (sequencing,
offsets); the latency is KIP-1163's coordinator commit latency.  The
coordinator's own state is replicated (KIP-1164 keeps it in a topic): each
commit's request bytes cross AZs once per other replica.
"""

from __future__ import annotations

from partlog.errors import Errors
from partlog.produce_pipeline import SendCommit
from partlog.store import MetadataStore
from simulations.context import CommitSender, SimContext
from simulations.latency import LatencySampler
from simulations.topology import COORDINATOR_ID
from simulations.wire_bytes import commit_request_bytes, commit_response_bytes


class SimCoordinator:
    def __init__(self, ctx: SimContext, az: str, store: MetadataStore, commit: LatencySampler) -> None:
        self.ctx = ctx
        self.node_id = COORDINATOR_ID
        self.az = az
        self.alive = True
        self.store = store
        self._commit = commit
        # Replicas of its state outside its own AZ (one per other AZ at most).
        self._cross_az_replicas = min(
            ctx.scenario.commit.coordinator_replication_factor - 1, len(ctx.scenario.cluster.azs) - 1
        )

    def receive_commit(self, sender: CommitSender, c: SendCommit) -> None:
        ctx = self.ctx
        loop = ctx.loop
        if not self.alive:
            loop.after(
                ctx.network.one_way_ms(self.az, sender.az), sender.commit_answered, c, None, Errors.NETWORK_EXCEPTION
            )
            return
        rec = ctx.recorder
        rec.commit_received(self.node_id, True)
        responses = self.store.commit_file(c.key, sender.node_id, c.file_size, list(c.requests))
        if self._cross_az_replicas:
            rec.cross_az_metadata_bytes += self._cross_az_replicas * commit_request_bytes(c, sender.node_id)
        if sender.az != self.az:
            rec.cross_az_metadata_bytes += commit_response_bytes(responses)
        ready = loop.now_ms + self._commit.sample()
        back = ctx.network.deliver_at(self.node_id, sender.node_id, self.az, sender.az, ready)
        loop.at(back, sender.commit_answered, c, responses, Errors.NONE)
