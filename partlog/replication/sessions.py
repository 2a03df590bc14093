"""A leader's replica fetch sessions (KIP-227 for followers; sans-IO).

A follower of a leader at ``SESSION_RPC_VERSION`` opens a session with a
full fetch (``[0, 0]``): the leader keeps its items (one per partition, in
order) under a new id.  Each later fetch names ``[id, epoch + 1]`` and only
the items that changed or are new, and the partitions it stopped
following; the leader updates its copy and serves every partition of the
session, answering sparsely (``partlog.rpc.replica_rows``): the rows of
partitions it left out are ones the follower's apply would find nothing in,
judged against the follower's own last items.

Anything unexpected in an incremental fetch ends the session and the
follower opens a new one: an unknown id (the leader restarted, or evicted
it), an epoch not the next one (a lost or repeated request), or a session
past the leader's bounds.  The follower also opens a new one after any
answer it did not apply, so the leader's copy is always what the follower
last said of its own log.  A full fetch is never refused for the bounds:
when no session fits, it is served without one (session id 0, as Kafka's
sessionless fetch) and the follower's next fetch is full again.

Bounded (Kafka's FetchSessionCache): one session per replica id (a new one
replaces the old), at most ``sessions_max`` sessions and ``items_max``
partitions in all.  A new session may evict the least recently used one
only if that one has been idle for ``evictable_idle_ms`` (a follower that
stopped fetching here); otherwise it is not made, so followers past the
bounds fetch in full instead of evicting each other in turn.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from partlog import injected_bugs
from partlog.kafka.records import TopicIdPartition
from partlog.replication.stats import ReplicationStats
from partlog.rpc.replica_rows import SESSION_ID_MAX
from partlog.rpc.wire import ReplicaFetchPartition

# Replicas are brokers: one session per broker following this leader.
REPLICA_FETCH_SESSIONS_MAX = 256
# Partitions held in all sessions (a few hundred bytes each: about 100 MB).
REPLICA_FETCH_SESSION_ITEMS_MAX = 400_000
# A session not used for this long may be evicted for a new one (Kafka's
# min.incremental.fetch.session.eviction.ms).
REPLICA_FETCH_SESSION_EVICTABLE_IDLE_MS = 120_000


@dataclass(slots=True)
class _Session:
    session_id: int
    epoch: int
    used_ms: int
    items: dict[TopicIdPartition, ReplicaFetchPartition] = field(default_factory=dict)


class ReplicaFetchSessions:
    def __init__(
        self,
        first_id: int,
        stats: ReplicationStats,
        *,
        sessions_max: int = REPLICA_FETCH_SESSIONS_MAX,
        items_max: int = REPLICA_FETCH_SESSION_ITEMS_MAX,
        evictable_idle_ms: int = REPLICA_FETCH_SESSION_EVICTABLE_IDLE_MS,
    ) -> None:
        if sessions_max <= 0 or items_max <= 0 or evictable_idle_ms < 0:
            raise ValueError("sessions_max and items_max must be positive, evictable_idle_ms not negative")
        self.sessions_max = sessions_max
        self.items_max = items_max
        self.evictable_idle_ms = evictable_idle_ms
        # Ids from the leader's start time: a restarted leader's first ids
        # are unlikely to be ones its followers still hold.
        self._next_id = 1 + (first_id % SESSION_ID_MAX)
        self._by_replica: OrderedDict[int, _Session] = OrderedDict()  # least recently used first
        self.items = 0  # partitions held in all sessions
        self.stats = stats

    def __len__(self) -> int:
        return len(self._by_replica)

    def resolve(
        self,
        replica_id: int,
        session_id: int,
        epoch: int,
        parts: list[ReplicaFetchPartition],
        forgotten: list[TopicIdPartition],
        now_ms: int,
    ) -> tuple[list[ReplicaFetchPartition], int] | str:
        """The partitions to serve and the session id to answer with (0: no
        session), or the refusal (``replica_rows.SESSION_ERRORS``) that ends
        the session."""
        if session_id == 0:
            self._drop(replica_id)
            if epoch != 0 or forgotten:
                return self._refuse(replica_id, "invalid")
            items = {p.topic_id_partition: p for p in parts}
            if len(items) != len(parts) or not self._make_room(len(items), now_ms):
                self.stats.replica_fetches_sessionless += 1
                return parts, 0
            s = _Session(self._new_id(), 0, now_ms, items)
            self._by_replica[replica_id] = s
            self.items += len(items)
            self.stats.replica_sessions_opened += 1
            return parts, s.session_id
        known = self._by_replica.get(replica_id)
        if known is None or known.session_id != session_id:
            return self._refuse(replica_id, "unknown")
        if epoch != known.epoch + 1:
            return self._refuse(replica_id, "epoch")
        known.epoch, known.used_ms = epoch, now_ms
        self._by_replica.move_to_end(replica_id)
        before = len(known.items)
        for tp in forgotten:
            known.items.pop(tp, None)
        for p in parts:
            if injected_bugs.on("replica_session_keeps_old_items") and p.topic_id_partition in known.items:
                continue
            known.items[p.topic_id_partition] = p
        self.items += len(known.items) - before
        if self.items > self.items_max:
            return self._refuse(replica_id, "invalid")
        self.stats.replica_fetches_incremental += 1
        self.stats.replica_items_not_sent += len(known.items) - len(parts)
        return list(known.items.values()), known.session_id

    def _make_room(self, n: int, now_ms: int) -> bool:
        """Evict idle sessions, least recently used first, until a session
        of ``n`` partitions fits; False if it cannot."""
        if n > self.items_max:
            return False
        while self._by_replica and (len(self._by_replica) >= self.sessions_max or self.items + n > self.items_max):
            oldest = next(iter(self._by_replica.values()))
            if now_ms - oldest.used_ms < self.evictable_idle_ms:
                return False
            self.items -= len(oldest.items)
            self._by_replica.popitem(last=False)
            self.stats.replica_sessions_evicted += 1
        return True

    def _drop(self, replica_id: int) -> None:
        gone = self._by_replica.pop(replica_id, None)
        if gone is not None:
            self.items -= len(gone.items)

    def _refuse(self, replica_id: int, why: str) -> str:
        self._drop(replica_id)
        self.stats.replica_sessions_refused += 1
        return why

    def _new_id(self) -> int:
        sid = self._next_id
        self._next_id = 1 if sid >= SESSION_ID_MAX else sid + 1
        return sid


class FollowerSession:
    """The follower's side of one leader's session: its copy of the items
    the leader holds, in the leader's order."""

    def __init__(self) -> None:
        self.session_id = 0
        self.epoch = 0
        self._sent: dict[TopicIdPartition, ReplicaFetchPartition] = {}

    def reset(self) -> None:
        """The next fetch is a full one, opening a new session."""
        self.session_id, self.epoch, self._sent = 0, 0, {}

    def request(
        self, parts: list[ReplicaFetchPartition]
    ) -> tuple[list[ReplicaFetchPartition], int, int, list[TopicIdPartition]]:
        """(items to send, session id, epoch, forgotten) for a fetch of
        ``parts``, this follower's items for every partition it follows:
        all of them to open a session, else only the changed and new ones."""
        if not self.session_id:
            return parts, 0, 0, []
        now = {p.topic_id_partition for p in parts}
        forgotten = [tp for tp in self._sent if tp not in now]
        changed = [p for p in parts if self._sent.get(p.topic_id_partition) != p]
        return changed, self.session_id, self.epoch + 1, forgotten

    def answered(
        self,
        parts: list[ReplicaFetchPartition],
        sent: list[ReplicaFetchPartition],
        forgotten: list[TopicIdPartition],
        session_id: int,
        session_size: int,
    ) -> list[ReplicaFetchPartition] | None:
        """The session's items in the leader's order, which a sparse answer's
        ``rows_of`` index, after an answer naming ``session_id`` with
        ``session_size`` partitions; None (and a reset) if the leader's copy
        and this one disagree."""
        if not self.session_id:
            if not session_id:
                return parts  # the leader keeps no session
            self.session_id, self.epoch = session_id, 0
            self._sent = {p.topic_id_partition: p for p in parts}
        elif session_id != self.session_id:
            self.reset()
            return None
        else:
            for tp in forgotten:
                self._sent.pop(tp, None)
            for p in sent:
                self._sent[p.topic_id_partition] = p
            self.epoch += 1
        order = list(self._sent.values())
        if session_size != len(order):
            self.reset()
            return None
        return order


__all__ = [
    "REPLICA_FETCH_SESSIONS_MAX",
    "REPLICA_FETCH_SESSION_EVICTABLE_IDLE_MS",
    "REPLICA_FETCH_SESSION_ITEMS_MAX",
    "FollowerSession",
    "ReplicaFetchSessions",
]
