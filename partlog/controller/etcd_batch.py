"""The acting controller's partition changes packed into etcd transactions:
sans-IO.

One decision (a broker's fencing, an election round, the ISR changes a
pass decides together) changes many partitions.  Written one transaction
each, every partition costs a raft round and an fsync; here they go into
as few transactions as etcd takes, :func:`chunk_changes`:

* a chunk holds at most :data:`TXN_OPS_MAX` compares and puts together
  (etcd refuses a transaction with more than ``--max-txn-ops`` operations,
  128 by default; etcd 3.4 counts each list on its own, so counting both
  together is the conservative reading) and its request is at most
  :data:`TXN_REQUEST_BYTES_MAX` (``--max-request-bytes``, 1.5 MiB by
  default);
* every chunk compares the acting controller's candidate key (a deposed
  controller's chunk fails), and each partition in it keeps the guards its
  own transaction had: its key's mod revision, its topic's create revision
  and its new leader's broker epoch, all as the plan read them.  A guard
  shared by several partitions (the topic, the leader) is compared once.

A transaction commits all or nothing, so one partition that moved fails
the whole chunk.  Its failure branch reads every compared key back (in the
same revision as the compare); :func:`still_valid` keeps the changes whose
every guard still holds, and the shell writes only those again, bounded by
:data:`CHUNK_ATTEMPTS_MAX`.  A change whose partition, topic or leader
moved is dropped: never written over a state it was not decided on (the
watch brings what moved, and the next pass re-plans).  Every change is in
exactly one chunk, and a chunk never puts one key twice.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Literal

from partlog.controller.cluster_meta import NO_LEADER
from partlog.controller.etcd_controller import PartitionChange
from partlog.controller.etcd_layout import Keys, enc_part

__all__ = [
    "CHUNK_ATTEMPTS_MAX",
    "TXN_OPS_MAX",
    "TXN_REQUEST_BYTES_MAX",
    "Chunk",
    "Guard",
    "chunk_changes",
    "guards_of",
    "iter_chunks",
    "still_valid",
]

# Compares plus puts per transaction: below etcd's --max-txn-ops default
# (128), with room for the candidate guard and the failure branch's reads
# (one per compare, so at most this many too).
TXN_OPS_MAX = 120
# One transaction's request, bounded well below etcd's --max-request-bytes
# default (1.5 MiB); partition values are tens of bytes, so the op count
# binds first unless replica lists are long.
TXN_REQUEST_BYTES_MAX = 1024 * 1024
# What one compare or put costs on the wire beyond its key and value
# (protobuf tags, lengths, the revision): an upper bound.
TXN_OP_OVERHEAD_BYTES = 32
# Attempts of one chunk (the first write and the retries of what is left
# after a lost compare): each retry drops at least one change, or the
# chunk ends because the controller was deposed.
CHUNK_ATTEMPTS_MAX = 4


@dataclass(frozen=True, slots=True)
class Guard:
    """One compare: ``key``'s create or mod revision equals ``revision``
    (0: the key does not exist, or a partition key never written)."""

    key: bytes
    target: Literal["create", "mod"]
    revision: int

    def holds(self, now: tuple[int, int] | None) -> bool:
        """Whether it holds against ``now`` = (create, mod) revisions of
        the key as read (None: absent)."""
        create, mod = now if now is not None else (0, 0)
        return (create if self.target == "create" else mod) == self.revision


@dataclass(frozen=True, slots=True)
class Chunk:
    """One transaction: ``compares`` (the candidate first), then one put per
    change, in ``changes``' order."""

    changes: tuple[PartitionChange, ...]
    compares: tuple[Guard, ...]
    puts: tuple[tuple[bytes, bytes], ...]

    def ops(self) -> int:
        return len(self.compares) + len(self.puts)

    def request_bytes(self) -> int:
        """An upper bound of the request's size, the failure branch's reads
        (one per compare) included."""
        return sum(_guard_bytes(g) for g in self.compares) + sum(_put_bytes(p) for p in self.puts)


def guards_of(ch: PartitionChange, keys: Keys) -> list[Guard]:
    """The guards one change needs, as the plan read them."""
    out = [Guard(keys.part(ch.tp), "mod", ch.part_revision), Guard(keys.topic(ch.topic), "create", ch.topic_revision)]
    if ch.new.leader != NO_LEADER:
        out.append(Guard(keys.broker(ch.new.leader), "mod", ch.leader_epoch_seen))
    return out


