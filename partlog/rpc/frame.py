"""Inter-broker RPC framing and handshake rules, sans-IO.

Wire format (every frame, both directions)::

    bytes 0..4   payload length, u32 big-endian (the prefix itself not counted)
    bytes 4..    msgpack payload: [protocol_version, kind, request_id, method, body]

``kind`` is :class:`Kind` (REQUEST, RESPONSE, ERROR).  ``body`` is any msgpack
value (bytes and str are distinct: packed with ``use_bin_type=True``, unpacked
with ``raw=False``); an ERROR's body is ``[code, message]``.  Map keys must be
str or bytes (msgpack's ``strict_map_key``): int keys would let a peer build
maps whose keys all hash alike, and every body we define uses str keys.

The five-element envelope is frozen across protocol versions, so that a peer
speaking another version can always read the VERSION_MISMATCH error that ends
the connection; only what goes inside ``body`` may change with the version.

Handshake (request id 0 belongs to the connection itself)::

    server -> client   REQUEST  0 "challenge" {"version": lo, "versions": [lo, hi],
                                               "nonce": 32 random bytes, "cluster": 16 bytes}
    client -> server   REQUEST  0 "hello"     {"version": v, "versions": [lo, hi],
                                               "auth": HMAC-SHA256(secret, nonce) or b"",
                                               "cluster": 16 bytes}
    server -> client   RESPONSE 0 "hello"     {"version": v}
                    or ERROR    0 "hello"     [AUTH_FAILED | VERSION_MISMATCH | CLUSTER_MISMATCH | ..., message],
                                              then close

Versions (docs/design/upgrades.md): each side speaks a range of protocol
versions, ``RPC_VERSION_MIN`` to ``RPC_VERSION``; the connection runs at
``v``, the highest version both speak, and every frame after the hello
carries it in its envelope.  A side whose range does not overlap the
peer's is refused with VERSION_MISMATCH naming both ranges.  Version 1
(partlog up to commit e739335) knows no range: its challenge and hello
say ``{"version": 1}`` alone, its server decodes a hello under limits
that admit no other key, and it checks every envelope against 1.  So the
challenge's envelope and ``version`` say ``RPC_VERSION_MIN``; a client
sends ``versions`` only to a server whose challenge had them; a peer
without ``versions`` speaks exactly its ``version``; the hello and its
answer carry ``v`` in their envelopes, and the server's errors before the
hello ``RPC_VERSION_MIN``.

The server's fresh nonce makes a recorded hello useless on another connection.
The secret authenticates the client only; it neither hides nor protects the
stream, which is what TLS is for.

``cluster`` is the cluster id (a UUID's 16 bytes), absent for a side that
has none (a plain client, an embedder's broker without one).  Each side
checks the other's: a server refuses a hello naming another cluster
(CLUSTER_MISMATCH), and a client that knows its cluster refuses a challenge
naming another before it says hello.  Brokers, the controller and walmgr all
send theirs, so two clusters on one network never talk to each other, and
walmgr never takes another cluster's leaders' word about an object (design
brief, deletion safety 0).  After the handshake, an ERROR with request
id 0 is about the connection as a whole (bad frame, shutting down) and is
followed by the close.

Nothing here touches a socket: :func:`encode_frame` returns bytes and
:class:`FrameDecoder` turns received bytes into :class:`Frame` records, so the
asyncio shells (``partlog.rpc.server``, ``partlog.rpc.client``) and the tests
drive the same code.
"""

from __future__ import annotations

import hashlib
import hmac
import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

import msgpack

from partlog.rpc.schema import BODY_ELEMENTS_MAX, Bytes, DecodeLimits, Int, Map, Tuple

