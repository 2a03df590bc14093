"""Bodies of the broker RPCs as msgpack-ready values, and back.

Every decoder checks shapes and types and raises :class:`WireError` naming
the field, so a malformed request from a peer is answered with an error and
never reaches the store or crashes the broker.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, NamedTuple

from partlog.kafka.errors import Errors
from partlog.kafka.records import (
    CommitBatchRequest,
    CommitBatchResponse,
    ReplicatedEntry,
    TimestampType,
    TopicIdPartition,
)
from partlog.wal.key import OBJECT_KEY_BYTES_MAX


class WireError(ValueError):
    """A peer sent a body that does not have the expected shape."""


def expect_int(v: Any, what: str) -> int:
    if type(v) is not int:
        raise WireError(f"{what}: expected an integer, got {type(v).__name__}")
    return v


def expect_bytes(v: Any, what: str) -> bytes:
    if type(v) is not bytes:
        raise WireError(f"{what}: expected bytes, got {type(v).__name__}")
    return v


def expect_str(v: Any, what: str) -> str:
    if type(v) is not str:
        raise WireError(f"{what}: expected a string, got {type(v).__name__}")
    return v


def expect_list(v: Any, what: str, length: int | None = None) -> list[Any]:
    if type(v) is not list:
        raise WireError(f"{what}: expected a list, got {type(v).__name__}")
    if length is not None and len(v) != length:
        raise WireError(f"{what}: expected {length} items, got {len(v)}")
    return v


def expect_map(v: Any, what: str) -> dict[str, Any]:
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


# Partitions decoded once and kept (~250 B each); random ones only evict them.
PARTITIONS_CACHED = 32_768
_INTS6 = (int,) * 6


@functools.lru_cache(maxsize=PARTITIONS_CACHED)
def _tp(raw: bytes, partition: int) -> TopicIdPartition:
    """The partition of a 16-byte topic id, cached: every replica fetch names thousands."""
    return TopicIdPartition(uuid.UUID(bytes=raw), partition)


def dec_tp(v: Any, what: str = "partition") -> TopicIdPartition:
    raw, p = expect_list(v, what, 2)
    tid = expect_bytes(raw, f"{what}.topic_id")
    if len(tid) != 16:
        raise WireError(f"{what}.topic_id: expected 16 bytes, got {len(tid)}")
    part = expect_int(p, f"{what}.partition")
    if part < 0:
        raise WireError(f"{what}.partition: negative ({part})")
    return _tp(tid, part)


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
    size = 2 + len(tail)
    for i, it in enumerate(items):
        if type(it) is not list or len(it) != size or tuple(map(type, it[2:])) != tail:
            raise WireError(f"{what}.{name}[{i}]: expected {shape}")
        raw, part = it[0], it[1]
        # dec_tp's checks, inline: thousands of items per replica fetch.
        if type(raw) is bytes and len(raw) == 16 and type(part) is int and part >= 0:
            out.append((_tp(raw, part), it[2:]))
        else:
            out.append((dec_tp(it[:2], f"{what}.{name}[{i}]"), it[2:]))
    return out


# ----------------------------------------------------------------- commit


def enc_commit(
    key: str,
    uploader: int,
    file_size: int,
    requests: Sequence[CommitBatchRequest],
    acks_all: Sequence[bool] = (),
    transactional_ids: Sequence[tuple[int, str]] = (),
) -> dict[str, Any]:
    # The header carries every other field: the leader rebuilds the request
    # from it and so cannot be handed fields that disagree with it.
    body: dict[str, Any] = {
        "key": key,
        "uploader": uploader,
        "file_size": file_size,
        "batches": [[r.request_id, *enc_tp(r.topic_id_partition), r.byte_offset, r.header] for r in requests],
    }
    if any(acks_all):
        # Request indices answered only once replicated (acks=all).
        body["acks_all"] = [i for i, a in enumerate(acks_all) if a]
    if transactional_ids:
        # KIP-890: the leader verifies these requests' first transactional
        # batches with their transactional ids' coordinators, each request
        # under the id of the produce request it came in (as Kafka verifies
        # each request on its own).
        body["transactional_ids"] = [[i, tid] for i, tid in transactional_ids]
    return body


def dec_commit_transactional_ids(body: Any, requests: int) -> dict[int, str]:
    """The commit's request index -> transactional id map (empty without
    one); WireError for an index outside the ``requests`` of the commit."""
    out: dict[int, str] = {}
    for i, item in enumerate(expect_list(expect_map(body, "commit").get("transactional_ids", []), "commit")):
        what = f"commit.transactional_ids[{i}]"
        index, tid = expect_list(item, what, 2)
        index = expect_int(index, what)
        if not 0 <= index < requests or index in out:
            raise WireError(f"{what}: request index {index} is not one of the commit's {requests}, or is named twice")
        out[index] = expect_str(tid, what)
    return out


def dec_commit(body: Any) -> tuple[str, int, int, list[CommitBatchRequest], list[bool]]:
    """(key, uploader, file size, requests, acks_all flags per request)."""
    m = expect_map(body, "commit")
    key = expect_str(field(m, "key", "commit"), "commit.key")
    uploader = expect_int(field(m, "uploader", "commit"), "commit.uploader")
    size = expect_int(field(m, "file_size", "commit"), "commit.file_size")
    reqs = []
    for i, b in enumerate(expect_list(field(m, "batches", "commit"), "commit.batches")):
        what = f"commit.batches[{i}]"
        rid, tid, part, offset, header = expect_list(b, what, 5)
        tp = dec_tp([tid, part], what)
        hdr = expect_bytes(header, f"{what}.header")
        request_id = expect_int(rid, f"{what}.request_id")
        byte_offset = expect_int(offset, f"{what}.byte_offset")
        try:
            req = CommitBatchRequest.from_header(request_id, tp, byte_offset, hdr)
        except ValueError:
            # An unparseable header: the store answers CORRUPT_MESSAGE for it.
            req = CommitBatchRequest(
                request_id, tp, byte_offset, 0, -1, -1, -1, TimestampType.CREATE_TIME, -1, -1, -1, -1, hdr
            )
        reqs.append(req)
    acks_all = [False] * len(reqs)
    for i in expect_list(m.get("acks_all", []), "commit.acks_all"):
        if type(i) is not int or not 0 <= i < len(reqs):
            raise WireError(f"commit.acks_all: {i!r} is not a batch index below {len(reqs)}")
        acks_all[i] = True
    return key, uploader, size, reqs, acks_all


def enc_commit_responses(responses: Sequence[CommitBatchResponse]) -> list[list[int]]:
    return [
        [int(r.errors), r.assigned_base_offset, r.log_append_time, r.log_start_offset, int(r.is_duplicate)]
        for r in responses
    ]


def dec_commit_responses(v: Any, requests: Sequence[CommitBatchRequest]) -> list[CommitBatchResponse]:
    items = expect_list(v, "commit responses", len(requests))
    out = []
    for i, (item, req) in enumerate(zip(items, requests, strict=True)):
        err, base, append, lso, dup = (
            expect_int(x, f"commit responses[{i}]") for x in expect_list(item, "commit response", 5)
        )
        out.append(CommitBatchResponse(_errors(err), base, append, lso, bool(dup), req))
    return out


_ERRORS_BY_CODE = {int(e): e for e in Errors}


def _errors(code: int) -> Errors:
    """Kafka's error of ``code``, UNKNOWN_SERVER_ERROR if unknown here (a dict: thousands per answer)."""
    return _ERRORS_BY_CODE.get(code, Errors.UNKNOWN_SERVER_ERROR)


