"""Kafka's incremental fetch sessions (KIP-227), sans-IO: the cache of one
broker front end and the three ways a fetch is answered, as Kafka's
``FetchSession.scala`` (``FetchManager.newContext``, ``FetchSessionCache``,
``Full``/``Incremental``/``Sessionless``/``SessionErrorFetchContext``).

A fetch names a session id and an epoch:

* epoch 0 (``INITIAL_EPOCH``): a full fetch; any session it names (of the
  same principal) is closed, and a new one is created from the answer when
  the cache has room (the answer's session id; 0 when it has none).
* epoch -1 (``FINAL_EPOCH``): a full fetch without a session; the session it
  names is closed ("final").
* any other epoch: an incremental fetch of the session it names: its
  partitions are updated with the ones the request names and the forgotten
  ones removed, every partition of the session is fetched, and the answer
  leaves out those with nothing new (no records, and high watermark, last
  stable offset, log start offset unchanged, no error, no preferred read
  replica, no diverging epoch).  The epoch must be the session's (it moves
  on by one per fetch, wrapping from 2**31-1 to 1), else
  INVALID_FETCH_SESSION_EPOCH; a session the cache does not hold (never
  created, evicted, this broker restarted) is FETCH_SESSION_ID_NOT_FOUND;
  a v13+ fetch of a session made by names, or the reverse, is
  FETCH_SESSION_TOPIC_ID_ERROR.

Deliberate differences from Kafka, each to bound what a hostile client can
do: a session belongs to the principal that made it (another principal
naming its id gets FETCH_SESSION_ID_NOT_FOUND and cannot close it); a
session holds at most ``FETCH_SESSION_PARTITIONS_MAX`` partitions and the
cache ``FETCH_SESSION_CACHE_PARTITIONS_MAX`` (a full fetch beyond is
answered without a session; an incremental one that would grow past them
closes its session, answered as a sessionless fetch of what it named, which
clients take as "the broker closed the session").  The last stable offset
is also compared (Kafka's ``CachedPartition`` does not), so a read-committed
consumer learns a moved LSO without new records.

Nothing here reads a clock or does I/O: the time is passed in
(milliseconds of a monotonic clock) and ids come from the ``randbits``
callable the owner hands in.  Authorization and the reads are the caller's
(:mod:`partlog.kafka_front.fetch_api`), per partition on every fetch, so a
session never answers a partition its caller may not read.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from partlog.kafka.errors import Errors

log = logging.getLogger(__name__)

# Kafka's max.incremental.fetch.session.cache.slots: sessions one broker holds.
FETCH_SESSION_CACHE_SLOTS_DEFAULT = 1_000
# Kafka's min.incremental.fetch.session.eviction.ms: a session younger than
# this is not evicted for a consumer's new one (unless unused that long).
FETCH_SESSION_EVICTION_MS_DEFAULT = 120_000
# Ours (Kafka has none): the partitions one session holds, and all sessions
# of a cache; each cached partition is some 300 bytes.
FETCH_SESSION_PARTITIONS_MAX = 20_000
FETCH_SESSION_CACHE_PARTITIONS_MAX = 500_000

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
EPOCH_MAX = 2**31 - 1
# Fetch v13 (KIP-516) names topics by id instead of by name.
TOPIC_IDS_VERSION = 13

# A partition of a session: (topic name, partition), or (topic id's string,
# partition) in a session made by a v13+ fetch.
Key = tuple[str, int]


def next_epoch(epoch: int) -> int:
    """Kafka's ``FetchMetadata.nextEpoch``: after FINAL stays FINAL, after
    2**31-1 comes 1 (0 means "new session")."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == EPOCH_MAX else epoch + 1


@dataclass(frozen=True, slots=True)
class PartitionRequest:
    """What a fetch asks of one partition (Kafka's ``PartitionData``)."""

    fetch_offset: int
    max_bytes: int
    log_start_offset: int = -1  # a follower's; -1 from consumers
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1


@dataclass(frozen=True, slots=True)
class PartitionAnswer:
    """What the broker answered for one partition, as far as a session must know."""

    error: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    records_bytes: int
    preferred_read_replica: int = -1
    diverging: bool = False


@dataclass(slots=True)
class CachedPartition:
    """A partition of a session: the client's last request, and what it was
    last told (Kafka's ``CachedPartition``)."""

    request: PartitionRequest
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1

    def must_answer(self, a: PartitionAnswer) -> bool:
        """Whether ``a`` goes in an incremental answer; remembers what it tells."""
        changed = (
            a.records_bytes > 0
            or a.high_watermark != self.high_watermark
            or a.last_stable_offset != self.last_stable_offset
            or a.log_start_offset != self.log_start_offset
            or a.preferred_read_replica >= 0
            or a.diverging
            or a.error != 0
        )
        # After an error the watermark is forgotten, so that the partition is
        # answered again once the error is gone (Kafka's rule).
        self.high_watermark = -1 if a.error != 0 else a.high_watermark
        self.last_stable_offset = a.last_stable_offset
        self.log_start_offset = a.log_start_offset
        return changed


