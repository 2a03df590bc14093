"""Every length in a request checked before kio's native reader sees it.

kio 0.6's reader (Rust) sizes an array, a string or a bytes field by the
length the request declares, before reading its items: a 70-byte
FindCoordinator v4 declaring 2**32 keys made it allocate 43 GB, and a failed
allocation aborts the process (found by
``tests/integration/test_kafka_front.py``'s hypothesis test: one client
took the whole broker down).  This walk reads the same wire format (Kafka's
message schemas as kio's classes describe them: legacy and compact arrays,
strings and bytes, KIP-893 nullable structs, tagged fields) and refuses a
request whose declared length passes the bytes that are left, so what kio
then allocates is bounded by the frame.  It reads every field once, in
Python: linear in the frame, and only lengths are kept.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Callable
from typing import Any

# Fixed widths of kio's primitive kafka_types.
_WIDTHS = {
    "int8": 1,
    "int16": 2,
    "int32": 4,
    "int64": 8,
    "uint16": 2,
    "float64": 8,
    "bool": 1,
    "uuid": 16,
    "error_code": 2,
    "timedelta_i32": 4,
    "timedelta_i64": 8,
    "datetime_i64": 8,
}
_VARINT_BYTES_MAX = 5


class LengthError(ValueError):
    """A declared length that passes the request's end (or a malformed one)."""


class _Cursor:
    __slots__ = ("data", "end", "pos")

    def __init__(self, data: bytes, pos: int, end: int) -> None:
        self.data, self.pos, self.end = data, pos, end

    def skip(self, n: int) -> None:
        if n < 0 or self.pos + n > self.end:
            raise LengthError(f"{n} bytes declared at byte {self.pos}, {self.end - self.pos} left")
        self.pos += n

    def fixed(self, n: int) -> int:
        start = self.pos
        self.skip(n)
        return int.from_bytes(self.data[start : self.pos], "big", signed=True)

    def uvarint(self) -> int:
        value = shift = 0
        for _ in range(_VARINT_BYTES_MAX):
            self.skip(1)
            b = self.data[self.pos - 1]
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
        raise LengthError(f"a varint longer than {_VARINT_BYTES_MAX} bytes at byte {self.pos}")

    def count(self, flexible: bool) -> int:
        """An array's length (-1: null), not more than the bytes left."""
        n = self.uvarint() - 1 if flexible else self.fixed(4)
        if n < -1 or n > self.end - self.pos:
            raise LengthError(f"an array of {n} items at byte {self.pos}, {self.end - self.pos} bytes left")
        return n

    def blob(self, flexible: bool, legacy_width: int) -> None:
        """A string or bytes (-1: null) of a length the bytes left hold."""
        n = self.uvarint() - 1 if flexible else self.fixed(legacy_width)
        if n < -1:
            raise LengthError(f"a length of {n} at byte {self.pos}")
        if n > 0:
            self.skip(n)


Step = Callable[[_Cursor], None]


def check_request(header_cls: type, schema: type, frame: bytes) -> None:
    """Raise LengthError unless every length the header and the body of
    ``frame`` (the request without its size prefix) declare fits in it."""
    c = _Cursor(frame, 0, len(frame))
    _entity(header_cls)(c)
    _entity(schema)(c)


@functools.cache
def _entity(cls: type) -> Step:
    flexible = bool(getattr(cls, "__flexible__", False))
    header = cls.__name__ == "RequestHeader"
    steps: list[Step] = []
    tagged: dict[int, Step] = {}
    for f in dataclasses.fields(cls):
        tag = f.metadata.get("tag")
        step = _field(f, flexible, header and f.name == "client_id", tag is not None)
        if tag is None:
            steps.append(step)
        else:
            tagged[int(tag)] = step

    def walk(c: _Cursor) -> None:
        for step in steps:
            step(c)
        if flexible:
            n = c.uvarint()
            if n > c.end - c.pos:
                raise LengthError(f"{n} tagged fields at byte {c.pos}, {c.end - c.pos} bytes left")
            for _ in range(n):
                tag, size = c.uvarint(), c.uvarint()
                start = c.pos
                c.skip(size)
                known = tagged.get(tag)
                if known is not None:
                    known(_Cursor(c.data, start, start + size))

    return walk


def _field(f: dataclasses.Field[Any], flexible: bool, legacy_client_id: bool, is_tag: bool) -> Step:
    kafka_type = str(f.metadata.get("kafka_type", ""))
    inner, is_array, optional = _shape(f.type)
    if legacy_client_id:
        return lambda c: c.blob(False, 2)
    if dataclasses.is_dataclass(inner):
        item = _entity(inner)  # type: ignore[arg-type]
        if not is_array and optional and not is_tag:
            item = _nullable(item)
    elif kafka_type in ("string", "bytes", "records"):
        width = 2 if kafka_type == "string" else 4
        item = functools.partial(_blob, flexible=flexible, width=width)
    elif kafka_type in _WIDTHS:
        item = functools.partial(_skip, n=_WIDTHS[kafka_type])
    else:
        raise LengthError(f"{f.name}: kafka_type {kafka_type!r} unknown to the check")
    if not is_array:
        return item

    def array(c: _Cursor) -> None:
        for _ in range(c.count(flexible)):
            item(c)

    return array


def _blob(c: _Cursor, *, flexible: bool, width: int) -> None:
    c.blob(flexible, width)


def _skip(c: _Cursor, *, n: int) -> None:
    c.skip(n)


def _nullable(item: Step) -> Step:
    def walk(c: _Cursor) -> None:
        if c.fixed(1) >= 0:  # KIP-893: -1 null, 1 present
            item(c)

    return walk


def _shape(t: Any) -> tuple[Any, bool, bool]:
    """(item type, is an array, is optional) of a field's annotation."""
    optional = False
    if typing.get_origin(t) in (types.UnionType, typing.Union):
        args = [a for a in typing.get_args(t) if a is not types.NoneType]
        optional, t = True, args[0]
    if typing.get_origin(t) is tuple:
        item = typing.get_args(t)[0]
        if typing.get_origin(item) in (types.UnionType, typing.Union):
            item = next(a for a in typing.get_args(item) if a is not types.NoneType)
        return item, True, optional
    return t, False, optional


__all__ = ["LengthError", "check_request"]
