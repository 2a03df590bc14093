"""The kafka-topics.sh and kafka-acls.sh stand-ins librdkafka's tests call
(partlog.tools.kafka_topics_shim, partlog.tools.kafka_acls_shim):
their command lines, as the suite writes them."""

from __future__ import annotations

import argparse
import shlex

import pytest

from partlog.tools.kafka_topics_shim import parse_args


def _parse(line: str) -> argparse.Namespace:
    return parse_args(shlex.split(line))


def test_create_takes_partitions_replicas_and_repeated_configs() -> None:
    args = _parse(
        "--bootstrap-server 127.0.0.1:9092 --create --topic t --replication-factor 1 --partitions 4 "
        "--config message.timestamp.type=LogAppendTime --config segment.ms=500"
    )
    assert (args.create, args.topic, args.partitions, args.replication_factor) == (True, "t", 4, 1)
    assert args.config == ["message.timestamp.type=LogAppendTime", "segment.ms=500"]


def test_alter_needs_partitions_and_one_action_is_required() -> None:
    assert _parse("--bootstrap-server b:1 --alter --topic t --partitions 4").partitions == 4
    assert _parse("--bootstrap-server b:1 --delete --topic t").delete
    for bad in ("--alter --topic t", "--topic t", "--create --delete --topic t", "--create --topic t --config x"):
        with pytest.raises(SystemExit):
            _parse(f"--bootstrap-server b:1 {bad}")


def test_kafka_acls_stand_in_reads_the_suites_command_lines() -> None:
    from partlog.tools.kafka_acls_shim import parse_args as acls_args

    add = acls_args(
        shlex.split("--bootstrap-server b:1 --add --deny-principal 'User:*' --operation All --deny-host '*' --topic t")
    )
    assert (add.add, add.deny_principal, add.deny_host, add.operation, add.topic) == (True, "User:*", "*", "All", "t")
    rm = acls_args(
        shlex.split("--bootstrap-server b:1 --remove --force --allow-principal 'User:*' --operation Describe --topic t")
    )
    assert (rm.remove, rm.allow_principal, rm.allow_host) == (True, "User:*", "*")
    with pytest.raises(SystemExit):
        acls_args(shlex.split("--bootstrap-server b:1 --add --operation All --topic t"))  # no principal
