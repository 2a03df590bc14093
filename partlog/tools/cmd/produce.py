"""``partlog produce``: a console producer that talks to a cluster's Kafka
listeners with a real Kafka client (confluent-kafka, librdkafka), not with
partlog's own client, as kafka-console-producer does."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any, TextIO

from partlog.tools.cmd.common import KafkaCliError, kafka_client_id
from partlog.tools.cmd.flags import TIMEOUT_MS_MAX, non_negative_int, positive_int_at_most

if TYPE_CHECKING:
    from partlog.tools.cmd.common import Subparsers

# Kafka's console producer default.
DELIVERY_TIMEOUT_MS_DEFAULT = 30_000


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "produce",
        help="produce lines from stdin to a topic, with a Kafka client",
        description="Reads records from standard input, one per line, and produces them to TOPIC through the "
        "cluster's Kafka listeners with confluent-kafka (librdkafka), as kafka-console-producer does. "
        "Exits 1 if any record is not delivered.",
    )
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,...]", help="Kafka listeners to start from")
    p.add_argument("--az", default=None, help="this client's AZ: brokers route it to produce in that AZ (KIP-1163)")
    p.add_argument("--acks", default="all", choices=["0", "1", "all"], help="acks (default all, idempotent)")
    p.add_argument("--linger-ms", type=non_negative_int, default=5, help="linger.ms (default 5)")
    p.add_argument("--key-separator", default=None, help="split each line into KEY SEP VALUE at the first SEP")
    p.add_argument(
        "--timeout-ms",
        type=positive_int_at_most(TIMEOUT_MS_MAX),
        default=DELIVERY_TIMEOUT_MS_DEFAULT,
        help="delivery timeout (default 30000)",
    )


def run(args: argparse.Namespace, lines: TextIO | None = None) -> int:
    from confluent_kafka import KafkaException, Producer

    source = sys.stdin if lines is None else lines
    try:
        p = Producer(
            {
                "bootstrap.servers": args.bootstrap_server,
                "client.id": kafka_client_id(args.az),
                "enable.idempotence": args.acks == "all",
                "acks": args.acks,
                "linger.ms": args.linger_ms,
                "message.timeout.ms": args.timeout_ms,
            }
        )
    except KafkaException as e:
        raise KafkaCliError(f"--bootstrap-server {args.bootstrap_server}: {e}") from None
    failures: list[str] = []
    sent = 0

    def done(err: Any, msg: Any) -> None:
        if err is not None:
            failures.append(str(err))

    for line in source:
        value = line.rstrip("\n")
        key = None
        if args.key_separator and args.key_separator in value:
            key, value = value.split(args.key_separator, 1)
        while True:
            try:
                p.produce(args.topic, value=value.encode(), key=key.encode() if key is not None else None,
                          on_delivery=done)  # fmt: skip
                break
            except BufferError:
                p.poll(0.1)  # the local queue is full: wait for deliveries
        sent += 1
        p.poll(0)
    left = p.flush(args.timeout_ms / 1000)
    if failures or left:
        first = failures[0] if failures else "delivery timed out"
        raise KafkaCliError(f"topic {args.topic}: {len(failures) + left} of {sent} records not delivered ({first})")
    print(f"produced {sent} records to {args.topic}", file=sys.stderr)
    return 0
