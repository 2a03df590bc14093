"""Inter-broker RPC: framing (sans-IO) and the asyncio server and client over
real loopback TCP.

pytest-asyncio is not a dependency: each test runs its own ``asyncio.run``.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import random
import shutil
import signal
import ssl
import struct
import subprocess
import sys
import textwrap
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from partlog.rpc.client import RpcClient, RpcConnectionError, RpcHandshakeError, RpcRemoteError, RpcTimeoutError
from partlog.rpc.frame import (
    CHALLENGE_NONCE_BYTES,
    PROTOCOL_VERSION,
    Frame,
    FrameDecoder,
    FrameError,
    FrameTooLargeError,
    InvalidBody,
    Kind,
    RpcError,
    RpcErrorCode,
    auth_proof,
    decode_payload,
    encode_frame,
)
from partlog.rpc.schema import DecodeLimits
from partlog.rpc.server import RpcServer

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
        self.send(encode_frame(Kind.REQUEST, 0, "hello", {"version": 1, "auth": auth_proof(secret, nonce)}))
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


def payload(obj: Any) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)  # type: ignore[no-any-return]


def framed(obj: Any) -> bytes:
    data = payload(obj)
    return struct.pack(">I", len(data)) + data


# ----------------------------------------------------------- sans-IO framing

_ints = st.integers(min_value=-(1 << 63), max_value=(1 << 64) - 1)
_bodies = st.recursive(
    st.none() | st.booleans() | _ints | st.binary(max_size=64) | st.text(max_size=32) | st.floats(allow_nan=False),
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8) | st.binary(max_size=8), inner, max_size=5)
    ),
    max_leaves=20,
)
_frames = st.one_of(
    st.tuples(
        st.sampled_from([Kind.REQUEST, Kind.RESPONSE]), st.integers(0, (1 << 64) - 1), st.text(max_size=20), _bodies
    ),
    st.tuples(
        st.just(Kind.ERROR), st.integers(0, 1 << 32), st.text(max_size=20), st.tuples(_ints, st.text()).map(list)
    ),
)


@pytest.mark.timeout(30)
@settings(max_examples=200, deadline=None)
@given(frames=st.lists(_frames, max_size=12), cuts=st.lists(st.integers(min_value=0), max_size=20))
def test_decoder_reassembles_frames_across_any_chunking(
    frames: list[tuple[Kind, int, str, Any]], cuts: list[int]
) -> None:
    stream = b"".join(encode_frame(*f) for f in frames)
    points = sorted({c % (len(stream) + 1) for c in cuts} | {0, len(stream)})
    decoder = FrameDecoder()
    got: list[Frame] = []
    for a, b in itertools.pairwise(points):
        got.extend(decoder.feed(stream[a:b]))
    assert [(f.kind, f.request_id, f.method, f.body) for f in got] == [tuple(f) for f in frames]
    assert all(f.version == PROTOCOL_VERSION for f in got)
    assert decoder.buffered_bytes == 0


@pytest.mark.timeout(10)
def test_decoder_coalesced_frames_in_one_chunk() -> None:
    data = b"".join(encode_frame(Kind.REQUEST, i, "m", [i, b"x" * i]) for i in range(1, 300))
    frames = FrameDecoder().feed(data)
    assert [f.body for f in frames] == [[i, b"x" * i] for i in range(1, 300)]


@pytest.mark.timeout(10)
def test_oversized_length_prefix_rejected_before_payload() -> None:
    decoder = FrameDecoder(1024)
    assert decoder.feed(struct.pack(">I", 1024)[:2]) == []
    with pytest.raises(FrameTooLargeError) as e:
        # Only the prefix arrived: the decoder refuses without waiting for 1025 bytes.
        decoder.feed(struct.pack(">I", 1025)[2:])
    assert e.value.frame_bytes == 1025 and e.value.frame_bytes_max == 1024
    assert "1025" in str(e.value) and "1024" in str(e.value)
    assert decoder.buffered_bytes == 0
    with pytest.raises(FrameError, match="already failed"):
        decoder.feed(b"")
    # A frame of exactly the limit is fine.
    ok = FrameDecoder(len(payload([1, 0, 1, "m", b"x" * 100])))
    assert ok.feed(framed([1, 0, 1, "m", b"x" * 100]))[0].body == b"x" * 100


@pytest.mark.timeout(10)
def test_encoder_refuses_frames_over_the_limit() -> None:
    with pytest.raises(FrameTooLargeError):
        encode_frame(Kind.REQUEST, 1, "m", b"x" * 2000, frame_bytes_max=1000)


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"", "does not start with an envelope"),
        (b"\xc1", "not a msgpack envelope"),  # the one byte msgpack never uses
        (b"\x91\xa2\xff\xfe", "an array of 1"),
        (payload({"version": 1}), "not a msgpack envelope"),
        (payload([1, 0, 1, "m"]), "an array of 4"),
        (payload([1, 0, 1, "m", None, None]), "an array of 6"),
        (payload(["1", 0, 1, "m", None]), "version"),
        (payload([True, 0, 1, "m", None]), "version"),
        (payload([1, 3, 1, "m", None]), "kind"),
        (payload([1, "0", 1, "m", None]), "kind"),
        (payload([1, 0, -1, "m", None]), "request_id"),
        (payload([1, 0, 1.5, "m", None]), "request_id"),
        (payload([1, 0, 1, b"m", None]), "method"),
        (payload([1, 0, 1, "m" * 1000, None]), "method"),
        (payload([1, 0, 1, ["m"], None]), "method"),  # a container where the method goes
        (payload([1, 2, 1, "m", "boom"]), "error's body"),
        (payload([1, 2, 1, "m", ["1", "boom"]]), "error's body"),
    ],
)
def test_malformed_envelopes_raise_frame_error(data: bytes, problem: str) -> None:
    """A bad envelope loses the stream: the connection closes."""
    with pytest.raises(FrameError, match=problem) as e:
        decode_payload(data)
    assert not isinstance(e.value, FrameTooLargeError)
    with pytest.raises(FrameError):
        FrameDecoder().feed(struct.pack(">I", len(data)) + data)


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (payload([1, 0, 1, "m", b"x"])[:-1], "not valid msgpack"),  # truncated
        (payload([1, 0, 1, "m", None]) + b"\x00", "not valid msgpack"),  # trailing bytes
        (payload([1, 0, 1, "m", {1: 2}]), "not valid msgpack"),  # int map keys refused
        (payload([1, 0, 1, "m", None])[:-1] + b"\xa2\xff\xfe", "not valid msgpack"),  # a str, not UTF-8
    ],
)
def test_malformed_bodies_fail_only_their_request(data: bytes, problem: str) -> None:
    """The envelope is fine, so the stream is still in sync: the body is an
    InvalidBody (the server answers BAD_REQUEST for that request only)."""
    frame = decode_payload(data)
    assert frame.request_id == 1 and frame.method == "m"
    assert isinstance(frame.body, InvalidBody) and problem in frame.body.reason


def test_body_limits_stop_a_msgpack_bomb_while_it_decodes() -> None:
    """Regression (issue 13, item 5): an array header claiming millions of
    elements followed by 0x90 bytes (empty arrays) cost ~600 MB in a 7.6 MiB
    frame.  Under a method's limits it stops after a budget of objects."""
    n = 2_000_000
    bomb = b"\xdd" + struct.pack(">I", n) + b"\x90" * n  # array32 of n empty arrays
    data = payload([1, 0, 1, "m", None])[:-1] + bomb
    limits = DecodeLimits(array_len_max=n, map_len_max=0, str_bytes_max=0, bin_bytes_max=0, elements_max=1000)
    frame = decode_payload(data, lambda kind, method: limits)
    assert isinstance(frame.body, InvalidBody) and "more than 1000 objects" in frame.body.reason
    # A legal body of the same method decodes.
    ok = decode_payload(payload([1, 0, 1, "m", [[] for _ in range(100)]]), lambda kind, method: limits)
    assert ok.body == [[]] * 100
    # Array and string headers above the schema's largest are refused before anything is built.
    small = DecodeLimits(array_len_max=10, map_len_max=1, str_bytes_max=5, bin_bytes_max=5, elements_max=100)
    for body in ([0] * 11, "x" * 6, b"x" * 6, {"a": 1, "b": 2}):
        frame = decode_payload(payload([1, 0, 1, "m", body]), lambda kind, method: small)
        assert isinstance(frame.body, InvalidBody), body


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
    async def test(server: RpcServer) -> None:
        # A client from version 2 (same envelope, another version number).
        raw, _ = await Raw.connect(server.port)
        raw.send(encode_frame(Kind.REQUEST, 0, "hello", {"version": 2, "auth": b""}, version=2))
        message = await raw.expect_error_then_eof(RpcErrorCode.VERSION_MISMATCH)
        assert "version 2" in message and "version 1" in message

        # Version 1 envelope, but asking for version 2.
        raw, _ = await Raw.connect(server.port)
        raw.send(encode_frame(Kind.REQUEST, 0, "hello", {"version": 2, "auth": b""}))
        await raw.expect_error_then_eof(RpcErrorCode.VERSION_MISMATCH)

    serve()(test)

    # A server from version 2: the client refuses at connect.
    async def v2_server(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonce = os.urandom(CHALLENGE_NONCE_BYTES)
        writer.write(encode_frame(Kind.REQUEST, 0, "challenge", {"version": 2, "nonce": nonce}, version=2))
        await reader.read()
        writer.close()

    async def main() -> None:
        server = await asyncio.start_server(v2_server, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        with pytest.raises(RpcHandshakeError, match="version 2") as e:
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


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A CA, a server cert for 127.0.0.1 and a client cert, made with the
    openssl CLI (the ``cryptography`` package is not a dependency)."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl CLI not available to make test certificates")
    d = tmp_path_factory.mktemp("certs")
    (d / "openssl.cnf").write_text(
        textwrap.dedent(
            """
            [req]
            distinguished_name = dn
            [dn]
            [ca_ext]
            basicConstraints = critical, CA:TRUE
            keyUsage = critical, keyCertSign, cRLSign
            subjectKeyIdentifier = hash
            [server_ext]
            basicConstraints = critical, CA:FALSE
            keyUsage = critical, digitalSignature
            extendedKeyUsage = serverAuth
            subjectAltName = IP:127.0.0.1
            subjectKeyIdentifier = hash
            authorityKeyIdentifier = keyid
            [client_ext]
            basicConstraints = critical, CA:FALSE
            keyUsage = critical, digitalSignature
            extendedKeyUsage = clientAuth
            subjectKeyIdentifier = hash
            authorityKeyIdentifier = keyid
            """
        )
    )

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)

    key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl(
        "req",
        "-x509",
        "-config",
        "openssl.cnf",
        "-extensions",
        "ca_ext",
        *key,
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "2",
        "-subj",
        "/CN=partlog test CA",
    )
    for name, serial in (("server", "2"), ("client", "3")):
        openssl(
            "req",
            "-new",
            "-config",
            "openssl.cnf",
            *key,
            "-keyout",
            f"{name}.key",
            "-out",
            f"{name}.csr",
            "-subj",
            f"/CN=partlog test {name}",
        )
        openssl(
            "x509",
            "-req",
            "-in",
            f"{name}.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-set_serial",
            serial,
            "-days",
            "2",
            "-extfile",
            "openssl.cnf",
            "-extensions",
            f"{name}_ext",
            "-out",
            f"{name}.crt",
        )
    yield d


