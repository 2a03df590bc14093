"""``partlog consume``: a console consumer that reads a topic through a
cluster's Kafka listeners with a real Kafka client (confluent-kafka,
librdkafka), as kafka-console-consumer does."""

from __future__ import annotations

import argparse
import signal
import sys
import time
from typing import TYPE_CHECKING, Any, TextIO

from partlog.tools.cmd.common import KafkaCliError, kafka_client_id
from partlog.tools.cmd.flags import non_negative_int, positive_int

if TYPE_CHECKING:
    from partlog.tools.cmd.common import Subparsers

CONSUME_POLL_S = 0.2


def add_parser(sub: Subparsers) -> None:
    c = sub.add_parser(
        "consume",
        help="print a topic's records, with a Kafka client",
        description="Reads TOPIC through the cluster's Kafka listeners with confluent-kafka and prints each "
        "record's value on its own line, as kafka-console-consumer does. With --group the consumer joins "
        "that consumer group and commits its offsets; without, it reads every partition.",
    )
    c.add_argument("topic", metavar="TOPIC")
    c.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,...]", help="Kafka listeners to start from")
    c.add_argument("--group", default=None, help="consumer group to join (default: none, all partitions)")
    c.add_argument("--from-beginning", action="store_true", help="start at the earliest offset, not the latest")
    c.add_argument("--max-messages", type=positive_int, default=None, help="stop after this many records")
    c.add_argument(
        "--exit-after-idle-ms",
        type=non_negative_int,
        default=0,
        help="stop after this long without a record (default 0: run until Ctrl-C or SIGTERM)",
    )
    c.add_argument("--az", default=None, help="this client's AZ (KIP-1163 routing)")


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    sink = sys.stdout if out is None else out
    config: dict[str, Any] = {
        "bootstrap.servers": args.bootstrap_server,
        "client.id": kafka_client_id(args.az),
        "group.id": args.group or "partlog-console-consumer",
        "auto.offset.reset": "earliest" if args.from_beginning else "latest",
        "enable.auto.commit": args.group is not None,
    }
    try:
        c = Consumer(config)
    except KafkaException as e:
        raise KafkaCliError(f"--bootstrap-server {args.bootstrap_server}: {e}") from None
    stop = False

    def on_signal(*_: Any) -> None:
        nonlocal stop
        stop = True

    previous = signal.signal(signal.SIGTERM, on_signal)
    try:
        if args.group is not None:
            c.subscribe([args.topic])
        else:
            # No group: every partition, from the start or the end (as the
            # console consumer without --group does).
            md = c.list_topics(args.topic, timeout=10)
            t = md.topics.get(args.topic)
            if t is None or t.error is not None:
                raise KafkaCliError(f"topic {args.topic}: {t.error if t is not None else 'not found'}")
            start = -2 if args.from_beginning else -1  # OFFSET_BEGINNING / OFFSET_END
            c.assign([TopicPartition(args.topic, p, start) for p in t.partitions])
        count = 0
        idle_since = time.monotonic()
        while not stop and (args.max_messages is None or count < args.max_messages):
            m = c.poll(CONSUME_POLL_S)
            if m is None:
                idle_ms = (time.monotonic() - idle_since) * 1000
                if args.exit_after_idle_ms and idle_ms >= args.exit_after_idle_ms:
                    break
                continue
            if m.error():
                print(f"partlog consume: {m.error()}", file=sys.stderr)
                continue
            idle_since = time.monotonic()
            value = m.value() or b""
            sink.write(value.decode(errors="replace") + "\n")
            sink.flush()
            count += 1
        print(f"consumed {count} records from {args.topic}", file=sys.stderr)
        return 0
    except KeyboardInterrupt:
        return 0
    finally:
        signal.signal(signal.SIGTERM, previous)
        c.close()
