"""A broker's Kafka listener: TCP connections speaking Kafka's protocol.

Requests on one connection are handled concurrently but answered in the
order they came, as Kafka requires (a client matches answers by order as
well as by correlation id).  They are also started in order: an idempotent
producer's pipelined produce requests reach the broker's WAL buffer in the
order they were sent.

What a bad peer can cost is bounded:

* a size prefix above ``request_bytes_max`` (Kafka's
  socket.request.max.bytes) or a request that does not parse closes that
  connection, with one log line; other connections never notice;
* at most ``requests_in_flight_max`` requests per connection are read
  ahead of their answers (reading pauses);
* ``connections_per_ip_max`` (Kafka's max.connections.per.ip) and
  ``connections_max`` refuse further connections at accept;
* a connection with nothing in flight for ``connections_max_idle_ms``
  (Kafka's connections.max.idle.ms) is closed;
* a connection that has not finished TLS and SASL within the security's
  ``auth_deadline_ms`` is closed, and before SASL completes a request
  frame is at most ``UNAUTHENTICATED_FRAME_BYTES_MAX``.

A listener binds one server per :class:`ListenerSpec` (Kafka's
``listeners``), all sharing the broker's APIs; each connection's
:class:`AuthGate` (partlog.kafka_front.authn) decides what reaches them.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry

from partlog.acl.source import AclSource
from partlog.kafka.errors import Errors
from partlog.kafka_front.apis import SUPPORTED_VERSIONS, FrontConfig, KafkaApis
from partlog.kafka_front.authn import AuthGate, Step
from partlog.kafka_front.authz import AuthzCollector
from partlog.kafka_front.codec import (
    API_KEYS,
    API_VERSIONS_KEY,
    REQUEST_BYTES_MAX_DEFAULT,
    FrameError,
    FrameReader,
    Request,
    build,
    encode_response,
    error_body,
    parse_request,
    read_buffered,
    response_class,
)
from partlog.kafka_front.fetch_api import FetchSessionCollector
from partlog.kafka_front.handler import Session
from partlog.kafka_front.listener_metrics import ListenerMetrics, TxnCollector
from partlog.kafka_front.listeners import ListenerSecurity, ListenerSpec, SecurityProtocol
from partlog.kafka_front.port import BrokerPort
from partlog.kafka_front.principal import NoMatchingRule, cert_principal
from partlog.kafka_front.scram_apis import CredentialAdmin, NoCredentialAdmin, ScramApis
from partlog.kafka_front.txn_coordinator import STEPS as TXN_STEPS

log = logging.getLogger(__name__)

# Kafka's connections.max.idle.ms default (10 minutes).
CONNECTIONS_MAX_IDLE_MS_DEFAULT = 600_000
CONNECTIONS_PER_IP_MAX_DEFAULT = 1_000
CONNECTIONS_MAX_DEFAULT = 2_000
# Requests read ahead of their answers on one connection (librdkafka keeps
# at most 5 produce requests in flight with idempotence; consumers 1 fetch).
REQUESTS_IN_FLIGHT_MAX_DEFAULT = 100
READ_CHUNK_BYTES = 64 * 1024
# Bytes of requests one listener holds at once, read or being read
# (Kafka's queued.max.request.bytes, unbounded there): a connection whose
# next request does not fit waits, unread, until answers free room.
REQUEST_BYTES_IN_FLIGHT_MAX_DEFAULT = 256 * 1024 * 1024
# Every request but Produce (its batches) and JoinGroup / SyncGroup (members'
# protocol metadata and assignments) is small; a large one is refused before
# it is read, since decoding it runs on the broker's event loop and costs
# some 20 times its size in objects.
GROUP_REQUEST_BYTES_MAX_DEFAULT = 8 * 1024 * 1024
OTHER_REQUEST_BYTES_MAX_DEFAULT = 1024 * 1024
_PRODUCE_KEY, _FETCH_KEY, _JOIN_GROUP_KEY, _SYNC_GROUP_KEY = 0, 1, 11, 14
# The share of that budget the requests of one client address may hold.
REQUEST_BYTES_PER_IP_MAX_DEFAULT = REQUEST_BYTES_IN_FLIGHT_MAX_DEFAULT // 4
# Items of an answer (entries of its lists, and of their entries' lists)
# above which it is built and encoded in a worker thread: about 25 us an
# item on this machine, so 2,000 hold the event loop some 50 ms.  In a
# thread the interpreter's switch interval (5 ms) hands the loop back while
# it runs, so one Metadata answer naming 19,000 topics (half a second of
# encoding) no longer delays every other connection by as much (issue 29).
ENCODE_IN_THREAD_ITEMS = 2_000
# A request whose size is known must arrive within this (a trickled or
# half-sent request would otherwise hold its bytes of the budget).
FRAME_DEADLINE_MS_DEFAULT = 30_000


@dataclass(frozen=True, slots=True)
class ListenerLimits:
    request_bytes_max: int = REQUEST_BYTES_MAX_DEFAULT
    group_request_bytes_max: int = GROUP_REQUEST_BYTES_MAX_DEFAULT
    other_request_bytes_max: int = OTHER_REQUEST_BYTES_MAX_DEFAULT
    connections_max: int = CONNECTIONS_MAX_DEFAULT
    connections_per_ip_max: int = CONNECTIONS_PER_IP_MAX_DEFAULT
    connections_max_idle_ms: int = CONNECTIONS_MAX_IDLE_MS_DEFAULT
    requests_in_flight_max: int = REQUESTS_IN_FLIGHT_MAX_DEFAULT
    request_bytes_in_flight_max: int = REQUEST_BYTES_IN_FLIGHT_MAX_DEFAULT
    request_bytes_per_ip_max: int = REQUEST_BYTES_PER_IP_MAX_DEFAULT
    frame_deadline_ms: int = FRAME_DEADLINE_MS_DEFAULT

    def __post_init__(self) -> None:
        for name in self.__slots__:
            v = getattr(self, name)
            if type(v) is not int or v <= 0:
                raise ValueError(f"Kafka listener limit {name} must be a positive integer, got {v!r}")
        for name in ("request_bytes_max", "group_request_bytes_max", "other_request_bytes_max"):
            if getattr(self, name) < 8:
                raise ValueError(f"Kafka listener limit {name} must be >= 8, got {getattr(self, name)}")

    def kafka_configs(self) -> dict[str, str]:
        """The limits Kafka has broker configs for, by those names (DescribeConfigs)."""
        return {
            "socket.request.max.bytes": str(self.request_bytes_max),
            "max.connections": str(self.connections_max),
            "max.connections.per.ip": str(self.connections_per_ip_max),
            "connections.max.idle.ms": str(self.connections_max_idle_ms),
        }

    def request_bytes_max_for(self, api_key: int) -> int:
        if api_key == _PRODUCE_KEY:
            return self.request_bytes_max
        if api_key in (_JOIN_GROUP_KEY, _SYNC_GROUP_KEY):
            return min(self.group_request_bytes_max, self.request_bytes_max)
        return min(self.other_request_bytes_max, self.request_bytes_max)


class KafkaListener:
    """The Kafka listener of one broker.  ``await start()``, ``await close()``."""

    def __init__(
        self,
        broker: BrokerPort,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        config: FrontConfig | None = None,
        limits: ListenerLimits | None = None,
        registry: CollectorRegistry | None = None,
        acl_source: AclSource | None = None,
        listeners: tuple[ListenerSpec, ...] | None = None,
        security: ListenerSecurity | None = None,
    ) -> None:
        self.limits = limits or ListenerLimits()
        # Without ``listeners``: one PLAINTEXT listener on host:port.
        self.specs = listeners or (ListenerSpec(SecurityProtocol.PLAINTEXT, host, port),)
        self.security = security or ListenerSecurity()
        self.security.check(self.specs)
        self._mapper = self.security.mapper()
        self._ssl = self.security.tls.context() if self.security.tls is not None else None
        self._entropy = broker.entropy
        self.clock = broker.clock  # idle and frame deadlines
        self.apis = KafkaApis(
            broker, config, {**self.limits.kafka_configs(), **self.security.kafka_configs()}, acl_source
        )
        creds = self.security.credentials
        admin = creds if isinstance(creds, CredentialAdmin) else NoCredentialAdmin()
        self.apis.handlers.update(ScramApis(admin, self.apis.authz).handlers())  # KIP-554
        self.host = self.specs[0].host
        self.port = self.specs[0].port  # the first listener's (0 until bound)
        # Each listener's bound port, by its name.
        self.ports: dict[str, int] = {}
        registry = registry if registry is not None else CollectorRegistry()
        self.metrics = ListenerMetrics(registry, ENCODE_IN_THREAD_ITEMS)
        self.metrics.registry.register(TxnCollector(self.apis.txns))
        self.metrics.registry.register(FetchSessionCollector(self.apis.fetches.sessions))
        if self.apis.authz.enabled:
            self.metrics.registry.register(AuthzCollector(self.apis.authz))
        steps = {step: self.metrics.txn_step_seconds.labels(step) for step in TXN_STEPS}
        self.apis.txns.observe_step = lambda step, seconds: steps[step].observe(seconds)
        self._servers: list[asyncio.Server] = []
        self._per_ip: dict[str, int] = {}
        self._open = 0
        # The request byte budget (request_bytes_in_flight_max).
        self.request_bytes = 0
        self._ip_bytes: dict[str, int] = {}
        self._room = asyncio.Condition()
        self.metrics.request_bytes_max.set(self.limits.request_bytes_in_flight_max)
        self._tasks: set[asyncio.Task[Any]] = set()
        # Set once the broker is registered and serving (``serve``): until
        # then a connection waits unread, as Kafka's acceptors do until
        # startup ends; an answer from a broker missing from its own
        # metadata left librdkafka's admin client waiting for a controller.
        self._serving = asyncio.Event()

    async def start(self, *, serve: bool = True) -> None:
        """Bind every listener; requests are read from ``serve()`` on
        (now, unless ``serve`` is False)."""
        try:
            for spec in self.specs:
                tls = spec.protocol.tls
                server = await asyncio.start_server(
                    functools.partial(self._accept, spec),
                    spec.host,
                    spec.port,
                    limit=READ_CHUNK_BYTES,
                    ssl=self._ssl if tls else None,
                    ssl_handshake_timeout=self.security.auth_deadline_ms / 1000 if tls else None,
                )
                self._servers.append(server)
                self.ports[spec.name] = server.sockets[0].getsockname()[1]
        except OSError:
            for server in self._servers:
                server.close()
            self._servers = []
            raise
        self.port = self.ports[self.specs[0].name]
        self.apis.groups.start()
        self.apis.txns.start()
        if serve:
            self.serve()

    def serve(self) -> None:
        self._serving.set()

    async def close(self) -> None:
        await self.apis.groups.close()
        await self.apis.txns.close()
        for server in self._servers:
            server.close()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for server in self._servers:
            with contextlib.suppress(Exception):
                await server.wait_closed()
        self._servers = []

    async def reserve(self, size: int, ip: str) -> None:
        """Take ``size`` bytes of the request budget for a request from
        ``ip``, waiting for room in the listener's budget and in the share
        one address may hold (a request larger than either waits until
        nothing else holds it), so a few connections that claim large
        requests and trickle them cannot starve everyone else."""
        budget = self.limits.request_bytes_in_flight_max
        share = self.limits.request_bytes_per_ip_max

        def fits() -> bool:
            mine = self._ip_bytes.get(ip, 0)
            total_ok = not self.request_bytes or self.request_bytes + size <= budget
            return total_ok and (not mine or mine + size <= share)

        async with self._room:
            if not fits():
                self.metrics.request_bytes_waits.inc()
                await self._room.wait_for(fits)
            self.request_bytes += size
            self._ip_bytes[ip] = self._ip_bytes.get(ip, 0) + size
            self.metrics.request_bytes.set(self.request_bytes)

    async def release(self, size: int, ip: str) -> None:
        if size:
            async with self._room:
                self.request_bytes -= size
                left = self._ip_bytes[ip] - size
                if left:
                    self._ip_bytes[ip] = left
                else:
                    del self._ip_bytes[ip]
                self.metrics.request_bytes.set(self.request_bytes)
                self._room.notify_all()

    async def _accept(self, spec: ListenerSpec, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        ip = str(peer[0]) if peer else "?"
        refusal = None
        if self._open >= self.limits.connections_max:
            refusal = "connections_max"
        elif self._per_ip.get(ip, 0) >= self.limits.connections_per_ip_max:
            refusal = "connections_per_ip_max"
        if refusal is not None:
            self.metrics.connections_refused.labels(refusal).inc()
            log.warning("kafka listener: refused a connection from %s (%s reached)", ip, refusal)
            writer.close()
            return
        self._open += 1
        self._per_ip[ip] = self._per_ip.get(ip, 0) + 1
        self.metrics.connections.inc()
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            conn = _Connection(self, spec, reader, writer, f"{ip}:{peer[1] if peer else '?'}")
            await self._serving.wait()
            if conn.tls_principal(writer.get_extra_info("ssl_object")):
                await conn.run()
        except asyncio.CancelledError:
            pass
        finally:
            if task is not None:
                self._tasks.discard(task)
            self._open -= 1
            left = self._per_ip[ip] - 1
            if left:
                self._per_ip[ip] = left
            else:
                del self._per_ip[ip]
            self.metrics.connections.dec()
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


class _Connection:
    def __init__(
        self,
        listener: KafkaListener,
        spec: ListenerSpec,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        peer: str,
    ) -> None:
        self.listener = listener
        self.reader = reader
        self.writer = writer
        self.session = Session(peer, listener=spec.name)
        self.spec = spec
        deadline = listener.clock.monotonic() + listener.security.auth_deadline_ms / 1000
        self.gate = AuthGate(spec.protocol.sasl, listener.security, lambda: listener._entropy.token_hex(24), deadline,
                             listener.clock.monotonic)  # fmt: skip
        self.ip = peer.rsplit(":", 1)[0]
        self.frames = FrameReader(listener.limits.request_bytes_max)
        # Answers in request order: each entry is (request, its handler task).
        # Answers in request order: (budget bytes, the handler's task).
        self.answers: asyncio.Queue[tuple[int, asyncio.Task[bytes | None]] | None] = asyncio.Queue()
        self.in_flight = asyncio.Semaphore(listener.limits.requests_in_flight_max)
        self.pending = 0  # requests read and not yet answered
        # One Fetch at a time per connection, from its start until its answer
        # is written (Kafka serves a connection one request at a time): a
        # client that pipelines fetches and reads no answers holds one
        # answer's bytes, not a hundred.
        self.fetch_slot = asyncio.Semaphore(1)
        self._fetch_holders: set[asyncio.Task[Any]] = set()

    def tls_principal(self, ssl_object: ssl.SSLObject | None) -> bool:
        """On an SSL listener, the principal from the client's certificate
        (ANONYMOUS without one); False, and the connection closes, when no
        mapping rule applies to its subject (Kafka fails it the same way)."""
        if self.spec.protocol is not SecurityProtocol.SSL or ssl_object is None:
            return True
        try:
            self.session.principal = cert_principal(self.listener._mapper, ssl_object.getpeercert())
        except NoMatchingRule as e:
            self.listener.metrics.auth_failed.labels(self.spec.name).inc()
            log.info("kafka listener: closing %s: %s", self.session.peer, e)
            return False
        return True

    async def run(self) -> None:
        sender = asyncio.ensure_future(self._send_loop())
        reading = asyncio.ensure_future(self._read_loop())
        try:
            await asyncio.wait({sender, reading}, return_when=asyncio.FIRST_COMPLETED)
            if reading.done():
                # Answers already being worked on still go out (a produce
                # that reached the WAL buffer is answered), unless the peer
                # is gone.
                self.answers.put_nowait(None)
                with contextlib.suppress(Exception, asyncio.CancelledError):
                    await sender
            else:  # the peer stopped reading answers: stop reading requests
                reading.cancel()
                with contextlib.suppress(Exception, asyncio.CancelledError):
                    await reading
        finally:
            for t in (sender, reading):
                if not t.done():
                    t.cancel()
                    with contextlib.suppress(Exception, asyncio.CancelledError):
                        await t
            # Requests never answered give their budget back.
            while not self.answers.empty():
                item = self.answers.get_nowait()
                if item is not None:
                    size, task = item
                    task.cancel()
                    self._free_fetch_slot(task)
                    await self.listener.release(size, self.ip)

    async def _read_loop(self) -> None:
        limits = self.listener.limits
        idle_s = limits.connections_max_idle_ms / 1000
        reserved = 0  # budget bytes taken for the request in progress
        # A request's first byte starts its deadline (a peer that sends one
        # byte and stops must not hold the connection for good).
        frame_deadline: float | None = None
        try:
            while True:
                try:
                    size = self.frames.frame_size()
                    key = self.frames.api_key()
                    if size is not None and key is not None and not reserved:
                        allowed = limits.request_bytes_max_for(key)
                        if self.gate.frame_bytes_max is not None:
                            allowed = min(allowed, self.gate.frame_bytes_max)
                        if size > allowed:
                            raise FrameError(f"{API_KEYS.get(key, f'api key {key}')} request of {size} bytes "
                                             f"> {allowed} (the listener's limit for it)")  # fmt: skip
                        await self.listener.reserve(size, self.ip)
                        reserved = size
                    frame = self.frames.next_frame()
                except FrameError as e:
                    self.listener.metrics.bad_requests.inc()
                    log.warning("kafka listener: closing connection %s: %s", self.session.peer, e)
                    return
                if frame is None:
                    if self.frames.buffered and frame_deadline is None:
                        frame_deadline = self.listener.clock.monotonic() + limits.frame_deadline_ms / 1000
                    wait_s = (
                        idle_s if frame_deadline is None else max(0.0, frame_deadline - self.listener.clock.monotonic())
                    )
                    if self.gate.deadline is not None:
                        wait_s = min(wait_s, max(0.0, self.gate.deadline - self.listener.clock.monotonic()))
                    try:
                        async with asyncio.timeout(wait_s):
                            data = await self.reader.read(READ_CHUNK_BYTES)
                    except TimeoutError:
                        # A loop stalled past the deadline runs its timer before the
                        # read of bytes already here: they came in time, take them.
                        data = await read_buffered(self.reader, READ_CHUNK_BYTES)
                        if data:
                            self.frames.feed(data)
                            continue
                        if self.gate.deadline is not None and self.listener.clock.monotonic() >= self.gate.deadline:
                            self.listener.metrics.auth_deadline_closed.inc()
                            log.info("kafka listener: closing %s: not authenticated within %d ms",
                                     self.session.peer, self.listener.security.auth_deadline_ms)  # fmt: skip
                            return
                        if frame_deadline is not None:
                            self.listener.metrics.frame_deadline_closed.inc()
                            log.info("kafka listener: closing %s: a request did not arrive in %d ms",
                                     self.session.peer, limits.frame_deadline_ms)  # fmt: skip
                            return
                        if self.pending == 0:
                            self.listener.metrics.idle_closed.inc()
                            log.info("kafka listener: closing idle connection %s", self.session.peer)
                            return
                        continue
                    except (ConnectionError, OSError):
                        return
                    if not data:
                        return
                    self.frames.feed(data)
                    continue
                if self.gate.raw_tokens:
                    # A raw SASL token (after SaslHandshake v0): one at a time.
                    frame_deadline = None
                    await self.in_flight.acquire()
                    self.pending += 1
                    task = asyncio.ensure_future(self._raw_answer(frame))
                    self.answers.put_nowait((reserved, task))
                    reserved = 0
                    await asyncio.wait({task})
                    if self.gate.close_after_answer:
                        self.listener.metrics.auth_failed.labels(self.spec.name).inc()
                        return
                    self.frames.size_min = 1 if self.gate.raw_tokens else 8
                    continue
                try:
                    req = parse_request(frame, SUPPORTED_VERSIONS)
                except FrameError as e:
                    self.listener.metrics.bad_requests.inc()
                    log.warning("kafka listener: closing connection %s: %s", self.session.peer, e)
                    return
                frame_deadline = None
                step = self.gate.classify(req)
                if step is Step.EXPIRED:
                    self.listener.metrics.expired_sessions_closed.inc()
                    return
                if step is Step.CLOSE:
                    self.listener.metrics.auth_failed.labels(self.spec.name).inc()
                    return
                await self.in_flight.acquire()
                self.pending += 1
                # Started now, in arrival order: the handler runs to its first
                # suspension before the next request is read.  Its budget
                # bytes go back once its answer is written.
                task = asyncio.ensure_future(self._answer(req) if step is Step.SERVE else self._gate_answer(req))
                self.answers.put_nowait((reserved, task))
                reserved = 0
                if step is Step.ANSWER:
                    # The handshake is one request at a time: the next one is
                    # judged in the state this one leaves.
                    await asyncio.wait({task})
                    if self.gate.close_after_answer:
                        self.listener.metrics.auth_failed.labels(self.spec.name).inc()
                        return
                    self.frames.size_min = 1 if self.gate.raw_tokens else 8
                await asyncio.sleep(0)
        finally:
            await self.listener.release(reserved, self.ip)

    async def _gate_answer(self, req: Request) -> bytes | None:
        done = self.gate.reauthentications
        try:
            data = await self.gate.answer(req)
        except Exception:
            log.exception("kafka listener: %s from %s failed", req.api_name, self.session.peer)
            self.gate.close_after_answer = True
            return None
        if self.gate.reauthentications != done:
            self.listener.metrics.reauthentications.inc()
        if self.gate.principal is not None:
            self.session.principal = self.gate.principal
        return data

    async def _raw_answer(self, token: bytes) -> bytes | None:
        done = self.gate.reauthentications
        try:
            data = await self.gate.raw_answer(token)
        except Exception:
            log.exception("kafka listener: a raw SASL token from %s failed", self.session.peer)
            data = None
        if self.gate.reauthentications != done:
            self.listener.metrics.reauthentications.inc()
        if data is None:
            self.gate.close_after_answer = True
        if self.gate.principal is not None:
            self.session.principal = self.gate.principal
        return data

    async def _answer(self, req: Request) -> bytes | None:
        metrics = self.listener.metrics
        apis = self.listener.apis
        try:
            if req.unsupported is not None:
                metrics.requests_unsupported.inc()
                log.info("kafka listener: %s from %s (client %r)", req.unsupported, self.session.peer, req.client_id)
                if req.api_key == API_VERSIONS_KEY:
                    body = await apis.api_versions(req, None, self.session)
                    return encode_response(req, build(response_class(API_VERSIONS_KEY, 0), body))
                return encode_response(req, error_body(response_class(req.api_key, req.api_version),
                                                       int(Errors.UNSUPPORTED_VERSION)))  # fmt: skip
            handler = apis.handlers[req.api_key]
            if req.api_key == _FETCH_KEY:
                await self.fetch_slot.acquire()
                task = asyncio.current_task()
                assert task is not None
                self._fetch_holders.add(task)
            answer = await handler(req, req.body, self.session)
            metrics.requests.labels(API_KEYS.get(req.api_key, str(req.api_key))).inc()
            if answer is None:
                return None
            cls = response_class(req.api_key, req.api_version)
            if answer_items(answer) > ENCODE_IN_THREAD_ITEMS:
                metrics.encoded_in_thread.inc()
                return await asyncio.to_thread(_encode, req, cls, answer)
            return encode_response(req, build(cls, answer))
        except asyncio.CancelledError:
            raise
        except Exception:
            # A handler bug fails this request only: an error answer, logged.
            log.exception("kafka listener: %s v%d from %s failed", req.api_name, req.api_version, self.session.peer)
            try:
                return encode_response(req, error_body(response_class(req.api_key, req.api_version),
                                                       int(Errors.UNKNOWN_SERVER_ERROR)))  # fmt: skip
            except Exception:
                return None

    async def _send_loop(self) -> None:
        while True:
            item = await self.answers.get()
            if item is None:
                return
            size, task = item
            try:
                data = await task
                if data is not None:
                    self.writer.write(data)
                    try:
                        async with asyncio.timeout(self.listener.limits.frame_deadline_ms / 1000):
                            await self.writer.drain()
                    except TimeoutError:
                        log.info("kafka listener: closing %s: it reads no answers", self.session.peer)
                        return
            finally:
                self.pending -= 1
                self.in_flight.release()
                self._free_fetch_slot(task)
                await self.listener.release(size, self.ip)

    def _free_fetch_slot(self, task: asyncio.Task[Any]) -> None:
        if task in self._fetch_holders:
            self._fetch_holders.discard(task)
            self.fetch_slot.release()


def answer_items(answer: Mapping[str, Any]) -> int:
    """The entries of ``answer``'s lists and of its entries' lists: what
    building and encoding it costs, roughly, in time on the event loop."""
    n = 0
    for v in answer.values():
        if isinstance(v, list):
            n += len(v)
            for item in v:
                if isinstance(item, Mapping):
                    n += sum(len(x) for x in item.values() if isinstance(x, list))
    return n


def _encode(req: Request, cls: type, answer: Mapping[str, Any]) -> bytes:
    return encode_response(req, build(cls, answer))


__all__ = ["ENCODE_IN_THREAD_ITEMS", "KafkaListener", "ListenerLimits", "ListenerMetrics", "answer_items"]
