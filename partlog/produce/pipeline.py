"""The produce pipeline of one broker, sans-IO: WAL buffer, uploads, commit
fan-out grouped per leader broker, and the answers to producers.

Inputs (each with the current time as a value): ``produce``, ``tick``,
``upload_done``, ``commit_done``.  Outputs: actions for a shell to perform
(``Upload``, ``SendCommit``, ``Reply``).  The asyncio broker, the deterministic
simulations and the fault tests all drive this same class; the order rules
below are the pipeline's, so a shell performs each action as it comes and
cannot get them wrong.

The life of a produce request:

0. Admission, in arrival order: ``arrive(nbytes)`` gives the request a
   ticket; it may be produced once ``admissible(ticket)``: every earlier
   ticket has left the queue, and its bytes fit ``room_bytes()`` (or nothing
   is in flight; a request above ``inflight_bytes_max`` is then answered
   RECORD_LIST_TOO_LARGE).  ``leave(ticket)`` when it is produced or given
   up (timed out).  A later, smaller request never overtakes one waiting for
   room: an idempotent producer's later batches would reach the leader
   before its earlier ones.
1. ``produce`` adds its batches to the open segment.  The segment closes
   ("rotates") by the rule of :mod:`partlog.produce.rotation`: when it holds
   ``buffer_bytes_max`` bytes; when nothing is in flight (no closed segment
   still uploading or committing), it is ``rotation_grace_ms`` old and the
   PUT budget (``wal_puts_per_s_max``) has a token; at the latest when its
   first batch is ``commit_interval_ms`` old.  Every input re-applies the
   rule (a ``commit_done`` that ends the last round closes the open segment
   in its own actions); ``tick`` at ``next_deadline_ms`` applies the timed
   parts.  A closed segment becomes an ``Upload`` (with its ``reason``), at
   most ``uploads_inflight_max`` at a time (the rest wait, in order).
   An ``urgent`` request (a coordinator's record: ``__transaction_state``,
   ``__consumer_offsets``, on the critical path of every transaction and
   offset commit) closes the open segment at once, with whatever it holds,
   instead of waiting for the timer; it is still acknowledged only once
   uploaded, committed and (acks=all) replicated (``stats.early_closes``).
2. ``upload_done``: a failed upload answers its batches with a retriable
   error.  A successful one fans out: its batches grouped by the partition's
   leader broker, ONE ``SendCommit`` per leader broker (the shell makes the
   one for this broker a direct call).
3. Commits leave in WAL-file order: a segment's commits are released only
   once every earlier segment's upload has finished (either way).  With
   idempotent producers keeping up to 5 requests in flight, a later file's
   batches must not reach a leader before an earlier file's, or the leader
   sees a sequence gap.  At most ``commits_in_flight_max`` ``SendCommit``s
   are out to one leader (sent, ``commit_done`` not yet called); the rest
   wait inside the pipeline, per leader in release order, and go out as
   ``commit_done`` frees their leader's slots.  The shell keeps the order of
   the ``SendCommit``s it is given all the way to each leader (one queue
   and one connection per leader, processed in arrival order).
   ``last_released`` names each segment released by the last
   ``upload_done`` and its leaders (its fan-out), held commits included.
4. ``commit_done``: each batch gets the leader's answer; a produce request is
   answered (``Reply``) when all its batches are.  The commits it lets out
   of the leader's window come first in its actions.

Memory: bytes are counted from ``produce`` until the request's ``Reply``;
``room_bytes`` tells the shell how much more it may accept (back-pressure:
it delays reading produce requests).
"""

from __future__ import annotations

import logging
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from partlog.kafka.batch_header import CRC_START, HEADER_SIZE, LOG_OVERHEAD, MAGIC_V2
from partlog.kafka.crc32c import crc32c
from partlog.kafka.errors import Errors
from partlog.kafka.records import CommitBatchRequest, CommitBatchResponse, TopicIdPartition
from partlog.limits import SEGMENT_BATCHES_MAX
from partlog.produce.rotation import (
    ROTATION_GRACE_MS_DEFAULT,
    RotationPolicy,
    RotationReason,
    default_puts_per_s_max,
)
from partlog.wal.key import make_wal_key
from partlog.wal.segment import WalSegmentBuilder

