"""``check``: walk the whole store and report every broken invariant."""

from __future__ import annotations

from partlog.store.layout import (
    EPOCH_KEY,
    FILE_RECORD,
    I64,
    U32,
    U64,
    CorruptEntryError,
    Part,
)
from partlog.store.log import LogMixin
from partlog.store.view import overlay_part


class CheckMixin(LogMixin):
    """The invariant walker. See the module doc."""

    def check(self) -> list[str]:
        """Full consistency check: every entry's CRC, contiguous offsets, the
        partition counters and the file index recomputed from the logs.
        Returns the problems found (empty when the store is sound)."""
        problems: list[str] = []
        usage: dict[int, list[int]] = {}
        # What a reader sees: LMDB and the overlay of durable groups not yet
        # applied, on both sides of every comparison.
        with self._read() as txn:
            for pk, pv in txn.cursor(db=self._db_parts):
                part_id = U32.unpack(pk)[0]
                part = Part.unpack(part_id, overlay_part(txn, part_id) or pv)
                expect = None
                batches = nbytes = 0
                first = True
                try:
                    for _, e in self._entries(txn, part):
                        if first and not e.base_offset <= part.log_start_offset <= e.last_offset:
                            problems.append(f"{part.tp}: log start {part.log_start_offset} not in first batch")
                        first = False
                        if expect is not None and e.base_offset != expect:
                            problems.append(f"{part.tp}: gap or overlap at offset {e.base_offset}, expected {expect}")
                        expect = e.last_offset + 1
                        batches += 1
                        nbytes += e.size
                        acc = usage.setdefault(e.file_id, [0, 0])
                        acc[0] += 1
                        acc[1] += e.size
                except CorruptEntryError as err:
                    problems.append(str(err))
                    continue
                if expect is None and part.log_start_offset != part.log_end_offset:
                    problems.append(
                        f"{part.tp}: empty log but start {part.log_start_offset} != end {part.log_end_offset}"
                    )
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
                prefix = U32.pack(part.part_id)
                ecur = txn.cursor(db=self._db_epochs)
                previous = 0
                if ecur.set_range(prefix):
                    for k, v in ecur:
                        if k[:4] != prefix:
                            break
                        epoch, start = EPOCH_KEY.unpack(k)[1], I64.unpack(v)[0]
                        if not previous <= start <= part.log_end_offset:
                            problems.append(f"{part.tp}: epoch {epoch} starts at {start}, out of order")
                        previous = start
            index: dict[int, list[int]] = {}
            for k, v in txn.cursor(db=self._db_files):
                fid, nb, nbytes, _, _ = FILE_RECORD.unpack(v)
                index[fid] = [nb, nbytes]
                back = txn.get(U64.pack(fid), db=self._db_file_ids)
                if back is None or bytes(back) != bytes(k):
                    problems.append(f"file index: {bytes(k).decode()!r} has no reverse entry")
            for g in txn.groups:
                for fid, nb, nbytes, _, _ in g.files.values():
                    acc = index.setdefault(fid, [0, 0])
                    acc[0] += nb
                    acc[1] += nbytes
        if index != usage:
            problems.append(f"file index differs from the logs: index={index} logs={usage}")
        for tp, mem in list(self._hwms.items()):
            cached = self._parts.get(tp)
            if cached is None or mem > cached.log_end_offset:
                problems.append(f"{tp}: in-memory high watermark {mem} past the log end or of no partition")
        return problems
