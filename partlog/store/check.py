"""``check``: walk the whole store and report every broken invariant.

It reads what a reader sees (LMDB and the overlay of durable groups not yet
applied, on both sides of every comparison) and recomputes from the logs
what the partition states and the file index claim.  Inline entries (the
markers' control batches) count in the partitions' live batches and bytes,
as Kafka's segments hold them, never in the file index.
"""

from __future__ import annotations

from partlog.kafka.control_batch import control_problem
from partlog.store.catalog import Catalog
from partlog.store.epochs import EpochCache
from partlog.store.index import FileIndex
from partlog.store.layout import CorruptEntryError, inline_marker
from partlog.store.log import LogChunks
from partlog.store.txns import TxnTable
from partlog.store.view import Views


def check_store(
    views: Views, *, catalog: Catalog, log: LogChunks, epochs: EpochCache, index: FileIndex, txns: TxnTable
) -> list[str]:
    """Every entry's CRC, contiguous offsets, the partition counters, the
    epoch cache, the transactions and the file index recomputed from the
    logs, and the in-memory high watermarks.  Returns the problems found (empty when the
    store is sound)."""
    problems: list[str] = []
    usage: dict[int, list[int]] = {}
    with views.read() as txn:
        for part in catalog.all_parts(txn):
            expect = None
            batches = nbytes = 0
            first = True
            try:
                for _, e in log.entries(txn, part):
                    if first and not e.base_offset <= part.log_start_offset <= e.last_offset:
                        problems.append(f"{part.tp}: log start {part.log_start_offset} not in first batch")
                    first = False
                    if expect is not None and e.base_offset != expect:
                        problems.append(f"{part.tp}: gap or overlap at offset {e.base_offset}, expected {expect}")
                    expect = e.last_offset + 1
                    batches += 1
                    nbytes += e.size
                    if e.is_inline:
                        problem = control_problem(e.raw_header, *inline_marker(e.byte_offset))
                        if problem:
                            problems.append(f"{part.tp}: marker at offset {e.base_offset}: {problem}")
                        continue
                    acc = usage.setdefault(e.file_id, [0, 0])
                    acc[0] += 1
                    acc[1] += e.size
            except CorruptEntryError as err:
                problems.append(str(err))
                continue
            if expect is None and part.log_start_offset != part.log_end_offset:
                problems.append(f"{part.tp}: empty log but start {part.log_start_offset} != end {part.log_end_offset}")
            if expect is not None and expect != part.log_end_offset:
                problems.append(f"{part.tp}: last entry ends at {expect}, log end is {part.log_end_offset}")
            if (batches, nbytes) != (part.live_batches, part.live_bytes):
                problems.append(
                    f"{part.tp}: counters say {part.live_batches} batches/{part.live_bytes} bytes, "
                    f"log has {batches}/{nbytes}"
                )
            # The persisted values; the in-memory HWM only ever lies in
            # [persisted HWM, log end] too.
            if not part.log_start_offset <= part.high_watermark <= part.log_end_offset:
                problems.append(
                    f"{part.tp}: log start {part.log_start_offset}, high watermark {part.high_watermark} "
                    f"and log end {part.log_end_offset} out of order"
                )
            # The epoch cache: start offsets ascending with the epochs, none past the log end.
            problems += epochs.problems(txn, part.part_id, part.log_end_offset, part.tp)
            problems += txns.problems(txn, part.part_id, part.tp, part.log_start_offset, part.log_end_offset)
        problems += index.problems(txn, usage)
    problems += catalog.check_hwms()
    return problems