# Protocol versions this side speaks (the envelope's first element):
#   1  partlog up to e739335: one version in the hello, unknown fields refused.
#   2  a version range in the handshake; a request's unknown optional fields
#      are skipped (partlog.rpc.schema.Map).  Fields added since e739335 are
#      sent only at 2 and above.
#   3  create_topics' manual replica "assignments" and its refusals' messages
#      (partlog.controller.topic_create.ASSIGNMENTS_RPC_VERSION); KIP-966: a
#      registration's unclean_shutdown, a partition's ELR.
#   4  a replica fetch's sparse answer: "omit_quiet" asks for it, "rows_of"
#      names the partitions it kept (partlog.rpc.replica_rows).
#   5  replica fetch sessions: a request's "session" and "forgotten", an
#      answer's "session", "session_size" and "session_error".
RPC_VERSION_MIN = 1
RPC_VERSION = 5
# The first version whose handshake carries a range ("versions").
RANGE_VERSION = 2

# Kafka's socket.request.max.bytes is 100 MiB.  Our largest frames are produce
# requests and fetch responses carrying record batches; a broker's WAL buffer
# is a few MiB, so 64 MiB leaves room while bounding what one peer can make us
# buffer.  Both ends of a connection should use the same value.
RPC_FRAME_BYTES_MAX = 64 * 1024 * 1024
# Until the handshake succeeds, a peer is a stranger: a hello is under 100
# bytes, so an unauthenticated peer may not make us buffer more than this.
HANDSHAKE_FRAME_BYTES_MAX = 4096
# Method names are short identifiers; a long one is garbage, not a request.
METHOD_CHARS_MAX = 256
# Error messages travel to the peer and into its logs: enough for a stack
# trace's last line, not a way to ship megabytes.
ERROR_MESSAGE_CHARS_MAX = 2000
CHALLENGE_NONCE_BYTES = 32
# Request ids are msgpack unsigned integers; a client counting from 1 never
# gets near this.
REQUEST_ID_MAX = (1 << 64) - 1
# The envelope [version, kind, request_id, method] fits in this many bytes
# (a method name of METHOD_CHARS_MAX characters, 4 bytes each at most, and
# three small integers): the server reads it before the rest of a frame, to
# know the method and so what the rest may cost.
ENVELOPE_BYTES_MAX = 4 * METHOD_CHARS_MAX + 64
# Bytes of Python objects one decoded msgpack object costs at most (an empty
# list: 56 bytes and its slot in its parent's list): what a budget of
# decoded objects is worth in memory.
DECODED_BYTES_PER_ELEMENT = 64
# Responses and errors have no schema here (their decoders check them): a
# response body may hold this many objects per byte at most, and at least
# BODY_ELEMENTS_MAX.  Legal answers (replica fetch entries, ~14 bytes an
# object) stay below it; a hostile peer's empty-list bomb (1 byte an object)
# is cut off at an eighth of its size.
RESPONSE_BYTES_PER_ELEMENT_MIN = 8

LENGTH_PREFIX_BYTES = 4
_LENGTH = struct.Struct(">I")

CONNECTION_REQUEST_ID = 0
CHALLENGE_METHOD = "challenge"
HELLO_METHOD = "hello"
# The hello's shape, for its decoding limits (check_hello checks the values).
_VERSION = Int(0, 1 << 31)
HELLO_SCHEMA = Map(
    required={"version": _VERSION, "auth": Bytes(64)},
    optional={"cluster": Bytes(16), "versions": Tuple(("lo", _VERSION), ("hi", _VERSION))},
)


class Kind(IntEnum):
    REQUEST = 0
    RESPONSE = 1
    ERROR = 2