def dec_errors(code: Any, what: str) -> Errors:
    return _errors(expect_int(code, what))


# ---------------------------------------------------------- replica fetch
#
# A follower's fetch of the metadata logs it replicates from one leader:
#
#   request  {"replica_id": int, "max_wait_ms": int, "entries_max": int,
#             "partitions": [[topic_id, partition, current_leader_epoch,
#                             fetch_offset, last_fetched_epoch,
#                             high_watermark], ...]}
#
# ``high_watermark`` is the follower's, as KIP-1166 adds it; -1 means the
# follower does not send it (the leader then parks as before KIP-1166).
# Beside the items, one per partition: ``log_start_offsets`` (the
# follower's log starts) and ``tiered_through`` (the end offset of the
# follower's last tiered-segment row, -1 for none; sent only when some
# partition has one).  Every field here is version 1's (e739335 has them
# all), so each goes to a peer of any version this side speaks; a field
# added later goes only to a peer whose version knows it.
#
#   response {"keys": [[object_key, uploader, file_size], ...],
#             "partitions": [[error, high_watermark, log_start_offset,
#                             log_end_offset, diverging_epoch,
#                             diverging_end_offset, entries], ...],
#             "segments": [[[start, end, size, uploader, object_key], ...], ...]}
#
# with entries ``[[header, key_index, byte_offset, size, log_append_time,
# batch_max_timestamp], ...]``: object keys are sent once per response, since
# one WAL file holds batches of many partitions.  ``diverging_epoch`` is -2
# when the follower's log does not diverge.  ``segments`` (issue 31), one
# list per partition, only when some partition has one: the leader's segment
# rows the follower lacks, for it to apply with the same reference swap
# (docs/design/tiered.md, "How replicas follow"); absent means none (an
# older leader, which an older follower ignores).
#
# Rewrites (docs/design/compaction.md, "Replicas"): the request may carry
# ``rows_checks``, one per partition, ``[from, through, digest]`` (the
# digest of the follower's rows starting in ``[from, through]``; from -1:
# none, ``[-1, -1, b""]``); the
# answer ``rewrites``, shaped as ``segments``: the leader's rows starting
# in a window whose digest differs from its own, for the follower to take
# over its rows.  Each sent only when some partition has one.

