"""The replica fetch's tiered-segment fields (issue 31) fail closed: a
follower's ``tiered_through`` and a leader's ``segments`` rows decode to
what the wire allows or raise WireError (that request or answer fails,
nothing else), and round-trip; an older peer's body (the fields absent)
means -1 and no rows."""

from __future__ import annotations

import uuid
from typing import Any

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from partlog.kafka.errors import Errors
from partlog.kafka.records import TopicIdPartition
from partlog.rpc.methods import BROKER_SCHEMAS
from partlog.rpc.wire import (
    SEGMENT_KEY_BYTES_MAX,
    SEGMENT_SWAPS_PER_FETCH_MAX,
    ReplicaFetchPartition,
    ReplicaFetchResult,
    ReplicaSegment,
    WireError,
    dec_replica_fetch,
    dec_replica_fetch_response,
    enc_replica_fetch,
    enc_replica_fetch_response,
)

TPS = [TopicIdPartition(uuid.UUID(int=i + 1), i) for i in range(3)]
values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.text(max_size=8) | st.binary(max_size=8),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=30,
)
ints = st.integers(-3, 2**64) | st.booleans() | st.none() | st.text(max_size=2)
keys = st.text(max_size=12) | st.just("k" * (SEGMENT_KEY_BYTES_MAX + 1)) | st.just("\ud800") | st.integers(0, 3)
rows = st.lists(st.tuples(ints, ints, ints, ints, keys).map(list) | values, max_size=SEGMENT_SWAPS_PER_FETCH_MAX + 2)


def response(segments: Any, n: int = 2) -> dict[str, Any]:
    body = enc_replica_fetch_response([ReplicaFetchResult(Errors.NONE, 5, 0, 5) for _ in range(n)])
    body["segments"] = segments
    return body


def request(tiered_through: Any) -> dict[str, Any]:
    body = enc_replica_fetch(3, 100, 10, [ReplicaFetchPartition(tp, 0, 5, 0, 5) for tp in TPS])
    body["tiered_through"] = tiered_through
    return body


@given(st.lists(rows, max_size=3) | values)
def test_hostile_rows_decode_to_valid_rows_or_a_wire_error(segments: Any) -> None:
    try:
        got = dec_replica_fetch_response(response(segments), 2)
    except WireError:
        return
    for r in got:
        assert len(r.segments) <= SEGMENT_SWAPS_PER_FETCH_MAX
        after = -1
        for g in r.segments:
            assert all(type(x) is int for x in (g.start_offset, g.end_offset, g.size, g.uploader))
            assert after < g.start_offset <= g.end_offset < 2**63 and 0 < g.size < 2**63 and 0 <= g.uploader < 2**31
            assert type(g.object_key) is str and 0 < len(g.object_key.encode()) <= SEGMENT_KEY_BYTES_MAX
            after = g.end_offset


@given(st.lists(ints, max_size=4) | values.filter(lambda v: v is not None))
def test_a_hostile_tiered_through_decodes_to_offsets_or_a_wire_error(tiered: Any) -> None:
    body = request(tiered)
    schema_ok = True
    try:
        BROKER_SCHEMAS["replica_fetch"].check(body, "replica_fetch")
    except WireError:
        schema_ok = False
    try:
        *_, parts = dec_replica_fetch(body, 10)
    except WireError:
        return
    assert schema_ok  # the decoder accepts nothing the server's schema refuses
    assert [p.tiered_through for p in parts] == tiered
    assert all(type(p.tiered_through) is int and -1 <= p.tiered_through < 2**63 for p in parts)


segment_rows = st.lists(
    st.tuples(
        st.integers(0, 5), st.integers(0, 5), st.integers(1, 2**40), st.integers(0, 2**31 - 1), st.text(min_size=1)
    ),
    max_size=SEGMENT_SWAPS_PER_FETCH_MAX,
)


