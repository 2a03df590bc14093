"""``spark-submit [--py-files walmgr_spark.zip] spark/submit.py ...``: walmgr's
bucket scan on Spark from the command line.

The driver side of the job in :mod:`spark.scan_job`: with ``--config FILE``
(or ``--store``/``--registry``) it is walmgr's whole scan, merged into the
registry by :func:`walmgr.spark_scan.spark_scan`; with ``--known``/``--out``
it only writes the job's Parquet result.  It lives apart from the job so
that the job module (the executor side) imports only walmgr's listing rules
(:mod:`walmgr.listing`), never walmgr's driver; walmgr reaches the job
through its entry point (``walmgr.spark_scan.scan_job``), never by import.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from pyspark.sql import SparkSession

from spark.scan_job import run_scan
from walmgr.config import WalmgrConfigError
from walmgr.listing import INCREMENTAL_LOOKBACK_MS_DEFAULT
from walmgr.registry import RegistryLockedError


def main(argv: Sequence[str] | None = None) -> int:
    """``spark-submit [--py-files walmgr_spark.zip] spark/submit.py ...``.

    Two modes: with ``--config FILE`` (or ``--store``/``--registry``) this is
    walmgr's whole full or incremental scan, merged into the registry, as
    ``walmgr scan --engine spark`` (the driver needs the registry directory,
    so deploy mode client on walmgr's host, and no walmgr daemon running:
    the registry has one owner).  With ``--known``/``--out`` it only writes
    the Parquet result (objects, positions, gone, revive) for inspection.
    """
    p = argparse.ArgumentParser(
        description="walmgr bucket scan on Spark: merged into walmgr's registry (--config, or --store and "
        "--registry), or written as Parquet only (--store, --known, --out)"
    )
    p.add_argument("--config", help="walmgr TOML config (store, registry, prefix, timing keys)")
    p.add_argument("--store", help="file:///dir or s3://bucket[/prefix]?endpoint=URL")
    p.add_argument("--registry", help="walmgr registry directory (merge mode)")
    p.add_argument("--prefix", help="WAL key prefix (default: the config's, else 'wal')")
    p.add_argument("--incremental", action="store_true", help="list shards from the registry's positions")
    p.add_argument("--shards", help="comma-separated shards for an incremental scan (default all)")
    p.add_argument("--known", help="Parquet of known records (key, state, created_ms): Parquet-only mode")
    p.add_argument("--out", help="output directory: Parquet-only mode")
    p.add_argument("--positions", help="Parquet-only mode: JSON shard -> last listed key (incremental)")
    p.add_argument("--lookback-ms", type=int, default=INCREMENTAL_LOOKBACK_MS_DEFAULT)
    p.add_argument("--created-before-ms", type=int, help="Parquet-only mode, full scans: write gone/revive")
    p.add_argument("--now-ms", type=int)
    args = p.parse_args(argv)
    shards = args.shards.split(",") if args.shards else None
    raw_mode = args.known is not None or args.out is not None
    if raw_mode and (args.known is None or args.out is None or args.store is None or args.registry or args.config):
        p.error("Parquet-only mode takes --store, --known and --out (no --registry or --config)")
    if not raw_mode and not args.config and not (args.store and args.registry):
        p.error("give --config FILE, or --store URL and --registry DIR, or --store/--known/--out")

    store_url, url_prefix = "", ""
    if raw_mode:
        from walmgr.config import PREFIX_DEFAULT, split_store_url

        # s3://bucket/prefix?...: the path is the key prefix (open_store ignores it).
        try:
            store_url, url_prefix = split_store_url(args.store)
        except ValueError as e:
            p.error(f"--store: {e}")
        if url_prefix and args.prefix and args.prefix.strip("/") != url_prefix:
            p.error(f"--prefix {args.prefix!r} disagrees with the store URL's path {url_prefix!r}")
    positions = None
    if args.positions is not None:
        try:
            positions = json.loads(args.positions)
        except ValueError as e:
            p.error(f"--positions: not JSON: {e}")
        if not isinstance(positions, dict) or not all(isinstance(v, str) for v in positions.values()):
            p.error('--positions: a JSON object of shard -> last listed key, e.g. {"00": "wal/00/..."}')
    spark = SparkSession.builder.appName("walmgr-scan").getOrCreate()
    try:
        if raw_mode:
            out: dict[str, Any] = run_scan(
                spark,
                store_url,
                url_prefix or args.prefix or PREFIX_DEFAULT,
                args.known,
                args.out,
                shards,
                positions,
                args.lookback_ms,
                args.now_ms,
                created_before_ms=args.created_before_ms,
            )
        else:
            out = _merge_mode(spark, args, shards)
    except (WalmgrConfigError, RegistryLockedError, ValueError) as e:
        print(f"scan_job: {e}", file=sys.stderr)
        return 2
    finally:
        spark.stop()
    print(json.dumps(out))
    return 0


def _merge_mode(spark: SparkSession, args: argparse.Namespace, shards: list[str] | None) -> dict[str, Any]:
    from partlog.runtime import SYSTEM_CLOCK
    from walmgr.config import WalmgrConfig, load_config
    from walmgr.registry import Registry
    from walmgr.spark_scan import spark_scan

    overrides = {"prefix": args.prefix} if args.prefix else {}
    if args.config:
        cfg = load_config(args.config)
        cfg = cfg.replace(**overrides) if overrides else cfg
    else:
        cfg = WalmgrConfig.for_cli(args.store, args.registry, **overrides)
    with Registry(cfg.registry) as registry:
        report = spark_scan(
            cfg.store_url,
            registry,
            cfg.prefix,
            clock=SYSTEM_CLOCK,
            full=not args.incremental,
            shards=shards,
            lookback_ms=cfg.commit_deadline_ms + cfg.max_clock_skew_ms,
            gone_age_ms=cfg.age_gate_ms,
            spark=spark,
        )
    return {
        "keys_listed": report.keys_listed,
        "new_objects": report.new_objects,
        "invalid_count": report.invalid_count,
        "gone": report.gone,
        "revived": report.revived,
        "seconds": report.seconds,
        "stages": dict(report.stages),
    }


if __name__ == "__main__":
    sys.exit(main())
