"""walmgr's bucket scan on Spark (``walmgr scan --engine spark``).

The job (spark/scan_job.py) lists and reads footers on executors with the
in-process scanner's own functions; this module is the driver side: it
writes the registry's known keys as Parquet (streamed), runs the job in one
SparkSession per process, and merges the job's output into the registry by
streaming it back (``toLocalIterator``, a partition at a time) through
:meth:`Registry.put_new` (a concurrent notification is never overwritten),
then advances the shard positions (never moves one back).

Not in this increment: a Spark full scan does not mark GONE records nor
revive GONE ones, and does not set ``last_full_scan_ms``; run the
in-process ``Scanner.full()`` for that (ScanReport.gone/revived are 0).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from partlog.records import TopicIdPartition
from partlog.wal_key import OBJECT_KEY_BYTES_MAX
from walmgr.model import ObjectRecord, Source, State
from walmgr.registry import Registry
from walmgr.scanner import INCREMENTAL_LOOKBACK_MS_DEFAULT, INVALID_REPORTED_MAX, ScanReport, prefix_head

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# Records per registry transaction while merging.
MERGE_BATCH = 1000
SHUFFLE_PARTITIONS_DEFAULT = 8

_session_lock = threading.Lock()
_session: SparkSession | None = None


def get_session(master: str = "local[*]", conf: dict[str, str] | None = None) -> SparkSession:
    """The process's SparkSession (created once, UI off, few shuffle partitions)."""
    global _session
    from pyspark.sql import SparkSession

    with _session_lock:
        if _session is None or _session.sparkContext._jsc is None:
            # Executors' Python workers run this interpreter (it has partlog/walmgr).
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
            builder = (
                SparkSession.builder.master(master)
                .appName("walmgr-scan")
                .config("spark.ui.enabled", "false")
                .config("spark.sql.shuffle.partitions", str(SHUFFLE_PARTITIONS_DEFAULT))
            )
            for k, v in (conf or {}).items():
                builder = builder.config(k, v)
            _session = builder.getOrCreate()
        return _session


def write_known_keys(spark: SparkSession, registry: Registry, prefix: str, path: str, work_dir: str) -> int:
    """Write the keys the registry holds under ``<prefix>/`` (any state) to
    the Parquet ``path`` (one ``key`` column), streamed through a JSON-lines
    file; returns how many."""
    from spark.scan_job import KNOWN_SCHEMA

    lines = os.path.join(work_dir, "known.jsonl")
    n = 0
    with open(lines, "w", encoding="utf-8") as f:
        for rec in registry.records(None, key_prefix=prefix_head(prefix)):
            f.write(json.dumps({"key": rec.key}))
            f.write("\n")
            n += 1
    spark.read.schema(KNOWN_SCHEMA).json(lines).write.mode("overwrite").parquet(path)
    return n


def _record(row: Any, now_ms: int) -> ObjectRecord:
    return ObjectRecord(
        row["key"],
        int(row["size"]),
        int(row["created_ms"]),
        int(row["broker"]),
        tuple(TopicIdPartition(uuid.UUID(p["topic_id"]), int(p["partition"])) for p in row["partitions"]),
        Source.SCAN,
        State(row["status"]),
        now_ms,
        note=row["note"],
    )


def _batches(rows: Iterator[Any], now_ms: int) -> Iterator[list[ObjectRecord]]:
    batch: list[ObjectRecord] = []
    for row in rows:
        batch.append(_record(row, now_ms))
        if len(batch) >= MERGE_BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


def spark_scan(
    store_url: str,
    registry: Registry,
    prefix: str,
    *,
    clock: Callable[[], int],
    master: str = "local[*]",
    full: bool = True,
    shards: Sequence[str] | None = None,
    lookback_ms: int = INCREMENTAL_LOOKBACK_MS_DEFAULT,
    spark: SparkSession | None = None,
    work_dir: str | None = None,
) -> ScanReport:
    """Scan ``store_url`` (an ``open_store`` URL) under ``prefix`` on Spark
    into ``registry``: a full scan (everything under ``<prefix>/``, no GONE
    marking) or, ``full=False``, an incremental one of ``shards`` (all when
    None) from the registry's positions less ``lookback_ms``."""
    from spark.scan_job import run_scan

    prefix = prefix_head(prefix)[:-1]
    session = spark if spark is not None else get_session(master)
    started = time.monotonic()
    now = clock()
    tmp = tempfile.mkdtemp(prefix="walmgr-spark-", dir=work_dir)
    try:
        known_path = os.path.join(tmp, "known")
        out_dir = os.path.join(tmp, "out")
        write_known_keys(session, registry, prefix, known_path, tmp)
        positions = None if full else registry.shard_positions()
        stats = run_scan(session, store_url, prefix, known_path, out_dir, shards, positions, lookback_ms, now)

        new_objects = bytes_new = invalid_count = 0
        invalid: list[tuple[str, str]] = []
        for key in stats["too_long_keys"]:
            invalid.append((key, f"longer than {OBJECT_KEY_BYTES_MAX} bytes: not a WAL key"))
        invalid_count += stats["too_long"]
        rows = session.read.parquet(os.path.join(out_dir, "objects")).toLocalIterator(prefetchPartitions=False)
        for batch in _batches(rows, now):
            for rec in registry.put_new(batch):
                if rec.state == State.INVALID:
                    invalid_count += 1
                    if len(invalid) < INVALID_REPORTED_MAX:
                        invalid.append((rec.key, rec.note))
                else:
                    new_objects += 1
                    bytes_new += rec.size
        # Positions after the records: a crash in between re-lists, never skips.
        current = registry.shard_positions()
        moved = {}
        for row in session.read.parquet(os.path.join(out_dir, "positions")).toLocalIterator():
            shard, position = row["shard"], row["position"]
            if position > current.get(shard, ""):
                moved[shard] = position
        if moved:
            registry.set_shard_positions(moved)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return ScanReport(
        keys_listed=stats["keys_listed"],
        new_objects=new_objects,
        invalid=tuple(invalid),
        gone=0,
        seconds=time.monotonic() - started,
        bytes_new=bytes_new,
        invalid_count=invalid_count,
    )
