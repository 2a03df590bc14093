"""The client's connection pool (issue 13, item 10).

Regression: ``Connections._get`` let concurrent first calls for one broker
each connect; the last overwrote the others in the pool, which nobody
closed ("Task was destroyed but it is pending ... RpcClient._read_loop" at
the end of ``partlog cluster``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from partlog.client.connections import Connections
from partlog.rpc.server import RpcServer


async def _echo(body: Any) -> Any:
    return body


@pytest.mark.timeout(30)
def test_concurrent_first_calls_share_one_connection() -> None:
    async def main() -> None:
        server = RpcServer({"echo": _echo})
        await server.start()
        try:
            conns = Connections(("127.0.0.1", server.port))
            addr = ("127.0.0.1", server.port)
            clients = await asyncio.gather(*(conns._get(addr, 1) for _ in range(20)))
            assert len({id(c) for c in clients}) == 1
            assert await clients[0].call("echo", 1) == 1
            assert server.metrics.connections_open == 1
            await conns.close()
            for _ in range(100):
                if server.metrics.connections_open == 0:
                    break
                await asyncio.sleep(0.01)
            assert server.metrics.connections_open == 0 and not clients[0].connected
        finally:
            await server.close()

    asyncio.run(main())


@pytest.mark.timeout(30)
def test_a_hostile_metadata_answer_fails_cleanly() -> None:
    """A broker's answer is an input too: a malformed one is a WireError
    naming the field (the client tries the next address), not a KeyError
    or a crash."""
    from partlog.rpc.wire import WireError

    async def bad_metadata(body: Any) -> Any:
        return {"brokers": [[1, "az1", "127.0.0.1", 1 << 40]], "topics": []}

    async def main() -> None:
        server = RpcServer({"metadata": bad_metadata})
        await server.start()
        try:
            conns = Connections(("127.0.0.1", server.port))
            with pytest.raises(WireError, match=r"metadata answer\.brokers\[0\]\.port"):
                await conns.load_metadata(None)
            await conns.close()
        finally:
            await server.close()

    asyncio.run(main())
