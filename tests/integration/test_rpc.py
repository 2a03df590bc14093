"""Inter-broker RPC: the asyncio server and client over real loopback TCP
(the sans-IO framing is in tests/unit/test_rpc_frame.py).

pytest-asyncio is not a dependency: each test runs its own ``asyncio.run``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import signal
import ssl
import struct
import subprocess
import sys
import textwrap
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from partlog.rpc.client import RpcClient, RpcConnectionError, RpcHandshakeError, RpcRemoteError, RpcTimeoutError
from partlog.rpc.frame import (
    CHALLENGE_NONCE_BYTES,
    RPC_VERSION,
    RPC_VERSION_MIN,
    Frame,
    FrameDecoder,
    FrameTooLargeError,
    Kind,
    RpcError,
    RpcErrorCode,
    auth_proof,
    encode_frame,
)
from partlog.rpc.server import RpcServer
from tests.tls_certs import client_context, server_context
from tests.unit.test_rpc_frame import framed

SECRET = b"cluster secret for tests"

# ----------------------------------------------------------------- helpers


async def echo(body: Any) -> Any:
    return body


def serve(
    handlers: dict[str, Callable[[Any], Awaitable[Any]]] | None = None, **kwargs: Any
) -> Callable[[Callable[[RpcServer], Awaitable[None]]], None]:
    """Run ``test(server)`` against a started server, closing it afterwards."""

    def run(test: Callable[[RpcServer], Awaitable[None]]) -> None:
        async def main() -> None:
            server = RpcServer(handlers if handlers is not None else {"echo": echo}, **kwargs)
            await server.start()
            try:
                await test(server)
            finally:
                await server.close()

        asyncio.run(main())

    return run


class Raw:
    """A hand-driven connection, for playing a misbehaving peer."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.decoder = FrameDecoder()
        self.frames: list[Frame] = []

    @classmethod
    async def connect(cls, port: int) -> tuple[Raw, bytes]:
        """Connect and read the challenge; return the connection and the nonce."""
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        raw = cls(reader, writer)
        challenge = await raw.next_frame()
        assert challenge.method == "challenge" and challenge.kind == Kind.REQUEST
        return raw, challenge.body["nonce"]

    async def hello(self, nonce: bytes, secret: bytes | None = None) -> None:
        self.send(encode_frame(Kind.REQUEST, 0, "hello", {"version": RPC_VERSION, "auth": auth_proof(secret, nonce)}))
        answer = await self.next_frame()
        assert answer.kind == Kind.RESPONSE, answer

    def send(self, data: bytes) -> None:
        self.writer.write(data)

    async def next_frame(self) -> Frame:
        while not self.frames:
            data = await asyncio.wait_for(self.reader.read(65536), 5)
            if not data:
                raise EOFError
            self.frames.extend(self.decoder.feed(data))
        return self.frames.pop(0)

    async def expect_error_then_eof(self, code: RpcErrorCode) -> str:
        """The server answers an ERROR with ``code`` and closes; return its message."""
        frame = await self.next_frame()
        assert frame.kind == Kind.ERROR, frame
        assert frame.body[0] == code, frame.body
        assert await asyncio.wait_for(self.reader.read(65536), 5) == b""
        self.writer.close()
        return str(frame.body[1])


# ----------------------------------------------------------- server, client


@pytest.mark.timeout(30)
def test_call_round_trip_and_metrics() -> None:
    async def test(server: RpcServer) -> None:
        client = await RpcClient.connect("127.0.0.1", server.port)
        body = {"k": [1, -(1 << 63), (1 << 64) - 1, b"\x00\xff", "text", None, True, 1.5]}
        assert await client.call("echo", body) == body
        # In: challenge, hello's answer, the call's answer.  Out: hello, the call.
        assert client.metrics.frames_in == 3 and client.metrics.frames_out == 2
        assert server.metrics.frames_in == 2 and server.metrics.frames_out == 3
        assert server.metrics.bytes_in == client.metrics.bytes_out > 0
        assert server.metrics.connections_open == 1
        await client.close()

    serve()(test)


