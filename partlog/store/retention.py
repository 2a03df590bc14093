"""Deletion of records: DeleteRecords and retention by time and size, with
the file-reference counts they release, the aborted-transaction index
entries wholly below the new log start, and the expiry of producer states
(never of one with an ongoing transaction).

Each function runs inside an exclusive write (a
:class:`~partlog.store.staged.Staged`); the log chunks keep the partition
counters and the file index exact as entries go.
"""

from __future__ import annotations

from collections.abc import Sequence

import lmdb

from partlog import injected_bugs
from partlog.kafka.errors import Errors
from partlog.kafka.records import DeleteRecordsRequest, DeleteRecordsResponse, TopicIdPartition
from partlog.kafka.topic_config import TopicConfig
from partlog.store.catalog import Catalog
from partlog.store.layout import Part
from partlog.store.log import LogChunks
from partlog.store.producers import ProducerTable
from partlog.store.staged import Staged
from partlog.store.txns import TxnTable


def delete_records(
    s: Staged, log: LogChunks, txns: TxnTable, reqs: Sequence[DeleteRecordsRequest]
) -> list[DeleteRecordsResponse]:
    """Advance log start offsets (Kafka DeleteRecords; -1 means the HWM)."""
    out = []
    for r in reqs:
        part = s.part(r.topic_id_partition)
        if part is None:
            out.append(DeleteRecordsResponse(Errors.UNKNOWN_TOPIC_OR_PARTITION, -1))
            continue
        offset = part.high_watermark if r.offset == -1 else r.offset
        if offset < 0 or offset > part.high_watermark:
            out.append(DeleteRecordsResponse(Errors.OFFSET_OUT_OF_RANGE, -1))
            continue
        if offset > part.log_start_offset:
            part.log_start_offset = offset
            log.drop_below(s.txn, part, offset)
            txns.drop_aborted_below(s.txn, part.part_id, offset)
        out.append(DeleteRecordsResponse(Errors.NONE, part.log_start_offset))
    return out


def enforce_retention(
    s: Staged,
    catalog: Catalog,
    log: LogChunks,
    producers: ProducerTable,
    txns: TxnTable,
    now: int,
    producer_id_expiration_ms: int,
) -> dict[TopicIdPartition, int]:
    """Apply retention.ms and retention.bytes to every partition, batch by
    batch, never past the HWM; expire producer states.  Returns the new log
    start offsets of the partitions that changed."""
    changed: dict[TopicIdPartition, int] = {}
    for tp in list(catalog.parts):
        # A write earlier in this transaction may have changed it.
        cached = s.parts[tp] if tp in s.parts else catalog.parts[tp]
        topic = s.topic(tp.topic_id)
        if cached is None or topic is None or cached.live_batches == 0:
            continue
        cfg = topic.config
        new_lso = _retention_point(s.txn, log, cached, catalog.effective_hwm(cached), cfg, now)
        if new_lso > cached.log_start_offset:
            part = s.part(tp)
            assert part is not None
            log.drop_below(s.txn, part, new_lso)
            txns.drop_aborted_below(s.txn, part.part_id, new_lso)
            part.log_start_offset = new_lso
            changed[tp] = new_lso
    for key in producers.expired(s.txn, now, producer_id_expiration_ms):
        if key not in s.producers:
            s.producers[key] = None
    return changed


def _retention_point(txn: lmdb.Transaction, log: LogChunks, part: Part, hwm: int, cfg: TopicConfig, now: int) -> int:
    """The base offset of the first batch retention keeps (or the HWM)."""
    # A compact-only topic keeps its batches whatever retention says
    # (Kafka's deleteOldSegments checks config.delete first).
    if not cfg.delete or (cfg.retention_ms < 0 and cfg.retention_bytes < 0):
        return part.log_start_offset
    size = part.live_bytes
    point = part.log_start_offset
    for _, e in log.entries(txn, part):
        if e.last_offset >= hwm and not injected_bugs.on("retention_past_hwm"):
            break
        by_time = cfg.retention_ms >= 0 and e.effective_timestamp < now - cfg.retention_ms
        by_size = cfg.retention_bytes >= 0 and size - e.size >= cfg.retention_bytes
        if not (by_time or by_size):
            break
        size -= e.size
        point = e.last_offset + 1
    return point
