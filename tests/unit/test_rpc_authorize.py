"""Authorization on the RPC (issue 29), without sockets: the server's
dispatch asks its ``authorize`` hook before a handler runs
(partlog.rpc.server, partlog.rpc.peer), the broker's hook asks
CLUSTER_ACTION on the cluster (partlog.broker.rpc_authz), and a peer's
principal is the one the Kafka listeners give the same certificate
(partlog.kafka.principal_rules)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any
from unittest.mock import MagicMock

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter

from partlog.acl import CLUSTER_NAME, AclBinding, AclOperation, AclPermission, AuthorizerConfig, PatternType
from partlog.acl import ResourceType as RT
from partlog.acl.source import LocalAcls
from partlog.broker.rpc_authz import METHOD_CALLERS, REFUSAL_LOG_INTERVAL_MS, RpcClusterAuthz
from partlog.broker.rpc_handlers import RpcHandlers
from partlog.kafka.principal_rules import ANONYMOUS, NoMatchingRule, PrincipalMapper
from partlog.kafka_front.listeners import SecurityProtocol
from partlog.kafka_front.server import _Connection
from partlog.rpc.frame import HELLO_METHOD, RPC_VERSION, Frame, FrameDecoder, Kind, RpcErrorCode, hello_body
from partlog.rpc.methods import BROKER_SCHEMAS
from partlog.rpc.peer import RpcPeer, peer_principal
from partlog.rpc.schema import Map, Str
from partlog.rpc.server import RpcServer, _ServerConnection
from partlog.runtime import ManualClock

ALICE = "User:alice"

# ------------------------------------------------------ the server's dispatch


class _Writer:
    """What a connection writes, decoded; the peer at 10.0.0.7, over
    ``ssl_object`` (None: no TLS)."""

    def __init__(self, ssl_object: Any = None) -> None:
        self.decoder = FrameDecoder()
        self.frames: list[Frame] = []
        self.ssl_object = ssl_object

    def get_extra_info(self, name: str) -> Any:
        return {"peername": ("10.0.0.7", 4242), "ssl_object": self.ssl_object}.get(name)

    def is_closing(self) -> bool:
        return False

    def write(self, data: bytes) -> None:
        self.frames.extend(self.decoder.feed(data))

    async def drain(self) -> None:
        return None


def _serve(
    requests: list[tuple[str, Any]], authorize: Callable[[RpcPeer, str], bool] | None
) -> tuple[list[Frame], list[tuple[str, Any]]]:
    """Dispatch ``requests`` (ids 1, 2, ...) on one authenticated connection;
    the answers written and the handler calls made."""
    ran: list[tuple[str, Any]] = []

    def handler(method: str) -> Callable[[Any], Any]:
        async def handle(body: Any) -> Any:
            ran.append((method, body))
            return {"ok": method}

        return handle

    async def main() -> list[Frame]:
        server = RpcServer(
            {m: handler(m) for m in ("commit", "keys_referenced", "metadata")},
            schemas={"keys_referenced": Map(required={"keys": Str(10)})},
            authorize=authorize,
        )
        writer = _Writer()
        conn = _ServerConnection(server, MagicMock(), writer)  # type: ignore[arg-type]
        conn.authenticated = True
        if authorize is not None:
            conn.who = RpcPeer(conn._principal(), conn.ip)
        for i, (method, body) in enumerate(requests, 1):
            await conn.in_flight.acquire()
            assert conn.dispatch(Frame(conn.version, Kind.REQUEST, i, method, body), 0)
            await asyncio.gather(*conn.tasks)
        return writer.frames

    return asyncio.run(main()), ran


def test_a_refused_request_never_reaches_its_handler_and_the_connection_stays() -> None:
    asked: list[tuple[RpcPeer, str]] = []

    def authorize(peer: RpcPeer, method: str) -> bool:
        asked.append((peer, method))
        return method == "metadata"

    frames, ran = _serve([("commit", {}), ("metadata", {}), ("commit", {})], authorize)
    assert ran == [("metadata", {})]
    assert [(f.request_id, f.kind) for f in frames] == [(1, Kind.ERROR), (2, Kind.RESPONSE), (3, Kind.ERROR)]
    assert frames[0].body[0] == RpcErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert f"{ANONYMOUS} may not call commit" in frames[0].body[1]
    # Without TLS the peer is User:ANONYMOUS from its address.
    assert asked == [(RpcPeer(ANONYMOUS, "10.0.0.7"), m) for m in ("commit", "metadata", "commit")]


def test_a_body_is_checked_before_the_hook_is_asked_as_kafka_parses_first() -> None:
    asked: list[str] = []

    def authorize(peer: RpcPeer, method: str) -> bool:
        asked.append(method)
        return False

    frames, ran = _serve([("keys_referenced", {"keys": 7}), ("nope", {})], authorize)
    assert [f.body[0] for f in frames] == [RpcErrorCode.BAD_REQUEST, RpcErrorCode.UNKNOWN_METHOD]
    assert asked == [] and ran == []


def test_without_a_hook_nothing_is_asked() -> None:
    frames, ran = _serve([("commit", {}), ("metadata", {})], None)
    assert [f.kind for f in frames] == [Kind.RESPONSE, Kind.RESPONSE]
    assert ran == [("commit", {}), ("metadata", {})]


@given(st.lists(st.tuples(st.sampled_from(["commit", "keys_referenced", "metadata"]), st.booleans()), max_size=12))
def test_a_refused_method_never_runs(calls: list[tuple[str, bool]]) -> None:
    verdicts = iter(allowed for _, allowed in calls)
    bodies = [(m, {"keys": "k"} if m == "keys_referenced" else {"i": i}) for i, (m, _) in enumerate(calls)]
    frames, ran = _serve(bodies, lambda peer, method: next(verdicts))
    assert ran == [b for b, (_, allowed) in zip(bodies, calls, strict=True) if allowed]
    for f, (_, allowed) in zip(frames, calls, strict=True):
        assert f.kind == (Kind.RESPONSE if allowed else Kind.ERROR)
        assert allowed or f.body[0] == RpcErrorCode.CLUSTER_AUTHORIZATION_FAILED


@pytest.mark.parametrize(
    ("rules", "principal"),
    [("RULE:^CN=([a-z]+),O=.*$/$1/", "User:intruder"), ("DEFAULT", "User:CN=intruder,O=evil"), ("RULE:^x$/y/", None)],
)
def test_the_hello_names_a_tls_peer_or_fails_its_authentication(rules: str, principal: str | None) -> None:
    """With TLS the peer is its mapped certificate subject; a subject no
    rule maps fails the hello AUTH_FAILED (the connection closes), as Kafka
    fails an SSL client's authentication."""
    cert = {"subject": ((("organizationName", "evil"),), (("commonName", "intruder"),))}

    async def main() -> tuple[bool, _ServerConnection, _Writer]:
        server = RpcServer({}, authorize=lambda peer, method: True, principal_mapper=PrincipalMapper.parse(rules))
        writer = _Writer(_Ssl(cert))
        conn = _ServerConnection(server, MagicMock(), writer)  # type: ignore[arg-type]
        hello = Frame(RPC_VERSION, Kind.REQUEST, 0, HELLO_METHOD, hello_body(None, conn.nonce))
        return conn.hello(hello), conn, writer

    ok, conn, writer = asyncio.run(main())
    if principal is None:
        assert not ok and conn.who is None
        assert writer.frames[-1].kind == Kind.ERROR and writer.frames[-1].body[0] == RpcErrorCode.AUTH_FAILED
    else:
        assert ok and conn.who == RpcPeer(principal, "10.0.0.7")


