"""The commit path: ``commit_file`` validates a WAL object's batches, sequences
them (offsets, idempotence, timestamps) against the in-memory state, and
hands the group to the group commit (see :mod:`partlog.store.group_commit`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from partlog.kafka import batch_header as bh
from partlog.kafka.batch_header import increment_sequence, patch_header
from partlog.kafka.crc32c import crc32c
from partlog.kafka.errors import Errors
from partlog.kafka.producer_state import (
    ProducerWindow,
)
from partlog.kafka.records import (
    CommitBatchRequest,
    CommitBatchResponse,
    TimestampType,
    TopicIdPartition,
)
from partlog.store.base import Staged
from partlog.store.group_commit import PipelineFailedError, Write
from partlog.store.index import IndexMixin
from partlog.store.layout import (
    ENTRY_CRC,
    ENTRY_PLAIN,
    ENTRY_TAIL,
    HEADER_UNPACK,
    INT32_MAX,
    INT64_MAX,
    PRODUCER_KEY,
    CommitGroup,
    StoreError,
)
from partlog.store.producers import ProducersMixin
from partlog.wal.key import WalKeyError, parse_wal_key

# One logger for the whole store: operators filter on partlog.store.
log = logging.getLogger("partlog.store")


# tuple.__new__(NamedTupleClass, values) builds the same object as
# NamedTupleClass(*values) without its Python-level __new__: this runs once or
# twice per batch on the commit path.
_new = tuple.__new__


def _error(err: Errors, req: CommitBatchRequest) -> CommitBatchResponse:
    return _new(CommitBatchResponse, (err, -1, -1, -1, False, req))


def _check_batch(req: CommitBatchRequest, file_size: int) -> tuple[int, ...] | Errors:
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
    if h[5] & (bh.ATTR_TRANSACTIONAL | bh.ATTR_CONTROL):
        return Errors.INVALID_RECORD  # transactions are not supported (design.md)
    if pid >= 0:
        if h[10] < 0 or h[11] < 0:
            return Errors.INVALID_RECORD
    elif pid != bh.NO_PRODUCER_ID:
        return Errors.INVALID_RECORD
    return h


class SequencingMixin(IndexMixin, ProducersMixin):
    """The commit path (``commit_file``). See the module doc."""

    def _sequence_group(self, writes: list[Write], into: CommitGroup | None) -> CommitGroup:
        """Pipeline stage 1: sequence queued commit_file calls against the
        in-memory state, which then runs ahead of disk until stage 2.  Appends
        to ``into`` (a group not yet committing) when given."""
        group = into if into is not None else CommitGroup([], [], {}, {}, {}, {}, {})
        for w in writes:
            staged = Staged(self, None)
            try:
                result = self._commit(staged, *w.payload)
            except Exception as e:  # a bug in one write must not fail the others
                log.exception("commit_file failed while sequencing")
                group.results.append(None)
                group.errors.append(StoreError(f"{self.path}: commit_file failed: {e!r}"))
                continue
            finally:
                staged.close()
            staged.apply_to_caches()
            group.results.append(result)
            group.errors.append(None)
            for part_id, puts in staged.by_part.items():
                mine = group.by_part.get(part_id)
                if mine is None:
                    group.by_part[part_id] = puts
                else:
                    mine.extend(puts)
            if staged.files:
                with self._pending_lock:
                    for key, (fid, nb, nbytes, uploader, size) in staged.files.items():
                        pending = self._pending_files.setdefault(key, [fid, 0])
                        pending[1] += nb
                        acc = group.files.setdefault(key, [fid, 0, 0, uploader, size])
                        acc[1] += nb
                        acc[2] += nbytes
            for part in staged.parts.values():
                assert part is not None
                group.parts[part.part_id] = part.pack()
            for (part_id, pid), raw in staged.producers.items():
                assert raw is not None
                group.producers[PRODUCER_KEY.pack(part_id, pid)] = raw
            group.counters.update(staged.counters)
        return group

    def commit_file(
        self,
        object_key: str,
        uploader_broker_id: int,
        file_size: int,
        batches: Sequence[CommitBatchRequest],
    ) -> list[CommitBatchResponse]:
        """Sequence and append the batches of one WAL object (one commit RPC).

        All accepted batches are appended in ONE transaction; responses come in
        request order.  A batch that fails validation gets its Kafka error and
        leaves the others unaffected.  Batches of one partition are appended in
        request order, each seeing the producer state the previous one left.
        """
        self._check_writable()
        batches = list(batches)
        # Everything that needs no state is checked here, in the caller's
        # thread, so it overlaps another group's fsync instead of the
        # sequencing stage.
        key_error = Errors.NONE
        created_ms = -1
        try:
            created_ms = parse_wal_key(object_key).created_ms
        except WalKeyError as e:
            log.warning("commit refused: %s", e)
            key_error = Errors.INVALID_REQUEST
        # Values this call will pack into fixed-width fields (the uploader is
        # an int32, sizes and offsets int64s): refused here, per call, so no
        # input can make the commit stage fail and fail-stop the store.
        if type(uploader_broker_id) is not int or not 0 <= uploader_broker_id <= INT32_MAX:
            log.warning("commit refused: uploader %r is not a broker id", uploader_broker_id)
            key_error = Errors.INVALID_REQUEST
        if type(file_size) is not int or not 0 < file_size <= INT64_MAX:
            key_error = Errors.INVALID_REQUEST
            file_size = 1  # every batch is then outside it: INVALID_REQUEST
        checked = [_check_batch(req, file_size) for req in batches]
        try:
            with self._writing():
                result: list[CommitBatchResponse] = self._pipeline.submit(
                    (object_key, created_ms, key_error, uploader_broker_id, file_size, batches, checked), len(batches)
                )
        except PipelineFailedError as e:
            raise StoreError(str(e)) from e
        return result

    def _commit(
        self,
        s: Staged,
        object_key: str,
        created_ms: int,
        key_error: Errors,
        uploader: int,
        file_size: int,
        batches: list[CommitBatchRequest],
        checked: list[tuple[int, ...] | Errors],
    ) -> list[CommitBatchResponse]:
        if key_error:
            return [_error(key_error, b) for b in batches]
        # The deadline is checked while sequencing; the reference becomes
        # visible to referenced_files() in the same step (_pending_files).
        now = self._clock()
        if now - created_ms > self.commit_deadline_ms:
            log.info(
                "commit refused: deadline object_key=%s age_ms=%d commit_deadline_ms=%d",
                object_key,
                now - created_ms,
                self.commit_deadline_ms,
            )
            return [_error(Errors.COMMIT_DEADLINE_EXCEEDED, b) for b in batches]
        file_id = self._resolve_file(s, object_key)

        # Responses by request index; batches are processed partition by
        # partition (request order within each), which is all Kafka orders.
        responses: list[CommitBatchResponse | None] = [None] * len(batches)
        by_tp: dict[TopicIdPartition, list[int]] = {}
        for i, req in enumerate(batches):
            by_tp.setdefault(req.topic_id_partition, []).append(i)
        added_batches = 0
        added_bytes = 0
        expiration_ms = self.producer_id_expiration_ms
        by_part = s.by_part
        entry_pack = ENTRY_PLAIN.pack
        crc_pack = ENTRY_CRC.pack
        producers = s.producers
        auto_hwm = self.auto_high_watermark
        hwms = self._hwms
        batch_id = s.next_id(b"next_batch_id")
        # The loop below runs once per batch: partition fields live in locals
        # and are written back once per partition.
        for tp, indices in by_tp.items():
            part = s.part(tp)
            if part is None:
                for i in indices:
                    responses[i] = _error(Errors.UNKNOWN_TOPIC_OR_PARTITION, batches[i])
                continue
            topic = s.topic(tp.topic_id)
            assert topic is not None
            cfg = topic.config
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
                    last_seq = increment_sequence(first_seq, delta)
                    window = windows.get(pid)
                    if window is None:
                        window = windows[pid] = ProducerWindow.from_encoded(s.producer_raw(part_id, pid))
                    if now - window.last_timestamp < expiration_ms and window.continues(pepoch, first_seq):
                        pass  # the next batch in sequence: no duplicate, no error
                    else:
                        if window.known and now - window.last_timestamp >= expiration_ms:
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
                        perr = window.check_append(pepoch, first_seq)
                        if perr:
                            responses[i] = _error(perr, req)
                            continue
                # Accepted: sequence it.
                if file_id < 0:
                    file_id = s.next_id(b"next_file_id")
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
                responses[i] = _new(CommitBatchResponse, (Errors.NONE, base, append_time, lso, False, req))
            if log_entries:
                by_part[part_id] = [b"".join(log_entries)]
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
                mem = hwms.get(tp)
                if mem is not None and mem > part.high_watermark:
                    part.high_watermark = mem if mem < leo else leo
        s.counters[b"next_batch_id"] = batch_id
        if added_batches:
            s.files[object_key] = [file_id, added_batches, added_bytes, uploader, file_size]
        return responses  # type: ignore[return-value]  # every slot is filled
