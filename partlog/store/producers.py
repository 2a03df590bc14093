"""Producer state as the store keeps it: per (partition, producer id), loaded
on demand and cached; expired after producer_id_expiration_ms; rebuilt from
the log after truncation.  The idempotence rules are :mod:`partlog.kafka.producer_state`.
"""

from __future__ import annotations

from partlog.kafka.producer_state import (
    NUM_BATCHES_TO_RETAIN,
    AppendedBatch,
    ProducerEntry,
    after_append,
)
from partlog.store.base import Staged, StoreBase
from partlog.store.layout import (
    PRODUCER_KEY,
    U32,
    Entry,
    Part,
    chunk_entry,
    chunk_span,
    last_under,
)


class ProducersMixin(StoreBase):
    """Producer state per partition: load, expire, rebuild. See the module doc."""

    def _expire_producers(self, s: Staged, now: int) -> None:
        cur = s.wtxn.cursor(db=self._db_producers)
        for k, v in cur:
            entry = ProducerEntry.decode(bytes(v))
            if entry.is_expired(now, self.producer_id_expiration_ms):
                part_id, pid = PRODUCER_KEY.unpack(k)
                if (part_id, pid) not in s.producers:
                    s.producers[(part_id, pid)] = None

    def _rebuild_producers(self, s: Staged, part: Part, pids: set[int]) -> None:
        """Producer state of ``pids`` as replaying the partition's remaining
        entries gives it (Kafka's ``rebuildProducerState`` after a truncation).

        A window holds only the trailing batches of the producer's latest
        epoch, at most NUM_BATCHES_TO_RETAIN, so one backward scan from the
        log end finds them all and stops once every producer is complete.
        """
        if not pids:
            return
        open_pids = set(pids)
        found: dict[int, list[Entry]] = {}
        prefix = U32.pack(part.part_id)
        cur = s.wtxn.cursor(db=self._db_log)
        positioned = last_under(cur, prefix)
        while open_pids and positioned and cur.key()[:4] == prefix:
            k, v = cur.item()
            at, n = chunk_span(part.tp, k, v)
            for i in reversed(range(n)):
                e = chunk_entry(v, i, part.tp, at)
                pid = e.header.producer_id
                if pid in open_pids:
                    newest_first = found.setdefault(pid, [])
                    if newest_first and e.header.producer_epoch != newest_first[0].header.producer_epoch:
                        open_pids.discard(pid)  # an older epoch: its batches left the window
                    else:
                        newest_first.append(e)
                        if len(newest_first) == NUM_BATCHES_TO_RETAIN:
                            open_pids.discard(pid)
                    if not open_pids:
                        break
            positioned = cur.prev()
        for pid in pids:
            entry: ProducerEntry | None = None
            for e in reversed(found.get(pid, [])):
                h = e.header
                entry = after_append(
                    entry,
                    h.producer_epoch,
                    AppendedBatch(
                        h.base_sequence,
                        h.last_sequence,
                        e.base_offset,
                        e.last_offset,
                        e.batch_max_timestamp,
                        e.log_append_time,
                    ),
                )
            s.set_producer(part.part_id, pid, entry)