# ------------------------------------------------------- the broker's hook


def _authz(config: AuthorizerConfig, *bindings: AclBinding) -> tuple[RpcClusterAuthz, Counter, ManualClock]:
    refusals = Counter("refused", "test", ["method"], registry=CollectorRegistry())
    clock = ManualClock()
    return RpcClusterAuthz(config, LocalAcls(bindings), refusals, clock), refusals, clock


def _cluster_acl(principal: str, op: AclOperation, permission: AclPermission = AclPermission.ALLOW) -> AclBinding:
    return AclBinding(RT.CLUSTER, CLUSTER_NAME, PatternType.LITERAL, principal, "*", op, permission)


def test_every_broker_rpc_method_is_placed() -> None:
    handlers = RpcHandlers.table(MagicMock())
    assert set(METHOD_CALLERS) == set(handlers) == set(BROKER_SCHEMAS)


def test_the_broker_hook_refuses_without_cluster_action_and_counts_by_method() -> None:
    authz, refusals, _ = _authz(AuthorizerConfig(), _cluster_acl(ALICE, AclOperation.ALTER))
    for method in ("commit", "commit", "keys_referenced"):
        assert not authz(RpcPeer(ALICE, "127.0.0.1"), method)
    assert refusals.labels("commit")._value.get() == 2
    assert refusals.labels("keys_referenced")._value.get() == 1
    # A method nobody placed is refused to everyone (fail closed).
    assert not _authz(AuthorizerConfig(super_users=frozenset({ALICE})))[0](RpcPeer(ALICE, "h"), "new_method")


