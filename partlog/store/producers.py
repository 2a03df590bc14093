"""The producer table: idempotent-producer state per (partition, producer
id), the ``producers`` database plus a cache of what was read or written
since open, both as :meth:`ProducerEntry.encode` bytes (a fifth of the
memory of the tuples, and nothing for the garbage collector to scan).

Every entry written since open is cached, so a cache miss means LMDB's
value is current.  Entries expire ``producer_id_expiration_ms`` after their
last batch's timestamp (checked on lookup by the sequencer; removed by
:meth:`ProducerTable.expired`); after a truncation a producer's state is
rebuilt from the log (:func:`rebuild`).  The idempotence rules are
:mod:`partlog.kafka.producer_state`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import lmdb

from partlog.kafka.producer_state import NUM_BATCHES_TO_RETAIN, AppendedBatch, ProducerEntry, after_append
from partlog.store.env import LmdbEnv, delete_prefix
from partlog.store.layout import PRODUCER_KEY, U32, Entry
from partlog.store.view import Txn

# (part_id, producer_id)
ProducerKey = tuple[int, int]


class ProducerTable:
    """Producer states, cached (see the module doc)."""

    def __init__(self, env: LmdbEnv) -> None:
        self._db = env.producers
        self.cache: dict[ProducerKey, bytes] = {}

    def cached(self, part_id: int, producer_id: int) -> bytes | None:
        """The cached state; None may still mean LMDB has one (:meth:`load`)."""
        return self.cache.get((part_id, producer_id))

    def load(self, txn: Txn, part_id: int, producer_id: int) -> bytes | None:
        """The producer's state, from the cache or else LMDB (then cached);
        None if it has none."""
        key = (part_id, producer_id)
        raw = self.cache.get(key)
        if raw is None:
            stored = txn.get(PRODUCER_KEY.pack(part_id, producer_id), db=self._db)
            if stored is None:
                return None
            raw = bytes(stored)
            ProducerEntry.decode(raw)  # a malformed value fails here, where it is read
            self.cache[key] = raw
        return raw

    def keys_of(self, part_id: int, staged: dict[ProducerKey, bytes | None]) -> set[ProducerKey]:
        """The producers of ``part_id`` that are cached or in ``staged``."""
        return {k for k in (*self.cache, *staged) if k[0] == part_id}

    def expired(self, txn: lmdb.Transaction, now: int, expiration_ms: int) -> list[ProducerKey]:
        """Every producer in LMDB whose entry expired at ``now``."""
        out = []
        for k, v in txn.cursor(db=self._db):
            if ProducerEntry.decode(bytes(v)).is_expired(now, expiration_ms):
                part_id, pid = PRODUCER_KEY.unpack(k)
                out.append((part_id, pid))
        return out

    def drop(self, txn: lmdb.Transaction, part_id: int) -> None:
        """Delete the partition's producers from LMDB (the caller stages the
        cache's removal)."""
        delete_prefix(txn, self._db, U32.pack(part_id))

    def write(self, txn: lmdb.Transaction, changes: dict[ProducerKey, bytes | None]) -> None:
        """An exclusive write's producer changes (None: delete)."""
        for (part_id, pid), raw in changes.items():
            key = PRODUCER_KEY.pack(part_id, pid)
            if raw is None:
                txn.delete(key, db=self._db)
            else:
                txn.put(key, raw, db=self._db)

    def put_encoded(self, txn: lmdb.Transaction, producers: dict[bytes, bytes]) -> None:
        """A checkpoint's producer states, by LMDB key, in one putmulti."""
        if producers:
            txn.cursor(db=self._db).putmulti(list(producers.items()))

    def install(self, changes: Mapping[ProducerKey, bytes | None]) -> None:
        """Changes that stand (committed, or sequenced) become the cached state."""
        cache = self.cache
        for key, raw in changes.items():
            if raw is None:
                cache.pop(key, None)
            else:
                cache[key] = raw


def rebuild(newest_first: Iterator[Entry], pids: set[int]) -> dict[int, ProducerEntry | None]:
    """Producer state of ``pids`` as replaying a partition's remaining
    entries gives it (Kafka's ``rebuildProducerState`` after a truncation);
    None for a producer with no entry left.

    A window holds only the trailing batches of the producer's latest epoch,
    at most NUM_BATCHES_TO_RETAIN, so one backward scan from the log end
    (``newest_first``) finds them all and stops once every producer is
    complete."""
    open_pids = set(pids)
    found: dict[int, list[Entry]] = {}
    if open_pids:
        for e in newest_first:
            pid = e.header.producer_id
            if pid in open_pids:
                newest = found.setdefault(pid, [])
                if newest and e.header.producer_epoch != newest[0].header.producer_epoch:
                    open_pids.discard(pid)  # an older epoch: its batches left the window
                else:
                    newest.append(e)
                    if len(newest) == NUM_BATCHES_TO_RETAIN:
                        open_pids.discard(pid)
                if not open_pids:
                    break
    out: dict[int, ProducerEntry | None] = {}
    for pid in pids:
        entry: ProducerEntry | None = None
        for e in reversed(found.get(pid, [])):
            h = e.header
            entry = after_append(
                entry,
                h.producer_epoch,
                AppendedBatch(
                    h.base_sequence,
                    h.last_sequence,
                    e.base_offset,
                    e.last_offset,
                    e.batch_max_timestamp,
                    e.log_append_time,
                ),
            )
        out[pid] = entry
    return out