NO_DIVERGENCE = -2
# Segment rows one answer carries per partition: a caught-up follower gets
# each row in the fetch after its range is in its log (one at a time), one
# far behind catches up over successive fetches.
SEGMENT_SWAPS_PER_FETCH_MAX = 8
# A segment row's object key, in UTF-8 bytes: the bound every replicated
# entry's key has (``partlog.wal.key``), which the store checks on appends.
SEGMENT_KEY_BYTES_MAX = OBJECT_KEY_BYTES_MAX
# A window of rows a follower checks per partition and fetch: at most this
# many of its rows, and of the leader's rows starting in it at most this
# many come back (the next window starts after the last one sent).
ROWS_CHECKED_PER_FETCH_MAX = 8
# The digest of a window of rows (BLAKE2b).
ROWS_DIGEST_BYTES = 16


@dataclass(frozen=True, slots=True)
class RowsCheck:
    """A follower's rows starting in ``[from_offset, through]``, by digest."""

    from_offset: int
    through: int
    digest: bytes


@dataclass(frozen=True, slots=True)
class ReplicaSegment:
    """A leader's tiered-segment row as a follower receives it: the batches
    of ``[start_offset, end_offset]`` live, concatenated in offset order, in
    ``object_key`` (``size`` bytes, uploaded by broker ``uploader``)."""

    start_offset: int
    end_offset: int
    size: int
    uploader: int
    object_key: str


# Named tuples, not frozen dataclasses: a replica fetch builds some of each
# per partition, and a frozen dataclass takes three times as long to build.
class ReplicaFetchPartition(NamedTuple):
    topic_id_partition: TopicIdPartition
    current_leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    high_watermark: int  # -1: not sent
    # The follower's log start (Kafka's FetchRequest LogStartOffset); -1: not
    # sent (an older follower).
    log_start_offset: int = -1
    # The end offset of the follower's last segment row; -1: none (or an
    # older follower).
    tiered_through: int = -1
    # A window of the follower's rows for the leader to compare (None: none).
    rows_check: RowsCheck | None = None


class ReplicaFetchResult(NamedTuple):
    error: Errors
    high_watermark: int = -1
    log_start_offset: int = -1
    log_end_offset: int = -1
    diverging_epoch: int = NO_DIVERGENCE
    diverging_end_offset: int = -1
    entries: tuple[ReplicatedEntry, ...] = ()
    # The leader's segment rows for the follower to swap to, ascending.
    segments: tuple[ReplicaSegment, ...] = ()
    # The leader's rows starting in the follower's window when it differs.
    rewrites: tuple[ReplicaSegment, ...] = ()


