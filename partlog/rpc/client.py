"""The inter-broker RPC client over asyncio: :class:`RpcClient`.

Frames, the handshake rules and error codes live in ``partlog.rpc.frame``;
the server is ``partlog.rpc.server``.

Contract in short:

* One TCP (optionally TLS) connection carries many concurrent calls, matched
  by request id; responses may arrive in any order.
* The client raises :class:`RpcTimeoutError`, :class:`RpcConnectionError` or
  :class:`RpcRemoteError`; once its connection is lost every pending and
  later call fails with :class:`RpcConnectionError`, and the caller connects
  anew (the client does not reconnect by itself, so a caller never has a
  call silently sent on a different connection than its predecessors).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl as ssl_module
import uuid
from typing import Any

from partlog.rpc.frame import (
    CONNECTION_REQUEST_ID,
    HANDSHAKE_FRAME_BYTES_MAX,
    HELLO_METHOD,
    REQUEST_ID_MAX,
    RPC_FRAME_BYTES_MAX,
    Frame,
    FrameDecoder,
    FrameError,
    InvalidBody,
    Kind,
    RpcError,
    RpcErrorCode,
    challenge_versions,
    check_cluster,
    code_name,
    encode_frame,
    hello_body,
    negotiate,
    parse_challenge,
)
from partlog.rpc.metrics import RpcMetrics
from partlog.rpc.streams import close_writer, peer_name

__all__ = [
    "RPC_TIMEOUT_MS_DEFAULT",
    "RpcClient",
    "RpcConnectionError",
    "RpcHandshakeError",
    "RpcRemoteError",
    "RpcTimeoutError",
]

log = logging.getLogger(__name__)

# Default bound on connect plus handshake, and on a call without its own
# timeout: Kafka's request.timeout.ms is 30 s as well.
RPC_TIMEOUT_MS_DEFAULT = 30_000
READ_CHUNK_BYTES = 64 * 1024


class RpcRemoteError(RpcError):
    """The peer answered a call with an ERROR frame (``code``, ``message``)."""


class RpcTimeoutError(Exception):
    """A call (or connect) got no answer within its timeout.

    The connection stays usable; a response arriving later is dropped.  Not a
    ``TimeoutError``: that is an ``OSError``, and callers catch ``OSError`` as
    a lost connection.
    """


class RpcConnectionError(ConnectionError):
    """The connection is lost, closed, or could not be established.

    Every pending call fails with it, and so does every later call on the same
    client: connect a new one.
    """


class RpcHandshakeError(RpcConnectionError):
    """The connection was refused during the handshake (wrong or missing
    secret, another protocol version, too many connections).  ``code`` says
    which, as an :class:`RpcErrorCode`."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"{code_name(code)}: {message}")
        self.code = code
        self.message = message


