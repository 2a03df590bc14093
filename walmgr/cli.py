"""walmgr command line: the daemon, one-off cycles, scans, status, inspection."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import logging
import signal
import sys
from typing import Any

from partlog.util.cli_errors import OneLineArgumentParser, run_cli, take_debug_flag
from walmgr.config import SCAN_ENGINES, SCAN_SPARK_MASTER_DEFAULT, WalmgrConfig, WalmgrConfigError, load_config
from walmgr.model import State


def _config(args: argparse.Namespace) -> WalmgrConfig:
    overrides: dict[str, Any] = {}
    if getattr(args, "metadata", None):
        overrides["metadata"] = args.metadata
    if getattr(args, "prefix", None):
        overrides["prefix"] = args.prefix
    if getattr(args, "tiered_prefix", None):
        overrides["tiered_prefix"] = args.tiered_prefix
    if args.config:
        if args.store or args.registry:
            raise WalmgrConfigError("give --config FILE, or --store URL and --registry DIR, not both")
        cfg = load_config(args.config)
        if overrides:
            cfg = cfg.replace(**overrides)
        return cfg
    if not args.store or not args.registry:
        raise WalmgrConfigError("give --config FILE, or both --store URL and --registry DIR")
    return WalmgrConfig.for_cli(args.store, args.registry, **overrides)


def _cmd_run(args: argparse.Namespace, cfg: WalmgrConfig) -> int:
    from walmgr.daemon import Walmgr

    async def serve() -> int:
        mgr = Walmgr(cfg)
        try:
            # The daemon waits for its controller as long as it takes, logging
            # and counting every failed attempt (walmgr_metadata_errors).
            await mgr.start()
            loop = asyncio.get_running_loop()
            stopping = asyncio.Event()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, stopping.set)
            runner = asyncio.ensure_future(mgr.run())
            stopper = asyncio.ensure_future(stopping.wait())
            await asyncio.wait([runner, stopper], return_when=asyncio.FIRST_COMPLETED)
            if runner.done():
                stopper.cancel()
                runner.result()  # a misconfiguration found while running (ClusterMismatchError) ends it
                return 0
            logging.getLogger("walmgr").info("walmgr stopping (signal); the current cycle finishes its step")
            runner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await runner
            return 0
        finally:
            await mgr.stop()

    return asyncio.run(serve())


def _cmd_gc(args: argparse.Namespace, cfg: WalmgrConfig) -> int:
    from walmgr.daemon import Walmgr

    if not args.once:
        print("walmgr gc: only --once is supported (walmgr run is the daemon)", file=sys.stderr)
        return 2

    async def once() -> dict[str, Any]:
        mgr = Walmgr(cfg)
        try:
            # One-shot: a bounded wait for the controller, and a store that
            # cannot be read is a failure, never "plan: 0".
            await mgr.start(metadata_timeout_ms=cfg.metadata_timeout_ms)
            report = await mgr.cycle(dry_run=args.dry_run, full_scan=True, scan_errors_fatal=True)
            return report.to_json()
        finally:
            await mgr.stop()

    out = asyncio.run(once())
    if args.json:
        print(json.dumps(out))
    else:
        verb = "would delete" if args.dry_run else "deleted"
        print(
            f"candidates {out['candidates']}, kept referenced {out['kept_referenced']}, "
            f"kept on doubt {out['kept_doubt']}"
        )
        print(f"plan: {out['planned']} objects; {verb} {out['deleted_files'] if not args.dry_run else out['planned']}")
        for key in out["plan"]:
            print(f"  {key}")
        if out["planned"] > len(out["plan"]):
            print(f"  ... and {out['planned'] - len(out['plan'])} more (the first {len(out['plan'])} are listed)")
        for key, why in out["doubt"].items():
            print(f"  kept {key}: {why}")
        for key, reason in out["scan"]["invalid"]:
            print(f"  not a WAL object (never deleted): {key}: {reason}")
    return 0


def _cmd_scan(args: argparse.Namespace, cfg: WalmgrConfig) -> int:
    from walmgr.daemon import Walmgr
    from walmgr.progress import ProgressBar

    overrides = {}
    if args.engine is not None:
        overrides["scan_engine"] = args.engine
    if args.master is not None:
        overrides["scan_spark_master"] = args.master
    cfg = cfg.replace(**overrides)

    async def scan() -> dict[str, Any]:
        mgr = Walmgr(cfg)
        try:
            await mgr.start(metadata_timeout_ms=cfg.metadata_timeout_ms)
            # A bar over the 256 shards on a terminal (tqdm stays silent
            # otherwise, and with --json, which owns stdout, it draws on stderr).
            with ProgressBar() as bar:
                mgr.scan_progress = bar
                report = await mgr.scan(full=True)
            assert mgr.registry is not None
            objects = [r.to_json() for r in mgr.registry.records()]
            return {
                "keys_listed": report.keys_listed,
                "new_objects": report.new_objects,
                "invalid": [{"key": k, "reason": why} for k, why in report.invalid],
                "gone": report.gone,
                "revived": report.revived,
                "engine": cfg.scan_engine,
                "seconds": report.seconds,
                "stages": dict(report.stages),
                "objects": objects,
            }
        finally:
            await mgr.stop()

    out = asyncio.run(scan())
    if args.json:
        print(json.dumps(out))
    else:
        print(
            f"{out['engine']} engine: listed {out['keys_listed']} keys in {out['seconds']:.2f} s; "
            f"{out['new_objects']} new objects, {out['gone']} gone, {out['revived']} listed again"
        )
        if out["stages"]:
            print("stages: " + ", ".join(f"{k} {v:.2f} s" for k, v in out["stages"].items()))
        for o in out["objects"]:
            print(f"{o['status']:9} {o['size']:>12} {o['created_ms']:>14} {o['key']}")
        for inv in out["invalid"]:
            print(f"invalid (never deleted): {inv['key']}: {inv['reason']}")
    return 0


def _cmd_status(args: argparse.Namespace, cfg: WalmgrConfig) -> int:
    from walmgr.registry import Registry

    with Registry(cfg.registry, readonly=True) as reg:
        counts = reg.counts()
        last_cycle = reg.meta_get("last_cycle_ms")
        last_full = reg.meta_get("last_full_scan_ms")
        cluster_id = reg.cluster_id
    states = {s.value: {"files": counts.get(s, (0, 0))[0], "bytes": counts.get(s, (0, 0))[1]} for s in State}
    out: dict[str, Any] = {
        "registry": cfg.registry,
        "cluster_id": None if cluster_id is None else str(cluster_id),
        "states": states,
        "last_cycle_ms": int(last_cycle) if last_cycle else None,
        "last_full_scan_ms": int(last_full) if last_full else None,
    }
    if args.json:
        print(json.dumps(out))
    else:
        print(f"registry {cfg.registry}, cluster {out['cluster_id'] or '(not bound yet)'}")
        for state, c in states.items():
            print(f"{state:9} {c['files']:>10} files {c['bytes']:>16} bytes")
        print(f"last cycle: {_iso(out['last_cycle_ms'])}; last full scan: {_iso(out['last_full_scan_ms'])}")
    return 0


def _iso(ms: int | None) -> str:
    """A registry time (ms since the epoch) as ISO 8601 UTC, to the second."""
    if ms is None:
        return "never"
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _cmd_inspect(args: argparse.Namespace, cfg: WalmgrConfig) -> int:
    from walmgr.registry import Registry

    with Registry(cfg.registry, readonly=True) as reg:
        rec = reg.get(args.key)
    if rec is None:
        print(f"walmgr inspect: {args.key!r} is not in the registry {cfg.registry}", file=sys.stderr)
        return 1
    print(json.dumps(rec.to_json(), indent=2))
    return 0


def _cmd_bench(args: argparse.Namespace) -> int:
    from walmgr import bench

    def progress(msg: str) -> None:
        if not args.json:
            print(f"... {msg}", file=sys.stderr, flush=True)

    if args.what == "registry":
        from walmgr import registry_size

        size = registry_size.measure(args.objects, progress=progress)
        print(json.dumps(size) if args.json else registry_size.report(size))
        return 0
    if args.engines is None:
        engines: tuple[str, ...] = ("local",)
        if args.what == "all":
            import importlib.util

            if importlib.util.find_spec("pyspark") is not None:
                engines = ("local", "spark")
            else:
                progress("pyspark is not installed: no Spark scans (pip install 'partlog[spark]')")
    else:
        engines = tuple(e.strip() for e in args.engines.split(",") if e.strip())
    result = bench.run(objects=args.objects, store_url=args.store, progress=progress, what=args.what, engines=engines)
    if args.json:
        print(json.dumps(result))
    else:
        text = {"all": bench.report, "scan": bench.report_scans, "soak": bench.report_soak}[args.what]
        print(text(result))
    return 0


def _cmd_spark_package(args: argparse.Namespace) -> int:
    from walmgr.spark_scan import package_zip

    path = package_zip(args.out)
    print(path)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineArgumentParser(
        prog="walmgr",
        description="WAL File Manager: tracks WAL objects (from broker notifications and bucket scans) and deletes "
        "the ones no partition leader references, past commit.deadline.ms + max.clock.skew.ms + grace.ms. It fails "
        "closed: any error, timeout or leader change keeps the object.",
    )
    parser.add_argument(
        "--debug", action="store_true", help="on failure, show the traceback (accepted anywhere on the line)"
    )
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--config", default=None, help="walmgr TOML config (see walmgr/config.py)")
        p.add_argument(
            "--store", default=None, help="one-off: object store URL (file:///path, s3://bucket/prefix?endpoint=URL)"
        )
        p.add_argument("--registry", default=None, help="one-off: registry directory")
        p.add_argument("--prefix", default=None, help="WAL key prefix (default from the config, else 'wal')")
        p.add_argument(
            "--tiered-prefix",
            default=None,
            help="tiered segments' key prefix, listed with every full scan and gated as segments "
            "(default from the config, else 'tiered'; never equal to or nested with the WAL prefix)",
        )
        p.add_argument(
            "--metadata",
            default=None,
            help="controller://HOST:PORT, etcd[+tls]://HOST:PORT[,HOST:PORT...][/PREFIX][?QUERY] "
            "(QUERY: see partlog broker --help) or a static cluster TOML",
        )
        p.add_argument("--json", action="store_true", help="print one JSON object")

    run = sub.add_parser("run", help="the daemon: a cycle every cycle_interval_ms until SIGTERM")
    common(run)
    run.set_defaults(func=_cmd_run)
    gc = sub.add_parser("gc", help="one full cycle: scan, check, delete (with --dry-run: print the plan only)")
    common(gc)
    gc.add_argument("--once", action="store_true", help="run one cycle and exit (required)")
    gc.add_argument("--dry-run", action="store_true", help="decide and print the plan; delete nothing")
    gc.set_defaults(func=_cmd_gc)
    scan = sub.add_parser("scan", help="a full scan of the prefix into the registry; prints every object")
    common(scan)
    scan.add_argument(
        "--engine",
        choices=SCAN_ENGINES,
        default=None,
        help="list and read footers in this process (local) or on Spark (spark; needs pyspark and Java); "
        "default: the config's scan.engine, else local",
    )
    scan.add_argument(
        "--master",
        default=None,
        help=f"Spark master for --engine spark (default: the config's scan.spark_master, else "
        f"{SCAN_SPARK_MASTER_DEFAULT.replace('%', '%%')}); a non-local master gets partlog and walmgr shipped as a zip",
    )
    scan.set_defaults(func=_cmd_scan)
    status = sub.add_parser("status", help="objects and bytes per state (works while the daemon runs)")
    common(status)
    status.set_defaults(func=_cmd_status)
    insp = sub.add_parser("inspect", help="one object's record: state, partitions, why it was kept")
    common(insp)
    insp.add_argument("key", metavar="KEY")
    insp.set_defaults(func=_cmd_inspect)
    bench = sub.add_parser(
        "bench",
        help="scan keys/s and deletion files/s against SeaweedFS (started on 127.0.0.1) or --store",
        description="all (default): fills a bucket with --objects small WAL segments, measures raw listing and raw "
        "DeleteObjects as baselines, then walmgr's full scan (list + one footer GET each), the same on Spark "
        "local[1] and local[2] when pyspark is installed, an incremental scan, and "
        "deletion from a persisted plan with batches of 250 and of 1000 (target: >= 2,000 files/s deleted). "
        "scan: full scans only, with each of --engines into an empty registry; spark runs local[1] and local[2] "
        "(start-up timed apart) and reports the stages (listing, footers, merge) and the 2/1-core ratio.",
    )
    bench.add_argument(
        "what",
        nargs="?",
        choices=("all", "scan", "soak", "registry"),
        default="all",
        help="what to measure: scans and deletions, scan engines, a soak (--objects orphans learned and deleted by "
        "the daemon's cycle, with walmgr's private memory against a stated bound), or a registry's disk and "
        "memory per object",
    )
    bench.add_argument(
        "--engines",
        default=None,
        help="scan engines, comma-separated: local, spark. 'all' always runs local and adds full scans on Spark "
        "local[1] and local[2] over the same objects (default: local,spark when pyspark is installed, else local); "
        "'scan' defaults to local",
    )
    bench.add_argument("--objects", type=int, default=100_000, help="objects to create (default 100,000)")
    bench.add_argument("--store", default=None, help="store URL instead of a SeaweedFS started for the bench")
    bench.add_argument("--json", action="store_true", help="print one JSON object")
    bench.set_defaults(func=_cmd_bench, standalone=True)
    pkg = sub.add_parser(
        "spark-package",
        help="write partlog + walmgr + the Spark job as one zip, for spark-submit --py-files",
        description="Executors of a Spark cluster import partlog and walmgr: ship this zip with "
        "'spark-submit --py-files' (walmgr itself ships it when its scan.spark_master is not local). "
        "partlog's dependencies (pyproject.toml's dependencies) must be installed on the executors.",
    )
    pkg.add_argument("--out", default="walmgr_spark.zip", help="zip to write (default walmgr_spark.zip)")
    pkg.set_defaults(func=_cmd_spark_package, standalone=True)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv, debug = take_debug_flag(list(sys.argv[1:] if argv is None else argv))
    parser = build_parser()
    args = parser.parse_args(argv)
    # The daemon logs its cycles; one-shot commands print their result and,
    # on failure, one line: their logs are warnings only, and the controller
    # client's retries (summed up in the final error) are not repeated.
    daemon = args.command == "run"
    logging.basicConfig(
        level=logging.INFO if daemon or debug else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not daemon and not debug:
        logging.getLogger("partlog.controller.client").setLevel(logging.ERROR)
        logging.getLogger("partlog.controller.etcd_meta").setLevel(logging.ERROR)
    return run_cli(f"walmgr {args.command}", lambda: _dispatch(parser, args), debug=debug)


def _dispatch(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from walmgr.registry import RegistryLockedError

    if getattr(args, "standalone", False):
        if args.command == "bench":
            from walmgr.bench import OBJECTS_MAX

            if not 0 < args.objects <= OBJECTS_MAX:
                parser.error(f"--objects must be > 0 and at most {OBJECTS_MAX:,}, got {args.objects}")
            if args.engines is not None:
                engines = [e.strip() for e in args.engines.split(",") if e.strip()]
                if not engines or any(e not in SCAN_ENGINES for e in engines):
                    parser.error(
                        f"--engines: a comma-separated list of {', '.join(SCAN_ENGINES)}, got {args.engines!r}"
                    )
                if args.what == "all" and "local" not in engines:
                    parser.error("--engines: 'walmgr bench' (all) always runs the local engine: name local too")
                if args.what in ("registry", "soak") and engines != ["local"]:
                    parser.error(f"--engines applies to 'walmgr bench' and 'walmgr bench scan', not to {args.what}")
        return int(args.func(args))
    try:
        cfg = _config(args)
        return int(args.func(args, cfg))
    except (WalmgrConfigError, RegistryLockedError) as e:
        print(f"walmgr {args.command}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
