"""A partition leader's transaction state, as Kafka's ``ProducerStateManager``
(ongoing and unreplicated transactions, the first unstable offset) and
``TransactionIndex`` (the aborted transactions) keep it.

* :class:`PartTxns`: one partition's transactions whose outcome a
  read_committed reader may not see yet: every ongoing one (first offset,
  producer id) and every completed one whose marker may still lie at or
  above the high watermark (Kafka's ``unreplicatedTxns``).  Encoded as one
  value per partition (the ``txns`` database, and :attr:`CommitGroup.txns
  <partlog.store.layout.CommitGroup.txns>` through the group commit); a
  write prunes completed ones below the high watermark, readers ignore those
  it did not prune yet.  Its size is the number of producers with an open
  transaction on the partition.
* The aborted-transaction index (``aborted``, keyed by the ABORT marker's
  offset): (producer id, first offset, last offset, last stable offset right
  after the abort), appended in the marker's group, read with Kafka's
  ``collectAbortedTxns`` (:func:`collect_aborted`), cut with the log.
* :func:`last_stable_offset`: Kafka's LSO, min(first unstable offset, HWM),
  never below the log start (``UnifiedLog.updateFirstUnstableOffset``).

The per-producer half (the ongoing transaction's first offset, the last
marker's coordinator epoch) lives in the producer's window
(:mod:`partlog.kafka.producer_state`).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Mapping

import lmdb

from partlog import injected_bugs
from partlog.kafka.records import AbortedTxn
from partlog.store.env import LmdbEnv, delete_prefix
from partlog.store.layout import PART_KEY, U32, Buf, verify
from partlog.store.view import Txn, overlay_aborted, overlay_txns

# One transaction of PartTxns: first offset, producer id, last offset (the
# marker's; -1 while ongoing).
_TXN = struct.Struct(">qqq")
# An aborted-index value (keyed by part_id, last offset): producer id,
# first offset, last stable offset.
_ABORTED_VALUE = struct.Struct(">qqq")
# An aborted-index record of a group (its part_id is the group's key):
# last offset, producer id, first offset, last stable offset.
ABORTED_RECORD = struct.Struct(">qqqq")


class PartTxns:
    """One partition's unstable transactions (see the module doc), changed
    in place by one write and encoded back."""

    __slots__ = ("txns",)

    def __init__(self, txns: list[tuple[int, int, int]]) -> None:
        self.txns = txns  # (first offset, producer id, last offset), ascending

    @classmethod
    def decode(cls, raw: Buf | None) -> PartTxns:
        if not raw:
            return cls([])
        verify(len(raw) % _TXN.size == 0, "transactions value of %d bytes", len(raw))
        return cls([(int(a), int(b), int(c)) for a, b, c in _TXN.iter_unpack(raw)])

    def encode(self) -> bytes:
        return b"".join(_TXN.pack(*t) for t in self.txns)

    def start(self, producer_id: int, first_offset: int) -> None:
        """The producer's first transactional batch since its last marker."""
        self.txns.append((first_offset, producer_id, -1))
        self.txns.sort()

    def complete(self, producer_id: int, last_offset: int) -> None:
        """The producer's marker at ``last_offset`` ends its ongoing transaction."""
        for i, (first, pid, last) in enumerate(self.txns):
            if pid == producer_id and last < 0:
                self.txns[i] = (first, pid, last_offset)
                return

    def next_incomplete(self, producer_id: int) -> int:
        """The first offset of the earliest ongoing transaction of another
        producer, or -1 (Kafka's ``findNextIncompleteTxn``)."""
        for first, pid, last in self.txns:
            if last < 0 and pid != producer_id:
                return first
        return -1

    def prune(self, high_watermark: int) -> None:
        """Forget completed transactions whose marker is below the HWM."""
        self.txns = [t for t in self.txns if t[2] < 0 or t[2] >= high_watermark]

    def drop_from(self, offset: int, ongoing: Mapping[int, int]) -> None:
        """A truncation to ``offset``: transactions starting at or past it go,
        those whose marker went become ongoing again; ``ongoing`` (producer id
        -> first offset, -1: none) overrides the producers it names, as
        their rebuilt states say."""
        kept: dict[int, tuple[int, int, int]] = {}
        done: list[tuple[int, int, int]] = []
        for first, pid, last in self.txns:
            if first >= offset:
                continue
            if last < 0 or last >= offset:
                kept[pid] = (first, pid, -1)
            else:
                done.append((first, pid, last))
        for pid, first in ongoing.items():
            kept.pop(pid, None)
            if first >= 0:
                kept[pid] = (first, pid, -1)
        self.txns = sorted([*done, *kept.values()])

    def reopened(self, offset: int) -> dict[int, int]:
        """Producer id -> first offset of each transaction whose marker a
        truncation to ``offset`` removes while its start stays (known while
        the marker was not below the HWM when this state was last written)."""
        return {pid: first for first, pid, last in self.txns if first < offset <= last}


def last_stable_offset(raw: Buf | None, log_start_offset: int, high_watermark: int) -> int:
    """Kafka's LSO of a partition whose transactions are ``raw``: the first
    offset of its earliest ongoing transaction or completed one whose marker
    is not below the HWM, capped at the HWM and never below the log start."""
    if raw:
        skip = injected_bugs.on("lso_ignores_one_ongoing_txn")
        for first, _, last in _TXN.iter_unpack(raw):
            if last < 0 or last >= high_watermark:
                if skip:
                    skip = False
                    continue
                return min(max(int(first), log_start_offset), high_watermark)
    return high_watermark


