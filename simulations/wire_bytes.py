"""Sizes of inter-broker messages on the wire, from the real encoders
(:mod:`partlog.rpc.wire`, :mod:`partlog.rpc.frame`), for the cross-AZ byte counts.

One rule for every metadata byte that crosses an AZ: a commit RPC is sized
as the frame ``enc_commit`` / ``enc_commit_responses`` make, and a copy of
metadata-log entries (a partlog follower's, a coordinator replica's) as the
``replica_fetch`` response frame ``enc_replica_fetch_response`` makes for
those entries.
"""

from __future__ import annotations

from collections.abc import Sequence

from partlog.kafka.errors import Errors
from partlog.kafka.records import CommitBatchRequest, CommitBatchResponse, TopicIdPartition
from partlog.produce.pipeline import SendCommit
from partlog.rpc.frame import Kind, encode_frame
from partlog.rpc.wire import ReplicaFetchResult, enc_commit, enc_commit_responses, enc_replica_fetch_response
from partlog.store import ReplicatedEntry

# A request id the size of a busy connection's (a few bytes of msgpack).
_REQUEST_ID = 1 << 20
# Offsets of a partition some way into its life (msgpack sizes integers by value).
_OFFSET = 1 << 24


def commit_request_bytes(c: SendCommit, uploader_broker_id: int) -> int:
    body = enc_commit(c.key, uploader_broker_id, c.file_size, c.requests, c.acks_all)
    return len(encode_frame(Kind.REQUEST, _REQUEST_ID, "commit", body))


def commit_response_bytes(responses: Sequence[CommitBatchResponse]) -> int:
    return len(encode_frame(Kind.RESPONSE, _REQUEST_ID, "commit", enc_commit_responses(responses)))


def replica_fetch_response_bytes(
    key: str, uploader_broker_id: int, file_size: int, requests: Sequence[CommitBatchRequest]
) -> int:
    """The ``replica_fetch`` answer carrying the metadata-log entries of
    ``requests`` (one WAL file's batches, appended by their leader) to one
    follower: one entry per batch, grouped per partition, the object key once."""
    by_tp: dict[TopicIdPartition, list[ReplicatedEntry]] = {}
    for r in requests:
        by_tp.setdefault(r.topic_id_partition, []).append(
            ReplicatedEntry(
                r.header, key, r.byte_offset, r.size, -1, r.batch_max_timestamp, uploader_broker_id, file_size
            )
        )
    results = [
        ReplicaFetchResult(Errors.NONE, _OFFSET, 0, _OFFSET + len(entries), entries=tuple(entries))
        for entries in by_tp.values()
    ]
    return len(encode_frame(Kind.RESPONSE, _REQUEST_ID, "replica_fetch", enc_replica_fetch_response(results)))
