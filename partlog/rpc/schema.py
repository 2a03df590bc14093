"""Declared schemas of RPC bodies: what each method accepts, checked before
a handler (and the sans-IO core behind it) sees the body.

A schema states types, integer ranges (Kafka's int16/int32/int64 where Kafka
has the field), string and byte lengths, and list lengths.  It also yields
the msgpack decoding limits for a body (:class:`DecodeLimits`): the largest
array, map, string and byte string it can hold and how many objects a legal
body has at most, so that a hostile frame is refused while it is being
decoded, before it costs more memory than a legal one could
(``partlog.rpc.frame.decode_payload``).

Violations raise :class:`partlog.rpc.wire.WireError` naming the field; the RPC
server answers BAD_REQUEST for that request only.

A :class:`Map` skips fields it does not know (a newer peer's optional
fields, docs/design/upgrades.md) but fails closed: at most
``UNKNOWN_FIELDS_PER_MAP_MAX`` of them per map, named by strings of at
most ``UNKNOWN_FIELD_NAME_BYTES_MAX`` bytes, and a schema's decoding
limits grow only by what they may hold (``UNKNOWN_ELEMENTS_SLACK_*``):
their lists, strings and byte strings stay within the longest the schema
has, so a hostile body costs at most a bounded share more than a legal one.
A missing required field is still refused.

Schemas are values: ``Int(lo, hi)``, ``Bytes(max_len, min_len)``,
``Str(max_bytes)``, ``List(item, max_items)``, ``Tuple(*items)`` (a
fixed-length list), ``Map(required={...}, optional={...})``,
``Nullable(schema)``, ``Bool()``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from partlog.rpc.wire import WireError

INT16_MAX = (1 << 15) - 1
INT32_MAX = (1 << 31) - 1
INT64_MAX = (1 << 63) - 1
INT64_MIN = -(1 << 63)
# Any one request body decodes to at most this many msgpack objects, whatever
# its schema allows: about 64 bytes of Python objects each, so ~64 MB at most
# per request being decoded.  The largest legal requests (a reference check
# of 100,000 keys, a produce of 10,000 batches) stay far below it.
BODY_ELEMENTS_MAX = 1_000_000
# Unknown fields (a newer peer's) a Map skips; one more is refused.  A
# release adds a few fields to a body, not dozens.
UNKNOWN_FIELDS_PER_MAP_MAX = 8
# An unknown field's name, in UTF-8 bytes: ours are under 32.
UNKNOWN_FIELD_NAME_BYTES_MAX = 64
# Objects unknown fields may add to a body: a share (1/DIVISOR) of what a
# legal body holds, at least MIN.  A newer peer's "beside the items" list
# (one value per item of a list whose items hold several) fits in it; a
# field that does not is sent only to a version that knows it.
UNKNOWN_ELEMENTS_SLACK_DIVISOR = 4
UNKNOWN_ELEMENTS_SLACK_MIN = 256


@dataclass(frozen=True, slots=True)
class DecodeLimits:
    """msgpack limits for one body (``msgpack.unpackb``'s ``max_*_len``),
    plus the number of objects (``elements_max``) a legal body holds at most."""

    array_len_max: int
    map_len_max: int
    str_bytes_max: int
    bin_bytes_max: int
    elements_max: int


class Schema:
    """Base of the schema values.  ``check`` returns the value (unchanged) or
    raises WireError; ``elements`` is the most msgpack objects a legal value
    holds (itself included)."""

    def check(self, v: Any, where: str) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def ok(self, v: Any) -> bool:
        """Whether ``check`` accepts ``v``, without naming where it fails:
        lists check their items with it first (formatting a path for every
        item of a 2,000-partition fetch cost more than the checks), and only
        a refused list is walked again by ``check`` for the message."""
        try:
            self.check(v, "")
        except WireError:
            return False
        return True

    def elements(self) -> int:
        return 1

    def walk(self) -> list[Schema]:
        return [self]

    def limits(self) -> DecodeLimits:
        nodes = self.walk()
        return DecodeLimits(
            array_len_max=max([n.max_items for n in nodes if isinstance(n, List)] +
                              [len(n.items) for n in nodes if isinstance(n, Tuple)] + [0]),
            map_len_max=max([len(n.required) + len(n.optional) + UNKNOWN_FIELDS_PER_MAP_MAX
                             for n in nodes if isinstance(n, Map)] + [0]),
            # Map keys are strings too, unknown ones included.
            str_bytes_max=max([n.max_bytes for n in nodes if isinstance(n, Str)] +
                              [len(k.encode()) for n in nodes if isinstance(n, Map)
                               for k in (*n.required, *n.optional)] +
                              [UNKNOWN_FIELD_NAME_BYTES_MAX if any(isinstance(n, Map) for n in nodes) else 0]),
            bin_bytes_max=max([n.max_len for n in nodes if isinstance(n, Bytes)] + [0]),
            elements_max=min(_with_slack(self.elements()) if any(isinstance(n, Map) for n in nodes)
                             else self.elements(), BODY_ELEMENTS_MAX),
        )  # fmt: skip


def _with_slack(elements: int) -> int:
    """``elements`` and what unknown fields may add to them."""
    return elements + max(UNKNOWN_ELEMENTS_SLACK_MIN, elements // UNKNOWN_ELEMENTS_SLACK_DIVISOR)


@dataclass(frozen=True)
class Int(Schema):
    lo: int
    hi: int

    def check(self, v: Any, where: str) -> Any:
        # `type(...) is int`: msgpack's true/false decode to bool, an int subclass.
        if type(v) is not int:
            raise WireError(f"{where}: expected an integer, got {type(v).__name__}")
        if not self.lo <= v <= self.hi:
            raise WireError(f"{where}: {v} is outside [{self.lo}, {self.hi}]")
        return v

    def ok(self, v: Any) -> bool:
        return type(v) is int and self.lo <= v <= self.hi


@dataclass(frozen=True)
class Bool(Schema):
    def check(self, v: Any, where: str) -> Any:
        if type(v) is not bool:
            raise WireError(f"{where}: expected a boolean, got {type(v).__name__}")
        return v

    def ok(self, v: Any) -> bool:
        return type(v) is bool


@dataclass(frozen=True)
class Bytes(Schema):
    max_len: int
    min_len: int = 0

    def check(self, v: Any, where: str) -> Any:
        if type(v) is not bytes:
            raise WireError(f"{where}: expected bytes, got {type(v).__name__}")
        if not self.min_len <= len(v) <= self.max_len:
            want = f"{self.max_len}" if self.min_len == self.max_len else f"{self.min_len}-{self.max_len}"
            raise WireError(f"{where}: expected {want} bytes, got {len(v)}")
        return v

    def ok(self, v: Any) -> bool:
        return type(v) is bytes and self.min_len <= len(v) <= self.max_len


@dataclass(frozen=True)
class Str(Schema):
    max_bytes: int

    def check(self, v: Any, where: str) -> Any:
        if type(v) is not str:
            raise WireError(f"{where}: expected a string, got {type(v).__name__}")
        # A str of n characters has at least n UTF-8 bytes: count only when it may matter.
        too_long = len(v) > self.max_bytes or (
            4 * len(v) > self.max_bytes and len(v.encode("utf-8", "surrogatepass")) > self.max_bytes
        )
        if too_long:
            raise WireError(f"{where}: a string of at most {self.max_bytes} UTF-8 bytes")
        return v


@dataclass(frozen=True)
class Nullable(Schema):
    inner: Schema

    def check(self, v: Any, where: str) -> Any:
        return None if v is None else self.inner.check(v, where)

    def ok(self, v: Any) -> bool:
        return v is None or self.inner.ok(v)

    def elements(self) -> int:
        return self.inner.elements()

    def walk(self) -> list[Schema]:
        return [self, *self.inner.walk()]


@dataclass(frozen=True)
class List(Schema):
    item: Schema
    max_items: int

    def check(self, v: Any, where: str) -> Any:
        if type(v) is not list:
            raise WireError(f"{where}: expected a list, got {type(v).__name__}")
        if len(v) > self.max_items:
            raise WireError(f"{where}: at most {self.max_items} items, got {len(v)}")
        if all(map(self.item.ok, v)):
            return v
        for i, x in enumerate(v):  # the first refused item, named
            self.item.check(x, f"{where}[{i}]")
        return v  # pragma: no cover - ok() and check() disagree

    def ok(self, v: Any) -> bool:
        return type(v) is list and len(v) <= self.max_items and all(map(self.item.ok, v))

    def elements(self) -> int:
        return 1 + self.max_items * self.item.elements()

    def walk(self) -> list[Schema]:
        return [self, *self.item.walk()]


@dataclass(frozen=True)
class Tuple(Schema):
    """A fixed-length list; items are schemas or ``(name, schema)`` pairs,
    the names used in error messages (``what[2].replication_factor``)."""

    items: tuple[Schema, ...]
    names: tuple[str, ...]

    def __init__(self, *items: Schema | tuple[str, Schema]) -> None:
        object.__setattr__(self, "items", tuple(i[1] if isinstance(i, tuple) else i for i in items))
        object.__setattr__(self, "names", tuple(i[0] if isinstance(i, tuple) else "" for i in items))

    def check(self, v: Any, where: str) -> Any:
        if type(v) is not list or len(v) != len(self.items):
            got = f"{len(v)} items" if type(v) is list else type(v).__name__
            raise WireError(f"{where}: expected a list of {len(self.items)} items, got {got}")
        for i, (x, s, name) in enumerate(zip(v, self.items, self.names, strict=True)):
            s.check(x, f"{where}.{name}" if name else f"{where}[{i}]")
        return v

    def ok(self, v: Any) -> bool:
        return (
            type(v) is list and len(v) == len(self.items) and all(s.ok(x) for s, x in zip(self.items, v, strict=True))
        )

    def elements(self) -> int:
        return 1 + sum(s.elements() for s in self.items)

    def walk(self) -> list[Schema]:
        return [self, *(n for s in self.items for n in s.walk())]


@dataclass(frozen=True)
class Map(Schema):
    """A struct: string keys, each with its schema.  Up to
    ``UNKNOWN_FIELDS_PER_MAP_MAX`` unknown string keys are skipped, their
    values unchecked (a newer peer's optional fields; the decoding limits
    bounded them); more, or a key that is no string, is refused."""

    required: Mapping[str, Schema]
    optional: Mapping[str, Schema] = field(default_factory=dict)

    def check(self, v: Any, where: str) -> Any:
        if type(v) is not dict:
            raise WireError(f"{where}: expected a map, got {type(v).__name__}")
        for name, s in self.required.items():
            if name not in v:
                raise WireError(f"{where}: missing field {name!r}")
            s.check(v[name], f"{where}.{name}")
        unknown = 0
        for name, x in v.items():
            if name in self.required:
                continue
            opt = self.optional.get(name)
            if opt is not None:
                opt.check(x, f"{where}.{name}")
                continue
            unknown += 1
            if type(name) is not str or unknown > UNKNOWN_FIELDS_PER_MAP_MAX:
                raise WireError(
                    f"{where}: unknown field {name!r:.60} (at most {UNKNOWN_FIELDS_PER_MAP_MAX} unknown string keys)"
                )
        return v

    def elements(self) -> int:
        return 1 + sum(1 + s.elements() for s in (*self.required.values(), *self.optional.values()))

    def walk(self) -> list[Schema]:
        return [self, *(n for s in (*self.required.values(), *self.optional.values()) for n in s.walk())]


# ------------------------------------------------------------ field types

INT16 = Int(-(1 << 15), INT16_MAX)
INT32 = Int(-(1 << 31), INT32_MAX)
INT64 = Int(INT64_MIN, INT64_MAX)
BROKER_ID = Int(0, INT32_MAX)  # Kafka's broker ids: non-negative int32
PARTITION = Int(0, INT32_MAX)
EPOCH = Int(-1, INT32_MAX)  # leader and partition epochs (int32; -1: unknown)
OFFSET = Int(-1, INT64_MAX)
TIMESTAMP = INT64  # ListOffsets targets: -1, -2, -3 or a time
TIMEOUT_MS = Int(0, INT32_MAX)
TOPIC_ID = Bytes(16, 16)
PORT = Int(0, 65_535)
# Kafka's topic names are at most 249 characters; AZ and host names are DNS-sized.
TOPIC_NAME = Str(249)
NAME = Str(255)
# S3's key limit; the store's own (511 bytes) is checked where keys are stored.
OBJECT_KEY = Str(1024)
FILE_SIZE = Int(1, INT64_MAX)
BYTE_OFFSET = Int(0, INT64_MAX)


def partition_item(*rest: Schema | tuple[str, Schema]) -> Tuple:
    """``[topic_id, partition, *rest]``, the shape every per-partition list uses."""
    return Tuple(("topic_id", TOPIC_ID), ("partition", PARTITION), *rest)


def body_limits(schema: Schema | None, frame_bytes_max: int) -> DecodeLimits:
    """Decoding limits for a body: the schema's, else (no schema: a method
    nobody handles, or a response) the frame's own bound."""
    if schema is None:
        return DecodeLimits(frame_bytes_max, frame_bytes_max, frame_bytes_max, frame_bytes_max, BODY_ELEMENTS_MAX)
    return schema.limits()


__all__ = [
    "BODY_ELEMENTS_MAX",
    "BROKER_ID",
    "BYTE_OFFSET",
    "EPOCH",
    "FILE_SIZE",
    "INT16",
    "INT32",
    "INT64",
    "NAME",
    "OBJECT_KEY",
    "OFFSET",
    "PARTITION",
    "PORT",
    "TIMEOUT_MS",
    "TIMESTAMP",
    "TOPIC_ID",
    "TOPIC_NAME",
    "UNKNOWN_ELEMENTS_SLACK_DIVISOR",
    "UNKNOWN_ELEMENTS_SLACK_MIN",
    "UNKNOWN_FIELDS_PER_MAP_MAX",
    "UNKNOWN_FIELD_NAME_BYTES_MAX",
    "Bool",
    "Bytes",
    "DecodeLimits",
    "Int",
    "List",
    "Map",
    "Nullable",
    "Schema",
    "Str",
    "Tuple",
    "body_limits",
    "partition_item",
]
