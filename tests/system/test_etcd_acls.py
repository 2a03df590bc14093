"""ACLs on etcd (issue 29, controller.etcd_acls) against a real etcd on
loopback: hostile values under the prefix are refused and counted and
grant nothing; EtcdAcls answers as LocalAcls for random changes; a side
that cannot reach etcd starts with no ACLs (deny); two brokers with
``--authorizer`` share ACLs made through either (Kafka's CreateAcls, or
``partlog acls --metadata``), across restarts."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from partlog.acl import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermission,
    AuthorizerConfig,
    PatternType,
    ResourceType,
)
from partlog.acl.source import LocalAcls
from partlog.controller.acls import enc_binding
from partlog.controller.etcd_acls import ACL_VALUE_BYTES_MAX, EtcdAcls, acl_key
from partlog.controller.etcd_connection import EtcdConnection
from partlog.controller.etcd_url import parse_etcd_url
from partlog.kafka_front.apis import FrontConfig
from partlog.tools.etcd_launcher import EtcdCluster
from partlog.tools.local_cluster import TOPIC
from tests.tmpdirs import module_dir

needs_etcd = pytest.mark.skipif(
    shutil.which("etcd") is None, reason="etcd is not installed (scripts/test installs Debian's etcd-server)"
)
WAIT_S = 20.0


@pytest.fixture(scope="module")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdCluster]:
    with module_dir(tmp_path_factory, "etcd") as d, EtcdCluster(str(d), members=1) as cluster:
        yield cluster


def _url(etcd: EtcdCluster) -> str:
    return etcd.url(f"/a{uuid.uuid4().hex[:12]}")


async def _until(cond: Callable[[], bool]) -> None:
    async with asyncio.timeout(WAIT_S):
        while not cond():
            await asyncio.sleep(0.02)


def _run(body: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(body())  # type: ignore[arg-type]


def _topic(name: str, op: AclOperation, principal: str = "User:alice", *, deny: bool = False) -> AclBinding:
    perm = AclPermission.DENY if deny else AclPermission.ALLOW
    return AclBinding(ResourceType.TOPIC, name, PatternType.LITERAL, principal, "*", op, perm)


@needs_etcd
def test_garbage_is_refused_counted_and_grants_nothing(etcd: EtcdCluster) -> None:
    url = _url(etcd)

    async def main() -> None:
        acls = EtcdAcls(parse_etcd_url(url))
        raw = EtcdConnection(parse_etcd_url(url), 5_000)
        root = acls.root
        good = _topic("t", AclOperation.READ)
        grant_all = _topic("*", AclOperation.ALL, "User:*")
        unknown_op = [*enc_binding(grant_all)[:5], 99, int(AclPermission.ALLOW)]
        any_op = [*enc_binding(grant_all)[:5], int(AclOperation.ANY), int(AclPermission.ALLOW)]
        c = await raw.client()
        # Before start: a good one, and garbage of every kind.
        await c.put(acl_key(root, good), msgpack.packb(enc_binding(good)))
        garbage = {
            root + b"zz-not-hex": b"\xc1",  # msgpack's never-used byte
            root + b"list": msgpack.packb([1, 2, 3]),
            acl_key(root, grant_all) + b"0": msgpack.packb(enc_binding(grant_all)),  # another key's binding
            root + b"op": msgpack.packb(unknown_op),
            root + b"any": msgpack.packb(any_op),
            root + b"big": b"\x00" * (ACL_VALUE_BYTES_MAX + 1),
        }
        for k, v in garbage.items():
            await c.put(k, v)
        await acls.start()
        try:
            assert acls.loaded and acls.acls.bindings == {good}
            assert acls.refused == len(garbage)
            # While following: garbage keeps being refused; a good key
            # overwritten by garbage is gone (not kept as it was).
            await c.put(root + b"more", b"\xff\xff")
            await c.put(acl_key(root, good), b"garbage")
            await _until(lambda: acls.refused == len(garbage) + 2)
            await _until(lambda: not acls.acls.bindings)
            await c.put(acl_key(root, good), msgpack.packb(enc_binding(good)))
            await _until(lambda: acls.acls.bindings == {good})
            # A deletion through this side removes only valid bindings' keys.
            gone = await acls.delete_acls([AclBindingFilter()])
            assert gone == [[good]] and not acls.acls.bindings
            left = {kv.key for kv in await c.get_prefix(root)}
            assert left == set(garbage) | {root + b"more"}
        finally:
            await acls.stop()
            await raw.close()

    _run(main)


@needs_etcd
def test_unreachable_at_start_denies(etcd: EtcdCluster) -> None:
    url = _url(etcd)
    # A member that is not there: nothing listens on this port.
    target = parse_etcd_url(url)
    dead = parse_etcd_url(f"etcd://127.0.0.1:1{target.prefix}")

    async def main() -> None:
        writer = EtcdAcls(target)
        await writer.start()
        b = _topic("t", AclOperation.WRITE)
        assert await writer.create_acls([b]) == [None]
        assert writer.acls.bindings == {b}
        lost = EtcdAcls(dead, request_timeout_ms=300, retry_backoff_ms=50, retry_backoff_max_ms=100)
        await lost.start()
        try:
            assert not lost.loaded and not lost.acls.bindings
            await _until(lambda: lost.failures >= 2)
            assert not lost.acls.bindings
            with pytest.raises(ConnectionError):
                await lost.create_acls([_topic("u", AclOperation.READ)])
        finally:
            await lost.stop()
            await writer.stop()

    _run(main)


# ------------------------------------------------- the same as LocalAcls

_principals = st.sampled_from(["User:alice", "User:bob", "User:*", "bad"])
_names = st.sampled_from(["t", "t2", "*", "pre", ""])
_bindings = st.builds(
    AclBinding,
    st.sampled_from([ResourceType.TOPIC, ResourceType.GROUP, ResourceType.ANY]),
    _names,
    st.sampled_from([PatternType.LITERAL, PatternType.PREFIXED, PatternType.MATCH]),
    _principals,
    st.sampled_from(["*", "10.0.0.1"]),
    st.sampled_from([AclOperation.READ, AclOperation.WRITE, AclOperation.ALL, AclOperation.ANY]),
    st.sampled_from([AclPermission.ALLOW, AclPermission.DENY]),
)
_filters = st.builds(
    AclBindingFilter,
    st.sampled_from([ResourceType.ANY, ResourceType.TOPIC, ResourceType.GROUP, ResourceType.UNKNOWN]),
    st.one_of(st.none(), _names),
    st.sampled_from([PatternType.ANY, PatternType.MATCH, PatternType.LITERAL, PatternType.PREFIXED]),
    st.one_of(st.none(), _principals),
    st.one_of(st.none(), st.just("*")),
    st.sampled_from([AclOperation.ANY, AclOperation.READ, AclOperation.ALL]),
    st.sampled_from([AclPermission.ANY, AclPermission.ALLOW, AclPermission.DENY]),
)
_steps = st.lists(
    st.one_of(
        st.tuples(st.just("create"), st.lists(_bindings, min_size=1, max_size=6)),
        st.tuples(st.just("delete"), st.lists(_filters, min_size=1, max_size=3)),
    ),
    min_size=1,
    max_size=8,
)


@needs_etcd
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(steps=_steps)
def test_same_answers_as_local(etcd: EtcdCluster, steps: list[tuple[str, list[object]]]) -> None:
    target = parse_etcd_url(_url(etcd))

    async def main() -> None:
        local = LocalAcls()
        remote = EtcdAcls(target)
        # A second side only follows: it ends with the same set.
        follower = EtcdAcls(target)
        await remote.start()
        await follower.start()
        try:
            for kind, args in steps:
                if kind == "create":
                    assert await remote.create_acls(args) == await local.create_acls(args)  # type: ignore[arg-type]
                else:
                    assert await remote.delete_acls(args) == await local.delete_acls(args)  # type: ignore[arg-type]
                assert remote.acls.bindings == local.acls.bindings
            await _until(lambda: follower.acls.bindings == local.acls.bindings)
            assert remote.refused == follower.refused == 0
        finally:
            await follower.stop()
            await remote.stop()

    _run(main)


# ----------------------------------------- two brokers, Kafka clients, CLI

ANON = "User:ANONYMOUS"


def _cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "partlog", "acls", *args, "--metadata", url],
        capture_output=True,
        text=True,
        timeout=60,
    )


def _poll(cond: Callable[[], bool]) -> bool:
    deadline = time.monotonic() + WAIT_S
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


@needs_etcd
def test_two_brokers_share_acls_through_etcd(tmp_path_factory: pytest.TempPathFactory) -> None:
    kafka_admin = pytest.importorskip("confluent_kafka.admin")
    from tests.kafka_helpers import QUICK_FENCING_MS, ClusterThread

    c = ClusterThread(
        str(tmp_path_factory.mktemp("etcd-acls")),
        front=FrontConfig(authorizer=AuthorizerConfig()),
        metadata="etcd",
        broker_session_timeout_ms=QUICK_FENCING_MS,
        azs=1,
        brokers_per_az=2,
        partitions=1,
        replication_factor=1,
    )
    try:
        url = c.cluster.etcd_url
        one, two = sorted(c.cluster.kafka_ports)

        def admin(bid: int) -> Any:
            return kafka_admin.AdminClient({"bootstrap.servers": f"127.0.0.1:{c.kafka_port(bid)}"})

        def sees_topic(bid: int) -> bool:
            return TOPIC in admin(bid).list_topics(timeout=10).topics

        def held(bid: int) -> frozenset[AclBinding]:
            acls = c.cluster.nodes[bid].acls
            assert acls is not None
            return acls.acls.bindings

        # An operator lets ANONYMOUS manage ACLs, in etcd.
        r = _cli(url, "add", "--resource-type", "cluster", "--principal", ANON, "--operation", "alter")
        assert r.returncode == 0, r.stderr
        assert not sees_topic(two)
        # A Kafka client grants DESCRIBE on the topic through broker one only...
        describe = kafka_admin.AclBinding(
            kafka_admin.ResourceType.TOPIC, TOPIC, kafka_admin.ResourcePatternType.LITERAL, ANON, "*",
            kafka_admin.AclOperation.DESCRIBE, kafka_admin.AclPermissionType.ALLOW,
        )  # fmt: skip

        def created() -> bool:
            client = admin(one)  # held: a collected client fails its futures
            try:
                client.create_acls([describe])[describe].result(10)
            except kafka_admin.KafkaException:
                return False  # broker one has not seen the ALTER yet
            return True

        assert _poll(created)
        # ... and broker two enforces it.
        ours = _topic(TOPIC, AclOperation.DESCRIBE, ANON)
        assert _poll(lambda: ours in held(two))
        assert _poll(lambda: sees_topic(two))
        # Both brokers restarted: the ACLs are still there.
        for bid in (one, two):
            c.kill(bid)
        for bid in (one, two):
            c.restart(bid)
        assert ours in held(one) and ours in held(two)
        assert _poll(lambda: sees_topic(two))
        listed = _cli(url, "list", "--principal", ANON)
        assert listed.returncode == 0, listed.stderr
        assert f"ALLOW {ANON} from * DESCRIBE on TOPIC LITERAL {TOPIC}" in listed.stdout.splitlines()
        assert f"ALLOW {ANON} from * ALTER on CLUSTER LITERAL kafka-cluster" in listed.stdout.splitlines()
        # Removed in etcd: gone everywhere.
        r = _cli(url, "remove", "--resource-type", "topic", "--name", TOPIC, "--principal", ANON)
        assert r.returncode == 0 and r.stdout.startswith("removed: ALLOW"), r.stderr
        assert _poll(lambda: ours not in held(one) and ours not in held(two))
        assert _poll(lambda: not sees_topic(one) and not sees_topic(two))
        # The CLI's errors: one line.
        bad = _cli("etcd://127.0.0.1:1/nowhere", "list", "--timeout-ms", "2000")
        assert bad.returncode != 0 and bad.stderr.count("\n") == 1, bad.stderr
        both = subprocess.run(
            [sys.executable, "-m", "partlog", "acls", "list", "--metadata", url, "--controller", "127.0.0.1:1"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert both.returncode == 2 and both.stderr.count("\n") == 1, both.stderr
    finally:
        c.close()


@needs_etcd
def test_over_the_limit_a_deny_is_never_dropped_for_an_allow(
    etcd: EtcdCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    # More bindings than ACLS_MAX can only come from racing creators or
    # another writer; keeping ALLOWs over a DENY would grant what it denies.
    from partlog.controller import etcd_acls

    monkeypatch.setattr(etcd_acls, "ACLS_MAX", 2)
    url = _url(etcd)

    async def main() -> None:
        acls = EtcdAcls(parse_etcd_url(url))
        raw = EtcdConnection(parse_etcd_url(url), 5_000)
        root = acls.root
        deny = _topic("tt", AclOperation.READ, "User:mallory", deny=True)
        # Allows whose keys sort before the deny's: a read in key order meets them first.
        allows = [
            b
            for b in (_topic(chr(ord("a") + i), AclOperation.READ, "User:*") for i in range(26))
            if acl_key(root, b) < acl_key(root, deny)
        ][:3]
        assert len(allows) == 3
        c = await raw.client()
        for b in [*allows, deny]:
            await c.put(acl_key(root, b), msgpack.packb(enc_binding(b)))
        await acls.start()
        try:
            assert acls.loaded and deny in acls.acls.bindings, acls.acls.bindings
            assert len(acls.acls.bindings) == 2
            # While following, full: a new deny takes an allow's place.
            deny2 = _topic("u", AclOperation.WRITE, "User:mallory", deny=True)
            await c.put(acl_key(root, deny2), msgpack.packb(enc_binding(deny2)))
            await _until(lambda: deny2 in acls.acls.bindings)
            assert acls.acls.bindings == {deny, deny2}
        finally:
            await acls.stop()
            await raw.close()

    _run(main)