@pytest.mark.timeout(30)
def test_server_survives_garbage_and_keeps_serving() -> None:
    async def test(server: RpcServer) -> None:
        good = await RpcClient.connect("127.0.0.1", server.port)

        # Garbage instead of a hello.
        raw, _ = await Raw.connect(server.port)
        raw.send(b"\x00\x00\x00\x05hello")
        assert "not a msgpack envelope" in await raw.expect_error_then_eof(RpcErrorCode.BAD_FRAME)

        # Garbage after a good hello.
        raw, nonce = await Raw.connect(server.port)
        await raw.hello(nonce)
        raw.send(framed([1, 0, 7, "echo"]))
        assert "an array of 4" in await raw.expect_error_then_eof(RpcErrorCode.BAD_FRAME)

        # An oversized prefix, with no payload ever sent: the server answers anyway.
        raw, nonce = await Raw.connect(server.port)
        await raw.hello(nonce)
        raw.send(struct.pack(">I", 0xFFFFFFFF))
        message = await raw.expect_error_then_eof(RpcErrorCode.FRAME_TOO_LARGE)
        assert str(0xFFFFFFFF) in message and str(1 << 20) in message

        # A large hello before authenticating is cut off at the handshake limit.
        raw, _ = await Raw.connect(server.port)
        raw.send(encode_frame(Kind.REQUEST, 0, "hello", {"version": 1, "auth": b"x" * 10000}))
        await raw.expect_error_then_eof(RpcErrorCode.FRAME_TOO_LARGE)

        # A response where a request belongs.
        raw, nonce = await Raw.connect(server.port)
        await raw.hello(nonce)
        raw.send(encode_frame(Kind.RESPONSE, 9, "echo", None))
        await raw.expect_error_then_eof(RpcErrorCode.BAD_FRAME)

        assert await good.call("echo", "still here") == "still here"
        other = await RpcClient.connect("127.0.0.1", server.port)
        assert await other.call("echo", 1) == 1
        assert server.metrics.errors_by_code == {"BAD_FRAME": 3, "FRAME_TOO_LARGE": 2}
        await good.close()
        await other.close()

    serve(frame_bytes_max=1 << 20)(test)


@pytest.mark.timeout(30)
def test_200_pipelined_calls_on_one_connection() -> None:
    active = 0
    active_max = 0

    async def slow_double(body: Any) -> Any:
        nonlocal active, active_max
        active += 1
        active_max = max(active_max, active)
        await asyncio.sleep(random.uniform(0, 0.02))
        active -= 1
        return {"i": body["i"], "double": body["i"] * 2}

    async def test(server: RpcServer) -> None:
        client = await RpcClient.connect("127.0.0.1", server.port)
        answers = await asyncio.gather(*(client.call("double", {"i": i}) for i in range(200)))
        assert answers == [{"i": i, "double": 2 * i} for i in range(200)]
        assert active_max > 50  # they ran concurrently, not one by one
        await client.close()

    serve({"double": slow_double})(test)


@pytest.mark.timeout(30)
def test_ordered_methods_run_one_at_a_time_in_arrival_order_per_connection() -> None:
    seen: dict[str, list[int]] = {"a": [], "b": []}
    active: dict[str, int] = {"a": 0, "b": 0, "free": 0}
    active_max: dict[str, int] = {"a": 0, "b": 0, "free": 0}

    async def record(key: str, i: int) -> int:
        active[key] += 1
        active_max[key] = max(active_max[key], active[key])
        await asyncio.sleep(random.uniform(0, 0.01))
        active[key] -= 1
        return i

    async def commit(body: Any) -> Any:
        seen[body["conn"]].append(body["i"])
        return await record(body["conn"], body["i"])

    async def free(body: Any) -> Any:
        return await record("free", body["i"])

    async def test(server: RpcServer) -> None:
        a = await RpcClient.connect("127.0.0.1", server.port)
        b = await RpcClient.connect("127.0.0.1", server.port)
        n = 40
        calls = []
        for i in range(n):
            calls += [
                a.call("commit", {"conn": "a", "i": i}),
                b.call("commit", {"conn": "b", "i": i}),
                a.call("free", {"i": i}),
            ]
        await asyncio.gather(*calls)
        assert seen == {"a": list(range(n)), "b": list(range(n))}
        assert active_max["a"] == 1 and active_max["b"] == 1
        assert active_max["free"] > 1
        await a.close()
        await b.close()

    serve({"commit": commit, "free": free}, ordered_methods=frozenset({"commit"}))(test)