class RpcErrorCode(IntEnum):
    """Codes of ERROR frames.

    These are the RPC layer's own, not Kafka's: Kafka error codes travel
    inside response bodies.  Numbers are part of the protocol; never reuse one.
    """

    BAD_FRAME = 1  # unparsable payload or wrong envelope; the connection closes
    FRAME_TOO_LARGE = 2  # length prefix above the receiver's limit; the connection closes
    VERSION_MISMATCH = 3  # the peer speaks another protocol version; the connection closes
    HANDSHAKE_REQUIRED = 4  # a request arrived before a successful hello; the connection closes
    AUTH_FAILED = 5  # hello's proof did not match the server's secret; the connection closes
    TOO_MANY_CONNECTIONS = 6  # the server is at connections_max; the connection closes
    SHUTTING_DOWN = 7  # the server is closing; the connection closes
    UNKNOWN_METHOD = 8  # no handler for the method; the connection stays up
    BAD_REQUEST = 9  # a handler refused the body's shape; the connection stays up
    INTERNAL = 10  # a handler failed unexpectedly (the server logged it); the connection stays up
    RESPONSE_TOO_LARGE = 11  # the handler's answer exceeds the frame limit; the connection stays up
    CLUSTER_MISMATCH = 12  # the peer belongs to another cluster; the connection closes
    # The peer's principal may not call the method (the server's authorizer,
    # partlog.rpc.peer); numbered as Kafka's CLUSTER_AUTHORIZATION_FAILED.
    # That request fails; the connection stays up.
    CLUSTER_AUTHORIZATION_FAILED = 31


class FrameError(ValueError):
    """Received bytes are not a valid frame.

    The stream is out of sync after this: the connection must be closed.
    """


class FrameTooLargeError(FrameError):
    """A frame's length exceeds the limit; raised from the 4-byte prefix alone,
    before any of the payload is buffered."""

    def __init__(self, frame_bytes: int, frame_bytes_max: int) -> None:
        super().__init__(f"frame of {frame_bytes} bytes exceeds the limit of {frame_bytes_max} bytes")
        self.frame_bytes = frame_bytes
        self.frame_bytes_max = frame_bytes_max


class RpcError(Exception):
    """An error with an :class:`RpcErrorCode` (or a peer's unknown int code).

    Handlers raise it to answer with that code; the handshake rules raise it
    to refuse a peer.
    """

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"{code_name(code)}: {message}")
        self.code = code
        self.message = message


def code_name(code: int) -> str:
    """The code's name, or its number if this version does not know it."""
    try:
        return RpcErrorCode(code).name
    except ValueError:
        return str(code)


@dataclass(frozen=True, slots=True)
class Frame:
    version: int
    kind: Kind
    request_id: int
    method: str
    body: Any


@dataclass(frozen=True, slots=True)
class InvalidBody:
    """The body of a frame whose envelope was fine but whose body broke the
    decoding limits or was not msgpack: only that request (or that call's
    answer) fails; the stream is still in sync, so the connection stays up."""

    reason: str


# Limits for one frame's body, by kind and method (the server's come from the
# methods' schemas); None: response_limits.
LimitsFor = Callable[[Kind, str], DecodeLimits]


def encode_frame(
    kind: Kind,
    request_id: int,
    method: str,
    body: Any,
    *,
    frame_bytes_max: int = RPC_FRAME_BYTES_MAX,
    version: int = RPC_VERSION,
) -> bytes:
    """Return one frame: length prefix and msgpack payload.

    Raises :class:`FrameTooLargeError` if the payload exceeds
    ``frame_bytes_max`` (the peer would refuse it and drop the connection, so
    the sender refuses first), and ``TypeError``/``OverflowError`` from msgpack
    if ``body`` holds something msgpack cannot encode.  ``version``: the
    connection's (the handshake's frames: see the module docstring).
    """
    assert 0 <= request_id <= REQUEST_ID_MAX, request_id
    assert len(method) <= METHOD_CHARS_MAX, method
    payload: bytes = msgpack.packb([version, int(kind), request_id, method, body], use_bin_type=True)
    if len(payload) > frame_bytes_max:
        raise FrameTooLargeError(len(payload), frame_bytes_max)
    return _LENGTH.pack(len(payload)) + payload


def encode_error(request_id: int, method: str, code: int, message: str, version: int = RPC_VERSION) -> bytes:
    """An ERROR frame; the message is cut to ``ERROR_MESSAGE_CHARS_MAX``."""
    body = [int(code), message[:ERROR_MESSAGE_CHARS_MAX]]
    return encode_frame(Kind.ERROR, request_id, method, body, version=version)


