"""``partlog topics create`` and ``partlog topics add-partitions``: create a
topic, or add partitions to one (Kafka's CreatePartitions), through the
controller or etcd."""

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
    tc.add_argument("--partitions", type=positive_int, required=True, help="number of partitions")
    tc.add_argument("--replication-factor", type=positive_int, default=3, help="replicas per partition (default 3)")
    _add_connection(tc)
    ta = tp_sub.add_parser(
        "add-partitions",
        help="grow a topic to more partitions (Kafka's CreatePartitions)",
        description="Asks the controller to grow topic NAME to --partitions partitions in all; the existing "
        "partitions are untouched. The new ones get the topic's replication factor and are placed as a new "
        "topic's (distinct AZs while the factor is at most the number of AZs), or as --replica-assignment says. "
        "A count that is not an increase is INVALID_PARTITIONS, a bad assignment INVALID_REPLICA_ASSIGNMENT "
        "(exit 1, with the controller's reason). Keys hash to other partitions afterwards, as with Kafka.",
    )
    ta.add_argument("name", metavar="NAME")
    ta.add_argument("--partitions", type=positive_int, required=True, help="the new number of partitions in all")
    ta.add_argument(
        "--replica-assignment",
        type=_assignment,
        default=None,
        metavar="B:B,B:B",
        help="the replicas of each added partition, preferred leader first, as kafka-topics.sh takes them: partitions "
        "separated by ',', their broker ids by ':' (one entry per added partition)",
    )
    ta.add_argument("--validate-only", action="store_true", help="check the request, change nothing")
    _add_connection(ta)


def _assignment(text: str) -> tuple[tuple[int, ...], ...]:
    try:
        return tuple(tuple(int(b) for b in part.split(":")) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: broker ids separated by ':', partitions by ','") from None


def _add_connection(p: argparse.ArgumentParser) -> None:
    p.add_argument("--controller", default=None, metavar="HOST:PORT", help="the controller's address")
    p.add_argument(
        "--metadata",
        default=None,
        metavar="etcd[+tls]://HOST:PORT[,...][/PREFIX][?QUERY]",
        help="or the cluster's etcd (QUERY: see partlog broker --help)",
    )
    p.add_argument("--secret-file", default=None, help="file holding the shared secret of the controller's RPCs")
    p.add_argument("--cluster-id", default=None, metavar="UUID", help="refuse a controller of another cluster")
    add_tls(p)
    p.add_argument(
        "--timeout-ms",
        type=positive_int_at_most(TIMEOUT_MS_MAX),
        default=30_000,
        help="give up if the controller does not answer (default 30000)",
    )


def run(args: argparse.Namespace) -> int:
    import asyncio
    import logging

    from partlog.controller.client import ControllerUnavailableError
    from partlog.controller.cluster_meta import MetadataError
    from partlog.kafka.errors import Errors

    me = f"partlog topics {args.topics}"
    if (args.controller is None) == (args.metadata is None):
        print(f"{me}: give exactly one of --controller HOST:PORT and --metadata etcd://...", file=sys.stderr)
        return 2
    host, port, etcd_target = "", 0, None  # the one the flags name is set below
    try:
        if args.controller is not None:
            host, port = host_port(args.controller)
        else:
            from partlog.controller.etcd_layout import parse_etcd_url

            etcd_target = parse_etcd_url(args.metadata)
    except ValueError as e:
        print(f"{me}: {'--controller' if args.controller else '--metadata'}: {e}", file=sys.stderr)
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
            print(f"{me}: {e}", file=sys.stderr)
            return 2
        except ControllerUnavailableError as e:
            await client.stop()
            print(f"{me}: {e}", file=sys.stderr)
            return 1
        except BaseException:
            await client.stop()
            raise
        try:
            if args.topics == "add-partitions":
                return await add_partitions(client)
            answer = (await client.create_topics({args.name: (args.partitions, args.replication_factor)}))[args.name]
        finally:
            await client.stop()
        if isinstance(answer, Errors):
            print(f"{me}: {args.name}: {answer.name}", file=sys.stderr)
            return 1
        print(f"topic {answer.name} id {answer.topic_id}: leaders {list(answer.leaders)}")
        return 0

    async def add_partitions(client: object) -> int:
        from partlog.controller.partition_admin import NewPartitions, PartitionAdmin
        from partlog.controller.rules import Refused

        assert isinstance(client, PartitionAdmin)
        asked = {args.name: NewPartitions(args.partitions, args.replica_assignment)}
        answer = (await client.create_partitions(asked, args.validate_only))[args.name]
        if isinstance(answer, Refused):
            print(f"{me}: {args.name}: {answer.error.name}: {answer.message}", file=sys.stderr)
            return 1
        done = "would have" if args.validate_only else "has"
        print(f"topic {answer.name} {done} {answer.num_partitions} partitions: leaders {list(answer.leaders)}")
        return 0

    return asyncio.run(create())