@pytest.mark.timeout(30)
def test_timeout_leaves_connection_usable_and_late_answer_is_dropped() -> None:
    async def hang(body: Any) -> Any:
        await asyncio.Event().wait()

    async def slow(body: Any) -> Any:
        await asyncio.sleep(0.3)
        return "late"

    async def test(server: RpcServer) -> None:
        client = await RpcClient.connect("127.0.0.1", server.port)
        with pytest.raises(RpcTimeoutError, match="no answer within 200 ms"):
            await client.call("hang", None, timeout_ms=200)
        assert await client.call("echo", "ok") == "ok"

        with pytest.raises(RpcTimeoutError):
            await client.call("slow", None, timeout_ms=50)
        await asyncio.sleep(0.5)
        assert client.metrics.late_responses_dropped == 1
        assert await client.call("echo", "still ok") == "still ok"
        assert client.metrics.timeouts == 2 and client.connected
        await client.close()

    serve({"echo": echo, "hang": hang, "slow": slow})(test)


@pytest.mark.timeout(30)
def test_server_close_fails_pending_calls_promptly() -> None:
    async def hang(body: Any) -> Any:
        await asyncio.Event().wait()

    async def main() -> None:
        server = RpcServer({"hang": hang})
        await server.start()
        client = await RpcClient.connect("127.0.0.1", server.port)
        calls = [asyncio.create_task(client.call("hang", i, timeout_ms=20_000)) for i in range(10)]
        await asyncio.sleep(0.1)
        # Promptly: well before the calls' own 20 s timeouts (a bound, not a measurement).
        async with asyncio.timeout(3):
            await server.close()
            results = await asyncio.gather(*calls, return_exceptions=True)
        assert all(isinstance(r, RpcConnectionError) for r in results), results
        assert "SHUTTING_DOWN" in str(results[0])
        assert not client.connected
        with pytest.raises(RpcConnectionError):
            await client.call("hang", None)
        await client.close()

    asyncio.run(main())


_SERVER_SCRIPT = textwrap.dedent(
    """
    import asyncio
    from partlog.rpc.server import RpcServer

    async def hang(body):
        await asyncio.Event().wait()

    async def main():
        server = RpcServer({"hang": hang})
        await server.start()
        print(server.port, flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())
    """
)


@pytest.mark.timeout(30)
def test_server_killed_fails_pending_calls_promptly() -> None:
    proc = subprocess.Popen([sys.executable, "-c", _SERVER_SCRIPT], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())

        async def main() -> None:
            client = await RpcClient.connect("127.0.0.1", port)
            calls = [asyncio.create_task(client.call("hang", i, timeout_ms=20_000)) for i in range(5)]
            await asyncio.sleep(0.1)
            os.kill(proc.pid, signal.SIGKILL)
            async with asyncio.timeout(3):  # well before the calls' own 20 s timeouts
                results = await asyncio.gather(*calls, return_exceptions=True)
            assert all(isinstance(r, RpcConnectionError) for r in results), results
            with pytest.raises(RpcConnectionError):
                await client.call("hang", None)
            await client.close()

        asyncio.run(main())
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.timeout(30)
def test_shared_secret() -> None:
    called = []

    async def record(body: Any) -> Any:
        called.append(body)
        return body

    async def test(server: RpcServer) -> None:
        client = await RpcClient.connect("127.0.0.1", server.port, secret=SECRET)
        assert await client.call("echo", 1) == 1
        await client.close()

        with pytest.raises(RpcHandshakeError, match="does not match") as e:
            await RpcClient.connect("127.0.0.1", server.port, secret=b"wrong")
        assert e.value.code == RpcErrorCode.AUTH_FAILED
        with pytest.raises(RpcHandshakeError, match="secret required") as e:
            await RpcClient.connect("127.0.0.1", server.port)
        assert e.value.code == RpcErrorCode.AUTH_FAILED

        # A request before the hello is refused, not run.
        raw, nonce = await Raw.connect(server.port)
        raw.send(encode_frame(Kind.REQUEST, 1, "echo", "sneaky"))
        raw.send(encode_frame(Kind.REQUEST, 0, "hello", {"version": 1, "auth": auth_proof(SECRET, nonce)}))
        await raw.expect_error_then_eof(RpcErrorCode.HANDSHAKE_REQUIRED)

        # A wrong hello with a request pipelined right behind it: neither runs.
        raw, nonce = await Raw.connect(server.port)
        raw.send(
            encode_frame(Kind.REQUEST, 0, "hello", {"version": 1, "auth": auth_proof(b"guess", nonce)})
            + encode_frame(Kind.REQUEST, 1, "echo", "sneaky")
        )
        await raw.expect_error_then_eof(RpcErrorCode.AUTH_FAILED)

        # A proof for another connection's nonce (a replay) fails.
        raw, _ = await Raw.connect(server.port)
        raw.send(encode_frame(Kind.REQUEST, 0, "hello", {"version": 1, "auth": auth_proof(SECRET, nonce)}))
        await raw.expect_error_then_eof(RpcErrorCode.AUTH_FAILED)

        assert called == [1]  # only the authenticated client's call
        assert server.metrics.errors_by_code["AUTH_FAILED"] == 4

    serve({"echo": record}, secret=SECRET)(test)


