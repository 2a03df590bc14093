"""The leader-epoch cache (Kafka's LeaderEpochFileCache): where each leader
epoch starts, as leader and as follower.
"""

from __future__ import annotations

import lmdb

from partlog.kafka.records import (
    TopicIdPartition,
)
from partlog.store.base import Staged, StoreBase
from partlog.store.layout import (
    EPOCH_KEY,
    I64,
    U32,
    last_under,
)


class EpochsMixin(StoreBase):
    """The leader-epoch cache. See the module doc."""

    def set_leader_epoch(self, tp: TopicIdPartition, leader_epoch: int) -> None:
        """Become leader at ``leader_epoch`` (>= the current one): new entries are
        stamped with it, and the epoch cache records where it starts."""

        def fn(s: Staged) -> None:
            part = s.part(tp)
            if part is None:
                raise KeyError(f"unknown partition {tp}")
            if leader_epoch < part.leader_epoch:
                raise ValueError(f"{tp}: leader epoch {leader_epoch} < current {part.leader_epoch}")
            if leader_epoch > part.leader_epoch:
                part.leader_epoch = leader_epoch
                self._assign_epoch(s.wtxn, part.part_id, leader_epoch, part.log_end_offset)

        self._write(fn)

    def _assign_epoch(self, txn: lmdb.Transaction, part_id: int, leader_epoch: int, start_offset: int) -> None:
        """Kafka's ``LeaderEpochFileCache.assign``: record where ``leader_epoch``
        starts, first dropping entries that would no longer be monotonic (a
        later or equal epoch, or a start at or after ``start_offset``: an
        epoch that wrote nothing).  Leader (``set_leader_epoch``) and follower
        (``append_replicated``) apply the same rule, so their caches agree."""
        prefix = U32.pack(part_id)
        cur = txn.cursor(db=self._db_epochs)
        doomed = []
        found = last_under(cur, prefix)
        while found and cur.key()[:4] == prefix:
            epoch = EPOCH_KEY.unpack(cur.key())[1]
            if epoch < leader_epoch and I64.unpack(cur.value())[0] < start_offset:
                break
            doomed.append(bytes(cur.key()))
            found = cur.prev()
        for key in doomed:
            txn.delete(key, db=self._db_epochs)
        txn.put(EPOCH_KEY.pack(part_id, leader_epoch), I64.pack(start_offset), db=self._db_epochs)

    def _latest_epoch(self, txn: lmdb.Transaction, part_id: int) -> int:
        """The newest epoch in the partition's epoch cache, -1 if it is empty."""
        prefix = U32.pack(part_id)
        cur = txn.cursor(db=self._db_epochs)
        if last_under(cur, prefix) and cur.key()[:4] == prefix:
            return int(EPOCH_KEY.unpack(cur.key())[1])
        return -1

    def leader_epoch_cache(self, tp: TopicIdPartition) -> list[tuple[int, int]]:
        """(leader_epoch, start_offset) pairs, ascending."""
        with self._read() as txn:
            part = self._read_part(txn, tp)
            if part is None:
                raise KeyError(f"unknown partition {tp}")
            prefix = U32.pack(part.part_id)
            out = []
            cur = txn.cursor(db=self._db_epochs)
            if cur.set_range(prefix):
                for k, v in cur:
                    if k[:4] != prefix:
                        break
                    out.append((EPOCH_KEY.unpack(k)[1], I64.unpack(v)[0]))
            return out

    def _truncate_epochs(self, txn: lmdb.Transaction, part_id: int, end_offset: int) -> None:
        """Kafka's ``LeaderEpochFileCache.truncateFromEnd``: drop the epochs
        starting at or after ``end_offset`` (start offsets ascend with the
        epochs, so they are the newest ones)."""
        prefix = U32.pack(part_id)
        cur = txn.cursor(db=self._db_epochs)
        doomed = []
        found = last_under(cur, prefix)
        while found and cur.key()[:4] == prefix and I64.unpack(cur.value())[0] >= end_offset:
            doomed.append(bytes(cur.key()))
            found = cur.prev()
        for key in doomed:
            txn.delete(key, db=self._db_epochs)