def test_super_users_and_a_cluster_action_acl_pass() -> None:
    deny = _cluster_acl(ALICE, AclOperation.CLUSTER_ACTION, AclPermission.DENY)
    supers, refusals, _ = _authz(AuthorizerConfig(super_users=frozenset({ALICE})), deny)
    assert all(supers(RpcPeer(ALICE, "h"), m) for m in METHOD_CALLERS)  # a super user passes a DENY, as in Kafka
    granted, _, _ = _authz(AuthorizerConfig(), _cluster_acl("User:broker", AclOperation.CLUSTER_ACTION))
    assert all(granted(RpcPeer("User:broker", "h"), m) for m in METHOD_CALLERS)
    assert not granted(RpcPeer(ANONYMOUS, "h"), "commit")
    # ALL grants it too; allow.everyone.if.no.acl.found with no ACL at all.
    assert _authz(AuthorizerConfig(), _cluster_acl(ANONYMOUS, AclOperation.ALL))[0](RpcPeer(ANONYMOUS, "h"), "fetch")
    everyone = AuthorizerConfig(allow_everyone_if_no_acl_found=True)
    assert _authz(everyone)[0](RpcPeer(ANONYMOUS, "h"), "commit")
    assert refusals.labels("commit")._value.get() == 0


def test_the_hook_follows_the_acl_source_without_a_restart() -> None:
    authz, _, _ = _authz(AuthorizerConfig())
    peer = RpcPeer("User:broker", "h")
    assert not authz(peer, "replica_fetch")
    assert isinstance(authz.source, LocalAcls)
    asyncio.run(authz.source.create_acls([_cluster_acl(peer.principal, AclOperation.CLUSTER_ACTION)]))
    assert authz(peer, "replica_fetch")


def test_refusals_are_logged_at_most_once_per_interval(caplog: pytest.LogCaptureFixture) -> None:
    authz, _, clock = _authz(AuthorizerConfig())
    with caplog.at_level(logging.WARNING, logger="partlog.broker.rpc_authz"):
        for _ in range(5):
            authz(RpcPeer(ANONYMOUS, "h"), "commit")
        clock.advance(REFUSAL_LOG_INTERVAL_MS / 1000)
        authz(RpcPeer(ANONYMOUS, "h"), "verify_txn")
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert "refused commit" in lines[0] and "(0 more" in lines[0]
    assert "refused verify_txn" in lines[1] and "(4 more" in lines[1]


# ------------------------------------------ the principal, as Kafka's listener


_ATTRS = st.sampled_from(
    ["commonName", "organizationName", "organizationalUnitName", "countryName", "localityName", "domainComponent"]
)
_VALUES = st.text(alphabet='abcXYZ019 ,+"\\<>;#=.-_', min_size=1, max_size=12)
_SUBJECTS = st.lists(st.lists(st.tuples(_ATTRS, _VALUES), min_size=1, max_size=2).map(tuple), min_size=1, max_size=4)
_RULES = st.lists(
    st.sampled_from(
        [
            "DEFAULT",
            "RULE:^CN=(.*?),OU=(.*?)(,.*)?$/$1@$2/",
            "RULE:^CN=([a-zA-Z0-9]+).*$/$1/L",
            "RULE:^CN=([a-zA-Z0-9]+).*$/$1/U",
            "RULE:^(.*),O=(.*)$/$2:$1/",
            "RULE:^.*DC=([^,]*).*$/dc-$1/",
            "RULE:^CN=a.*$/fixed/",
        ]
    ),
    min_size=1,
    max_size=3,
).map(",".join)


class _Ssl:
    def __init__(self, cert: dict[str, Any]) -> None:
        self.cert = cert

    def getpeercert(self) -> dict[str, Any]:
        return self.cert


def _kafka_listener_principal(mapper: PrincipalMapper, ssl_object: _Ssl) -> str | None:
    """What the Kafka listener's SSL connection names the peer (None: it
    closes the connection), through its own method."""
    conn = SimpleNamespace(
        spec=SimpleNamespace(protocol=SecurityProtocol.SSL, name="SSL"),
        listener=SimpleNamespace(_mapper=mapper, metrics=MagicMock()),
        session=SimpleNamespace(principal=ANONYMOUS, peer="x"),
    )
    ok = _Connection.tls_principal(conn, ssl_object)  # type: ignore[arg-type]
    return conn.session.principal if ok else None


@given(_SUBJECTS, _RULES)
def test_the_rpc_names_a_certificate_as_the_kafka_listener_does(subject: list[Any], rules: str) -> None:
    mapper = PrincipalMapper.parse(rules)
    ssl_object = _Ssl({"subject": tuple(subject)})
    kafka = _kafka_listener_principal(mapper, ssl_object)
    try:
        rpc: str | None = peer_principal(ssl_object, mapper)  # type: ignore[arg-type]
    except NoMatchingRule:
        rpc = None
    assert rpc == kafka
    # No certificate: both anonymous; no TLS at all: anonymous on the RPC.
    assert peer_principal(_Ssl({}), mapper) == _kafka_listener_principal(mapper, _Ssl({})) == ANONYMOUS  # type: ignore[arg-type]
    assert peer_principal(None, mapper) == ANONYMOUS
