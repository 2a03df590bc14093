"""Kafka request and response framing for the front end (sans-IO).

Bytes in, requests out; responses in, bytes out.  kio (Aiven's codec,
generated from Kafka's JSON message schemas) reads and writes every header
and body; this module chooses the schema and header version, bounds sizes,
and builds responses from plain values, so the handlers never name a
per-version class.

Framing is Kafka's: a 4-byte big-endian size, then the request header
(v1, or v2 with tagged fields for a flexible version) and the body.  The
response header is v0 (correlation id), or v1 for a flexible version,
except that ApiVersions answers always use v0: a client that does not yet
know the broker's versions must be able to read it (KIP-511).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import functools
import io
import struct
import types
import typing
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_reader, entity_writer

from partlog.kafka_front.frame_check import LengthError, check_request

# Kafka's socket.request.max.bytes default (100 MiB): a larger size prefix
# closes the connection before anything is buffered.
REQUEST_BYTES_MAX_DEFAULT = 100 * 1024 * 1024
_SIZE = struct.Struct(">i")
_KEY_VERSION = struct.Struct(">hh")
_API_KEY = struct.Struct(">h")

# The versions this front end serves, by API key: (min, max).  Each is a
# version the handlers understand field by field (design.md lists them).
API_KEYS: dict[int, str] = {
    0: "Produce",
    1: "Fetch",
    2: "ListOffsets",
    3: "Metadata",
    8: "OffsetCommit",
    9: "OffsetFetch",
    10: "FindCoordinator",
    11: "JoinGroup",
    12: "Heartbeat",
    13: "LeaveGroup",
    14: "SyncGroup",
    15: "DescribeGroups",
    16: "ListGroups",
    42: "DeleteGroups",
    47: "OffsetDelete",
    17: "SaslHandshake",
    18: "ApiVersions",
    19: "CreateTopics",
    20: "DeleteTopics",
    21: "DeleteRecords",
    22: "InitProducerId",
    23: "OffsetForLeaderEpoch",
    24: "AddPartitionsToTxn",
    25: "AddOffsetsToTxn",
    26: "EndTxn",
    28: "TxnOffsetCommit",
    32: "DescribeConfigs",
    33: "AlterConfigs",
    44: "IncrementalAlterConfigs",
    36: "SaslAuthenticate",
    37: "CreatePartitions",
    45: "AlterPartitionReassignments",
    46: "ListPartitionReassignments",
    50: "DescribeUserScramCredentials",
    51: "AlterUserScramCredentials",
    65: "DescribeTransactions",
    66: "ListTransactions",
    68: "ConsumerGroupHeartbeat",
    69: "ConsumerGroupDescribe",
}
API_VERSIONS_KEY = 18


class FrameError(Exception):
    """The byte stream cannot be framed any more (a size out of bounds, a
    header that does not parse): the connection is closed."""


@dataclass(frozen=True, slots=True)
class Request:
    """One decoded request.  ``body`` is the kio request entity, or None
    when the version is not served (``unsupported`` says why)."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any
    unsupported: str | None = None

    @property
    def api_name(self) -> str:
        return API_KEYS.get(self.api_key, f"api {self.api_key}")


class FrameReader:
    """Splits a byte stream into size-prefixed frames, refusing a size
    above ``request_bytes_max`` before buffering it."""

    def __init__(self, request_bytes_max: int = REQUEST_BYTES_MAX_DEFAULT) -> None:
        if request_bytes_max < 8:
            raise ValueError(f"request_bytes_max must be >= 8, got {request_bytes_max}")
        self.request_bytes_max = request_bytes_max
        # A request holds at least its header's key, version and correlation
        # id; raw SASL tokens (SaslHandshake v0) may be shorter.
        self.size_min = 8
        self._buf = bytearray()

    def feed(self, data: bytes) -> None:
        self._buf += data

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def frame_size(self) -> int | None:
        """The size of the frame in progress, once its prefix is here
        (checked: FrameError when out of bounds); None before."""
        if len(self._buf) < 4:
            return None
        (size,) = _SIZE.unpack_from(self._buf)
        if size < self.size_min or size > self.request_bytes_max:
            raise FrameError(
                f"request size {size} outside [{self.size_min}, {self.request_bytes_max}] (socket.request.max.bytes)"
            )
        return int(size)

    def api_key(self) -> int | None:
        """The API key of the frame in progress, once its first bytes are here."""
        if len(self._buf) < 6:
            return None
        return int(_API_KEY.unpack_from(self._buf, 4)[0])

    def next_frame(self) -> bytes | None:
        """The next complete frame's payload, or None if it is not all here."""
        if len(self._buf) < 4:
            return None
        (size,) = _SIZE.unpack_from(self._buf)
        if size < self.size_min or size > self.request_bytes_max:
            raise FrameError(
                f"request size {size} outside [{self.size_min}, {self.request_bytes_max}] (socket.request.max.bytes)"
            )
        if len(self._buf) < 4 + size:
            return None
        frame = bytes(self._buf[4 : 4 + size])
        del self._buf[: 4 + size]
        return frame


