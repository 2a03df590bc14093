"""The broker's produce path: the asyncio shell that performs what the
sans-IO :class:`partlog.produce.pipeline.ProducePipeline` decides.

* ``produce``: waits until the pipeline admits the request
  (``arrive``/``admissible``: arrival order, back-pressure), then the
  pipeline's ``produce``; the answer is its ``Reply`` (or a timeout).
* ``Upload``: a PUT to the object store in a thread, then ``upload_done``;
  walmgr is told about the new object.
* ``SendCommit``: one queue and one sender per leader, so commits reach each
  leader in the order the pipeline gives them (WAL-file order; the pipeline
  also keeps each leader's window of commits in flight): a direct call for
  this broker's own partitions (:class:`LeaderCommits`), else the ``commit``
  RPC, pipelined on the pooled connection; then ``commit_done``.
* a timer calls ``tick`` at ``next_deadline_ms``; after every input the
  deadline is read again and the timer woken when it moved earlier (a file
  opened on an idle broker closes after ``rotation_grace_ms``, one waiting
  for the PUT budget when its token comes).

Every produce request and WAL file is recorded once, in :class:`BrokerMetrics`,
with the stages of the produce path this broker sees (``queue``, ``file_open``
in the pipeline's whole milliseconds, ``upload``, ``commit_rpc``, ``reply``,
``answer``): reading the clock, never awaiting, so that the metrics change
no order of events (the simulation's digests).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence

from partlog.broker.leader_commits import LeaderCommits
from partlog.broker.metrics import BrokerMetrics
from partlog.broker.peers import Peers
from partlog.broker.tasks import Tasks
from partlog.broker.walmgr_notifier import WalmgrNotifier
from partlog.controller.cluster_meta import MetadataSource
from partlog.kafka.errors import Errors
from partlog.kafka.records import CommitBatchResponse, TopicIdPartition
from partlog.produce.pipeline import Action, BatchResult, ProducePipeline, Reply, SendCommit, Upload
from partlog.rpc.client import RpcClient, RpcConnectionError, RpcRemoteError, RpcTimeoutError
from partlog.rpc.wire import WireError, dec_commit_responses, enc_commit
from partlog.runtime import Clock
from partlog.store import StoreError
from partlog.wal.objectstore import ObjectStore

log = logging.getLogger(__name__)

# Kafka's request.timeout.ms default.
PRODUCE_TIMEOUT_MS_DEFAULT = 30_000


class ProduceDriver:
    """See the module docstring.  ``metadata()`` and ``stopping()`` read the
    broker's current metadata and whether it is stopping."""

    def __init__(
        self,
        broker_id: int,
        az: str,
        pipeline: ProducePipeline,
        objects: ObjectStore,
        *,
        commits: LeaderCommits,
        peers: Peers,
        notifier: WalmgrNotifier,
        metrics: BrokerMetrics,
        tasks: Tasks,
        metadata: Callable[[], MetadataSource],
        stopping: Callable[[], bool],
        clock: Clock,
        commit_rpc_timeout_ms: int,
    ) -> None:
        self.broker_id = broker_id
        self.az = az
        self.pipeline = pipeline
        self.objects = objects
        self.commits = commits
        self.peers = peers
        self.notifier = notifier
        self.metrics = metrics
        self.tasks = tasks
        self._metadata = metadata
        self._stopping = stopping
        self.clock = clock
        self.commit_rpc_timeout_ms = commit_rpc_timeout_ms
        self._replies: dict[int, asyncio.Future[tuple[Reply, float]]] = {}
        self._next_produce_id = 0
        # Notified when the pipeline's admission may have changed (a Reply
        # freed room, a ticket left the queue).
        self._room = asyncio.Condition()
        self._commit_queues: dict[int, asyncio.Queue[SendCommit]] = {}
        self.timer_wake = asyncio.Event()
        # What the rotation timer sleeps until (None: no file open).
        self._timer_deadline_ms: int | None = None
        self._budget_waits_seen = 0

    def cancel_replies(self) -> None:
        """The broker stops: requests still waiting for their answer fail."""
        for fut in self._replies.values():
            if not fut.done():
                fut.cancel()

    # -------------------------------------------------------------- produce

    async def produce(
        self,
        batches: Sequence[tuple[TopicIdPartition, bytes]],
        *,
        acks: int = -1,
        timeout_ms: int = PRODUCE_TIMEOUT_MS_DEFAULT,
        urgent: bool = False,
        transactional_id: str | None = None,
    ) -> list[BatchResult]:
        """See :meth:`partlog.broker.server.Broker.produce`."""
        if acks not in (0, 1, -1):
            raise ValueError(f"acks must be 0, 1 or -1, got {acks}")
        nbytes = sum(len(b) for _, b in batches)
        accepted = self.clock.monotonic()
        deadline = accepted + timeout_ms / 1000
        async with self._room:
            # Back-pressure and arrival order are the pipeline's rules: wait
            # until it admits this request.
            ticket = self.pipeline.arrive(nbytes)
            while not self.pipeline.admissible(ticket):
                left = deadline - self.clock.monotonic()
                if left <= 0:
                    self._leave(ticket)
                    return [
                        BatchResult(tp, Errors.REQUEST_TIMED_OUT, error_message="broker buffer full")
                        for tp, _ in batches
                    ]
                try:
                    async with asyncio.timeout(left):
                        await self._room.wait()
                except TimeoutError:
                    continue
                except BaseException:
                    self._leave(ticket)
                    raise
            self._leave(ticket)  # admitted: the next ticket's turn
            produce_id = self._next_produce_id
            self._next_produce_id += 1
            acks_all = acks == -1
            # The Reply and when the pipeline gave it (the reply stage).
            fut: asyncio.Future[tuple[Reply, float]] = asyncio.get_running_loop().create_future()
            self._replies[produce_id] = fut
            self.metrics.produce_received(nbytes)
            self.metrics.stage("queue", self.clock.monotonic() - accepted)
            early_closes = self.pipeline.stats.early_closes
            actions = self.pipeline.produce(
                produce_id,
                batches,
                self.clock.wall_ms(),
                acks_all=acks_all,
                urgent=urgent,
                transactional_id=transactional_id,
            )
            if self.pipeline.stats.early_closes != early_closes:
                self.metrics.wal_closed_early()
            self._perform(actions)
        if acks == 0 and not fut.done():
            return [BatchResult(tp, Errors.NONE) for tp, _ in batches]
        try:
            async with asyncio.timeout(max(0.001, deadline - self.clock.monotonic())):
                reply, answered = await asyncio.shield(fut)
        except TimeoutError:
            # The pipeline still answers it later; the producer retries.
            return [BatchResult(tp, Errors.REQUEST_TIMED_OUT, error_message="produce timeout") for tp, _ in batches]
        now = self.clock.monotonic()
        self.metrics.stage("reply", now - answered)
        self.metrics.stage("answer", now - accepted)
        return list(reply.results)

    def _leave(self, ticket: int) -> None:
        """``ticket`` leaves the admission queue (admitted, timed out or
        cancelled): the next one may be admissible.  Called with ``_room`` held."""
        self.pipeline.leave(ticket)
        self._room.notify_all()

    async def rotation_timer(self) -> None:
        """Call the pipeline's ``tick`` when its open segment is due."""
        while not self._stopping():
            deadline = self.pipeline.next_deadline_ms()
            self.timer_wake.clear()
            self._timer_deadline_ms = deadline
            if deadline is None:
                await self.timer_wake.wait()
                continue
            # At most one interval: a wall clock stepped back would put the
            # deadline as far off as the step (tick then closes the file).
            delay = min(deadline - self.clock.wall_ms(), self.pipeline.config.commit_interval_ms) / 1000
            if delay > 0:
                try:
                    async with asyncio.timeout(delay):
                        await self.timer_wake.wait()
                    continue
                except TimeoutError:
                    pass
            self._perform(self.pipeline.tick(self.clock.wall_ms()))

    # -------------------------------------------------------------- actions

    def _perform(self, actions: list[Action]) -> None:
        """Perform what the pipeline decided (after each of its inputs)."""
        for a in actions:
            if isinstance(a, Upload):
                self.metrics.wal_put(a.reason)
                # Wall time: a clock stepped back is not a negative stage.
                self.metrics.stage("file_open", max(0, a.closed_ms - a.opened_ms) / 1000)
                self.tasks.spawn(self._upload(a))
            elif isinstance(a, SendCommit):
                self.send_commit(a)
            else:
                fut = self._replies.pop(a.produce_id, None)
                if fut is not None and not fut.done():
                    fut.set_result((a, self.clock.monotonic()))
                self.tasks.spawn(self._notify_room())
        waits = self.pipeline.rotation.budget_waits
        if waits != self._budget_waits_seen:
            self.metrics.wal_budget_waited(waits - self._budget_waits_seen)
            self._budget_waits_seen = waits
        # The input may have moved the rotation deadline earlier (a file
        # opened, the last round completed): the timer sleeps until it.
        deadline = self.pipeline.next_deadline_ms()
        if deadline is not None and (self._timer_deadline_ms is None or deadline < self._timer_deadline_ms):
            self._timer_deadline_ms = deadline
            self.timer_wake.set()

    async def _notify_room(self) -> None:
        async with self._room:
            self._room.notify_all()

    async def _upload(self, up: Upload) -> None:
        start = self.clock.monotonic()
        error: str | None = None
        try:
            await asyncio.to_thread(self.objects.put, up.key, up.data)
        except Exception as e:  # any failure fails this segment's requests, retriably
            error = f"{type(e).__name__}: {e}"
        self.metrics.upload_finished(self.clock.monotonic() - start, len(up.data), error is None)
        if error is None:
            self.notifier.notify(up)
        actions = self.pipeline.upload_done(up.segment_id, self.clock.wall_ms(), error)
        self._record_fanout()
        self._perform(actions)

    def _record_fanout(self) -> None:
        """Per WAL file the last ``upload_done`` released: where its commits go."""
        metadata = self._metadata()
        for release in self.pipeline.last_released:
            counts = [0, 0, 0]
            for leader_id in release.leaders:
                leader = metadata.broker(leader_id)
                if leader_id == self.broker_id:
                    counts[0] += 1
                elif leader is not None and leader.az == self.az:
                    counts[1] += 1
                else:
                    counts[2] += 1
            self.metrics.file_fanned_out(*counts)

    # -------------------------------------------------------------- commits

    def send_commit(self, c: SendCommit) -> None:
        """Queue ``c`` for its leader's sender."""
        # One queue and one sender per leader: commits to a leader leave in
        # the order the pipeline released them (WAL-file order).
        q = self._commit_queues.get(c.leader_broker_id)
        if q is None:
            q = self._commit_queues[c.leader_broker_id] = asyncio.Queue()
            self.tasks.spawn(self._commit_sender(c.leader_broker_id, q))
        q.put_nowait(c)

    def fail_commit(self, c: SendCommit, error: Errors, message: str) -> None:
        """Answer ``c`` with ``error`` without sending it."""
        self._perform(
            self.pipeline.commit_done(c.segment_id, c.leader_broker_id, None, self.clock.wall_ms(), error, message)
        )

    async def _commit_sender(self, leader: int, q: asyncio.Queue[SendCommit]) -> None:
        """Send the commits for ``leader`` in the pipeline's order, pipelined:
        each is written to the connection (or appended locally) before the
        next starts, and answered when its leader answers."""
        while True:
            c = await q.get()
            start = self.clock.monotonic()
            if leader == self.broker_id:
                self.metrics.commit_started(local=True)
                try:
                    responses, wait = await self.commits.commit(
                        c.key, self.broker_id, c.file_size, list(c.requests), c.acks_all, dict(c.transactional_ids)
                    )
                except StoreError as e:
                    self._commit_finished(c, leader, start, None, Errors.KAFKA_STORAGE_ERROR, str(e))
                    continue
                if wait is None:
                    self._commit_finished(c, leader, start, responses)
                else:
                    self.tasks.spawn(self._commit_wait_local(c, start, wait))
                continue
            self.metrics.commit_started(local=False)
            try:
                # Connecting counts against the commit's timeout: a leader
                # behind a black hole must not hold this queue for the RPC
                # layer's default handshake timeout.
                client = await self.peers.client(leader, timeout_ms=self.commit_rpc_timeout_ms)
            except (RpcConnectionError, RpcTimeoutError, OSError) as e:
                # Regression (issue 14, found by the deterministic simulation):
                # a handshake timeout escaped here and killed this leader's
                # sender for good; every later commit to it, and the produce
                # requests behind them, waited for ever.
                error = Errors.REQUEST_TIMED_OUT if isinstance(e, RpcTimeoutError) else Errors.NETWORK_EXCEPTION
                self._commit_finished(c, leader, start, None, error, f"commit to broker {leader}: {e}")
                continue
            # The task writes its frame in its first step, before this loop
            # takes the next commit: frames leave in release order.
            self.tasks.spawn(self._commit_remote(c, leader, client, start))
            await asyncio.sleep(0)

    async def _commit_wait_local(self, c: SendCommit, start: float, wait: Awaitable[list[CommitBatchResponse]]) -> None:
        self._commit_finished(c, self.broker_id, start, await wait)

    async def _commit_remote(self, c: SendCommit, leader: int, client: RpcClient, start: float) -> None:
        responses: list[CommitBatchResponse] | None = None
        error, message = Errors.REQUEST_TIMED_OUT, None
        try:
            body = await client.call(
                "commit",
                enc_commit(c.key, self.broker_id, c.file_size, c.requests, c.acks_all, c.transactional_ids),
                timeout_ms=self.commit_rpc_timeout_ms,
            )
            responses = dec_commit_responses(body, c.requests)
        except RpcTimeoutError as e:
            error, message = Errors.REQUEST_TIMED_OUT, f"commit to broker {leader}: {e}"
        except (RpcConnectionError, OSError) as e:
            error, message = Errors.NETWORK_EXCEPTION, f"commit to broker {leader}: {e}"
            await self.peers.drop(leader)
        except (RpcRemoteError, WireError) as e:
            error, message = Errors.KAFKA_STORAGE_ERROR, f"commit to broker {leader}: {e}"
        self._commit_finished(c, leader, start, responses, error, message)

    def _commit_finished(
        self,
        c: SendCommit,
        leader: int,
        start: float,
        responses: list[CommitBatchResponse] | None,
        error: Errors = Errors.REQUEST_TIMED_OUT,
        message: str | None = None,
    ) -> None:
        if responses is None:
            log.warning("commit failed key=%s leader=%d: %s", c.key, leader, message)
        self.metrics.commit_finished(self.clock.monotonic() - start, responses is not None)
        self._perform(self.pipeline.commit_done(c.segment_id, leader, responses, self.clock.wall_ms(), error, message))


__all__ = ["PRODUCE_TIMEOUT_MS_DEFAULT", "ProduceDriver"]
