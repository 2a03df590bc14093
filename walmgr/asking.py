"""walmgr's questions to brokers, over partlog's RPC: the leader check
(``referenced_files``) and the sweep (``keys_referenced``), one client per
broker kept between rounds.

Every failure is an answer of its own, a string saying why (timed out,
unreachable, a refused or broken answer): the decision core keeps what it
could not hear about, never deletes on it.  A broker of another cluster
raises ClusterMismatchError (a misconfigured walmgr stops instead).
"""

from __future__ import annotations

import asyncio
import ssl
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from partlog.controller.cluster_meta import ClusterMismatchError, MetadataSource
from partlog.rpc.client import RpcClient, RpcConnectionError, RpcHandshakeError, RpcRemoteError, RpcTimeoutError
from partlog.rpc.frame import RpcErrorCode
from partlog.rpc.wire import (
    WireError,
    dec_keys_referenced_answer,
    dec_verdicts,
    enc_keys_referenced,
    enc_reference_checks,
)
from partlog.wal.objectstore import ObjectStoreError
from walmgr.decide import Check, split_checks

_T = TypeVar("_T")


class BrokerAsker:
    """``metadata()`` and ``cluster_id()`` are read at each call (the daemon
    sets them at start); every call gives up after ``timeout_ms``."""

    def __init__(
        self,
        metadata: Callable[[], MetadataSource | None],
        cluster_id: Callable[[], uuid.UUID | None],
        *,
        timeout_ms: int,
        secret: bytes | None,
        client_ssl: ssl.SSLContext | None,
    ) -> None:
        self._metadata = metadata
        self._cluster_id = cluster_id
        self.timeout_ms = timeout_ms
        self._secret = secret
        self._client_ssl = client_ssl
        self._clients: dict[int, RpcClient] = {}

    async def referenced_files(self, broker_id: int, checks: Sequence[Check]) -> list[int] | str:
        """One broker's verdicts, aligned with ``checks``, or why there are none."""

        async def call(client: RpcClient) -> list[int]:
            out: list[int] = []
            for part in split_checks(checks):
                body = await client.call(
                    "referenced_files",
                    enc_reference_checks([(c.key, c.topic_id_partition, c.leader_epoch, c.asked) for c in part]),
                    timeout_ms=self.timeout_ms,
                )
                out += dec_verdicts(body, len(part))
            return out

        return await self._rpc(broker_id, call)

    async def keys_referenced(self, broker_id: int, keys: Sequence[str]) -> set[str] | str:
        """The keys of ``keys`` that broker's store references, or why it did not say."""

        async def call(client: RpcClient) -> set[str]:
            found: set[str] = set()
            for part in split_checks(keys):
                body = await client.call("keys_referenced", enc_keys_referenced(part), timeout_ms=self.timeout_ms)
                found |= {part[i] for i in dec_keys_referenced_answer(body, len(part))}
            return found

        return await self._rpc(broker_id, call)

    async def close(self) -> None:
        for c in self._clients.values():
            await c.close()
        self._clients.clear()

    async def _rpc(self, broker_id: int, call: Callable[[RpcClient], Awaitable[_T]]) -> _T | str:
        try:
            async with asyncio.timeout(self.timeout_ms / 1000):
                client = await self._client(broker_id)
                return await call(client)
        except TimeoutError:
            return "timed out"
        except RpcHandshakeError as e:
            if e.code == RpcErrorCode.CLUSTER_MISMATCH:
                metadata = self._metadata()
                info = metadata.broker(broker_id) if metadata is not None else None
                where = f" at {info.host}:{info.port}" if info is not None else ""
                raise ClusterMismatchError(f"broker {broker_id}{where}: {e.message}") from e
            return f"unreachable: {e}"
        except (RpcConnectionError, OSError) as e:
            await self._drop_client(broker_id)
            return f"unreachable: {e}"
        except (RpcTimeoutError, RpcRemoteError, WireError, ObjectStoreError, ValueError) as e:
            return f"{type(e).__name__}: {e}"

    async def _client(self, broker_id: int) -> RpcClient:
        c = self._clients.get(broker_id)
        if c is not None and c.connected:
            return c
        metadata = self._metadata()
        info = metadata.broker(broker_id) if metadata is not None else None
        if info is None or not info.port:
            raise RpcConnectionError(f"broker {broker_id}: address unknown")
        c = await RpcClient.connect(
            info.host, info.port, secret=self._secret, ssl=self._client_ssl, cluster_id=self._cluster_id()
        )
        if c.server_cluster_id is None:
            # It cannot show it belongs to our cluster: its answers are no
            # evidence (a doubt for every check sent to it, never a deletion).
            await c.close()
            raise RpcConnectionError(f"broker {broker_id} at {info.host}:{info.port} names no cluster id")
        self._clients[broker_id] = c
        return c

    async def _drop_client(self, broker_id: int) -> None:
        c = self._clients.pop(broker_id, None)
        if c is not None:
            await c.close()


__all__ = ["BrokerAsker"]
