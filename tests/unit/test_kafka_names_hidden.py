"""A client learns no topic name it may not DESCRIBE: DescribeTransactions
lists only the topics of a transaction the caller may describe (Kafka's
KafkaApis.handleDescribeTransactionsRequest), on a fake broker."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

from partlog.acl import AclBinding, AclBindingFilter, AclOperation, AclPermission, AuthorizerConfig, PatternType
from partlog.acl import ResourceType as RT
from partlog.acl.source import LocalAcls
from partlog.kafka_front.apis import FrontConfig, KafkaApis
from partlog.kafka_front.codec import Request, build, response_class
from partlog.kafka_front.handler import Session
from tests.fake_broker import FakeBroker

ME = Session("127.0.0.1:1")  # User:ANONYMOUS


def _allow(rt: RT, name: str, op: AclOperation) -> AclBinding:
    return AclBinding(rt, name, PatternType.LITERAL, "User:ANONYMOUS", "*", op, AclPermission.ALLOW)


async def _call(apis: KafkaApis, api_key: int, version: int, **body: Any) -> Any:
    req = Request(api_key, version, 1, "test", None)
    answer = await apis.handlers[api_key](req, SimpleNamespace(**body), ME)
    assert isinstance(answer, Mapping)
    return build(response_class(api_key, version), answer)


def test_describe_transactions_leaves_out_the_topics_the_caller_may_not_describe() -> None:
    async def main() -> None:
        broker = FakeBroker()
        broker.metadata.add("secret", 1)
        source = LocalAcls([_allow(RT.TRANSACTIONAL_ID, "t", AclOperation.ALL),
                            _allow(RT.TOPIC, "secret", AclOperation.WRITE)])  # fmt: skip
        apis = KafkaApis(broker.port(), FrontConfig(authorizer=AuthorizerConfig()), acl_source=source)
        apis.groups.start()
        try:
            found = await _call(apis, 10, 4, key_type=1, coordinator_keys=("t",))
            assert [int(c.error_code) for c in found.coordinators] == [0]
            r = await _call(apis, 22, 4, transactional_id="t", transaction_timeout=10_000, producer_id=-1,
                            producer_epoch=-1)  # fmt: skip
            assert int(r.error_code) == 0
            topics = (SimpleNamespace(name="secret", partitions=(0,)),)
            added = await _call(apis, 24, 3, v3_and_below_transactional_id="t",
                                v3_and_below_producer_id=r.producer_id, v3_and_below_producer_epoch=r.producer_epoch,
                                v3_and_below_topics=topics)  # fmt: skip
            assert int(added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code) == 0

            async def described() -> list[str]:
                d = await _call(apis, 65, 0, transactional_ids=("t",))
                assert int(d.transaction_states[0].error_code) == 0
                return [t.topic for t in d.transaction_states[0].topics]

            assert await described() == ["secret"]  # WRITE implies DESCRIBE
            every_topic_acl = AclBindingFilter(RT.TOPIC, None, PatternType.ANY, None, None, AclOperation.ANY,
                                               AclPermission.ANY)  # fmt: skip
            await source.delete_acls([every_topic_acl])
            assert await described() == []
        finally:
            await apis.groups.close()
            await apis.txns.close()

    asyncio.run(main())
