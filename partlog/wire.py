"""Bodies of the broker RPCs as msgpack-ready values, and back.

Every decoder checks shapes and types and raises :class:`WireError` naming
the field, so a malformed request from a peer is answered with an error and
never reaches the store or crashes the broker.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from partlog.errors import Errors
from partlog.records import CommitBatchRequest, CommitBatchResponse, TimestampType, TopicIdPartition


class WireError(ValueError):
    """A peer sent a body that does not have the expected shape."""


def _int(v: Any, what: str) -> int:
    if type(v) is not int:
        raise WireError(f"{what}: expected an integer, got {type(v).__name__}")
    return v


def _bytes(v: Any, what: str) -> bytes:
    if type(v) is not bytes:
        raise WireError(f"{what}: expected bytes, got {type(v).__name__}")
    return v


def _str(v: Any, what: str) -> str:
    if type(v) is not str:
        raise WireError(f"{what}: expected a string, got {type(v).__name__}")
    return v


def _list(v: Any, what: str, length: int | None = None) -> list[Any]:
    if type(v) is not list:
        raise WireError(f"{what}: expected a list, got {type(v).__name__}")
    if length is not None and len(v) != length:
        raise WireError(f"{what}: expected {length} items, got {len(v)}")
    return v


def _map(v: Any, what: str) -> dict[str, Any]:
    if type(v) is not dict:
        raise WireError(f"{what}: expected a map, got {type(v).__name__}")
    return v


def field(body: dict[str, Any], name: str, what: str) -> Any:
    if name not in body:
        raise WireError(f"{what}: missing field {name!r}")
    return body[name]


# ------------------------------------------------------------ partitions


def enc_tp(tp: TopicIdPartition) -> list[Any]:
    return [tp.topic_id.bytes, tp.partition]


def dec_tp(v: Any, what: str = "partition") -> TopicIdPartition:
    raw, p = _list(v, what, 2)
    tid = _bytes(raw, f"{what}.topic_id")
    if len(tid) != 16:
        raise WireError(f"{what}.topic_id: expected 16 bytes, got {len(tid)}")
    part = _int(p, f"{what}.partition")
    if part < 0:
        raise WireError(f"{what}.partition: negative ({part})")
    return TopicIdPartition(uuid.UUID(bytes=tid), part)


def dec_partition_items(
    body: dict[str, Any], name: str, what: str, tail: tuple[type, ...], shape: str, items_max: int
) -> list[tuple[TopicIdPartition, list[Any]]]:
    """The list ``body[name]`` of ``[topic_id, partition, *tail]`` items (at
    most ``items_max``), each with its partition decoded and the tail's types
    checked; ``shape`` describes an item for the error message."""
    items = field(body, name, what)
    if type(items) is not list or len(items) > items_max:
        raise WireError(f"{what}.{name}: a list of at most {items_max} items")
    out = []
    for i, it in enumerate(items):
        where = f"{what}.{name}[{i}]"
        if (
            type(it) is not list
            or len(it) != 2 + len(tail)
            or any(type(x) is not t for x, t in zip(it[2:], tail, strict=True))
        ):
            raise WireError(f"{where}: expected {shape}")
        out.append((dec_tp(it[:2], where), it[2:]))
    return out


# ----------------------------------------------------------------- commit


def enc_commit(key: str, uploader: int, file_size: int, requests: Sequence[CommitBatchRequest]) -> dict[str, Any]:
    # The header carries every other field: the leader rebuilds the request
    # from it and so cannot be handed fields that disagree with it.
    return {
        "key": key,
        "uploader": uploader,
        "file_size": file_size,
        "batches": [[r.request_id, *enc_tp(r.topic_id_partition), r.byte_offset, r.header] for r in requests],
    }


def dec_commit(body: Any) -> tuple[str, int, int, list[CommitBatchRequest]]:
    m = _map(body, "commit")
    key = _str(field(m, "key", "commit"), "commit.key")
    uploader = _int(field(m, "uploader", "commit"), "commit.uploader")
    size = _int(field(m, "file_size", "commit"), "commit.file_size")
    reqs = []
    for i, b in enumerate(_list(field(m, "batches", "commit"), "commit.batches")):
        what = f"commit.batches[{i}]"
        rid, tid, part, offset, header = _list(b, what, 5)
        tp = dec_tp([tid, part], what)
        hdr = _bytes(header, f"{what}.header")
        request_id = _int(rid, f"{what}.request_id")
        byte_offset = _int(offset, f"{what}.byte_offset")
        try:
            req = CommitBatchRequest.from_header(request_id, tp, byte_offset, hdr)
        except ValueError:
            # An unparseable header: the store answers CORRUPT_MESSAGE for it.
            req = CommitBatchRequest(
                request_id, tp, byte_offset, 0, -1, -1, -1, TimestampType.CREATE_TIME, -1, -1, -1, -1, hdr
            )
        reqs.append(req)
    return key, uploader, size, reqs


def enc_commit_responses(responses: Sequence[CommitBatchResponse]) -> list[list[int]]:
    return [
        [int(r.errors), r.assigned_base_offset, r.log_append_time, r.log_start_offset, int(r.is_duplicate)]
        for r in responses
    ]


def dec_commit_responses(v: Any, requests: Sequence[CommitBatchRequest]) -> list[CommitBatchResponse]:
    items = _list(v, "commit responses", len(requests))
    out = []
    for i, (item, req) in enumerate(zip(items, requests, strict=True)):
        err, base, append, lso, dup = (_int(x, f"commit responses[{i}]") for x in _list(item, "commit response", 5))
        out.append(CommitBatchResponse(_errors(err), base, append, lso, bool(dup), req))
    return out


def _errors(code: int) -> Errors:
    try:
        return Errors(code)
    except ValueError:
        return Errors.UNKNOWN_SERVER_ERROR


def dec_errors(code: Any, what: str) -> Errors:
    return _errors(_int(code, what))
