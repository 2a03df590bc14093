"""The controller's producer-id blocks (KIP-730), persisted: the embedded
controller (:mod:`partlog.controller.core`) hands each broker a block of ids
from a :class:`ProducerIdManager`.  The block type and the brokers' side
(:class:`~partlog.kafka.producer_ids.ProducerIdAllocator`) are pure and stay
in :mod:`partlog.kafka.producer_ids`; the etcd back end keeps its counter in
etcd instead (:mod:`partlog.controller.etcd_meta`).

The manager persists the next free id in its own LMDB environment, durably,
BEFORE it returns a block: a controller restart can never hand out an id
twice.
"""

from __future__ import annotations

import os
import struct

import lmdb

from partlog import injected_bugs
from partlog.kafka.producer_ids import PRODUCER_ID_BLOCK_SIZE, PRODUCER_ID_MAX, ProducerIdBlock

__all__ = ["ProducerIdManager", "ProducerIdsExhaustedError"]

# Address space, not disk: the environment holds one counter.
MAP_SIZE_BYTES = 1 << 20
_U64 = struct.Struct(">Q")


class ProducerIdsExhaustedError(RuntimeError):
    """No block of producer ids is left (after 2^63 ids)."""


class ProducerIdManager:
    """The controller's block allocator, persisted in an LMDB environment."""

    def __init__(self, path: str | os.PathLike[str], *, block_size: int = PRODUCER_ID_BLOCK_SIZE) -> None:
        if block_size <= 0:
            raise ValueError(f"block_size must be > 0, got {block_size}")
        self.block_size = block_size
        os.makedirs(path, exist_ok=True)
        # sync=True: a block is on disk before anybody can use its ids.
        self._env = lmdb.open(os.fspath(path), map_size=MAP_SIZE_BYTES, max_dbs=2, sync=True, metasync=True)
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
