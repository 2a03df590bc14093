"""The inter-broker RPC over asyncio: :class:`RpcServer` and :class:`RpcClient`.

Frames, the handshake rules and error codes live in ``partlog.rpc_frame``;
this module only moves bytes and schedules handlers.

Contract in short:

* One TCP (optionally TLS) connection carries many concurrent calls, matched
  by request id; responses may arrive in any order.
* On each connection, the server runs requests concurrently, except methods
  in ``ordered_methods``, which run one at a time in arrival order (commits
  to a leader must be applied in WAL-file order).  An ordered handler may
  return :class:`Deferred`: the ordered part is done (the next request may
  start) and the answer is sent when the deferred awaitable completes (an
  acks=all commit is appended in order, then waits for replication while
  later commits are appended).
* Nothing but the handshake is processed before the client proved the shared
  secret (if the server has one).
* A peer breaking the protocol costs only its own connection: the server logs
  it, answers an ERROR frame if it can, and closes that connection.
* The client raises :class:`RpcTimeoutError`, :class:`RpcConnectionError` or
  :class:`RpcRemoteError`; once its connection is lost every pending and
  later call fails with :class:`RpcConnectionError`, and the caller connects
  anew (the client does not reconnect by itself, so a caller never has a
  call silently sent on a different connection than its predecessors).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import secrets
import ssl as ssl_module
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from partlog.rpc_frame import (
    CHALLENGE_METHOD,
    CHALLENGE_NONCE_BYTES,
    CONNECTION_REQUEST_ID,
    HANDSHAKE_FRAME_BYTES_MAX,
    HELLO_METHOD,
    PROTOCOL_VERSION,
    REQUEST_ID_MAX,
    RPC_FRAME_BYTES_MAX,
    Frame,
    FrameDecoder,
    FrameError,
    FrameTooLargeError,
    Kind,
    RpcError,
    RpcErrorCode,
    challenge_body,
    check_cluster,
    check_hello,
    check_version,
    code_name,
    encode_error,
    encode_frame,
    hello_body,
    parse_challenge,
)

__all__ = [
    "Deferred",
    "RpcClient",
    "RpcConnectionError",
    "RpcError",
    "RpcErrorCode",
    "RpcHandshakeError",
    "RpcMetrics",
    "RpcRemoteError",
    "RpcServer",
    "RpcTimeoutError",
    "SecretFileError",
    "read_secret_file",
]

log = logging.getLogger(__name__)

Handler = Callable[[Any], Awaitable[Any]]


# The shortest shared secret accepted: 16 bytes (128 bits) is what HMAC
# needs to resist guessing; a shorter one is a password, not a key.
SECRET_BYTES_MIN = 16
# A secret file is a key, not a document: refuse to read a large file.
SECRET_FILE_BYTES_MAX = 4096


class SecretFileError(ValueError):
    """The secret file is missing, unreadable, empty or too short: a
    configuration error (exit status 2 in the CLIs)."""

    exit_status = 2


def read_secret_file(path: str | None) -> bytes | None:
    """The shared RPC secret kept in ``path`` (surrounding whitespace
    dropped); None for no path (no authentication).

    Fail closed: an empty or whitespace-only file used to mean "no
    authentication"; now it, a secret shorter than ``SECRET_BYTES_MIN``
    bytes, or a file that cannot be read raise :class:`SecretFileError`
    naming the file."""
    if not path:
        return None
    try:
        with open(path, "rb") as f:
            raw = f.read(SECRET_FILE_BYTES_MAX + 1)
    except OSError as e:
        raise SecretFileError(f"secret file {path}: {e.strerror or e}") from e
    if len(raw) > SECRET_FILE_BYTES_MAX:
        raise SecretFileError(f"secret file {path}: larger than {SECRET_FILE_BYTES_MAX} bytes")
    secret = raw.strip()
    if not secret:
        raise SecretFileError(f"secret file {path} is empty: refusing to run without authentication")
    if len(secret) < SECRET_BYTES_MIN:
        raise SecretFileError(
            f"secret file {path}: the secret has {len(secret)} bytes, at least {SECRET_BYTES_MIN} are needed"
        )
    return secret


@dataclass(frozen=True, slots=True)
class Deferred:
    """A handler's answer that is not ready yet: the server awaits ``answer``
    outside the connection's ordered queue, then sends what it returns (or
    the error it raises, as for a handler)."""

    answer: Awaitable[Any]


def close_unstarted(aw: Awaitable[Any]) -> None:
    """Close ``aw`` if it is a coroutine that never ran: nobody will await it
    now, and Python would warn "coroutine ... was never awaited"."""
    if inspect.iscoroutine(aw) and inspect.getcoroutinestate(aw) == inspect.CORO_CREATED:
        aw.close()


# Kafka clients default to 5 in-flight requests per connection and Kafka
# brokers queue 500 requests in all; a broker peer pipelines produce, fetch
# and commit calls on one connection, so 256 keeps it busy while bounding the
# handler tasks (and response buffers) one peer can make us hold.
REQUESTS_IN_FLIGHT_MAX_DEFAULT = 256
# Stays well under the common 1024 soft limit on open files, which a broker
# shares with LMDB and its object-store connections.
CONNECTIONS_MAX_DEFAULT = 512
# A connection that has not said hello holds a slot of connections_max; ten
# seconds is ample on any network where brokers talk to each other.
HANDSHAKE_TIMEOUT_MS_DEFAULT = 10_000
# Default bound on connect plus handshake, and on a call without its own
# timeout: Kafka's request.timeout.ms is 30 s as well.
RPC_TIMEOUT_MS_DEFAULT = 30_000
# Closing sends what is buffered (an error frame, a TLS close_notify); a peer
# that does not read must not hold up close() for longer than this.
CLOSE_FLUSH_MS = 1000
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


@dataclass(slots=True)
class RpcMetrics:
    """Counters for one server (all its connections) or one client.

    Mutable on purpose, unlike our records: the shell bumps them in place and
    an exporter reads them.  ``errors_by_code`` counts ERROR frames sent (by a
    server) or received (by a client), keyed by code name.
    """

    frames_in: int = 0
    frames_out: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    errors_by_code: dict[str, int] = field(default_factory=dict)
    # server only
    connections_open: int = 0
    connections_refused: int = 0
    # client only
    timeouts: int = 0
    late_responses_dropped: int = 0

    def count_error(self, code: int) -> None:
        name = code_name(code)
        self.errors_by_code[name] = self.errors_by_code.get(name, 0) + 1


async def _close_writer(writer: asyncio.StreamWriter) -> None:
    """Close, letting buffered bytes out for at most CLOSE_FLUSH_MS."""
    writer.close()
    try:
        async with asyncio.timeout(CLOSE_FLUSH_MS / 1000):
            await writer.wait_closed()
    except (TimeoutError, OSError):
        writer.transport.abort()


def _peer(writer: asyncio.StreamWriter) -> str:
    addr = writer.get_extra_info("peername")
    return f"{addr[0]}:{addr[1]}" if isinstance(addr, tuple) else str(addr)


# ------------------------------------------------------------------ server


class RpcServer:
    """Serves ``handlers`` (method name -> ``async def handler(body) -> answer``).

    A handler's return value becomes the RESPONSE body; raising
    :class:`RpcError` answers an ERROR with that code; any other exception is
    logged with the method name and answered with INTERNAL.  A method without
    a handler is answered with UNKNOWN_METHOD.

    ``secret``: if set, clients must prove it in the hello.  ``cluster_id``:
    this server's cluster, announced in the challenge; a hello naming another
    is refused with CLUSTER_MISMATCH.  ``ssl``: a server
    context; set ``verify_mode = CERT_REQUIRED`` (and load the CA) for mutual
    TLS.  ``port=0`` picks a free port, readable from ``.port`` after
    :meth:`start`.  Binds to loopback unless told otherwise.

    Limits: ``frame_bytes_max`` per frame (after the handshake; before it
    ``HANDSHAKE_FRAME_BYTES_MAX``), ``requests_in_flight_max`` per connection
    (at the limit the server stops reading that connection, which pushes back
    through TCP), ``connections_max`` (extra connections get
    TOO_MANY_CONNECTIONS and are closed), ``handshake_timeout_ms``.
    """

    def __init__(
        self,
        handlers: Mapping[str, Handler],
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        secret: bytes | None = None,
        cluster_id: uuid.UUID | None = None,
        ssl: ssl_module.SSLContext | None = None,
        frame_bytes_max: int = RPC_FRAME_BYTES_MAX,
        ordered_methods: frozenset[str] = frozenset(),
        connections_max: int = CONNECTIONS_MAX_DEFAULT,
        requests_in_flight_max: int = REQUESTS_IN_FLIGHT_MAX_DEFAULT,
        handshake_timeout_ms: int = HANDSHAKE_TIMEOUT_MS_DEFAULT,
    ) -> None:
        if secret is not None and not secret:
            # Fail closed: an empty configured secret must not quietly mean "no auth".
            raise ValueError("secret must be non-empty bytes, or None for no authentication")
        assert frame_bytes_max > 0 and connections_max > 0 and requests_in_flight_max > 0 and handshake_timeout_ms > 0
        self.handlers = dict(handlers)
        self.host = host
        self.port = port
        self.secret = secret
        self.cluster_id = cluster_id
        self.ssl = ssl
        self.frame_bytes_max = frame_bytes_max
        self.ordered_methods = ordered_methods
        self.connections_max = connections_max
        self.requests_in_flight_max = requests_in_flight_max
        self.handshake_timeout_ms = handshake_timeout_ms
        self.metrics = RpcMetrics()
        self._server: asyncio.Server | None = None
        self._connections: dict[asyncio.Task[None], _ServerConnection] = {}
        self._refusals: set[asyncio.Task[None]] = set()
        self._closing = False

    async def start(self) -> None:
        """Listen; afterwards ``.port`` is the bound port."""
        assert self._server is None, "started twice"
        self._server = await asyncio.start_server(
            self._accept,
            self.host,
            self.port,
            ssl=self.ssl,
            # The TLS handshake comes before ours; the same bound keeps a silent
            # peer from holding a socket for asyncio's default 60 s.
            ssl_handshake_timeout=self.handshake_timeout_ms / 1000 if self.ssl is not None else None,
        )
        self.port = self._server.sockets[0].getsockname()[1]
        log.info(
            "rpc server listening host=%s port=%d tls=%s auth=%s",
            self.host,
            self.port,
            self.ssl is not None,
            self.secret is not None,
        )

    async def close(self) -> None:
        """Stop listening, close every connection and cancel its handlers.

        Clients see SHUTTING_DOWN (best effort) and then the close; their
        pending calls fail with :class:`RpcConnectionError`.
        """
        self._closing = True
        if self._server is not None:
            self._server.close()
        for conn in list(self._connections.values()):
            conn.send_error(CONNECTION_REQUEST_ID, "", RpcErrorCode.SHUTTING_DOWN, "server closing")
        tasks = [*self._connections, *self._refusals]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # Each connection runs in a task of ours rather than the one
        # start_server makes of a coroutine callback: close() cancels it, and
        # Python 3.11's streams log a cancelled callback task as an error.
        conn = _ServerConnection(self, reader, writer)
        if self._closing or self.metrics.connections_open >= self.connections_max:
            refusal = asyncio.create_task(self._refuse(conn))
            self._refusals.add(refusal)
            refusal.add_done_callback(self._refusals.discard)
            return
        self.metrics.connections_open += 1
        task = asyncio.create_task(conn.serve())
        self._connections[task] = conn
        task.add_done_callback(self._connection_done)

    def _connection_done(self, task: asyncio.Task[None]) -> None:
        self.metrics.connections_open -= 1
        del self._connections[task]

    async def _refuse(self, conn: _ServerConnection) -> None:
        self.metrics.connections_refused += 1
        if self._closing:
            conn.refuse(RpcErrorCode.SHUTTING_DOWN, "server closing")
        else:
            conn.refuse(
                RpcErrorCode.TOO_MANY_CONNECTIONS, f"server is at its limit of {self.connections_max} connections"
            )
        await _close_writer(conn.writer)


class _ServerConnection:
    """One accepted connection: handshake, then a read loop dispatching frames."""

    def __init__(self, server: RpcServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.server = server
        self.metrics = server.metrics
        self.reader = reader
        self.writer = writer
        self.peer = _peer(writer)
        self.decoder = FrameDecoder(min(HANDSHAKE_FRAME_BYTES_MAX, server.frame_bytes_max))
        self.nonce = secrets.token_bytes(CHALLENGE_NONCE_BYTES)
        self.authenticated = False
        # Released when a request's answer is written; the read loop waits on
        # it before dispatching, so a peer cannot have more than this running.
        self.in_flight = asyncio.Semaphore(server.requests_in_flight_max)
        self.tasks: set[asyncio.Task[None]] = set()
        # FIFO for ordered methods; bounded by in_flight, since every queued
        # request holds a slot.
        self.ordered: asyncio.Queue[Frame] = asyncio.Queue()
        self.ordered_worker: asyncio.Task[None] | None = None

    async def serve(self) -> None:
        try:
            challenge = challenge_body(self.nonce, self.server.cluster_id)
            self.send(encode_frame(Kind.REQUEST, CONNECTION_REQUEST_ID, CHALLENGE_METHOD, challenge))
            async with asyncio.timeout(self.server.handshake_timeout_ms / 1000) as handshake_deadline:
                while True:
                    data = await self.reader.read(READ_CHUNK_BYTES)
                    if not data:
                        return
                    self.metrics.bytes_in += len(data)
                    try:
                        frames = self.decoder.feed(data)
                    except FrameTooLargeError as e:
                        self.refuse(RpcErrorCode.FRAME_TOO_LARGE, str(e))
                        return
                    except FrameError as e:
                        self.refuse(RpcErrorCode.BAD_FRAME, str(e))
                        return
                    for frame in frames:
                        self.metrics.frames_in += 1
                        if not self.authenticated:
                            if not self.hello(frame):
                                return
                            handshake_deadline.reschedule(None)
                            continue
                        if not await self.dispatch(frame):
                            return
        except TimeoutError as e:
            if self.authenticated:  # a socket-level ETIMEDOUT, not our handshake deadline
                log.info("rpc connection lost peer=%s: %s", self.peer, e)
            else:
                self.refuse(RpcErrorCode.HANDSHAKE_REQUIRED, "no hello within the handshake timeout")
        except OSError as e:  # reset, TLS alerts: the peer's problem, not ours
            log.info("rpc connection lost peer=%s: %s", self.peer, e)
        finally:
            # The read loop has stopped; nothing more will be answered here.
            for t in self.tasks:
                t.cancel()
            if self.ordered_worker is not None:
                self.ordered_worker.cancel()
            pending = [*self.tasks, *([self.ordered_worker] if self.ordered_worker else [])]
            await asyncio.gather(*pending, return_exceptions=True)
            await _close_writer(self.writer)

    def hello(self, frame: Frame) -> bool:
        try:
            check_hello(frame, self.server.secret, self.nonce, self.server.cluster_id)
        except RpcError as e:
            self.refuse(e.code, e.message, frame.method)
            return False
        self.authenticated = True
        self.decoder.frame_bytes_max = self.server.frame_bytes_max
        self.send(encode_frame(Kind.RESPONSE, frame.request_id, HELLO_METHOD, {"version": PROTOCOL_VERSION}))
        log.debug("rpc hello ok peer=%s", self.peer)
        return True

    async def dispatch(self, frame: Frame) -> bool:
        """Start serving one request; False if the connection must close."""
        try:
            check_version(frame)
        except RpcError as e:
            self.refuse(e.code, e.message, frame.method)
            return False
        if frame.kind != Kind.REQUEST or frame.request_id == CONNECTION_REQUEST_ID:
            # Request id 0 is the connection's own; answering it would look
            # like a connection-level error to the client.
            self.refuse(
                RpcErrorCode.BAD_FRAME,
                f"clients send requests with non-zero ids, got {frame.kind.name} id={frame.request_id}",
            )
            return False
        await self.in_flight.acquire()
        if frame.method in self.server.ordered_methods:
            if self.ordered_worker is None:
                self.ordered_worker = asyncio.create_task(self.run_ordered())
            self.ordered.put_nowait(frame)
        else:
            task = asyncio.create_task(self.run(frame))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
        return True

    async def run_ordered(self) -> None:
        while True:
            frame = await self.ordered.get()
            await self.run(frame)

    async def run(self, frame: Frame, deferred: Deferred | None = None) -> None:
        """Run the handler (or await its deferred answer) and write the answer;
        never raises but CancelledError."""
        release = True
        try:
            handler = self.server.handlers.get(frame.method)
            if handler is None and deferred is None:
                self.send_error(
                    frame.request_id, frame.method, RpcErrorCode.UNKNOWN_METHOD, f"no method {frame.method!r}"
                )
                return
            try:
                if deferred is not None:
                    answer = await deferred.answer
                else:
                    assert handler is not None
                    answer = await handler(frame.body)
                    if isinstance(answer, Deferred):
                        # The in-flight slot passes to the task that answers.
                        release = False
                        task = asyncio.create_task(self.run(frame, answer))
                        self.tasks.add(task)
                        task.add_done_callback(self.tasks.discard)
                        # Cancelled before its first step (the connection
                        # closed at once), it never awaits the answer.
                        pending_answer = answer.answer
                        task.add_done_callback(lambda _t: close_unstarted(pending_answer))
                        return
            except RpcError as e:
                self.send_error(frame.request_id, frame.method, e.code, e.message)
                return
            except Exception as e:
                log.exception("rpc handler failed method=%s peer=%s", frame.method, self.peer)
                self.send_error(
                    frame.request_id, frame.method, RpcErrorCode.INTERNAL, f"{frame.method}: {type(e).__name__}: {e}"
                )
                return
            try:
                data = encode_frame(
                    Kind.RESPONSE, frame.request_id, frame.method, answer, frame_bytes_max=self.server.frame_bytes_max
                )
            except FrameTooLargeError as e:
                log.error("rpc response too large method=%s peer=%s: %s", frame.method, self.peer, e)
                self.send_error(frame.request_id, frame.method, RpcErrorCode.RESPONSE_TOO_LARGE, str(e))
                return
            except (TypeError, ValueError, OverflowError) as e:
                log.exception("rpc response not encodable method=%s peer=%s", frame.method, self.peer)
                self.send_error(
                    frame.request_id,
                    frame.method,
                    RpcErrorCode.INTERNAL,
                    f"{frame.method}: response not encodable: {e}",
                )
                return
            self.send(data)
            # Waiting for the socket while holding the in-flight slot carries a
            # slow reader's back-pressure to our read loop.
            with contextlib.suppress(OSError):
                await self.writer.drain()
        finally:
            if release:
                self.in_flight.release()

    def send(self, data: bytes) -> None:
        if self.writer.is_closing():
            return
        self.metrics.frames_out += 1
        self.metrics.bytes_out += len(data)
        self.writer.write(data)

    def send_error(self, request_id: int, method: str, code: int, message: str) -> None:
        self.metrics.count_error(code)
        self.send(encode_error(request_id, method, code, message))

    def refuse(self, code: int, message: str, method: str = "") -> None:
        """Log and answer a protocol violation or refusal, with the
        connection's own request id; the caller then closes."""
        log.warning("rpc closing connection peer=%s code=%s: %s", self.peer, code_name(code), message)
        self.send_error(CONNECTION_REQUEST_ID, method, code, message)


