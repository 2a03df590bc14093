"""The catalog: the topics, their partitions' internal ids, each partition's
state (log bounds, high watermark, leader epoch, live counters, timestamps)
and the id counters; kept in memory and in the ``meta``, ``topics``, ``tp``
and ``parts`` databases.

The caches are what the commit path sequences against: they run ahead of
disk by at most the group commit's depth, and exclusive writes change them
only once their transaction committed (:class:`partlog.store.staged.Staged`).
Readers do not read them: they read LMDB and the journal's overlay
(:mod:`partlog.store.view`), through :meth:`Catalog.read_part`.

High watermarks the owner sets (:meth:`Catalog.set_high_watermark`) or a
follower append raises live here in memory, ahead of what is persisted:
advancing one must not cost a write transaction per fetch.  Readers take
max(persisted, in memory), capped at their snapshot's log end; the next
write of the partition persists it.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterable

import lmdb
import msgpack

from partlog.kafka.records import TopicIdPartition
from partlog.kafka.topic_config import TopicConfig
from partlog.store.env import LmdbEnv
from partlog.store.layout import U32, U64, Part, Topic
from partlog.store.view import Txn, overlay_part

# The id counters in ``meta``: partitions' internal ids, WAL objects' file
# ids, and batch ids (unique per store, never reused).
COUNTERS = (b"next_part_id", b"next_file_id", b"next_batch_id")


class Catalog:
    """Topics, partition states, id counters and in-memory high watermarks
    (see the module doc)."""

    def __init__(self, env: LmdbEnv) -> None:
        self._db_meta = env.meta
        self._db_topics = env.topics
        self._db_tp = env.tp
        self._db_parts = env.parts
        self.parts: dict[TopicIdPartition, Part] = {}
        self.topics: dict[uuid.UUID, Topic] = {}
        self.next_ids: dict[bytes, int] = {}
        # Written under hwm_lock (monotonic raises must not race); read
        # lock-free (one dict lookup).
        self.hwms: dict[TopicIdPartition, int] = {}
        self.hwm_lock = threading.Lock()

    def load(self, txn: lmdb.Transaction) -> None:
        """Fill the caches from LMDB (at open, once the journal is applied)."""
        for key, value in txn.cursor(db=self._db_topics):
            name, n, configs = msgpack.unpackb(value)
            self.topics[uuid.UUID(bytes=bytes(key))] = Topic(name, n, TopicConfig().with_configs(configs))
        for key, value in txn.cursor(db=self._db_parts):
            part = Part.unpack(U32.unpack(key)[0], value)
            self.parts[part.tp] = part
        for name in COUNTERS:
            raw = txn.get(name, db=self._db_meta)
            self.next_ids[name] = U64.unpack(raw)[0] if raw else 0

    # ------------------------------------------------------------ high watermarks

    def effective_hwm(self, part: Part) -> int:
        """The high watermark readers use: the persisted one, or the in-memory
        one when it is ahead, capped at ``part``'s log end (a reader's
        snapshot may predate entries the in-memory value already covers).
        A ``readonly`` store in another process has no in-memory values and
        sees the persisted one, which may lag until the next write of the
        partition."""
        mem = self.hwms.get(part.tp)
        if mem is None or mem <= part.high_watermark:
            return part.high_watermark
        return mem if mem < part.log_end_offset else part.log_end_offset

    def set_high_watermark(self, tp: TopicIdPartition, high_watermark: int) -> int:
        """Raise the in-memory HWM to ``high_watermark`` capped at the log
        end; returns the effective one.  KeyError for an unknown partition."""
        with self.hwm_lock:
            part = self.parts.get(tp)
            if part is None:
                raise KeyError(f"unknown partition {tp}")
            current = self.effective_hwm(part)
            target = min(high_watermark, part.log_end_offset)
            if target <= current:
                return current
            self.hwms[tp] = target
            return target

    def restore_hwms(self, hwms: dict[TopicIdPartition, int]) -> None:
        """Keep in-memory HWMs across a reopen (they only covered durable entries)."""
        with self.hwm_lock:
            for tp, hwm in hwms.items():
                if tp in self.parts:
                    self.hwms[tp] = max(hwm, self.hwms.get(tp, -1))

    def check_hwms(self) -> list[str]:
        """In-memory HWMs of no partition, or past its log end."""
        problems = []
        for tp, mem in list(self.hwms.items()):
            cached = self.parts.get(tp)
            if cached is None or mem > cached.log_end_offset:
                problems.append(f"{tp}: in-memory high watermark {mem} past the log end or of no partition")
        return problems

    # ------------------------------------------------------------ caches after a write

    def install(
        self,
        parts: dict[TopicIdPartition, Part | None],
        hwms: dict[TopicIdPartition, tuple[int, bool]],
        topics: dict[uuid.UUID, Topic | None],
        counters: dict[bytes, int],
    ) -> None:
        """An exclusive write committed: its partition states (None:
        deleted), HWMs (``(value, lowers)``: only truncation and reset may
        lower one; a raise never undoes a concurrent set_high_watermark),
        topics and counters become the cached ones."""
        for tp, part in parts.items():
            if part is None:
                self.parts.pop(tp, None)
                with self.hwm_lock:
                    self.hwms.pop(tp, None)
            else:
                self.parts[tp] = part
        if hwms:
            with self.hwm_lock:
                for tp, (value, lowers) in hwms.items():
                    current = self.hwms.get(tp)
                    self.hwms[tp] = value if lowers or current is None else max(current, value)
        for tid, topic in topics.items():
            if topic is None:
                self.topics.pop(tid, None)
            else:
                self.topics[tid] = topic
        self.next_ids.update(counters)

    def install_sequenced(self, parts: dict[TopicIdPartition, Part], counters: dict[bytes, int]) -> None:
        """A commit was sequenced: its partition states and counters are
        current from now on (ahead of disk until its group is durable)."""
        self.parts.update(parts)
        self.next_ids.update(counters)

    # ------------------------------------------------------------ LMDB writes

    def put_parts(self, txn: lmdb.Transaction, parts: Iterable[Part | None]) -> None:
        for part in parts:
            if part is not None:
                txn.put(U32.pack(part.part_id), part.pack(), db=self._db_parts)

    def put_packed_parts(self, txn: lmdb.Transaction, parts: dict[int, bytes]) -> None:
        """Packed partition states by part_id (a checkpoint's), in one putmulti."""
        if parts:
            txn.cursor(db=self._db_parts).putmulti([(U32.pack(p), v) for p, v in parts.items()])

    def put_counters(self, txn: lmdb.Transaction, counters: dict[bytes, int]) -> None:
        for name, value in counters.items():
            txn.put(name, U64.pack(value), db=self._db_meta)

    def put_topic(self, txn: lmdb.Transaction, topic_id: uuid.UUID, topic: Topic) -> None:
        txn.put(
            topic_id.bytes,
            msgpack.packb([topic.name, topic.num_partitions, topic.config.to_configs()]),
            db=self._db_topics,
        )

    def delete_topic(self, txn: lmdb.Transaction, topic_id: uuid.UUID) -> None:
        txn.delete(topic_id.bytes, db=self._db_topics)

    def add_partition(self, txn: lmdb.Transaction, tp: TopicIdPartition, part_id: int) -> Part:
        """A new, empty partition under ``part_id``; returns its state (to stage)."""
        txn.put(tp.topic_id.bytes + U32.pack(tp.partition), U32.pack(part_id), db=self._db_tp)
        return Part(part_id, tp, 0, 0, 0, 0, 0, 0, -1, -1, -1)

    def delete_partition(self, txn: lmdb.Transaction, part: Part) -> None:
        """The partition's state and id (its log, producers and epochs are
        their components' to delete)."""
        txn.delete(U32.pack(part.part_id), db=self._db_parts)
        txn.delete(part.tp.topic_id.bytes + U32.pack(part.tp.partition), db=self._db_tp)

    # ------------------------------------------------------------ reads (LMDB and the overlay)

    def read_part(self, txn: Txn, tp: TopicIdPartition) -> Part | None:
        """The partition's state as ``txn`` sees it, with the effective HWM
        (every read path works with it); None for an unknown partition."""
        raw = txn.get(tp.topic_id.bytes + U32.pack(tp.partition), db=self._db_tp)
        if raw is None:
            return None
        part_id = U32.unpack(raw)[0]
        state = overlay_part(txn, part_id) or txn.get(raw, db=self._db_parts)
        if state is None:
            return None
        part = Part.unpack(part_id, state)
        part.high_watermark = self.effective_hwm(part)
        return part

    def all_parts(self, txn: Txn) -> list[Part]:
        """Every partition's state as ``txn`` sees it (persisted HWMs)."""
        out = []
        for k, v in txn.cursor(db=self._db_parts):
            part_id = U32.unpack(k)[0]
            out.append(Part.unpack(part_id, overlay_part(txn, part_id) or v))
        return out

    def partitions(self, txn: Txn) -> list[TopicIdPartition]:
        return [Part.unpack(U32.unpack(k)[0], v).tp for k, v in txn.cursor(db=self._db_parts)]

    def topic_names(self, txn: Txn) -> dict[uuid.UUID, tuple[str, int]]:
        out: dict[uuid.UUID, tuple[str, int]] = {}
        for k, v in txn.cursor(db=self._db_topics):
            name, n, _ = msgpack.unpackb(v)
            out[uuid.UUID(bytes=bytes(k))] = (str(name), int(n))
        return out

    def topic_config(self, txn: Txn, topic_id: uuid.UUID) -> TopicConfig:
        raw = txn.get(topic_id.bytes, db=self._db_topics)
        if raw is None:
            raise KeyError(f"unknown topic {topic_id}")
        return TopicConfig().with_configs(msgpack.unpackb(raw)[2])
