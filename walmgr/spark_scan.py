"""walmgr's bucket scan on Spark (``walmgr scan --engine spark``).

The job (spark/scan_job.py) lists and reads footers on executors with the
in-process scanner's own rules (:mod:`walmgr.listing`).  walmgr finds the
job through its entry point (:func:`scan_job`), never by importing it, so
the spark package depends on walmgr and not the reverse.  This module is
the driver side: it
writes the registry's known keys as Parquet (streamed), runs the job in one
SparkSession per process, and merges the job's output into the registry by
streaming it back (``toLocalIterator``, a partition at a time) through
:meth:`Registry.put_new` (a concurrent notification is never overwritten),
then advances the shard positions (never moves one back).

A full scan then applies the job's ``gone`` and ``revive`` sets exactly as
``Scanner.full()`` does: live records created ``gone_age_ms`` before the
scan started and not listed become GONE, GONE records listed again are
TRACKED again (both rechecked inside the registry's transactions, so a
record a notification or the deleter changed meanwhile is left alone), and
``last_full_scan_ms`` is set to the scan's start.

With a master other than ``local[...]`` the executors are other machines:
the driver ships partlog, walmgr and the job as one zip (:func:`package_zip`,
``SparkContext.addPyFile``); partlog's dependencies (pyproject.toml's
``dependencies``) must be installed there.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import tempfile
import threading
import uuid
import zipfile
from collections.abc import Iterator, Sequence
from importlib.metadata import entry_points
from types import ModuleType
from typing import TYPE_CHECKING, Any

from partlog.kafka.records import TopicIdPartition
from partlog.runtime import SYSTEM_CLOCK, Clock
from walmgr.listing import (
    GONE_AGE_MS_DEFAULT,
    INCREMENTAL_LOOKBACK_MS_DEFAULT,
    INVALID_REPORTED_MAX,
    is_position_key,
    prefix_head,
)
from walmgr.model import ObjectRecord, Source, State
from walmgr.registry import Registry
from walmgr.scanner import ScanReport

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# Records per registry transaction while merging.
MERGE_BATCH = 1000
SHUFFLE_PARTITIONS_DEFAULT = 8


class SparkScanError(RuntimeError):
    """The Spark job failed (an executor's store error, a lost executor, a
    JVM problem): the scan is retried next cycle, as a store error is."""


def check_available() -> None:
    """Raise :class:`SparkScanError` naming the fix when pyspark is missing."""
    import importlib.util

    if importlib.util.find_spec("pyspark") is None:
        raise SparkScanError("pyspark is not installed: pip install 'partlog[spark]' (and Java 17 for Spark)")


# The entry point group and name under which the Spark job (spark/scan_job.py,
# pyproject.toml's [project.entry-points]) is installed.  walmgr finds the job
# there instead of importing it: the job imports walmgr's listing rules, and
# the arrow between the two packages points that way only.
SCAN_JOB_ENTRY_POINTS = "walmgr.scan_jobs"
SCAN_JOB_NAME = "spark"


def scan_job() -> ModuleType:
    """The Spark job's module (``run_scan``, ``KNOWN_SCHEMA``), through its
    entry point; :class:`SparkScanError` naming the fix when it is not
    installed."""
    check_available()
    found = entry_points(group=SCAN_JOB_ENTRY_POINTS, name=SCAN_JOB_NAME)
    if not found:
        raise SparkScanError(
            f"no Spark scan job is installed (entry point {SCAN_JOB_ENTRY_POINTS}:{SCAN_JOB_NAME}): "
            "reinstall partlog (pip install 'partlog[spark]', or pip install -e . in a checkout)"
        )
    job = next(iter(found)).load()
    if not isinstance(job, ModuleType):
        raise SparkScanError(f"entry point {SCAN_JOB_ENTRY_POINTS}:{SCAN_JOB_NAME} is not a module: {job!r}")
    return job


def shipped_packages() -> tuple[str, ...]:
    """The packages executors import (shipped by package_zip): partlog,
    walmgr, and the job's own package."""
    return ("partlog", "walmgr", scan_job().__name__.split(".")[0])


_session_lock = threading.Lock()
_session: SparkSession | None = None
_session_master = ""
# Seconds the last get_session() spent starting Spark (0 when it reused one).
last_startup_s = 0.0


