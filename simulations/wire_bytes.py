"""Sizes of inter-broker messages on the wire, from the real encoders
(:mod:`partlog.wire`, :mod:`partlog.rpc_frame`), for the cross-AZ byte counts."""

from __future__ import annotations

from collections.abc import Sequence

from partlog.produce_pipeline import SendCommit
from partlog.records import CommitBatchResponse
from partlog.rpc_frame import Kind, encode_frame
from partlog.wire import enc_commit, enc_commit_responses

# One metadata-log entry as a follower fetches it: design.md's 117-byte entry
# (patched header, file id, offsets, timestamps, CRC).  The object key goes
# once per fetch response and is not counted.
METADATA_ENTRY_BYTES = 117
# A request id the size of a busy connection's (a few bytes of msgpack).
_REQUEST_ID = 1 << 20


def commit_request_bytes(c: SendCommit, uploader_broker_id: int) -> int:
    body = enc_commit(c.key, uploader_broker_id, c.file_size, c.requests, c.acks_all)
    return len(encode_frame(Kind.REQUEST, _REQUEST_ID, "commit", body))


def commit_response_bytes(responses: Sequence[CommitBatchResponse]) -> int:
    return len(encode_frame(Kind.RESPONSE, _REQUEST_ID, "commit", enc_commit_responses(responses)))
