"""The listener's authorization pieces without a broker: the checks of
:class:`Authz`, the refusals answered as a whole (every version encodes),
and the ACL APIs over an in-memory source."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, cast

import pytest

from partlog.acl import (
    CLUSTER_NAME,
    AclBinding,
    AclOperation,
    AclPermission,
    AuthorizerConfig,
    PatternType,
    ResourceType,
)
from partlog.acl.source import LocalAcls
from partlog.kafka.errors import Errors
from partlog.kafka_front.acl_apis import AclApis
from partlog.kafka_front.apis import SUPPORTED_VERSIONS
from partlog.kafka_front.authz import Authz, denied
from partlog.kafka_front.codec import build, response_class
from partlog.kafka_front.handler import Session
from partlog.kafka_front.port import BrokerPort

ME = Session("10.0.0.7:5555")  # User:ANONYMOUS


def _acl(rt: ResourceType, name: str, op: AclOperation, perm: AclPermission = AclPermission.ALLOW) -> AclBinding:
    return AclBinding(rt, name, PatternType.LITERAL, "User:ANONYMOUS", "*", op, perm)


def test_off_allows_everything() -> None:
    authz = Authz()
    assert not authz.enabled
    assert authz.topic(ME, AclOperation.WRITE, "t") and authz.cluster(ME, AclOperation.ALTER)
    assert authz.idempotent_write(ME)


def test_on_follows_the_source_without_a_restart() -> None:
    source = LocalAcls()
    authz = Authz(AuthorizerConfig(), source)
    assert not authz.topic(ME, AclOperation.WRITE, "t")
    assert not authz.idempotent_write(ME)
    asyncio.run(source.create_acls([_acl(ResourceType.TOPIC, "t", AclOperation.WRITE)]))
    assert authz.topic(ME, AclOperation.WRITE, "t") and authz.topic(ME, AclOperation.DESCRIBE, "t")
    assert not authz.topic(ME, AclOperation.READ, "t")
    assert authz.idempotent_write(ME)  # KIP-679: WRITE on some topic
    assert not authz.create_topic(ME, "u")
    assert authz.authorizer.decisions.denied >= 3


@pytest.mark.parametrize("api_key", [11, 12, 13, 14, 22, 25, 26])
def test_whole_refusals_encode_in_every_version(api_key: int) -> None:
    lo, hi = SUPPORTED_VERSIONS[api_key]
    for version in range(lo, hi + 1):
        req = SimpleNamespace(api_key=api_key, api_version=version)
        answer = build(response_class(api_key, version), denied(req, Errors.GROUP_AUTHORIZATION_FAILED))
        assert int(answer.error_code) == Errors.GROUP_AUTHORIZATION_FAILED


def _apis(config: AuthorizerConfig | None, source: LocalAcls) -> AclApis:
    apis = AclApis(cast(BrokerPort, None))
    apis.authz = Authz(config, source)
    return apis


def _creation(b: AclBinding) -> Any:
    return SimpleNamespace(resource_type=int(b.resource_type), resource_name=b.resource_name,
                           resource_pattern_type=int(b.pattern_type), principal=b.principal, host=b.host,
                           operation=int(b.operation), permission_type=int(b.permission))  # fmt: skip


def _filter(**kw: Any) -> Any:
    f = dict(resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1, principal_filter=None,
             host_filter=None, operation=1, permission_type=1)  # fmt: skip
    f.update(kw)
    return SimpleNamespace(**f)


def test_acl_apis() -> None:
    async def main() -> None:
        read = _acl(ResourceType.TOPIC, "t", AclOperation.READ)
        body = SimpleNamespace(creations=[_creation(read)])
        off = _apis(None, LocalAcls())
        assert (await off.create_acls(None, body, ME))["results"][0]["error_code"] == Errors.SECURITY_DISABLED
        source = LocalAcls()
        on = _apis(AuthorizerConfig(), source)
        refused = await on.create_acls(None, body, ME)
        assert refused["results"][0]["error_code"] == Errors.CLUSTER_AUTHORIZATION_FAILED
        await source.create_acls([_acl(ResourceType.CLUSTER, CLUSTER_NAME, AclOperation.ALTER)])
        bad = _creation(read)
        bad.principal = "nobody"
        made = await on.create_acls(None, SimpleNamespace(creations=[_creation(read), bad]), ME)
        assert [r["error_code"] for r in made["results"]] == [0, Errors.INVALID_REQUEST]
        # ALTER on the cluster implies DESCRIBE: DescribeAcls is allowed.
        found = await on.describe_acls(None, _filter(resource_type_filter=int(ResourceType.TOPIC)), ME)
        assert found["error_code"] == 0
        assert [(r["resource_name"], len(r["acls"])) for r in found["resources"]] == [("t", 1)]
        unknown = await on.describe_acls(None, _filter(operation=0), ME)
        assert unknown["error_code"] == Errors.INVALID_REQUEST
        gone = await on.delete_acls(None, SimpleNamespace(filters=[_filter(resource_name_filter="t",
                                                                            pattern_type_filter=3)]), ME)  # fmt: skip
        [result] = gone["filter_results"]
        assert result["error_code"] == 0 and [m["resource_name"] for m in result["matching_acls"]] == ["t"]
        assert read not in source.acls.bindings

    asyncio.run(main())


def test_the_scram_apis_need_describe_and_alter_on_the_cluster() -> None:
    """KIP-554's APIs, with an authorizer on: DescribeUserScramCredentials
    needs DESCRIBE on the cluster (a top-level CLUSTER_AUTHORIZATION_FAILED
    otherwise), AlterUserScramCredentials ALTER (each user refused), as
    Kafka; the credential store is never reached; a super user passes."""
    from partlog.kafka_front.scram_apis import NoCredentialAdmin, ScramApis

    authz = Authz(AuthorizerConfig(super_users=frozenset({"User:admin"})), LocalAcls())
    apis = ScramApis(NoCredentialAdmin(), authz)
    described = asyncio.run(apis.describe(None, SimpleNamespace(users=None), ME))
    assert described["error_code"] == Errors.CLUSTER_AUTHORIZATION_FAILED
    upsert = SimpleNamespace(name="bob", mechanism=2, iterations=4096, salt=b"s", salted_password=b"p")
    altered = asyncio.run(apis.alter(None, SimpleNamespace(deletions=[], upsertions=[upsert]), ME))
    assert [r["error_code"] for r in altered["results"]] == [Errors.CLUSTER_AUTHORIZATION_FAILED]
    admin = Session("10.0.0.7:5555", principal="User:admin")
    # Allowed: the store answers (this one cannot change credentials).
    allowed = asyncio.run(apis.describe(None, SimpleNamespace(users=None), admin))
    assert allowed["error_code"] == Errors.UNSUPPORTED_VERSION
