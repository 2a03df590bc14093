"""The commit path's core: Kafka's sequencing of one ``commit_file`` call,
sans I/O.

:meth:`Sequencer.commit` takes the state it needs (a :class:`SequencerState`:
partition states, topic configs, producer windows, file ids, counters, the
owner-driven high watermarks), one validated call (a :class:`CommitCall`,
from :func:`prepare`) and the time as a value, and returns the answer per
batch and a :class:`CommitDelta`: the new partition and producer states, the
counters, each partition's new log entries and the WAL object's references.
It never opens LMDB and changes nothing it was given; the store reads the
state from its caches (and LMDB on a cache miss), and writes the delta into
its group commit (:mod:`partlog.store.group_commit`).  Tests drive it with a
state kept in dicts against :mod:`tests.reference_model`
(``tests/unit/test_sequencer.py``).

What it decides, as a Kafka partition leader does (design.md, "Sequencing"
and "Validation"):

* the call: a malformed object key, uploader or file size fails every batch
  with INVALID_REQUEST (:func:`prepare`), a WAL object older than the
  commit deadline fails every batch with COMMIT_DEADLINE_EXCEEDED;
* each batch, statelessly (:func:`check_batch`, Kafka's LogValidator):
  header, magic, sizes, byte range, the request agreeing with the header,
  record count, control batches (only leaders write them), producer fields; then
  per partition: unknown partition, ``max.message.bytes``, timestamps;
* idempotence (``ProducerStateManager``): the 5-batch window, duplicates
  answered with the original offset, epochs, sequence order and its wrap,
  expiry after ``producer.id.expiration.ms`` (never with a transaction
  ongoing);
* transactions (``ProducerAppendInfo.appendDataBatch``): a producer's first
  transactional batch starts its transaction at its offset (the partition's
  :class:`~partlog.store.txns.PartTxns` too), a plain batch inside one is
  INVALID_TXN_STATE, a transactional batch without sequence (the group
  coordinator's) has only its epoch checked; with KIP-890 verification
  (``CommitCall.guards``), a first transactional batch without the
  partition's current guard (:mod:`partlog.store.verification`) is
  INVALID_TXN_STATE;
* offsets from the log end, contiguous; the partition's leader epoch and,
  on LogAppendTime topics, the append time stamped into the stored header
  (the CRC updated affinely, :func:`partlog.kafka.batch_header.patch_header`).

Batches of one partition are sequenced in request order, each seeing the
producer state the previous one left; partitions in the order they first
appear (all Kafka orders).  The per-batch loop avoids objects: it runs once
per batch on the store's hot path.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from partlog.kafka import batch_header as bh
from partlog.kafka.batch_header import increment_sequence, patch_header
from partlog.kafka.crc32c import crc32c
from partlog.kafka.errors import Errors
from partlog.kafka.producer_state import ProducerWindow
from partlog.kafka.records import CommitBatchRequest, CommitBatchResponse, TimestampType, TopicIdPartition
from partlog.kafka.topic_config import TopicConfig
from partlog.store.layout import ENTRY_CRC, ENTRY_PLAIN, ENTRY_TAIL, HEADER_UNPACK, INT32_MAX, INT64_MAX, Part
from partlog.store.txns import PartTxns
from partlog.store.verification import GuardKey, verified
from partlog.wal.key import WalKeyError, parse_wal_key

log = logging.getLogger(__name__)

# The counters a commit advances (names in the store's ``meta``).
NEXT_BATCH_ID = b"next_batch_id"
NEXT_FILE_ID = b"next_file_id"

# tuple.__new__(NamedTupleClass, values) builds the same object as
# NamedTupleClass(*values) without its Python-level __new__: this runs once or
# twice per batch on the commit path.
_new = tuple.__new__

# A checked batch: the header's fields (BatchHeader order) or its error.
Checked = tuple[int, ...] | Errors


class SequencerState(Protocol):
    """The state a commit is sequenced against, as of the call (read-only)."""

    def part(self, tp: TopicIdPartition) -> Part | None:
        """The partition's state (the sequencer copies before it changes
        it), or None for an unknown partition."""

    def topic_config(self, topic_id: uuid.UUID) -> TopicConfig:
        """The config of the topic of a known partition."""

    def producer(self, part_id: int, producer_id: int) -> bytes | None:
        """The producer's window (:meth:`ProducerEntry.encode`), or None."""

    def file_id(self, object_key: str) -> int:
        """The file_id some commit gave ``object_key``, or -1."""

    def counter(self, name: bytes) -> int:
        """The next value of counter ``name`` (:data:`NEXT_BATCH_ID`, :data:`NEXT_FILE_ID`)."""

    def owner_high_watermark(self, tp: TopicIdPartition) -> int | None:
        """The HWM the owner set in memory (``auto_high_watermark=False``), or None."""

    def txns(self, part_id: int) -> bytes:
        """The partition's transactions (:meth:`PartTxns.encode`), b"" for none."""

    def guard(self, tp: TopicIdPartition, producer_id: int) -> int:
        """The partition's current verification guard for the producer
        (:mod:`partlog.store.verification`), or its SENTINEL."""