def chunk_changes(
    changes: Iterable[PartitionChange],
    keys: Keys,
    candidate: Guard,
    *,
    ops_max: int = TXN_OPS_MAX,
    bytes_max: int = TXN_REQUEST_BYTES_MAX,
) -> list[Chunk]:
    """:func:`iter_chunks`, all of them."""
    return list(iter_chunks(changes, keys, candidate, ops_max=ops_max, bytes_max=bytes_max))


def iter_chunks(
    changes: Iterable[PartitionChange],
    keys: Keys,
    candidate: Guard,
    *,
    ops_max: int = TXN_OPS_MAX,
    bytes_max: int = TXN_REQUEST_BYTES_MAX,
) -> Iterator[Chunk]:
    """Pack ``changes`` in order into chunks within ``ops_max`` and
    ``bytes_max``, each guarded by ``candidate``, each yielded once full (the
    shell sends it while the rest are packed).  A change whose guard
    disagrees with one already in the chunk (one key, two revisions: the
    plan cannot make that, a caller could) starts a new chunk, so no chunk
    is bound to fail by its own compares."""
    out: list[Chunk] = []
    compares: dict[tuple[bytes, str], Guard] = {}
    puts: list[tuple[bytes, bytes]] = []
    put_keys: set[bytes] = set()
    members: list[PartitionChange] = []
    size = 0

    def close() -> None:
        nonlocal size
        if members:
            out.append(Chunk(tuple(members), (candidate, *compares.values()), tuple(puts)))
        compares.clear()
        puts.clear()
        put_keys.clear()
        members.clear()
        size = _guard_bytes(candidate)

    close()
    for ch in changes:
        put = (keys.part(ch.tp), enc_part(ch.new))
        need = guards_of(ch, keys)
        alone_ops = 2 + len(need)
        alone_bytes = _guard_bytes(candidate) + sum(map(_guard_bytes, need)) + _put_bytes(put)
        if alone_ops > ops_max or alone_bytes > bytes_max:
            raise ValueError(f"one partition change needs {alone_ops} ops, {alone_bytes} bytes: over the limits")
        for _ in range(2):
            clash = any((g.key, g.target) in compares and compares[(g.key, g.target)] != g for g in need)
            clash = clash or put[0] in put_keys
            new = [g for g in need if (g.key, g.target) not in compares]
            ops = 1 + len(compares) + len(puts) + len(new) + 1
            grown = size + sum(map(_guard_bytes, new)) + _put_bytes(put)
            if not clash and ops <= ops_max and grown <= bytes_max:
                break
            close()
        else:
            raise AssertionError("a change that fits alone did not fit an empty chunk")
        for g in new:
            compares[(g.key, g.target)] = g
        puts.append(put)
        put_keys.add(put[0])
        members.append(ch)
        size = grown
        yield from out
        out.clear()
    close()
    yield from out


def _guard_bytes(g: Guard) -> int:
    """A compare and the failure branch's read of its key."""
    return 2 * (len(g.key) + TXN_OP_OVERHEAD_BYTES)


def _put_bytes(put: tuple[bytes, bytes]) -> int:
    return len(put[0]) + len(put[1]) + TXN_OP_OVERHEAD_BYTES


def still_valid(
    chunk: Chunk, keys: Keys, now: Mapping[bytes, tuple[int, int] | None]
) -> tuple[list[PartitionChange], list[PartitionChange]]:
    """After ``chunk`` lost a compare: (the changes every guard of which
    still holds against ``now``, the keys' revisions as the failure branch
    read them; the changes dropped).  All are dropped when the candidate
    guard failed: the controller was deposed."""
    candidate = chunk.compares[0]
    if not candidate.holds(now.get(candidate.key)):
        return [], list(chunk.changes)
    keep: list[PartitionChange] = []
    dropped: list[PartitionChange] = []
    for ch in chunk.changes:
        ok = all(g.holds(now.get(g.key)) for g in guards_of(ch, keys))
        (keep if ok else dropped).append(ch)
    return keep, dropped
