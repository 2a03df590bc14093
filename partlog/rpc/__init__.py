"""Inter-broker RPC: frames (sans-IO), schemas, method table, bodies, the asyncio server and client, secret, TLS."""

# The names below are imported on first use (partlog.lazy_exports).

from __future__ import annotations

from typing import TYPE_CHECKING

from partlog.lazy_exports import lazy_getattr

if TYPE_CHECKING:
    from partlog.rpc.client import RpcClient, RpcConnectionError, RpcRemoteError, RpcTimeoutError
    from partlog.rpc.frame import RpcErrorCode
    from partlog.rpc.server import RpcServer
    from partlog.rpc.wire import WireError

_EXPORTS = {
    "RpcClient": "partlog.rpc.client",
    "RpcConnectionError": "partlog.rpc.client",
    "RpcErrorCode": "partlog.rpc.frame",
    "RpcRemoteError": "partlog.rpc.client",
    "RpcServer": "partlog.rpc.server",
    "RpcTimeoutError": "partlog.rpc.client",
    "WireError": "partlog.rpc.wire",
}

__all__ = [
    "RpcClient",
    "RpcConnectionError",
    "RpcErrorCode",
    "RpcRemoteError",
    "RpcServer",
    "RpcTimeoutError",
    "WireError",
]

__getattr__ = lazy_getattr(__name__, _EXPORTS, globals())