@dataclass(frozen=True, slots=True)
class CommitCall:
    """One ``commit_file`` call, its stateless checks done (:func:`prepare`)."""

    object_key: str
    created_ms: int  # from the object key; -1 when ``key_error``
    key_error: Errors  # NONE, or the error every batch gets
    uploader: int
    file_size: int
    batches: list[CommitBatchRequest]
    checked: list[Checked]  # per batch: check_batch's answer
    # (partition, producer id) -> the verification guard the leader holds for
    # its transactional batches (KIP-890); None: no batch asked for it.
    guards: Mapping[GuardKey, int] | None = None


@dataclass(slots=True)
class CommitDelta:
    """What one sequenced call changes; empty when every batch failed for
    the call's sake (key, deadline)."""

    # Every known partition the call touched, in its new state.
    parts: dict[TopicIdPartition, Part]
    # (part_id, producer id) -> the window after the call, encoded.
    producers: dict[tuple[int, int], bytes]
    # Counters advanced (NEXT_BATCH_ID always, NEXT_FILE_ID for a new object).
    counters: dict[bytes, int]
    # part_id -> the partition's new log entries, ascending, as one run of
    # whole entries (layout.ENTRY_SIZE each).
    runs: dict[int, bytes]
    # [file_id, batches, bytes, uploader, file size] of the object's new
    # references; None when no batch was appended.
    file: list[int] | None
    # part_id -> the partition's transactions after the call, where they changed.
    txns: dict[int, bytes] = field(default_factory=dict)
    # part_id -> new aborted-index records (txns.ABORTED_RECORD), ascending.
    aborted: dict[int, list[bytes]] = field(default_factory=dict)


def check_batch(req: CommitBatchRequest, file_size: int) -> Checked:
    """Stateless checks of one batch (Kafka's LogValidator role).

    Returns the header's fields as a tuple (BatchHeader field order) when
    valid, else the error.  Runs once per batch, so it avoids objects.
    """
    header = req.header
    if len(header) != bh.HEADER_SIZE:
        return Errors.CORRUPT_MESSAGE
    h = HEADER_UNPACK(header)
    # 0 base_offset 1 batch_length 2 leader_epoch 3 magic 4 crc 5 attributes
    # 6 last_offset_delta 7 base_ts 8 max_ts 9 producer_id 10 epoch 11 base_seq 12 count
    if h[3] != bh.MAGIC_V2:
        return Errors.CORRUPT_MESSAGE
    size = req.size
    if h[1] + bh.LOG_OVERHEAD < bh.HEADER_SIZE or size != h[1] + bh.LOG_OVERHEAD:
        return Errors.CORRUPT_MESSAGE
    if type(req.byte_offset) is not int or req.byte_offset < 0 or req.byte_offset + size > file_size:
        return Errors.INVALID_REQUEST
    delta = h[6]
    if delta < 0 or h[12] != delta + 1:
        return Errors.INVALID_RECORD
    pid = h[9]
    base_seq = h[11]
    if (
        req.last_offset - req.base_offset != delta
        or req.producer_id != pid
        or req.producer_epoch != h[10]
        or req.base_sequence != base_seq
        or req.last_sequence != (bh.NO_SEQUENCE if base_seq == bh.NO_SEQUENCE else increment_sequence(base_seq, delta))
        or req.batch_max_timestamp != h[8]
        or req.message_timestamp_type != (h[5] & bh.ATTR_TIMESTAMP_TYPE) >> 3
    ):
        return Errors.INVALID_REQUEST
    attributes = h[5]
    if attributes & bh.ATTR_CONTROL:
        return Errors.INVALID_RECORD  # only the leader writes control batches (markers)
    if pid >= 0:
        # A transactional batch without a sequence is the group
        # coordinator's (Kafka's AppendOrigin.COORDINATOR): no sequence checks.
        if h[10] < 0 or (base_seq < 0 and not (attributes & bh.ATTR_TRANSACTIONAL and base_seq == bh.NO_SEQUENCE)):
            return Errors.INVALID_RECORD
    elif pid != bh.NO_PRODUCER_ID or attributes & bh.ATTR_TRANSACTIONAL:
        return Errors.INVALID_RECORD
    return h