@dataclass(slots=True)
class FetchSession:
    """One session: its partitions in fetch order (those that answered
    records move to the end, so a ``max_bytes`` cut does not starve the
    last ones)."""

    id: int
    principal: str
    privileged: bool
    uses_topic_ids: bool
    created_ms: int
    last_used_ms: int
    epoch: int
    partitions: OrderedDict[Key, CachedPartition]
    # The size, and evictability, as of the last touch (Kafka's cachedSize).
    cached_size: int = 0
    evictable_by_all: bool = False
    evictable_by_privileged: bool = False

    def evict_key(self) -> tuple[bool, int, int]:
        """Kafka's ``EvictableKey``: the least valuable sorts first."""
        return (self.privileged, self.cached_size, self.id)


@dataclass(frozen=True, slots=True)
class FetchMeta:
    """A fetch's session fields and who sends it."""

    session_id: int
    epoch: int
    version: int
    principal: str
    privileged: bool = False  # a follower (replica id >= 0)


@dataclass(frozen=True, slots=True)
class SessionError:
    """The fetch is answered with this error and no partitions."""

    error: Errors


@dataclass(frozen=True, slots=True)
class Sessionless:
    """Answer every partition the request names; session id 0."""

    fetching: tuple[tuple[Key, PartitionRequest], ...]


@dataclass(frozen=True, slots=True)
class Full:
    """Answer every partition the request names; make a session of them."""

    fetching: tuple[tuple[Key, PartitionRequest], ...]
    meta: FetchMeta


@dataclass(frozen=True, slots=True)
class Incremental:
    """Fetch every partition of the session; answer those with news."""

    fetching: tuple[tuple[Key, PartitionRequest], ...]
    session: FetchSession


FetchContext = SessionError | Sessionless | Full | Incremental


