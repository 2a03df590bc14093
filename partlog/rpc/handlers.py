"""What an RPC handler sees besides its body: the :data:`Handler` type and
:func:`peer_version`, the protocol version of the connection whose request
it serves (docs/design/upgrades.md).

The server (``partlog.rpc.server``) sets the version around each handler
call; tasks a handler starts inherit it (``contextvars``).
"""

from __future__ import annotations

import contextvars
from collections.abc import Awaitable, Callable
from typing import Any

from partlog.rpc.frame import RPC_VERSION

__all__ = ["PEER_VERSION", "Handler", "peer_version"]

Handler = Callable[[Any], Awaitable[Any]]

# Set by the server before each handler runs; the default is an in-process
# caller's (this version).
PEER_VERSION: contextvars.ContextVar[int] = contextvars.ContextVar("rpc_peer_version", default=RPC_VERSION)


def peer_version() -> int:
    """The protocol version the connection of the request being handled
    runs at: a handler sends a field in its answer only if this version
    knows it.  Outside a handler, ``RPC_VERSION``: an in-process caller
    speaks this version."""
    return PEER_VERSION.get()
