"""The part of Kafka's ``bin/kafka-acls.sh`` librdkafka's test suite calls
(``test_kafka_cmd("kafka-acls.sh ...")`` in 0109, 0115 and 0119), over
confluent-kafka's admin client; partlog.tools.conformance puts a
``kafka-acls.sh`` that execs this module under ``$KAFKA_PATH/bin``.

Understood: ``--bootstrap-server HOST:PORT``, ``--add`` or ``--remove
[--force]``, one of ``--allow-principal P`` / ``--deny-principal P`` with
``--allow-host H`` / ``--deny-host H`` (default ``*``), ``--operation OP``
(Kafka's names: All, Read, Write, Describe, ...) and ``--topic T`` (a
literal pattern).  Exit 0 on success, 1 with one line on stderr."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

# Seconds each admin call may take.
ADMIN_TIMEOUT_S = 30.0


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="kafka-acls.sh", description=__doc__.split("\n\n")[0])
    p.add_argument("--bootstrap-server", required=True)
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--add", action="store_true")
    action.add_argument("--remove", action="store_true")
    p.add_argument("--force", action="store_true", help="no prompt (this stand-in never prompts)")
    who = p.add_mutually_exclusive_group(required=True)
    who.add_argument("--allow-principal")
    who.add_argument("--deny-principal")
    p.add_argument("--allow-host", default="*")
    p.add_argument("--deny-host", default="*")
    p.add_argument("--operation", required=True)
    p.add_argument("--topic", required=True)
    return p.parse_args(argv)


def run(args: argparse.Namespace) -> None:
    from confluent_kafka import admin
    from confluent_kafka.admin import (  # type: ignore[attr-defined]  # re-exported without __all__
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    allow = args.allow_principal is not None
    principal = args.allow_principal if allow else args.deny_principal
    host = args.allow_host if allow else args.deny_host
    operation = AclOperation[args.operation.upper()]
    permission = AclPermissionType.ALLOW if allow else AclPermissionType.DENY
    fields = (ResourceType.TOPIC, args.topic, ResourcePatternType.LITERAL, principal, host, operation, permission)
    client = admin.AdminClient({"bootstrap.servers": args.bootstrap_server})
    if args.add:
        created = client.create_acls([AclBinding(*fields)], request_timeout=ADMIN_TIMEOUT_S)
        for f in created.values():
            f.result(timeout=ADMIN_TIMEOUT_S)
    else:
        deleted = client.delete_acls([AclBindingFilter(*fields)], request_timeout=ADMIN_TIMEOUT_S)
        for f in deleted.values():
            f.result(timeout=ADMIN_TIMEOUT_S)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        run(args)
    except Exception as e:  # the admin client's KafkaException, a bad operation name, timeouts: one line
        print(f"kafka-acls.sh: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
