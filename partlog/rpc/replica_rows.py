"""A replica fetch's sparse answer (RPC version ``SPARSE_RPC_VERSION``).

A follower of a leader at that version adds ``omit_quiet: true`` to its
replica fetch; the leader then leaves out every partition whose answer the
follower's apply would find nothing in (``partlog.replication.partition.
quiet_noop``: no entries, rows, error or divergence, and the HWM, log start
and log end the follower itself sent), and names the partitions it kept in
``rows_of``: their indices in the request, ascending.  With thousands of
quiet partitions a fetch's answer carries the few that moved, not them all
(docs/design/replication.md, "Many quiet partitions").

An older leader ignores ``omit_quiet`` (an unknown optional field) and
answers in full, without ``rows_of``; an older follower never asks, so it
never gets a sparse answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from partlog.kafka.records import TopicIdPartition
from partlog.rpc.wire import (
    ReplicaFetchResult,
    WireError,
    dec_partition_items,
    enc_replica_fetch_response,
    enc_tp,
    expect_map,
)

# The first RPC version whose leaders answer sparsely when asked, and the
# first that keeps replica fetch sessions (partlog.replication.sessions).
SPARSE_RPC_VERSION = 4
SESSION_RPC_VERSION = 5
OMIT_QUIET = "omit_quiet"
ROWS_OF = "rows_of"
# A request's [session_id, epoch] ([0, 0]: open a new session with these
# partitions); an answer's session id.
SESSION = "session"
# The partitions an incremental request drops from its session.
FORGOTTEN = "forgotten"
# An answer's refusal of the session (no rows): the follower opens a new one.
SESSION_ERROR = "session_error"
# The session's partitions after the request (the follower checks its copy).
SESSION_SIZE = "session_size"
SESSION_ERRORS = ("unknown", "epoch", "invalid")
SESSION_ID_MAX = (1 << 31) - 1


def enc_sparse_response(results: Sequence[ReplicaFetchResult], rows_of: list[int]) -> dict[str, Any]:
    """The answer of the rows ``rows_of`` (ascending request indices) of ``results``."""
    body = enc_replica_fetch_response([results[i] for i in rows_of])
    body[ROWS_OF] = rows_of
    return body


def dec_rows_of(body: Any, n_partitions: int) -> list[int] | None:
    """The request indices a sparse answer's rows are for (None: a full
    answer, one row per partition asked).  Fails closed: at most
    ``n_partitions`` ints, strictly ascending, each in [0, n_partitions)."""
    v = expect_map(body, "replica_fetch response").get(ROWS_OF)
    if v is None:
        return None
    if type(v) is not list or len(v) > n_partitions:
        raise WireError(f"replica_fetch response.{ROWS_OF}: a list of at most {n_partitions} indices")
    last = -1
    for i in v:
        if type(i) is not int or not last < i < n_partitions:
            what = f"replica_fetch response.{ROWS_OF}"
            raise WireError(f"{what}: indices ascending in [0, {n_partitions}), got {i!r:.40} after {last}")
        last = i
    return v


def enc_session(body: dict[str, Any], session_id: int, epoch: int, forgotten: Sequence[TopicIdPartition]) -> None:
    body[SESSION] = [session_id, epoch]
    if forgotten:
        body[FORGOTTEN] = [enc_tp(tp) for tp in forgotten]


def dec_session(body: Any, partitions_max: int) -> tuple[int, int, list[TopicIdPartition]] | None:
    """A request's (session_id, epoch, forgotten); None without a session
    (an older follower).  Ids and epochs in [0, SESSION_ID_MAX]."""
    m = expect_map(body, "replica_fetch")
    v = m.get(SESSION)
    if v is None:
        return None
    if type(v) is not list or len(v) != 2 or any(type(x) is not int or not 0 <= x <= SESSION_ID_MAX for x in v):
        raise WireError(f"replica_fetch.{SESSION}: [session_id, epoch], ints in [0, {SESSION_ID_MAX}]")
    forgotten = []
    if FORGOTTEN in m:
        items = dec_partition_items(m, FORGOTTEN, "replica_fetch", (), "[topic_id, partition]", partitions_max)
        forgotten = [tp for tp, _ in items]
    return v[0], v[1], forgotten


def dec_session_answer(body: Any) -> tuple[int, int, str | None]:
    """An answer's (session_id, session_size, session_error); (0, -1, None)
    from a leader that kept no session."""
    m = expect_map(body, "replica_fetch response")
    sid, size, error = m.get(SESSION, 0), m.get(SESSION_SIZE, -1), m.get(SESSION_ERROR)
    if type(sid) is not int or not 0 <= sid <= SESSION_ID_MAX or type(size) is not int or size < -1:
        raise WireError(f"replica_fetch response: {SESSION} and {SESSION_SIZE} must be non-negative ints")
    if error is not None and error not in SESSION_ERRORS:
        raise WireError(f"replica_fetch response.{SESSION_ERROR}: one of {SESSION_ERRORS}, got {error!r:.40}")
    return sid, size, error


__all__ = [
    "FORGOTTEN",
    "OMIT_QUIET",
    "ROWS_OF",
    "SESSION",
    "SESSION_ERROR",
    "SESSION_RPC_VERSION",
    "SESSION_SIZE",
    "SPARSE_RPC_VERSION",
    "dec_rows_of",
    "dec_session",
    "dec_session_answer",
    "enc_session",
    "enc_sparse_response",
]
