"""The records of ``__transaction_state``, and the replay of a partition.

One record per change of a transactional id (the ``after`` of a
:class:`partlog.txn.coordinator.Transition`), keyed by the id, so that the
last record of an id is its state (a compacted topic in Kafka):

* key: msgpack ``[transactional_id]``
* value: msgpack ``[version, producer_id, previous_producer_id,
  producer_epoch, last_producer_epoch, timeout_ms, state,
  [[topic_id (16 bytes), partition], ...], start_ms, last_update_ms]``
  with ``version`` 0 and ``state`` Kafka's state id; None (a tombstone)
  when the id expired (Dead).

Partitions are kept by topic id, not name: markers go to the very topic that
was added, and a topic deleted meanwhile is told apart from a new one of the
same name.  Decoding checks every field: a record that does not decode is
skipped (counted) by :func:`replay`, never raised, so one damaged record
cannot keep a partition's other ids from loading.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable

import msgpack

from partlog.kafka.records import TopicIdPartition
from partlog.txn.coordinator import PRODUCER_EPOCH_MAX, Transactions, TxnMetadata, TxnState

log = logging.getLogger(__name__)

TXN_STATE_TOPIC = "__transaction_state"
# Kafka's transaction.state.log.num.partitions is 50; a small cluster wants
# fewer (as the offsets topic here).
TXN_STATE_PARTITIONS_DEFAULT = 12
RECORD_VERSION = 0
# Kafka's transactional ids are strings; ours are bounded (they are keys in
# memory and in every record of the id).
TRANSACTIONAL_ID_CHARS_MAX = 32_767
_INT64_MAX = (1 << 63) - 1
# Dead is a tombstone and PrepareEpochFence is never written.
_RECORD_STATES = frozenset(int(s) for s in TxnState) - {int(TxnState.DEAD), int(TxnState.PREPARE_EPOCH_FENCE)}


class TxnRecordError(ValueError):
    """A ``__transaction_state`` record that does not decode; the message says why."""


def encode_key(transactional_id: str) -> bytes:
    return bytes(msgpack.packb([transactional_id]))


def encode_value(meta: TxnMetadata) -> bytes | None:
    """The record value of ``meta`` (None, a tombstone, for Dead)."""
    if meta.state == TxnState.DEAD:
        return None
    parts = sorted([tp.topic_id.bytes, tp.partition] for tp in meta.partitions)
    fields = [RECORD_VERSION, meta.producer_id, meta.previous_producer_id, meta.producer_epoch,
              meta.last_producer_epoch, meta.timeout_ms, int(meta.state), parts, meta.start_ms,
              meta.last_update_ms]  # fmt: skip
    return bytes(msgpack.packb(fields))


def encode(meta: TxnMetadata) -> tuple[bytes, bytes | None]:
    return encode_key(meta.transactional_id), encode_value(meta)


def decode_key(key: bytes | None) -> str:
    if key is None:
        raise TxnRecordError("no key")
    try:
        k = msgpack.unpackb(key)
    except Exception as e:
        raise TxnRecordError(f"key is not msgpack: {e}") from None
    if not isinstance(k, list) or len(k) != 1 or not isinstance(k[0], str):
        raise TxnRecordError("key is not [transactional_id]")
    if not 0 < len(k[0]) <= TRANSACTIONAL_ID_CHARS_MAX:
        raise TxnRecordError(f"transactional id of {len(k[0])} characters")
    return k[0]


def decode_value(transactional_id: str, value: bytes | None) -> TxnMetadata | None:
    """The metadata a value holds (None for a tombstone); TxnRecordError
    when it does not decode to one."""
    if value is None:
        return None
    try:
        v = msgpack.unpackb(value)
    except Exception as e:
        raise TxnRecordError(f"value is not msgpack: {e}") from None
    if not isinstance(v, list) or len(v) != 10 or v[0] != RECORD_VERSION:
        raise TxnRecordError("value is not a version 0 record of 10 fields")
    _, pid, prev_pid, epoch, last_epoch, timeout_ms, state, parts, start_ms, update_ms = v
    if not all(type(x) is int for x in (pid, prev_pid, epoch, last_epoch, timeout_ms, state, start_ms, update_ms)):
        raise TxnRecordError("a numeric field is not an integer")
    if not (0 <= pid <= _INT64_MAX and -1 <= prev_pid <= _INT64_MAX and 0 <= epoch <= PRODUCER_EPOCH_MAX
            and -1 <= last_epoch <= PRODUCER_EPOCH_MAX and timeout_ms > 0):  # fmt: skip
        raise TxnRecordError("a producer id, epoch or timeout out of range")
    if state not in _RECORD_STATES:
        raise TxnRecordError(f"state {state} is not one a record holds")
    if not isinstance(parts, list):
        raise TxnRecordError("partitions are not a list")
    partitions = []
    for p in parts:
        if (not isinstance(p, list) or len(p) != 2 or not isinstance(p[0], bytes) or len(p[0]) != 16
                or type(p[1]) is not int or p[1] < 0):  # fmt: skip
            raise TxnRecordError("a partition is not [topic id, index]")
        partitions.append(TopicIdPartition(uuid.UUID(bytes=p[0]), p[1]))
    txn_state = TxnState(state)
    if partitions and txn_state not in (TxnState.ONGOING, TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
        raise TxnRecordError(f"partitions in state {txn_state.kafka_name}")
    return TxnMetadata(transactional_id, pid, prev_pid, epoch, last_epoch, timeout_ms, txn_state,
                       frozenset(partitions), start_ms, update_ms)  # fmt: skip


def replay(txns: Transactions, records: Iterable[tuple[bytes | None, bytes | None, int]]) -> int:
    """Apply ``(key, value, offset)`` records of the partition in log order;
    the number skipped because they did not decode."""
    skipped = 0
    for key, value, offset in records:
        try:
            tid = decode_key(key)
            meta = decode_value(tid, value)
        except TxnRecordError as e:
            skipped += 1
            log.warning("%s: record at %d skipped: %s", TXN_STATE_TOPIC, offset, e)
            continue
        txns.replay(tid, meta)
    return skipped


__all__ = [
    "TXN_STATE_PARTITIONS_DEFAULT",
    "TXN_STATE_TOPIC",
    "TxnRecordError",
    "decode_key",
    "decode_value",
    "encode",
    "encode_key",
    "encode_value",
    "replay",
]