async def read_buffered(reader: asyncio.StreamReader, max_bytes: int) -> bytes:
    """Up to ``max_bytes`` that ``reader`` holds already, without waiting
    (b"" when it holds none)."""
    try:
        async with asyncio.timeout(0):
            return await reader.read(max_bytes)
    except TimeoutError:
        return b""


def parse_request(frame: bytes, supported: Mapping[int, tuple[int, int]]) -> Request:
    """Decode one frame.  A version outside ``supported`` (or an API kio
    knows but we do not serve) is returned with ``unsupported`` set and the
    body decoded when kio can, so that an error answer can be framed; an
    API key or version kio has no schema for raises FrameError, since no
    answer the client could read can be built (Kafka closes then too)."""
    api_key, api_version = _KEY_VERSION.unpack_from(frame)
    served = supported.get(api_key)
    unsupported = None
    if served is None:
        unsupported = f"api key {api_key} is not served"
    elif not served[0] <= api_version <= served[1]:
        unsupported = f"{API_KEYS.get(api_key, api_key)} v{api_version} is not served (v{served[0]}-v{served[1]})"
    if unsupported is not None and api_key == API_VERSIONS_KEY:
        # KIP-511: an ApiVersions of a version we do not know is answered
        # with v0 and UNSUPPORTED_VERSION; its header is read as v1 (the
        # client id is where every header version puts it).
        header, _ = _read_header(RequestHeaderV1, frame)
        return Request(api_key, api_version, header.correlation_id, header.client_id, None, unsupported)
    try:
        schema = load_request_schema(api_key, api_version)
    except Exception as e:  # kio has no schema for this key or version
        raise FrameError(f"api key {api_key} version {api_version}: no schema ({e})") from None
    header_cls = RequestHeaderV2 if schema.__flexible__ else RequestHeaderV1
    try:
        # Before kio's native reader, which allocates what a length declares.
        check_request(header_cls, schema, frame)
    except LengthError as e:
        raise FrameError(f"{API_KEYS.get(api_key, api_key)} v{api_version}: {e}") from None
    header, offset = _read_header(header_cls, frame)
    try:
        body, used = entity_reader(schema)(frame, offset)
    except Exception as e:  # kio raises assorted errors on truncated or malformed bodies
        raise FrameError(
            f"{API_KEYS.get(api_key, api_key)} v{api_version} correlation {header.correlation_id}: "
            f"malformed body ({type(e).__name__}: {e})"
        ) from None
    # Bytes after the body are ignored, as Kafka's broker ignores them
    # (librdkafka's Metadata v12 carries three).
    del used
    return Request(api_key, api_version, header.correlation_id, header.client_id, body, unsupported)


def _read_header(cls: type[Any], frame: bytes) -> tuple[Any, int]:
    try:
        header, used = entity_reader(cls)(frame, 0)
    except Exception as e:
        raise FrameError(f"malformed request header ({type(e).__name__}: {e})") from None
    return header, used


def response_class(api_key: int, api_version: int) -> type[Any]:
    return load_response_schema(api_key, api_version)


def encode_response(req: Request, body: Any) -> bytes:
    """The frame (size prefix included) answering ``req`` with ``body``, a
    kio response entity of the request's version."""
    out = io.BytesIO()
    out.write(b"\0\0\0\0")
    out.write(_SIZE.pack(req.correlation_id))
    if req.api_key != API_VERSIONS_KEY and body.__flexible__:
        out.write(b"\0")  # response header v1: no tagged fields
    entity_writer(type(body))(out, body)
    data = out.getbuffer()
    _SIZE.pack_into(data, 0, len(data) - 4)
    return bytes(data)