def package_zip(path: str) -> str:
    """Write partlog, walmgr and the Spark job (their .py files) to the zip
    ``path`` for ``spark-submit --py-files`` or ``SparkContext.addPyFile``;
    returns ``path``."""
    import importlib

    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name in shipped_packages():
            root = os.path.dirname(os.path.abspath(importlib.import_module(name).__file__ or ""))
            for dirpath, dirnames, filenames in os.walk(root):
                dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
                for fn in sorted(filenames):
                    if fn.endswith(".py") or fn == "py.typed":
                        full = os.path.join(dirpath, fn)
                        zf.write(full, os.path.join(name, os.path.relpath(full, root)))
    return path


def get_session(master: str = "local[*]", conf: dict[str, str] | None = None) -> SparkSession:
    """The process's SparkSession (UI off, few shuffle partitions), created
    on first use and again when ``master`` changes (the old one is stopped).
    A non-local master gets partlog and walmgr shipped as a zip."""
    global _session, _session_master, last_startup_s
    check_available()
    from pyspark.sql import SparkSession

    with _session_lock:
        if _session is not None and _session.sparkContext._jsc is not None and _session_master != master:
            _session.stop()
            _session = None
        if _session is None or _session.sparkContext._jsc is None:
            started = SYSTEM_CLOCK.monotonic()
            if master.startswith("local"):
                # Local executors' Python workers run this interpreter (it
                # has partlog/walmgr); a cluster's run their own Python.
                os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
            builder = (
                SparkSession.builder.master(master)
                .appName("walmgr-scan")
                .config("spark.ui.enabled", "false")
                .config("spark.ui.showConsoleProgress", "false")  # no progress bars in walmgr's logs
                .config("spark.sql.shuffle.partitions", str(SHUFFLE_PARTITIONS_DEFAULT))
            )
            for k, v in (conf or {}).items():
                builder = builder.config(k, v)
            session = builder.getOrCreate()
            if not master.startswith("local"):
                ship = os.path.join(tempfile.mkdtemp(prefix="walmgr-spark-pkg-"), "walmgr_spark.zip")
                session.sparkContext.addPyFile(package_zip(ship))
            _session, _session_master = session, master
            last_startup_s = SYSTEM_CLOCK.monotonic() - started
        else:
            last_startup_s = 0.0
        return _session


def stop_session() -> None:
    """Stop the process's SparkSession, if any."""
    global _session
    with _session_lock:
        if _session is not None:
            _session.stop()
            _session = None


