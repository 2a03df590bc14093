"""``partlog wal dump``: a WAL segment's footer index, optionally verified."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from partlog.tools.cmd.common import Subparsers


def add_parser(sub: Subparsers) -> None:
    wal = sub.add_parser("wal", help="WAL segments on object storage")
    wal_sub = wal.add_subparsers(dest="wal", required=True)
    dump = wal_sub.add_parser(
        "dump",
        help="print a WAL segment's footer index",
        description="Reads the footer of a WAL segment with one suffix-range GET and prints its index: "
        "broker, creation time and, per partition, the byte range and batch count. Exits 1 with the key and "
        "byte offset when the object is not a valid segment.",
    )
    dump.add_argument("target", metavar="KEY_OR_FILE", help="a segment file, or a key with --store")
    dump.add_argument("--store", help="object store URL: file:///path or s3://bucket?endpoint=URL")
    dump.add_argument("--json", action="store_true", help="print one JSON object")
    dump.add_argument(
        "--verify", action="store_true", help="read the whole object and check every batch's framing and CRC"
    )


def run(args: argparse.Namespace) -> int:
    # "dump" is the only subcommand.
    import os

    from partlog.wal.localdir_store import LocalDirStore
    from partlog.wal.objectstore import ObjectStore, ObjectStoreError
    from partlog.wal.segment import WalFormatError, check_segment, footer_to_json, read_footer
    from partlog.wal.store_url import open_store

    target: str = args.target
    store: ObjectStore
    if args.store:
        store, key = open_store(args.store), target
    elif os.path.isfile(target):
        path = os.path.abspath(target)
        store, key = LocalDirStore(os.path.dirname(path), fsync=False), os.path.basename(path)
    else:
        print(
            f"partlog wal dump: {target}: no such file (give --store URL to read a key from a store)", file=sys.stderr
        )
        return 2
    try:
        if args.verify:
            data = store.get(key)
            footer, size = check_segment(data, key=key), len(data)
        else:
            footer, size = read_footer(store, key)
    except (WalFormatError, ObjectStoreError, ValueError) as e:
        print(f"partlog wal dump: {e}", file=sys.stderr)
        return 1
    doc = footer_to_json(key, size, footer)
    if args.json:
        print(json.dumps(doc))
        return 0
    print(f"{key}: {size} bytes, format {doc['version']}, broker {footer.broker_id}, created_ms {footer.created_ms}")
    print(f"{'topic_id':36} {'partition':>9} {'byte_offset':>11} {'size':>9} {'batches':>7}")
    for p in doc["partitions"]:
        print(f"{p['topic_id']:36} {p['partition']:>9} {p['byte_offset']:>11} {p['size']:>9} {p['batch_count']:>7}")
    if args.verify:
        print("verified: version, footer CRC, every batch's framing and CRC-32C")
    return 0