# ------------------------------------------------------------------ client


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
        server_cluster_id: uuid.UUID | None = None,
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._decoder = decoder
        self.timeout_ms = timeout_ms
        self.frame_bytes_max = frame_bytes_max
        self.metrics = metrics
        # The cluster the server named in its challenge (None: it named none).
        self.server_cluster_id = server_cluster_id
        self.peer = _peer(writer)
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
        ``server_cluster_id`` afterwards.

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
                hello = encode_frame(
                    Kind.REQUEST, CONNECTION_REQUEST_ID, HELLO_METHOD, hello_body(secret, nonce, cluster_id)
                )
                writer.write(hello)
                metrics.frames_out += 1
                metrics.bytes_out += len(hello)
                answer = await cls._next_frame(reader, decoder, metrics, received)
                check_version(answer)
                if answer.kind == Kind.ERROR:
                    code, message = answer.body
                    metrics.count_error(code)
                    raise RpcError(code, message)
                if answer.kind != Kind.RESPONSE or answer.request_id != CONNECTION_REQUEST_ID:
                    raise FrameError(f"expected the hello response, got {answer.kind.name} {answer.method!r:.60}")
            decoder.frame_bytes_max = frame_bytes_max
        except BaseException as e:
            if writer is not None:
                await _close_writer(writer)
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
        data = encode_frame(Kind.REQUEST, request_id, method, body, frame_bytes_max=self.frame_bytes_max)
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
        await _close_writer(self._writer)

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
        if frame.version != PROTOCOL_VERSION:
            return f"server switched to protocol version {frame.version}"
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
        else:
            future.set_result(frame.body)
        return None

    def _connection_lost(self, error: RpcConnectionError) -> None:
        if self._lost is None:
            self._lost = error
        for future in self._pending.values():
            if not future.done():
                future.set_exception(RpcConnectionError(str(self._lost)))
