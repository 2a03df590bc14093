"""Replication of the metadata logs between brokers: :class:`ReplicaManager`,
the asyncio shell around :class:`partlog.replication.replica_state.ReplicaState`
(leader side) and the follower fetchers, as Kafka's ``ReplicaManager``.

Its parts: the per-partition state and the leader's read for a follower
(``partition.py``, Kafka's ``Partition``), the follower fetchers
(``fetcher.py``, Kafka's ``ReplicaFetcherThread``), the acks=all waits
(``acks.py``, Kafka's ``DelayedProduce``), settings and limits
(``config.py``) and counters (``stats.py``).

Roles come from the cluster metadata (``apply_metadata``): for each partition
this broker either leads it at a leader epoch, follows its leader, or holds
no replica.

Leader side:

* ``commit`` appends a WAL file's batches to the store (in the order commits
  arrive, see :class:`partlog.rpc.server.Deferred`) after checking leadership and,
  for acks=all batches, ``min_insync_replicas``; it returns the responses and,
  when some batch is acks=all, an awaitable that completes once the HWM
  passed the append (or fails it with NOT_ENOUGH_REPLICAS_AFTER_APPEND,
  NOT_LEADER_OR_FOLLOWER or REQUEST_TIMED_OUT).
* ``handle_replica_fetch`` serves followers: leader-epoch fencing, the
  divergence check, entries and the tiered-segment rows the follower lacks
  from the store, and the follower's progress into the ISR/HWM state.  A
  fetch with nothing to return is parked up to its max wait until new
  entries arrive or, when the follower sent its HWM (KIP-1166) and it is
  behind the leader's, answered at once; a parked one is completed when the
  HWM moves.
* ISR changes go to the controller (``MetadataSource.alter_partition``)
  before they count, so the controller never elects a replica the HWM left.

Follower side (``fetcher.py``): one fetcher task per leader broker, fetching
all partitions this broker follows from that leader in one request (a fetch
session per broker pair); it appends entries, follows the leader's HWM and
log start, and truncates a divergent suffix (``partlog.kafka.leader_epochs``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from partlog import injected_bugs
from partlog.controller.cluster_meta import MetadataSource, PartitionInfo
from partlog.kafka.errors import Errors
from partlog.kafka.records import (
    CommitBatchRequest,
    CommitBatchResponse,
    TopicIdPartition,
    TxnMarkerRequest,
    TxnMarkerResponse,
)
from partlog.replication.acks import await_acks
from partlog.replication.config import (
    PARTITIONS_PER_LOOP_SLICE,
    REPLICA_FETCH_PARTITIONS_MAX,
    REPLICA_FETCH_WAIT_MS_MAX,
    REPLICA_SERVE_INLINE_ENTRIES_MAX,
    REPLICA_SERVE_INLINE_PARTITIONS_MAX,
    ReplicationConfig,
)
from partlog.replication.fetcher import ReplicaFetchers
from partlog.replication.isr import IsrChanges
from partlog.replication.partition import FollowedPartition, LedPartition, quiet_noop, with_hwm
from partlog.replication.replica_state import AckResult, ReplicaState
from partlog.replication.sessions import ReplicaFetchSessions
from partlog.replication.signal import Signal
from partlog.replication.stats import ReplicationStats
from partlog.rpc.client import RpcClient
from partlog.rpc.frame import RpcError, RpcErrorCode
from partlog.rpc.handlers import peer_version
from partlog.rpc.replica_rows import (
    OMIT_QUIET,
    SESSION,
    SESSION_ERROR,
    SESSION_RPC_VERSION,
    SESSION_SIZE,
    SPARSE_RPC_VERSION,
    dec_session,
    enc_sparse_response,
)
from partlog.rpc.wire import (
    NO_DIVERGENCE,
    ReplicaFetchPartition,
    ReplicaFetchResult,
    WireError,
    dec_replica_fetch,
    enc_replica_fetch_response,
)
from partlog.runtime import Clock
from partlog.store import MetadataStore, StoreError
from partlog.wal.objectstore import ObjectStore

log = logging.getLogger(__name__)

# A partition's log end and start, and its leader state (epoch, partition
# epoch, replicas, HWM; None: not led here): ReplicaManager._serve_key.
_ServeKey = tuple[int, int, tuple[int, int, tuple[int, ...], int] | None]


class ReplicaManager(IsrChanges):
    """One broker's replication: see the module doc.

    ``client(broker_id)`` returns a connected RPC client (the broker's pool);
    ``drop_client(broker_id)`` discards a broken one; ``on_data()`` is called
    when entries became visible to consumers (an HWM moved)."""

    def __init__(
        self,
        broker_id: int,
        store: MetadataStore,
        metadata: MetadataSource,
        config: ReplicationConfig,
        *,
        client: Callable[[int], Awaitable[RpcClient]],
        drop_client: Callable[[int], Awaitable[None]],
        on_data: Callable[[], None],
        clock: Clock,
        on_store_failed: Callable[[], None] = lambda: None,
        objects: ObjectStore | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.store = store
        self.metadata = metadata
        self.config = config
        self._client = client
        self._drop_client = drop_client
        self._on_data = on_data
        self.clock = clock  # wall ms for ISR lag, monotonic for fetch deadlines
        self.stats = ReplicationStats()
        self._led: dict[TopicIdPartition, LedPartition] = {}
        self._following: dict[TopicIdPartition, FollowedPartition] = {}
        self._roles = asyncio.Lock()
        self._appended = Signal()  # new entries on some led partition
        self._hwm_moved = Signal()  # the HWM of some led partition moved
        self._metadata_changed = Signal()
        self.sessions = ReplicaFetchSessions(clock.wall_ms(), self.stats)
        self._fetchers = ReplicaFetchers(
            broker_id,
            store,
            config,
            self.stats,
            self._following,
            self._roles,
            # Looked up at each call: a test cuts this broker off by
            # replacing the manager's _client.
            client=lambda broker: self._client(broker),
            drop_client=drop_client,
            on_data=on_data,
            metadata_changed=self._metadata_changed.waiter,
            on_store_failed=on_store_failed,
            objects=objects,
            monotonic=clock.monotonic,
        )
        self._next_token = 0
        # acks=all waits handed to callers (commit): kept alive until done.
        self._ack_tasks: set[asyncio.Future[list[CommitBatchResponse]]] = set()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._stopping = False
        self._isr_task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self._isr_task = asyncio.ensure_future(self._isr_loop())

    async def stop(self) -> None:
        self._stopping = True
        self._fetchers.stopping = True
        tasks = [*self._fetchers.tasks(), *self._tasks, *([self._isr_task] if self._isr_task else [])]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for led in self._led.values():
            self._complete(led, led.rs.fail_waiting(Errors.NOT_LEADER_OR_FOLLOWER))

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ----------------------------------------------------------------- roles

    def is_leader(self, tp: TopicIdPartition) -> bool:
        return tp in self._led

    def serves(self, tp: TopicIdPartition) -> bool:
        """True when this broker holds a replica of ``tp`` (leader or follower)."""
        return tp in self._led or tp in self._following

    def leader_epoch(self, tp: TopicIdPartition) -> int | None:
        led = self._led.get(tp)
        return None if led is None else led.leader_epoch

    def replica_epoch(self, tp: TopicIdPartition) -> int | None:
        """The leader epoch this broker knows ``tp`` at, as its leader or as
        a follower; None when it holds no replica of it."""
        led = self._led.get(tp)
        if led is not None:
            return led.leader_epoch
        followed = self._following.get(tp)
        return None if followed is None else followed.leader_epoch

    def isr_within(self, tp: TopicIdPartition, asked: tuple[int, ...] | None) -> bool:
        """For walmgr's reference check: False when this broker leads ``tp``
        and its ISR, with a change waiting for the controller, has a member
        not in ``asked`` (None: not checked).  walmgr's metadata may predate
        that member's joining, and the member may hold references the ones
        asked no longer do (a log start that has not caught up yet)."""
        led = self._led.get(tp)
        if led is None or asked is None:
            return True
        return led.rs.maximal_isr <= set(asked)

    @property
    def leaders(self) -> int:
        return len(self._led)

    @property
    def under_replicated(self) -> int:
        """Led partitions whose ISR is smaller than their replication factor:
        during a reassignment, Kafka's (the replicas without those being
        added, which join as they catch up)."""
        n = 0
        for tp, led in self._led.items():
            p = self.metadata.partition(tp)
            adding = 0 if p is None else len(p.adding)
            n += len(led.rs.isr) < len(led.rs.replicas) - adding
        return n

    def isr(self, tp: TopicIdPartition) -> set[int] | None:
        led = self._led.get(tp)
        return None if led is None else set(led.rs.isr)

    async def apply_metadata(self, metadata: MetadataSource) -> None:
        """Take the roles ``metadata`` gives this broker (Kafka's
        ``becomeLeaderOrFollower``); changes are applied one call at a time,
        never while a fetcher applies a fetch (``ReplicaFetchers.quiesce``)."""
        async with self._roles:
            await self._fetchers.quiesce()
            self.metadata = metadata
            now = self.clock.wall_ms()
            for topic in metadata.topics():
                for p, info in enumerate(topic.partitions):
                    tp = TopicIdPartition(topic.topic_id, p)
                    try:
                        await self._apply_partition(tp, info, now)
                    except (StoreError, KeyError, ValueError) as e:
                        log.error("broker %d: cannot take its role for %s: %s", self.broker_id, tp, e)
            # Partitions of deleted topics, or moved away from this broker.
            known = {TopicIdPartition(t.topic_id, p) for t in metadata.topics() for p in range(t.num_partitions)}
            for tp in [tp for tp in self._led if tp not in known]:
                self._resign(tp)
            for tp in [tp for tp in self._following if tp not in known]:
                del self._following[tp]
            await self._drop_unreplicated(metadata)
            self._fetchers.start()
            self._metadata_changed.fire()

    async def _apply_partition(self, tp: TopicIdPartition, info: PartitionInfo, now: int) -> None:
        me = self.broker_id
        if info.leader == me:
            led = self._led.get(tp)
            if led is not None and led.leader_epoch == info.leader_epoch:
                if info.partition_epoch <= led.rs.partition_epoch:
                    return
                if info.replicas != led.rs.replicas:
                    # A reassignment added or removed replicas.
                    self._complete(led, led.rs.replicas_changed(info.replicas, info.isr, info.partition_epoch, now))
                else:
                    # The controller changed the ISR itself (fenced a dead follower).
                    self._complete(led, led.rs.isr_committed(set(info.isr), info.partition_epoch))
                return
            self._following.pop(tp, None)
            if led is not None:
                self._resign(tp)
            await asyncio.to_thread(self.store.set_leader_epoch, tp, info.leader_epoch)
            leo = self.store.log_end_offset(tp)
            rs = ReplicaState(
                leader_id=me,
                replicas=info.replicas,
                min_insync_replicas=self.config.min_insync_replicas,
                replica_lag_time_max_ms=self.config.replica_lag_time_max_ms,
                leader_epoch_start_offset=leo,
                log_end_offset=leo,
                high_watermark=self.store.high_watermark(tp),
                isr=set(info.isr),
                partition_epoch=info.partition_epoch,
                start_ms=now,
                # A replica the metadata does not list as a live broker is
                # fenced: it may not join the ISR (the controller would refuse).
                eligible=self._is_live,
            )
            self._led[tp] = LedPartition(tp, info.leader_epoch, rs)
            self.stats.became_leader += 1
            # A single-replica ISR: everything appended is committed.
            self._complete(self._led[tp], rs.leader_appended(leo, now))
            log.info("broker %d leads %s at epoch %d (log end %d)", me, tp, info.leader_epoch, leo)
        elif me in info.replicas:
            if tp in self._led:
                self._resign(tp)
            old = self._following.get(tp)
            if old is None or (old.leader, old.leader_epoch) != (info.leader, info.leader_epoch):
                self._following[tp] = FollowedPartition(info.leader, info.leader_epoch)
                self.stats.became_follower += 1
        else:
            if tp in self._led:
                self._resign(tp)
            self._following.pop(tp, None)

    async def _drop_unreplicated(self, metadata: MetadataSource) -> None:
        """Empty the logs of partitions ``metadata`` says this broker does
        not replicate (a reassignment removed it): their references would
        keep WAL objects alive for ever, and a later re-adding must start
        from an empty log, not a stale one.  The metadata this broker holds
        decides (it is the controller's, newer than any it held before), in
        one pass without awaiting, and only for partitions the roles just
        taken neither lead nor follow; the roles lock is held, so no role is
        taken meanwhile.  The store notes the released keys in its release
        grace.  A failure is logged; the next metadata tries again."""
        me = self.broker_id
        doomed = []
        for topic in metadata.topics():
            for p, info in enumerate(topic.partitions):
                tp = TopicIdPartition(topic.topic_id, p)
                # No replicas at all: a placeholder, not a decision.
                listed = me in info.replicas or tp in self._led or tp in self._following
                early = me in info.removing and injected_bugs.on("replica_drops_log_while_listed")
                if not info.replicas or (listed and not early):
                    continue
                try:
                    if self.store.log_end_offset(tp) == self.store.log_start_offset(tp) == 0:
                        continue  # as created: nothing to drop
                except KeyError:
                    continue  # not created here yet
                doomed.append(tp)
        if not doomed:
            return
        try:
            dropped = await asyncio.to_thread(self.store.drop_partition_logs, doomed)
        except StoreError as e:
            log.error(
                "broker %d: dropping the logs of %d partitions it no longer replicates failed: %s", me, len(doomed), e
            )
            return
        self.stats.partitions_dropped += len(dropped)
        for tp in dropped:
            log.info("broker %d no longer replicates %s: its log was dropped", me, tp)

    def _is_live(self, broker_id: int) -> bool:
        return self.metadata.broker(broker_id) is not None

    def _resign(self, tp: TopicIdPartition) -> None:
        led = self._led.pop(tp)
        self._complete(led, led.rs.fail_waiting(Errors.NOT_LEADER_OR_FOLLOWER))
        log.info("broker %d no longer leads %s (epoch %d)", self.broker_id, tp, led.leader_epoch)

    # ------------------------------------------------------------ commits

    async def commit(
        self,
        key: str,
        uploader: int,
        file_size: int,
        requests: Sequence[CommitBatchRequest],
        acks_all: Sequence[bool],
        timeout_ms: int,
        guards: Mapping[tuple[TopicIdPartition, int], int] | None = None,
    ) -> tuple[list[CommitBatchResponse], Awaitable[list[CommitBatchResponse]] | None]:
        """Append what this broker leads; see the module doc.  Raises
        StoreError when the store failed.  ``guards``: KIP-890's, for the store."""
        flags = list(acks_all) or [False] * len(requests)
        answers: list[CommitBatchResponse] = [
            CommitBatchResponse(Errors.NOT_LEADER_OR_FOLLOWER, -1, -1, -1, False, r) for r in requests
        ]
        mine = []
        for i, r in enumerate(requests):
            led = self._led.get(r.topic_id_partition)
            if led is None:
                continue
            if flags[i] and led.rs.check_acks_all():
                answers[i] = CommitBatchResponse(Errors.NOT_ENOUGH_REPLICAS, -1, -1, -1, False, r)
                continue
            mine.append(i)
        if not mine:
            return answers, None
        committed = await asyncio.to_thread(
            self.store.commit_file, key, uploader, file_size, [requests[i] for i in mine], guards
        )
        for i, resp in zip(mine, committed, strict=True):
            answers[i] = resp
        now = self.clock.wall_ms()
        waits: dict[TopicIdPartition, asyncio.Future[Errors]] = {}
        touched = {requests[i].topic_id_partition for i in mine}
        wants_ack = {requests[i].topic_id_partition for i in mine if flags[i] and answers[i].errors == Errors.NONE}
        for tp in touched:
            led = self._led.get(tp)
            if led is None:
                continue  # leadership moved while appending: acks=all answers below
            token = None
            if tp in wants_ack:
                token = self._next_token
                self._next_token += 1
                fut: asyncio.Future[Errors] = asyncio.get_running_loop().create_future()
                led.waiters[token] = fut
                waits[tp] = fut
            self._complete(led, led.rs.leader_appended(self.store.log_end_offset(tp), now, token))
        self._appended.fire()
        for tp in wants_ack - set(waits):
            lost: asyncio.Future[Errors] = asyncio.get_running_loop().create_future()
            lost.set_result(Errors.NOT_LEADER_OR_FOLLOWER)
            waits[tp] = lost
        if not waits or injected_bugs.on("acks_all_before_hwm"):
            return answers, None
        # A task, not a bare coroutine: a caller cancelled before it awaits
        # (a broker stopping) would drop the coroutine unawaited (Python
        # warns); the task runs to its end, bounded by timeout_ms.
        task = asyncio.ensure_future(await_acks(answers, flags, waits, timeout_ms, self.stats))
        self._ack_tasks.add(task)  # the loop holds tasks weakly
        task.add_done_callback(self._ack_tasks.discard)
        return answers, task

    async def write_txn_markers(self, markers: Sequence[TxnMarkerRequest], timeout_ms: int) -> list[TxnMarkerResponse]:
        """Append COMMIT/ABORT markers to the partitions this broker leads
        and wait until the HWM passed each (Kafka appends markers with
        acks=all and the partition's min.insync.replicas): per marker its
        answer, NOT_LEADER_OR_FOLLOWER where this broker does not lead.
        Raises StoreError when the store failed."""
        answers = [TxnMarkerResponse(Errors.NOT_LEADER_OR_FOLLOWER, -1) for _ in markers]
        mine = []
        for i, m in enumerate(markers):
            led = self._led.get(m.topic_id_partition)
            if led is None:
                continue
            if led.rs.check_acks_all():
                answers[i] = TxnMarkerResponse(Errors.NOT_ENOUGH_REPLICAS, -1)
                continue
            mine.append(i)
        if not mine:
            return answers
        now = self.clock.wall_ms()
        written = await asyncio.to_thread(self.store.write_txn_markers, [markers[i] for i in mine], now)
        waits: dict[TopicIdPartition, asyncio.Future[Errors]] = {}
        for i, a in zip(mine, written, strict=True):
            answers[i] = a
        for tp in {markers[i].topic_id_partition for i in mine}:
            led = self._led.get(tp)
            fut: asyncio.Future[Errors] = asyncio.get_running_loop().create_future()
            waits[tp] = fut
            if led is None:
                fut.set_result(Errors.NOT_LEADER_OR_FOLLOWER)  # leadership moved while appending
                continue
            token = self._next_token
            self._next_token += 1
            led.waiters[token] = fut
            self._complete(led, led.rs.leader_appended(self.store.log_end_offset(tp), now, token))
        self._appended.fire()
        errors: dict[TopicIdPartition, Errors] = {}
        deadline = self.clock.monotonic() + timeout_ms / 1000
        for tp, fut in waits.items():
            try:
                async with asyncio.timeout(max(0.0, deadline - self.clock.monotonic())):
                    errors[tp] = await asyncio.shield(fut)
            except TimeoutError:
                errors[tp] = Errors.REQUEST_TIMED_OUT  # appended; may still be replicated
        for i in mine:
            err = errors.get(markers[i].topic_id_partition, Errors.NONE)
            if answers[i].error == Errors.NONE and err != Errors.NONE:
                answers[i] = TxnMarkerResponse(err, -1)
        return answers

    def _complete(self, led: LedPartition, results: list[AckResult]) -> None:
        """Resolve finished acks=all appends and publish the HWM."""
        for r in results:
            fut = led.waiters.pop(r.token, None)
            if fut is not None and not fut.done():
                fut.set_result(r.error)
        hwm = led.rs.high_watermark
        if hwm > self.store.high_watermark(led.tp):
            self.store.set_high_watermark(led.tp, hwm)
            self._hwm_moved.fire()
            self._on_data()

    # ------------------------------------------------------- leader: fetches

    async def handle_replica_fetch(self, body: Any) -> Any:
        version = peer_version()
        sparse = version >= SPARSE_RPC_VERSION
        try:
            replica_id, max_wait, entries_max, parts = dec_replica_fetch(body, REPLICA_FETCH_PARTITIONS_MAX)
            session = dec_session(body, REPLICA_FETCH_PARTITIONS_MAX) if version >= SESSION_RPC_VERSION else None
        except WireError as e:
            raise RpcError(RpcErrorCode.BAD_REQUEST, str(e)) from e
        sid = 0
        # An incremental fetch's items not sent again may take the quiet lane.
        sent: set[TopicIdPartition] | None = None
        if session is not None:  # the session's partitions: those sent, and the copy's others
            got = self.sessions.resolve(replica_id, *session[:2], parts, session[2], int(self.clock.monotonic() * 1000))
            if isinstance(got, str):
                return {"keys": [], "partitions": [], SESSION_ERROR: got}
            if session[0] and got[1]:
                sent = {p.topic_id_partition for p in parts}
            parts, sid = got
        self.stats.replica_fetches_served += 1
        deadline = self.clock.monotonic() + min(max_wait, REPLICA_FETCH_WAIT_MS_MAX) / 1000
        sends_hwm = all(p.high_watermark >= 0 for p in parts)
        parked = False
        results: list[ReplicaFetchResult | None] = [None] * len(parts)
        seen: list[_ServeKey | None] = [None] * len(parts)
        # Per partition, the led partition whose quiet answer it got (None:
        # served, or not yet).
        quiet_of: list[LedPartition | None] = [None] * len(parts)
        while True:
            appended = self._appended.waiter()
            hwm_moved = self._hwm_moved.waiter()
            # Woken, serve again only the partitions whose log, leader or
            # HWM moved, or whose last read was behind its log end: an append
            # to one of a thousand partitions must not read the other 999
            # again (an unchanged one's answer is still one we could give).
            # The quiet lane first: a session item not sent again whose answer would be the
            # last one and change nothing but the follower's times (moved once per request).
            fetched_ms = None if parked else self.clock.wall_ms()
            todo = []
            for i, p in enumerate(parts):
                if i and not i % PARTITIONS_PER_LOOP_SLICE:
                    await asyncio.sleep(0)  # a change meanwhile fired the waiters: served again below
                tp = p.topic_id_partition
                if sent is not None and (not sent or tp not in sent):
                    led = self._led.get(tp)
                    quiet = None if led is None else led.quiet_fetch(self.store, replica_id, p, fetched_ms)
                    if quiet is not None:
                        results[i], quiet_of[i] = quiet, led
                        continue
                k = self._serve_key(tp)
                r = results[i]
                if r is None or quiet_of[i] is not None or k != seen[i] or self._behind(r, k):
                    todo.append(i)
                seen[i], quiet_of[i] = k, None
            asked = [parts[i] for i in todo]
            self.stats.replica_partitions_served += len(asked)
            if parked:
                self.stats.replica_fetch_wakeups += 1
                self.stats.replica_partitions_served_again += len(asked)
            else:
                self.stats.replica_partitions_quiet += len(parts) - len(asked)
            if self._serve_inline(entries_max, asked):
                fresh = self._serve(replica_id, entries_max, asked)
            else:
                fresh = await asyncio.to_thread(self._serve, replica_id, entries_max, asked)
            for i, r in zip(todo, fresh, strict=True):
                results[i] = r
            now = self.clock.wall_ms()
            # Woken, only those served again: the next fetch renews the rest.
            for p, r in zip(asked, fresh, strict=True):
                if r.error == Errors.NONE and r.diverging_epoch == NO_DIVERGENCE:
                    led = self._led.get(p.topic_id_partition)
                    if led is not None and led.leader_epoch == p.current_leader_epoch:
                        # A commit may have reached the store and not yet the
                        # replica state: the follower may have seen its entries.
                        if r.log_end_offset > led.rs.log_end_offset:
                            self._complete(led, led.rs.leader_appended(r.log_end_offset, now))
                        self._complete(led, led.rs.follower_fetch(replica_id, p.fetch_offset, now))
                        if replica_id in led.rs.isr:
                            # Kafka's maybeExpandIsr: a fetch checks only
                            # whether its follower joins; the ISR loop shrinks.
                            continue
                        # A follower joins the ISR only once its log start
                        # has caught up too: below the leader's it may still
                        # hold entries retention or DeleteRecords removed,
                        # whose objects walmgr may delete once the leader and
                        # the ISR of the moment stop naming them (the answer
                        # to this fetch brings the leader's log start).  The
                        # leader's log start as of now, not the read's:
                        # retention may have moved it while the read ran.
                        # Likewise, only once it has every segment row it can
                        # take (none in this answer): until it swapped, its
                        # entries may name WAL objects walmgr found unreferenced.
                        start = self.store.log_start_offset(p.topic_id_partition)
                        joins = (p.log_start_offset < 0 or p.log_start_offset >= start) and not r.segments
                        self._maybe_alter_isr(led, now, expand_for=replica_id if joins else None)
            # A fetch needs an answer now when it brings entries, segment
            # rows, an error or a divergence, or (KIP-1166) the follower's
            # HWM is behind ours; the others were not urgent, nor moved.
            urgent = any(
                r.entries or r.segments or r.error != Errors.NONE or r.diverging_epoch != NO_DIVERGENCE
                or (sends_hwm and p.high_watermark < self._hwm_of(p.topic_id_partition))
                for p, r in zip(asked, fresh, strict=True)
            )  # fmt: skip
            left = deadline - self.clock.monotonic()
            if urgent or left <= 0 or self._stopping:
                break
            if not parked:
                parked = True
                self.stats.replica_fetches_parked += 1
            waits = [asyncio.ensure_future(appended.wait())]
            if sends_hwm:
                waits.append(asyncio.ensure_future(hwm_moved.wait()))
            try:
                woken, _ = await asyncio.wait(waits, timeout=left, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waits:
                    w.cancel()
            if not woken:
                # Timed out: nothing was appended nor moved an HWM, so the
                # answers stand (the HWM is taken again below; a log start
                # or leader moved meanwhile reaches the next fetch).
                break
        # The HWM to report is the one after this fetch moved it.
        final: list[ReplicaFetchResult] = []
        rows_of: list[int] = []  # of a sparse answer: the partitions whose apply would change something
        for i, (p, r, led) in enumerate(zip(parts, results, quiet_of, strict=True)):
            assert r is not None, "each partition was served or quiet"
            if led is not None and led.rs.high_watermark == r.high_watermark:
                final.append(r)  # a quiet answer whose HWM stands: nothing to apply (its quiet_noop held)
                continue
            final.append(r := r if r.error != Errors.NONE else with_hwm(r, self._hwm_of(p.topic_id_partition)))
            self.stats.segment_swaps_sent += len(r.segments)
            self.stats.segment_rewrites_sent += len(r.rewrites)
            if not quiet_noop(p, r):
                rows_of.append(i)
        if sid or (sparse and body.get(OMIT_QUIET) is True):
            self.stats.replica_rows_omitted += len(parts) - len(rows_of)
            answer = enc_sparse_response(final, rows_of)
            if sid:
                answer[SESSION], answer[SESSION_SIZE] = sid, len(parts)
            return answer
        return enc_replica_fetch_response(final)

    def _serve_key(self, tp: TopicIdPartition) -> _ServeKey | None:
        """What a served partition's answer depends on, from memory: log end
        and start, the leader state (None: an unknown partition).  Segment
        rows and rewrites wait for the next fetch, as between appends."""
        try:
            leo, lso, _ = self.store.log_bounds(tp)
        except KeyError:
            return None
        led = self._led.get(tp)
        if led is None:
            return leo, lso, None
        return leo, lso, (led.leader_epoch, led.rs.partition_epoch, led.rs.replicas, led.rs.high_watermark)

    @staticmethod
    def _behind(r: ReplicaFetchResult, key: _ServeKey | None) -> bool:
        """Whether ``r`` read less than ``key``'s log end: a commit sequenced,
        not durable then, becomes readable with the key unchanged."""
        return key is not None and r.error == Errors.NONE and r.log_end_offset < key[0]

    def _hwm_of(self, tp: TopicIdPartition) -> int:
        led = self._led.get(tp)
        return -1 if led is None else led.rs.high_watermark

    def _serve_inline(self, entries_max: int, parts: list[ReplicaFetchPartition]) -> bool:
        """Whether serving ``parts`` is bounded, sub-millisecond work for the
        event loop: few partitions, and few entries to return (at most one
        per offset between each fetch offset and the log end, plus the batch
        holding the fetch offset)."""
        if len(parts) > REPLICA_SERVE_INLINE_PARTITIONS_MAX:
            return False
        entries = 0
        for p in parts:
            try:
                behind = self.store.log_end_offset(p.topic_id_partition) - p.fetch_offset
            except KeyError:
                continue  # answered with an error, no entries
            entries += min(entries_max, max(0, behind) + 1)
            if entries > REPLICA_SERVE_INLINE_ENTRIES_MAX:
                return False
        return True

    def _serve(self, replica_id: int, entries_max: int, parts: list[ReplicaFetchPartition]) -> list[ReplicaFetchResult]:
        """The store side of a replica fetch (in a worker thread, or inline
        when :meth:`_serve_inline`): fencing, divergence, entries."""
        entries_max = min(entries_max, self.config.replica_fetch_entries_max)
        out = []
        for p in parts:
            led = self._led.get(p.topic_id_partition)
            if led is None or replica_id == self.broker_id or replica_id not in led.rs.replicas:
                out.append(ReplicaFetchResult(Errors.NOT_LEADER_OR_FOLLOWER))
                continue
            last = led.quiet.get(replica_id)
            out.append(led.read_for_follower(self.store, replica_id, p, entries_max))
            if last is not None and out[-1] is last.answer:
                self.stats.replica_partitions_unchanged += 1
        return out


__all__ = ["ReplicaManager"]
