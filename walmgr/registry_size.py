"""What a registry costs per tracked object: disk and memory.

``walmgr bench registry --objects N`` fills a fresh registry with N
records of the shape a scan records (a WAL key, three partitions, a
cluster id) in batches of ``BATCH``, then streams every record once (what
a full scan's GONE check does shard by shard), and reports:

* LMDB bytes in use per object (``last_pgno`` pages, not the sparse map);
* the process's private memory (RssAnon) at its highest, less where it
  started, in all and per object: what walmgr's own heap pays.  LMDB's
  pages are file-backed and shared with the page cache, so the kernel
  reclaims them under pressure: they are reported apart, as the registry
  file's size.
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from partlog.kafka.records import TopicIdPartition
from partlog.util.proc_stats import rss_anon_bytes, rss_bytes
from partlog.wal.key import make_wal_key
from walmgr.model import ObjectRecord, Source, State
from walmgr.registry import Registry

BATCH = 1000
_T0 = 1_700_000_000_000


def _records(n: int) -> Iterator[list[ObjectRecord]]:
    cluster = uuid.uuid4()
    tps = tuple(TopicIdPartition(uuid.uuid4(), p) for p in range(3))
    batch: list[ObjectRecord] = []
    for i in range(n):
        created = _T0 + i
        key = str(make_wal_key("wal", created, 1 + i % 100, secrets.token_hex(8)))
        batch.append(
            ObjectRecord(key, 4 << 20, created, 1 + i % 100, tps, Source.SCAN, State.TRACKED, _T0, cluster_id=cluster)
        )
        if len(batch) == BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


def measure(
    objects: int, directory: str | None = None, progress: Callable[[str], None] = lambda _: None
) -> dict[str, Any]:
    if objects <= 0:
        raise ValueError(f"objects must be > 0, got {objects}")
    top = tempfile.mkdtemp(prefix="walmgr-registry-size-", dir=directory)
    try:
        start_rss = peak = rss_anon_bytes()
        peak_total = rss_bytes()
        t0 = time.monotonic()
        with Registry(os.path.join(top, "registry"), sync=False) as reg:
            for i, batch in enumerate(_records(objects)):
                reg.put_new(batch)
                if i % 64 == 0:
                    peak = max(peak, rss_anon_bytes())
                    peak_total = max(peak_total, rss_bytes())
                    progress(f"{(i + 1) * BATCH:,} of {objects:,} records")
            insert_s = time.monotonic() - t0
            peak = max(peak, rss_anon_bytes())
            t1 = time.monotonic()
            streamed = 0
            for streamed, _ in enumerate(reg.records(None), 1):
                if streamed % (64 * BATCH) == 0:
                    peak = max(peak, rss_anon_bytes())
                    peak_total = max(peak_total, rss_bytes())
            stream_s = time.monotonic() - t1
            peak = max(peak, rss_anon_bytes())
            used = reg.used_bytes()
        heap = max(0, peak - start_rss)
        return {
            "benchmark": "registry",
            "objects": objects,
            "records_streamed": streamed,
            "insert_records_per_s": round(objects / insert_s, 1),
            "stream_records_per_s": round(streamed / stream_s, 1) if stream_s > 0 else None,
            "disk_bytes_per_object": round(used / objects, 1),
            "registry_file_bytes": used,
            "rss_anon_growth_bytes": heap,
            "rss_anon_bytes_per_object": round(heap / objects, 2),
            # Resident pages of any kind at the peak, LMDB's mapped file
            # pages included (reclaimable: the kernel drops them first).
            "rss_peak_bytes": peak_total,
        }
    finally:
        shutil.rmtree(top, ignore_errors=True)


def report(r: dict[str, Any]) -> str:
    return (
        f"registry of {r['objects']:,} objects: {r['disk_bytes_per_object']:.0f} bytes on disk each "
        f"({r['registry_file_bytes'] / 2**20:,.1f} MiB in all); private memory grew "
        f"{r['rss_anon_growth_bytes'] / 2**20:,.1f} MiB ({r['rss_anon_bytes_per_object']:.2f} bytes per object); "
        f"inserted {r['insert_records_per_s']:,.0f}/s, streamed {r['stream_records_per_s'] or 0:,.0f}/s; "
        f"resident at the peak {r.get('rss_peak_bytes', 0) / 2**20:,.0f} MiB (LMDB's file pages included)"
    )
