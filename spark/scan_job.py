"""walmgr's bucket scan as a PySpark job, with the listing semantics of the
in-process scanner (walmgr.listing, walmgr.scanner): the same prefix fence, shard prefixes,
look-back start points, key classification and footer checks, because it
calls the same functions.

Stages (the driver never collects the listing):

1. listing: the listing units (one per shard, plus, for a full scan, one
   per gap between shard directories, for the keys under ``<prefix>/``
   outside every shard directory) are parallelized, a group of units per
   partition; each partition opens its own store (``open_store(url)``: no
   client crosses from the driver) and lists its units a few at a time with
   :func:`walmgr.listing.list_shard` / ``iter_pages``.  Gaps may overlap
   when shards are empty: the listing is de-duplicated by key.
2. the listed keys are anti-joined (a Spark join) with the known keys, a
   Parquet file of one ``key`` column written by the driver from the
   registry.
3. the footers of the unknown keys are read on executors with
   :func:`walmgr.listing.inspect_object` (one suffix GET each); rows are
   written to ``<out>/objects`` (Parquet), the last listed key of each
   shard to ``<out>/positions``.

A full scan (``positions=None``) lists everything under ``<prefix>/``; an
incremental scan lists ``shards`` from their positions less ``lookback_ms``.
A full scan of every shard given ``created_before_ms`` also writes
``<out>/gone`` (known live keys created before it that were not listed) and
``<out>/revive`` (known GONE keys listed again); the driver applies both with
the registry's own rechecks (walmgr.spark_scan).

Run under ``spark-submit`` through :mod:`spark.submit` (see the README): with
``--registry DIR`` the job is walmgr's whole scan, registry merge included;
with ``--known PARQUET --out DIR`` it only writes the Parquet result.  The
executors import partlog and walmgr: installed there, or shipped with
``--py-files`` (``walmgr spark-package`` builds the zip).
"""

from __future__ import annotations

import math
import sys
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from itertools import islice
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from partlog.runtime import SYSTEM_CLOCK
from partlog.wal.key import ALL_SHARDS, OBJECT_KEY_BYTES_MAX
from partlog.wal.objectstore import KEY_BYTES_MAX, LIST_KEYS_MAX, ObjectInfo, ObjectStore
from partlog.wal.store_url import open_store
from walmgr.listing import (
    INCREMENTAL_LOOKBACK_MS_DEFAULT,
    INVALID_REPORTED_MAX,
    NOT_UTF8_NOTE,
    group_of,
    inspect_object,
    is_position_key,
    iter_pages,
    list_shard,
    prefix_head,
    shard_list_prefix,
    shard_start_after,
)

# The "shard" of the listing units of the keys under <prefix>/ outside every
# shard directory (gaps).
REST_UNIT = ""
# Listing units per Spark partition, and LISTs in flight per partition: a
# LIST is a ~10-30 ms round trip, so one thread per unit would idle.
UNITS_PER_PARTITION_DEFAULT = 32
LISTS_PER_PARTITION = 8
# Keys asked for by a gap listing's first LIST (see list_gap).
GAP_FIRST_PAGE_KEYS = 4
# Footer reads in flight per partition, and how many are submitted at once.
FOOTER_READS_PER_PARTITION = 8
_FOOTER_CHUNK = 256

LISTING_SCHEMA = StructType(
    [
        StructField("key", StringType(), False),
        StructField("size", LongType(), False),
        StructField("last_modified_ms", LongType(), False),
        StructField("shard", StringType(), False),  # REST_UNIT for non-shard keys
        StructField("recordable", BooleanType(), False),  # fits the registry
        # False for a key that is not UTF-8 (a local store's file name): its
        # "key" is then a printable spelling, never a position or a record.
        StructField("utf8", BooleanType(), False),
        # A WAL key of its shard: only those may be the shard's position
        # (walmgr.listing.is_position_key).
        StructField("position_ok", BooleanType(), False),
    ]
)
PARTITION_TYPE = StructType(
    [StructField("topic_id", StringType(), False), StructField("partition", IntegerType(), False)]
)
OBJECTS_SCHEMA = StructType(
    [
        StructField("key", StringType(), False),
        StructField("size", LongType(), False),
        StructField("last_modified_ms", LongType(), False),
        StructField("created_ms", LongType(), False),
        StructField("broker", LongType(), False),
        StructField("partitions", ArrayType(PARTITION_TYPE, False), False),
        StructField("status", StringType(), False),  # tracked / invalid
        StructField("note", StringType(), False),
        StructField("cluster", StringType(), True),  # the footer's cluster id (None: it names none)
    ]
)
# The registry's records under the prefix (any state): the anti-join's
# right side, and for a full scan the records that may be gone or revived.
KNOWN_SCHEMA = StructType(
    [
        StructField("key", StringType(), False),
        StructField("state", StringType(), False),  # walmgr.model.State value
        StructField("created_ms", LongType(), False),
    ]
)
# States a full scan marks GONE when their key is no longer listed, and the
# state it revives when listed again (walmgr.registry.LIVE_STATES, GONE).
LIVE_STATE_VALUES = ("tracked", "candidate", "planned")
GONE_STATE_VALUE = "gone"


