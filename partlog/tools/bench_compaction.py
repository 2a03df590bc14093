"""``partlog bench compaction``: the log cleaner's core on a compacted
partition of ``records`` keyed records over ``keys`` keys (issue 31:
1M records over 10k keys), in memory, one run.

The batches are built first (``batch_records`` records each, values of
``value_bytes``, keys drawn from a seeded generator, a share
``tombstone_ratio`` of them tombstones) as a leader stores them, offsets
stamped.  Then, timed on one core, each once:

* **baseline**: reading the same bytes as the cleaner must at least:
  framing and CRC-32C of every batch, every record parsed once
  (``keyed_records``);
* **cleaner**: a whole pass of :mod:`partlog.tiered.cleaner`: the offset
  map over every batch, then every batch cleaned (records removed, CRC
  recomputed).

Times are the process's CPU time (``time.process_time``; the run is
single-threaded), so a machine shared with other work does not slow the
figures.  Printed: the cleaner's rate in MiB/s of input, the baseline's, their ratio
(cleaner / baseline: the cost of cleaning over reading), the bytes and
records before and after, and the time.  Object-store reads, the upload and
the swap are not in it (``tests/integration/test_compaction.py`` covers
them).  No verdicts: the issue asks for the numbers.
"""

from __future__ import annotations

import random
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from partlog.kafka.record_batch import build_record_batch
from partlog.tiered.cleaner import OffsetMap, build_offset_map, clean_batch, keyed_records

__all__ = ["CompactionBenchOptions", "print_report", "run"]

# Bounds: the batches are held in memory (twice, before and after).
RECORDS_MAX = 5_000_000
VALUE_BYTES_MAX = 64 << 10
BATCH_RECORDS_MAX = 10_000
INPUT_BYTES_MAX = 2 << 30
# The dedupe buffer the bench gives the map: room for KEYS_MAX keys.
KEYS_MAX = 1_000_000
_DEDUPE_BYTES = KEYS_MAX * 24 * 2
T0 = 1_700_000_000_000


@dataclass(frozen=True, slots=True)
class CompactionBenchOptions:
    records: int = 1_000_000
    keys: int = 10_000
    value_bytes: int = 100
    batch_records: int = 100
    tombstone_ratio: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        if not 1 <= self.records <= RECORDS_MAX:
            raise ValueError(f"records {self.records}: must be in [1, {RECORDS_MAX}]")
        if not 1 <= self.keys <= min(self.records, KEYS_MAX):
            raise ValueError(f"keys {self.keys}: must be in [1, min(records, {KEYS_MAX})]")
        if not 0 <= self.value_bytes <= VALUE_BYTES_MAX:
            raise ValueError(f"value bytes {self.value_bytes}: must be in [0, {VALUE_BYTES_MAX}]")
        if not 1 <= self.batch_records <= BATCH_RECORDS_MAX:
            raise ValueError(f"batch records {self.batch_records}: must be in [1, {BATCH_RECORDS_MAX}]")
        if not 0.0 <= self.tombstone_ratio <= 1.0:
            raise ValueError(f"tombstone ratio {self.tombstone_ratio}: must be in [0, 1]")
        if self.records * (self.value_bytes + 40) > INPUT_BYTES_MAX:
            raise ValueError(f"records x value bytes is over {INPUT_BYTES_MAX} bytes of input")


def _batches(opts: CompactionBenchOptions) -> list[bytes]:
    rng = random.Random(opts.seed)
    value = b"v" * opts.value_bytes
    out: list[bytes] = []
    offset = 0
    while offset < opts.records:
        n = min(opts.batch_records, opts.records - offset)
        records = [
            (
                b"key-%08d" % rng.randrange(opts.keys),
                None if rng.random() < opts.tombstone_ratio else value,
                T0 + offset + i,
            )
            for i in range(n)
        ]
        batch = bytearray(build_record_batch(records))
        struct.pack_into(">q", batch, 0, offset)  # the leader's base offset (not under the CRC)
        out.append(bytes(batch))
        offset += n
    return out


def run(opts: CompactionBenchOptions, progress: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    progress(f"building {opts.records:,} records over {opts.keys:,} keys")
    batches = _batches(opts)
    bytes_in = sum(map(len, batches))
    progress(f"baseline: reading {bytes_in / 2**20:,.1f} MiB")
    t = time.process_time()
    keyed = keyed_records(batches)
    baseline_s = time.process_time() - t
    progress("cleaner: offset map, then every batch cleaned")
    t = time.process_time()
    offset_map = OffsetMap(_DEDUPE_BYTES)
    build_offset_map(batches, offset_map)
    map_s = time.process_time() - t
    cleaned = [clean_batch(b, offset_map, now_ms=T0, delete_retention_ms=0) for b in batches]
    cleaner_s = time.process_time() - t
    bytes_out = sum(len(c.data) for c in cleaned)
    removed = sum(c.records_removed for c in cleaned)
    mib = bytes_in / 2**20
    return {
        "records": opts.records,
        "keys": opts.keys,
        "keyed_records": keyed,
        "batches": len(batches),
        "bytes_in": bytes_in,
        "bytes_out": bytes_out,
        "records_out": opts.records - removed,
        "baseline_s": baseline_s,
        "map_s": map_s,
        "cleaner_s": cleaner_s,
        "baseline_mib_per_s": mib / baseline_s if baseline_s > 0 else 0.0,
        "cleaner_mib_per_s": mib / cleaner_s if cleaner_s > 0 else 0.0,
        "cleaner_over_baseline": cleaner_s / baseline_s if baseline_s > 0 else 0.0,
    }


def print_report(r: dict[str, Any]) -> None:
    print(f"compaction of {r['records']:,} records over {r['keys']:,} keys ({r['batches']:,} batches)")
    print(f"  input:    {r['bytes_in']:>14,} bytes")
    left = 100 * r["bytes_out"] / r["bytes_in"] if r["bytes_in"] else 0.0
    print(f"  left:     {r['bytes_out']:>14,} bytes ({left:.1f} %), {r['records_out']:,} records")
    print(f"  baseline: {r['baseline_mib_per_s']:>10,.1f} MiB/s (framing, CRC, records; {r['baseline_s']:.2f} s CPU)")
    print(
        f"  cleaner: {r['cleaner_mib_per_s']:>11,.1f} MiB/s (map {r['map_s']:.2f} s, in all {r['cleaner_s']:.2f} s CPU)"
    )
    print(f"  cleaner time / baseline time: {r['cleaner_over_baseline']:.2f}")
