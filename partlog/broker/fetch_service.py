"""The broker's read side: fetches served from its own replicas with
long-poll, and requests routed to other brokers.

* ``fetch``: partitions this broker holds a replica of (any replica serves
  up to its HWM, KIP-392 style): the store's coordinates, one ranged GET per
  WAL object, or aligned chunks of a tiered segment (both through a
  :class:`RangeCache`), assembled; a fetch with too
  little data waits until ``NewData`` wakes it (a commit landed, an HWM
  moved) or ``max_wait_ms`` passes.
* ``fetch_routed``: any partition: read here, or fetched over the broker RPC
  from a replica in the client's AZ (or the leader).
* ``on_leaders`` / ``list_offsets_routed``: requests a partition's leader
  answers, asked here (``as_leader``) or over the broker RPC.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from partlog.broker.local_segments import LocalSegments
from partlog.broker.metrics import BrokerMetrics
from partlog.broker.peers import Peers
from partlog.controller.cluster_meta import MetadataSource
from partlog.fetch.reads import (
    CACHE_CHUNKS_MIN,
    SEGMENT_READ_CHUNK_BYTES_DEFAULT,
    ObjectRead,
    RangeCache,
    assemble,
    is_segment_key,
    join_chunks,
    plan_reads,
    segment_chunks,
)
from partlog.kafka.batch_header import HEADER_SIZE
from partlog.kafka.errors import Errors, peer_error
from partlog.kafka.records import BatchInfo, FindBatchRequest, ListOffsetsRequest, TopicIdPartition
from partlog.replication.manager import ReplicaManager
from partlog.rpc.client import RPC_TIMEOUT_MS_DEFAULT, RpcConnectionError, RpcTimeoutError
from partlog.rpc.frame import RpcError
from partlog.rpc.methods import PARTITIONS_MAX, RESPONSE_SCHEMAS
from partlog.rpc.wire import WireError
from partlog.runtime import Clock
from partlog.store import MetadataStore
from partlog.wal.objectstore import ObjectStore

log = logging.getLogger(__name__)

# Chunk GETs started ahead of a segment's reader at once (each at most a
# chunk: 32 MiB in flight with the default chunk).
PREFETCHES_MAX = 4
# A fetch finds its batches on the event loop, not in a worker thread, when
# it names at most this many partitions and can find at most this many
# batches (per partition, one per offset up to the log end and per header's
# worth of its byte limit): a consumer at the tail of its partitions.  A
# thread's two hand-offs wait for the interpreter behind any other busy
# thread, up to its switch interval (5 ms) each; the bounded read costs
# about 1-2 ms at most.
FETCH_FIND_INLINE_PARTITIONS_MAX = 64
FETCH_FIND_INLINE_BATCHES_MAX = 256


class NewData:
    """Wakes whoever waits for entries to become visible on this broker.
    ``event`` is replaced on every wake: a waiter takes it before reading
    what it guards, so a wake in between is never missed."""

    def __init__(self) -> None:
        self.event = asyncio.Event()

    def wake(self) -> None:
        self.event.set()
        self.event = asyncio.Event()


class FetchService:
    """``metadata()`` reads the broker's current metadata; ``as_leader(method,
    body)`` answers a leader's request (``on_leaders``) on this broker."""

    def __init__(
        self,
        broker_id: int,
        az: str,
        store: MetadataStore,
        replicas: ReplicaManager,
        objects: ObjectStore,
        cache: RangeCache,
        *,
        data: NewData,
        peers: Peers,
        metrics: BrokerMetrics,
        metadata: Callable[[], MetadataSource],
        as_leader: Callable[[str, Any], Awaitable[Any]],
        clock: Clock,
        segment_read_chunk_bytes: int = SEGMENT_READ_CHUNK_BYTES_DEFAULT,
        local: LocalSegments | None = None,
    ) -> None:
        self.clock = clock  # the long poll's deadline
        self.broker_id = broker_id
        self.az = az
        self.store = store
        self.replicas = replicas
        self.objects = objects
        self.cache = cache
        # Segment reads in aligned chunks (partlog.fetch.reads), while the
        # cache holds enough of them; 0: exactly the batches' span.
        chunked = segment_read_chunk_bytes > 0 and cache.bytes_max >= CACHE_CHUNKS_MIN * segment_read_chunk_bytes
        self.chunk_bytes = segment_read_chunk_bytes if chunked else 0
        # Local copies of recent segments, read before the cache and the store.
        self.local = local
        # GETs running, by (key, offset, length): a reader of a chunk being
        # read (ahead) awaits that GET rather than sending another.
        self._inflight: dict[tuple[str, int, int], asyncio.Future[bytes | BaseException]] = {}
        self._prefetches = 0
        self.data = data
        self.peers = peers
        self.metrics = metrics
        self._metadata = metadata
        self._as_leader = as_leader

    async def fetch(
        self, reqs: list[FindBatchRequest], *, max_wait_ms: int, min_bytes: int, max_bytes: int
    ) -> dict[str, Any]:
        self.metrics.fetches.inc()
        # Any replica serves fetches, up to its HWM (KIP-392 style).
        led = [r for r in reqs if self.replicas.serves(r.topic_id_partition)]
        deadline = self.clock.monotonic() + max_wait_ms / 1000
        while True:
            waiter = self.data.event
            if not led:
                found = []
            elif self._find_inline(led):
                self.metrics.fetch_finds_inline.inc()
                found = self.store.find_batches(led, max_bytes)
            else:
                found = await asyncio.to_thread(self.store.find_batches, led, max_bytes)
            total = sum(b.metadata.byte_size for f in found for b in f.batches)
            left = deadline - self.clock.monotonic()
            # Nothing led here: no commit of ours can help, answer now.
            if not led or total >= min_bytes or left <= 0 or any(f.errors != Errors.NONE for f in found):
                break
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(left):
                    await waiter.wait()
        by_tp: dict[TopicIdPartition, list[BatchInfo]] = {}
        for req, f in zip(led, found, strict=True):
            if f.errors == Errors.NONE:
                by_tp[req.topic_id_partition] = list(f.batches)
        reads = plan_reads([b for bs in by_tp.values() for b in bs])
        got = await asyncio.gather(*(self._read_planned(r) for r in reads))
        data = assemble(by_tp, {r.key: g for r, g in zip(reads, got, strict=True)})
        for d in data:
            if d.error == Errors.CORRUPT_MESSAGE:
                # Not retriable: the bytes will not change.  Counted and
                # logged, as Kafka's broker logs a corrupt log segment.
                self.metrics.fetch_corrupt.inc()
                log.warning("fetch of %s refused: %s", d.topic_id_partition, d.error_message)
        assembled = {d.topic_id_partition: d for d in data}
        found_by_tp = {req.topic_id_partition: f for req, f in zip(led, found, strict=True)}
        out = []
        for r in reqs:
            tp = r.topic_id_partition
            answer = found_by_tp.get(tp)
            if answer is None:
                out.append(_failed(Errors.NOT_LEADER_OR_FOLLOWER, "no replica here"))
            elif answer.errors != Errors.NONE:
                out.append(
                    [int(answer.errors), answer.high_watermark, answer.log_start_offset, b"", answer.error_message,
                     -1, []]
                )  # fmt: skip
            else:
                d = assembled[tp]
                out.append(
                    [int(d.error), answer.high_watermark, answer.log_start_offset, d.records, d.error_message,
                     answer.last_stable_offset, [[a.producer_id, a.first_offset] for a in answer.aborted]]
                )  # fmt: skip
        return {"partitions": out}

    def _find_inline(self, reqs: list[FindBatchRequest]) -> bool:
        """Whether finding ``reqs``' batches is bounded, short work for the
        event loop (``FETCH_FIND_INLINE_BATCHES_MAX``)."""
        if len(reqs) > FETCH_FIND_INLINE_PARTITIONS_MAX:
            return False
        batches = 0
        for r in reqs:
            try:
                behind = self.store.log_end_offset(r.topic_id_partition) - r.offset
            except KeyError:
                continue  # answered with an error, no batches
            batches += min(max(0, behind), r.max_partition_fetch_bytes // HEADER_SIZE) + 1
            if batches > FETCH_FIND_INLINE_BATCHES_MAX:
                return False
        return True

    async def _read_planned(self, r: ObjectRead) -> tuple[int, bytes] | BaseException:
        if not self.chunk_bytes or not is_segment_key(r.key):
            got = await self._read(r.key, r.offset, r.length, r)
            return got if isinstance(got, BaseException) else (r.offset, got)
        chunks = segment_chunks(r, self.chunk_bytes)
        parts = await asyncio.gather(*(self._read(r.key, c.want_offset, c.want_length, c.fill) for c in chunks))
        self._prefetch_after(chunks[-1].fill)
        return join_chunks(r, chunks, parts)

    def _prefetch_after(self, last: ObjectRead) -> None:
        """Start the GET of the chunk after ``last``, which a reader going
        forward asks for next, while it reads this one from the cache: when
        ``last`` is cached whole (a shorter one ends the segment) and the
        next is neither cached nor being read."""
        nxt = ObjectRead(last.key, last.offset + last.length, last.length)
        if self._prefetches >= PREFETCHES_MAX or self.cache.cached_bytes(last.key, last.offset) < last.length:
            return
        if self.cache.cached_bytes(nxt.key, nxt.offset) or (nxt.key, nxt.offset, nxt.length) in self._inflight:
            return
        self._prefetches += 1
        self._get(nxt).add_done_callback(lambda _: self._prefetch_done())

    def _prefetch_done(self) -> None:
        self._prefetches -= 1

    async def _read(self, key: str, offset: int, length: int, fill: ObjectRead) -> bytes | BaseException:
        """Bytes ``[offset, offset + length)`` of ``key`` from the cache, else
        from a GET of ``fill`` (which holds them), cached; a segment this
        replica holds a copy of is read from its disk."""
        if self.local is not None and self.local.holds(key):
            held = await asyncio.to_thread(self.local.read, key, offset, length)
            if held is not None:
                return held
        cached = self.cache.get(key, offset, length)
        if cached is not None:
            self.metrics.fetch_cache_hits.inc()
            return cached
        if not (self.chunk_bytes and is_segment_key(fill.key)):
            # A WAL object's read: no reader shares it (and no task, so the
            # simulation's schedule stays the one it always was).
            data = await self._get_now(fill)
        else:
            data = await asyncio.shield(self._get(fill))
        if isinstance(data, BaseException):
            return data
        return data[offset - fill.offset : offset - fill.offset + length]

    def _get(self, fill: ObjectRead) -> asyncio.Future[bytes | BaseException]:
        """The GET of ``fill``, cached once read: the one running, or a new one."""
        flight = (fill.key, fill.offset, fill.length)
        running = self._inflight.get(flight)
        if running is None:
            running = self._inflight[flight] = asyncio.ensure_future(self._get_now(fill))
            running.add_done_callback(lambda _: self._inflight.pop(flight, None))
        return running

    async def _get_now(self, fill: ObjectRead) -> bytes | BaseException:
        self.metrics.fetch_gets.inc()
        try:
            data = await asyncio.to_thread(self.objects.get_range, fill.key, fill.offset, fill.length)
        except Exception as e:  # answered as a retriable error for the partitions that needed it
            return e
        self.cache.put(fill.key, fill.offset, data)
        self.metrics.cache_bytes.set(self.cache.bytes)
        return data

    # -------------------------------------------------------------- routing

    def read_replica_for(self, tp: TopicIdPartition, az: str | None) -> int | None:
        """The broker a fetch of ``tp`` should go to: this one when it holds
        a replica, else a replica in ``az`` (this broker's AZ by default),
        else the leader; None when the partition has no leader."""
        if self.replicas.serves(tp):
            return self.broker_id
        metadata = self._metadata()
        info = metadata.partition(tp)
        if info is None or info.leader < 0:
            return None
        want = self.az if az is None else az
        for r in info.isr:
            b = metadata.broker(r)
            if b is not None and b.az == want:
                return r
        return info.leader

    async def fetch_routed(
        self, reqs: list[FindBatchRequest], *, max_wait_ms: int, min_bytes: int, max_bytes: int, az: str | None = None
    ) -> list[list[Any]]:
        """:meth:`fetch` for any partition: those this broker holds a replica
        of are read here, the others are fetched from a replica in ``az``
        (or the leader) over the broker RPC, all with the same long-poll.
        One answer per request: [error, hwm, log start, records, message,
        last stable offset, aborted transactions [[producer id, first offset], ...]]."""
        by_broker: dict[int, list[int]] = {}
        out: list[list[Any]] = [_failed(Errors.NOT_LEADER_OR_FOLLOWER, "no leader") for _ in reqs]
        for i, r in enumerate(reqs):
            target = self.read_replica_for(r.topic_id_partition, az)
            if target is not None:
                by_broker.setdefault(target, []).append(i)

        async def one(target: int, idx: list[int]) -> None:
            sub = [reqs[i] for i in idx]
            try:
                if target == self.broker_id:
                    answer = await self.fetch(sub, max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=max_bytes)
                    parts = answer["partitions"]
                else:
                    client = await self.peers.client(target, timeout_ms=RPC_TIMEOUT_MS_DEFAULT)
                    body = {
                        "partitions": [
                            [r.topic_id_partition.topic_id.bytes, r.topic_id_partition.partition, r.offset,
                             r.max_partition_fetch_bytes]
                            for r in sub
                        ],
                        "max_wait_ms": max_wait_ms,
                        "min_bytes": min_bytes,
                        "max_bytes": max_bytes,
                        "isolation": int(sub[0].isolation),
                    }  # fmt: skip
                    answer = await client.call("fetch", body, timeout_ms=max_wait_ms + RPC_TIMEOUT_MS_DEFAULT)
                    parts = _checked_fetch_answer(answer, len(sub))
            except (RpcError, RpcConnectionError, RpcTimeoutError, OSError, WireError) as e:
                if isinstance(e, RpcConnectionError | OSError):
                    await self.peers.drop(target)
                for i in idx:
                    out[i] = _failed(Errors.NOT_LEADER_OR_FOLLOWER, f"fetch via broker {target}: {e}")
                return
            for i, p in zip(idx, parts, strict=True):
                out[i] = list(p)

        await asyncio.gather(*(one(t, idx) for t, idx in _chunked(by_broker)))
        return out

    async def on_leaders(
        self,
        method: str,
        items: list[tuple[TopicIdPartition, list[Any]]],
        failed: list[Any],
        extra: Mapping[str, Any] | None = None,
    ) -> list[list[Any]]:
        """Ask each partition's leader (this broker's own handler when it
        leads, else the broker RPC) ``method`` with body
        ``{"partitions": [[topic_id, partition, *rest], ...], **extra}``; one answer
        row per item, checked against ``RESPONSE_SCHEMAS[method]``, or
        ``failed`` for the items whose leader is unknown or unreachable."""
        out: list[list[Any]] = [list(failed) for _ in items]
        by_leader: dict[int, list[int]] = {}
        metadata = self._metadata()
        for i, (tp, _) in enumerate(items):
            leader = metadata.leader_of(tp)
            if leader is not None and leader >= 0:
                by_leader.setdefault(leader, []).append(i)

        async def one(leader: int, idx: list[int]) -> None:
            body = {
                "partitions": [[items[i][0].topic_id.bytes, items[i][0].partition, *items[i][1]] for i in idx],
                **(extra or {}),
            }
            try:
                if leader == self.broker_id:
                    answer = await self._as_leader(method, body)
                else:
                    client = await self.peers.client(leader, timeout_ms=RPC_TIMEOUT_MS_DEFAULT)
                    answer = await client.call(method, body, timeout_ms=RPC_TIMEOUT_MS_DEFAULT)
                RESPONSE_SCHEMAS[method].check(answer, f"{method} answer")
                parts = answer["partitions"]
                if len(parts) != len(idx):
                    raise WireError(f"{method} answer: {len(parts)} partitions for {len(idx)} asked")
                for i, row in zip(idx, parts, strict=True):
                    out[i] = list(row)
            except (RpcError, RpcConnectionError, RpcTimeoutError, OSError, WireError) as e:
                if isinstance(e, RpcConnectionError | OSError):
                    await self.peers.drop(leader)
                log.info("%s via broker %d failed: %s", method, leader, e)

        await asyncio.gather(*(one(t, idx) for t, idx in _chunked(by_leader)))
        return out

    async def list_offsets_routed(self, reqs: list[ListOffsetsRequest]) -> list[tuple[Errors, int, int]]:
        """ListOffsets for any partition, answered by its leader (here, or
        over the broker RPC): (error, timestamp, offset) per request.  One
        Kafka request has one isolation level: the first request's is sent."""
        rows = await self.on_leaders(
            "list_offsets",
            [(r.topic_id_partition, [r.timestamp]) for r in reqs],
            [int(Errors.NOT_LEADER_OR_FOLLOWER), -1, -1],
            {"isolation": int(reqs[0].isolation)} if reqs and reqs[0].isolation else None,
        )
        return [(peer_error(err), ts, off) for err, ts, off in rows]


def _chunked(by_broker: dict[int, list[int]]) -> list[tuple[int, list[int]]]:
    """(broker, indexes) calls: one RPC carries at most PARTITIONS_MAX
    partitions (its schema's limit), so a larger share is split."""
    return [
        (b, idx[k : k + PARTITIONS_MAX]) for b, idx in by_broker.items() for k in range(0, len(idx), PARTITIONS_MAX)
    ]


def _failed(error: Errors, message: str) -> list[Any]:
    """A fetch answer row for a partition that could not be read."""
    return [int(error), -1, -1, b"", message, -1, []]


def _checked_fetch_answer(body: Any, n: int) -> list[Any]:
    """Another broker's fetch answer, checked (WireError): what a broken
    or hostile peer sends fails only the partitions asked of it."""
    RESPONSE_SCHEMAS["fetch"].check(body, "fetch answer")
    parts: list[Any] = body["partitions"]
    if len(parts) != n:
        raise WireError(f"fetch answer: {len(parts)} partitions for {n} asked")
    return parts


__all__ = ["FetchService", "NewData"]
