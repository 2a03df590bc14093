"""The producer table: idempotent-producer state per (partition, producer
id), the ``producers`` database plus a cache of what was read or written
since open, both as :meth:`ProducerEntry.encode` bytes (a fifth of the
memory of the tuples, and nothing for the garbage collector to scan).

Every entry written since open is cached, so a cache miss means LMDB's
value is current.  Entries expire ``producer_id_expiration_ms`` after their
last batch's timestamp (checked on lookup by the sequencer; removed by
:meth:`ProducerTable.expired`); after a truncation a producer's state is
rebuilt from the log (:func:`rebuild`); a producer with an ongoing
transaction never expires.  The idempotence rules are
:mod:`partlog.kafka.producer_state`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import lmdb

from partlog.kafka.producer_state import NUM_BATCHES_TO_RETAIN, ProducerEntry, ProducerWindow
from partlog.store.env import LmdbEnv, delete_prefix
from partlog.store.layout import PRODUCER_KEY, U32, Entry, inline_marker
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

    def peek(self, txn: Txn, part_id: int, producer_id: int) -> bytes | None:
        """:meth:`load` without caching what LMDB holds: for a thread other
        than the writer's, which must not race the writer's installs."""
        raw = self.cache.get((part_id, producer_id))
        if raw is None:
            stored = txn.get(PRODUCER_KEY.pack(part_id, producer_id), db=self._db)
            return None if stored is None else bytes(stored)
        return raw

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


def rebuild(
    newest_first: Iterator[Entry],
    before: Mapping[int, bytes | None],
    log_end: int,
    reopened: Mapping[int, int],
    suffix_markers: set[int],
) -> dict[int, bytes | None]:
    """The state (encoded, None: none) of each producer of ``before`` (its
    state before the truncation) once the log ends at ``log_end``, as
    replaying the partition's remaining entries gives it (Kafka's
    ``rebuildProducerState`` after a truncation).

    One backward scan from the log end (``newest_first``) collects each
    producer's entries until its replay is determined: the window holds only
    the trailing batches of the latest epoch, at most NUM_BATCHES_TO_RETAIN,
    and the transaction state starts afresh at a marker, or, for a producer
    that never had one (no coordinator epoch before), at a batch outside a
    transaction.  A transaction ongoing before the truncation that started
    below ``log_end`` is still ongoing (no marker of its producer follows
    its start): it is kept as it was, with its coordinator epoch, even where
    DeleteRecords removed its first batches; so is one whose marker went
    (``reopened``: producer id -> its first offset, from the partition's
    transactions).  Then the collected entries replay oldest first.  A
    producer whose last marker lies below the log start keeps its coordinator
    epoch unless a marker of it was cut (``suffix_markers``)."""
    todo: dict[int, _Collect] = {}
    kept: dict[int, tuple[int, int]] = {}  # pid -> (ongoing first offset, coordinator epoch)
    for pid, raw in before.items():
        prior = ProducerWindow.from_encoded(raw)
        if 0 <= prior.txn_first < log_end:
            kept[pid] = (prior.txn_first, prior.coordinator_epoch)
        todo[pid] = _Collect(prior.coordinator_epoch >= 0, pid in kept)
    for pid, first in reopened.items():
        assert pid in before and pid not in kept, pid
        kept[pid] = (first, -2)  # -2: the epoch the replay finds
    found: dict[int, list[Entry]] = {pid: [] for pid in before}
    if todo:
        for e in newest_first:
            pid = e.header.producer_id
            c = todo.get(pid)
            if c is None:
                continue
            found[pid].append(e)
            if c.done(e):
                del todo[pid]
                if not todo:
                    break
    out: dict[int, bytes | None] = {}
    for pid, entries in found.items():
        window = ProducerWindow.from_encoded(None)
        marker_found = False
        for e in reversed(entries):
            h = e.header
            if e.is_inline:
                window.end_txn(h.producer_epoch, inline_marker(e.byte_offset)[1], h.max_timestamp)
                marker_found = True
                continue
            window.append_values(
                h.producer_epoch,
                h.base_sequence,
                h.last_sequence,
                e.base_offset,
                e.last_offset,
                e.batch_max_timestamp,
                e.log_append_time,
            )
            if h.is_transactional and window.txn_first < 0:
                window.txn_first = e.base_offset
        raw = before[pid]
        prior_epoch = -1 if raw is None else ProducerEntry.decode(raw).coordinator_epoch
        first, epoch = kept.get(pid, (-1, -2))
        if epoch == -2:
            # Its last marker, if the scan did not meet it, lies below the log start.
            epoch = window.coordinator_epoch if marker_found or pid in suffix_markers else prior_epoch
        if raw is not None and not window.known and (pid in kept or epoch >= 0):
            # Its remaining batches all lie below the log start: what the
            # state held below the new log end stays.
            entry = ProducerEntry.decode(raw)
            out[pid] = entry._replace(
                batches=tuple(b for b in entry.batches if b.last_offset < log_end),
                txn_first_offset=first,
                coordinator_epoch=epoch,
            ).encode()
            continue
        if window.known:
            if pid in kept:
                window.txn_first = first
            window.coordinator_epoch = epoch
        out[pid] = window.encoded() if window.known else None
    return out


class _Collect:
    """When a backward scan has all of one producer's entries it replays."""

    __slots__ = ("batches", "epoch", "had_marker", "txn_done", "window_done")

    def __init__(self, had_marker: bool, txn_known: bool) -> None:
        self.had_marker = had_marker
        self.epoch = -2  # of the newest entry
        self.batches = 0
        self.window_done = False
        self.txn_done = txn_known

    def done(self, e: Entry) -> bool:
        h = e.header
        if self.epoch == -2:
            self.epoch = h.producer_epoch
        if h.producer_epoch != self.epoch:
            self.window_done = True  # an older epoch: its batches left the window
        elif not e.is_inline:
            self.batches += 1
            self.window_done = self.window_done or self.batches >= NUM_BATCHES_TO_RETAIN
        if e.is_inline or (not self.had_marker and not h.is_transactional):
            self.txn_done = True
        return self.window_done and self.txn_done
