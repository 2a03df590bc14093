"""Producer IDs in blocks, as KIP-730: the controller hands each broker a
block of ids; brokers answer InitProducerId from their block and fetch the
next block before the current one runs out.

* :class:`ProducerIdManager` (controller side) persists the next free id in
  LMDB, durably, BEFORE it returns a block: a controller restart can never
  hand out an id twice.
* :class:`ProducerIdAllocator` (broker side, sans-IO) hands out ids from its
  blocks and says when to ask for the next block (at 90% of the current one,
  as Kafka's ``RPCProducerIdManager``), so InitProducerId rarely waits.

Issue 4 wires these into the embedded controller and the brokers; until then
brokers answer InitProducerId with random 62-bit ids (design.md).
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass

import lmdb

from partlog import injected_bugs

# KIP-730's block size.
PRODUCER_ID_BLOCK_SIZE = 1000
# Ask for the next block once this share of the current one is used.
PREFETCH_RATIO = 0.9
# Producer ids are non-negative int64s; -1 means "none".
PRODUCER_ID_MAX = (1 << 63) - 1
_U64 = struct.Struct(">Q")


class ProducerIdsExhaustedError(RuntimeError):
    """No block of producer ids is left (after 2^63 ids)."""


@dataclass(frozen=True, slots=True)
class ProducerIdBlock:
    assigned_broker_id: int
    first_producer_id: int
    size: int

    @property
    def last_producer_id(self) -> int:
        return self.first_producer_id + self.size - 1


class ProducerIdManager:
    """The controller's block allocator, persisted in an LMDB environment."""

    def __init__(self, path: str | os.PathLike[str], *, block_size: int = PRODUCER_ID_BLOCK_SIZE) -> None:
        if block_size <= 0:
            raise ValueError(f"block_size must be > 0, got {block_size}")
        self.block_size = block_size
        os.makedirs(path, exist_ok=True)
        # sync=True: a block is on disk before anybody can use its ids.
        self._env = lmdb.open(os.fspath(path), map_size=1 << 20, max_dbs=2, sync=True, metasync=True)
        self._db = self._env.open_db(b"producer_ids")
        self._bug_next = 0  # injected_bugs: an in-memory counter that restarts at 0

    def allocate(self, broker_id: int) -> ProducerIdBlock:
        """The next block, for ``broker_id``; durable before it is returned."""
        with self._env.begin(write=True, db=self._db) as txn:
            raw = txn.get(b"next")
            first = _U64.unpack(raw)[0] if raw else 0
            if injected_bugs.on("producer_ids_not_persisted"):
                first, self._bug_next = self._bug_next, self._bug_next + self.block_size
            if first > PRODUCER_ID_MAX - self.block_size + 1:
                raise ProducerIdsExhaustedError(f"no producer id block left after {first}")
            txn.put(b"next", _U64.pack(first + self.block_size))
        return ProducerIdBlock(broker_id, first, self.block_size)

    def close(self) -> None:
        self._env.close()

    def __enter__(self) -> ProducerIdManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ProducerIdAllocator:
    """A broker's ids: from the current block, then the prefetched one."""

    def __init__(self, broker_id: int, *, prefetch_ratio: float = PREFETCH_RATIO) -> None:
        if not 0 < prefetch_ratio <= 1:
            raise ValueError(f"prefetch_ratio must be in (0, 1], got {prefetch_ratio}")
        self.broker_id = broker_id
        self.prefetch_ratio = prefetch_ratio
        self._current: ProducerIdBlock | None = None
        self._next_id = 0
        self._prefetched: ProducerIdBlock | None = None
        self._requested = False
        self.ids_handed_out = 0
        self.blocks_received = 0

    def wants_block(self) -> bool:
        """True when the shell should request a block now (and has not yet)."""
        if self._requested or self._prefetched is not None:
            return False
        if self._current is None:
            return True
        used = self._next_id - self._current.first_producer_id
        return used >= self.prefetch_ratio * self._current.size

    def block_requested(self) -> None:
        self._requested = True

    def block_failed(self) -> None:
        """The request failed: ``wants_block`` may ask again."""
        self._requested = False

    def add_block(self, block: ProducerIdBlock) -> None:
        if block.assigned_broker_id != self.broker_id:
            raise ValueError(f"block for broker {block.assigned_broker_id} given to broker {self.broker_id}")
        self._requested = False
        self.blocks_received += 1
        if self._current is None or self._next_id > self._current.last_producer_id:
            self._current, self._next_id = block, block.first_producer_id
        else:
            self._prefetched = block

    def next_id(self) -> int | None:
        """A fresh producer id, or None when no block is available yet
        (InitProducerId then answers a retriable error and the client retries)."""
        if self._current is not None and self._next_id > self._current.last_producer_id:
            self._current = self._prefetched
            self._prefetched = None
            if self._current is not None:
                self._next_id = self._current.first_producer_id
        if self._current is None:
            return None
        pid = self._next_id
        self._next_id += 1
        self.ids_handed_out += 1
        return pid
