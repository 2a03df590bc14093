"""``partlog topics create``, ``partlog topics configs`` and ``partlog topics
add-partitions``: create a topic, show or alter its config overrides
(docs/design/topic-configs.md), or add partitions to it (Kafka's
CreatePartitions, docs/design/admin-apis.md), through the controller or etcd.
The reassignment commands are in :mod:`partlog.tools.cmd.reassign`."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from partlog.rpc.secret import read_secret_file
from partlog.tools.cmd import reassign
from partlog.tools.cmd.common import add_metadata_target, admin_metadata, host_port, tls_contexts
from partlog.tools.cmd.flags import positive_int

if TYPE_CHECKING:
    from partlog.tools.cmd.common import Subparsers


def _target(p: argparse.ArgumentParser, name_required: bool = True) -> None:
    if name_required:
        p.add_argument("name", metavar="NAME")
    else:
        p.add_argument("name", metavar="NAME", nargs="?", default=None, help="one topic (default: every topic)")
    add_metadata_target(p)


def _pair(text: str) -> tuple[str, str]:
    name, eq, value = text.partition("=")
    if not eq or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name, value


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
    _target(tc)
    tc.add_argument("--partitions", type=positive_int, default=None, help="number of partitions")
    tc.add_argument("--replication-factor", type=positive_int, default=None, help="replicas per partition (default 3)")
    tc.add_argument(
        "--replica-assignment",
        type=_assignment,
        default=None,
        metavar="B:B,B:B",
        help="each partition's replicas, preferred leader first, as kafka-topics.sh takes them: partitions "
        "separated by ',', their broker ids by ':' (instead of --partitions and --replication-factor)",
    )
    tc.add_argument(
        "--config",
        type=_pair,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a topic config override, by Kafka's name (repeatable; a bad one: INVALID_CONFIG, exit 1)",
    )
    cf = tp_sub.add_parser(
        "configs",
        help="show or alter a topic's config overrides",
        description="Without changes, prints topic NAME's config overrides the controller keeps, one NAME=VALUE "
        "a line (the rest are Kafka's defaults). With changes, applies them as one IncrementalAlterConfigs: "
        "--set, --delete (back to the default), --append and --subtract (list configs: cleanup.policy). "
        "The controller validates the result whole (INVALID_CONFIG names the bad value, exit 1); brokers apply "
        "it to their stores without a restart.",
    )
    _target(cf)
    for flag, what in (("--set", "set NAME to VALUE"), ("--append", "add VALUE's items to list config NAME"),
                       ("--subtract", "remove VALUE's items from list config NAME")):  # fmt: skip
        cf.add_argument(
            flag, type=_pair, action="append", default=[], metavar="NAME=VALUE", help=f"{what} (repeatable)"
        )
    cf.add_argument("--delete", action="append", default=[], metavar="NAME", help="drop override NAME (repeatable)")
    cf.add_argument("--validate-only", action="store_true", help="check the changes, change nothing")
    ta = tp_sub.add_parser(
        "add-partitions",
        help="grow a topic to more partitions (Kafka's CreatePartitions)",
        description="Asks the controller to grow topic NAME to --partitions partitions in all; the existing "
        "partitions are untouched. The new ones get the topic's replication factor and are placed as a new "
        "topic's (distinct AZs while the factor is at most the number of AZs), or as --replica-assignment says. "
        "A count that is not an increase is INVALID_PARTITIONS, a bad assignment INVALID_REPLICA_ASSIGNMENT "
        "(exit 1, with the controller's reason). Keys hash to other partitions afterwards, as with Kafka.",
    )
    _target(ta)
    ta.add_argument("--partitions", type=positive_int, required=True, help="the new number of partitions in all")
    ta.add_argument(
        "--replica-assignment",
        type=_assignment,
        default=None,
        metavar="B:B,B:B",
        help="the replicas of each added partition, preferred leader first, as kafka-topics.sh takes them: "
        "partitions separated by ',', their broker ids by ':' (one entry per added partition)",
    )
    ta.add_argument("--validate-only", action="store_true", help="check the request, change nothing")
    reassign.add_parsers(tp_sub, _target)


def _assignment(text: str) -> tuple[tuple[int, ...], ...]:
    try:
        return tuple(tuple(int(b) for b in part.split(":")) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: broker ids separated by ':', partitions by ','") from None


def run(args: argparse.Namespace) -> int:
    import asyncio
    import logging

    from partlog.controller.client import ControllerUnavailableError
    from partlog.controller.cluster_meta import MetadataError
    from partlog.controller.rules import Refused
    from partlog.kafka.errors import Errors

    if (args.controller is None) == (args.metadata is None):
        print(f"partlog topics {args.topics}: give exactly one of --controller HOST:PORT and --metadata etcd://...",
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
        print(
            f"partlog topics {args.topics}: {'--controller' if args.controller else '--metadata'}: {e}", file=sys.stderr
        )
        return 2

    if args.topics == "create" and (args.partitions is None) == (args.replica_assignment is None):
        print("partlog topics create: give --partitions or --replica-assignment (one of them)", file=sys.stderr)
        return 2
    if args.topics == "create" and args.replica_assignment is not None and args.replication_factor is not None:
        print("partlog topics create: --replica-assignment says the replication factor", file=sys.stderr)
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
            print(f"partlog topics {args.topics}: {e}", file=sys.stderr)
            return 2
        except ControllerUnavailableError as e:
            await client.stop()
            print(f"partlog topics {args.topics}: {e}", file=sys.stderr)
            return 1
        except BaseException:
            await client.stop()
            raise
        try:
            if args.topics == "configs":
                return await _configs(client, args)
            if args.topics == "add-partitions":
                return await _add_partitions(client, args)
            if args.topics in reassign.COMMANDS:
                return await reassign.run_command(client, args)
            configs = {args.name: dict(args.config)} if args.config else None
            if args.replica_assignment is None:
                shape = (args.partitions, args.replication_factor or 3)
                answer = (await client.create_topics({args.name: shape}, configs))[args.name]
            else:  # Kafka's rule: the assignment says the shape (-1, -1)
                placed = {args.name: list(enumerate(args.replica_assignment))}
                answer = (await client.create_topics({args.name: (-1, -1)}, configs, assignments=placed))[args.name]
        finally:
            await client.stop()
        if isinstance(answer, Errors):
            print(f"partlog topics create: {args.name}: {answer.name}", file=sys.stderr)
            return 1
        if isinstance(answer, Refused):
            print(f"partlog topics create: {args.name}: {answer.error.name}: {answer.message}", file=sys.stderr)
            return 1
        print(f"topic {answer.name} id {answer.topic_id}: leaders {list(answer.leaders)}")
        return 0

    return asyncio.run(create())


async def _configs(client: Any, args: argparse.Namespace) -> int:
    """``topics configs``: print the overrides, or alter them."""
    from partlog.kafka.errors import Errors
    from partlog.kafka.topic_config import OP_APPEND, OP_DELETE, OP_SET, OP_SUBTRACT, ConfigOp

    ops = [ConfigOp(OP_SET, k, v) for k, v in args.set]
    ops += [ConfigOp(OP_DELETE, k, None) for k in args.delete]
    ops += [ConfigOp(OP_APPEND, k, v) for k, v in args.append]
    ops += [ConfigOp(OP_SUBTRACT, k, v) for k, v in args.subtract]
    if len({o.name for o in ops}) != len(ops):
        print("partlog topics configs: a config named twice (Kafka refuses it)", file=sys.stderr)
        return 2
    if ops:
        [(err, why)] = (
            await client.alter_topic_configs({args.name: (False, ops)}, validate_only=args.validate_only)
        ).values()
        if err != Errors.NONE:
            print(f"partlog topics configs: {args.name}: {err.name}{f': {why}' if why else ''}", file=sys.stderr)
            return 1
    topic = client.topic(args.name)
    if topic is None:
        print(f"partlog topics configs: {args.name}: {Errors.UNKNOWN_TOPIC_OR_PARTITION.name}", file=sys.stderr)
        return 1
    for k, v in topic.configs or ():
        print(f"{k}={v}")
    return 0


async def _add_partitions(client: Any, args: argparse.Namespace) -> int:
    """``topics add-partitions``: grow the topic, print the outcome."""
    from partlog.controller.partition_admin import NewPartitions
    from partlog.controller.rules import Refused

    asked = {args.name: NewPartitions(args.partitions, args.replica_assignment)}
    answer = (await client.create_partitions(asked, args.validate_only))[args.name]
    if isinstance(answer, Refused):
        print(f"partlog topics add-partitions: {args.name}: {answer.error.name}: {answer.message}", file=sys.stderr)
        return 1
    done = "would have" if args.validate_only else "has"
    print(f"topic {answer.name} {done} {answer.num_partitions} partitions: leaders {list(answer.leaders)}")
    return 0