def enc_replica_fetch(
    replica_id: int, max_wait_ms: int, entries_max: int, parts: Sequence[ReplicaFetchPartition]
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "replica_id": replica_id,
        "max_wait_ms": max_wait_ms,
        "entries_max": entries_max,
        "partitions": [
            [
                *enc_tp(p.topic_id_partition),
                p.current_leader_epoch,
                p.fetch_offset,
                p.last_fetched_epoch,
                p.high_watermark,
            ]
            for p in parts
        ],
        # Beside the items.  Version 1 (e739335) knows it, as it knows
        # tiered_through and rows_checks: sent at every version this side
        # speaks.  A field added later is sent only at the version that
        # knows it (docs/design/upgrades.md).
        "log_start_offsets": [p.log_start_offset for p in parts],
    }
    if any(p.tiered_through >= 0 for p in parts):
        body["tiered_through"] = [p.tiered_through for p in parts]
    if any(p.rows_check is not None for p in parts):
        body["rows_checks"] = [
            [-1, -1, b""] if (c := p.rows_check) is None else [c.from_offset, c.through, c.digest] for p in parts
        ]
    return body


def dec_replica_fetch(body: Any, partitions_max: int) -> tuple[int, int, int, list[ReplicaFetchPartition]]:
    """(replica_id, max_wait_ms, entries_max, partitions)."""
    m = expect_map(body, "replica_fetch")
    replica_id = expect_int(field(m, "replica_id", "replica_fetch"), "replica_fetch.replica_id")
    max_wait = expect_int(field(m, "max_wait_ms", "replica_fetch"), "replica_fetch.max_wait_ms")
    entries_max = expect_int(field(m, "entries_max", "replica_fetch"), "replica_fetch.entries_max")
    if max_wait < 0 or entries_max <= 0:
        raise WireError("replica_fetch: max_wait_ms must be >= 0 and entries_max > 0")
    items = dec_partition_items(
        m,
        "partitions",
        "replica_fetch",
        (int, int, int, int),
        "[topic_id, partition, current_leader_epoch, fetch_offset, last_fetched_epoch, high_watermark]",
        partitions_max,
    )
    starts = _per_partition_offsets(m, "log_start_offsets", len(items))
    tiered = _per_partition_offsets(m, "tiered_through", len(items))
    checks = _rows_checks(m.get("rows_checks"), len(items))
    return (
        replica_id,
        max_wait,
        entries_max,
        [
            ReplicaFetchPartition(tp, rest[0], rest[1], rest[2], rest[3], lso, through, check)
            for (tp, rest), lso, through, check in zip(items, starts, tiered, checks, strict=True)
        ],
    )


def _rows_checks(v: Any, n: int) -> list[RowsCheck | None]:
    """The optional ``rows_checks``: per partition ``[-1, -1, b""]`` (none)
    or ``[from, through, digest]`` with ``0 <= from <= through < 2^63`` and a
    digest of exactly ``ROWS_DIGEST_BYTES``; None when absent."""
    if v is None:
        return [None] * n
    what = "replica_fetch.rows_checks"
    if type(v) is not list or len(v) != n:
        raise WireError(f"{what}: a list of {n} checks")
    out: list[RowsCheck | None] = []
    for c in v:
        if type(c) is not list or len(c) != 3:
            raise WireError(f"{what}: each [from, through, digest]")
        start, through, digest = c
        if [start, through, digest] == [-1, -1, b""]:
            out.append(None)
            continue
        if type(start) is not int or type(through) is not int or not 0 <= start <= through < 1 << 63:
            raise WireError(f"{what}: window [{start!r}, {through!r}] not int64s, 0 <= from <= through")
        if type(digest) is not bytes or len(digest) != ROWS_DIGEST_BYTES:
            raise WireError(f"{what}: a digest of {ROWS_DIGEST_BYTES} bytes")
        out.append(RowsCheck(start, through, digest))
    return out


def _per_partition_offsets(m: dict[str, Any], name: str, n: int) -> list[int]:
    """The optional ``m[name]``: an offset >= -1 per partition; -1s when absent (an older follower)."""
    values = m.get(name)
    if values is None:
        return [-1] * n
    if type(values) is not list or len(values) != n or any(type(x) is not int or not -1 <= x < 1 << 63 for x in values):
        raise WireError(f"replica_fetch.{name}: a list of {n} int64s >= -1")
    return values


