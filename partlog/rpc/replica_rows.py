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

from partlog.rpc.wire import ReplicaFetchResult, WireError, enc_replica_fetch_response, expect_map

# The first RPC version whose leaders answer sparsely when asked.
SPARSE_RPC_VERSION = 4
OMIT_QUIET = "omit_quiet"
ROWS_OF = "rows_of"


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


__all__ = ["OMIT_QUIET", "ROWS_OF", "SPARSE_RPC_VERSION", "dec_rows_of", "enc_sparse_response"]
