"""Protocol versions between RPC peers (docs/design/upgrades.md): the
negotiated range, and a version 1 peer (partlog up to e739335) played by
hand on both sides (the bounds on unknown fields: tests/unit/test_rpc_unknown_fields.py).

The real previous release runs in tests/integration/test_rolling_upgrade.py."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest

from partlog.rpc.client import RpcClient, RpcHandshakeError
from partlog.rpc.frame import (
    CHALLENGE_NONCE_BYTES,
    RPC_VERSION,
    RPC_VERSION_MIN,
    Frame,
    FrameDecoder,
    Kind,
    RpcError,
    RpcErrorCode,
    VersionRange,
    encode_frame,
    negotiate,
)
from partlog.rpc.handlers import peer_version
from partlog.rpc.schema import (
    DecodeLimits,
)
from partlog.rpc.server import RpcServer

# Version 1's hello, as e739335 decodes it: its HELLO_SCHEMA's limits (3 keys
# of at most 7 bytes, 7 objects).  A hello with any other key breaks them.
V1_HELLO_LIMITS = DecodeLimits(0, 3, 7, 64, 7)


def test_negotiate_picks_the_highest_common_version_and_names_both_ranges() -> None:
    assert negotiate(VersionRange(1, 1), "peer", VersionRange(1, 2)) == 1
    assert negotiate(VersionRange(1, 5), "peer", VersionRange(1, 2)) == 2
    assert negotiate(VersionRange(2, 3), "peer", VersionRange(1, 2)) == 2
    with pytest.raises(RpcError, match="peer speaks protocol versions 3-4, this side speaks versions 1-2") as e:
        negotiate(VersionRange(3, 4), "peer", VersionRange(1, 2))
    assert e.value.code == RpcErrorCode.VERSION_MISMATCH
    with pytest.raises(RpcError, match="server speaks protocol version 1, this side speaks version 2"):
        negotiate(VersionRange(1, 1), "server", VersionRange(2, 2))


async def _version_of_handler(body: Any) -> Any:
    return {"version": peer_version(), "body": body}


def test_two_current_peers_run_at_the_highest_version() -> None:
    async def main() -> None:
        server = RpcServer({"v": _version_of_handler})
        await server.start()
        try:
            client = await RpcClient.connect("127.0.0.1", server.port)
            assert client.version == RPC_VERSION
            assert await client.call("v", 1) == {"version": RPC_VERSION, "body": 1}
            await client.close()
        finally:
            await server.close()

    asyncio.run(main())
    # Outside a handler: an in-process caller, this version.
    assert peer_version() == RPC_VERSION


class _Peer:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer, self.decoder = reader, writer, FrameDecoder()
        self.frames: list[Frame] = []

    async def next_frame(self) -> Frame:
        while not self.frames:
            data = await asyncio.wait_for(self.reader.read(65536), 5)
            if not data:
                raise EOFError
            self.frames.extend(self.decoder.feed(data))
        return self.frames.pop(0)


def test_a_version_1_client_is_served_at_version_1() -> None:
    """e739335's client: envelope 1 everywhere, a hello of version 1 alone;
    it checks the challenge's and the answer's version are 1."""

    async def main() -> None:
        server = RpcServer({"v": _version_of_handler})
        await server.start()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            old = _Peer(reader, writer)
            challenge = await old.next_frame()
            assert challenge.version == 1 and challenge.body["version"] == 1
            nonce = challenge.body["nonce"]
            writer.write(encode_frame(Kind.REQUEST, 0, "hello", {"version": 1, "auth": b""}, version=1))
            answer = await old.next_frame()
            assert (answer.version, answer.kind, answer.body) == (1, Kind.RESPONSE, {"version": 1})
            assert len(nonce) == CHALLENGE_NONCE_BYTES
            writer.write(encode_frame(Kind.REQUEST, 5, "v", "x", version=1))
            got = await old.next_frame()
            assert (got.version, got.request_id, got.body) == (1, 5, {"version": 1, "body": "x"})
            # A frame of another version on this connection ends it.
            writer.write(encode_frame(Kind.REQUEST, 6, "v", "x", version=2))
            err = await old.next_frame()
            assert err.version == 1 and err.body[0] == RpcErrorCode.VERSION_MISMATCH
            writer.close()
        finally:
            await server.close()

    asyncio.run(main())


def test_a_version_1_server_gets_version_1s_hello_and_calls() -> None:
    """e739335's server: a challenge without a range, a hello decoded under
    version 1's limits and checked for version 1, every envelope 1."""
    seen: list[Any] = []

    async def old_server(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = _Peer(reader, writer)
        nonce = os.urandom(CHALLENGE_NONCE_BYTES)
        writer.write(encode_frame(Kind.REQUEST, 0, "challenge", {"version": 1, "nonce": nonce}, version=1))
        peer.decoder.limits_for = lambda kind, method: V1_HELLO_LIMITS
        hello = await peer.next_frame()
        seen.append(hello)
        writer.write(encode_frame(Kind.RESPONSE, 0, "hello", {"version": 1}, version=1))
        peer.decoder.limits_for = None
        call = await peer.next_frame()
        seen.append(call)
        writer.write(encode_frame(Kind.RESPONSE, call.request_id, call.method, "ok", version=1))
        await reader.read()
        writer.close()

    async def main() -> None:
        server = await asyncio.start_server(old_server, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        client = await RpcClient.connect("127.0.0.1", port)
        assert client.version == 1
        assert await client.call("m", {"a": 1}) == "ok"
        await client.close()
        server.close()

    asyncio.run(main())
    hello, call = seen
    assert hello.version == 1 and set(hello.body) == {"version", "auth"} and hello.body["version"] == 1
    assert call.version == 1


def test_a_server_whose_range_misses_ours_is_refused_naming_both() -> None:
    low = RPC_VERSION + 1

    async def future_server(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        body = {"version": low, "versions": [low, low + 1], "nonce": os.urandom(CHALLENGE_NONCE_BYTES)}
        writer.write(encode_frame(Kind.REQUEST, 0, "challenge", body, version=low))
        await reader.read()
        writer.close()

    async def main() -> None:
        server = await asyncio.start_server(future_server, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        with pytest.raises(RpcHandshakeError) as e:
            await RpcClient.connect("127.0.0.1", port)
        assert e.value.code == RpcErrorCode.VERSION_MISMATCH
        message = str(e.value)
        assert f"versions {low}-{low + 1}" in message and f"versions {RPC_VERSION_MIN}-{RPC_VERSION}" in message
        server.close()

    asyncio.run(main())
