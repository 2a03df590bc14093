"""What the client library's producer and consumer share: :class:`Connections`,
RPC clients to the brokers by id, made on first use, and the cluster view
(:class:`ClusterView`) the ``metadata`` RPC answers.

Metadata comes from the first bootstrap address that answers, then from any
broker the view knows.  Answers are checked against the method's declared
shape (``partlog.rpc.methods.RESPONSE_SCHEMAS``) before they are used.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from ssl import SSLContext
from typing import Any

from partlog.kafka.errors import Errors
from partlog.kafka.records import TopicIdPartition
from partlog.rpc.client import RpcClient, RpcConnectionError, RpcRemoteError, RpcTimeoutError
from partlog.rpc.methods import RESPONSE_SCHEMAS
from partlog.rpc.wire import WireError

# Kafka's request.timeout.ms default: a metadata call, a produce request and
# a fetch (on top of its max wait).
REQUEST_TIMEOUT_MS_DEFAULT = 30_000


@dataclass(frozen=True, slots=True)
class PartitionMeta:
    leader: int
    target: int


@dataclass(slots=True)
class ClusterView:
    brokers: dict[int, tuple[str, str, int]]  # id -> (az, host, port)
    topics: dict[str, tuple[Any, dict[int, PartitionMeta]]]  # name -> (topic uuid, partitions)

    def tp(self, topic: str, partition: int) -> TopicIdPartition:
        tid, parts = self.topics[topic]
        if partition not in parts:
            raise KeyError(f"topic {topic} has no partition {partition}")
        return TopicIdPartition(tid, partition)

    def partitions(self, topic: str) -> list[TopicIdPartition]:
        tid, parts = self.topics[topic]
        return [TopicIdPartition(tid, p) for p in sorted(parts)]


def bootstrap_addresses(bootstrap: tuple[str, int] | Sequence[tuple[str, int]]) -> list[tuple[str, int]]:
    if len(bootstrap) == 2 and isinstance(bootstrap[0], str) and isinstance(bootstrap[1], int):
        return [(bootstrap[0], bootstrap[1])]
    return [(str(a[0]), int(a[1])) for a in bootstrap]  # type: ignore[index]


def checked_answer(method: str, body: Any) -> Any:
    """A broker's answer, checked against its declared shape (WireError)."""
    RESPONSE_SCHEMAS[method].check(body, f"{method} answer")
    return body


class Connections:
    """RPC clients to brokers, by id, made on first use."""

    def __init__(
        self,
        bootstrap: tuple[str, int] | Sequence[tuple[str, int]],
        *,
        secret: bytes | None = None,
        ssl: SSLContext | None = None,
    ) -> None:
        # One address or several (Kafka's bootstrap.servers): metadata comes
        # from the first that answers, then from any broker the view knows.
        self.bootstraps: list[tuple[str, int]] = bootstrap_addresses(bootstrap)
        self.bootstrap = self.bootstraps[0]
        self.secret = secret
        self.ssl = ssl
        self._clients: dict[int | tuple[str, int], RpcClient] = {}
        self._connecting: dict[int | tuple[str, int], asyncio.Lock] = {}
        self.view: ClusterView | None = None

    async def load_metadata(self, az: str | None) -> ClusterView:
        """Ask the bootstrap brokers, then the known ones, until one answers."""
        addrs = list(self.bootstraps)
        if self.view is not None:
            addrs += [(host, port) for _, host, port in self.view.brokers.values() if (host, port) not in addrs]
        error: Exception | None = None
        for addr in addrs:
            try:
                return await self._load_metadata_from(addr, az)
            except (RpcConnectionError, RpcTimeoutError, RpcRemoteError, WireError, OSError) as e:
                error = e
                client = self._clients.pop(addr, None)
                if client is not None:
                    await client.close()
        assert error is not None
        raise error

    async def _load_metadata_from(self, addr: tuple[str, int], az: str | None) -> ClusterView:
        import uuid

        client = await self._get(addr)
        body = checked_answer(
            "metadata", await client.call("metadata", {"az": az}, timeout_ms=REQUEST_TIMEOUT_MS_DEFAULT)
        )
        brokers = {b[0]: (b[1], b[2], b[3]) for b in body["brokers"]}
        topics = {}
        for name, tid, parts in body["topics"]:
            topics[name] = (uuid.UUID(bytes=tid), {p: PartitionMeta(leader, target) for p, leader, target in parts})
        self.view = ClusterView(brokers, topics)
        return self.view

    async def broker(self, broker_id: int) -> RpcClient:
        assert self.view is not None
        _, host, port = self.view.brokers[broker_id]
        return await self._get((host, port), broker_id)

    async def _get(self, addr: tuple[str, int], broker_id: int | None = None) -> RpcClient:
        key: int | tuple[str, int] = broker_id if broker_id is not None else addr
        client = self._clients.get(key)
        if client is not None:
            return client
        # One connect per key at a time: two concurrent first calls used to
        # both connect and the second overwrote the first in the pool,
        # leaving a connection (and its read task) nobody closed.
        lock = self._connecting.setdefault(key, asyncio.Lock())
        async with lock:
            client = self._clients.get(key)
            if client is None:
                client = await RpcClient.connect(addr[0], addr[1], secret=self.secret, ssl=self.ssl)
                self._clients[key] = client
            return client

    async def drop(self, broker_id: int) -> None:
        client = self._clients.pop(broker_id, None)
        if client is not None:
            await client.close()

    async def close(self) -> None:
        clients = list(self._clients.values())
        self._clients.clear()
        for c in clients:
            await c.close()


# Answers that mean the client's view of leaders is out of date.
STALE_METADATA = frozenset(
    {
        Errors.NOT_LEADER_OR_FOLLOWER,
        Errors.LEADER_NOT_AVAILABLE,
        Errors.FENCED_LEADER_EPOCH,
        Errors.UNKNOWN_LEADER_EPOCH,
        Errors.NETWORK_EXCEPTION,
        Errors.REQUEST_TIMED_OUT,
    }
)


__all__ = [
    "REQUEST_TIMEOUT_MS_DEFAULT",
    "STALE_METADATA",
    "ClusterView",
    "Connections",
    "PartitionMeta",
    "bootstrap_addresses",
    "checked_answer",
]
