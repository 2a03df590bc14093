"""walmgr's bucket scan as a PySpark job, with the listing semantics of the
in-process scanner (walmgr.scanner): the same prefix fence, shard prefixes,
look-back start points, key classification and footer checks, because it
calls the same functions.

Stages (the driver never collects the listing):

1. listing: the listing units (one per shard, plus, for a full scan, one
   for the keys under ``<prefix>/`` outside every shard directory) are
   parallelized, a group of units per partition; each partition opens its
   own store (``open_store(url)``: no client crosses from the driver) and
   lists with :func:`walmgr.scanner.list_shard` / ``iter_pages``.
2. the listed keys are anti-joined (a Spark join) with the known keys, a
   Parquet file of one ``key`` column written by the driver from the
   registry.
3. the footers of the unknown keys are read on executors with
   :func:`walmgr.scanner.inspect_object` (one suffix GET each); rows are
   written to ``<out>/objects`` (Parquet), the last listed key of each
   shard to ``<out>/positions``.

A full scan (``positions=None``) lists everything under ``<prefix>/``; an
incremental scan lists ``shards`` from their positions less ``lookback_ms``.
Marking GONE is not done here (see walmgr.spark_scan).

Run as ``spark-submit spark/scan_job.py --store URL --prefix P --known
PARQUET --out DIR [--shards 00,01,..] [--positions JSON]``; the executors'
Python needs partlog and walmgr installed.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
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

from partlog.objectstore import KEY_BYTES_MAX, LIST_KEYS_MAX, ObjectInfo, ObjectStore, open_store
from partlog.wal_key import OBJECT_KEY_BYTES_MAX
from walmgr.scanner import (
    ALL_SHARDS,
    INCREMENTAL_LOOKBACK_MS_DEFAULT,
    INVALID_REPORTED_MAX,
    group_of,
    inspect_object,
    iter_pages,
    list_shard,
    prefix_head,
    shard_list_prefix,
    shard_start_after,
)

# The listing unit of the keys under <prefix>/ outside every shard directory.
REST_UNIT = ""
# Listing units per Spark partition.
UNITS_PER_PARTITION_DEFAULT = 16
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
    ]
)
KNOWN_SCHEMA = StructType([StructField("key", StringType(), False)])


# ------------------------------------------------------------ executor side


def _rest_skip(prefix: str, shard: str) -> str:
    """A start_after past every key of ``<prefix>/<shard>/`` (keys are at
    most KEY_BYTES_MAX bytes) and before ``<prefix>/<shard>0``."""
    head = shard_list_prefix(prefix, shard)
    return head + "\U0010ffff" * ((KEY_BYTES_MAX - len(head.encode("utf-8"))) // 4 + 1)


def list_rest(store: ObjectStore, prefix: str, max_keys: int = LIST_KEYS_MAX) -> Iterator[ObjectInfo]:
    """The objects under ``<prefix>/`` outside every shard directory: what a
    full listing of the prefix sees besides the shard listings.  A shard
    directory met in the listing is skipped with one more LIST."""
    head = prefix_head(prefix)
    after = ""
    while True:
        skip_to = None
        for page in iter_pages(store, head, after, max_keys):
            for info in page:
                group = group_of(info.key, prefix)
                if group in ALL_SHARDS and info.key.startswith(head + group + "/"):
                    skip_to = _rest_skip(prefix, group)
                    break
                yield info
            if skip_to is not None:
                break
        if skip_to is None or skip_to <= after:
            return
        after = skip_to


def _listing_rows(
    store_url: str, prefix: str, units: Iterable[tuple[str, str]], max_keys: int
) -> Iterator[tuple[str, int, int, str, bool]]:
    units = list(units)
    if not units:
        return
    store = open_store(store_url)  # one per partition, on the executor
    for shard, start_after in units:
        infos = (
            list_rest(store, prefix, max_keys)
            if shard == REST_UNIT
            else list_shard(store, prefix, shard, start_after, max_keys)
        )
        for info in infos:
            recordable = 0 < len(info.key.encode("utf-8")) <= OBJECT_KEY_BYTES_MAX
            yield info.key, info.size, info.last_modified_ms, shard, recordable


def _object_rows(store_url: str, prefix: str, now_ms: int, rows: Iterable[Any]) -> Iterator[tuple[Any, ...]]:
    it = iter(rows)
    first = next(it, None)
    if first is None:
        return
    store = open_store(store_url)  # one per partition, on the executor
    pending = [first]

    def inspect(info: ObjectInfo) -> tuple[Any, ...] | None:
        rec = inspect_object(store, info, prefix, now_ms)
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
    and the non-shard rest for a full scan (``positions`` None), else
    ``shards`` from their positions less the look-back."""
    chosen = ALL_SHARDS if shards is None else tuple(shards)
    for shard in chosen:
        shard_list_prefix(prefix, shard)  # refuse bad shard names before any request
    if positions is None:
        return [(shard, "") for shard in chosen] + ([(REST_UNIT, "")] if shards is None else [])
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
    units_per_partition: int = UNITS_PER_PARTITION_DEFAULT,
    page_keys_max: int = LIST_KEYS_MAX,
) -> dict[str, Any]:
    """Scan; write ``<out_dir>/objects`` and ``<out_dir>/positions``
    (Parquet); return small stats: ``keys_listed``, ``too_long`` (count) and
    ``too_long_keys`` (at most INVALID_REPORTED_MAX)."""
    prefix = prefix_head(prefix)[:-1]
    now = int(time.time() * 1000) if now_ms is None else now_ms
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
    listed: DataFrame = spark.createDataFrame(listed_rdd, LISTING_SCHEMA).persist()
    try:
        keys_listed = listed.count()
        too_long_df = listed.filter(~F.col("recordable"))
        too_long = too_long_df.count()
        too_long_keys = [r["key"] for r in too_long_df.select("key").limit(INVALID_REPORTED_MAX).collect()]
        known = spark.read.schema(KNOWN_SCHEMA).parquet(known_path)
        unknown = listed.filter(F.col("recordable")).select("key", "size", "last_modified_ms")
        unknown = unknown.join(known, on="key", how="left_anti")
        objects_rdd = unknown.rdd.mapPartitions(lambda part: _object_rows(store_url, prefix, now, part))
        spark.createDataFrame(objects_rdd, OBJECTS_SCHEMA).write.mode("overwrite").parquet(f"{out_dir}/objects")
        (
            listed.filter(F.col("shard") != REST_UNIT)
            .groupBy("shard")
            .agg(F.max("key").alias("position"))
            .coalesce(1)
            .write.mode("overwrite")
            .parquet(f"{out_dir}/positions")
        )
    finally:
        listed.unpersist()
    return {"keys_listed": keys_listed, "too_long": too_long, "too_long_keys": too_long_keys}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="walmgr bucket scan on Spark")
    p.add_argument("--store", required=True, help="file:///dir or s3://bucket?endpoint=URL")
    p.add_argument("--prefix", required=True)
    p.add_argument("--known", required=True, help="Parquet of known keys (one 'key' column)")
    p.add_argument("--out", required=True)
    p.add_argument("--shards", help="comma-separated shards (incremental scan with --positions)")
    p.add_argument("--positions", help="JSON object shard -> last listed key; absent: full scan")
    p.add_argument("--lookback-ms", type=int, default=INCREMENTAL_LOOKBACK_MS_DEFAULT)
    p.add_argument("--now-ms", type=int)
    args = p.parse_args(argv)
    shards = args.shards.split(",") if args.shards else None
    positions = json.loads(args.positions) if args.positions is not None else None
    spark = SparkSession.builder.appName("walmgr-scan").getOrCreate()
    try:
        stats = run_scan(
            spark, args.store, args.prefix, args.known, args.out, shards, positions, args.lookback_ms, args.now_ms
        )
    finally:
        spark.stop()
    print(json.dumps(stats))
    return 0


if __name__ == "__main__":
    sys.exit(main())
