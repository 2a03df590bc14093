"""A broker's copy of one versioned piece of the embedded controller's
state, followed by long polls on the broker's controller connection (the
ACLs: :class:`partlog.controller.acls.ControllerAcls`; the dynamic configs:
:class:`partlog.controller.dynamic_configs.ControllerConfigs`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging

__all__ = ["LongPolled"]

log = logging.getLogger(__name__)


class LongPolled:
    """``start`` polls once, then follows with ``_poll_once(POLL_WAIT_MS)``
    until ``stop``; a failed poll keeps the last copy and asks again after
    ``RETRY_MS``.  Subclasses implement ``_poll_once``."""

    METHOD = ""  # the controller's RPC, for the log
    POLL_WAIT_MS = 10_000
    RETRY_MS = 500

    def __init__(self) -> None:
        self._task: asyncio.Task[None] | None = None

    async def _poll_once(self, wait_ms: int) -> None:
        raise NotImplementedError

    async def start(self) -> None:
        await self._poll_once(0)
        self._task = asyncio.create_task(self._poll_loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _poll_loop(self) -> None:
        me = asyncio.current_task()
        while True:
            try:
                await self._poll_once(self.POLL_WAIT_MS)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # a lost controller: keep the last copy, ask again
                if me is not None and me.cancelling():
                    # A connection's close swallowed our cancel (RpcClient.close
                    # awaits its reader): stop() must not wait for ever.
                    raise asyncio.CancelledError from e
                log.warning("%s failed: %s", self.METHOD, e)
                await asyncio.sleep(self.RETRY_MS / 1000)
