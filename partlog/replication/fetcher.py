"""The follower side of replication, as Kafka's ``ReplicaFetcherManager`` and
``ReplicaFetcherThread``: :class:`ReplicaFetchers`.

One fetcher task per leader broker fetches all partitions this broker
follows from that leader in one request (a fetch session per broker pair);
it appends entries, follows the leader's HWM and log start, and truncates a
divergent suffix (``partlog.kafka.leader_epochs``).  The replica manager
(``partlog.replication.manager``) decides the roles and starts the fetchers
after each metadata change.

A fetch's answer is applied to the partitions still followed from that
leader at the epoch the fetch named, chosen under the manager's roles lock,
which is held only for that choice: the durable append (one store write
for the whole response, ``MetadataStore.append_replicated_fetch``) runs in
a worker thread outside it, so the fetchers of different leaders apply at
the same time.  Each apply is counted in flight from that choice until its
store calls returned, and the manager changes roles only under the lock
with no apply in flight (:meth:`ReplicaFetchers.quiesce`): a role change
and an apply never overlap, so an apply never writes to a partition whose
role changed after it was chosen.  The fetch request is built on the event
loop (memory and one LMDB read of each partition's newest epoch) when it
names at most ``REPLICA_FETCH_BUILD_INLINE_PARTITIONS_MAX`` partitions,
in a worker thread otherwise.

Tiered segments (issue 31) reach followers the same way: each fetch names
the end of the partition's last segment row (``tiered_through``, kept in
:class:`~partlog.replication.partition.FollowedPartition`, read from the
store when following starts and after a truncation or a reset), and the
answer's rows, which cover entries this broker held when it sent the
fetch, are applied with the store's own swap
(``MetadataStore.swap_to_segment``, ``replicated``), in order, in the apply
thread, before the answer's entries are appended (the append may raise the
log start into a row's range, and a row reaching below the log start cannot
be swapped).  A row the store refuses is skipped and counted: its entries keep
their WAL references (the safe side: walmgr keeps an object any ISR member
references).

Rows the leader replaced (its cleaner's rewrites) or this replica refused
come back through a check (docs/design/compaction.md, "Replicas"): each
fetch names a window of this replica's rows by digest (``rows_check``,
windows tiling ``[0, tiered_through]``), the leader answers its rows of a
window that differs (``rewrites``), and this replica reads each row it
lacks (one GET, bounded, in a worker thread before the apply and outside
the roles lock) and applies it in the apply thread with the store's
replicated rewrite, which checks it against its entries.  A row refused is
counted and remembered (not read again); its references stay.

The log end a fetch reports is read after the previous append returned,
that is once it was durable (the journal's fdatasync): the leader never
counts an entry toward the HWM that this broker could still lose.  Nor
is a fetch sent while the store is fail-stopped (its caches may be ahead
of disk until it is reopened).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import cast

from partlog import injected_bugs
from partlog.controller.cluster_meta import NO_LEADER
from partlog.kafka.batch_header import BatchHeader
from partlog.kafka.errors import Errors
from partlog.kafka.leader_epochs import EpochEndOffset, truncation_offset
from partlog.kafka.records import TopicIdPartition
from partlog.replication.config import (
    REPLICA_FETCH_BUILD_INLINE_PARTITIONS_MAX,
    REPLICA_FETCH_WAIT_MS_MAX,
    ReplicationConfig,
)
from partlog.replication.partition import FollowedPartition
from partlog.replication.rewrites import (
    REWRITE_SEGMENT_BYTES_MAX,
    RewriteRefused,
    rewrite_from_segment,
    rows_digest,
    rows_replaced,
    same_row,
)
from partlog.replication.sessions import FollowerSession
from partlog.replication.stats import ReplicationStats
from partlog.rpc.client import RpcClient, RpcConnectionError, RpcRemoteError, RpcTimeoutError
from partlog.rpc.replica_rows import (
    OMIT_QUIET,
    SESSION_RPC_VERSION,
    SPARSE_RPC_VERSION,
    dec_rows_of,
    dec_session_answer,
    enc_session,
)
from partlog.rpc.wire import (
    NO_DIVERGENCE,
    ROWS_CHECKED_PER_FETCH_MAX,
    ReplicaFetchPartition,
    ReplicaFetchResult,
    ReplicaSegment,
    RowsCheck,
    WireError,
    dec_replica_fetch_response,
    enc_replica_fetch,
)
from partlog.store import MetadataStore, ReplicaAppend, Segment, SegmentSwap, StoreError
from partlog.store.compaction import SegmentRewrite
from partlog.store.release_grace import Hold
from partlog.wal.objectstore import ObjectNotFoundError, ObjectStore, ObjectStoreError

log = logging.getLogger(__name__)

# Bytes of leaders' segments one fetch round reads to take rows over (one
# cleaned segment at most; the rest waits for the next round).
REWRITE_BYTES_PER_FETCH_MAX = REWRITE_SEGMENT_BYTES_MAX
# Keys of refused leader rows remembered per partition (not read again).
REFUSED_ROWS_MAX = 64
# After the leader refused or lost this follower's fetch session: the pause
# before the full fetch that opens a new one (short: nothing is wrong).
SESSION_RESET_PAUSE_S = 0.01


@dataclasses.dataclass(slots=True)
class _Prepared:
    """Leader rows to take over, read before the apply (module doc)."""

    rewrites: dict[TopicIdPartition, list[SegmentRewrite]] = dataclasses.field(default_factory=dict)
    # Partitions whose rows waited for the read budget: their window is
    # checked again.
    deferred: set[TopicIdPartition] = dataclasses.field(default_factory=set)


class ReplicaFetchers:
    """The fetcher tasks of one broker, one per leader it follows.

    ``following`` is the replica manager's map of followed partitions (read
    here, changed only by the manager under ``roles``); ``client(broker_id)``
    returns a connected RPC client, ``drop_client(broker_id)`` discards a
    broken one; ``on_data()`` is called when a fetch moved an HWM or a log;
    ``metadata_changed()`` is the event the next metadata change sets."""

    def __init__(
        self,
        broker_id: int,
        store: MetadataStore,
        config: ReplicationConfig,
        stats: ReplicationStats,
        following: Mapping[TopicIdPartition, FollowedPartition],
        roles: asyncio.Lock,
        *,
        client: Callable[[int], Awaitable[RpcClient]],
        drop_client: Callable[[int], Awaitable[None]],
        on_data: Callable[[], None],
        metadata_changed: Callable[[], asyncio.Event],
        on_store_failed: Callable[[], None] = lambda: None,
        objects: ObjectStore | None = None,
        monotonic: Callable[[], float],
    ) -> None:
        self.broker_id = broker_id
        self._monotonic = monotonic  # seconds: an answer's age (release_grace.py)
        # Where leaders' segments are read to take their rows over (None:
        # rows are not checked, as before compaction.md's "Replicas").
        self.objects = objects
        self.store = store
        self.config = config
        self.stats = stats
        self._following = following
        self._roles = roles
        self._client = client
        self._drop_client = drop_client
        self._on_data = on_data
        self._metadata_changed = metadata_changed
        # The store fail-stopped: the broker reopens it from disk (a broker
        # that only follows would otherwise stop fetching until a restart).
        self._on_store_failed = on_store_failed
        self._fetchers: dict[int, asyncio.Task[None]] = {}
        # Applies chosen under ``roles`` whose store calls have not returned.
        self._applying = 0
        self._idle = asyncio.Event()
        self._idle.set()
        # Set by the manager's stop(): fetch loops end at their next turn.
        self.stopping = False

    def tasks(self) -> list[asyncio.Task[None]]:
        """The fetcher tasks running now (to cancel them)."""
        return list(self._fetchers.values())

    async def quiesce(self) -> None:
        """Wait until no apply is in flight.  The manager calls it holding
        ``roles`` before it changes any: no new apply can start meanwhile."""
        assert self._roles.locked()
        await self._idle.wait()

    def _end_apply(self, _done: object) -> None:
        self._applying -= 1
        if self._applying == 0:
            self._idle.set()

    def start(self) -> None:
        """A fetcher for every leader a followed partition names, unless one runs."""
        leaders = {f.leader for f in self._following.values() if f.leader != NO_LEADER}
        for leader in leaders:
            task = self._fetchers.get(leader)
            if task is None or task.done():
                self._fetchers[leader] = asyncio.ensure_future(self._fetch_loop(leader))

    async def _fetch_loop(self, leader: int) -> None:
        cfg = self.config
        backoff = cfg.replica_fetch_backoff_ms / 1000
        # Only with the injected bug: the apply still in flight, and the log
        # end its entries will make, reported before they are durable.
        pending: asyncio.Future[tuple[bool, bool]] | None = None
        received: dict[TopicIdPartition, int] = {}
        # This leader's replica fetch session (a leader at SESSION_RPC_VERSION
        # keeps one): any answer not applied resets it.
        session = FollowerSession()
        while not self.stopping:
            followed = {tp: f for tp, f in self._following.items() if f.leader == leader}
            if not followed:
                break
            try:
                if len(followed) <= REPLICA_FETCH_BUILD_INLINE_PARTITIONS_MAX:
                    parts = self._fetch_request(followed)
                else:
                    parts = await asyncio.to_thread(self._fetch_request, followed)
            except (StoreError, KeyError) as e:
                log.warning("broker %d: cannot build a fetch from %d: %s", self.broker_id, leader, e)
                if self.store.failed is not None:
                    self._on_store_failed()
                await self._pause(backoff)
                continue
            if received:
                parts = [
                    p._replace(fetch_offset=max(p.fetch_offset, received.get(p.topic_id_partition, -1))) for p in parts
                ]
            self.stats.replica_fetches_sent += 1
            sent = self._monotonic()
            try:
                client = await self._client(leader)
                sparse = client.version >= SPARSE_RPC_VERSION
                sessions = client.version >= SESSION_RPC_VERSION
                items, sid, epoch, forgotten = session.request(parts) if sessions else (parts, 0, 0, [])
                body = enc_replica_fetch(
                    self.broker_id, cfg.replica_fetch_wait_max_ms, cfg.replica_fetch_entries_max, items
                )
                if sparse:
                    body[OMIT_QUIET] = True
                if sessions:
                    enc_session(body, sid, epoch, forgotten)
                raw = await client.call(
                    "replica_fetch", body, timeout_ms=cfg.replica_fetch_wait_max_ms + REPLICA_FETCH_WAIT_MS_MAX
                )
                if sessions:
                    got_sid, size, refused = dec_session_answer(raw)
                    order = None if refused else session.answered(parts, items, forgotten, got_sid, size)
                    if order is None:
                        # The leader lost or refused the session: a full fetch opens another.
                        self.stats.replica_sessions_reset += 1
                        session.reset()
                        await self._pause(min(backoff, SESSION_RESET_PAUSE_S))
                        continue
                    parts = order
                # A sparse answer's rows are for the partitions it names;
                # the others' answers would change nothing here (quiet_noop).
                rows_of = dec_rows_of(raw, len(parts))
                if rows_of is not None:
                    parts = [parts[i] for i in rows_of]
                results = dec_replica_fetch_response(raw, len(parts))
            except (RpcConnectionError, OSError, RpcTimeoutError) as e:
                session.reset()
                self.stats.replica_fetch_errors += 1
                log.debug("broker %d: fetch from %d failed: %s", self.broker_id, leader, e)
                await self._drop_client(leader)
                await self._pause(backoff)
                continue
            except (RpcRemoteError, WireError) as e:
                session.reset()
                self.stats.replica_fetch_errors += 1
                log.warning("broker %d: fetch from %d refused: %s", self.broker_id, leader, e)
                await self._pause(backoff)
                continue
            if pending is not None:
                with contextlib.suppress(StoreError, KeyError, ValueError):
                    await asyncio.shield(pending)
                pending = None
                received.clear()
            prepared = _Prepared()
            if any(r.rewrites for r in results):
                # The GETs run outside the roles lock and the apply: a slow
                # read never holds a role change.
                rows = [(p.topic_id_partition, r.rewrites) for p, r in zip(parts, results, strict=True) if r.rewrites]
                targets = [(tp, g, f) for tp, gs in rows if (f := followed.get(tp)) is not None for g in gs]
                try:
                    prepared = await asyncio.to_thread(self._prepare_rewrites, targets)
                except (StoreError, KeyError) as e:
                    log.warning("broker %d: reading rows to take over failed: %s", self.broker_id, e)
            async with self._roles:
                # Apply only to partitions still followed from this leader at
                # the epoch the fetch named (a role change may have come in).
                current = [
                    (p, r, f)
                    for p, r in zip(parts, results, strict=True)
                    if (f := self._following.get(p.topic_id_partition)) is not None
                    and f.leader == leader
                    and f.leader_epoch == p.current_leader_epoch
                ]
                if (self._monotonic() - sent) * 1000 > cfg.replica_answer_age_max_ms and not injected_bugs.on(
                    "follower_applies_stale_answers"
                ):
                    # Its objects may be past their release grace at the
                    # leader: walmgr may delete them (release_grace.py).
                    self._stale_answer(leader, sent)
                    session.reset()
                    continue
                # Its objects count as referenced here from now on.
                hold = self.store.release_grace.hold(_answer_keys(current, prepared))
                # In flight from here until the store calls returned (even
                # if this task is cancelled meanwhile): roles wait for it.
                self._applying += 1
                self._idle.clear()
                applying = asyncio.ensure_future(asyncio.to_thread(self._apply_fetch, current, prepared))
                applying.add_done_callback(functools.partial(_end_hold, self.store, hold))
                applying.add_done_callback(self._end_apply)
            if injected_bugs.on("follower_ack_before_journal_sync"):
                # The next fetch goes out now, reporting the entries just
                # received as this log's end before their append is durable.
                pending = applying
                for p, r, _ in current:
                    if r.entries:
                        h = BatchHeader.parse(r.entries[-1].header)
                        received[p.topic_id_partition] = h.base_offset + h.last_offset_delta + 1
                continue
            try:
                moved, stale = await asyncio.shield(applying)
            except (StoreError, KeyError, ValueError) as e:
                log.error("broker %d: applying a fetch from %d failed: %s", self.broker_id, leader, e)
                session.reset()
                moved, stale = False, True
                if self.store.failed is not None:
                    self._on_store_failed()
            if moved:
                self._on_data()
            if stale:
                # Our metadata is behind the leader's (or the leader's behind
                # ours): wait for it instead of spinning.
                await self._pause(min(backoff, 0.1))
        if self._fetchers.get(leader) is asyncio.current_task():
            del self._fetchers[leader]

    def _stale_answer(self, leader: int, sent: float) -> None:
        """An answer too old to apply: counted, logged at the 1st, 2nd, 4th... time."""
        self.stats.replica_answers_stale += 1
        n = self.stats.replica_answers_stale
        if n & (n - 1) == 0:
            log.warning(
                "broker %d: dropped a fetch answer from %d, %.1f s after its request (over "
                "replica_answer_age_max_ms=%d; %d dropped so far)",
                self.broker_id,
                leader,
                self._monotonic() - sent,
                self.config.replica_answer_age_max_ms,
                n,
            )

    async def _pause(self, seconds: float) -> None:
        """Sleep, but wake early when the metadata changes (a leader's address
        or epoch became known)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._metadata_changed().wait()

    def _fetch_request(self, followed: dict[TopicIdPartition, FollowedPartition]) -> list[ReplicaFetchPartition]:
        if self.store.failed is not None:
            # A fail-stopped store's caches may hold appends whose journal
            # append failed (sequenced, never durable) until a reopen reloads
            # them from disk: the leader would count them toward its HWM.
            raise StoreError(f"broker {self.broker_id}: the store fail-stopped; no fetch until it is reopened")
        parts: list[ReplicaFetchPartition | None] = []
        # The items whose newest epoch must be read: one LMDB read for them
        # all.  An unchanged partition sends its last item again: reading
        # every epoch was most of an idle follower's time with 4,000
        # partitions (it holds the interpreter, so the Kafka requests wait).
        todo: list[tuple[int, TopicIdPartition, FollowedPartition, object]] = []
        sends_hwm = self.config.fetch_sends_high_watermark
        no_rows_check = self.objects is None  # else only below a first row (_rows_check)
        for tp, f in followed.items():
            version = self.store.partition_version(tp)
            built = f.built
            if built is not None and built[0] is version:
                # The same version: the same log end and start (copy on
                # write); the HWM lives beside it.
                b = built[1]
                if (
                    b.current_leader_epoch == f.leader_epoch
                    and b.tiered_through == f.tiered_through
                    and (no_rows_check or b.tiered_through < 0)
                    and b.high_watermark == (self.store.high_watermark(tp) if sends_hwm else -1)
                ):
                    parts.append(b)
                    continue
            todo.append((len(parts), tp, f, version))
            parts.append(None)
        # The epochs before the log ends, as ever: a write in between makes
        # the leader see a divergence that is not there (and the follower
        # fetch again), never miss one.
        epochs = self.store.latest_leader_epochs([tp for _, tp, _, _ in todo]) if todo else []
        for (i, tp, f, version), last_epoch in zip(todo, epochs, strict=True):
            leo, lso, hwm = self.store.log_bounds(tp)
            if f.tiered_through is None:
                rows = self.store.segments(tp)
                f.tiered_through = rows[-1].end_offset if rows else -1
            check = self._rows_check(tp, f)
            p = ReplicaFetchPartition(
                tp, f.leader_epoch, leo, last_epoch, hwm if sends_hwm else -1, lso, f.tiered_through, check
            )
            parts[i] = p
            f.built = (version, p) if check is None else None
        return cast(list[ReplicaFetchPartition], parts)

    def _rows_check(self, tp: TopicIdPartition, f: FollowedPartition) -> RowsCheck | None:
        """The next window of this replica's rows for the leader to compare:
        at most ``ROWS_CHECKED_PER_FETCH_MAX`` rows from past the last
        window; the last window reaches ``tiered_through`` (rows refused
        here leave gaps, even no rows at all), then they start again from
        0.  Windows tile ``[0, tiered_through]``, so every leader row
        starting there is in one.  None before any row was sent here (or
        without an object store to read segments from)."""
        through = f.tiered_through
        if self.objects is None or through is None or through < 0:
            return None
        if f.checked_through >= through:
            f.checked_through = -1
        start = f.checked_through + 1
        rows = [r for r in self.store.segments(tp, start, ROWS_CHECKED_PER_FETCH_MAX) if r.start_offset <= through]
        if len(rows) == ROWS_CHECKED_PER_FETCH_MAX:
            through = rows[-1].end_offset
        elif rows:
            through = max(through, rows[-1].end_offset)
        return RowsCheck(start, through, rows_digest(rows))

    def _prepare_rewrites(self, targets: list[tuple[TopicIdPartition, ReplicaSegment, FollowedPartition]]) -> _Prepared:
        """Read the leader rows this replica lacks (a worker thread, before
        the apply): skip those it has or refused before, refuse those that
        do not fit its rows, read the others' ``.log`` within the round's
        budget and derive the store's rewrite from it."""
        out = _Prepared()
        assert self.objects is not None
        budget = REWRITE_BYTES_PER_FETCH_MAX
        own: dict[TopicIdPartition, list[Segment]] = {}
        for tp, g, f in targets:
            if tp in out.deferred:
                continue
            rows = own.get(tp)
            if rows is None:
                rows = own[tp] = self.store.segments(tp)
            if any(same_row(r, g) for r in rows) or g.object_key in f.refused:
                continue
            try:
                replaced = rows_replaced(g, rows)
                if g.size > REWRITE_SEGMENT_BYTES_MAX:
                    raise RewriteRefused(f"{g.size} bytes, over {REWRITE_SEGMENT_BYTES_MAX}")
                if g.size > budget:
                    out.deferred.add(tp)
                    continue
                budget -= g.size
                data = self.objects.get_range(g.object_key, 0, g.size)
                out.rewrites.setdefault(tp, []).append(rewrite_from_segment(tp, g, replaced, data))
            except (RewriteRefused, ObjectNotFoundError) as e:
                self._refused(tp, f, g, str(e))
            except (ObjectStoreError, OSError, ValueError) as e:
                self._refused(tp, f, g, str(e), remember=False)  # may pass: read again next time
        return out

    def _refused(
        self,
        tp: TopicIdPartition,
        f: FollowedPartition,
        g: ReplicaSegment | SegmentRewrite,
        why: str,
        *,
        remember: bool = True,
    ) -> None:
        """A leader row not taken here: counted, logged at the 1st, 2nd,
        4th... refusal, its key remembered (not read again) unless the
        cause may pass (a failed read); this replica keeps its references
        (the safe side)."""
        if remember:
            f.refused[g.object_key] = None
            while len(f.refused) > REFUSED_ROWS_MAX:
                del f.refused[next(iter(f.refused))]
        self.stats.segment_rewrites_failed += 1
        failed = self.stats.segment_rewrites_failed
        if failed & (failed - 1) == 0:
            log.warning(
                "broker %d: the leader's row %s [%d, %d] %s not taken (%s); the references here stay "
                "(%d refusals so far)",
                self.broker_id,
                tp,
                g.start_offset,
                g.end_offset,
                g.object_key,
                why,
                failed,
            )

    def _apply_fetch(
        self,
        items: list[tuple[ReplicaFetchPartition, ReplicaFetchResult, FollowedPartition]],
        prepared: _Prepared | None = None,
    ) -> tuple[bool, bool]:
        """Swap, append, truncate or reset (a worker thread): each
        partition's segment swaps first, then the appends of all partitions
        in one store write.  Returns (an HWM or log moved, some partition
        answered a metadata error)."""
        moved = stale = False
        appends: list[ReplicaAppend] = []
        hwms_before: list[int] = []
        for p, r, f in items:
            tp = p.topic_id_partition
            if r.error == Errors.NONE and r.diverging_epoch != NO_DIVERGENCE:
                leo = self.store.log_end_offset(tp)
                offset, _final = truncation_offset(
                    self.store.leader_epoch_cache(tp),
                    leo,
                    self.store.high_watermark(tp),
                    EpochEndOffset(r.diverging_epoch, r.diverging_end_offset),
                )
                removed = self.store.truncate_to(tp, offset)
                f.tiered_through = None  # rows reaching the cut went with it
                f.checked_through, f.built = -1, None
                self.stats.truncations += 1
                self.stats.entries_truncated += removed
                log.info(
                    "broker %d: truncated %s to %d (%d entries) after divergence at epoch %d",
                    self.broker_id,
                    tp,
                    offset,
                    removed,
                    r.diverging_epoch,
                )
                moved = True
            elif r.error == Errors.NONE:
                if r.segments:
                    # Before the append: the rows cover entries this log
                    # held when it fetched, and the append may raise its log
                    # start into one of them (below it a swap is refused).
                    self._swap(tp, f, r.segments)
                if prepared is not None and tp in prepared.rewrites:
                    self._take_over(tp, f, prepared.rewrites[tp])
                c = p.rows_check
                if c is not None and (prepared is None or tp not in prepared.deferred):
                    # The next window starts after this one, or after the
                    # last row sent when the leader had more in it.
                    full = len(r.rewrites) == ROWS_CHECKED_PER_FETCH_MAX
                    f.checked_through = min(c.through, r.rewrites[-1].end_offset) if full else c.through
                before = self.store.high_watermark(tp)
                if r.entries or r.high_watermark > before or r.log_start_offset > 0:
                    appends.append(ReplicaAppend(tp, r.entries, r.high_watermark, r.log_start_offset))
                    hwms_before.append(before)
            elif r.error == Errors.OFFSET_OUT_OF_RANGE:
                leo = self.store.log_end_offset(tp)
                if leo > r.log_end_offset >= 0:
                    removed = self.store.truncate_to(tp, r.log_end_offset)
                    self.stats.truncations += 1
                    self.stats.entries_truncated += removed
                elif leo < r.log_start_offset:
                    self.store.reset_to(tp, r.log_start_offset)
                f.tiered_through = None
                f.checked_through, f.built = -1, None
                moved = True
            else:
                stale = True
        if appends:
            outcomes = self.store.append_replicated_fetch(appends)
            for a, before, outcome in zip(appends, hwms_before, outcomes, strict=True):
                tp = a.topic_id_partition
                if isinstance(outcome, BaseException):
                    # This partition alone: the others of the fetch stand.
                    log.error("broker %d: appending to %s failed: %s", self.broker_id, tp, outcome)
                    stale = True
                    continue
                self.stats.entries_replicated += len(a.entries)
                moved = moved or self.store.high_watermark(tp) > before
        return moved, stale

    def _take_over(self, tp: TopicIdPartition, f: FollowedPartition, rewrites: list[SegmentRewrite]) -> None:
        """Apply the leader rows read before the apply (the apply thread),
        each in one store write that checks it against this log."""
        for req in rewrites:
            result = self.store.swap_to_segment(req, replicated=True)
            if result.error != Errors.NONE:
                self._refused(tp, f, req, f"{result.error.name}: {result.message}")
                continue
            self.stats.segment_rewrites_applied += 1
            if f.tiered_through is not None:
                f.tiered_through = max(f.tiered_through, req.end_offset)

    def _swap(self, tp: TopicIdPartition, f: FollowedPartition, rows: tuple[ReplicaSegment, ...]) -> None:
        """Apply the leader's segment rows of ``tp`` in order (the apply
        thread).  Each moves ``tiered_through`` past it, applied or refused:
        a refusal is not transient (the range is in this log, below the
        fetch offset the leader chose it by), so asking again would only
        bring the same row back at once, every fetch."""
        for g in rows:
            if f.tiered_through is not None and g.start_offset <= f.tiered_through:
                continue  # a row this log has (a stale answer)
            swap = SegmentSwap(tp, g.start_offset, g.end_offset, g.object_key, g.size, g.uploader)
            result = self.store.swap_to_segment(swap, replicated=True)
            f.tiered_through = g.end_offset
            if result.error == Errors.NONE:
                self.stats.segment_swaps_applied += 1
                continue
            self.stats.segment_swaps_failed += 1
            failed = self.stats.segment_swaps_failed
            if failed & (failed - 1) == 0:  # the 1st, 2nd, 4th, 8th... refusal: a bounded log
                log.warning(
                    "broker %d: the swap of %s [%d, %d] to %s refused (%s: %s); its WAL references stay "
                    "(%d refusals so far)",
                    self.broker_id,
                    tp,
                    g.start_offset,
                    g.end_offset,
                    g.object_key,
                    result.error.name,
                    result.message,
                    failed,
                )


def _end_hold(store: MetadataStore, hold: Hold, _done: object) -> None:
    store.release_grace.end_hold(hold)


def _answer_keys(
    items: list[tuple[ReplicaFetchPartition, ReplicaFetchResult, FollowedPartition]], prepared: _Prepared
) -> set[str]:
    """The objects an apply of these answers may come to reference: its
    entries' WAL objects, the rows' segments, the rows taken over."""
    keys = {e.object_key for _, r, _ in items for e in r.entries}
    keys.update(g.object_key for _, r, _ in items for g in r.segments)
    keys.update(req.object_key for reqs in prepared.rewrites.values() for req in reqs)
    return keys


__all__ = ["ReplicaFetchers"]