def prepare(
    object_key: str,
    uploader: int,
    file_size: int,
    batches: Sequence[CommitBatchRequest],
    guards: Mapping[GuardKey, int] | None = None,
) -> CommitCall:
    """Every check of a call that needs no state: the object key, the
    uploader and the file size (values packed into fixed-width fields: the
    uploader is an int32, sizes and offsets int64s, so no input can make a
    later stage fail), and each batch (:func:`check_batch`)."""
    batches = list(batches)
    key_error = Errors.NONE
    created_ms = -1
    try:
        created_ms = parse_wal_key(object_key).created_ms
    except WalKeyError as e:
        log.warning("commit refused: %s", e)
        key_error = Errors.INVALID_REQUEST
    if type(uploader) is not int or not 0 <= uploader <= INT32_MAX:
        log.warning("commit refused: uploader %r is not a broker id", uploader)
        key_error = Errors.INVALID_REQUEST
    if type(file_size) is not int or not 0 < file_size <= INT64_MAX:
        key_error = Errors.INVALID_REQUEST
        file_size = 1  # every batch is then outside it: INVALID_REQUEST
    checked = [check_batch(req, file_size) for req in batches]
    return CommitCall(object_key, created_ms, key_error, uploader, file_size, batches, checked, guards)


def _error(err: Errors, req: CommitBatchRequest) -> CommitBatchResponse:
    return _new(CommitBatchResponse, (err, -1, -1, -1, False, req))


def _empty() -> CommitDelta:
    return CommitDelta({}, {}, {}, {}, None)


