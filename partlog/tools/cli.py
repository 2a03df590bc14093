"""The ``partlog`` command line: the top-level parser and the dispatch.

Each subcommand lives in a module of :mod:`partlog.tools.cmd` with an
``add_parser(subparsers)`` and a ``run(args)``; the range of every numeric
flag is its argparse ``type=`` (:mod:`partlog.tools.cmd.flags`), so a bad
value is refused with one line and exit status 2 before anything starts."""

from __future__ import annotations

import argparse
import sys

from partlog import __version__
from partlog.tools.cmd import (
    acls,
    bench,
    broker,
    cluster,
    cluster_id,
    consume,
    controller,
    metadata,
    produce,
    status,
    topics,
    users,
    wal,
)
from partlog.util.cli_errors import OneLineArgumentParser, run_cli, take_debug_flag
from partlog.util.malloc import limit_malloc_arenas

# Each subcommand's module, in the order ``partlog --help`` lists them.
COMMANDS = {
    "cluster-id": cluster_id,
    "bench": bench,
    "controller": controller,
    "topics": topics,
    "acls": acls,
    "users": users,
    "cluster": cluster,
    "produce": produce,
    "consume": consume,
    "broker": broker,
    "wal": wal,
    "metadata": metadata,
    "status": status,
}


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineArgumentParser(prog="partlog", description="partlog: coordinator-free diskless Kafka storage")
    parser.add_argument("--version", action="version", version=f"partlog {__version__}")
    parser.add_argument(
        "--debug", action="store_true", help="on failure, show the traceback (accepted anywhere on the line)"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for module in COMMANDS.values():
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv, debug = take_debug_flag(list(sys.argv[1:] if argv is None else argv))
    args = build_parser().parse_args(argv)
    # Before any thread starts (see partlog.util.malloc).
    limit_malloc_arenas()
    return run_cli(f"partlog {args.command}", lambda: int(COMMANDS[args.command].run(args)), debug=debug)


if __name__ == "__main__":
    sys.exit(main())