def enc_replica_fetch_response(results: Sequence[ReplicaFetchResult]) -> dict[str, Any]:
    keys: dict[str, int] = {}
    key_rows: list[list[Any]] = []
    parts = []
    for r in results:
        entries = []
        for e in r.entries:
            k = keys.get(e.object_key)
            if k is None:
                k = keys[e.object_key] = len(key_rows)
                key_rows.append([e.object_key, e.uploader_broker_id, e.file_size])
            entries.append([e.header, k, e.byte_offset, e.size, e.log_append_time, e.batch_max_timestamp])
        parts.append(
            [
                int(r.error),
                r.high_watermark,
                r.log_start_offset,
                r.log_end_offset,
                r.diverging_epoch,
                r.diverging_end_offset,
                entries,
            ]
        )
    body: dict[str, Any] = {"keys": key_rows, "partitions": parts}
    if any(r.segments for r in results):
        body["segments"] = [
            [[g.start_offset, g.end_offset, g.size, g.uploader, g.object_key] for g in r.segments] for r in results
        ]
    if any(r.rewrites for r in results):
        body["rewrites"] = [
            [[g.start_offset, g.end_offset, g.size, g.uploader, g.object_key] for g in r.rewrites] for r in results
        ]
    return body


def dec_replica_fetch_response(body: Any, n_partitions: int) -> list[ReplicaFetchResult]:
    m = expect_map(body, "replica_fetch response")
    keys = []
    for i, row in enumerate(expect_list(field(m, "keys", "replica_fetch response"), "replica_fetch response.keys")):
        what = f"replica_fetch response.keys[{i}]"
        key, uploader, size = expect_list(row, what, 3)
        keys.append((expect_str(key, what), expect_int(uploader, what), expect_int(size, what)))
    out = []
    parts = expect_list(
        field(m, "partitions", "replica_fetch response"), "replica_fetch response.partitions", n_partitions
    )
    segments = dec_replica_segments(m.get("segments"), n_partitions)
    rewrites = dec_replica_segments(m.get("rewrites"), n_partitions, "rewrites")
    for i, p in enumerate(parts):
        if type(p) is list and len(p) == 7 and type(p[6]) is list and not p[6] and tuple(map(type, p[:6])) == _INTS6:
            # A quiet partition's usual answer: the checks below, unnamed (thousands per answer).
            err, hwm, lso, leo, div_epoch, div_end, _ = p
            out.append(
                ReplicaFetchResult(_errors(err), hwm, lso, leo, div_epoch, div_end, (), segments[i], rewrites[i])
            )
            continue
        what = f"replica_fetch response.partitions[{i}]"
        err, hwm, lso, leo, div_epoch, div_end, raw_entries = expect_list(p, what, 7)
        entries = []
        for j, e in enumerate(expect_list(raw_entries, f"{what}.entries")):
            ew = f"{what}.entries[{j}]"
            header, k, byte_offset, size, append_time, max_ts = expect_list(e, ew, 6)
            ki = expect_int(k, ew)
            if not 0 <= ki < len(keys):
                raise WireError(f"{ew}: key index {ki} out of range")
            key, uploader, file_size = keys[ki]
            entries.append(
                ReplicatedEntry(
                    expect_bytes(header, ew),
                    key,
                    expect_int(byte_offset, ew),
                    expect_int(size, ew),
                    expect_int(append_time, ew),
                    expect_int(max_ts, ew),
                    uploader,
                    file_size,
                )
            )
        out.append(
            ReplicaFetchResult(
                dec_errors(err, what),
                expect_int(hwm, what),
                expect_int(lso, what),
                expect_int(leo, what),
                expect_int(div_epoch, what),
                expect_int(div_end, what),
                tuple(entries),
                segments[i],
                rewrites[i],
            )
        )
    return out


def _utf8_bytes(s: str) -> int:
    """The length of ``s`` in UTF-8, 0 when it does not encode (a lone surrogate)."""
    try:
        return len(s.encode())
    except UnicodeEncodeError:
        return 0


