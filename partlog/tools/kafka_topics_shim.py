"""The part of Kafka's ``bin/kafka-topics.sh`` librdkafka's test suite calls
(``test_kafka_topics`` in its tests/test.c), over confluent-kafka's admin
client, so ``scripts/conformance`` runs those tests against partlog without
a Kafka distribution (partlog.tools.conformance puts a ``kafka-topics.sh``
that execs this module under ``$KAFKA_PATH/bin``).

Understood: ``--bootstrap-server HOST:PORT`` with one of ``--create --topic
T [--partitions N] [--replication-factor R] [--config K=V]...``, ``--alter
--topic T --partitions N`` and ``--delete --topic T``.  A create with
configs creates the topic, then sets them with IncrementalAlterConfigs.
Exit 0 on success, 1 with one line on stderr otherwise (as the script)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

# Seconds each admin call may take (kafka-topics.sh waits 30 s by default).
ADMIN_TIMEOUT_S = 30.0


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="kafka-topics.sh", description=__doc__.split("\n\n")[0])
    p.add_argument("--bootstrap-server", required=True)
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--create", action="store_true")
    action.add_argument("--alter", action="store_true")
    action.add_argument("--delete", action="store_true")
    p.add_argument("--topic", required=True)
    p.add_argument("--partitions", type=int, default=-1)
    p.add_argument("--replication-factor", type=int, default=-1)
    p.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    args = p.parse_args(argv)
    if args.alter and args.partitions <= 0:
        p.error("--alter needs --partitions")
    if any("=" not in c for c in args.config):
        p.error("--config takes KEY=VALUE")
    return args


def run(args: argparse.Namespace) -> None:
    from concurrent.futures import Future
    from typing import Any

    from confluent_kafka import admin
    from confluent_kafka.admin import (  # type: ignore[attr-defined]  # re-exported without __all__
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        NewPartitions,
        NewTopic,
        ResourceType,
    )

    client = admin.AdminClient({"bootstrap.servers": args.bootstrap_server})
    futures: dict[str, Future[Any]]
    if args.create:
        new = NewTopic(args.topic, args.partitions, args.replication_factor)
        futures = client.create_topics([new], operation_timeout=ADMIN_TIMEOUT_S)
    elif args.alter:
        futures = client.create_partitions([NewPartitions(args.topic, args.partitions)])
    else:
        futures = client.delete_topics([args.topic], operation_timeout=ADMIN_TIMEOUT_S)
    for f in futures.values():
        f.result(timeout=ADMIN_TIMEOUT_S)
    if args.create and args.config:
        entries = [
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
            for k, v in (c.split("=", 1) for c in args.config)
        ]
        resource = ConfigResource(ResourceType.TOPIC, args.topic, incremental_configs=entries)
        for f in client.incremental_alter_configs([resource]).values():
            f.result(timeout=ADMIN_TIMEOUT_S)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        run(args)
    except Exception as e:  # the admin client's KafkaException and timeouts alike: one line, as the script
        print(f"kafka-topics.sh: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
