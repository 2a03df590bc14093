"""Transaction markers on the commit path, sans I/O: Kafka's leader side of
WriteTxnMarkers (``ProducerAppendInfo.appendEndTxnMarker`` and
``ProducerStateManager.completeTxn``).

:func:`sequence_markers` takes the same state as the sequencer
(:class:`~partlog.store.sequencer.SequencerState`), one validated call (a
:class:`MarkerCall`, from :func:`prepare_markers`, with its time), and returns
one answer per marker and a :class:`~partlog.store.sequencer.CommitDelta`.
Each marker, in request order:

* UNKNOWN_TOPIC_OR_PARTITION for a partition this store does not have;
* INVALID_PRODUCER_EPOCH for an epoch older than the producer's
  (``checkProducerEpoch``: WriteTxnMarkers answers Kafka's exception so);
* TRANSACTION_COORDINATOR_FENCED for a coordinator epoch older than the
  producer's last marker's (``checkCoordinatorEpoch``);
* else one control batch at the log end, in the partition's leader epoch,
  stamped with ``now`` (its append time on LogAppendTime topics), stored
  inline (:data:`~partlog.store.layout.INLINE_FILE_ID`: no WAL object, no
  file reference).  A producer with no ongoing transaction still gets its
  marker (Kafka writes it; it completes nothing).  An ongoing transaction
  completes: an ABORT adds an aborted-index record whose LSO is the first
  offset of the earliest other ongoing transaction, else the marker's + 1
  (``lastStableOffset(completedTxn)``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from partlog.kafka.control_batch import CONTROL_BATCH_SIZE, control_header
from partlog.kafka.crc32c import crc32c
from partlog.kafka.errors import Errors
from partlog.kafka.producer_state import ProducerWindow
from partlog.kafka.records import TimestampType, TxnMarkerRequest, TxnMarkerResponse
from partlog.store.layout import ENTRY_CRC, ENTRY_TAIL, INLINE_FILE_ID, INT32_MAX, Part, inline_marker_field
from partlog.store.sequencer import NEXT_BATCH_ID, CommitDelta, SequencerState
from partlog.store.txns import ABORTED_RECORD, PartTxns

_INT16_MAX = (1 << 15) - 1
_INT64_MAX = (1 << 63) - 1


@dataclass(frozen=True, slots=True)
class MarkerCall:
    """One ``write_txn_markers`` call, its stateless checks done."""

    markers: list[TxnMarkerRequest]
    checked: list[Errors]  # per marker: NONE, or its error
    now_ms: int  # the markers' timestamp, and the time producers expire by


def prepare_markers(markers: Sequence[TxnMarkerRequest], now_ms: int) -> MarkerCall:
    """Stateless checks: ids and epochs in their fields' ranges (a value no
    coordinator sends is INVALID_REQUEST, before any state is read)."""
    markers = list(markers)
    checked = []
    for m in markers:
        ok = (
            type(m.producer_id) is int
            and 0 <= m.producer_id <= _INT64_MAX
            and type(m.producer_epoch) is int
            and 0 <= m.producer_epoch <= _INT16_MAX
            and type(m.coordinator_epoch) is int
            and 0 <= m.coordinator_epoch <= INT32_MAX
        )
        checked.append(Errors.NONE if ok else Errors.INVALID_REQUEST)
    return MarkerCall(markers, checked, now_ms)


def sequence_markers(
    state: SequencerState,
    call: MarkerCall,
    *,
    producer_id_expiration_ms: int,
    auto_high_watermark: bool,
) -> tuple[list[TxnMarkerResponse], CommitDelta]:
    """Sequence ``call`` against ``state`` (see the module doc)."""
    now = call.now_ms
    out = CommitDelta({}, {}, {}, {}, None)
    batch_id = state.counter(NEXT_BATCH_ID)
    windows: dict[tuple[int, int], ProducerWindow] = {}
    ptxns: dict[int, PartTxns] = {}
    runs: dict[int, list[bytes]] = {}
    answers: list[TxnMarkerResponse] = []
    for m, err in zip(call.markers, call.checked, strict=True):
        if err:
            answers.append(TxnMarkerResponse(err, -1))
            continue
        tp = m.topic_id_partition
        part = out.parts.get(tp)
        if part is None:
            cached = state.part(tp)
            if cached is None:
                answers.append(TxnMarkerResponse(Errors.UNKNOWN_TOPIC_OR_PARTITION, -1))
                continue
            part = cached.copy()
        key = (part.part_id, m.producer_id)
        window = windows.get(key)
        if window is None:
            window = ProducerWindow.from_encoded(state.producer(*key))
        if window.expired(now, producer_id_expiration_ms):
            window = ProducerWindow.from_encoded(None)
        if window.known and m.producer_epoch < window.epoch:
            answers.append(TxnMarkerResponse(Errors.INVALID_PRODUCER_EPOCH, -1))
            continue
        if window.coordinator_epoch > m.coordinator_epoch:
            answers.append(TxnMarkerResponse(Errors.TRANSACTION_COORDINATOR_FENCED, -1))
            continue
        out.parts[tp] = part
        windows[key] = window
        offset = _append(state, part, m, now, batch_id, runs)
        batch_id += 1
        if window.txn_first >= 0:
            txns = ptxns.get(part.part_id)
            if txns is None:
                txns = ptxns[part.part_id] = PartTxns.decode(state.txns(part.part_id))
            txns.complete(m.producer_id, offset)
            if not m.committed:
                lso = txns.next_incomplete(m.producer_id)
                record = ABORTED_RECORD.pack(offset, m.producer_id, window.txn_first, offset + 1 if lso < 0 else lso)
                out.aborted.setdefault(part.part_id, []).append(record)
        window.end_txn(m.producer_epoch, m.coordinator_epoch, now)
        _advance_hwm(state, part, auto_high_watermark)
        answers.append(TxnMarkerResponse(Errors.NONE, offset))
    for (part_id, pid), window in windows.items():
        out.producers[(part_id, pid)] = window.encoded()
    by_id = {p.part_id: p for p in out.parts.values()}
    for part_id, txns in ptxns.items():
        txns.prune(by_id[part_id].high_watermark)
        out.txns[part_id] = txns.encode()
    for part_id, entries in runs.items():
        out.runs[part_id] = b"".join(entries)
    out.counters[NEXT_BATCH_ID] = batch_id
    return answers, out


def _append(
    state: SequencerState, part: Part, m: TxnMarkerRequest, now: int, batch_id: int, runs: dict[int, list[bytes]]
) -> int:
    """The marker's inline entry at the log end; returns its offset."""
    log_append = state.topic_config(part.tp.topic_id).message_timestamp_type == TimestampType.LOG_APPEND_TIME
    offset = part.log_end_offset
    header = control_header(
        base_offset=offset,
        partition_leader_epoch=part.leader_epoch,
        producer_id=m.producer_id,
        producer_epoch=m.producer_epoch,
        timestamp=now,
        log_append_time=log_append,
        committed=m.committed,
        coordinator_epoch=m.coordinator_epoch,
    )
    if now > part.running_max_timestamp:
        part.running_max_timestamp = now
    if now > part.max_timestamp and part.max_timestamp_offset != -2:
        part.max_timestamp, part.max_timestamp_offset = now, offset
    body = header + ENTRY_TAIL.pack(
        INLINE_FILE_ID,
        inline_marker_field(m.committed, m.coordinator_epoch),
        CONTROL_BATCH_SIZE,
        now if log_append else -1,
        now,
        part.running_max_timestamp,
        batch_id,
    )
    runs.setdefault(part.part_id, []).append(body + ENTRY_CRC.pack(crc32c(body)))
    part.log_end_offset = offset + 1
    part.live_batches += 1
    part.live_bytes += CONTROL_BATCH_SIZE
    return offset


def _advance_hwm(state: SequencerState, part: Part, auto_high_watermark: bool) -> None:
    """The HWM after an append, as :meth:`Sequencer.commit` moves it."""
    leo = part.log_end_offset
    if auto_high_watermark:
        part.high_watermark = leo
        return
    mem = state.owner_high_watermark(part.tp)
    if mem is not None and mem > part.high_watermark:
        part.high_watermark = min(mem, leo)


__all__ = ["MarkerCall", "prepare_markers", "sequence_markers"]
