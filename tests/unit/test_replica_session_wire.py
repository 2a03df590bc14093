"""A replica fetch session's wire fields (partlog/rpc/replica_rows.py) fail
closed: any value of a request's ``session`` and ``forgotten``, or of an
answer's ``session``, ``session_size`` and ``session_error``, decodes to
valid values or raises WireError, never anything else; and the RPC schema
the server checks first refuses what the decoder would."""

from __future__ import annotations

import uuid
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from partlog.kafka.records import TopicIdPartition
from partlog.rpc.methods import BROKER_SCHEMAS
from partlog.rpc.replica_rows import (
    FORGOTTEN,
    SESSION,
    SESSION_ERROR,
    SESSION_ERRORS,
    SESSION_ID_MAX,
    SESSION_SIZE,
    dec_session,
    dec_session_answer,
    enc_session,
)
from partlog.rpc.wire import WireError, enc_replica_fetch

_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, SESSION_ID_MAX + 2),
    st.sampled_from([SESSION_ID_MAX, SESSION_ID_MAX + 1, -1, 1 << 64]),
    st.floats(allow_nan=False),
    st.text(max_size=3),
    st.binary(max_size=17),
)
_VALUES = st.one_of(_SCALARS, st.lists(_SCALARS, max_size=3), st.lists(st.lists(_SCALARS, max_size=3), max_size=3))
# Near the edges of what is valid, so that a dropped check shows.
_EDGES = st.sampled_from([None, -2, -1, 0, 1, SESSION_ID_MAX, SESSION_ID_MAX + 1])
_IDS = st.one_of(_EDGES, _EDGES, _EDGES, _VALUES)
_SESSIONS = st.one_of(st.lists(_IDS, min_size=2, max_size=2), st.lists(_IDS, max_size=3), _VALUES)


def _ok_id(x: Any) -> bool:
    return type(x) is int and 0 <= x <= SESSION_ID_MAX


def _tp_ok(it: Any) -> bool:
    return type(it) is list and len(it) == 2 and type(it[0]) is bytes and len(it[0]) == 16 and _non_negative(it[1])


def _non_negative(x: Any) -> bool:
    return type(x) is int and x >= 0


@settings(max_examples=500)
@given(_SESSIONS, st.one_of(st.just("absent"), _VALUES, st.lists(st.tuples(st.binary(min_size=15, max_size=16),
    st.integers(-1, 5)).map(list), max_size=4)))  # fmt: skip
def test_a_requests_session_fails_closed(session: Any, forgotten: Any) -> None:
    body = enc_replica_fetch(2, 500, 100, [])
    if session is not None:
        body[SESSION] = session
    if forgotten != "absent":
        body[FORGOTTEN] = forgotten
    valid = session is None or (
        type(session) is list
        and len(session) == 2
        and all(map(_ok_id, session))
        and (forgotten == "absent" or (type(forgotten) is list and all(map(_tp_ok, forgotten))))
    )
    try:
        got = dec_session(body, 10)
    except WireError:
        assert not valid
    else:
        assert valid
        if session is None:
            assert got is None
        else:
            assert got is not None and [got[0], got[1]] == session
            assert all(isinstance(tp, TopicIdPartition) for tp in got[2])


@settings(max_examples=500)
@given(_IDS, _IDS, st.one_of(st.none(), st.sampled_from(SESSION_ERRORS), _VALUES))
def test_an_answers_session_fails_closed(sid: Any, size: Any, error: Any) -> None:
    body: dict[str, Any] = {"keys": [], "partitions": []}
    for name, v in ((SESSION, sid), (SESSION_SIZE, size), (SESSION_ERROR, error)):
        if v is not None:
            body[name] = v
    valid = (
        (sid is None or _ok_id(sid))
        and (size is None or (type(size) is int and size >= -1))
        and (error is None or (type(error) is str and error in SESSION_ERRORS))
    )
    try:
        got_sid, got_size, got_error = dec_session_answer(body)
    except WireError:
        assert not valid
    else:
        assert valid
        assert (got_sid, got_size, got_error) == (sid or 0, -1 if size is None else size, error)


def test_a_session_round_trips_and_the_schema_takes_it() -> None:
    tps = [TopicIdPartition(uuid.UUID(int=i + 1), i) for i in range(3)]
    body = enc_replica_fetch(2, 500, 100, [])
    enc_session(body, 17, 4, tps)
    BROKER_SCHEMAS["replica_fetch"].check(body, "replica_fetch")
    assert dec_session(body, 10) == (17, 4, tps)


@given(_SESSIONS)
def test_the_schema_refuses_what_the_decoder_would(session: Any) -> None:
    body = enc_replica_fetch(2, 500, 100, [])
    body[SESSION] = session
    try:
        BROKER_SCHEMAS["replica_fetch"].check(body, "replica_fetch")
    except WireError:
        return
    assert dec_session(body, 10) is not None  # the schema's accepting it means the decoder does too
