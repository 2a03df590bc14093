"""The authorizer against a reference written from Kafka's rules, plainly:
hypothesis draws ACL sets, principals, hosts, operations and resources, and
every decision (and every filter selection) must agree."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from partlog.acl import (
    ACLS_MAX,
    CLUSTER_NAME,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermission,
    AclSet,
    Authorizer,
    AuthorizerConfig,
    PatternType,
    ResourceType,
    invalid_binding,
)

TYPES = [ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID]
NAMES = ["a", "ab", "abc", "b", "ba", "*", CLUSTER_NAME]
PRINCIPALS = ["User:alice", "User:bob", "User:*", "Group:alice"]
HOSTS = ["127.0.0.1", "10.0.0.1", "*"]
OPS = [o for o in AclOperation if o not in (AclOperation.ANY, AclOperation.UNKNOWN)]
ASKED_OPS = [o for o in OPS if o != AclOperation.ALL]

bindings = st.builds(
    AclBinding,
    st.sampled_from(TYPES),
    st.sampled_from(NAMES),
    st.sampled_from([PatternType.LITERAL, PatternType.PREFIXED]),
    st.sampled_from(PRINCIPALS),
    st.sampled_from(HOSTS),
    st.sampled_from(OPS),
    st.sampled_from([AclPermission.ALLOW, AclPermission.DENY]),
)


def reference(
    acls: list[AclBinding],
    config: AuthorizerConfig,
    principal: str,
    host: str,
    op: AclOperation,
    rt: ResourceType,
    name: str,
) -> bool:
    """Kafka's StandardAuthorizer, one rule per line, no index."""
    if principal in config.super_users:
        return True

    def covers(b: AclBinding) -> bool:
        if b.resource_type != rt:
            return False
        if b.pattern_type == PatternType.LITERAL:
            return b.resource_name == name or b.resource_name == "*"
        return name.startswith(b.resource_name)

    def op_matches(b: AclBinding) -> bool:
        if b.operation in (AclOperation.ALL, op):
            return True
        if b.permission == AclPermission.DENY:
            return False
        implied = {
            AclOperation.DESCRIBE: {AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE, AclOperation.ALTER},
            AclOperation.DESCRIBE_CONFIGS: {AclOperation.ALTER_CONFIGS},
        }
        return b.operation in implied.get(op, set())

    applying = [b for b in acls if covers(b)]
    matching = [b for b in applying if b.principal in (principal, "User:*") and b.host in (host, "*") and op_matches(b)]
    if any(b.permission == AclPermission.DENY for b in matching):
        return False
    if any(b.permission == AclPermission.ALLOW for b in matching):
        return True
    return not applying and config.allow_everyone_if_no_acl_found


@settings(max_examples=300, deadline=None)
@given(
    acls=st.lists(bindings, max_size=12),
    supers=st.frozensets(st.sampled_from(PRINCIPALS), max_size=1),
    everyone=st.booleans(),
    asks=st.lists(
        st.tuples(
            st.sampled_from([*PRINCIPALS[:2], "User:carol"]),
            st.sampled_from(HOSTS[:2]),
            st.sampled_from(ASKED_OPS),
            st.sampled_from(TYPES),
            st.sampled_from([*NAMES[:5], "abcd", CLUSTER_NAME]),
        ),
        min_size=1,
        max_size=20,
    ),
)
def test_decisions_match_the_reference(
    acls: list[AclBinding],
    supers: frozenset[str],
    everyone: bool,
    asks: list[tuple[str, str, AclOperation, ResourceType, str]],
) -> None:
    config = AuthorizerConfig(super_users=supers, allow_everyone_if_no_acl_found=everyone)
    auth = Authorizer(config, AclSet(acls))
    for principal, host, op, rt, name in asks:
        want = reference(acls, config, principal, host, op, rt, name)
        assert auth.authorize(principal, host, op, rt, name) == want, (principal, host, op, rt, name)
    assert auth.decisions.allowed + auth.decisions.denied == len(asks)


filters = st.builds(
    AclBindingFilter,
    st.sampled_from([ResourceType.ANY, *TYPES]),
    st.one_of(st.none(), st.sampled_from(NAMES)),
    st.sampled_from([PatternType.ANY, PatternType.MATCH, PatternType.LITERAL, PatternType.PREFIXED]),
    st.one_of(st.none(), st.sampled_from(PRINCIPALS)),
    st.one_of(st.none(), st.sampled_from(HOSTS)),
    st.sampled_from([AclOperation.ANY, *OPS]),
    st.sampled_from([AclPermission.ANY, AclPermission.ALLOW, AclPermission.DENY]),
)


