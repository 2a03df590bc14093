"""A simulated broker: the real :class:`ProducePipeline` driven on the
virtual clock, and (in the partlog design) the leader side of commits on a
real :class:`MetadataStore`.

It performs the pipeline's actions as ``partlog/broker/produce_driver.py``
does; the order rules (admission in arrival order, the per-leader window of
commits in flight, WAL-file order) are the pipeline's, not this shell's:

* ``Upload``: a PUT to the object store (here: a sampled latency, then
  ``upload_done``);
* ``SendCommit``: sent in the order given over one connection per leader
  (here: FIFO delivery per connection, :mod:`simulations.network`); the one
  for this broker is a direct call;
* ``Reply``: the produce request's answer, back to its producer;
* a timer calls ``tick`` at ``next_deadline_ms``;
* admission: a request waits here until the pipeline finds it
  ``admissible`` (a Reply frees room).

A commit to a dead or unreachable leader is answered ``REQUEST_TIMED_OUT``
after ``commit_rpc_timeout_ms``.

As a leader it refuses batches of partitions it does not lead (by its own,
possibly stale, metadata: ``NOT_LEADER_OR_FOLLOWER``, as
``partlog/replication/manager.py``) and appends the rest with ``commit_file``.
Replication to followers is modelled, not run: a follower has an entry one
network one-way plus its own append (``follower_apply``) after the leader
appended it, and an acks=all answer waits for the slowest follower's round
trip plus its append (KIP-1166: the parked fetch returns at once, the
follower's next fetch carries its new end offset).  Each follower in another
AZ fetches the entries of the partitions it follows: one ``replica_fetch``
answer per commit, sized by the real encoder.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Sequence

from partlog.controller.cluster_meta import NO_LEADER, StaticMetadata
from partlog.kafka.errors import Errors
from partlog.kafka.records import CommitBatchResponse, TopicIdPartition
from partlog.produce.pipeline import Action, ProduceConfig, ProducePipeline, Release, Reply, SendCommit, Upload
from partlog.store import MetadataStore
from simulations.commit_server import CommitServer
from simulations.context import CommitSender, ProduceRequest, SimContext
from simulations.latency import LatencySampler
from simulations.metrics import FileCommits
from simulations.scenario import FailureMode
from simulations.wire_bytes import commit_request_bytes, commit_response_bytes, replica_fetch_response_bytes

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
        server: CommitServer | None,
        follower_apply: LatencySampler,
    ) -> None:
        """``store``: the broker leads partitions (partlog design); None
        when commits go elsewhere; ``server``: the cost model of its
        store's commits (with ``store``).  ``commit_leader_of``: where the
        pipeline sends commits (None: to the partition leader by this
        broker's view)."""
        self.ctx = ctx
        self.node_id = broker_id
        self.az = ctx.broker_azs[broker_id]
        self.alive = True
        self.dead_mode = FailureMode.REFUSE
        self.store = store
        self._fixed_leader_of = commit_leader_of
        self._rng = rng
        self._put = put
        self.server = server
        self._follower_apply = follower_apply
        self._put_bytes_per_ms = ctx.scenario.object_store.put_bytes_per_s / 1000
        self.view = view
        self.pipeline = ProducePipeline(
            broker_id,
            config,
            leader_of=commit_leader_of or view.leader_of,
            rand_hex=lambda: f"{rng.getrandbits(64):016x}",
        )
        self._next_produce_id = 0
        self._inflight: dict[int, ProduceRequest] = {}
        # Requests the pipeline has not admitted yet, with their tickets.
        self._waiting: deque[tuple[ProduceRequest, int]] = deque()
        self._tick_at: int | None = None
        # segment id -> partitions in its footer, until its commits leave
        # (or it is released with none)
        self._segment_partitions: dict[int, tuple[TopicIdPartition, ...]] = {}
        # segments whose upload has started and not finished
        self._uploading: set[int] = set()
        # id(commit) -> when it was sent (for commit_rpc_ms)
        self._commit_sent_ms: dict[int, float] = {}
        self._followers_cache: dict[TopicIdPartition, tuple[int, ...]] = {}

    # ------------------------------------------------------------ metadata

    def set_view(self, view: StaticMetadata) -> None:
        """New metadata reached this broker: the pipeline routes by it from now on."""
        self.view = view
        self._followers_cache.clear()
        if self._fixed_leader_of is None:
            self.pipeline.leader_of = view.leader_of

    def fail(self, mode: FailureMode = FailureMode.REFUSE) -> None:
        """The process dies: everything it holds is lost, nothing it had
        scheduled happens (each handler checks ``alive``).  ``mode``: what
        the nodes talking to it see from now on."""
        if not self.alive:
            return
        self.alive = False
        self.dead_mode = mode
        if self.server is not None:
            self.server.abort()
        for r in [*self._inflight.values(), *(r for r, _ in self._waiting)]:
            self.ctx.dead_target(r, mode, "broker_died")
        self._inflight.clear()
        self._waiting.clear()
        self._segment_partitions.clear()
        self._uploading.clear()
        self._commit_sent_ms.clear()

    # ------------------------------------------------------------- produce

    def on_produce(self, req: ProduceRequest) -> None:
        if not self.alive:
            self.ctx.dead_target(req, self.dead_mode)
            return
        ticket = self.pipeline.arrive(req.nbytes)
        if self.pipeline.admissible(ticket):
            self._admit(req, ticket)
        elif len(self._waiting) >= WAITING_PRODUCES_MAX:
            self.pipeline.leave(ticket)
            self.ctx.produce_failed(req, req.batches, "overloaded")
        else:
            self._waiting.append((req, ticket))

    def _admit(self, req: ProduceRequest, ticket: int) -> None:
        self.pipeline.leave(ticket)
        produce_id = self._next_produce_id
        self._next_produce_id += 1
        self._inflight[produce_id] = req
        self._perform(self.pipeline.produce(produce_id, req.batches, self.ctx.now_ms(), acks_all=req.acks_all))

    def _admit_waiting(self) -> None:
        while self._waiting and self.pipeline.admissible(self._waiting[0][1]):
            self._admit(*self._waiting.popleft())

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
        for c in commits:
            self._send_commit(c)
        if replied and self._waiting:
            self._admit_waiting()
        self._arm_tick()

    def _upload(self, up: Upload) -> None:
        rec = self.ctx.recorder
        rec.puts += 1
        rec.put_log.append((self.ctx.loop.now_ms, self.node_id, up.reason.value))
        self._segment_partitions[up.segment_id] = up.partitions
        self._uploading.add(up.segment_id)
        error = None
        error_rate = self.ctx.scenario.object_store.put_error_rate
        if error_rate and self._rng.random() < error_rate:
            error = "simulated PUT failure"
            rec.puts_failed += 1
        took = self._put.sample() + len(up.data) / self._put_bytes_per_ms
        self.ctx.loop.after(took, self._upload_done, up.segment_id, error)

    def _upload_done(self, segment_id: int, error: str | None) -> None:
        if not self.alive:
            return
        self._uploading.discard(segment_id)
        if error is not None:
            self._segment_partitions.pop(segment_id, None)
        actions = self.pipeline.upload_done(segment_id, self.ctx.now_ms(), error)
        self._record_fanout(self.pipeline.last_released)
        self._perform(actions)
        # The pipeline releases segments in order once every earlier upload
        # finished; one released without a commit (no partition had a
        # known leader) is not in last_released: forget it here.
        floor = min(self._uploading, default=None)
        done = [s for s in self._segment_partitions if floor is None or s < floor]
        for s in done:
            del self._segment_partitions[s]

    def _record_fanout(self, released: tuple[Release, ...]) -> None:
        # Per released segment, where its commits go (this broker, its AZ,
        # another AZ), as the broker's produce driver counts them.
        now = self.ctx.loop.now_ms
        view = self.view
        azs = self.ctx.broker_azs
        for release in released:
            local = sum(1 for leader in release.leaders if leader == self.node_id)
            same = sum(1 for leader in release.leaders if leader != self.node_id and self._target_az(leader) == self.az)
            cross = len(release.leaders) - local - same
            parts = self._segment_partitions.pop(release.segment_id, ())
            # Counted from the file's footer and this broker's metadata, not
            # from the pipeline's commits: the two agree only if the
            # pipeline sends one commit per leader.
            leaders: set[int] = set()
            readers: set[int] = set()
            for tp in parts:
                p = view.partition(tp)
                if p is not None:
                    leaders.add(p.leader)
                    readers.update(p.replicas)
            leaders.discard(NO_LEADER)
            self.ctx.recorder.files.append(
                FileCommits(
                    now,
                    self.node_id,
                    local,
                    same,
                    cross,
                    len(parts),
                    len(leaders),
                    len(readers),
                    len({azs[r] for r in readers}),
                )
            )

    def _target_az(self, node_id: int) -> str:
        return self.ctx.commit_targets[node_id].az

    def _reply(self, reply: Reply) -> None:
        req = self._inflight.pop(reply.produce_id)
        ctx = self.ctx
        errors = [r.error for r in reply.results if r.error != Errors.NONE]
        arrival = ctx.loop.now_ms + ctx.network.one_way_ms(self.az, req.producer_az)
        if errors:
            # The producer learns it when the answer arrives.
            bad = {r.topic_id_partition for r in reply.results if r.error != Errors.NONE}
            failed = tuple(b for b in req.batches if b[0] in bad)
            ctx.loop.at(arrival, ctx.produce_failed, req, failed, errors[0].name.lower())
            return
        ctx.produce_answered(req, arrival)

    # ------------------------------------------------------------- commits

    def _send_commit(self, c: SendCommit) -> None:
        ctx = self.ctx
        target = ctx.commit_targets[c.leader_broker_id]
        now = ctx.loop.now_ms
        self._commit_sent_ms[id(c)] = now
        if target is self:
            self.receive_commit(self, c, now)
            return
        if target.az != self.az:
            ctx.recorder.cross_az_commit_bytes += commit_request_bytes(c, self.node_id)
        arrival = ctx.network.deliver_at(self.node_id, target.node_id, self.az, target.az, now)
        ctx.loop.at(arrival, target.receive_commit, self, c, now)

    def commit_answered(self, c: SendCommit, responses: Sequence[CommitBatchResponse] | None, error: Errors) -> None:
        if not self.alive:
            return
        sent = self._commit_sent_ms.pop(id(c), None)
        if sent is not None:
            # As the broker's commit_ms: from the send to the answer.
            self.ctx.recorder.commit_rpc_ms.append(self.ctx.loop.now_ms - sent)
        actions = self.pipeline.commit_done(c.segment_id, c.leader_broker_id, responses, self.ctx.now_ms(), error)
        # The commits the freed slot lets out come first: they go out before
        # the answers are handled, as the broker's sender takes them at once.
        first = 0
        for a in actions:
            if not isinstance(a, SendCommit):
                break
            self._send_commit(a)
            first += 1
        self._perform(actions[first:])

    def receive_commit(self, sender: CommitSender, c: SendCommit, sent_ms: float) -> None:
        """This broker as the leader: one commit RPC (sent at ``sent_ms``) arrived."""
        ctx = self.ctx
        if not self.alive:
            ctx.dead_commit_target(self, sender, c, sent_ms, self.dead_mode)
            return
        ctx.recorder.commit_received(self.node_id, sender is not self)
        assert self.store is not None, "a broker without a store received a commit"
        leader_of = self.view.leader_of
        me = self.node_id
        requests = c.requests
        mine = [i for i, r in enumerate(requests) if leader_of(r.topic_id_partition) == me]
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
        if not mine:
            self._answer(sender, c, answers, 0.0, sent_ms)
            return
        # Sequenced now (arrival order is the server's order); answered
        # once its group commit is served and, for acks=all, replicated.
        assert self.server is not None, "a broker with a store has a commit server"
        self.server.submit(len(mine), self._committed, sender, c, answers, mine, sent_ms)

    def _committed(
        self, sender: CommitSender, c: SendCommit, answers: list[CommitBatchResponse], mine: list[int], sent_ms: float
    ) -> None:
        if not self.alive:
            # It died with the commit in its store's queue.
            self.ctx.dead_commit_target(self, sender, c, sent_ms, self.dead_mode)
            return
        self._answer(sender, c, answers, self._replicate(c, sender.node_id, mine), sent_ms)

    def _answer(
        self, sender: CommitSender, c: SendCommit, answers: list[CommitBatchResponse], wait_ms: float, sent_ms: float
    ) -> None:
        """Answer after ``wait_ms`` (acks=all: the replication), if still alive then."""
        if wait_ms > 0:
            self.ctx.loop.after(wait_ms, self._answer, sender, c, answers, 0.0, sent_ms)
            return
        ctx = self.ctx
        if not self.alive:
            ctx.dead_commit_target(self, sender, c, sent_ms, self.dead_mode)
            return
        if sender.az != self.az:
            ctx.recorder.cross_az_commit_bytes += commit_response_bytes(answers)
        back = ctx.network.deliver_at(self.node_id, sender.node_id, self.az, sender.az, ctx.loop.now_ms)
        ctx.loop.at(back, sender.commit_answered, c, answers, Errors.NONE)

    def _followers(self, tp: TopicIdPartition) -> tuple[int, ...]:
        """The followers in the partition's ISR, by this broker's view;
        cached until the view changes."""
        got = self._followers_cache.get(tp)
        if got is None:
            p = self.view.partition(tp)
            got = tuple(r for r in p.isr if r != self.node_id) if p is not None else ()
            self._followers_cache[tp] = got
        return got

    def _replicate(self, c: SendCommit, uploader: int, mine: list[int]) -> float:
        """Model the followers fetching the new entries: count the cross-AZ
        bytes, record the lag, and return how long an acks=all answer waits."""
        ctx = self.ctx
        requests = c.requests
        # follower -> indices (into requests) of the entries it fetches
        per_follower: dict[int, list[int]] = {}
        for i in mine:
            for f in self._followers(requests[i].topic_id_partition):
                per_follower.setdefault(f, []).append(i)
        if not per_follower:
            return 0.0
        azs = ctx.broker_azs
        rec = ctx.recorder
        rec.replica_fetches += len(per_follower)
        net = ctx.network
        lag = 0.0
        ack = 0.0
        for f in sorted(per_follower):
            stall = ctx.ack_stall_ms(f)
            if stall is not None:
                ack = max(ack, stall)
                continue
            rtt = net.rtt_ms(self.az, azs[f])
            apply = self._follower_apply.sample()
            lag = max(lag, rtt / 2 + apply)
            ack = max(ack, rtt + apply)
            if azs[f] != self.az:
                rec.cross_az_replication_bytes += replica_fetch_response_bytes(
                    c.key, uploader, c.file_size, [requests[i] for i in per_follower[f]]
                )
        rec.replication_lag_ms.append(lag)
        acks_all = c.acks_all and any(c.acks_all[i] for i in mine)
        return ack if acks_all else 0.0
