"""Producer ids for InitProducerId (KIP-730): handed out from blocks the
controller allocates to this broker, the next block fetched when one is 90%
used.  A metadata source without a controller gives no blocks: then a random
62-bit id (design.md)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from partlog.broker.tasks import Tasks
from partlog.controller.cluster_meta import MetadataSource
from partlog.kafka.errors import Errors
from partlog.kafka.producer_ids import ProducerIdAllocator
from partlog.runtime import Clock, Entropy

log = logging.getLogger(__name__)


class ProducerIdBlocks:
    """``metadata()`` reads the broker's current metadata (it asks for the blocks)."""

    def __init__(
        self,
        broker_id: int,
        *,
        tasks: Tasks,
        metadata: Callable[[], MetadataSource],
        clock: Clock,
        entropy: Entropy,
    ) -> None:
        self.clock = clock
        self.entropy = entropy  # ids of last resort, with no controller block
        self.broker_id = broker_id
        self.tasks = tasks
        self._metadata = metadata
        self.allocator = ProducerIdAllocator(broker_id)
        self._ready = asyncio.Event()
        self._no_blocks = False

    async def init_producer_id(self, wait_ms: int = 5_000) -> int | None:
        """A producer id from this broker's block, prefetching the next
        block at 90%; None if the controller gave none within ``wait_ms``."""
        deadline = self.clock.monotonic() + wait_ms / 1000
        while True:
            if self.allocator.wants_block():
                self.allocator.block_requested()
                self.tasks.spawn(self._fetch_block())
            pid = self.allocator.next_id()
            if pid is not None:
                return pid
            if self._no_blocks:
                return self.entropy.randbits(62)
            left = deadline - self.clock.monotonic()
            if left <= 0:
                return None
            self._ready.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(left):
                    await self._ready.wait()

    async def _fetch_block(self) -> None:
        try:
            block = await self._metadata().allocate_producer_ids(self.broker_id)
        except Exception:  # a MetadataSource must not raise; keep serving
            log.exception("allocate_producer_ids raised")
            block = Errors.UNKNOWN_SERVER_ERROR
        if block is None:
            # This source has no controller: random ids from now on.
            self._no_blocks = True
            self.allocator.block_failed()
        elif isinstance(block, Errors):
            # Retriable (controller unreachable): the next InitProducerId asks again.
            log.info("no producer-id block for broker %d: %s", self.broker_id, block.name)
            self.allocator.block_failed()
        else:
            self.allocator.add_block(block)
        self._ready.set()


__all__ = ["ProducerIdBlocks"]