# ------------------------------------------------------------ executor side


def _rest_skip(prefix: str, shard: str) -> str:
    """A start_after past every key of ``<prefix>/<shard>/`` (keys are at
    most KEY_BYTES_MAX bytes) and before ``<prefix>/<shard>0``."""
    head = shard_list_prefix(prefix, shard)
    return head + "\U0010ffff" * ((KEY_BYTES_MAX - len(head.encode("utf-8"))) // 4 + 1)


def list_gap(store: ObjectStore, prefix: str, start_after: str, max_keys: int = LIST_KEYS_MAX) -> Iterator[ObjectInfo]:
    """The objects under ``<prefix>/`` after ``start_after`` up to the first
    key in a shard directory.  The gaps starting at "" and after each shard
    directory (:func:`gap_starts`) together list what a full listing of the
    prefix sees besides the shard listings."""
    head = prefix_head(prefix)
    # A gap is usually empty: its first LIST needs to return one key (the
    # next shard's first) to end it, and a store walks up to max_keys keys
    # of the following shards for a full page (~90 ms on SeaweedFS vs ~3).
    for page in iter_pages(store, head, start_after, max_keys, first_page_keys=GAP_FIRST_PAGE_KEYS):
        for info in page:
            group = group_of(info.key, prefix)
            if group in ALL_SHARDS and info.key.startswith(head + group + "/"):
                return
            yield info


def gap_starts(prefix: str) -> list[str]:
    """Where the gap listings start: the prefix's beginning and just past
    each shard directory."""
    return [""] + [_rest_skip(prefix, shard) for shard in ALL_SHARDS]


def _listing_rows(
    store_url: str, prefix: str, units: Iterable[tuple[str, str]], max_keys: int
) -> Iterator[tuple[str, int, int, str, bool, bool, bool]]:
    units = list(units)
    if not units:
        return
    store = open_store(store_url)  # one per partition, on the executor

    def list_unit(unit: tuple[str, str]) -> list[tuple[str, int, int, str, bool, bool, bool]]:
        shard, start_after = unit
        infos = (
            list_gap(store, prefix, start_after, max_keys)
            if shard == REST_UNIT
            else list_shard(store, prefix, shard, start_after, max_keys)
        )
        rows = []
        for info in infos:
            try:
                raw = info.key.encode("utf-8")
            except UnicodeEncodeError:  # lone surrogates: a file name that is not UTF-8
                shown = info.key.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
                rows.append((shown, info.size, info.last_modified_ms, shard, False, False, False))
                continue
            recordable = 0 < len(raw) <= OBJECT_KEY_BYTES_MAX
            position_ok = shard != REST_UNIT and is_position_key(info.key, prefix, shard)
            rows.append((info.key, info.size, info.last_modified_ms, shard, recordable, True, position_ok))
        return rows

    with ThreadPoolExecutor(min(LISTS_PER_PARTITION, len(units)), thread_name_prefix="walmgr-spark-list") as pool:
        for rows in pool.map(list_unit, units):
            yield from rows


def _object_rows(
    store_url: str, prefix: str, now_ms: int, cluster_id: str | None, rows: Iterable[Any]
) -> Iterator[tuple[Any, ...]]:
    it = iter(rows)
    first = next(it, None)
    if first is None:
        return
    store = open_store(store_url)  # one per partition, on the executor
    pending = [first]
    cluster = None if cluster_id is None else uuid.UUID(cluster_id)

    def inspect(info: ObjectInfo) -> tuple[Any, ...] | None:
        rec = inspect_object(store, info, prefix, now_ms, cluster)
        if rec is None:
            return None  # vanished meanwhile
        parts = [(str(tp.topic_id), tp.partition) for tp in rec.partitions]
        return (
            rec.key,
            rec.size,
            info.last_modified_ms,
            rec.created_ms,
            rec.broker_id,
            parts,
            rec.state.value,
            rec.note,
            None if rec.cluster_id is None else str(rec.cluster_id),
        )

    with ThreadPoolExecutor(FOOTER_READS_PER_PARTITION, thread_name_prefix="walmgr-spark-footer") as pool:
        while pending:
            infos = [ObjectInfo(r["key"], r["size"], r["last_modified_ms"]) for r in pending]
            for out in pool.map(inspect, infos):
                if out is not None:
                    yield out
            pending = list(islice(it, _FOOTER_CHUNK))


# --------------------------------------------------------------- driver side


def listing_units(
    prefix: str, shards: Sequence[str] | None, positions: Mapping[str, str] | None, lookback_ms: int
) -> list[tuple[str, str]]:
    """``(shard, start_after)`` per listing unit: every shard from the start
    and the gaps between shard directories for a full scan (``positions``
    None), else ``shards`` from their positions less the look-back."""
    chosen = ALL_SHARDS if shards is None else tuple(shards)
    for shard in chosen:
        shard_list_prefix(prefix, shard)  # refuse bad shard names before any request
    if positions is None:
        gaps = [(REST_UNIT, start) for start in gap_starts(prefix)] if shards is None else []
        return [(shard, "") for shard in chosen] + gaps
    return [(shard, shard_start_after(prefix, shard, positions.get(shard, ""), lookback_ms)) for shard in chosen]


def run_scan(
    spark: SparkSession,
    store_url: str,
    prefix: str,
    known_path: str,
    out_dir: str,
    shards: Sequence[str] | None = None,
    positions: Mapping[str, str] | None = None,
    lookback_ms: int = INCREMENTAL_LOOKBACK_MS_DEFAULT,
    now_ms: int | None = None,
    *,
    created_before_ms: int | None = None,
    units_per_partition: int = UNITS_PER_PARTITION_DEFAULT,
    page_keys_max: int = LIST_KEYS_MAX,
    cluster_id: str | None = None,
) -> dict[str, Any]:
    """Scan; write ``<out_dir>/objects`` and ``<out_dir>/positions``
    (Parquet), and for a full scan given ``created_before_ms`` also
    ``<out_dir>/gone`` and ``<out_dir>/revive``; return small stats:
    ``keys_listed``, ``unrecordable`` (count of keys that cannot be WAL keys:
    too long, or not UTF-8), ``unrecordable_keys`` ([key, reason], at most
    INVALID_REPORTED_MAX), ``gone_written`` (whether gone/revive exist) and
    the seconds of each stage (``listing_s``, ``footers_s``, ``gone_s``).
    ``cluster_id`` (the registry's) makes footers naming another INVALID,
    as :func:`walmgr.listing.inspect_object` does."""
    prefix = prefix_head(prefix)[:-1]
    now = SYSTEM_CLOCK.wall_ms() if now_ms is None else now_ms
    if __name__ != "__main__":
        # Ship this module's functions by value: executors need partlog and
        # walmgr installed, not this file.
        from pyspark import cloudpickle

        cloudpickle.register_pickle_by_value(sys.modules[__name__])  # type: ignore[no-untyped-call]
    units = listing_units(prefix, shards, positions, lookback_ms)
    sc = spark.sparkContext
    slices = max(1, math.ceil(len(units) / units_per_partition))
    listed_rdd = sc.parallelize(units, slices).mapPartitions(
        lambda part: _listing_rows(store_url, prefix, part, page_keys_max)
    )
    # Gap listings overlap where shards are empty: one row per key.
    listed: DataFrame = spark.createDataFrame(listed_rdd, LISTING_SCHEMA).dropDuplicates(["key"]).persist()
    whole_bucket = positions is None and shards is None
    try:
        t0 = SYSTEM_CLOCK.monotonic()
        keys_listed = listed.count()  # the listing runs here (persisted)
        listing_s = SYSTEM_CLOCK.monotonic() - t0
        unrecordable_df = listed.filter(~F.col("recordable"))
        unrecordable = unrecordable_df.count()
        unrecordable_keys = [
            [r["key"], f"longer than {OBJECT_KEY_BYTES_MAX} bytes: not a WAL key" if r["utf8"] else NOT_UTF8_NOTE]
            for r in unrecordable_df.select("key", "utf8").limit(INVALID_REPORTED_MAX).collect()
        ]
        known = spark.read.schema(KNOWN_SCHEMA).parquet(known_path)
        unknown = listed.filter(F.col("recordable")).select("key", "size", "last_modified_ms")
        unknown = unknown.join(known.select("key"), on="key", how="left_anti")
        objects_rdd = unknown.rdd.mapPartitions(lambda part: _object_rows(store_url, prefix, now, cluster_id, part))
        t0 = SYSTEM_CLOCK.monotonic()
        spark.createDataFrame(objects_rdd, OBJECTS_SCHEMA).write.mode("overwrite").parquet(f"{out_dir}/objects")
        footers_s = SYSTEM_CLOCK.monotonic() - t0
        (
            listed.filter(F.col("position_ok"))
            .groupBy("shard")
            .agg(F.max("key").alias("position"))
            .coalesce(1)
            .write.mode("overwrite")
            .parquet(f"{out_dir}/positions")
        )
        t0 = SYSTEM_CLOCK.monotonic()
        gone_written = False
        if whole_bucket and created_before_ms is not None:
            gone_written = True
            listed_keys = listed.select("key")
            # Set semantics: a key listed anywhere in this scan exists.
            (
                known.filter(F.col("state").isin(*LIVE_STATE_VALUES) & (F.col("created_ms") < created_before_ms))
                .select("key")
                .join(listed_keys, on="key", how="left_anti")
                .write.mode("overwrite")
                .parquet(f"{out_dir}/gone")
            )
            (
                known.filter(F.col("state") == GONE_STATE_VALUE)
                .select("key")
                .join(listed_keys, on="key", how="left_semi")
                .write.mode("overwrite")
                .parquet(f"{out_dir}/revive")
            )
        gone_s = SYSTEM_CLOCK.monotonic() - t0
    finally:
        listed.unpersist()
    return {
        "keys_listed": keys_listed,
        "unrecordable": unrecordable,
        "unrecordable_keys": unrecordable_keys,
        "gone_written": gone_written,
        "listing_s": listing_s,
        "footers_s": footers_s,
        "gone_s": gone_s,
    }