class RpcClient:
    """One connection to an :class:`RpcServer`, carrying pipelined calls.

    Make it with :meth:`connect`.  Safe to use from many tasks at once.
    """

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        decoder: FrameDecoder,
        early_frames: list[Frame],
        *,
        timeout_ms: int,
        frame_bytes_max: int,
        metrics: RpcMetrics,
        version: int,
        server_cluster_id: uuid.UUID | None = None,
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._decoder = decoder
        self.timeout_ms = timeout_ms
        self.frame_bytes_max = frame_bytes_max
        self.metrics = metrics
        # The protocol version the handshake agreed on (docs/design/upgrades.md):
        # send a field only if this version knows it.
        self.version = version
        # The cluster the server named in its challenge (None: it named none).
        self.server_cluster_id = server_cluster_id
        self.peer = peer_name(writer)
        # Id 0 is the connection's own (hello, connection-level errors).
        self._next_request_id = CONNECTION_REQUEST_ID + 1
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._lost: RpcConnectionError | None = None
        self._read_task = asyncio.create_task(self._read_loop(early_frames))

    @classmethod
    async def connect(
        cls,
        host: str,
        port: int,
        *,
        secret: bytes | None = None,
        cluster_id: uuid.UUID | None = None,
        ssl: ssl_module.SSLContext | None = None,
        timeout_ms: int = RPC_TIMEOUT_MS_DEFAULT,
        frame_bytes_max: int = RPC_FRAME_BYTES_MAX,
    ) -> RpcClient:
        """Connect and complete the handshake within ``timeout_ms``.

        ``cluster_id``: this side's cluster, sent in the hello; a server
        naming another in its challenge is refused before the hello
        (CLUSTER_MISMATCH).  The server's, if it names one, is
        ``server_cluster_id`` afterwards; the protocol version both speak,
        ``version`` (a server none of whose versions this side speaks is
        refused before the hello: VERSION_MISMATCH).

        ``timeout_ms`` is also the default timeout of :meth:`call`.  Raises
        :class:`RpcHandshakeError` if the server refused (``code`` says why)
        or named another cluster,
        :class:`RpcConnectionError` if the connection failed (including TLS
        errors), :class:`RpcTimeoutError` on timeout.
        """
        metrics = RpcMetrics()
        # Until the hello is answered, the server has not shown it knows the
        # secret either: no reason to buffer more than a handshake frame.
        decoder = FrameDecoder(min(HANDSHAKE_FRAME_BYTES_MAX, frame_bytes_max))
        writer: asyncio.StreamWriter | None = None
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                reader, writer = await asyncio.open_connection(host, port, ssl=ssl)
                received: list[Frame] = []
                challenge = await cls._next_frame(reader, decoder, metrics, received)
                nonce, server_cluster_id = parse_challenge(challenge)
                check_cluster(server_cluster_id, cluster_id, "server")
                server_versions = challenge_versions(challenge)
                version = negotiate(server_versions, "server")
                body = hello_body(secret, nonce, cluster_id, server_versions)
                hello = encode_frame(Kind.REQUEST, CONNECTION_REQUEST_ID, HELLO_METHOD, body, version=version)
                writer.write(hello)
                metrics.frames_out += 1
                metrics.bytes_out += len(hello)
                answer = await cls._next_frame(reader, decoder, metrics, received)
                if answer.kind == Kind.ERROR:
                    code, message = answer.body
                    metrics.count_error(code)
                    raise RpcError(code, message)
                if answer.kind != Kind.RESPONSE or answer.request_id != CONNECTION_REQUEST_ID:
                    raise FrameError(f"expected the hello response, got {answer.kind.name} {answer.method!r:.60}")
                agreed = answer.body.get("version") if type(answer.body) is dict else None
                if answer.version != version or agreed != version:
                    raise RpcError(
                        RpcErrorCode.VERSION_MISMATCH,
                        f"server answered the hello at version {agreed!r:.20} (envelope {answer.version}), "
                        f"this client asked for version {version}",
                    )
            decoder.frame_bytes_max = frame_bytes_max
        except BaseException as e:
            if writer is not None:
                await close_writer(writer)
            where = f"rpc connect to {host}:{port}"
            if isinstance(e, RpcError):
                raise RpcHandshakeError(e.code, f"{where}: {e.message}") from e
            if isinstance(e, TimeoutError):
                raise RpcTimeoutError(f"{where}: no handshake within {timeout_ms} ms") from e
            if isinstance(e, RpcConnectionError):
                # TLS 1.3 servers reject a client certificate after the client
                # thinks the TLS handshake is done: all we see is the close.
                hint = " (TLS: did the server refuse our certificate?)" if ssl is not None else ""
                raise RpcConnectionError(f"{where}: {e}{hint}") from e
            if isinstance(e, FrameError | OSError):
                raise RpcConnectionError(f"{where} failed: {type(e).__name__}: {e}") from e
            raise
        return cls(
            reader,
            writer,
            decoder,
            received,
            timeout_ms=timeout_ms,
            frame_bytes_max=frame_bytes_max,
            metrics=metrics,
            version=version,
            server_cluster_id=server_cluster_id,
        )

    @staticmethod
    async def _next_frame(
        reader: asyncio.StreamReader, decoder: FrameDecoder, metrics: RpcMetrics, received: list[Frame]
    ) -> Frame:
        """The next frame during the handshake.  Frames that came with it stay
        in ``received`` (the server may close right after the hello answer, and
        its SHUTTING_DOWN then follows in the same read)."""
        while not received:
            data = await reader.read(READ_CHUNK_BYTES)
            if not data:
                raise RpcConnectionError("server closed the connection during the handshake")
            metrics.bytes_in += len(data)
            received.extend(decoder.feed(data))
        metrics.frames_in += 1
        return received.pop(0)

    @property
    def connected(self) -> bool:
        """False once the connection is lost or closed; then connect anew."""
        return self._lost is None

    async def call(self, method: str, body: Any, *, timeout_ms: int | None = None) -> Any:
        """Call ``method`` with ``body`` and return the response body.

        ``timeout_ms`` defaults to the client's.  Raises
        :class:`RpcTimeoutError` (the connection stays usable),
        :class:`RpcRemoteError` for an ERROR answer, :class:`RpcConnectionError`
        if the connection is or gets lost, :class:`FrameTooLargeError` if the
        request exceeds ``frame_bytes_max`` (nothing is sent), and
        ``TypeError`` if msgpack cannot encode ``body``.
        """
        if self._lost is not None:
            raise RpcConnectionError(str(self._lost))
        timeout_ms = self.timeout_ms if timeout_ms is None else timeout_ms
        request_id = self._next_request_id
        assert request_id <= REQUEST_ID_MAX
        self._next_request_id += 1
        data = encode_frame(
            Kind.REQUEST, request_id, method, body, frame_bytes_max=self.frame_bytes_max, version=self.version
        )
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                self._writer.write(data)
                self.metrics.frames_out += 1
                self.metrics.bytes_out += len(data)
                try:
                    await self._writer.drain()
                except OSError as e:
                    # The read loop will notice too; fail this call now rather than at the timeout.
                    self._connection_lost(RpcConnectionError(f"rpc connection to {self.peer} lost: {e}"))
                return await future
        except TimeoutError:
            self.metrics.timeouts += 1
            raise RpcTimeoutError(f"rpc {method} to {self.peer}: no answer within {timeout_ms} ms") from None
        finally:
            # Forgetting the id is what makes a late answer get dropped.
            self._pending.pop(request_id, None)

    async def close(self) -> None:
        """Close the connection; pending calls fail with RpcConnectionError."""
        self._connection_lost(RpcConnectionError(f"rpc connection to {self.peer} closed by this client"))
        self._read_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._read_task
        await close_writer(self._writer)

    async def _read_loop(self, early_frames: list[Frame]) -> None:
        reason = "server closed the connection"
        try:
            for frame in early_frames:
                self.metrics.frames_in += 1
                problem = self._deliver(frame)
                if problem is not None:
                    reason = problem
                    return
            while True:
                data = await self._reader.read(READ_CHUNK_BYTES)
                if not data:
                    break
                self.metrics.bytes_in += len(data)
                for frame in self._decoder.feed(data):
                    self.metrics.frames_in += 1
                    problem = self._deliver(frame)
                    if problem is not None:
                        reason = problem
                        return
        except FrameError as e:
            reason = f"bad frame from server: {e}"
            log.warning("rpc %s peer=%s", reason, self.peer)
        except OSError as e:
            reason = f"{type(e).__name__}: {e}"
        finally:
            self._connection_lost(RpcConnectionError(f"rpc connection to {self.peer} lost: {reason}"))
            self._writer.transport.abort()

    def _deliver(self, frame: Frame) -> str | None:
        """Resolve the call a frame answers; a reason to close, or None."""
        if frame.version != self.version:
            return f"server switched from protocol version {self.version} to {frame.version}"
        if frame.kind == Kind.REQUEST:
            return f"server sent a request {frame.method!r:.60}"
        if frame.kind == Kind.ERROR:
            self.metrics.count_error(frame.body[0])
            if frame.request_id == CONNECTION_REQUEST_ID:
                return f"server closed the connection: {code_name(frame.body[0])}: {frame.body[1]}"
        future = self._pending.get(frame.request_id)
        if future is None or future.done():
            # The call timed out or was cancelled; its caller has moved on.
            self.metrics.late_responses_dropped += 1
        elif frame.kind == Kind.ERROR:
            future.set_exception(RpcRemoteError(frame.body[0], frame.body[1]))
        elif isinstance(frame.body, InvalidBody):
            # Only this call fails: the stream is still in sync.
            future.set_exception(
                RpcRemoteError(RpcErrorCode.BAD_FRAME, f"answer to {frame.method!r:.60}: {frame.body.reason}")
            )
        else:
            future.set_result(frame.body)
        return None

    def _connection_lost(self, error: RpcConnectionError) -> None:
        if self._lost is None:
            self._lost = error
        for future in self._pending.values():
            if not future.done():
                future.set_exception(RpcConnectionError(str(self._lost)))