def write_known_keys(spark: SparkSession, registry: Registry, prefix: str, path: str, work_dir: str) -> int:
    """Write the records the registry holds under ``<prefix>/`` (any state)
    to the Parquet ``path`` (key, state, created_ms), streamed through a
    JSON-lines file; returns how many."""
    lines = os.path.join(work_dir, "known.jsonl")
    n = 0
    with open(lines, "w", encoding="utf-8") as f:
        for rec in registry.records(None, key_prefix=prefix_head(prefix)):
            f.write(json.dumps({"key": rec.key, "state": rec.state.value, "created_ms": rec.created_ms}))
            f.write("\n")
            n += 1
    spark.read.schema(scan_job().KNOWN_SCHEMA).json(lines).write.mode("overwrite").parquet(path)
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
        cluster_id=uuid.UUID(row["cluster"]) if row["cluster"] else None,
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
    clock: Clock,
    master: str = "local[*]",
    full: bool = True,
    shards: Sequence[str] | None = None,
    lookback_ms: int = INCREMENTAL_LOOKBACK_MS_DEFAULT,
    gone_age_ms: int = GONE_AGE_MS_DEFAULT,
    spark: SparkSession | None = None,
    work_dir: str | None = None,
) -> ScanReport:
    """Scan ``store_url`` (an ``open_store`` URL) under ``prefix`` on Spark
    into ``registry``: a full scan (everything under ``<prefix>/``, with
    GONE marking and revival as ``Scanner.full()``; ``shards`` must be None)
    or, ``full=False``, an incremental one of ``shards`` (all when None)
    from the registry's positions less ``lookback_ms``.

    ``ScanReport.stages`` has the seconds of each stage: ``startup``
    (starting Spark, 0 when reused), ``snapshot`` (known keys to Parquet),
    ``listing``, ``footers`` (anti-join and footer reads), ``gone`` and
    ``merge`` (into the registry)."""
    run_scan = scan_job().run_scan
    if full and shards is not None:
        raise ValueError("a full scan covers every shard: shards must be None")
    if lookback_ms < 0 or gone_age_ms < 0:
        raise ValueError(f"lookback_ms ({lookback_ms}) and gone_age_ms ({gone_age_ms}) must be >= 0")
    prefix = prefix_head(prefix)[:-1]
    started = clock.monotonic()
    session = spark if spark is not None else get_session(master)
    startup_s = 0.0 if spark is not None else last_startup_s
    t_scan = clock.monotonic()
    start_ms = clock.wall_ms()
    now = start_ms
    created_before_ms = start_ms - gone_age_ms
    gone: list[str] = []
    revived: list[str] = []
    tmp = tempfile.mkdtemp(prefix="walmgr-spark-", dir=work_dir)
    try:
        known_path = os.path.join(tmp, "known")
        out_dir = os.path.join(tmp, "out")
        write_known_keys(session, registry, prefix, known_path, tmp)
        snapshot_s = clock.monotonic() - t_scan
        # Positions stored before only WAL keys could be positions start over.
        positions = (
            None
            if full
            else {sh: pos for sh, pos in registry.shard_positions().items() if is_position_key(pos, prefix, sh)}
        )
        try:
            stats = run_scan(
                session,
                store_url,
                prefix,
                known_path,
                out_dir,
                shards,
                positions,
                lookback_ms,
                now,
                created_before_ms=created_before_ms if full else None,
                cluster_id=None if registry.cluster_id is None else str(registry.cluster_id),
            )
        except Exception as e:  # Py4JJavaError wraps what executors raised
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise SparkScanError(f"Spark scan of {store_url} under {prefix}/ failed: {first}") from e
        t_merge = clock.monotonic()

        new_objects = bytes_new = invalid_count = 0
        invalid: list[tuple[str, str]] = []
        invalid.extend((key, reason) for key, reason in stats["unrecordable_keys"])
        invalid_count += stats["unrecordable"]
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
            stored = current.get(shard, "")
            if position > stored or (stored and not is_position_key(stored, prefix, shard)):
                moved[shard] = position
        if moved:
            registry.set_shard_positions(moved)
        if stats["gone_written"]:
            for keys in _key_batches(session, os.path.join(out_dir, "gone")):
                gone += registry.mark_gone(keys, clock.wall_ms(), created_before_ms=created_before_ms)
            for keys in _key_batches(session, os.path.join(out_dir, "revive")):
                revived += registry.revive(keys)
            if gone:
                log.warning("objects gone from the store (deleted by someone else) count=%d keys=%s",
                            len(gone), gone[:10])  # fmt: skip
            if revived:
                log.warning("gone objects listed again keys=%s", revived[:10])
            registry.meta_set("last_full_scan_ms", start_ms)
        merge_s = clock.monotonic() - t_merge
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    report = ScanReport(
        keys_listed=stats["keys_listed"],
        new_objects=new_objects,
        invalid=tuple(invalid),
        gone=len(gone),
        seconds=clock.monotonic() - started,
        bytes_new=bytes_new,
        invalid_count=invalid_count,
        revived=len(revived),
        stages={
            "startup": startup_s,
            "snapshot": snapshot_s,
            "listing": stats["listing_s"],
            "footers": stats["footers_s"],
            "gone": stats["gone_s"],
            "merge": merge_s,
        },
    )
    log.info(
        "spark %s scan keys_listed=%d new_objects=%d invalid=%d gone=%d revived=%d seconds=%.3f stages=%s",
        "full" if full else "incremental",
        report.keys_listed,
        report.new_objects,
        report.invalid_count,
        report.gone,
        report.revived,
        report.seconds,
        {k: round(v, 3) for k, v in report.stages.items()},
    )
    return report


def _key_batches(session: SparkSession, path: str) -> Iterator[list[str]]:
    batch: list[str] = []
    for row in session.read.parquet(path).toLocalIterator(prefetchPartitions=False):
        batch.append(row["key"])
        if len(batch) >= MERGE_BATCH:
            yield batch
            batch = []
    if batch:
        yield batch