log = logging.getLogger(__name__)

# Kafka's diskless defaults (KIP-1163): diskless.append.commit.interval.ms and
# diskless.append.buffer.max.bytes.
COMMIT_INTERVAL_MS_DEFAULT = 250
BUFFER_BYTES_MAX_DEFAULT = 4 * 1024 * 1024
# Bytes accepted but not yet answered.  16 segments' worth: uploads of ~100 ms
# (KIP-1163's p50) at 4 MiB segments sustain ~160 MiB/s before back-pressure.
INFLIGHT_BYTES_MAX_DEFAULT = 64 * 1024 * 1024
UPLOADS_INFLIGHT_MAX_DEFAULT = 8


# Commits out to one leader at once (ProduceConfig.commits_in_flight_max):
# pipelined on one connection, so they are appended in WAL-file order.
COMMITS_IN_FLIGHT_MAX = 64


@dataclass(frozen=True, slots=True)
class ProduceConfig:
    commit_interval_ms: int = COMMIT_INTERVAL_MS_DEFAULT
    buffer_bytes_max: int = BUFFER_BYTES_MAX_DEFAULT
    inflight_bytes_max: int = INFLIGHT_BYTES_MAX_DEFAULT
    uploads_inflight_max: int = UPLOADS_INFLIGHT_MAX_DEFAULT
    key_prefix: str = "wal"
    commits_in_flight_max: int = COMMITS_IN_FLIGHT_MAX
    # The rotation rule (partlog.produce.rotation): a file closes early,
    # with nothing in flight, once this old; rotation_grace_ms >=
    # commit_interval_ms gives back the interval-only rule.
    rotation_grace_ms: int = ROTATION_GRACE_MS_DEFAULT
    # Early closes a second, per broker (a token bucket); None: one per
    # commit interval, what the interval-only rule could spend.
    wal_puts_per_s_max: int | None = None

    def __post_init__(self) -> None:
        for name in (
            "commit_interval_ms",
            "buffer_bytes_max",
            "inflight_bytes_max",
            "uploads_inflight_max",
            "commits_in_flight_max",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.wal_puts_per_s_max is not None and self.wal_puts_per_s_max <= 0:
            raise ValueError(f"wal_puts_per_s_max must be > 0, got {self.wal_puts_per_s_max}")
        if self.rotation_grace_ms < 0:
            raise ValueError(f"rotation_grace_ms must be >= 0, got {self.rotation_grace_ms}")
        try:
            # A bad prefix would otherwise fail at the first rotation, with
            # requests already accepted.
            make_wal_key(self.key_prefix, 0, 0, "0")
        except ValueError as e:
            raise ValueError(f"key_prefix {self.key_prefix!r}: {e}") from e
        if self.inflight_bytes_max < self.buffer_bytes_max:
            raise ValueError(
                f"inflight_bytes_max ({self.inflight_bytes_max}) must be >= buffer_bytes_max ({self.buffer_bytes_max})"
            )

    def puts_per_s_max(self) -> int:
        """The PUT budget in force: ``wal_puts_per_s_max`` or its default."""
        if self.wal_puts_per_s_max is not None:
            return self.wal_puts_per_s_max
        return default_puts_per_s_max(self.commit_interval_ms)


# ------------------------------------------------------------------ actions


@dataclass(frozen=True, slots=True)
class Upload:
    segment_id: int
    key: str
    data: bytes
    # Why its segment closed (partlog_wal_puts counts PUTs by it).
    reason: RotationReason
    # The partitions in the segment's footer (walmgr is told about them).
    partitions: tuple[TopicIdPartition, ...] = ()
    # When its first batch came and when it closed (the inputs' now_ms): the
    # shell's file_open stage metric.
    opened_ms: int = 0
    closed_ms: int = 0


@dataclass(frozen=True, slots=True)
class SendCommit:
    """One commit RPC: the batches of segment ``segment_id`` led by ``leader_broker_id``."""

    segment_id: int
    key: str
    leader_broker_id: int
    file_size: int
    requests: tuple[CommitBatchRequest, ...]
    # acks_all[i]: requests[i] came with acks=all, so the leader answers it
    # once it is replicated to the ISR (empty: none did).
    acks_all: tuple[bool, ...] = ()
    # (index in requests, transactional id) of the requests whose produce
    # request named one: the leader verifies their transactions (KIP-890
    # part 1), each under its own request's id.
    transactional_ids: tuple[tuple[int, str], ...] = ()


@dataclass(frozen=True, slots=True)
class BatchResult:
    """The answer for one batch of a produce request (Kafka's PartitionResponse)."""

    topic_id_partition: TopicIdPartition
    error: Errors
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class Reply:
    produce_id: int
    results: tuple[BatchResult, ...]


Action = Upload | SendCommit | Reply


@dataclass(frozen=True, slots=True)
class Release:
    """Segment ``segment_id``'s commits were released: one to each of
    ``leaders`` (sorted), sent now or when that leader's window has room."""

    segment_id: int
    leaders: tuple[int, ...]


# -------------------------------------------------------------- internals


@dataclass(slots=True)
class _Produce:
    produce_id: int
    nbytes: int
    results: list[BatchResult | None]
    pending: int
    acks_all: bool = True
    transactional_id: str | None = None


@dataclass(slots=True)
class _Segment:
    segment_id: int
    key: str
    size: int
    # Per batch in add order: (produce_id, index in that request, request for the leader)
    batches: list[tuple[int, int, CommitBatchRequest]]
    uploaded: bool | None = None  # None: in flight or waiting
    commits_pending: set[int] = field(default_factory=set)
    # Leaders whose commit waits for a slot in their window (not yet sent).
    commits_held: set[int] = field(default_factory=set)
    # request_id (position in the segment) -> leader broker its commit went to
    routes: dict[int, int] = field(default_factory=dict)


@dataclass(slots=True)
class PipelineStats:
    segments_uploaded: int = 0
    segments_failed: int = 0
    bytes_uploaded: int = 0
    commits_sent: int = 0
    commit_failures: int = 0
    # Segments closed before their timer by an urgent request.
    early_closes: int = 0
    # Segments closed, by reason (RotationReason's values).
    rotations: dict[str, int] = field(default_factory=dict)
    # Commit RPCs per segment, by where the leader is (filled by the shell's
    # classifier): see ``commit_fanout``.
    commit_fanout: list[int] = field(default_factory=list)


class ProducePipeline:
    """See the module docstring.

    ``leader_of(tp)`` answers the broker id leading ``tp`` now (None when
    unknown); ``rand_hex()`` gives the random part of object keys (the shell
    passes a CSPRNG, simulations a seeded one).
    """

    def __init__(
        self,
        broker_id: int,
        config: ProduceConfig,
        *,
        leader_of: Callable[[TopicIdPartition], int | None],
        rand_hex: Callable[[], str],
        cluster_id: uuid.UUID | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.config = config
        # Written into every segment's footer; public so a shell that learns
        # the cluster id after construction (from its metadata) can set it.
        self.cluster_id = cluster_id
        # Public: a shell swaps it when cluster metadata changes.
        self.leader_of = leader_of
        self._rand_hex = rand_hex
        self._builder: WalSegmentBuilder | None = None
        self._open_batches: list[tuple[int, int, TopicIdPartition, bytes]] = []
        # Public for inspection (the simulation's checks, metrics).
        self.rotation = RotationPolicy(config.commit_interval_ms, config.rotation_grace_ms, config.puts_per_s_max())
        self._produces: dict[int, _Produce] = {}
        self._next_segment_id = 0
        # Closed segments in id order, until their commits are all sent.
        self._segments: dict[int, _Segment] = {}
        self._waiting_uploads: deque[Upload] = deque()
        self._uploads_inflight = 0
        self._next_to_release = 0  # lowest segment id whose commits are not yet sent
        # Per leader: commits sent and not done, and those held for a slot
        # (release order).  Held ones exist only while the window is full.
        self._commits_out: dict[int, int] = {}
        self._commits_held: dict[int, deque[SendCommit]] = {}
        # Admission queue: tickets waiting, in arrival order, with their bytes.
        self._tickets: dict[int, int] = {}
        self._next_ticket = 0
        self.inflight_bytes = 0
        self.stats = PipelineStats()
        # What the last upload_done released (its fan-out): see the module doc.
        self.last_released: tuple[Release, ...] = ()

    # ---------------------------------------------------------- admission

    def arrive(self, nbytes: int) -> int:
        """A produce request of ``nbytes`` arrived: its admission ticket."""
        ticket = self._next_ticket
        self._next_ticket += 1
        self._tickets[ticket] = nbytes
        return ticket

    def admissible(self, ticket: int) -> bool:
        """Whether the request holding ``ticket`` may be produced now: no
        earlier ticket waits, and it fits ``room_bytes()`` or nothing is in
        flight.  Otherwise the shell waits (for a ``Reply``, or an earlier
        ticket's ``leave``) and asks again."""
        assert ticket in self._tickets, f"ticket {ticket} is not waiting"
        first = next(iter(self._tickets))
        return ticket == first and (self._tickets[ticket] <= self.room_bytes() or not self._produces)

    def leave(self, ticket: int) -> None:
        """``ticket`` leaves the admission queue: admitted (``produce`` it
        now, before anything else changes the room) or given up."""
        del self._tickets[ticket]

    # ------------------------------------------------------------- inputs

    def room_bytes(self) -> int:
        """How many more produce bytes may be accepted now."""
        return max(0, self.config.inflight_bytes_max - self.inflight_bytes)

    def next_deadline_ms(self) -> int | None:
        """When ``tick`` must next be called (the open segment's rotation
        time); None with no segment open.  Any input may move it, earlier
        too: a shell re-reads it after each."""
        return self.rotation.next_ms()

    def produce(
        self,
        produce_id: int,
        batches: Sequence[tuple[TopicIdPartition, bytes]],
        now_ms: int,
        *,
        acks_all: bool = True,
        urgent: bool = False,
        transactional_id: str | None = None,
    ) -> list[Action]:
        """Accept a produce request of (partition, v2 batch) pairs; with
        ``acks_all`` its commits wait for replication to the ISR; an
        ``urgent`` one closes the open segment holding its batches now; its
        ``transactional_id`` travels to the leaders with its batches.

        A request larger than ``inflight_bytes_max`` can never fit and is
        answered ``RECORD_LIST_TOO_LARGE``; otherwise the shell must have
        waited for ``room_bytes()``.  Batches with broken framing (length,
        magic) or a failing CRC-32C are answered ``CORRUPT_MESSAGE`` at once and
        never reach a segment.
        """
        if produce_id in self._produces:
            raise ValueError(f"produce id {produce_id} is already in flight")
        nbytes = sum(len(b) for _, b in batches)
        if nbytes > self.config.inflight_bytes_max:
            return [Reply(produce_id, tuple(BatchResult(tp, Errors.RECORD_LIST_TOO_LARGE) for tp, _ in batches))]
        assert nbytes <= self.room_bytes() or not self._produces, "shell must wait for room_bytes()"
        p = _Produce(produce_id, nbytes, [None] * len(batches), 0, acks_all, transactional_id)
        accepted: list[tuple[int, TopicIdPartition, bytes]] = []
        for i, (tp, batch) in enumerate(batches):
            problem = _framing_problem(batch)
            if problem:
                p.results[i] = BatchResult(tp, Errors.CORRUPT_MESSAGE, error_message=problem)
            else:
                accepted.append((i, tp, batch))
        if not accepted:
            return [Reply(produce_id, tuple(r for r in p.results if r is not None))]
        p.pending = len(accepted)
        self._produces[produce_id] = p
        self.inflight_bytes += nbytes
        actions: list[Action] = []
        for i, tp, batch in accepted:
            if self._builder is None:
                self._builder = WalSegmentBuilder(self.broker_id, now_ms, self.cluster_id)
                self.rotation.opened(now_ms)
            self._builder.add(tp, batch)
            self._open_batches.append((produce_id, i, tp, batch))
            if (
                self._builder.size_bytes >= self.config.buffer_bytes_max
                or self._builder.batch_count >= SEGMENT_BATCHES_MAX
            ):
                actions += self._rotate(now_ms, RotationReason.SIZE)
        if urgent and self._builder is not None:
            # Its last batches are in the open segment (a full one closed
            # already): no wait for the timer.
            self.stats.early_closes += 1
            actions += self._rotate(now_ms, RotationReason.URGENT)
        return actions + self._rotate_if_due(now_ms)

    def tick(self, now_ms: int) -> list[Action]:
        """Rotate the open segment if the rule says so at ``now_ms``."""
        return self._rotate_if_due(now_ms)

    def flush(self, now_ms: int) -> list[Action]:
        """Rotate now, whatever the age (shutdown, tests)."""
        return self._rotate(now_ms, RotationReason.FLUSH) if self._builder is not None else []

    def upload_done(self, segment_id: int, now_ms: int, error: str | None = None) -> list[Action]:
        """The upload of ``segment_id`` finished; ``error`` says why it failed."""
        seg = self._segments[segment_id]
        assert seg.uploaded is None, f"segment {segment_id} finished uploading twice"
        self._uploads_inflight -= 1
        actions: list[Action] = []
        if error is None:
            seg.uploaded = True
            self.stats.segments_uploaded += 1
            self.stats.bytes_uploaded += seg.size
        else:
            seg.uploaded = False
            self.stats.segments_failed += 1
            log.warning("upload failed key=%s error=%s", seg.key, error)
            for produce_id, index, req in seg.batches:
                actions += self._answer(
                    produce_id,
                    index,
                    BatchResult(req.topic_id_partition, Errors.KAFKA_STORAGE_ERROR, error_message=f"upload: {error}"),
                )
        if self._waiting_uploads and self._uploads_inflight < self.config.uploads_inflight_max:
            self._uploads_inflight += 1
            actions.append(self._waiting_uploads.popleft())
        actions += self._release_commits()
        return actions + self._rotate_if_due(now_ms)

    def commit_done(
        self,
        segment_id: int,
        leader_broker_id: int,
        responses: Sequence[CommitBatchResponse] | None,
        now_ms: int,
        error: Errors = Errors.REQUEST_TIMED_OUT,
        error_message: str | None = None,
    ) -> list[Action]:
        """The commit RPC to ``leader_broker_id`` for ``segment_id`` finished.

        ``responses`` are the leader's, in request order; None means the RPC
        failed (timeout, connection lost) and every batch in it gets
        ``error``, retriable.  (The leader may still have applied it: an
        idempotent producer's retry is then answered as a duplicate.)
        """
        seg = self._segments.get(segment_id)
        assert seg is not None and leader_broker_id in seg.commits_pending, (
            f"unexpected commit_done segment={segment_id} leader={leader_broker_id}"
        )
        assert leader_broker_id not in seg.commits_held, f"commit_done for a held commit segment={segment_id}"
        seg.commits_pending.discard(leader_broker_id)
        mine = [b for b in seg.batches if seg.routes[b[2].request_id] == leader_broker_id]
        # Its slot is free: the leader's next held commit goes out, first.
        actions: list[Action] = self._slot_freed(leader_broker_id)
        if responses is None:
            self.stats.commit_failures += 1
            for produce_id, index, req in mine:
                actions += self._answer(
                    produce_id, index, BatchResult(req.topic_id_partition, error, error_message=error_message)
                )
        else:
            assert len(responses) == len(mine), f"leader {leader_broker_id} answered {len(responses)} of {len(mine)}"
            for (produce_id, index, req), resp in zip(mine, responses, strict=True):
                err = resp.errors
                if err == Errors.COMMIT_DEADLINE_EXCEEDED:
                    err = Errors.REQUEST_TIMED_OUT  # our own code: producers know Kafka's
                actions += self._answer(
                    produce_id,
                    index,
                    BatchResult(
                        req.topic_id_partition,
                        err,
                        resp.assigned_base_offset,
                        resp.log_append_time,
                        resp.log_start_offset,
                    ),
                )
        if not seg.commits_pending and segment_id < self._next_to_release:
            del self._segments[segment_id]
        return actions + self._rotate_if_due(now_ms)

    # ----------------------------------------------------------- internals

    def _rotate_if_due(self, now_ms: int) -> list[Action]:
        """The end of every input: whether anything is still in flight, then
        the rule (partlog.produce.rotation) for the open segment."""
        self.rotation.observe(bool(self._segments), now_ms)
        reason = self.rotation.due(now_ms)
        return [] if reason is None else self._rotate(now_ms, reason)

    def _rotate(self, now_ms: int, reason: RotationReason) -> list[Action]:
        builder, batches = self._builder, self._open_batches
        assert builder is not None and self.rotation.opened_ms is not None
        opened_ms = self.rotation.opened_ms
        self._builder, self._open_batches = None, []
        self.rotation.closed(reason, now_ms)
        self.stats.rotations[reason] = self.stats.rotations.get(reason, 0) + 1
        segment_id = self._next_segment_id
        self._next_segment_id += 1
        # The key's time is never before the footer's (the opening): after a
        # clock stepped back walmgr would hold the file INVALID for ever.
        key_ms = max(now_ms, opened_ms)
        key = str(make_wal_key(self.config.key_prefix, key_ms, self.broker_id, self._rand_hex()))
        built = builder.build()
        seg_batches = []
        for coord, (produce_id, index, tp, batch) in zip(built.coordinates, batches, strict=True):
            # request_id = position in the segment: routes answers back.
            req = CommitBatchRequest.from_header(coord.index, tp, coord.byte_offset, batch[:HEADER_SIZE])
            seg_batches.append((produce_id, index, req))
        self._segments[segment_id] = _Segment(segment_id, key, len(built.data), seg_batches)
        self.rotation.observe(True, now_ms)
        upload = Upload(
            segment_id,
            key,
            built.data,
            reason,
            tuple(r.topic_id_partition for r in built.footer.partitions),
            opened_ms,
            now_ms,
        )
        if self._uploads_inflight < self.config.uploads_inflight_max:
            self._uploads_inflight += 1
            return [upload]
        self._waiting_uploads.append(upload)
        return []

    def _release_commits(self) -> list[Action]:
        """Release the commits of every uploaded segment whose predecessors
        all finished uploading, in segment order: sent, or held for a slot."""
        actions: list[Action] = []
        released: list[Release] = []
        while (seg := self._segments.get(self._next_to_release)) is not None and seg.uploaded is not None:
            self._next_to_release += 1
            if not seg.uploaded:
                del self._segments[seg.segment_id]
                continue
            by_leader: dict[int, list[CommitBatchRequest]] = {}
            acks: dict[int, list[bool]] = {}
            txn_ids: dict[int, dict[int, str]] = {}
            routes = seg.routes
            for produce_id, index, req in seg.batches:
                leader = self.leader_of(req.topic_id_partition)
                if leader is None:
                    actions += self._answer(
                        produce_id,
                        index,
                        BatchResult(
                            req.topic_id_partition, Errors.NOT_LEADER_OR_FOLLOWER, error_message="leader unknown"
                        ),
                    )
                    continue
                routes[req.request_id] = leader
                by_leader.setdefault(leader, []).append(req)
                produced = self._produces[produce_id]
                acks.setdefault(leader, []).append(produced.acks_all)
                if produced.transactional_id is not None and req.producer_id >= 0:
                    txn_ids.setdefault(leader, {})[len(by_leader[leader]) - 1] = produced.transactional_id
            self.stats.commit_fanout.append(len(by_leader))
            if not by_leader:
                del self._segments[seg.segment_id]
                continue
            seg.commits_pending = set(by_leader)
            seg.batches = [b for b in seg.batches if b[2].request_id in routes]
            released.append(Release(seg.segment_id, tuple(sorted(by_leader))))
            for leader, reqs in sorted(by_leader.items()):
                self.stats.commits_sent += 1
                flags = acks[leader]
                c = SendCommit(
                    seg.segment_id,
                    seg.key,
                    leader,
                    seg.size,
                    tuple(reqs),
                    tuple(flags) if any(flags) else (),
                    tuple(txn_ids.get(leader, {}).items()),
                )
                out = self._commits_out.get(leader, 0)
                if out < self.config.commits_in_flight_max:
                    self._commits_out[leader] = out + 1
                    actions.append(c)
                else:
                    seg.commits_held.add(leader)
                    self._commits_held.setdefault(leader, deque()).append(c)
        self.last_released = tuple(released)
        return actions

    def _slot_freed(self, leader: int) -> list[Action]:
        """A commit to ``leader`` is done: its next held one is sent in the
        slot (the window stays full while any wait), else the slot frees."""
        held = self._commits_held.get(leader)
        if held:
            c = held.popleft()
            if not held:
                del self._commits_held[leader]
            self._segments[c.segment_id].commits_held.discard(leader)
            return [c]
        out = self._commits_out[leader] - 1
        assert out >= 0
        if out:
            self._commits_out[leader] = out
        else:
            del self._commits_out[leader]
        return []

    def _answer(self, produce_id: int, index: int, result: BatchResult) -> list[Action]:
        p = self._produces[produce_id]
        assert p.results[index] is None, f"produce {produce_id} batch {index} answered twice"
        p.results[index] = result
        p.pending -= 1
        if p.pending:
            return []
        del self._produces[produce_id]
        self.inflight_bytes -= p.nbytes
        assert self.inflight_bytes >= 0
        return [Reply(produce_id, tuple(r for r in p.results if r is not None))]

    # ------------------------------------------------------- inspection

    @property
    def produces_inflight(self) -> int:
        return len(self._produces)

    @property
    def segments_open(self) -> int:
        return len(self._segments)

    @property
    def uploads_inflight(self) -> int:
        return self._uploads_inflight

    @property
    def uploads_waiting(self) -> int:
        return len(self._waiting_uploads)

    def commits_out(self, leader: int) -> int:
        """Commits sent to ``leader`` whose ``commit_done`` has not come."""
        return self._commits_out.get(leader, 0)

    def commits_held(self, leader: int) -> int:
        """Commits to ``leader`` waiting for a slot in its window."""
        return len(self._commits_held.get(leader, ()))


def _framing_problem(batch: bytes) -> str | None:
    """Why ``batch`` cannot go into a segment, or None."""
    if len(batch) < HEADER_SIZE:
        return f"batch of {len(batch)} bytes is shorter than a v2 header ({HEADER_SIZE})"
    length = int.from_bytes(batch[8:12], "big", signed=True)
    if length + LOG_OVERHEAD != len(batch):
        return f"batch length field says {length + LOG_OVERHEAD} bytes, got {len(batch)}"
    if batch[16] != MAGIC_V2:
        return f"batch magic {batch[16]}, only v2 (magic {MAGIC_V2}) is supported"
    # As Kafka's broker (batch.ensureValid() on produce): a batch whose CRC
    # fails would be acknowledged, then refused by every fetch (fetch_path
    # checks it), leaving the partition unreadable past it.
    want = int.from_bytes(batch[17:CRC_START], "big")
    got = crc32c(memoryview(batch)[CRC_START:])
    if got != want:
        return f"batch CRC-32C is {got:#010x}, header says {want:#010x}"
    return None
