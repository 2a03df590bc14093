"""``partlog topics create``: create a topic through the controller or etcd."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from partlog.rpc.secret import read_secret_file
from partlog.tools.cmd.common import add_tls, admin_metadata, host_port, tls_contexts
from partlog.tools.cmd.flags import TIMEOUT_MS_MAX, positive_int, positive_int_at_most

if TYPE_CHECKING:
    from partlog.tools.cmd.common import Subparsers


def add_parser(sub: Subparsers) -> None:
    tp_ = sub.add_parser("topics", help="manage topics through the controller")
    tp_sub = tp_.add_subparsers(dest="topics", required=True)
    tc = tp_sub.add_parser(
        "create",
        help="create a topic (replicas spread over AZs)",
        description="Asks the controller to create topic NAME with --partitions partitions of "
        "--replication-factor replicas each, placed in distinct AZs while the factor is at most the number of AZs. "
        "Creating an existing topic with the same shape succeeds; another shape is TOPIC_ALREADY_EXISTS (exit 1).",
    )
    tc.add_argument("name", metavar="NAME")
    tc.add_argument("--controller", default=None, metavar="HOST:PORT", help="the controller's address")
    tc.add_argument(
        "--metadata",
        default=None,
        metavar="etcd[+tls]://HOST:PORT[,...][/PREFIX][?QUERY]",
        help="or the cluster's etcd (QUERY: see partlog broker --help)",
    )
    tc.add_argument("--partitions", type=positive_int, required=True, help="number of partitions")
    tc.add_argument("--replication-factor", type=positive_int, default=3, help="replicas per partition (default 3)")
    tc.add_argument("--secret-file", default=None, help="file holding the shared secret of the controller's RPCs")
    tc.add_argument("--cluster-id", default=None, metavar="UUID", help="refuse a controller of another cluster")
    add_tls(tc)
    tc.add_argument(
        "--timeout-ms",
        type=positive_int_at_most(TIMEOUT_MS_MAX),
        default=30_000,
        help="give up if the controller does not answer (default 30000)",
    )


def run(args: argparse.Namespace) -> int:
    # "create" is the only subcommand.
    import asyncio
    import logging

    from partlog.controller.client import ControllerUnavailableError
    from partlog.controller.cluster_meta import MetadataError
    from partlog.kafka.errors import Errors

    if (args.controller is None) == (args.metadata is None):
        print("partlog topics create: give exactly one of --controller HOST:PORT and --metadata etcd://...",
              file=sys.stderr)  # fmt: skip
        return 2
    host, port, etcd_target = "", 0, None  # the one the flags name is set below
    try:
        if args.controller is not None:
            host, port = host_port(args.controller)
        else:
            from partlog.controller.etcd_layout import parse_etcd_url

            etcd_target = parse_etcd_url(args.metadata)
    except ValueError as e:
        print(f"partlog topics create: {'--controller' if args.controller else '--metadata'}: {e}", file=sys.stderr)
        return 2

    secret = read_secret_file(args.secret_file)
    tls = tls_contexts(args)
    # One-shot: the final error sums up the retries, which are not logged one by one.
    logging.getLogger("partlog.controller.client").setLevel(logging.ERROR)
    logging.getLogger("partlog.controller.etcd_meta").setLevel(logging.ERROR)

    async def create() -> int:
        client = admin_metadata(args, etcd_target, host, port, secret, tls)
        try:
            await client.start(timeout_ms=args.timeout_ms)  # retries until the controller answers
        except MetadataError as e:  # no cluster under that prefix, or another cluster
            await client.stop()
            print(f"partlog topics create: {e}", file=sys.stderr)
            return 2
        except ControllerUnavailableError as e:
            await client.stop()
            print(f"partlog topics create: {e}", file=sys.stderr)
            return 1
        except BaseException:
            await client.stop()
            raise
        try:
            answer = (await client.create_topics({args.name: (args.partitions, args.replication_factor)}))[args.name]
        finally:
            await client.stop()
        if isinstance(answer, Errors):
            print(f"partlog topics create: {args.name}: {answer.name}", file=sys.stderr)
            return 1
        print(f"topic {answer.name} id {answer.topic_id}: leaders {list(answer.leaders)}")
        return 0

    return asyncio.run(create())
