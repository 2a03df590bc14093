"""A broker's connections to the other brokers: one pooled
:class:`RpcClient` per broker, made on first use (its handshake within a
deadline) at the address the metadata gives, and dropped by whoever finds it
broken; the next use connects again."""

from __future__ import annotations

import asyncio
import ssl
import uuid
from collections.abc import Callable

from partlog.controller.cluster_meta import MetadataSource
from partlog.rpc.client import RPC_TIMEOUT_MS_DEFAULT, RpcClient, RpcConnectionError


class Peers:
    """``metadata()`` and ``cluster_id()`` read the broker's current ones."""

    def __init__(
        self,
        *,
        secret: bytes | None,
        client_ssl: ssl.SSLContext | None,
        metadata: Callable[[], MetadataSource],
        cluster_id: Callable[[], uuid.UUID | None],
    ) -> None:
        self._secret = secret
        self._ssl = client_ssl
        self._metadata = metadata
        self._cluster_id = cluster_id
        self._clients: dict[int, RpcClient] = {}
        self._client_locks: dict[int, asyncio.Lock] = {}

    async def client(self, broker_id: int, *, timeout_ms: int | None = None) -> RpcClient:
        """The pooled connection to ``broker_id``, made (handshake included)
        within ``timeout_ms`` (the RPC layer's default when None)."""
        client = self._clients.get(broker_id)
        if client is not None:
            return client
        lock = self._client_locks.setdefault(broker_id, asyncio.Lock())
        async with lock:
            client = self._clients.get(broker_id)
            if client is None:
                info = self._metadata().broker(broker_id)
                if info is None or not info.port:
                    raise RpcConnectionError(f"broker {broker_id}: address unknown")
                client = await RpcClient.connect(
                    info.host,
                    info.port,
                    secret=self._secret,
                    ssl=self._ssl,
                    cluster_id=self._cluster_id(),
                    timeout_ms=RPC_TIMEOUT_MS_DEFAULT if timeout_ms is None else timeout_ms,
                )
                self._clients[broker_id] = client
            return client

    async def drop(self, broker_id: int) -> None:
        client = self._clients.pop(broker_id, None)
        if client is not None:
            await client.close()

    async def close(self) -> None:
        """Close every connection (the broker stops)."""
        for c in self._clients.values():
            await c.close()


__all__ = ["Peers"]
