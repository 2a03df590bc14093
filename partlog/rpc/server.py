"""The inter-broker RPC server over asyncio: :class:`RpcServer`.

Frames, the handshake rules and error codes live in ``partlog.rpc.frame``;
the client is ``partlog.rpc.client``; this module only moves bytes and
schedules handlers.

Contract in short:

* One TCP (optionally TLS) connection carries many concurrent calls, matched
  by request id; responses may go out in any order.
* On each connection, the server runs requests concurrently, except methods
  in ``ordered_methods``, which run one at a time in arrival order (commits
  to a leader must be applied in WAL-file order).  An ordered handler may
  return :class:`Deferred`: the ordered part is done (the next request may
  start) and the answer is sent when the deferred awaitable completes (an
  acks=all commit is appended in order, then waits for replication while
  later commits are appended).
* Nothing but the handshake is processed before the client proved the shared
  secret (if the server has one).
* With an ``authorize`` hook, each request's peer (its principal and host,
  ``partlog.rpc.peer``) must be allowed the method: checked after the body
  passed its schema and before the handler runs (Kafka's order); refused,
  that request is answered CLUSTER_AUTHORIZATION_FAILED and the connection
  stays.  Without one, nothing is asked and nothing changes.
* A peer breaking the protocol costs only its own connection: the server logs
  it, answers an ERROR frame if it can, and closes that connection.
* Every limit (``partlog.rpc.server_limits``) is counted in ``metrics``.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import ssl as ssl_module
import struct
import uuid
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from typing import Any

from partlog.kafka.principal_rules import NoMatchingRule, PrincipalMapper
from partlog.rpc.frame import (
    CHALLENGE_METHOD,
    CHALLENGE_NONCE_BYTES,
    CONNECTION_REQUEST_ID,
    DECODED_BYTES_PER_ELEMENT,
    ENVELOPE_BYTES_MAX,
    HANDSHAKE_FRAME_BYTES_MAX,
    HELLO_METHOD,
    HELLO_SCHEMA,
    LENGTH_PREFIX_BYTES,
    METHOD_CHARS_MAX,
    RPC_FRAME_BYTES_MAX,
    RPC_VERSION_MIN,
    Frame,
    FrameError,
    FrameTooLargeError,
    InvalidBody,
    Kind,
    RpcError,
    RpcErrorCode,
    challenge_body,
    check_hello,
    check_version,
    code_name,
    decode_envelope,
    decode_payload,
    encode_error,
    encode_frame,
)
from partlog.rpc.handlers import PEER_VERSION, Handler, peer_version
from partlog.rpc.metrics import RpcMetrics
from partlog.rpc.peer import Authorize, RpcPeer, peer_principal
from partlog.rpc.schema import DecodeLimits, Schema, body_limits
from partlog.rpc.server_limits import (
    CONNECTIONS_MAX_DEFAULT,
    CONNECTIONS_PER_IP_MAX_DEFAULT,
    FRAME_DEADLINE_MS_DEFAULT,
    HANDSHAKE_TIMEOUT_MS_DEFAULT,
    HANDSHAKES_MAX_DEFAULT,
    IDLE_TIMEOUT_MS_DEFAULT,
    REQUEST_BYTES_IN_FLIGHT_MAX_DEFAULT,
    REQUESTS_IN_FLIGHT_MAX_DEFAULT,
)
from partlog.rpc.streams import close_writer, peer_name
from partlog.rpc.wire import WireError
from partlog.runtime import SYSTEM_CLOCK, SYSTEM_ENTROPY, Clock, Entropy

_LENGTH = struct.Struct(">I")
_HELLO_LIMITS = HELLO_SCHEMA.limits()

__all__ = ["Deferred", "Handler", "RpcServer", "close_unstarted", "peer_version"]

log = logging.getLogger(__name__)


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


class RpcServer:
    """Serves ``handlers`` (method name -> ``async def handler(body) -> answer``).

    A handler's return value becomes the RESPONSE body; raising
    :class:`RpcError` answers an ERROR with that code; any other exception is
    logged with the method name and answered with INTERNAL.  A method without
    a handler is answered with UNKNOWN_METHOD.

    ``schemas`` (method name -> :class:`partlog.rpc.schema.Schema`) declare
    what each method accepts: the body is decoded under the schema's limits
    and checked against it before the handler runs; a violation answers
    BAD_REQUEST for that request only.  A handled method without a schema is
    decoded under the frame's own limits.

    ``secret``: if set, clients must prove it in the hello.  ``cluster_id``:
    this server's cluster, announced in the challenge; a hello naming another
    is refused with CLUSTER_MISMATCH.  ``ssl``: a server
    context; set ``verify_mode = CERT_REQUIRED`` (and load the CA) for mutual
    TLS.  ``port=0`` picks a free port, readable from ``.port`` after
    :meth:`start`.  Binds to loopback unless told otherwise.

    ``authorize``: whether a peer may call a method (see the module's
    contract); the peer's principal comes from its certificate mapped by
    ``principal_mapper`` (Kafka's ``ssl.principal.mapping.rules``; DEFAULT
    when None), ``User:ANONYMOUS`` without TLS.

    Limits (each counted in ``metrics``): ``frame_bytes_max`` per frame
    (after the handshake; before it ``HANDSHAKE_FRAME_BYTES_MAX``),
    ``requests_in_flight_max`` per connection and
    ``request_bytes_in_flight_max`` for the whole server (at either limit
    the server stops reading, which pushes back through TCP),
    ``connections_max``, ``connections_per_ip_max`` and ``handshakes_max``
    (extra connections get TOO_MANY_CONNECTIONS and are closed),
    ``handshake_timeout_ms`` (to complete the hello), ``frame_deadline_ms``
    (to complete a started frame) and ``idle_timeout_ms`` (an authenticated
    connection with nothing in flight).
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
        schemas: Mapping[str, Schema] | None = None,
        frame_bytes_max: int = RPC_FRAME_BYTES_MAX,
        ordered_methods: frozenset[str] = frozenset(),
        connections_max: int = CONNECTIONS_MAX_DEFAULT,
        connections_per_ip_max: int = CONNECTIONS_PER_IP_MAX_DEFAULT,
        handshakes_max: int = HANDSHAKES_MAX_DEFAULT,
        requests_in_flight_max: int = REQUESTS_IN_FLIGHT_MAX_DEFAULT,
        request_bytes_in_flight_max: int = REQUEST_BYTES_IN_FLIGHT_MAX_DEFAULT,
        handshake_timeout_ms: int = HANDSHAKE_TIMEOUT_MS_DEFAULT,
        frame_deadline_ms: int = FRAME_DEADLINE_MS_DEFAULT,
        idle_timeout_ms: int = IDLE_TIMEOUT_MS_DEFAULT,
        authorize: Authorize | None = None,
        principal_mapper: PrincipalMapper | None = None,
        clock: Clock = SYSTEM_CLOCK,
        entropy: Entropy = SYSTEM_ENTROPY,
    ) -> None:
        # Idle and frame deadlines on the clock's monotonic time; challenge
        # nonces from the entropy (a simulation hands in seeded ones).
        self.clock = clock
        self.entropy = entropy
        if secret is not None and not secret:
            # Fail closed: an empty configured secret must not quietly mean "no auth".
            raise ValueError("secret must be non-empty bytes, or None for no authentication")
        for name, value in (
            ("frame_bytes_max", frame_bytes_max),
            ("connections_max", connections_max),
            ("connections_per_ip_max", connections_per_ip_max),
            ("handshakes_max", handshakes_max),
            ("requests_in_flight_max", requests_in_flight_max),
            ("request_bytes_in_flight_max", request_bytes_in_flight_max),
            ("handshake_timeout_ms", handshake_timeout_ms),
            ("frame_deadline_ms", frame_deadline_ms),
            ("idle_timeout_ms", idle_timeout_ms),
        ):
            if type(value) is not int or value <= 0:
                raise ValueError(f"RpcServer {name} must be a positive integer, got {value!r}")
        self.handlers = dict(handlers)
        self.schemas = dict(schemas or {})
        self.host = host
        self.port = port
        self.secret = secret
        self.cluster_id = cluster_id
        self.ssl = ssl
        self.frame_bytes_max = frame_bytes_max
        self.ordered_methods = ordered_methods
        self.connections_max = connections_max
        self.connections_per_ip_max = connections_per_ip_max
        self.handshakes_max = handshakes_max
        self.requests_in_flight_max = requests_in_flight_max
        self.request_bytes_in_flight_max = request_bytes_in_flight_max
        self.handshake_timeout_ms = handshake_timeout_ms
        self.frame_deadline_ms = frame_deadline_ms
        self.idle_timeout_ms = idle_timeout_ms
        self.authorize = authorize
        self.principal_mapper = principal_mapper or PrincipalMapper.parse("DEFAULT")
        self.metrics = RpcMetrics()
        self._server: asyncio.Server | None = None
        self._connections: dict[asyncio.Task[None], _ServerConnection] = {}
        self._per_ip: dict[str, int] = {}
        self._refusals: set[asyncio.Task[None]] = set()
        self._closing = False
        self._room_freed = asyncio.Event()
        # Decoding limits per method, computed once (schemas are immutable).
        self._limits = {m: sch.limits() for m, sch in self.schemas.items()}
        self._unknown_limits = DecodeLimits(0, 0, 0, 0, 1)

    def limits_for(self, kind: Kind, method: str) -> DecodeLimits:
        """A request body's decoding limits: its method's schema's, the
        frame's for a handled method without one, nothing for a method
        nobody handles (it is answered UNKNOWN_METHOD unread)."""
        if kind != Kind.REQUEST:
            return self._unknown_limits
        if method == HELLO_METHOD:
            return _HELLO_LIMITS
        limits = self._limits.get(method)
        if limits is not None:
            return limits
        if method in self.handlers:
            return body_limits(None, self.frame_bytes_max)
        return self._unknown_limits

    def frame_cost(self, method: str, length: int) -> int:
        """What a request frame may cost in memory, before it is read: its
        bytes, and what its body may decode to (one object per byte at most,
        and no more than its method's schema allows)."""
        elements = min(length, self.limits_for(Kind.REQUEST, method).elements_max)
        return length + elements * DECODED_BYTES_PER_ELEMENT

    async def reserve(self, cost: int) -> None:
        """Wait for room in ``request_bytes_in_flight_max`` and take ``cost``
        of it; a frame larger than the whole budget waits until nothing else
        is in flight (so it is never refused, and never starves)."""
        m = self.metrics

        def fits() -> bool:
            return (
                m.request_bytes_in_flight == 0 or m.request_bytes_in_flight + cost <= self.request_bytes_in_flight_max
            )

        if not fits():
            m.request_bytes_waits += 1
            while not fits():
                await self._room_freed.wait()
        m.request_bytes_in_flight += cost

    def release(self, cost: int) -> None:
        if cost == 0:
            return
        self.metrics.request_bytes_in_flight -= cost
        assert self.metrics.request_bytes_in_flight >= 0, self.metrics.request_bytes_in_flight
        # Wake every waiter once; each checks again whether its frame fits now.
        self._room_freed.set()
        self._room_freed = asyncio.Event()

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
        m = self.metrics
        refusal_reason = ""
        if self._closing:
            refusal_reason = "server closing"
        elif m.connections_open >= self.connections_max:
            refusal_reason = f"server is at its limit of {self.connections_max} connections"
        elif self._per_ip.get(conn.ip, 0) >= self.connections_per_ip_max:
            refusal_reason = f"{conn.ip} is at its limit of {self.connections_per_ip_max} connections"
        elif m.handshakes_open >= self.handshakes_max:
            refusal_reason = f"server is at its limit of {self.handshakes_max} connections in the handshake"
        if refusal_reason:
            refusal = asyncio.create_task(self._refuse(conn, refusal_reason))
            self._refusals.add(refusal)
            refusal.add_done_callback(self._refusals.discard)
            return
        m.connections_open += 1
        m.handshakes_open += 1
        self._per_ip[conn.ip] = self._per_ip.get(conn.ip, 0) + 1
        task = asyncio.create_task(conn.serve())
        self._connections[task] = conn
        task.add_done_callback(self._connection_done)

    def _connection_done(self, task: asyncio.Task[None]) -> None:
        conn = self._connections.pop(task)
        self.metrics.connections_open -= 1
        if not conn.authenticated:
            self.metrics.handshakes_open -= 1
        left = self._per_ip[conn.ip] - 1
        if left:
            self._per_ip[conn.ip] = left
        else:
            del self._per_ip[conn.ip]

    async def _refuse(self, conn: _ServerConnection, reason: str) -> None:
        self.metrics.connections_refused += 1
        code = RpcErrorCode.SHUTTING_DOWN if self._closing else RpcErrorCode.TOO_MANY_CONNECTIONS
        conn.refuse(code, reason)
        await close_writer(conn.writer)


