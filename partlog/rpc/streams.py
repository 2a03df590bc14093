"""What the RPC server and client both do with an asyncio stream: close it
without letting a peer that does not read hold the close up, and name its
peer in logs and errors."""

from __future__ import annotations

import asyncio

# Closing sends what is buffered (an error frame, a TLS close_notify); a peer
# that does not read must not hold up close() for longer than this.
CLOSE_FLUSH_MS = 1000


async def close_writer(writer: asyncio.StreamWriter) -> None:
    """Close, letting buffered bytes out for at most CLOSE_FLUSH_MS."""
    writer.close()
    try:
        async with asyncio.timeout(CLOSE_FLUSH_MS / 1000):
            await writer.wait_closed()
    except (TimeoutError, OSError):
        writer.transport.abort()


def peer_name(writer: asyncio.StreamWriter) -> str:
    addr = writer.get_extra_info("peername")
    return f"{addr[0]}:{addr[1]}" if isinstance(addr, tuple) else str(addr)


__all__ = ["CLOSE_FLUSH_MS", "close_writer", "peer_name"]