class Sequencer:
    """Kafka's sequencing of commits (see the module doc).  Holds only its
    configuration: ``commit_deadline_ms``, ``producer_id_expiration_ms`` and
    whether a commit moves the high watermark to the log end
    (``auto_high_watermark``, no replication)."""

    def __init__(self, *, commit_deadline_ms: int, producer_id_expiration_ms: int, auto_high_watermark: bool) -> None:
        self.commit_deadline_ms = commit_deadline_ms
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.auto_high_watermark = auto_high_watermark

    def commit(
        self, state: SequencerState, call: CommitCall, now: int
    ) -> tuple[list[CommitBatchResponse], CommitDelta]:
        """Sequence ``call`` against ``state`` at ``now`` (ms since the
        epoch): the answers in request order and what the call changes.
        ``now`` is not read when ``call.key_error`` is set."""
        batches = call.batches
        if call.key_error:
            return [_error(call.key_error, b) for b in batches], _empty()
        created_ms = call.created_ms
        if now - created_ms > self.commit_deadline_ms:
            log.info(
                "commit refused: deadline object_key=%s age_ms=%d commit_deadline_ms=%d",
                call.object_key,
                now - created_ms,
                self.commit_deadline_ms,
            )
            return [_error(Errors.COMMIT_DEADLINE_EXCEEDED, b) for b in batches], _empty()
        file_id = state.file_id(call.object_key)
        checked = call.checked
        out = _empty()
        parts = out.parts
        runs = out.runs
        producers = out.producers
        counters = out.counters

        # Responses by request index; batches are processed partition by
        # partition (request order within each), which is all Kafka orders.
        responses: list[CommitBatchResponse | None] = [None] * len(batches)
        by_tp: dict[TopicIdPartition, list[int]] = {}
        for i, req in enumerate(batches):
            by_tp.setdefault(req.topic_id_partition, []).append(i)
        added_batches = 0
        added_bytes = 0
        expiration_ms = self.producer_id_expiration_ms
        entry_pack = ENTRY_PLAIN.pack
        crc_pack = ENTRY_CRC.pack
        auto_hwm = self.auto_high_watermark
        batch_id = counters[NEXT_BATCH_ID] = state.counter(NEXT_BATCH_ID)
        guards = call.guards

        def unverified(window: ProducerWindow, h: tuple[int, ...], tp: TopicIdPartition, pid: int) -> bool:
            # Kafka's batchMissingRequiredVerification, checked after the
            # duplicate lookup and before the epoch and sequence: the first
            # transactional batch of a producer with no transaction open here
            # needs the partition's current verification guard.
            if guards is None or window.txn_first >= 0 or not h[5] & bh.ATTR_TRANSACTIONAL:
                return False
            return not verified(guards, state.guard(tp, pid), (tp, pid))

        # The loop below runs once per batch: partition fields live in locals
        # and are written back once per partition.
        for tp, indices in by_tp.items():
            cached = state.part(tp)
            if cached is None:
                for i in indices:
                    responses[i] = _error(Errors.UNKNOWN_TOPIC_OR_PARTITION, batches[i])
                continue
            part = parts[tp] = cached.copy()
            cfg = state.topic_config(tp.topic_id)
            log_append = cfg.message_timestamp_type == TimestampType.LOG_APPEND_TIME
            size_max = cfg.max_message_bytes
            if log_append:
                ts_min, ts_max = -(2**63), 2**63  # LogAppendTime: producer timestamps are not checked
            else:
                ts_min = now - cfg.message_timestamp_before_max_ms
                ts_max = now + cfg.message_timestamp_after_max_ms
            leader_epoch = part.leader_epoch
            part_id = part.part_id
            log_entries: list[bytes] = []
            # This partition's producers as this call changes them, frozen
            # back into entries once per partition.
            windows: dict[int, ProducerWindow] = {}
            appended: set[int] = set()
            ptxns: PartTxns | None = None  # loaded when a transaction starts
            lso = part.log_start_offset
            leo = part.log_end_offset
            running_max = part.running_max_timestamp
            live_bytes = part.live_bytes
            live_batches = part.live_batches
            for i in indices:
                req = batches[i]
                h = checked[i]
                if type(h) is not tuple:
                    responses[i] = _error(h, req)  # type: ignore[arg-type]
                    continue
                size = req.size
                if size > size_max:
                    responses[i] = _error(Errors.MESSAGE_TOO_LARGE, req)
                    continue
                # Kafka's LogValidator.validateTimestamp, on the batch's first
                # and max timestamps (records are not read): NO_TIMESTAMP (-1)
                # is exempt from the range check; a producer may not set the
                # LogAppendTime bit on a LogAppendTime topic, nor on a record
                # without timestamp.
                base_ts = h[7]
                max_ts = h[8]
                producer_lat = h[5] & bh.ATTR_TIMESTAMP_TYPE
                if log_append:
                    bad_ts = producer_lat
                else:
                    bad_ts = (
                        (base_ts != -1 and not ts_min <= base_ts <= ts_max)
                        or (max_ts != -1 and not ts_min <= max_ts <= ts_max)
                        or (producer_lat and base_ts == -1)
                    )
                if bad_ts:
                    responses[i] = _error(Errors.INVALID_TIMESTAMP, req)
                    continue
                delta = h[6]
                pid = h[9]
                if pid >= 0:
                    pepoch, first_seq = h[10], h[11]
                    window = windows.get(pid)
                    if window is None:
                        window = windows[pid] = ProducerWindow.from_encoded(state.producer(part_id, pid))
                    if first_seq < 0:
                        # The group coordinator's transactional batch: its
                        # epoch is checked, no sequence (Kafka's COORDINATOR origin).
                        last_seq = first_seq
                        if window.expired(now, expiration_ms):
                            window = windows[pid] = ProducerWindow.from_encoded(None)
                        if unverified(window, h, tp, pid):
                            responses[i] = _error(Errors.INVALID_TXN_STATE, req)
                            continue
                        if window.known and pepoch < window.epoch:
                            responses[i] = _error(Errors.INVALID_PRODUCER_EPOCH, req)
                            continue
                    elif (
                        (window.txn_first >= 0 or now - window.last_timestamp < expiration_ms)
                        and window.continues(pepoch, first_seq)
                        and (guards is None or not unverified(window, h, tp, pid))
                    ):
                        last_seq = increment_sequence(first_seq, delta)  # in sequence: no duplicate, no error
                    else:
                        last_seq = increment_sequence(first_seq, delta)
                        if window.expired(now, expiration_ms):
                            # Expired: as if never seen.  Checked per batch: a
                            # batch appended just now with an old timestamp
                            # leaves its producer expired for the next one.
                            window = windows[pid] = ProducerWindow.from_encoded(None)
                        dup = window.find_duplicate(pepoch, first_seq, last_seq)
                        if dup is not None:
                            # Kafka answers a duplicate with the batch's max
                            # timestamp (its append time on LogAppendTime).
                            dup_time = dup.log_append_time if dup.log_append_time != -1 else dup.max_timestamp
                            responses[i] = CommitBatchResponse(Errors.NONE, dup.first_offset, dup_time, lso, True, req)
                            continue
                        if unverified(window, h, tp, pid):
                            responses[i] = _error(Errors.INVALID_TXN_STATE, req)
                            continue
                        perr = window.check_append(pepoch, first_seq)
                        if perr:
                            responses[i] = _error(perr, req)
                            continue
                    if window.txn_first >= 0 and not h[5] & bh.ATTR_TRANSACTIONAL:
                        # Kafka's appendDataBatch: a plain batch inside a transaction.
                        responses[i] = _error(Errors.INVALID_TXN_STATE, req)
                        continue
                # Accepted: sequence it.
                if file_id < 0:
                    file_id = state.counter(NEXT_FILE_ID)
                    counters[NEXT_FILE_ID] = file_id + 1
                base = leo
                header = req.header
                if log_append:
                    append_time = effective_ts = now
                    stored = patch_header(
                        header, base_offset=base, partition_leader_epoch=leader_epoch, log_append_time=now
                    )
                else:
                    append_time = -1
                    effective_ts = max_ts
                    # A producer-set LogAppendTime bit is cleared, as Kafka does.
                    stored = (
                        patch_header(
                            header,
                            base_offset=base,
                            partition_leader_epoch=leader_epoch,
                            log_append_time=None,
                            create_time=True,
                        )
                        if producer_lat
                        else b""
                    )
                if effective_ts > running_max:
                    running_max = effective_ts
                if effective_ts > part.max_timestamp and part.max_timestamp_offset != -2:
                    part.max_timestamp = effective_ts
                    part.max_timestamp_offset = base
                if stored:
                    body = stored + ENTRY_TAIL.pack(
                        file_id, req.byte_offset, size, append_time, max_ts, running_max, batch_id
                    )
                else:
                    # Offset and epoch lie outside the batch CRC: splice them in.
                    body = entry_pack(
                        base,
                        header[8:12],
                        leader_epoch,
                        header[16:],
                        file_id,
                        req.byte_offset,
                        size,
                        -1,
                        max_ts,
                        running_max,
                        batch_id,
                    )
                batch_id += 1
                log_entries.append(body + crc_pack(crc32c(body)))
                leo = base + delta + 1
                live_bytes += size
                live_batches += 1
                added_batches += 1
                added_bytes += size
                if pid >= 0:
                    assert window is not None
                    window.append_values(pepoch, first_seq, last_seq, base, leo - 1, max_ts, append_time)
                    appended.add(pid)
                    if window.txn_first < 0 and h[5] & bh.ATTR_TRANSACTIONAL:
                        # The producer's first transactional batch since its
                        # last marker starts a transaction here.
                        window.txn_first = base
                        if ptxns is None:
                            ptxns = PartTxns.decode(state.txns(part_id))
                        ptxns.start(pid, base)
                responses[i] = _new(CommitBatchResponse, (Errors.NONE, base, append_time, lso, False, req))
            if log_entries:
                runs[part_id] = b"".join(log_entries)
            for pid in appended:
                producers[(part_id, pid)] = windows[pid].encoded()
            part.log_end_offset = leo
            part.running_max_timestamp = running_max
            part.live_bytes = live_bytes
            part.live_batches = live_batches
            if auto_hwm:
                # No replication: the leader's log end is its high watermark.
                part.high_watermark = leo
            else:
                # The owner drives the HWM; persist what it set so far.
                mem = state.owner_high_watermark(tp)
                if mem is not None and mem > part.high_watermark:
                    part.high_watermark = mem if mem < leo else leo
            if ptxns is not None:
                ptxns.prune(part.high_watermark)
                out.txns[part_id] = ptxns.encode()
        counters[NEXT_BATCH_ID] = batch_id
        if added_batches:
            out.file = [file_id, added_batches, added_bytes, call.uploader, call.file_size]
        return responses, out  # type: ignore[return-value]  # every slot is filled
