"""The leader-epoch cache (Kafka's ``LeaderEpochFileCache``): where each
leader epoch of a partition starts, as leader and as follower; the
``epochs`` database, (part_id, leader_epoch) -> start offset.
"""

from __future__ import annotations

import lmdb

from partlog.kafka.records import TopicIdPartition
from partlog.store.env import LmdbEnv, delete_prefix, last_under
from partlog.store.layout import EPOCH_KEY, I64, U32
from partlog.store.staged import Staged
from partlog.store.view import Txn


class EpochCache:
    """The leader-epoch cache of every partition (see the module doc)."""

    def __init__(self, env: LmdbEnv) -> None:
        self._db = env.epochs

    def become_leader(self, s: Staged, tp: TopicIdPartition, leader_epoch: int) -> None:
        """The partition's leader epoch becomes ``leader_epoch`` (>= the
        current one; ValueError if lower, KeyError for an unknown partition),
        starting at the log end."""
        part = s.part(tp)
        if part is None:
            raise KeyError(f"unknown partition {tp}")
        if leader_epoch < part.leader_epoch:
            raise ValueError(f"{tp}: leader epoch {leader_epoch} < current {part.leader_epoch}")
        if leader_epoch > part.leader_epoch:
            part.leader_epoch = leader_epoch
            self.assign(s.txn, part.part_id, leader_epoch, part.log_end_offset)

    def start(self, txn: lmdb.Transaction, part_id: int) -> None:
        """A new partition: epoch 0 starts at offset 0."""
        txn.put(EPOCH_KEY.pack(part_id, 0), I64.pack(0), db=self._db)

    def assign(self, txn: lmdb.Transaction, part_id: int, leader_epoch: int, start_offset: int) -> None:
        """Kafka's ``LeaderEpochFileCache.assign``: record where ``leader_epoch``
        starts, first dropping entries that would no longer be monotonic (a
        later or equal epoch, or a start at or after ``start_offset``: an
        epoch that wrote nothing).  Leader (``set_leader_epoch``) and follower
        (``append_replicated``) apply the same rule, so their caches agree."""
        prefix = U32.pack(part_id)
        cur = txn.cursor(db=self._db)
        doomed = []
        found = last_under(cur, prefix)
        while found and cur.key()[:4] == prefix:
            epoch = EPOCH_KEY.unpack(cur.key())[1]
            if epoch < leader_epoch and I64.unpack(cur.value())[0] < start_offset:
                break
            doomed.append(bytes(cur.key()))
            found = cur.prev()
        for key in doomed:
            txn.delete(key, db=self._db)
        txn.put(EPOCH_KEY.pack(part_id, leader_epoch), I64.pack(start_offset), db=self._db)

    def latest(self, txn: Txn, part_ids: list[int]) -> list[int]:
        """The newest epoch in each partition's cache, -1 where it is
        empty: one cursor for all (a replica fetch asks for every followed
        partition)."""
        cur = txn.cursor(db=self._db)
        out = []
        for part_id in part_ids:
            prefix = U32.pack(part_id)
            found = last_under(cur, prefix) and cur.key()[:4] == prefix
            out.append(int(EPOCH_KEY.unpack(cur.key())[1]) if found else -1)
        return out

    def entries(self, txn: Txn, part_id: int) -> list[tuple[int, int]]:
        """(leader_epoch, start_offset) pairs, ascending."""
        prefix = U32.pack(part_id)
        out = []
        cur = txn.cursor(db=self._db)
        if cur.set_range(prefix):
            for k, v in cur:
                if k[:4] != prefix:
                    break
                out.append((EPOCH_KEY.unpack(k)[1], I64.unpack(v)[0]))
        return out

    def truncate_from_end(self, txn: lmdb.Transaction, part_id: int, end_offset: int) -> None:
        """Kafka's ``LeaderEpochFileCache.truncateFromEnd``: drop the epochs
        starting at or after ``end_offset`` (start offsets ascend with the
        epochs, so they are the newest ones)."""
        prefix = U32.pack(part_id)
        cur = txn.cursor(db=self._db)
        doomed = []
        found = last_under(cur, prefix)
        while found and cur.key()[:4] == prefix and I64.unpack(cur.value())[0] >= end_offset:
            doomed.append(bytes(cur.key()))
            found = cur.prev()
        for key in doomed:
            txn.delete(key, db=self._db)

    def drop(self, txn: lmdb.Transaction, part_id: int) -> None:
        """Forget the partition's epochs (topic deletion, reset)."""
        delete_prefix(txn, self._db, U32.pack(part_id))

    def problems(self, txn: Txn, part_id: int, log_end_offset: int, tp: object) -> list[str]:
        """Start offsets out of order with the epochs, or past the log end."""
        problems = []
        previous = 0
        for epoch, start in self.entries(txn, part_id):
            if not previous <= start <= log_end_offset:
                problems.append(f"{tp}: epoch {epoch} starts at {start}, out of order")
            previous = start
        return problems
