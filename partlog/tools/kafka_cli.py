"""``partlog produce`` and ``partlog consume``: console clients that talk
to a cluster's Kafka listeners with a real Kafka client (confluent-kafka,
librdkafka), not with partlog's own client, as kafka-console-producer and
kafka-console-consumer do."""

from __future__ import annotations

import argparse
import signal
import sys
import time
from typing import Any, TextIO

# Kafka's console producer and consumer defaults.
DELIVERY_TIMEOUT_MS_DEFAULT = 30_000
CONSUME_POLL_S = 0.2


class KafkaCliError(Exception):
    """A produce or consume that failed: one line, exit status 1."""

    exit_status = 1


def _client_id(az: str | None) -> str:
    # KIP-1163: a client names its AZ in its client id, and is routed to
    # brokers in that AZ.
    return f"partlog-cli,diskless_az={az}" if az else "partlog-cli"


def produce(args: argparse.Namespace, lines: TextIO | None = None) -> int:
    from confluent_kafka import KafkaException, Producer

    source = sys.stdin if lines is None else lines
    try:
        p = Producer(
            {
                "bootstrap.servers": args.bootstrap_server,
                "client.id": _client_id(args.az),
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


def consume(args: argparse.Namespace, out: TextIO | None = None) -> int:
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    sink = sys.stdout if out is None else out
    config: dict[str, Any] = {
        "bootstrap.servers": args.bootstrap_server,
        "client.id": _client_id(args.az),
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


def add_parsers(sub: Any) -> None:
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
    p.add_argument("--linger-ms", type=int, default=5, help="linger.ms (default 5)")
    p.add_argument("--key-separator", default=None, help="split each line into KEY SEP VALUE at the first SEP")
    p.add_argument(
        "--timeout-ms", type=int, default=DELIVERY_TIMEOUT_MS_DEFAULT, help="delivery timeout (default 30000)"
    )
    p.set_defaults(func=produce)

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
    c.add_argument("--max-messages", type=int, default=None, help="stop after this many records")
    c.add_argument(
        "--exit-after-idle-ms",
        type=int,
        default=0,
        help="stop after this long without a record (default 0: run until Ctrl-C or SIGTERM)",
    )
    c.add_argument("--az", default=None, help="this client's AZ (KIP-1163 routing)")
    c.set_defaults(func=consume)


__all__ = ["KafkaCliError", "add_parsers", "consume", "produce"]
