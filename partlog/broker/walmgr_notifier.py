"""Best-effort notifications to walmgr of the WAL objects this broker
uploaded (the ``wal_uploaded`` RPC), so walmgr learns of new objects without
listing the bucket.

The broker never waits for walmgr and never fails because of it: uploads
are queued (the oldest dropped beyond ``WALMGR_NOTIFY_QUEUE_MAX``) and sent
in batches by one task; a failed batch is dropped and the task backs off.
walmgr's bucket scans find every object anyway.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import uuid
from collections import deque
from collections.abc import Callable

from partlog.kafka.records import TopicIdPartition
from partlog.produce.pipeline import Upload
from partlog.rpc.client import RpcClient, RpcConnectionError, RpcTimeoutError
from partlog.rpc.frame import RpcError
from partlog.rpc.wire import enc_wal_uploaded
from partlog.wal.key import WalKeyError, parse_wal_key

log = logging.getLogger(__name__)

# Notifications to walmgr waiting to be sent; beyond it the oldest are
# dropped (walmgr's scans find those objects anyway).
WALMGR_NOTIFY_QUEUE_MAX = 10_000
# Objects per notification RPC, and how long a failed one waits.
WALMGR_NOTIFY_BATCH_MAX = 1_000
WALMGR_NOTIFY_BACKOFF_MS = 1_000


class WalmgrNotifier:
    """Notifies walmgr at ``address`` ("HOST:PORT"; "" : nobody).
    ``cluster_id()`` and ``stopping()`` read the broker's."""

    def __init__(
        self,
        broker_id: int,
        address: str,
        *,
        secret: bytes | None,
        client_ssl: ssl.SSLContext | None,
        cluster_id: Callable[[], uuid.UUID | None],
        stopping: Callable[[], bool],
    ) -> None:
        self.broker_id = broker_id
        self.address = address
        self._secret = secret
        self._ssl = client_ssl
        self._cluster_id = cluster_id
        self._stopping = stopping
        self._queue: deque[tuple[str, int, int, int, tuple[TopicIdPartition, ...]]] = deque(
            maxlen=WALMGR_NOTIFY_QUEUE_MAX
        )
        self._wake = asyncio.Event()
        self.sent = 0
        self.dropped = 0

    def notify(self, up: Upload) -> None:
        """``up`` was uploaded: queue its notification."""
        if not self.address:
            return
        if len(self._queue) == self._queue.maxlen:
            self.dropped += 1  # the oldest goes; a scan finds it
        try:
            created_ms = parse_wal_key(up.key).created_ms
        except WalKeyError:
            return
        self._queue.append((up.key, len(up.data), created_ms, self.broker_id, up.partitions))
        self._wake.set()

    async def run(self) -> None:
        """Send queued upload notifications to walmgr in batches; on failure
        drop the batch and back off (walmgr's bucket scans are the safety net)."""
        client: RpcClient | None = None
        host, _, port = self.address.rpartition(":")
        while not self._stopping():
            await self._wake.wait()
            self._wake.clear()
            while self._queue:
                n = min(len(self._queue), WALMGR_NOTIFY_BATCH_MAX)
                batch = [self._queue.popleft() for _ in range(n)]
                try:
                    if client is None or not client.connected:
                        client = await RpcClient.connect(
                            host,
                            int(port),
                            secret=self._secret,
                            ssl=self._ssl,
                            cluster_id=self._cluster_id(),
                        )
                    await client.call("wal_uploaded", enc_wal_uploaded(batch), timeout_ms=10_000)
                    self.sent += n
                except (RpcError, RpcConnectionError, RpcTimeoutError, OSError, ValueError) as e:
                    self.dropped += n
                    log.debug("walmgr notification failed (%d objects dropped): %s", n, e)
                    if client is not None:
                        await client.close()
                        client = None
                    await asyncio.sleep(WALMGR_NOTIFY_BACKOFF_MS / 1000)
        if client is not None:
            await client.close()


__all__ = ["WALMGR_NOTIFY_BATCH_MAX", "WALMGR_NOTIFY_QUEUE_MAX", "WalmgrNotifier"]