@pytest.mark.timeout(30)
def test_server_without_secret_accepts_any_client_and_empty_secret_is_refused() -> None:
    async def test(server: RpcServer) -> None:
        for secret in (None, SECRET):
            client = await RpcClient.connect("127.0.0.1", server.port, secret=secret)
            assert await client.call("echo", "x") == "x"
            await client.close()

    serve()(test)
    with pytest.raises(ValueError, match="non-empty"):
        RpcServer({}, secret=b"")


@pytest.mark.timeout(30)
def test_handshake_timeout() -> None:
    async def test(server: RpcServer) -> None:
        raw, _ = await Raw.connect(server.port)
        # Bounded well above the server's 200 ms, below its 10 s default.
        async with asyncio.timeout(5):
            assert "handshake timeout" in await raw.expect_error_then_eof(RpcErrorCode.HANDSHAKE_REQUIRED)

    serve(handshake_timeout_ms=200)(test)


@pytest.mark.timeout(30)
def test_version_mismatch() -> None:
    # A version this side does not speak (RPC_VERSION + 1; version 2 was
    # the mismatch before versions were ranges).
    v = RPC_VERSION + 1

    async def test(server: RpcServer) -> None:
        # A client of version v only (same envelope, another version number).
        raw, _ = await Raw.connect(server.port)
        raw.send(encode_frame(Kind.REQUEST, 0, "hello", {"version": v, "auth": b""}, version=v))
        message = await raw.expect_error_then_eof(RpcErrorCode.VERSION_MISMATCH)
        assert f"version {v}" in message and f"versions {RPC_VERSION_MIN}-{RPC_VERSION}" in message

        # Version 1 envelope, but asking for version v.
        raw, _ = await Raw.connect(server.port)
        raw.send(encode_frame(Kind.REQUEST, 0, "hello", {"version": v, "auth": b""}))
        await raw.expect_error_then_eof(RpcErrorCode.VERSION_MISMATCH)

    serve()(test)

    # A server of version v: the client refuses at connect.
    async def v2_server(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonce = os.urandom(CHALLENGE_NONCE_BYTES)
        writer.write(encode_frame(Kind.REQUEST, 0, "challenge", {"version": v, "nonce": nonce}, version=v))
        await reader.read()
        writer.close()

    async def main() -> None:
        server = await asyncio.start_server(v2_server, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        with pytest.raises(RpcHandshakeError, match=f"version {v}") as e:
            await RpcClient.connect("127.0.0.1", port)
        assert e.value.code == RpcErrorCode.VERSION_MISMATCH
        server.close()

    asyncio.run(main())


@pytest.mark.timeout(30)
def test_handler_errors(caplog: pytest.LogCaptureFixture) -> None:
    async def boom(body: Any) -> Any:
        raise KeyError("no such partition")

    async def refuse(body: Any) -> Any:
        raise RpcError(RpcErrorCode.BAD_REQUEST, "partitions must be a list")

    async def unencodable(body: Any) -> Any:
        return {1, 2}

    async def huge(body: Any) -> Any:
        return b"x" * 10_000

    async def test(server: RpcServer) -> None:
        client = await RpcClient.connect("127.0.0.1", server.port, frame_bytes_max=8192)
        with (
            caplog.at_level(logging.ERROR, logger="partlog.rpc.server"),
            pytest.raises(RpcRemoteError, match="partition") as e,
        ):
            await client.call("boom", None)
        assert e.value.code == RpcErrorCode.INTERNAL
        assert any("method=boom" in r.getMessage() for r in caplog.records)

        with pytest.raises(RpcRemoteError, match="must be a list") as e:
            await client.call("refuse", None)
        assert e.value.code == RpcErrorCode.BAD_REQUEST
        with pytest.raises(RpcRemoteError) as e:
            await client.call("nope", None)
        assert e.value.code == RpcErrorCode.UNKNOWN_METHOD
        with pytest.raises(RpcRemoteError) as e:
            await client.call("unencodable", None)
        assert e.value.code == RpcErrorCode.INTERNAL
        with pytest.raises(RpcRemoteError) as e:
            await client.call("huge", None)
        assert e.value.code == RpcErrorCode.RESPONSE_TOO_LARGE
        # Too large to send: refused locally, the connection unharmed.
        with pytest.raises(FrameTooLargeError):
            await client.call("echo", b"x" * 10_000)

        assert await client.call("echo", "alive") == "alive"
        assert client.metrics.errors_by_code == {
            "INTERNAL": 2,
            "BAD_REQUEST": 1,
            "UNKNOWN_METHOD": 1,
            "RESPONSE_TOO_LARGE": 1,
        }
        await client.close()

    serve(
        {"echo": echo, "boom": boom, "refuse": refuse, "unencodable": unencodable, "huge": huge},
        frame_bytes_max=8192,
    )(test)


@pytest.mark.timeout(30)
def test_connection_limit() -> None:
    async def test(server: RpcServer) -> None:
        a = await RpcClient.connect("127.0.0.1", server.port)
        b = await RpcClient.connect("127.0.0.1", server.port)
        with pytest.raises(RpcHandshakeError, match="limit of 2 connections") as e:
            await RpcClient.connect("127.0.0.1", server.port)
        assert e.value.code == RpcErrorCode.TOO_MANY_CONNECTIONS
        assert server.metrics.connections_refused == 1
        await a.close()
        for _ in range(100):
            if server.metrics.connections_open < 2:
                break
            await asyncio.sleep(0.01)
        c = await RpcClient.connect("127.0.0.1", server.port)
        assert await c.call("echo", 3) == 3 and await b.call("echo", 4) == 4
        await b.close()
        await c.close()

    serve(connections_max=2)(test)


@pytest.mark.timeout(30)
def test_in_flight_limit_stops_reading_the_connection() -> None:
    release = asyncio.Event()
    active = 0
    active_max = 0

    async def wait(body: Any) -> Any:
        nonlocal active, active_max
        active += 1
        active_max = max(active_max, active)
        await release.wait()
        active -= 1
        return body

    async def test(server: RpcServer) -> None:
        client = await RpcClient.connect("127.0.0.1", server.port)
        calls = [asyncio.create_task(client.call("wait", i)) for i in range(20)]
        await asyncio.sleep(0.2)
        assert active == 4
        release.set()
        assert await asyncio.gather(*calls) == list(range(20))
        assert active_max == 4
        await client.close()

    serve({"wait": wait}, requests_in_flight_max=4)(test)


# --------------------------------------------------------------------- TLS


@pytest.mark.timeout(30)
def test_tls(certs: Path) -> None:
    async def test(server: RpcServer) -> None:
        client = await RpcClient.connect(
            "127.0.0.1", server.port, secret=SECRET, ssl=client_context(certs, with_cert=False)
        )
        assert await client.call("echo", b"over tls") == b"over tls"
        await client.close()
        # A client that does not trust the server's CA refuses it.
        with pytest.raises(RpcConnectionError, match="CERTIFICATE_VERIFY_FAILED"):
            await RpcClient.connect("127.0.0.1", server.port, secret=SECRET, ssl=ssl.create_default_context())

    serve(secret=SECRET, ssl=server_context(certs, mutual=False))(test)


@pytest.mark.timeout(30)
def test_mutual_tls_refuses_a_client_without_a_cert(certs: Path) -> None:
    called = []

    async def record(body: Any) -> Any:
        called.append(body)
        return body

    async def test(server: RpcServer) -> None:
        with pytest.raises(RpcConnectionError):
            await RpcClient.connect("127.0.0.1", server.port, ssl=client_context(certs, with_cert=False))
        assert called == []
        client = await RpcClient.connect("127.0.0.1", server.port, ssl=client_context(certs, with_cert=True))
        assert await client.call("echo", 5) == 5
        await client.close()

    serve({"echo": record}, ssl=server_context(certs, mutual=True))(test)