def reference_filter(f: AclBindingFilter, b: AclBinding) -> bool:
    """Kafka's ResourcePatternFilter and AccessControlEntryFilter."""
    ok_type = f.resource_type in (ResourceType.ANY, b.resource_type)
    if f.pattern_type == PatternType.MATCH and f.resource_name is not None:
        n = f.resource_name
        ok_name = (b.pattern_type == PatternType.LITERAL and b.resource_name in (n, "*")) or (
            b.pattern_type == PatternType.PREFIXED and n.startswith(b.resource_name)
        )
    elif f.pattern_type in (PatternType.ANY, PatternType.MATCH):
        ok_name = f.resource_name in (None, b.resource_name)
    else:
        ok_name = f.pattern_type == b.pattern_type and f.resource_name in (None, b.resource_name)
    return (
        ok_type
        and ok_name
        and f.principal in (None, b.principal)
        and f.host in (None, b.host)
        and f.operation in (AclOperation.ANY, b.operation)
        and f.permission in (AclPermission.ANY, b.permission)
    )


@settings(max_examples=300, deadline=None)
@given(acls=st.lists(bindings, max_size=12), f=filters)
def test_filters_match_the_reference(acls: list[AclBinding], f: AclBindingFilter) -> None:
    want = {b for b in acls if reference_filter(f, b)}
    assert set(AclSet(acls).select(f)) == want


def test_changes_bump_the_version() -> None:
    a = AclBinding(ResourceType.TOPIC, "t", PatternType.LITERAL, "User:a", "*", AclOperation.READ, AclPermission.ALLOW)
    s = AclSet().with_changes([a], [])
    assert s.version == 1 and a in s.bindings
    s2 = s.with_changes([], [a])
    assert s2.version == 2 and not s2.bindings
    assert ACLS_MAX >= 1000


def test_authorize_any_is_kip_679() -> None:
    """WRITE on any topic (not denied as a whole) lets a producer be idempotent."""
    w = AclBinding(ResourceType.TOPIC, "t", PatternType.LITERAL, "User:a", "*", AclOperation.WRITE, AclPermission.ALLOW)
    deny_all = AclBinding(
        ResourceType.TOPIC, "*", PatternType.LITERAL, "User:a", "*", AclOperation.WRITE, AclPermission.DENY
    )
    deny_prefix = AclBinding(
        ResourceType.TOPIC, "x", PatternType.PREFIXED, "User:a", "*", AclOperation.WRITE, AclPermission.DENY
    )
    assert Authorizer(acls=AclSet([w])).authorize_any("User:a", "h", AclOperation.WRITE, ResourceType.TOPIC)
    assert not Authorizer(acls=AclSet([w])).authorize_any("User:b", "h", AclOperation.WRITE, ResourceType.TOPIC)
    assert not Authorizer(acls=AclSet([w, deny_all])).authorize_any(
        "User:a", "h", AclOperation.WRITE, ResourceType.TOPIC
    )
    assert Authorizer(acls=AclSet([w, deny_prefix])).authorize_any(
        "User:a", "h", AclOperation.WRITE, ResourceType.TOPIC
    )
    everyone = AuthorizerConfig(allow_everyone_if_no_acl_found=True)
    assert Authorizer(everyone).authorize_any("User:b", "h", AclOperation.WRITE, ResourceType.TOPIC)


def test_create_validation() -> None:
    def b(
        rt: ResourceType = ResourceType.TOPIC,
        name: str = "t",
        pt: PatternType = PatternType.LITERAL,
        principal: str = "User:a",
        op: AclOperation = AclOperation.READ,
        perm: AclPermission = AclPermission.ALLOW,
    ) -> AclBinding:
        return AclBinding(rt, name, pt, principal, "*", op, perm)

    assert invalid_binding(b()) is None
    assert invalid_binding(b(rt=ResourceType.ANY))
    assert invalid_binding(b(pt=PatternType.MATCH))
    assert invalid_binding(b(op=AclOperation.ANY))
    assert invalid_binding(b(perm=AclPermission.ANY))
    assert invalid_binding(b(principal="alice"))
    assert invalid_binding(b(rt=ResourceType.CLUSTER, name="other"))
    assert invalid_binding(b(rt=ResourceType.CLUSTER, name=CLUSTER_NAME)) is None
    assert invalid_binding(b(pt=PatternType.PREFIXED, name="*"))
