"""ConsumerGroupHeartbeat and ConsumerGroupDescribe handlers without a
broker: Kafka's ACL checks (READ on the group, DESCRIBE on each subscribed
topic; DESCRIBE on the group and its topics), and every answer encodes in
every version served."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace
from typing import Any, cast

import pytest

from partlog.acl import AclBinding, AclOperation, AclPermission, AuthorizerConfig, PatternType, ResourceType
from partlog.acl.source import LocalAcls
from partlog.kafka.errors import Errors
from partlog.kafka_front.apis import SUPPORTED_VERSIONS
from partlog.kafka_front.authz import Authz
from partlog.kafka_front.codec import build, response_class
from partlog.kafka_front.consumer_group import ConsumerGroups, HeartbeatIn, HeartbeatOut
from partlog.kafka_front.group_apis import GroupApis
from partlog.kafka_front.group_coordinator import GroupCoordinator
from partlog.kafka_front.handler import Session
from partlog.kafka_front.port import BrokerPort
from partlog.kafka_front.txn_coordinator import TxnCoordinator

ME = Session("10.0.0.7:5555")
T = uuid.UUID(int=5)
TOPICS = {"t": (T, 4), "secret": (uuid.UUID(int=6), 1)}


class StubGroups:
    """The coordinator's two KIP-848 calls over one in-memory core."""

    def __init__(self) -> None:
        self.core = ConsumerGroups(new_uuid=uuid.uuid4)

    async def consumer_heartbeat(self, req: HeartbeatIn, topics: Any, version: int) -> HeartbeatOut:
        return self.core.heartbeat(req, topics, 0, version=version)

    async def consumer_group(self, group_id: str) -> tuple[Errors, Any]:
        g = self.core.group(group_id)
        return (Errors.NONE, g) if g is not None else (Errors.GROUP_ID_NOT_FOUND, None)


def _apis(acls: list[tuple[ResourceType, str, AclOperation]] | None) -> GroupApis:
    broker = cast(BrokerPort, SimpleNamespace(topic_index=TOPICS))
    apis = GroupApis(broker, cast(GroupCoordinator, StubGroups()), cast(TxnCoordinator, None))
    if acls is not None:
        source = LocalAcls()
        bindings = [AclBinding(rt, name, PatternType.LITERAL, "User:ANONYMOUS", "*", op, AclPermission.ALLOW)
                    for rt, name, op in acls]  # fmt: skip
        asyncio.run(source.create_acls(bindings))
        apis.authz = Authz(AuthorizerConfig(), source)
    return apis


def _heartbeat(apis: GroupApis, version: int, **kw: Any) -> Any:
    fields: dict[str, Any] = {"group_id": "g", "member_id": "m", "member_epoch": 0, "instance_id": None,
                              "rack_id": None, "rebalance_timeout": 30_000, "subscribed_topic_names": ("t",),
                              "subscribed_topic_regex": None, "server_assignor": None}  # fmt: skip
    fields.update({"topic_partitions": (), **kw})
    body = SimpleNamespace(**fields)
    req = SimpleNamespace(api_key=68, api_version=version, client_id="c")
    answer = asyncio.run(apis.consumer_group_heartbeat(req, body, ME))
    return build(response_class(68, version), answer)


def _describe(apis: GroupApis, version: int, *groups: str) -> Any:
    body = SimpleNamespace(group_ids=groups, include_authorized_operations=False)
    req = SimpleNamespace(api_key=69, api_version=version)
    answer = asyncio.run(apis.consumer_group_describe(req, body, ME))
    return build(response_class(69, version), answer)


@pytest.mark.parametrize("version", range(SUPPORTED_VERSIONS[68][0], SUPPORTED_VERSIONS[68][1] + 1))
def test_heartbeat_acls_and_answers(version: int) -> None:
    g_read = (ResourceType.GROUP, "g", AclOperation.READ)
    t_describe = (ResourceType.TOPIC, "t", AclOperation.DESCRIBE)
    assert _heartbeat(_apis([t_describe]), version).error_code == Errors.GROUP_AUTHORIZATION_FAILED
    assert _heartbeat(_apis([g_read]), version).error_code == Errors.TOPIC_AUTHORIZATION_FAILED
    both = _apis([g_read, t_describe])
    names = ("t", "secret")
    assert _heartbeat(both, version, subscribed_topic_names=names).error_code == Errors.TOPIC_AUTHORIZATION_FAILED
    ok = _heartbeat(both, version)
    assert (ok.error_code, ok.member_id, ok.member_epoch) == (0, "m", 1)
    [tp] = ok.assignment.topic_partitions
    assert (tp.topic_id, list(tp.partitions)) == (T, [0, 1, 2, 3])
    again = _heartbeat(both, version, member_epoch=1, rebalance_timeout=-1, subscribed_topic_names=None,
                       topic_partitions=None)  # fmt: skip
    assert (again.error_code, again.member_epoch, again.assignment) == (0, 1, None)
    bad = _heartbeat(both, version, member_epoch=-5)
    assert (bad.error_code, bad.error_message) == (Errors.INVALID_REQUEST, "MemberEpoch is invalid.")


@pytest.mark.parametrize("version", range(SUPPORTED_VERSIONS[69][0], SUPPORTED_VERSIONS[69][1] + 1))
def test_describe_acls_and_answers(version: int) -> None:
    apis = _apis(None)
    _heartbeat(apis, 1)
    g, none = _describe(apis, version, "g", "h").groups
    assert (g.error_code, g.group_state, g.assignor_name, len(g.members)) == (0, "Stable", "uniform", 1)
    assert g.members[0].assignment.topic_partitions[0].topic_name == "t"
    assert none.error_code == Errors.GROUP_ID_NOT_FOUND
    denied = _apis([(ResourceType.TOPIC, "t", AclOperation.DESCRIBE)])
    cast(StubGroups, denied.groups).core = cast(StubGroups, apis.groups).core
    [g] = _describe(denied, version, "g").groups
    assert g.error_code == Errors.GROUP_AUTHORIZATION_FAILED
    no_topic = _apis([(ResourceType.GROUP, "g", AclOperation.READ)])
    cast(StubGroups, no_topic.groups).core = cast(StubGroups, apis.groups).core
    [g] = _describe(no_topic, version, "g").groups
    assert g.error_code == Errors.TOPIC_AUTHORIZATION_FAILED
