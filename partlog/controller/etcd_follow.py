"""Following one prefix of a cluster's etcd keys: a full read, then a watch
from the revision after it, a rebuild of the followed value once per burst
of events, and capped backoff on any error (every reconnection and a
compacted revision read the prefix again).  The ACLs
(:class:`partlog.controller.etcd_acls.EtcdAcls`) and the dynamic configs
(:class:`partlog.controller.etcd_configs.EtcdConfigs`) follow theirs so.

A subclass reads the prefix (:meth:`EtcdFollower._reload`), applies one
event (:meth:`EtcdFollower._apply_event`) and rebuilds what readers see
(:meth:`EtcdFollower._rebuild`); values it refuses go to :meth:`_refuse`
(counted, and logged at most ``REFUSALS_LOGGED_MAX`` per read or burst, so
a hostile writer's thousand keys cost a count, not a thousand lines).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import aetcd.exceptions

from partlog.controller.etcd_connection import ETCD_ERRORS, EtcdConnection
from partlog.controller.etcd_meta import (
    REQUEST_TIMEOUT_MS_DEFAULT,
    RETRY_BACKOFF_MAX_MS_DEFAULT,
    RETRY_BACKOFF_MS_DEFAULT,
)
from partlog.controller.etcd_url import EtcdTarget

__all__ = ["REFUSALS_LOGGED_MAX", "EtcdFollower"]

log = logging.getLogger(__name__)

# Log lines for refused values per read or burst.
REFUSALS_LOGGED_MAX = 10


class EtcdFollower:
    """``await start()`` follows the prefix ``root``; ``await stop()`` ends
    that and closes the client (this object's own, not the metadata's: its
    watch ends with :meth:`stop`, whichever of the two stops first)."""

    WHAT = ""  # what is followed, for the log
    UNTIL_LOADED = "keeping the defaults until etcd answers"  # what holds before the first read

    def __init__(
        self,
        target: EtcdTarget,
        root: bytes,
        *,
        request_timeout_ms: int = REQUEST_TIMEOUT_MS_DEFAULT,
        retry_backoff_ms: int = RETRY_BACKOFF_MS_DEFAULT,
        retry_backoff_max_ms: int = RETRY_BACKOFF_MAX_MS_DEFAULT,
    ) -> None:
        assert 0 < retry_backoff_ms <= retry_backoff_max_ms, (retry_backoff_ms, retry_backoff_max_ms)
        self.conn = EtcdConnection(target, request_timeout_ms)
        self.root = root
        self.retry_backoff_ms = retry_backoff_ms
        self.retry_backoff_max_ms = retry_backoff_max_ms
        # Values refused; etcd calls that failed.
        self.refused = 0
        self.failures = 0
        # The revision what is held is as of, and the one readers see.
        self.revision = 0
        self._published = 0
        self._publish_pending = False
        self._loaded = asyncio.Event()
        self._changed = asyncio.Event()
        self._lock = asyncio.Lock()  # one change at a time
        self._task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------ subclasses

    async def _reload(self) -> None:
        """Read the whole prefix into what is held, and set ``revision``."""
        raise NotImplementedError

    def _apply_event(self, kind: Any, key: bytes, value: bytes) -> None:
        """Apply one watch event to what is held."""
        raise NotImplementedError

    def _rebuild(self) -> None:
        """Make what is held, as of ``revision``, what readers see."""
        raise NotImplementedError

    # ---------------------------------------------------------------- shared

    @property
    def loaded(self) -> bool:
        """etcd has answered once."""
        return self._loaded.is_set()

    async def start(self) -> None:
        """Follow; returns after the first read, or after the request
        timeout with nothing read yet (it keeps retrying)."""
        self._task = asyncio.create_task(self._follow())
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.conn.request_timeout_ms / 1000):
                await self._loaded.wait()
        if not self.loaded:
            log.warning("etcd %s: no %s read yet: %s", self.conn.target.url(), self.WHAT, self.UNTIL_LOADED)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self.conn.close()

    def _refuse(self, refusals: list[str], count: int | None = None) -> None:
        """Count ``count`` refusals (``len(refusals)`` when None), logging
        at most ``REFUSALS_LOGGED_MAX`` of ``refusals``."""
        count = len(refusals) if count is None else count
        self.refused += count
        for why in refusals[:REFUSALS_LOGGED_MAX]:
            log.error("etcd %s refused: %s", self.WHAT, why)
        if count > REFUSALS_LOGGED_MAX:
            log.error("etcd %s refused: %d more", self.WHAT, count - REFUSALS_LOGGED_MAX)

    def _on_event(self, kind: Any, key: bytes, value: bytes, revision: int) -> None:
        self._apply_event(kind, key, value)
        self.revision = max(self.revision, revision)
        # One rebuild per burst (a transaction's events arrive together).
        if not self._publish_pending:
            self._publish_pending = True
            asyncio.get_running_loop().call_soon(self._publish)

    def _publish(self) -> None:
        self._publish_pending = False
        if self._published == self.revision and self.loaded:
            return
        self._rebuild()
        self._published = self.revision
        self._loaded.set()
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def _follow(self) -> None:
        attempt = 0
        url = self.conn.target.url()
        while True:
            try:
                await self._reload()
                self._publish()
                c = await self.conn.client()
                watch = await c.watch_prefix(self.root, start_revision=self.revision + 1)
                try:
                    me = asyncio.current_task()
                    if me is not None and me.cancelling():
                        # Python 3.11's asyncio.wait_for (in aetcd's watch
                        # creation) can swallow a cancel: stop() would wait for ever.
                        raise asyncio.CancelledError
                    async for ev in watch:
                        attempt = 0
                        self._on_event(ev.kind, ev.kv.key, ev.kv.value, ev.kv.mod_revision)
                finally:
                    with contextlib.suppress(*ETCD_ERRORS):
                        await watch.cancel()
            except aetcd.exceptions.RevisionCompactedError as e:
                log.warning("etcd %s: %s watch revision compacted (%s): reading again", url, self.WHAT, e)
            except Exception as e:  # etcd's errors, and any other: following must not end
                self.failures += 1
                log.warning("etcd %s: %s: %r (retrying; keeping the last read)", url, self.WHAT, e)
                await asyncio.sleep(min(self.retry_backoff_ms << min(attempt, 30), self.retry_backoff_max_ms) / 1000)
                attempt += 1

    async def _until_seen(self, revision: int) -> None:
        """Wait until readers see ``revision`` (bounded: a lagging watch
        catches up later; the change is made either way)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.conn.request_timeout_ms / 1000):
                while self._published < revision:
                    await self._changed.wait()