def ascending(raw: list[tuple[int, int, int, int, str]]) -> tuple[ReplicaSegment, ...]:
    out, at = [], 0
    for gap, length, size, uploader, key in raw:
        start = at + gap
        out.append(ReplicaSegment(start, start + length, size, uploader, key))
        at = start + length + 1
    return tuple(out)


@given(st.lists(segment_rows, min_size=1, max_size=3), st.lists(st.integers(-1, 2**62), min_size=1, max_size=3))
def test_rows_and_tiered_through_round_trip(
    raw: list[list[tuple[int, int, int, int, str]]], through: list[int]
) -> None:
    results = [ReplicaFetchResult(Errors.NONE, 9, 0, 9, segments=ascending(r)) for r in raw]
    body = msgpack.unpackb(msgpack.packb(enc_replica_fetch_response(results)), raw=False)
    assert dec_replica_fetch_response(body, len(results)) == results
    assert ("segments" in body) == any(r.segments for r in results)
    parts = [ReplicaFetchPartition(TPS[0], 0, 5, 0, 5, 0, t) for t in through]
    req = msgpack.unpackb(msgpack.packb(enc_replica_fetch(3, 100, 10, parts)), raw=False)
    BROKER_SCHEMAS["replica_fetch"].check(req, "replica_fetch")
    assert dec_replica_fetch(req, 10)[3] == parts
    assert ("tiered_through" in req) == any(t >= 0 for t in through)


def test_an_older_peer_sends_neither_field() -> None:
    req = enc_replica_fetch(3, 100, 10, [ReplicaFetchPartition(tp, 0, 5, 0, 5) for tp in TPS])
    assert "tiered_through" not in req
    assert [p.tiered_through for p in dec_replica_fetch(req, 10)[3]] == [-1, -1, -1]
    body = enc_replica_fetch_response([ReplicaFetchResult(Errors.NONE, 5, 0, 5)])
    assert "segments" not in body
    assert dec_replica_fetch_response(body, 1)[0].segments == ()


GOOD = [0, 9, 100, 1, "tiered/a.log"]


@pytest.mark.parametrize(
    "bad",
    [
        [[GOOD] * 2, []],  # overlapping (the same row twice)
        [[[10, 19, 100, 1, "b"], GOOD], []],  # descending
        [[[5, 4, 100, 1, "k"]], []],  # start > end
        [[[-1, 4, 100, 1, "k"]], []],  # negative offset
        [[[0, 2**63, 100, 1, "k"]], []],  # past int64
        [[[0, 4, 0, 1, "k"]], []],  # empty segment
        [[[0, 4, 100, -1, "k"]], []],  # not a broker id
        [[[0, 4, 100, 2**31, "k"]], []],
        [[[0, 4, 100, 1, ""]], []],  # no key
        [[[0, 4, 100, 1, "k" * (SEGMENT_KEY_BYTES_MAX + 1)]], []],
        [[[0, 4, 100, 1, "\ud800"]], []],  # not UTF-8
        [[[True, 4, 100, 1, "k"]], []],  # a bool is no offset
        [[[0, 4, 100.0, 1, "k"]], []],
        [[[0, 4, 100, 1, b"k"]], []],
        [[[0, 4, 100, 1]], []],
        [[[10 * i, 10 * i + 9, 1, 1, "k"] for i in range(SEGMENT_SWAPS_PER_FETCH_MAX + 1)], []],
        [[]],  # one list for two partitions
        [[], [], []],
        {"0": []},
    ],
)
def test_bad_rows_fail_the_answer(bad: Any) -> None:
    with pytest.raises(WireError):
        dec_replica_fetch_response(response(bad), 2)


@pytest.mark.parametrize("bad", [[0, 0], [0, 0, 0, 0], [0, -2, 0], [0, True, 0], [0, 2**63, 0], "0", None])
def test_a_bad_tiered_through_fails_the_request(bad: Any) -> None:
    if bad is None:
        # Absent is an older follower: -1s.
        assert [p.tiered_through for p in dec_replica_fetch(request(None), 10)[3]] == [-1] * 3
        return
    if type(bad) is not list or len(bad) == len(TPS):
        with pytest.raises(WireError):  # the server's schema (one per partition: the decoder's)
            BROKER_SCHEMAS["replica_fetch"].check(request(bad), "replica_fetch")
    with pytest.raises(WireError):
        dec_replica_fetch(request(bad), 10)