# ----------------------------------------------------------- building values


@dataclass(frozen=True, slots=True)
class _Field:
    name: str
    kafka_type: str | None
    nested: type[Any] | None
    many: bool
    required: bool
    nullable: bool


def _fields(cls: Any) -> tuple[_Field, ...]:
    return _fields_cached(cls)


@functools.cache
def _fields_cached(cls: Any) -> tuple[_Field, ...]:
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        hint = _unoptional(hints[f.name])
        nullable = hint is not hints[f.name]
        many = typing.get_origin(hint) is tuple
        inner = _unoptional(typing.get_args(hint)[0]) if many else hint
        nested: type[Any] | None = inner if isinstance(inner, type) and dataclasses.is_dataclass(inner) else None
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        out.append(_Field(f.name, f.metadata.get("kafka_type"), nested, many, required, nullable))
    return tuple(out)


def _unoptional(hint: Any) -> Any:
    """X for ``X | None``; ``hint`` otherwise."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return hint


def _convert(f: _Field, value: Any) -> Any:
    if value is None and not f.nullable:
        # A null where this version has no null (an older version of a
        # field that became nullable later): its empty value.
        return () if f.many else _zero(f, 0)
    if f.nested is not None:
        if f.many:
            return None if value is None else tuple(build(f.nested, v) for v in value)
        return None if value is None else build(f.nested, value)
    if f.many:
        return None if value is None else tuple(_scalar(f.kafka_type, v) for v in value)
    return _scalar(f.kafka_type, value)


def _scalar(kafka_type: str | None, value: Any) -> Any:
    if kafka_type == "error_code":
        return ErrorCode(int(value))
    if kafka_type in ("timedelta_i32", "timedelta_i64"):
        return value if isinstance(value, datetime.timedelta) else datetime.timedelta(milliseconds=int(value))
    if kafka_type == "datetime_i64":
        if value is None or isinstance(value, datetime.datetime):
            return value
        return None if value < 0 else datetime.datetime.fromtimestamp(value / 1000, tz=datetime.UTC)
    if kafka_type == "uuid" and isinstance(value, bytes):
        return uuid.UUID(bytes=value)
    return value


def build(cls: type[Any], data: Mapping[str, Any]) -> Any:
    """A kio entity of ``cls`` from plain values: fields this version does
    not have are dropped, fields it has but ``data`` omits keep their
    defaults (a required one missing is a programming error), nested
    entities are built from mappings, error codes from ints, durations
    from milliseconds."""
    kwargs: dict[str, Any] = {}
    for f in _fields(cls):
        if f.name in data:
            kwargs[f.name] = _convert(f, data[f.name])
        elif f.required:
            raise TypeError(f"{cls.__module__}.{cls.__name__}: field {f.name!r} is required")
    return cls(**kwargs)


def error_body(cls: type[Any], error: int) -> Any:
    """An answer of ``cls`` that says ``error`` everywhere it has an error
    code, with the request's nothing else (empty lists, zero values): how a
    request this front end does not serve is refused without dropping the
    connection."""
    kwargs: dict[str, Any] = {}
    for f in _fields(cls):
        if f.required:
            kwargs[f.name] = () if f.many else _zero(f, error)
    return cls(**kwargs)


def _zero(f: _Field, error: int) -> Any:
    """The empty value of a single field (``error`` for an error code)."""
    if f.nested is not None:
        return error_body(f.nested, error)
    if f.kafka_type == "error_code":
        return ErrorCode(error)
    if f.kafka_type in ("timedelta_i32", "timedelta_i64"):
        return datetime.timedelta(0)
    if f.kafka_type == "string":
        return ""
    if f.kafka_type in ("bytes", "records"):
        return b""
    if f.kafka_type == "bool":
        return False
    if f.kafka_type == "uuid":
        return uuid.UUID(int=0)
    if f.kafka_type == "datetime_i64":
        return None
    return 0


__all__ = [
    "API_KEYS",
    "REQUEST_BYTES_MAX_DEFAULT",
    "FrameError",
    "FrameReader",
    "Request",
    "build",
    "encode_response",
    "error_body",
    "parse_request",
    "read_buffered",
    "response_class",
]