class FetchSessionCache:
    """One broker front end's sessions (Kafka's ``FetchSessionCache`` and
    ``FetchManager``).  ``randbits(31)`` draws session ids."""

    def __init__(
        self,
        randbits: Callable[[int], int],
        *,
        slots: int = FETCH_SESSION_CACHE_SLOTS_DEFAULT,
        eviction_ms: int = FETCH_SESSION_EVICTION_MS_DEFAULT,
        session_partitions_max: int = FETCH_SESSION_PARTITIONS_MAX,
        cache_partitions_max: int = FETCH_SESSION_CACHE_PARTITIONS_MAX,
    ) -> None:
        assert slots >= 0 and eviction_ms >= 0
        assert 0 < session_partitions_max <= cache_partitions_max
        self._randbits = randbits
        self.slots = slots
        self.eviction_ms = eviction_ms
        self.session_partitions_max = session_partitions_max
        self.cache_partitions_max = cache_partitions_max
        self._sessions: dict[int, FetchSession] = {}
        # By last use, oldest first (the time never goes back: a monotonic clock).
        self._by_use: OrderedDict[int, FetchSession] = OrderedDict()
        self.partitions = 0  # the sum of the sessions' cached sizes
        self.stats = {"created": 0, "evictions": 0, "incremental": 0, "not_found": 0, "invalid_epoch": 0}

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, session_id: int) -> FetchSession | None:
        return self._sessions.get(session_id)

    # ------------------------------------------------------------ requests

    def new_context(
        self,
        meta: FetchMeta,
        wanted: Sequence[tuple[Key, PartitionRequest]],
        forgotten: Iterable[Key],
        now_ms: int,
    ) -> FetchContext:
        """How to answer a fetch (Kafka's ``FetchManager.newContext``)."""
        fetching = tuple(wanted)
        if meta.epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if meta.session_id != INVALID_SESSION_ID:
                # Any session a full fetch names is closed (only its owner's).
                old = self._sessions.get(meta.session_id)
                if old is not None and old.principal == meta.principal:
                    self._remove(old)
            if meta.epoch == FINAL_EPOCH:
                return Sessionless(fetching)
            return Full(fetching, meta)
        session = self._sessions.get(meta.session_id)
        if session is None or session.principal != meta.principal:
            self.stats["not_found"] += 1
            return SessionError(Errors.FETCH_SESSION_ID_NOT_FOUND)
        if session.epoch != meta.epoch:
            self.stats["invalid_epoch"] += 1
            return SessionError(Errors.INVALID_FETCH_SESSION_EPOCH)
        if session.uses_topic_ids != (meta.version >= TOPIC_IDS_VERSION):
            return SessionError(Errors.FETCH_SESSION_TOPIC_ID_ERROR)
        parts = session.partitions
        for key, req in fetching:
            cached = parts.get(key)
            if cached is None:
                parts[key] = CachedPartition(req)
            else:
                cached.request = req
        for key in forgotten:
            parts.pop(key, None)
        grown = self.partitions - session.cached_size + len(parts)
        if not parts or len(parts) > self.session_partitions_max or grown > self.cache_partitions_max:
            if parts:
                log.info("fetch session %d closed: %d partitions, %d in the cache", session.id, len(parts), grown)
            self._remove(session)
            return Sessionless(fetching)
        self._touch(session, now_ms)
        session.epoch = next_epoch(session.epoch)
        self.stats["incremental"] += 1
        return Incremental(tuple((k, p.request) for k, p in parts.items()), session)

    def answer(self, ctx: FetchContext, answers: Sequence[PartitionAnswer], now_ms: int) -> tuple[int, list[bool]]:
        """The answer's session id, and which of ``ctx.fetching``'s answers
        (in that order) the response carries."""
        if isinstance(ctx, SessionError):
            assert not answers
            return INVALID_SESSION_ID, []
        assert len(answers) == len(ctx.fetching)
        if isinstance(ctx, Sessionless):
            return INVALID_SESSION_ID, [True] * len(answers)
        if isinstance(ctx, Full):
            return self._maybe_create(ctx, answers, now_ms), [True] * len(answers)
        session = ctx.session
        keep: list[bool] = []
        for (key, _), a in zip(ctx.fetching, answers, strict=True):
            cached = session.partitions.get(key)
            if cached is None:
                # Forgotten by a later fetch of the session while this one waited.
                keep.append(True)
                continue
            keep.append(cached.must_answer(a))
            if a.records_bytes > 0:
                session.partitions.move_to_end(key)
        return session.id, keep

    # ------------------------------------------------------------- the cache

    def _maybe_create(self, ctx: Full, answers: Sequence[PartitionAnswer], now_ms: int) -> int:
        parts: OrderedDict[Key, CachedPartition] = OrderedDict()
        for (key, req), a in zip(ctx.fetching, answers, strict=True):
            parts[key] = CachedPartition(req, -1 if a.error else a.high_watermark, a.last_stable_offset,
                                         a.log_start_offset)  # fmt: skip
        size = len(parts)
        meta = ctx.meta
        if size == 0 or size > self.session_partitions_max:
            return INVALID_SESSION_ID
        if self.partitions + size > self.cache_partitions_max:
            return INVALID_SESSION_ID
        if len(self._sessions) >= self.slots and not self._try_evict(meta.privileged, size, now_ms):
            return INVALID_SESSION_ID
        session_id = self._new_id()
        session = FetchSession(
            id=session_id,
            principal=meta.principal,
            privileged=meta.privileged,
            uses_topic_ids=meta.version >= TOPIC_IDS_VERSION,
            created_ms=now_ms,
            last_used_ms=now_ms,
            epoch=next_epoch(INITIAL_EPOCH),
            partitions=parts,
            cached_size=-1,
        )
        self._sessions[session_id] = session
        self._touch(session, now_ms)
        self.stats["created"] += 1
        return session_id

    def _new_id(self) -> int:
        while True:
            i = self._randbits(31)
            if i != INVALID_SESSION_ID and i not in self._sessions:
                return i

    def _touch(self, session: FetchSession, now_ms: int) -> None:
        """Kafka's ``FetchSessionCache.touch``: last use, size and whether it
        may be evicted, as of now."""
        session.last_used_ms = max(session.last_used_ms, now_ms)
        self._by_use.pop(session.id, None)
        self._by_use[session.id] = session
        if session.cached_size >= 0:
            self.partitions -= session.cached_size
        session.cached_size = len(session.partitions)
        self.partitions += session.cached_size
        old = now_ms - session.created_ms > self.eviction_ms
        session.evictable_by_privileged = old or not session.privileged
        session.evictable_by_all = old

    def _remove(self, session: FetchSession) -> None:
        if self._sessions.pop(session.id, None) is None:
            return
        self._by_use.pop(session.id, None)
        self.partitions -= max(0, session.cached_size)

    def _try_evict(self, privileged: bool, size: int, now_ms: int) -> bool:
        """Kafka's ``tryEvict``: the session unused longest if it is stale,
        else the least valuable evictable one if it is worth less than the
        one to create."""
        stalest = next(iter(self._by_use.values()), None)
        if stalest is None:
            return False
        if now_ms - stalest.last_used_ms > self.eviction_ms:
            self._evict(stalest)
            return True
        candidates = [
            s for s in self._sessions.values() if (s.evictable_by_privileged if privileged else s.evictable_by_all)
        ]
        if not candidates:
            return False
        least = min(candidates, key=FetchSession.evict_key)
        if (privileged, size, 0) < least.evict_key():
            return False
        self._evict(least)
        return True

    def _evict(self, session: FetchSession) -> None:
        log.info("fetch session %d evicted (%d partitions)", session.id, session.cached_size)
        self._remove(session)
        self.stats["evictions"] += 1


__all__ = [
    "EPOCH_MAX",
    "FETCH_SESSION_CACHE_PARTITIONS_MAX",
    "FETCH_SESSION_CACHE_SLOTS_DEFAULT",
    "FETCH_SESSION_EVICTION_MS_DEFAULT",
    "FETCH_SESSION_PARTITIONS_MAX",
    "FINAL_EPOCH",
    "INITIAL_EPOCH",
    "INVALID_SESSION_ID",
    "CachedPartition",
    "FetchContext",
    "FetchMeta",
    "FetchSession",
    "FetchSessionCache",
    "Full",
    "Incremental",
    "Key",
    "PartitionAnswer",
    "PartitionRequest",
    "SessionError",
    "Sessionless",
    "next_epoch",
]