def decode_envelope(head: bytes | bytearray) -> tuple[int, Kind, int, str, int]:
    """``(version, kind, request_id, method, body offset)`` from the first
    bytes of a payload (``ENVELOPE_BYTES_MAX`` suffice); raises
    :class:`FrameError` naming what is wrong.  The version is not checked
    here: the envelope is the same in every version, and the caller decides
    what to answer a peer from another one."""
    unpacker = msgpack.Unpacker(
        raw=False,
        strict_map_key=True,
        max_buffer_size=max(1, len(head)),
        max_str_len=4 * METHOD_CHARS_MAX,
        max_bin_len=METHOD_CHARS_MAX,  # read, so that a bytes method is refused as such
        max_array_len=5,
        max_map_len=0,
        max_ext_len=0,
    )
    unpacker.feed(head)
    try:
        n = unpacker.read_array_header()
        if n != 5:
            raise FrameError(f"payload must be [version, kind, request_id, method, body], got an array of {n}")
        version, kind, request_id, method = (unpacker.unpack() for _ in range(4))
        offset = unpacker.tell()
    except FrameError:
        raise
    except msgpack.OutOfData:
        raise FrameError(f"payload does not start with an envelope of at most {len(head)} bytes") from None
    except Exception as e:  # msgpack raises half a dozen types (StackError, ValueError, ...)
        raise FrameError(f"payload is not a msgpack envelope: {type(e).__name__}: {e}") from e
    # `type(...) is int` because msgpack's true/false decode to bool, an int subclass.
    if type(version) is not int:
        raise FrameError(f"version must be an integer, got {type(version).__name__}")
    if type(kind) is not int or kind not in _KINDS:
        raise FrameError(f"kind must be 0 (request), 1 (response) or 2 (error), got {kind!r:.40}")
    if type(request_id) is not int or not 0 <= request_id <= REQUEST_ID_MAX:
        raise FrameError(f"request_id must be an unsigned 64-bit integer, got {request_id!r:.40}")
    if type(method) is not str or len(method) > METHOD_CHARS_MAX:
        raise FrameError(f"method must be a string of at most {METHOD_CHARS_MAX} characters, got {method!r:.60}")
    return version, Kind(kind), request_id, method, offset


