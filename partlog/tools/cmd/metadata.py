"""``partlog metadata topics|object``: what the brokers' metadata logs and
walmgr's registry say about topics and WAL objects, read-only
(``partlog.tools.metadata_tool``)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from partlog.tools.cmd.common import Subparsers


def add_parser(sub: Subparsers) -> None:
    md = sub.add_parser(
        "metadata",
        help="what the brokers' metadata logs say about topics and WAL objects (read-only)",
        description="Reads the brokers' metadata stores (<data-dir>/brokers/<id>/meta, or each --broker-dir) and "
        "walmgr's registry (<data-dir>/walmgr, or --registry) read-only, so it runs beside live brokers. Every "
        "partition is counted once, from its replica with the highest log end offset. The high watermark shown is "
        "the persisted one, which may lag a running broker's.",
    )
    md_sub = md.add_subparsers(dest="metadata", required=True)
    mdt = md_sub.add_parser(
        "topics",
        help="per topic: partition offsets, live bytes, referenced objects' size, deleted parts still stored",
        description="Per topic: each partition's log start, high watermark and log end; live_bytes (batches still "
        "in the logs); objects_total_bytes (file sizes of the distinct WAL objects they are in); "
        "deleted_part_bytes (sizes of objects walmgr still tracks whose footer names the topic but that the topic "
        "no longer references; unknown without a registry).",
    )
    mdo = md_sub.add_parser(
        "object",
        help="one WAL object: total size, live bytes referencing it, partitions, walmgr state",
        description="One WAL object: its total size, the live batch bytes that reference it, the partitions with "
        "batch counts and walmgr's state. Exits 1 when neither a store nor the registry knows KEY.",
    )
    mdo.add_argument("key", metavar="KEY", help="the WAL object key")
    for p in (mdt, mdo):
        where = p.add_mutually_exclusive_group(required=True)
        where.add_argument("--data-dir", default=None, help="data directory of partlog cluster/broker")
        where.add_argument(
            "--broker-dir",
            action="append",
            metavar="PATH",
            help="a broker's metadata store directory instead (repeatable)",
        )
        p.add_argument("--registry", default=None, help="walmgr registry directory (default <data-dir>/walmgr)")
        p.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    from partlog.tools import metadata_tool

    try:
        with metadata_tool.open_sources(
            data_dir=args.data_dir, broker_dirs=args.broker_dir or (), registry=args.registry
        ) as sources:
            if args.metadata == "topics":
                doc = metadata_tool.topics_report(sources)
            else:
                doc = metadata_tool.object_report(sources, args.key)
    except metadata_tool.MetadataToolError as e:
        print(f"partlog metadata {args.metadata}: {e}", file=sys.stderr)
        return e.exit_code
    if args.json:
        print(json.dumps(doc))
    elif args.metadata == "topics":
        metadata_tool.print_topics(doc)
    else:
        metadata_tool.print_object(doc)
    return 0
