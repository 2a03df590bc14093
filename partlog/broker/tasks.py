"""A broker's background tasks: started with ``spawn``, forgotten when they
end, a failure logged (nobody awaits them to see it), and all cancelled when
the broker stops."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Any

log = logging.getLogger(__name__)


class Tasks:
    def __init__(self, broker_id: int) -> None:
        self.broker_id = broker_id
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("broker %d task failed", self.broker_id, exc_info=task.exception())

    async def cancel_all(self) -> None:
        """Cancel every task and wait until they ended."""
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


__all__ = ["Tasks"]