def response_limits(kind: Kind, method: str, body_bytes: int) -> DecodeLimits:
    """Limits for a body without a schema here: an error's ``[code,
    message]``, or a response (its decoder checks the shape)."""
    if kind == Kind.ERROR:
        return DecodeLimits(2, 0, 4 * ERROR_MESSAGE_CHARS_MAX, 0, 3)
    elements = max(BODY_ELEMENTS_MAX, body_bytes // RESPONSE_BYTES_PER_ELEMENT_MIN)
    return DecodeLimits(body_bytes, body_bytes, body_bytes, body_bytes, elements)


class _Budget:
    """Counts decoded containers and their items; past ``limit`` objects the
    decoding stops (msgpack calls the hooks as each list or map completes,
    so at most one more container than the budget is ever built)."""

    __slots__ = ("count", "limit")

    def __init__(self, limit: int) -> None:
        self.count = 0
        self.limit = limit

    def list_hook(self, v: list[Any]) -> list[Any]:
        self.count += len(v) + 1
        if self.count > self.limit:
            raise FrameError(f"body holds more than {self.limit} objects")
        return v

    def object_hook(self, v: dict[str, Any]) -> dict[str, Any]:
        self.count += 2 * len(v) + 1
        if self.count > self.limit:
            raise FrameError(f"body holds more than {self.limit} objects")
        return v


def decode_body(data: bytes | memoryview, limits: DecodeLimits) -> Any:
    """One msgpack object under ``limits``; raises :class:`FrameError`.

    Memory: at most ``limits.elements_max`` objects are built, and strings
    and byte strings add at most ``len(data)``: a hostile body costs no more
    than a legal one of the same method could."""
    kwargs: dict[str, Any] = {}
    # A body cannot hold more objects than it has bytes: count only when the
    # budget is below that (the hooks cost a call per container).
    if len(data) > limits.elements_max:
        budget = _Budget(limits.elements_max)
        kwargs = {"list_hook": budget.list_hook, "object_hook": budget.object_hook}
    try:
        return msgpack.unpackb(
            data,
            raw=False,
            use_list=True,
            strict_map_key=True,
            max_array_len=limits.array_len_max,
            max_map_len=limits.map_len_max,
            max_str_len=limits.str_bytes_max,
            max_bin_len=limits.bin_bytes_max,
            max_ext_len=0,
            **kwargs,
        )
    except FrameError:
        raise
    except Exception as e:  # msgpack raises half a dozen types (ExtraData, StackError, UnicodeDecodeError, ...)
        raise FrameError(
            f"body of {len(data)} bytes is not valid msgpack within its limits: {type(e).__name__}: {e}"
        ) from e


def decode_payload(payload: bytes | bytearray, limits_for: LimitsFor | None = None) -> Frame:
    """Parse one frame's payload (without the length prefix).

    The envelope first (:func:`decode_envelope`; a bad one raises
    :class:`FrameError`: the connection must close), then the body under the
    limits ``limits_for(kind, method)`` gives (default
    :func:`response_limits`).  A body that breaks them, or is not msgpack,
    becomes :class:`InvalidBody` (only that request fails), except an
    ERROR frame's, which must be ``[code, message]``.
    """
    version, kind, request_id, method, offset = decode_envelope(payload[:ENVELOPE_BYTES_MAX])
    data = memoryview(payload)[offset:]  # no copy of a large body
    limits = limits_for(kind, method) if limits_for is not None else response_limits(kind, method, len(data))
    body: Any
    try:
        body = decode_body(data, limits)
    except FrameError as e:
        if kind == Kind.ERROR:
            raise
        body = InvalidBody(str(e))
    if kind == Kind.ERROR and (
        type(body) is not list or len(body) != 2 or type(body[0]) is not int or type(body[1]) is not str
    ):
        raise FrameError(f"an error's body must be [code, message], got {body!r:.80}")
    return Frame(version, kind, request_id, method, body)


_KINDS = frozenset(int(k) for k in Kind)


class FrameDecoder:
    """Turns a byte stream into frames, whatever the chunking.

    ``feed(data)`` returns the frames completed by ``data`` (zero or more; a
    partial frame waits for the next call).  It raises
    :class:`FrameTooLargeError` as soon as a length prefix above
    ``frame_bytes_max`` is seen, and :class:`FrameError` for a malformed
    payload.  After either, the stream has lost its framing: the decoder stays
    failed (every later ``feed`` raises) and frames completed earlier in the
    failing call are dropped, since the connection is closed anyway.

    ``frame_bytes_max`` may be changed between calls (the server raises it
    once the handshake succeeds).  ``limits_for`` gives each body's decoding
    limits (:func:`decode_payload`).
    """

    def __init__(self, frame_bytes_max: int = RPC_FRAME_BYTES_MAX, limits_for: LimitsFor | None = None) -> None:
        assert frame_bytes_max > 0
        self.frame_bytes_max = frame_bytes_max
        self.limits_for = limits_for
        self._buffer = bytearray()
        self._failed: FrameError | None = None

    @property
    def buffered_bytes(self) -> int:
        """Bytes received but not yet part of a complete frame."""
        return len(self._buffer)

    def feed(self, data: bytes) -> list[Frame]:
        if self._failed is not None:
            raise FrameError(f"stream already failed: {self._failed}")
        buf = self._buffer
        buf += data
        frames: list[Frame] = []
        start = 0
        try:
            while len(buf) - start >= LENGTH_PREFIX_BYTES:
                (length,) = _LENGTH.unpack_from(buf, start)
                if length > self.frame_bytes_max:
                    raise FrameTooLargeError(length, self.frame_bytes_max)
                end = start + LENGTH_PREFIX_BYTES + length
                if len(buf) < end:
                    break
                frames.append(decode_payload(bytes(buf[start + LENGTH_PREFIX_BYTES : end]), self.limits_for))
                start = end
        except FrameError as e:
            self._failed = e
            self._buffer = bytearray()
            raise
        # One deletion per call, not per frame: coalesced small frames would
        # otherwise make this quadratic in the chunk size.
        del buf[:start]
        return frames


# ---------------------------------------------------------------- handshake


CLUSTER_ID_BYTES = 16


@dataclass(frozen=True, slots=True)
class VersionRange:
    """The protocol versions one side speaks, ``lo`` to ``hi`` inclusive."""

    lo: int
    hi: int

    def __str__(self) -> str:
        return f"version {self.lo}" if self.lo == self.hi else f"versions {self.lo}-{self.hi}"


OUR_VERSIONS = VersionRange(RPC_VERSION_MIN, RPC_VERSION)


def negotiate(peer: VersionRange, who: str, ours: VersionRange = OUR_VERSIONS) -> int:
    """The highest version both ranges hold; ``RpcError(VERSION_MISMATCH)``
    naming both when they do not overlap."""
    version = min(peer.hi, ours.hi)
    if version < max(peer.lo, ours.lo):
        raise RpcError(RpcErrorCode.VERSION_MISMATCH, f"{who} speaks protocol {peer}, this side speaks {ours}")
    return version


def _versions_field(body: dict[str, Any], who: str) -> VersionRange:
    """A challenge's or hello's range: ``versions``, else (version 1, which
    knows no range) exactly its ``version``."""
    raw = body.get("versions")
    if raw is None:
        version = body.get("version")
        if type(version) is not int:
            raise RpcError(RpcErrorCode.VERSION_MISMATCH, f"{who} names no protocol version: {version!r:.20}")
        return VersionRange(version, version)
    if type(raw) is not list or len(raw) != 2 or any(type(v) is not int for v in raw) or not 0 <= raw[0] <= raw[1]:
        raise RpcError(RpcErrorCode.VERSION_MISMATCH, f"{who}'s versions are not [lo, hi]: {raw!r:.40}")
    return VersionRange(raw[0], raw[1])


def challenge_body(nonce: bytes, cluster_id: uuid.UUID | None = None) -> dict[str, Any]:
    assert len(nonce) == CHALLENGE_NONCE_BYTES
    # "version": a client of version 1 checks it equals its own.
    body: dict[str, Any] = {"version": RPC_VERSION_MIN, "versions": [RPC_VERSION_MIN, RPC_VERSION], "nonce": nonce}
    if cluster_id is not None:
        body["cluster"] = cluster_id.bytes
    return body


def auth_proof(secret: bytes | None, nonce: bytes) -> bytes:
    """HMAC-SHA256(secret, nonce), or empty without a secret."""
    if secret is None:
        return b""
    return hmac.new(secret, nonce, hashlib.sha256).digest()


def hello_body(
    secret: bytes | None, nonce: bytes, cluster_id: uuid.UUID | None = None, server: VersionRange = OUR_VERSIONS
) -> dict[str, Any]:
    """The hello to a server speaking ``server`` (its challenge's range,
    :func:`challenge_versions`): ``version`` is the one the connection will
    run at; ``versions`` only for a server that knows the field (a version 1
    server refuses a hello with any key it does not know)."""
    version = negotiate(server, "server")
    body: dict[str, Any] = {"version": version, "auth": auth_proof(secret, nonce)}
    if server.hi >= RANGE_VERSION:
        body["versions"] = [RPC_VERSION_MIN, RPC_VERSION]
    if cluster_id is not None:
        body["cluster"] = cluster_id.bytes
    return body


def _cluster_field(body: dict[str, Any], who: str) -> uuid.UUID | None:
    """The optional ``cluster`` field of a challenge or hello."""
    raw = body.get("cluster")
    if raw is None:
        return None
    if type(raw) is not bytes or len(raw) != CLUSTER_ID_BYTES:
        raise RpcError(RpcErrorCode.CLUSTER_MISMATCH, f"{who}'s cluster id is not {CLUSTER_ID_BYTES} bytes")
    return uuid.UUID(bytes=raw)


def check_cluster(peer: uuid.UUID | None, own: uuid.UUID | None, who: str) -> None:
    """Raise ``RpcError(CLUSTER_MISMATCH)`` when both sides name a cluster and
    the names differ.  A side with no cluster id learns nothing and refuses
    nothing here: the caller decides whether it needs the peer to have one."""
    if peer is not None and own is not None and peer != own:
        raise RpcError(RpcErrorCode.CLUSTER_MISMATCH, f"{who} belongs to cluster {peer}, this side to cluster {own}")


def check_version(frame: Frame, version: int) -> None:
    """Raise ``RpcError(VERSION_MISMATCH)`` unless the frame carries the
    connection's ``version``."""
    if frame.version != version:
        raise RpcError(
            RpcErrorCode.VERSION_MISMATCH,
            f"peer sent a frame of protocol version {frame.version}, the connection runs at version {version}",
        )


def challenge_versions(frame: Frame) -> VersionRange:
    """The versions the server's challenge offers (call after
    :func:`parse_challenge` accepted the frame)."""
    return _versions_field(frame.body, "server")


def parse_challenge(frame: Frame) -> tuple[bytes, uuid.UUID | None]:
    """The client's view of the server's first frame: the nonce and the
    server's cluster id (None if it names none).

    Raises :class:`RpcError` with the server's code if the server refused the
    connection (an ERROR frame), VERSION_MISMATCH if no version of its
    range is ours, CLUSTER_MISMATCH for a malformed cluster id, and
    :class:`FrameError` if the frame is no challenge.
    """
    if frame.kind == Kind.ERROR:
        code, message = frame.body
        raise RpcError(code, f"server refused the connection: {message}")
    body = frame.body
    if frame.kind != Kind.REQUEST or frame.method != CHALLENGE_METHOD or type(body) is not dict:
        raise FrameError(f"expected the server's challenge, got {frame.kind.name} {frame.method!r}")
    negotiate(challenge_versions(frame), "server")
    nonce = body.get("nonce")
    if type(nonce) is not bytes or len(nonce) != CHALLENGE_NONCE_BYTES:
        raise FrameError(f"challenge nonce must be {CHALLENGE_NONCE_BYTES} bytes")
    return nonce, _cluster_field(body, "server")


def check_hello(frame: Frame, secret: bytes | None, nonce: bytes, cluster_id: uuid.UUID | None = None) -> int:
    """The server's check of the client's first frame; returns the version
    the connection runs at.

    Raises :class:`RpcError` with VERSION_MISMATCH (no version of the
    client's range is ours), HANDSHAKE_REQUIRED (first frame not a hello),
    AUTH_FAILED or CLUSTER_MISMATCH (the hello names another cluster than
    ``cluster_id``).  Without a server secret any proof is accepted; a hello
    naming no cluster is accepted (plain clients do not know it).
    """
    if frame.kind != Kind.REQUEST or frame.method != HELLO_METHOD:
        raise RpcError(
            RpcErrorCode.HANDSHAKE_REQUIRED, f"first frame must be a hello request, got {frame.method!r:.60}"
        )
    body = frame.body
    if type(body) is not dict:
        raise RpcError(RpcErrorCode.HANDSHAKE_REQUIRED, f"a hello's body is a map, got {type(body).__name__}")
    version = negotiate(_versions_field(body, "client"), "client")
    if secret is not None:
        proof = body.get("auth")
        # compare_digest: a plain == leaks through timing how many leading bytes matched.
        if type(proof) is not bytes or not hmac.compare_digest(proof, auth_proof(secret, nonce)):
            raise RpcError(RpcErrorCode.AUTH_FAILED, "shared secret does not match" if proof else "secret required")
    check_cluster(_cluster_field(body, "client"), cluster_id, "client")
    return version
