"""The etcd client the parts of :class:`~partlog.controller.etcd_meta.EtcdMetadata`
share: one aetcd client per target, made on first use over a gRPC channel
that names every member (so it fails over when one dies), closed by
:meth:`EtcdConnection.close`.  Also what every part needs to read etcd's
answers: :data:`ETCD_ERRORS` (a call that did not reach etcd) and
:func:`put_revision`.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Sequence
from typing import Any

import aetcd.exceptions
import grpc

from partlog.controller.etcd_channel import EtcdClient, new_etcd_client
from partlog.controller.etcd_url import EtcdTarget

__all__ = ["ETCD_ERRORS", "EtcdConnection", "put_revision"]

# The whole prefix is read in one answer (the view is bounded by
# PARTITIONS_PER_CLUSTER_MAX partitions, ~40 bytes each): gRPC's 4 MiB default is too small.
GRPC_MESSAGE_BYTES_MAX = 256 * 1024 * 1024
# gRPC reconnect backoff bounds (see _new_client).
GRPC_RECONNECT_BACKOFF_MS_MIN = 100
GRPC_RECONNECT_BACKOFF_MS_MAX = 500

# What a call that did not reach etcd (or got no usable answer) raises.
ETCD_ERRORS: tuple[type[BaseException], ...] = (aetcd.exceptions.ClientError, grpc.RpcError, OSError, TimeoutError)


def put_revision(resp: Sequence[Any], i: int = 0) -> int:
    """The revision a transaction's ``i``-th put was written at."""
    return int(resp[i].response_put.header.revision)


class EtcdConnection:
    """The client for ``target``, made at the first call (and again after
    :meth:`close`); calls time out after ``request_timeout_ms``."""

    def __init__(self, target: EtcdTarget, request_timeout_ms: int) -> None:
        self.target = target
        self.request_timeout_ms = request_timeout_ms
        self._client: Any = None
        self._client_lock = asyncio.Lock()

    async def client(self) -> Any:
        if self._client is None:
            async with self._client_lock:
                if self._client is None:
                    target = await _grpc_target(self.target.endpoints)
                    self._client = _new_client(self.target, target, self.request_timeout_ms / 1000)
        return self._client

    async def txn(self, compare: list[Any], success: list[Any], failure: list[Any] | None = None) -> tuple[bool, Any]:
        """One transaction: whether ``compare`` held, and etcd's answer."""
        c = await self.client()
        ok, resp = await c.transaction(compare=compare, success=success, failure=failure or [])
        return bool(ok), resp

    async def close(self, *, revoke_lease: int = 0) -> None:
        """Close the client, revoking ``revoke_lease`` first (0: none);
        etcd being unreachable is not an error here."""
        client = self._client
        if client is not None:
            if revoke_lease:
                with contextlib.suppress(*ETCD_ERRORS):
                    await client.revoke_lease(revoke_lease)
            with contextlib.suppress(*ETCD_ERRORS):
                await client.close()
            self._client = None


async def _grpc_target(endpoints: Sequence[tuple[str, int]]) -> str:
    """One gRPC target naming every member's address, so the channel fails
    over (round robin) when a member dies.  Names are resolved now (and
    again at each reconnect)."""
    loop = asyncio.get_running_loop()
    v4: list[str] = []
    v6: list[str] = []
    for host, port in endpoints:
        for family, *_, addr in await loop.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM):
            if family == socket.AF_INET:
                v4.append(f"{addr[0]}:{port}")
            elif family == socket.AF_INET6:
                v6.append(f"[{addr[0]}]:{port}")
    if v4:
        return "ipv4:" + ",".join(dict.fromkeys(v4))
    if v6:
        return "ipv6:" + ",".join(dict.fromkeys(v6))
    raise OSError(f"no address for {endpoints}")


def _new_client(target: EtcdTarget, grpc_target: str, timeout_s: float) -> EtcdClient:
    """aetcd's client on a multi-address gRPC target (aetcd takes one host
    and port; the target is built before), with TLS and authentication as
    ``target`` says (see etcd_channel)."""
    return new_etcd_client(
        target,
        grpc_target,
        timeout_s,
        {
            "grpc.lb_policy_name": "round_robin",
            "grpc.max_receive_message_length": GRPC_MESSAGE_BYTES_MAX,
            # A member gone without a FIN is noticed within seconds.
            "grpc.keepalive_time_ms": 5_000,
            "grpc.keepalive_timeout_ms": 5_000,
            # gRPC's reconnect backoff grows to 2 minutes by default: after
            # an outage the channel would come back after the leases (a
            # session timeout) expired.  Capped well inside any session.
            "grpc.initial_reconnect_backoff_ms": GRPC_RECONNECT_BACKOFF_MS_MIN,
            "grpc.min_reconnect_backoff_ms": GRPC_RECONNECT_BACKOFF_MS_MIN,
            "grpc.max_reconnect_backoff_ms": GRPC_RECONNECT_BACKOFF_MS_MAX,
        },
    )