def dec_replica_segments(v: Any, n_partitions: int, name: str = "segments") -> list[tuple[ReplicaSegment, ...]]:
    """A replica fetch answer's ``segments`` (or ``rewrites``): per partition, at most
    ``SEGMENT_SWAPS_PER_FETCH_MAX`` rows, strictly ascending and disjoint,
    each with non-negative offsets (start <= end), a positive size, a broker
    id and a non-empty key of at most ``SEGMENT_KEY_BYTES_MAX`` bytes, all
    within what the store packs; None (absent) is no rows."""
    if v is None:
        return [()] * n_partitions
    out = []
    for i, rows in enumerate(expect_list(v, f"replica_fetch response.{name}", n_partitions)):
        what = f"replica_fetch response.{name}[{i}]"
        if type(rows) is not list or len(rows) > SEGMENT_SWAPS_PER_FETCH_MAX:
            raise WireError(f"{what}: a list of at most {SEGMENT_SWAPS_PER_FETCH_MAX} segment rows")
        got: list[ReplicaSegment] = []
        for j, row in enumerate(rows):
            where = f"{what}[{j}]"
            start, end, size, uploader, key = expect_list(row, where, 5)
            start, end = expect_int(start, f"{where}.start"), expect_int(end, f"{where}.end")
            size, uploader = expect_int(size, f"{where}.size"), expect_int(uploader, f"{where}.uploader")
            key = expect_str(key, f"{where}.object_key")
            after = got[-1].end_offset if got else -1
            if not after < start <= end < 1 << 63:
                raise WireError(f"{where}: range [{start}, {end}] not ascending, disjoint and non-negative")
            if not 0 < size < 1 << 63 or not 0 <= uploader < 1 << 31:
                raise WireError(f"{where}: size {size} or uploader {uploader} out of range")
            if not 0 < _utf8_bytes(key) <= SEGMENT_KEY_BYTES_MAX:
                raise WireError(f"{where}: object key empty, not UTF-8 or over {SEGMENT_KEY_BYTES_MAX} bytes")
            got.append(ReplicaSegment(start, end, size, uploader, key))
        out.append(tuple(got))
    return out


# ------------------------------------------------------- reference checks
#
# walmgr asks a leader whether WAL objects are still referenced:
#   request  {"checks": [[object_key, topic_id, partition, leader_epoch], ...]}
#   response {"verdicts": [int, ...]}   (Verdict numbers)


class Verdict(IntEnum):
    """A leader's answer for one (object, partition) check."""

    NOT_REFERENCED = 0
    REFERENCED = 1
    NOT_LEADER = 2  # no replica of the partition here (leader or follower) at the epoch asked
    UNKNOWN_PARTITION = 3  # the broker does not know the partition (yet)
    # The leader's ISR (with a change waiting for the controller) has a
    # member walmgr did not ask: it may hold the reference.  Ask again with
    # fresh metadata.
    ISR_CHANGED = 4


# Per check, the replicas walmgr asks about the partition (leader and ISR):
# the leader answers ISR_CHANGED if its ISR has one more.  None: not sent.
AskedReplicas = tuple[int, ...] | None


def enc_reference_checks(checks: Sequence[tuple[str, TopicIdPartition, int, AskedReplicas]]) -> dict[str, Any]:
    """Checks of (key, partition, leader epoch, replicas asked or None)."""
    body: dict[str, Any] = {"checks": [[key, *enc_tp(tp), epoch] for key, tp, epoch, _ in checks]}
    if any(asked is not None for *_, asked in checks):
        # Beside the items (version 1, e739335, knows it: sent at every
        # version); [] for a check that names none, which no leader's ISR
        # fits in.
        body["asked"] = [list(asked) if asked is not None else [] for *_, asked in checks]
    return body


