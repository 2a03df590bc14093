"""Kafka's error codes on the group APIs' error paths (issue 29): a group
request sent to a broker that is not the group's coordinator is answered
NOT_COORDINATOR (the client looks the coordinator up again), and an empty
group id INVALID_GROUP_ID where Kafka's ``isValidGroupId`` refuses it (the
membership APIs; OffsetCommit, OffsetFetch and DescribeGroups accept it, as
Kafka does for backward compatibility).  Raw requests built with kio, sent
to real brokers on the loopback."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest

from partlog.kafka.errors import Errors
from tests.kafka_helpers import ClusterThread, kio_answer, kio_request, read_frame

GROUP = "errors-group"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterThread]:
    c = ClusterThread(str(tmp_path_factory.mktemp("kafka")), brokers_per_az=1, partitions=1)
    try:
        yield c
    finally:
        c.close()


def _call(port: int, api_key: int, version: int, body: dict[str, Any]) -> Any:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(kio_request(api_key, version, 9, body))
        frame = read_frame(s)
    assert frame is not None
    return kio_answer(api_key, version, frame)


def _coordinator(cluster: ClusterThread, group: str) -> int:
    port = cluster.kafka_port(min(cluster.cluster.brokers))
    for _ in range(50):
        a = _call(port, 10, 3, {"key": group, "key_type": 0})
        if a.error_code == 0:
            return int(a.node_id)
    raise AssertionError(f"no coordinator for {group}: {a}")


def _join(group: str) -> dict[str, Any]:
    return {
        "group_id": group,
        "session_timeout": 10_000,
        "rebalance_timeout": 10_000,
        "member_id": "",
        "group_instance_id": None,
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b""}],
    }


def _requests(group: str) -> dict[str, tuple[int, int, dict[str, Any]]]:
    return {
        "JoinGroup": (11, 5, _join(group)),
        "SyncGroup": (14, 3, {"group_id": group, "generation_id": 1, "member_id": "m", "group_instance_id": None,
                              "assignments": []}),
        "Heartbeat": (12, 3, {"group_id": group, "generation_id": 1, "member_id": "m", "group_instance_id": None}),
        "LeaveGroup": (13, 3, {"group_id": group, "members": [{"member_id": "m", "group_instance_id": None}]}),
        "OffsetCommit": (8, 7, {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
                                "group_instance_id": None,
                                "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 1,
                                            "committed_leader_epoch": -1, "committed_metadata": None}]}]}),
        "OffsetFetch": (9, 7, {"group_id": group, "topics": None, "require_stable": False}),
        "DescribeGroups": (15, 5, {"groups": [group], "include_authorized_operations": False}),
    }  # fmt: skip


def _error(name: str, answer: Any) -> int:
    if name == "LeaveGroup" and answer.error_code == 0:
        return int(answer.members[0].error_code)
    if name == "OffsetCommit":
        return int(answer.topics[0].partitions[0].error_code)
    if name == "DescribeGroups":
        return int(answer.groups[0].error_code)
    return int(answer.error_code)


@pytest.mark.parametrize("name", list(_requests(GROUP)))
def test_a_group_request_to_a_broker_that_is_not_its_coordinator_is_not_coordinator(
    cluster: ClusterThread, name: str
) -> None:
    coordinator = _coordinator(cluster, GROUP)
    other = next(b for b in sorted(cluster.cluster.brokers) if b != coordinator)
    api_key, version, body = _requests(GROUP)[name]
    answer = _call(cluster.kafka_port(other), api_key, version, body)
    assert Errors(_error(name, answer)) == Errors.NOT_COORDINATOR, answer


@pytest.mark.parametrize("name", list(_requests("")))
def test_an_empty_group_id_is_refused_where_kafka_refuses_it(cluster: ClusterThread, name: str) -> None:
    coordinator = _coordinator(cluster, "")
    api_key, version, body = _requests("")[name]
    answer = _call(cluster.kafka_port(coordinator), api_key, version, body)
    # Kafka's GroupCoordinator.isValidGroupId: "" is valid for the offsets
    # APIs and DescribeGroups (backward compatibility), not for membership.
    valid_empty = name in ("OffsetCommit", "OffsetFetch", "DescribeGroups")
    expected = {Errors.NONE, Errors.UNKNOWN_TOPIC_OR_PARTITION} if valid_empty else {Errors.INVALID_GROUP_ID}
    assert Errors(_error(name, answer)) in expected, answer
