"""Inter-broker RPC: frames (sans-IO), schemas, method table, bodies, the asyncio transport, TLS."""

# The names below are imported on first use (partlog.lazy_exports).

from __future__ import annotations

from typing import TYPE_CHECKING

from partlog.lazy_exports import lazy_getattr

if TYPE_CHECKING:
    from partlog.rpc.frame import RpcErrorCode
    from partlog.rpc.transport import RpcClient, RpcConnectionError, RpcRemoteError, RpcServer, RpcTimeoutError
    from partlog.rpc.wire import WireError

_EXPORTS = {
    "RpcClient": "partlog.rpc.transport",
    "RpcConnectionError": "partlog.rpc.transport",
    "RpcErrorCode": "partlog.rpc.frame",
    "RpcRemoteError": "partlog.rpc.transport",
    "RpcServer": "partlog.rpc.transport",
    "RpcTimeoutError": "partlog.rpc.transport",
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
