"""Producer IDs in blocks, as KIP-730: the controller hands each broker a
block of ids; brokers answer InitProducerId from their block and fetch the
next block before the current one runs out.

Pure, no I/O: the block type, and :class:`ProducerIdAllocator` (broker side,
sans-IO), which hands out ids from its blocks and says when to ask for the
next block (at 90% of the current one, as Kafka's ``RPCProducerIdManager``),
so InitProducerId rarely waits.  The controller's durable side is
:class:`partlog.controller.producer_ids.ProducerIdManager` (embedded
controller) or a counter in etcd (:mod:`partlog.controller.etcd_meta`).
"""

from __future__ import annotations

from dataclasses import dataclass

# KIP-730's block size.
PRODUCER_ID_BLOCK_SIZE = 1000
# Ask for the next block once this share of the current one is used.
PREFETCH_RATIO = 0.9
# Producer ids are non-negative int64s; -1 means "none".
PRODUCER_ID_MAX = (1 << 63) - 1


@dataclass(frozen=True, slots=True)
class ProducerIdBlock:
    assigned_broker_id: int
    first_producer_id: int
    size: int

    @property
    def last_producer_id(self) -> int:
        return self.first_producer_id + self.size - 1


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
