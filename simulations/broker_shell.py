"""A simulated broker: the real :class:`ProducePipeline` driven on the
virtual clock, and (in the partlog design) the leader side of commits on a
real :class:`MetadataStore`.

It does what ``partlog/broker.py`` does with the pipeline's actions:

* ``Upload``: a PUT to the object store (here: a sampled latency, then
  ``upload_done``);
* ``SendCommit``: queued per leader and sent in release order over one
  connection (here: FIFO delivery per connection, :mod:`simulations.network`);
  the one for this broker is a direct call;
* ``Reply``: the produce request's answer, back to its producer;
* a timer calls ``tick`` at ``next_deadline_ms``;
* back-pressure: a request waits while ``room_bytes`` is short.

As a leader it refuses batches of partitions it does not lead (by its own,
possibly stale, metadata: ``NOT_LEADER_OR_FOLLOWER``, as
``partlog/replication.py``) and appends the rest with ``commit_file``.
Replication to followers is modelled, not run: a follower has an entry one
network one-way after the leader appended it, and an acks=all answer waits a
round trip to the slowest follower (KIP-1166: the parked fetch returns at
once, the follower's next fetch carries its new end offset).
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Sequence

from partlog.cluster_meta import StaticMetadata
from partlog.errors import Errors
from partlog.produce_pipeline import Action, ProduceConfig, ProducePipeline, Reply, SendCommit, Upload
from partlog.records import CommitBatchResponse, TopicIdPartition
from partlog.store import MetadataStore
from simulations.context import CommitSender, ProduceRequest, SimContext
from simulations.latency import LatencySampler
from simulations.metrics import FileCommits
from simulations.wire_bytes import METADATA_ENTRY_BYTES, commit_request_bytes, commit_response_bytes

# Produce requests a broker holds back while its buffer is full.  A real
# broker stops reading sockets; producers time out after delivery.timeout.ms.
# Beyond this many, requests fail at once (the run is overloaded anyway).
WAITING_PRODUCES_MAX = 100_000


class SimBroker:
    def __init__(
        self,
        ctx: SimContext,
        broker_id: int,
        config: ProduceConfig,
        view: StaticMetadata,
        *,
        store: MetadataStore | None,
        commit_leader_of: Callable[[TopicIdPartition], int | None] | None,
        rng: random.Random,
        put: LatencySampler,
        apply: LatencySampler,
    ) -> None:
        """``store``: the broker leads partitions (partlog design); None
        when commits go elsewhere.  ``commit_leader_of``: where the pipeline
        sends commits (None: to the partition leader by this broker's view)."""
        self.ctx = ctx
        self.node_id = broker_id
        self.az = ctx.broker_azs[broker_id]
        self.alive = True
        self.store = store
        self._fixed_leader_of = commit_leader_of
        self._rng = rng
        self._put = put
        self._apply = apply
        self.view = view
        self.pipeline = ProducePipeline(
            broker_id,
            config,
            leader_of=commit_leader_of or view.leader_of,
            rand_hex=lambda: f"{rng.getrandbits(64):016x}",
        )
        self._next_produce_id = 0
        self._inflight: dict[int, ProduceRequest] = {}
        self._waiting: deque[ProduceRequest] = deque()
        self._tick_at: int | None = None
        # segment id -> partitions in its footer, until its commits leave
        self._segment_partitions: dict[int, tuple[TopicIdPartition, ...]] = {}
        self._followers_cache: dict[TopicIdPartition, tuple[tuple[int, ...], int]] = {}

    # ------------------------------------------------------------ metadata

    def set_view(self, view: StaticMetadata) -> None:
        """New metadata reached this broker: the pipeline routes by it from now on."""
        self.view = view
        self._followers_cache.clear()
        if self._fixed_leader_of is None:
            self.pipeline.leader_of = view.leader_of

    def fail(self) -> None:
        """The process dies: everything it holds is lost, nothing it had
        scheduled happens (each handler checks ``alive``)."""
        if not self.alive:
            return
        self.alive = False
        rec = self.ctx.recorder
        lost = list(self._inflight.values()) + list(self._waiting)
        rec.produce_requests_failed += len(lost)
        rec.batches_failed += sum(len(r.batches) for r in lost)
        self._inflight.clear()
        self._waiting.clear()

    # ------------------------------------------------------------- produce

    def on_produce(self, req: ProduceRequest) -> None:
        rec = self.ctx.recorder
        if not self.alive:
            # Connection refused: the producer learns it failed.
            rec.produce_requests_failed += 1
            rec.batches_failed += len(req.batches)
            return
        if self._waiting or (req.nbytes > self.pipeline.room_bytes() and self.pipeline.produces_inflight):
            if len(self._waiting) >= WAITING_PRODUCES_MAX:
                rec.produce_requests_failed += 1
                rec.batches_failed += len(req.batches)
                return
            self._waiting.append(req)
            return
        self._admit(req)

    def _admit(self, req: ProduceRequest) -> None:
        produce_id = self._next_produce_id
        self._next_produce_id += 1
        self._inflight[produce_id] = req
        self._perform(self.pipeline.produce(produce_id, req.batches, self.ctx.now_ms(), acks_all=req.acks_all))

    def _admit_waiting(self) -> None:
        pipeline = self.pipeline
        while self._waiting and (self._waiting[0].nbytes <= pipeline.room_bytes() or not pipeline.produces_inflight):
            self._admit(self._waiting.popleft())

    def _on_tick(self, deadline_ms: int) -> None:
        if not self.alive or deadline_ms != self._tick_at:
            return  # stale: a rotation by size moved the deadline
        self._tick_at = None
        self._perform(self.pipeline.tick(self.ctx.now_ms()))

    def _arm_tick(self) -> None:
        deadline = self.pipeline.next_deadline_ms()
        if deadline is not None and deadline != self._tick_at:
            self._tick_at = deadline
            ctx = self.ctx
            ctx.loop.at(max(float(deadline - ctx.epoch_ms), ctx.loop.now_ms), self._on_tick, deadline)

    # ------------------------------------------------------------- actions

    def _perform(self, actions: list[Action]) -> None:
        commits: list[SendCommit] = []
        replied = False
        for a in actions:
            if isinstance(a, SendCommit):
                commits.append(a)
            elif isinstance(a, Upload):
                self._upload(a)
            else:
                self._reply(a)
                replied = True
        if commits:
            self._record_fanout(commits)
            for c in commits:
                self._send_commit(c)
        if replied and self._waiting:
            self._admit_waiting()
        self._arm_tick()

    def _upload(self, up: Upload) -> None:
        rec = self.ctx.recorder
        rec.puts += 1
        self._segment_partitions[up.segment_id] = up.partitions
        error = None
        error_rate = self.ctx.scenario.object_store.put_error_rate
        if error_rate and self._rng.random() < error_rate:
            error = "simulated PUT failure"
            rec.puts_failed += 1
        else:
            rec.bytes_uploaded += len(up.data)
        self.ctx.loop.after(self._put.sample(), self._upload_done, up.segment_id, error)

    def _upload_done(self, segment_id: int, error: str | None) -> None:
        if not self.alive:
            return
        if error is not None:
            self._segment_partitions.pop(segment_id, None)
        self._perform(self.pipeline.upload_done(segment_id, self.ctx.now_ms(), error))

    def _record_fanout(self, commits: list[SendCommit]) -> None:
        # As partlog/broker.py's _record_fanout: per segment, where each
        # commit goes (this broker, its AZ, another AZ).
        coordinator = self._fixed_leader_of is not None
        per_segment: dict[int, list[int]] = {}
        for c in commits:
            counts = per_segment.setdefault(c.segment_id, [0, 0, 0])
            if c.leader_broker_id == self.node_id:
                counts[0] += 1
            elif self._target_az(c.leader_broker_id) == self.az:
                counts[1] += 1
            else:
                counts[2] += 1
        now = self.ctx.loop.now_ms
        for segment_id, (local, same, cross) in per_segment.items():
            parts = self._segment_partitions.pop(segment_id, ())
            if coordinator:
                leaders = {self.view.leader_of(tp) for tp in parts}
                leaders.discard(None)
                distinct = len(leaders)
            else:
                distinct = local + same + cross
            self.ctx.recorder.files.append(FileCommits(now, self.node_id, local, same, cross, len(parts), distinct))

    def _target_az(self, node_id: int) -> str:
        return self.ctx.commit_targets[node_id].az

    def _reply(self, reply: Reply) -> None:
        req = self._inflight.pop(reply.produce_id)
        rec = self.ctx.recorder
        failed = sum(1 for r in reply.results if r.error != Errors.NONE)
        if failed:
            rec.produce_requests_failed += 1
            rec.batches_failed += failed
            return
        ctx = self.ctx
        arrival = ctx.loop.now_ms + ctx.network.one_way_ms(self.az, req.producer_az)
        rec.latencies.append((req.sent_ms, arrival - req.sent_ms))

    # ------------------------------------------------------------- commits

    def _send_commit(self, c: SendCommit) -> None:
        ctx = self.ctx
        target = ctx.commit_targets[c.leader_broker_id]
        if target is self:
            self.receive_commit(self, c)
            return
        if target.az != self.az:
            ctx.recorder.cross_az_metadata_bytes += commit_request_bytes(c, self.node_id)
        arrival = ctx.network.deliver_at(self.node_id, target.node_id, self.az, target.az, ctx.loop.now_ms)
        ctx.loop.at(arrival, target.receive_commit, self, c)

    def commit_answered(self, c: SendCommit, responses: Sequence[CommitBatchResponse] | None, error: Errors) -> None:
        if not self.alive:
            return
        self._perform(self.pipeline.commit_done(c.segment_id, c.leader_broker_id, responses, self.ctx.now_ms(), error))

    def receive_commit(self, sender: CommitSender, c: SendCommit) -> None:
        """This broker as the leader: one commit RPC arrived."""
        ctx = self.ctx
        loop = ctx.loop
        net = ctx.network
        if not self.alive:
            # The process is gone; the sender's connection breaks.
            loop.after(net.one_way_ms(self.az, sender.az), sender.commit_answered, c, None, Errors.NETWORK_EXCEPTION)
            return
        ctx.recorder.commit_received(self.node_id, sender is not self)
        assert self.store is not None, "a broker without a store received a commit"
        leader_of = self.view.leader_of
        me = self.node_id
        requests = c.requests
        mine = [i for i, r in enumerate(requests) if leader_of(r.topic_id_partition) == me]
        ready = loop.now_ms
        answers: list[CommitBatchResponse]
        if len(mine) == len(requests):
            answers = self.store.commit_file(c.key, sender.node_id, c.file_size, requests)
        else:
            # Partitions this broker does not lead (its metadata moved on,
            # or the sender's is behind): refused, the rest appended.
            answers = [CommitBatchResponse(Errors.NOT_LEADER_OR_FOLLOWER, -1, -1, -1, False, r) for r in requests]
            if mine:
                committed = self.store.commit_file(c.key, sender.node_id, c.file_size, [requests[i] for i in mine])
                for i, resp in zip(mine, committed, strict=True):
                    answers[i] = resp
        if mine:
            ready += self._apply.sample() + self._replicate(c, mine)
        if sender.az != self.az:
            ctx.recorder.cross_az_metadata_bytes += commit_response_bytes(answers)
        back = net.deliver_at(me, sender.node_id, self.az, sender.az, ready)
        loop.at(back, sender.commit_answered, c, answers, Errors.NONE)

    def _followers(self, tp: TopicIdPartition) -> tuple[tuple[int, ...], int]:
        """(followers in the ISR, how many of them are in another AZ), by
        this broker's view; cached until the view changes."""
        got = self._followers_cache.get(tp)
        if got is None:
            p = self.view.partition(tp)
            azs = self.ctx.broker_azs
            followers = tuple(r for r in p.isr if r != self.node_id) if p is not None else ()
            got = (followers, sum(1 for r in followers if azs[r] != self.az))
            self._followers_cache[tp] = got
        return got

    def _replicate(self, c: SendCommit, mine: list[int]) -> float:
        """Model the followers fetching the new entries: count the cross-AZ
        bytes, record the lag, and return how long an acks=all answer waits."""
        ctx = self.ctx
        followers: set[int] = set()
        cross_entries = 0
        requests = c.requests
        for i in mine:
            fs, cross = self._followers(requests[i].topic_id_partition)
            followers.update(fs)
            cross_entries += cross
        if not followers:
            return 0.0
        ctx.recorder.cross_az_metadata_bytes += cross_entries * METADATA_ENTRY_BYTES
        azs = ctx.broker_azs
        slowest_rtt = max(ctx.network.rtt_ms(self.az, azs[f]) for f in sorted(followers))
        ctx.recorder.replication_lag_ms.append(slowest_rtt / 2)
        acks_all = c.acks_all and any(c.acks_all[i] for i in mine)
        return slowest_rtt if acks_all else 0.0