def collect_aborted(records: Iterable[tuple[int, int, int, int]], fetch_offset: int, upper: int) -> list[AbortedTxn]:
    """Kafka's ``TransactionIndex.collectAbortedTxns`` over index records
    (last offset, producer id, first offset, LSO) ascending by last offset
    from ``fetch_offset``: those with first offset < ``upper``, up to the
    first whose recorded LSO reaches ``upper``."""
    out: list[AbortedTxn] = []
    for last, pid, first, lso in records:
        if last >= fetch_offset and first < upper:
            out.append(AbortedTxn(pid, first))
        if lso >= upper:
            break
    return out


class TxnTable:
    """The ``txns`` and ``aborted`` databases, and a cache of every
    partition's transactions read or written since open (the commit path
    sequences against it, as against the producer table)."""

    def __init__(self, env: LmdbEnv) -> None:
        self._db = env.txns
        self._db_aborted = env.aborted
        self.cache: dict[int, bytes] = {}

    def load(self, txn: Txn, part_id: int) -> bytes:
        """The partition's transactions (cache, else LMDB, then cached)."""
        raw = self.cache.get(part_id)
        if raw is None:
            stored = txn.get(U32.pack(part_id), db=self._db)
            raw = self.cache[part_id] = b"" if stored is None else bytes(stored)
        return raw

    def read(self, txn: Txn, part_id: int) -> Buf | None:
        """The partition's transactions as a reader's view sees them."""
        over = overlay_txns(txn, part_id)
        return over if over is not None else txn.get(U32.pack(part_id), db=self._db)

    def install(self, changes: Mapping[int, bytes]) -> None:
        self.cache.update(changes)

    def write(self, txn: lmdb.Transaction, changes: Mapping[int, bytes]) -> None:
        """Partitions' new transactions (an exclusive write's or a
        checkpoint's); an empty value deletes."""
        for part_id, raw in changes.items():
            if raw:
                txn.put(U32.pack(part_id), raw, db=self._db)
            else:
                txn.delete(U32.pack(part_id), db=self._db)

    # ------------------------------------------------------------ the aborted index

    def put_aborted(self, txn: lmdb.Transaction, part_id: int, records: Iterable[bytes]) -> None:
        """Index records (:data:`ABORTED_RECORD`) of one partition, appended."""
        for rec in records:
            last, pid, first, lso = ABORTED_RECORD.unpack(rec)
            ok = txn.put(
                PART_KEY.pack(part_id, last), _ABORTED_VALUE.pack(pid, first, lso), db=self._db_aborted, overwrite=False
            )
            verify(ok, "aborted index: two entries at offset %d", last)

    def aborted(self, txn: Txn, part_id: int, from_last_offset: int = 0) -> Iterator[tuple[int, int, int, int]]:
        """(last offset, producer id, first offset, LSO) of the partition's
        index entries whose last offset >= ``from_last_offset``, ascending:
        LMDB's, then the overlay's."""
        cur = txn.cursor(db=self._db_aborted)
        prefix = U32.pack(part_id)
        if cur.set_range(PART_KEY.pack(part_id, max(from_last_offset, 0))):
            for k, v in cur:
                if k[:4] != prefix:
                    break
                yield (PART_KEY.unpack(k)[1], *_ABORTED_VALUE.unpack(v))
        for rec in overlay_aborted(txn, part_id):
            entry = ABORTED_RECORD.unpack(rec)
            if entry[0] >= from_last_offset:
                yield entry

    def drop_aborted_below(self, txn: lmdb.Transaction, part_id: int, offset: int) -> None:
        """Index entries wholly below ``offset`` (a new log start) go."""
        cur = txn.cursor(db=self._db_aborted)
        prefix = U32.pack(part_id)
        if cur.set_range(prefix):
            while cur.key()[:4] == prefix and PART_KEY.unpack(cur.key())[1] < offset:
                if not cur.delete():
                    break

    def drop_aborted_from(self, txn: lmdb.Transaction, part_id: int, offset: int) -> None:
        """Index entries whose marker is at or past ``offset`` (truncated) go."""
        cur = txn.cursor(db=self._db_aborted)
        prefix = U32.pack(part_id)
        if cur.set_range(PART_KEY.pack(part_id, offset)):
            while cur.key()[:4] == prefix:
                if not cur.delete():
                    break

    def drop(self, txn: lmdb.Transaction, part_id: int) -> None:
        """Everything of a partition (deleted, or reset): the caller stages
        the cache's removal (an empty value)."""
        txn.delete(U32.pack(part_id), db=self._db)
        delete_prefix(txn, self._db_aborted, U32.pack(part_id))

    # ------------------------------------------------------------ check

    def problems(self, view: Txn, part_id: int, tp: object, log_start: int, log_end: int) -> list[str]:
        """Where the partition's transactions or aborted index contradict
        its log bounds (``check``)."""
        out = []
        ongoing: set[int] = set()
        for first, pid, last in PartTxns.decode(self.read(view, part_id)).txns:
            if not first < log_end or (last >= 0 and not first < last < log_end):
                out.append(f"{tp}: transaction of producer {pid} at [{first}, {last}] outside the log end {log_end}")
            if last < 0:
                if pid in ongoing:
                    out.append(f"{tp}: producer {pid} has two ongoing transactions")
                ongoing.add(pid)
        for last, pid, first, lso in self.aborted(view, part_id):
            # (its LSO is the marker's next offset, or an earlier transaction's start)
            if not (log_start <= last < log_end and 0 <= first < last and lso <= last + 1):
                out.append(f"{tp}: aborted transaction of producer {pid} [{first}, {last}] (LSO {lso}) out of order")
        return out