def dec_reference_checks(
    body: Any, checks_max: int, asked_max: int
) -> list[tuple[str, TopicIdPartition, int, AskedReplicas]]:
    """(key, partition, leader epoch, replicas asked or None) per check."""
    m = expect_map(body, "referenced_files")
    raw = expect_list(field(m, "checks", "referenced_files"), "referenced_files.checks")
    if len(raw) > checks_max:
        raise WireError(f"referenced_files.checks: at most {checks_max} items, got {len(raw)}")
    asked: list[AskedReplicas] = [None] * len(raw)
    if "asked" in m:
        lists = expect_list(m["asked"], "referenced_files.asked", len(raw))
        for i, ids in enumerate(lists):
            where = f"referenced_files.asked[{i}]"
            if type(ids) is not list or len(ids) > asked_max:
                raise WireError(f"{where}: a list of at most {asked_max} broker ids")
            asked[i] = tuple(expect_int(b, f"{where}[]") for b in ids)
    out: list[tuple[str, TopicIdPartition, int, AskedReplicas]] = []
    for i, c in enumerate(raw):
        what = f"referenced_files.checks[{i}]"
        key, tid, part, epoch = expect_list(c, what, 4)
        out.append(
            (expect_str(key, f"{what}.key"), dec_tp([tid, part], what), expect_int(epoch, f"{what}.epoch"), asked[i])
        )
    return out


def dec_verdicts(body: Any, n: int) -> list[int]:
    m = expect_map(body, "referenced_files response")
    verdicts = expect_list(field(m, "verdicts", "referenced_files response"), "referenced_files.verdicts", n)
    return [expect_int(v, f"referenced_files.verdicts[{i}]") for i, v in enumerate(verdicts)]


# walmgr's sweep: does any entry of this broker's store reference these
# objects, whatever partition the footer named?
#   {"keys": [object_key, ...]}  ->  {"referenced": [index into keys, ...]}


def enc_keys_referenced(keys: Sequence[str]) -> dict[str, Any]:
    return {"keys": list(keys)}


def dec_keys_referenced(body: Any, keys_max: int) -> list[str]:
    m = expect_map(body, "keys_referenced")
    raw = expect_list(field(m, "keys", "keys_referenced"), "keys_referenced.keys")
    if len(raw) > keys_max:
        raise WireError(f"keys_referenced.keys: at most {keys_max} items, got {len(raw)}")
    return [expect_str(k, f"keys_referenced.keys[{i}]") for i, k in enumerate(raw)]


def dec_keys_referenced_answer(body: Any, n: int) -> set[int]:
    """The indexes (into the ``n`` keys asked) the broker references; an
    index out of range is a broken answer (WireError), never ignored."""
    m = expect_map(body, "keys_referenced response")
    raw = expect_list(field(m, "referenced", "keys_referenced response"), "keys_referenced.referenced")
    if len(raw) > n:
        raise WireError(f"keys_referenced.referenced: at most {n} items, got {len(raw)}")
    out: set[int] = set()
    for i, v in enumerate(raw):
        idx = expect_int(v, f"keys_referenced.referenced[{i}]")
        if not 0 <= idx < n:
            raise WireError(f"keys_referenced.referenced[{i}]: {idx} is not an index of the {n} keys asked")
        out.add(idx)
    return out


# ----------------------------------------------------------- notifications
#
# A broker tells walmgr about objects it uploaded (best effort):
#   {"objects": [[object_key, size, created_ms, broker_id, [[topic_id, partition], ...]], ...]}


def enc_wal_uploaded(objects: Sequence[tuple[str, int, int, int, Sequence[TopicIdPartition]]]) -> dict[str, Any]:
    return {
        "objects": [[k, size, created, broker, [enc_tp(tp) for tp in tps]] for k, size, created, broker, tps in objects]
    }


def dec_wal_uploaded(body: Any, objects_max: int) -> list[tuple[str, int, int, int, list[TopicIdPartition]]]:
    m = expect_map(body, "wal_uploaded")
    raw = expect_list(field(m, "objects", "wal_uploaded"), "wal_uploaded.objects")
    if len(raw) > objects_max:
        raise WireError(f"wal_uploaded.objects: at most {objects_max} items, got {len(raw)}")
    out = []
    for i, o in enumerate(raw):
        what = f"wal_uploaded.objects[{i}]"
        key, size, created, broker, tps = expect_list(o, what, 5)
        out.append(
            (
                expect_str(key, f"{what}.key"),
                expect_int(size, f"{what}.size"),
                expect_int(created, f"{what}.created_ms"),
                expect_int(broker, f"{what}.broker"),
                [dec_tp(t, f"{what}.partitions[{j}]") for j, t in enumerate(expect_list(tps, f"{what}.partitions"))],
            )
        )
    return out