# Each field of a partition item, hostile or fine: the decoders' fast paths
# (a quiet partition's usual item, inline) must decide as the checks do.
_tid = st.binary(min_size=15, max_size=17) | st.just(uuid.UUID(int=7).bytes) | values
_num = st.integers(-3, 2**63) | st.booleans() | st.none() | st.just(1.0)
_bad: st.SearchStrategy[Any] = st.sampled_from([-1, -2, True, False, None, 1.0, b"", "x", [], b"\0" * 16]) | _tid | _num


def _set(item: list[Any], at: int, v: Any) -> list[Any]:
    """``item`` with field ``at`` replaced by ``v`` (none past its end)."""
    return [v if i == at else x for i, x in enumerate(item)]


def _wants(v: Any, kind: type) -> bool:
    return type(v) is kind


_fetch_item = st.tuples(
    st.just(uuid.UUID(int=7).bytes), st.integers(0, 3), st.integers(-1, 2**63), st.integers(-1, 9), st.integers(-1, 9),
    st.integers(-1, 9),
).map(list)  # fmt: skip


@given(
    st.lists(
        st.one_of(
            _fetch_item.flatmap(lambda it: st.tuples(st.integers(0, 11), _bad).map(lambda t: _set(it, *t))),
            st.tuples(_tid, _num, _num, _num, _num, _num).map(list),
            values,
        ),
        min_size=1,
        max_size=3,
    )
)
def test_a_fetch_item_decodes_exactly_when_every_field_has_its_type(items: list[Any]) -> None:
    body = enc_replica_fetch(3, 100, 10, [])
    body["partitions"] = items
    body["log_start_offsets"] = [-1] * len(items)
    ok = all(
        type(it) is list
        and len(it) == 6
        and _wants(it[0], bytes)
        and len(it[0]) == 16
        and _wants(it[1], int)
        and it[1] >= 0
        and all(_wants(x, int) for x in it[2:])
        for it in items
    )
    try:
        parts = dec_replica_fetch(body, 10)[3]
    except WireError:
        assert not ok
        return
    assert ok
    for it, p in zip(items, parts, strict=True):
        assert p.topic_id_partition == TopicIdPartition(uuid.UUID(bytes=it[0]), it[1])
        assert [p.current_leader_epoch, p.fetch_offset, p.last_fetched_epoch, p.high_watermark] == it[2:]


_answer_row = st.tuples(*[st.integers(-1, 2**63)] * 6, st.just([])).map(list)


@given(
    st.lists(
        st.one_of(
            _answer_row.flatmap(lambda r: st.tuples(st.integers(0, 13), _bad).map(lambda t: _set(r, *t))),
            st.tuples(_num, _num, _num, _num, _num, _num, st.just([])).map(list),
            values,
        ),
        max_size=3,
    )
)
def test_an_answer_row_decodes_exactly_when_every_field_has_its_type(rows: list[Any]) -> None:
    body = {"keys": [], "partitions": rows}
    ok = all(type(r) is list and len(r) == 7 and all(_wants(x, int) for x in r[:6]) and r[6] == [] for r in rows)
    try:
        out = dec_replica_fetch_response(body, len(rows))
    except WireError:
        assert not ok
        return
    assert ok
    for r, got in zip(rows, out, strict=True):
        known = r[0] in {int(e) for e in Errors}
        assert got.error == (Errors(r[0]) if known else Errors.UNKNOWN_SERVER_ERROR)
        fields = [got.high_watermark, got.log_start_offset, got.log_end_offset]
        assert [*fields, got.diverging_epoch, got.diverging_end_offset] == r[1:6] and got.entries == ()