class _IdleError(Exception):
    """An authenticated connection had nothing in flight for idle_timeout_ms."""


class _ServerConnection:
    """One accepted connection: handshake, then a read loop dispatching frames.

    Frames are read whole, one at a time: the 4-byte length, the envelope
    (the method), room for the frame's cost in the server's budget, then the
    rest, within the frame deadline.  A peer that stalls mid-frame, floods
    frames or sends bombs costs its own connection and bounded memory."""

    def __init__(self, server: RpcServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.server = server
        self.metrics = server.metrics
        self.reader = reader
        self.writer = writer
        self.peer = peer_name(writer)
        addr = writer.get_extra_info("peername")
        self.ip = str(addr[0]) if isinstance(addr, tuple) else str(addr)
        self.nonce = server.entropy.token_bytes(CHALLENGE_NONCE_BYTES)
        self.authenticated = False
        # The protocol version of every frame: the lowest we speak until the
        # hello agreed on one (a version 1 client checks the challenge's).
        self.version = RPC_VERSION_MIN
        # Who the peer is, once the hello passed (only with an authorize hook).
        self.who: RpcPeer | None = None
        # Released when a request's answer is written; the read loop waits on
        # it before reading the next frame, so a peer cannot have more than
        # this running.
        self.in_flight = asyncio.Semaphore(server.requests_in_flight_max)
        self.requests_in_flight = 0
        self.last_activity = self.server.clock.monotonic()
        self.tasks: set[asyncio.Task[None]] = set()
        # FIFO for ordered methods; bounded by in_flight, since every queued
        # request holds a slot.
        self.ordered: asyncio.Queue[tuple[Frame, int]] = asyncio.Queue()
        self.ordered_worker: asyncio.Task[None] | None = None

    async def serve(self) -> None:
        server = self.server
        try:
            body = challenge_body(self.nonce, server.cluster_id)
            self.send(encode_frame(Kind.REQUEST, CONNECTION_REQUEST_ID, CHALLENGE_METHOD, body, version=self.version))
            try:
                async with asyncio.timeout(server.handshake_timeout_ms / 1000):
                    # Strangers get one small frame, decoded under tight limits.
                    frame, cost = await self.read_frame(min(HANDSHAKE_FRAME_BYTES_MAX, server.frame_bytes_max))
            except TimeoutError:
                self.refuse(RpcErrorCode.HANDSHAKE_REQUIRED, "no hello within the handshake timeout")
                return
            if frame is None or not self.hello(frame):
                return
            while True:
                await self.in_flight.acquire()
                try:
                    got = await self.read_frame(server.frame_bytes_max, idle=True)
                except BaseException:
                    self.in_flight.release()
                    raise
                frame, cost = got
                if frame is None:
                    self.in_flight.release()
                    return
                if not self.dispatch(frame, cost):
                    return
        except _IdleError:
            self.metrics.idle_closed += 1
            log.info("rpc closing idle connection peer=%s after %d ms", self.peer, server.idle_timeout_ms)
            self.send_error(CONNECTION_REQUEST_ID, "", RpcErrorCode.SHUTTING_DOWN, "idle connection closed")
        except (OSError, asyncio.IncompleteReadError) as e:  # reset, TLS alerts, EOF: the peer's business
            log.debug("rpc connection lost peer=%s: %s", self.peer, e)
        finally:
            # The read loop has stopped; nothing more will be answered here.
            for t in self.tasks:
                t.cancel()
            if self.ordered_worker is not None:
                self.ordered_worker.cancel()
            pending = [*self.tasks, *([self.ordered_worker] if self.ordered_worker else [])]
            await asyncio.gather(*pending, return_exceptions=True)
            # Frames queued for the ordered worker never ran: give their room back.
            while not self.ordered.empty():
                _, cost = self.ordered.get_nowait()
                server.release(cost)
            await close_writer(self.writer)

    async def _read_prefix(self, idle: bool) -> bytes | None:
        """The first byte of the next frame (None on a clean EOF).  While
        nothing is in flight, waiting longer than idle_timeout_ms closes an
        authenticated connection."""
        server = self.server
        while True:
            try:
                async with asyncio.timeout(server.idle_timeout_ms / 1000 if idle else None):
                    first = await self.reader.read(1)
                    return first or None
            except TimeoutError:
                quiet_s = self.server.clock.monotonic() - self.last_activity
                if self.requests_in_flight == 0 and quiet_s * 1000 >= server.idle_timeout_ms:
                    raise _IdleError from None
                # Something is in flight (a parked long-poll, an acks=all
                # commit), or an answer went out meanwhile: not idle.

    async def read_frame(self, frame_bytes_max: int, *, idle: bool = False) -> tuple[Frame | None, int]:
        """The next frame and the budget it holds (0 before the handshake:
        those frames are tiny).  ``(None, 0)`` when the connection must close
        (the peer closed, or broke the protocol: answered and logged here)."""
        server = self.server
        first = await self._read_prefix(idle)
        if first is None:
            return None, 0
        self.last_activity = self.server.clock.monotonic()
        deadline_s = server.frame_deadline_ms / 1000
        try:
            async with asyncio.timeout(deadline_s):
                (length,) = _LENGTH.unpack(first + await self.reader.readexactly(LENGTH_PREFIX_BYTES - 1))
                if length > frame_bytes_max:
                    self.refuse(RpcErrorCode.FRAME_TOO_LARGE, str(FrameTooLargeError(length, frame_bytes_max)))
                    return None, 0
                head = await self.reader.readexactly(min(length, ENVELOPE_BYTES_MAX))
                try:
                    _, kind, _, method, _ = decode_envelope(head)
                except FrameError as e:
                    self.refuse(RpcErrorCode.BAD_FRAME, str(e))
                    return None, 0
        except TimeoutError:
            self._missed_deadline()
            return None, 0
        cost = 0
        if self.authenticated:
            cost = server.frame_cost(method, length) if kind == Kind.REQUEST else length
            # Waiting for room reads nothing more: the peer's bytes wait in TCP.
            await server.reserve(cost)
        try:
            try:
                async with asyncio.timeout(deadline_s):
                    rest = await self.reader.readexactly(length - len(head))
            except TimeoutError:
                self._missed_deadline()
                server.release(cost)
                return None, 0
            self.metrics.bytes_in += LENGTH_PREFIX_BYTES + length
            self.metrics.frames_in += 1
            try:
                payload = bytearray(head)
                payload += rest
                del rest  # a large frame is held once, not twice
                frame = decode_payload(payload, server.limits_for)
            except FrameError as e:
                self.refuse(RpcErrorCode.BAD_FRAME, str(e))
                server.release(cost)
                return None, 0
        except BaseException:
            server.release(cost)
            raise
        return frame, cost

    def _missed_deadline(self) -> None:
        self.metrics.frame_deadlines_missed += 1
        self.refuse(
            RpcErrorCode.BAD_FRAME,
            f"frame not completed within the frame deadline of {self.server.frame_deadline_ms} ms",
        )

    def hello(self, frame: Frame) -> bool:
        try:
            if isinstance(frame.body, InvalidBody):
                raise RpcError(RpcErrorCode.HANDSHAKE_REQUIRED, f"first frame must be a hello: {frame.body.reason}")
            version = check_hello(frame, self.server.secret, self.nonce, self.server.cluster_id)
            if self.server.authorize is not None:
                self.who = RpcPeer(self._principal(), self.ip)
        except RpcError as e:
            self.refuse(e.code, e.message, frame.method)
            return False
        self.authenticated = True
        self.metrics.handshakes_open -= 1
        self.version = version
        self.send(encode_frame(Kind.RESPONSE, frame.request_id, HELLO_METHOD, {"version": version}, version=version))
        log.debug("rpc hello ok peer=%s version=%d", self.peer, version)
        return True

    def _principal(self) -> str:
        try:
            return peer_principal(self.writer.get_extra_info("ssl_object"), self.server.principal_mapper)
        except NoMatchingRule as e:
            raise RpcError(RpcErrorCode.AUTH_FAILED, str(e)) from None

    def dispatch(self, frame: Frame, cost: int) -> bool:
        """Start serving one request (it holds an in-flight slot and ``cost``
        of the server's budget until answered); False if the connection must
        close (both released here then)."""
        try:
            check_version(frame, self.version)
        except RpcError as e:
            self.refuse(e.code, e.message, frame.method)
            self._done(cost)
            return False
        if frame.kind != Kind.REQUEST or frame.request_id == CONNECTION_REQUEST_ID:
            # Request id 0 is the connection's own; answering it would look
            # like a connection-level error to the client.
            self.refuse(
                RpcErrorCode.BAD_FRAME,
                f"clients send requests with non-zero ids, got {frame.kind.name} id={frame.request_id}",
            )
            self._done(cost)
            return False
        self.requests_in_flight += 1
        if frame.method in self.server.ordered_methods:
            if self.ordered_worker is None:
                self.ordered_worker = asyncio.create_task(self.run_ordered())
            self.ordered.put_nowait((frame, cost))
        else:
            task = asyncio.create_task(self.run(frame, cost))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
        return True

    def _done(self, cost: int) -> None:
        self.in_flight.release()
        self.server.release(cost)

    async def run_ordered(self) -> None:
        while True:
            frame, cost = await self.ordered.get()
            await self.run(frame, cost)

    def _checked_body(self, frame: Frame) -> Any:
        """The request's body, checked against its method's schema; raises
        RpcError(BAD_REQUEST) naming the field."""
        body = frame.body
        if isinstance(body, InvalidBody):
            raise RpcError(RpcErrorCode.BAD_REQUEST, f"{frame.method}: {body.reason}")
        schema = self.server.schemas.get(frame.method)
        if schema is not None:
            try:
                schema.check(body, frame.method)
            except WireError as e:
                raise RpcError(RpcErrorCode.BAD_REQUEST, str(e)) from e
        return body

    def _check_authorized(self, method: str) -> None:
        authorize = self.server.authorize
        if authorize is None:
            return
        assert self.who is not None
        if not authorize(self.who, method):
            raise RpcError(
                RpcErrorCode.CLUSTER_AUTHORIZATION_FAILED, f"{self.who.principal} may not call {method} on this server"
            )

    async def run(self, frame: Frame, cost: int, deferred: Deferred | None = None) -> None:
        """Run the handler (or await its deferred answer) and write the answer;
        never raises but CancelledError."""
        release = True
        try:
            handler = self.server.handlers.get(frame.method)
            if handler is None and deferred is None:
                self.send_error(
                    frame.request_id, frame.method, RpcErrorCode.UNKNOWN_METHOD, f"no method {frame.method!r:.300}"
                )
                return
            try:
                if deferred is not None:
                    answer = await deferred.answer
                else:
                    assert handler is not None
                    body = self._checked_body(frame)
                    self._check_authorized(frame.method)
                    PEER_VERSION.set(self.version)
                    answer = await handler(body)
                    if isinstance(answer, Deferred):
                        # The in-flight slot and the budget pass to the task that answers.
                        release = False
                        task = asyncio.create_task(self.run(frame, cost, answer))
                        self.tasks.add(task)
                        task.add_done_callback(self.tasks.discard)
                        # Cancelled before its first step (the connection
                        # closed at once), it never awaits the answer.
                        pending_answer = answer.answer
                        task.add_done_callback(lambda _t: close_unstarted(pending_answer))
                        return
            except RpcError as e:
                if e.code == RpcErrorCode.BAD_REQUEST:
                    self.metrics.bad_requests += 1
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
                    Kind.RESPONSE,
                    frame.request_id,
                    frame.method,
                    answer,
                    frame_bytes_max=self.server.frame_bytes_max,
                    version=self.version,
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
                self.requests_in_flight -= 1
                self.last_activity = self.server.clock.monotonic()
                self._done(cost)

    def send(self, data: bytes) -> None:
        if self.writer.is_closing():
            return
        self.metrics.frames_out += 1
        self.metrics.bytes_out += len(data)
        self.writer.write(data)

    def send_error(self, request_id: int, method: str, code: int, message: str) -> None:
        self.metrics.count_error(code)
        self.send(encode_error(request_id, method, code, message, self.version))

    def refuse(self, code: int, message: str, method: str = "") -> None:
        """Log and answer a protocol violation or refusal, with the
        connection's own request id; the caller then closes."""
        log.warning("rpc closing connection peer=%s code=%s: %s", self.peer, code_name(code), message)
        self.send_error(CONNECTION_REQUEST_ID, method[:METHOD_CHARS_MAX], code, message)