def _server_context(certs: Path, *, mutual: bool) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(certs / "server.crt", certs / "server.key")
    if mutual:
        ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.load_verify_locations(certs / "ca.crt")
    return ctx


def _client_context(certs: Path, *, with_cert: bool) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=certs / "ca.crt")
    if with_cert:
        ctx.load_cert_chain(certs / "client.crt", certs / "client.key")
    return ctx


@pytest.mark.timeout(30)
def test_tls(certs: Path) -> None:
    async def test(server: RpcServer) -> None:
        client = await RpcClient.connect(
            "127.0.0.1", server.port, secret=SECRET, ssl=_client_context(certs, with_cert=False)
        )
        assert await client.call("echo", b"over tls") == b"over tls"
        await client.close()
        # A client that does not trust the server's CA refuses it.
        with pytest.raises(RpcConnectionError, match="CERTIFICATE_VERIFY_FAILED"):
            await RpcClient.connect("127.0.0.1", server.port, secret=SECRET, ssl=ssl.create_default_context())

    serve(secret=SECRET, ssl=_server_context(certs, mutual=False))(test)


@pytest.mark.timeout(30)
def test_mutual_tls_refuses_a_client_without_a_cert(certs: Path) -> None:
    called = []

    async def record(body: Any) -> Any:
        called.append(body)
        return body

    async def test(server: RpcServer) -> None:
        with pytest.raises(RpcConnectionError):
            await RpcClient.connect("127.0.0.1", server.port, ssl=_client_context(certs, with_cert=False))
        assert called == []
        client = await RpcClient.connect("127.0.0.1", server.port, ssl=_client_context(certs, with_cert=True))
        assert await client.call("echo", 5) == 5
        await client.close()

    serve({"echo": record}, ssl=_server_context(certs, mutual=True))(test)


def test_a_deferred_answer_never_started_is_closed_without_a_warning() -> None:
    """Regression: a connection closing right after a handler returned a
    Deferred cancelled the answering task before its first step, leaving the
    answer coroutine unawaited ("coroutine '_encoded' was never awaited" in
    test_failover).  The server now closes such an answer."""
    import gc
    import inspect
    import warnings

    from partlog.rpc.server import close_unstarted

    async def answer() -> int:
        return 1

    async def main() -> None:
        never = answer()
        task = asyncio.create_task(asyncio.sleep(0))
        task.cancel()
        task.add_done_callback(lambda _t: close_unstarted(never))
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0)  # done callbacks run
        assert inspect.getcoroutinestate(never) == inspect.CORO_CLOSED

        done = answer()
        assert await done == 1
        close_unstarted(done)  # finished: left alone
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        close_unstarted(fut)  # not a coroutine: left alone
        assert not fut.done()
        fut.cancel()

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        asyncio.run(main())
        gc.collect()
    assert not [w for w in caught if "never awaited" in str(w.message)]
