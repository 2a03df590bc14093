"""Verification guards (KIP-890 part 1): a leader's proof that the
transaction coordinator confirmed a producer's open transaction includes a
partition, still valid when the transaction's first batch is sequenced.

Kafka's ``VerificationGuard`` (in ``ProducerStateManager.verificationStates``):
before a transactional batch whose producer has no transaction open on the
partition is appended, the leader records a guard for (partition, producer
id) and asks the coordinator.  The sequencer
(:mod:`partlog.store.sequencer`) starts the transaction only when the guard
the commit carries is still the partition's current one.  A marker for the
producer on the partition clears it (:mod:`partlog.store.writes`), so a
verification answered before the transaction ended can never start a new
transaction after it (the ABA case Kafka's unique guard object prevents).

Guards are in memory only, as Kafka's: followers have none, a new leader
starts with none (a verification in flight when leadership moves fails with
NOT_LEADER_OR_FOLLOWER at the commit, and the client retries).  A guard is
shared by the concurrent verifications of one (partition, producer) (Kafka's
``computeIfAbsent``) and lives until the last of them ended or a marker
cleared it: the table holds only guards of commits in flight, at most
:data:`VERIFICATION_GUARDS_MAX`.

Thread-safe: the broker begins and ends guards on its event loop while the
store's pipeline thread sequences commits and markers.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager

from partlog.kafka.producer_state import ProducerWindow
from partlog.kafka.records import TopicIdPartition
from partlog.store.catalog import Catalog
from partlog.store.producers import ProducerTable
from partlog.store.view import Txn

# Guards held at once (one per (partition, producer) with a verification in
# flight).  Beyond it a verification is refused with a retriable error rather
# than growing memory without bound: 100,000 is far more producers starting
# a transaction at once than one leader serves.
VERIFICATION_GUARDS_MAX = 100_000

# The token a commit carries for a producer whose transaction was open on the
# partition when the leader looked (Kafka's VerificationGuard.SENTINEL): it
# verifies nothing, so a transaction that ended meanwhile is not restarted.
SENTINEL = 0

GuardKey = tuple[TopicIdPartition, int]


class VerificationGuards:
    """The current guard of each (partition, producer id): a token (> 0) and
    how many verifications in flight hold it."""

    def __init__(self, guards_max: int = VERIFICATION_GUARDS_MAX) -> None:
        assert guards_max > 0
        self._guards_max = guards_max
        self._lock = threading.Lock()
        self._guards: dict[GuardKey, list[int]] = {}  # key -> [token, holders]
        self._next_token = SENTINEL + 1
        # Whether a producer's transaction is open on a partition: the
        # store sets it (:func:`txn_open` on its state).
        self.txn_open: Callable[[TopicIdPartition, int], bool] = lambda tp, producer_id: False

    def __len__(self) -> int:
        return len(self._guards)

    def begin(self, tp: TopicIdPartition, producer_id: int) -> int | None:
        """SENTINEL when the producer's transaction is open on ``tp`` (the
        leader asks nothing: Kafka's ``hasOngoingTransaction``); else the
        guard a verification holds until :meth:`end`, the current one or a
        new one; None when the table is full (the caller answers a retriable
        error).  KeyError for an unknown partition."""
        if self.txn_open(tp, producer_id):
            return SENTINEL
        key = (tp, producer_id)
        with self._lock:
            held = self._guards.get(key)
            if held is not None:
                held[1] += 1
                return held[0]
            if len(self._guards) >= self._guards_max:
                return None
            token = self._next_token
            self._next_token += 1
            self._guards[key] = [token, 1]
            return token

    def end(self, tp: TopicIdPartition, producer_id: int, token: int) -> None:
        """A verification that began with ``token`` is over (its commit
        answered, or it failed); a guard already replaced or cleared is left."""
        key = (tp, producer_id)
        with self._lock:
            held = self._guards.get(key)
            if held is None or held[0] != token:
                return
            held[1] -= 1
            assert held[1] >= 0, (key, held)
            if held[1] == 0:
                del self._guards[key]

    def current(self, tp: TopicIdPartition, producer_id: int) -> int:
        """The partition's current guard for the producer, or SENTINEL."""
        held = self._guards.get((tp, producer_id))
        return SENTINEL if held is None else held[0]

    def clear(self, keys: Iterable[GuardKey]) -> None:
        """Markers were sequenced for these (partition, producer)s: their
        transactions ended, so no verification begun before may start one."""
        with self._lock:
            for key in keys:
                self._guards.pop(key, None)


def txn_open(
    catalog: Catalog,
    producers: ProducerTable,
    read: Callable[[], AbstractContextManager[Txn]],
    tp: TopicIdPartition,
    producer_id: int,
) -> bool:
    """The producer has a transaction open on ``tp`` in the store's state
    (the caches, which run ahead of disk); KeyError for an unknown partition."""
    part = catalog.parts.get(tp)
    if part is None:
        raise KeyError(f"unknown partition {tp}")
    part_id = part.part_id
    raw = producers.cache.get((part_id, producer_id))
    if raw is None:
        with read() as txn:
            raw = producers.peek(txn, part_id, producer_id)
    return ProducerWindow.from_encoded(raw).txn_first >= 0


def verified(guards: Mapping[GuardKey, int] | None, current: int, key: GuardKey) -> bool:
    """The sequencer's rule for the first transactional batch of a producer
    with no transaction open: True when the commit did not ask for
    verification of ``key`` (an internal writer without a transactional id),
    or carries the partition's ``current`` guard for it."""
    if guards is None:
        return True
    token = guards.get(key)
    return token is None or (token != SENTINEL and token == current)


__all__ = ["SENTINEL", "VERIFICATION_GUARDS_MAX", "GuardKey", "VerificationGuards", "txn_open", "verified"]
