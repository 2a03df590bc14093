"""How writes see the store's state and stage their changes.

* :class:`Staged`: an exclusive write's change set.  The write reads through
  it (partitions copied on first touch, producers, counters) and stages its
  changes there; :meth:`Staged.flush` writes them in the write's own LMDB
  transaction, and only once that committed does :meth:`Staged.install`
  make them the cached state, so an exception leaves nothing changed.
* :class:`CacheState`: the :class:`~partlog.store.sequencer.SequencerState`
  of the commit path, read from the caches, which run ahead of disk by the
  groups sequenced but not yet durable; on a cache miss, from an LMDB
  snapshot opened for the one call.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable

import lmdb

from partlog.kafka.records import TopicIdPartition
from partlog.kafka.topic_config import TopicConfig
from partlog.store.catalog import Catalog
from partlog.store.index import FileIndex
from partlog.store.layout import Part, Topic
from partlog.store.producers import ProducerKey, ProducerTable
from partlog.store.txns import TxnTable
from partlog.store.verification import VerificationGuards
from partlog.store.view import ReadView, Views


class Staged:
    """The changes one exclusive write makes, kept aside until they stand."""

    __slots__ = (
        "_catalog",
        "_producer_table",
        "_txn_table",
        "counters",
        "hwms",
        "parts",
        "producers",
        "topics",
        "txn",
        "txns",
    )

    def __init__(self, catalog: Catalog, producers: ProducerTable, txns: TxnTable, txn: lmdb.Transaction) -> None:
        self._catalog = catalog
        self._producer_table = producers
        self._txn_table = txns
        self.txn = txn
        # part_id -> the partition's transactions (PartTxns.encode; b"": none).
        self.txns: dict[int, bytes] = {}
        self.parts: dict[TopicIdPartition, Part | None] = {}
        self.topics: dict[uuid.UUID, Topic | None] = {}
        # Producer states as ProducerEntry.encode() bytes (None: deleted).
        self.producers: dict[ProducerKey, bytes | None] = {}
        self.counters: dict[bytes, int] = {}
        # In-memory high watermarks to install after commit: tp -> (value,
        # lowers).  A raise never undoes a concurrent set_high_watermark; only
        # truncation and reset may lower the value.
        self.hwms: dict[TopicIdPartition, tuple[int, bool]] = {}

    def part(self, tp: TopicIdPartition) -> Part | None:
        """The partition, copied into this write on first touch."""
        if tp in self.parts:
            return self.parts[tp]
        cached = self._catalog.parts.get(tp)
        if cached is None:
            return None
        mine = cached.copy()
        # An exclusive write persists the in-memory high watermark for free,
        # and its checks ("never past the HWM") see the same value readers
        # do.  (The pipeline is drained: the cache is durable.)
        mine.high_watermark = self._catalog.effective_hwm(cached)
        self.parts[tp] = mine
        return mine

    def topic(self, topic_id: uuid.UUID) -> Topic | None:
        if topic_id in self.topics:
            return self.topics[topic_id]
        return self._catalog.topics.get(topic_id)

    def producer_raw(self, part_id: int, producer_id: int) -> bytes | None:
        """The producer's state, encoded, as this write sees it."""
        key = (part_id, producer_id)
        if key in self.producers:
            return self.producers[key]
        return self._producer_table.load(self.txn, part_id, producer_id)

    def txns_raw(self, part_id: int) -> bytes:
        """The partition's transactions, encoded, as this write sees them."""
        if part_id in self.txns:
            return self.txns[part_id]
        return self._txn_table.load(self.txn, part_id)

    def next_id(self, name: bytes) -> int:
        value = self.counters.get(name)
        if value is None:
            value = self._catalog.next_ids.get(name, 0)
        self.counters[name] = value + 1
        return value

    def flush(self) -> None:
        """Write the staged partition states, producers and counters."""
        self._catalog.put_parts(self.txn, self.parts.values())
        self._producer_table.write(self.txn, self.producers)
        self._txn_table.write(self.txn, self.txns)
        self._catalog.put_counters(self.txn, self.counters)

    def install(self) -> None:
        """The write committed: its changes become the cached state."""
        self._catalog.install(self.parts, self.hwms, self.topics, {})
        self._producer_table.install(self.producers)
        self._txn_table.install(self.txns)
        self._catalog.next_ids.update(self.counters)


class CacheState:
    """The commit path's :class:`SequencerState`: the caches, and an LMDB
    snapshot for what they miss, opened on first use and ended by
    :meth:`release` after each call."""

    __slots__ = ("_catalog", "_guards", "_index", "_producers", "_txns", "_view", "_views")

    def __init__(
        self,
        catalog: Catalog,
        producers: ProducerTable,
        txns: TxnTable,
        index: FileIndex,
        views: Views,
        guards: VerificationGuards,
    ) -> None:
        self._guards = guards
        self._catalog = catalog
        self._producers = producers
        self._txns = txns
        self._index = index
        self._views = views
        self._view: ReadView | None = None

    def snapshot(self) -> ReadView:
        """The call's LMDB snapshot (with the overlay), opened on first use."""
        if self._view is None:
            self._view = self._views.begin()
        return self._view

    def release(self) -> None:
        """End the call's snapshot, if one was opened."""
        if self._view is not None:
            view, self._view = self._view, None
            self._views.end(view)

    def part(self, tp: TopicIdPartition) -> Part | None:
        return self._catalog.parts.get(tp)

    def topic_config(self, topic_id: uuid.UUID) -> TopicConfig:
        return self._catalog.topics[topic_id].config

    def producer(self, part_id: int, producer_id: int) -> bytes | None:
        # Every entry written since open is cached, so a miss means LMDB's
        # state is current; the cache is asked first, without a snapshot.
        cached = self._producers.cached(part_id, producer_id)
        if cached is not None:
            return cached
        return self._producers.load(self.snapshot(), part_id, producer_id)

    def file_id(self, object_key: str) -> int:
        # The pending map BEFORE the snapshot is opened (FileIndex.resolve).
        pending = self._index.pending_id(object_key)
        if pending is not None:
            return pending
        return self._index.durable_id(self.snapshot(), object_key)

    def file_ids(self, object_keys: Iterable[str]) -> dict[str, int]:
        """:meth:`file_id` of several keys, at the start of a call: the
        pending map is asked for ALL of them before the snapshot opens (a
        key's pending entry leaves the map only once a checkpoint applied
        it, so the pending map or that later snapshot sees it)."""
        assert self._view is None, "file ids are resolved before anything opens the call's snapshot"
        pending = {key: self._index.pending_id(key) for key in object_keys}
        return {
            key: fid if fid is not None else self._index.durable_id(self.snapshot(), key)
            for key, fid in pending.items()
        }

    def counter(self, name: bytes) -> int:
        return self._catalog.next_ids.get(name, 0)

    def owner_high_watermark(self, tp: TopicIdPartition) -> int | None:
        return self._catalog.hwms.get(tp)

    def txns(self, part_id: int) -> bytes:
        # Every partition's transactions written since open are cached.
        cached = self._txns.cache.get(part_id)
        if cached is not None:
            return cached
        return self._txns.load(self.snapshot(), part_id)

    def guard(self, tp: TopicIdPartition, producer_id: int) -> int:
        return self._guards.current(tp, producer_id)
