"""The broker RPC under an authorizer (issue 29), over real TCP on loopback:
two brokers with mutual TLS, whose certificates map to a super user, and an
intruder holding a certificate of the same CA (``CN=intruder``) that is not
allowed CLUSTER_ACTION.  The intruder's ``commit`` and ``keys_referenced``
are refused CLUSTER_AUTHORIZATION_FAILED (counted by method, the handler
never runs, the connection stays); the brokers' own commits and
replication go on; an ACL granting CLUSTER_ACTION lets the intruder in."""

from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess
import time
from pathlib import Path

import pytest

from partlog.acl import CLUSTER_NAME, AclBinding, AclOperation, AclPermission, AuthorizerConfig, PatternType
from partlog.acl import ResourceType as RT
from partlog.acl.source import LocalAcls
from partlog.broker.server import BrokerConfig
from partlog.controller.cluster_meta import StaticMetadata
from partlog.kafka.errors import Errors
from partlog.kafka.record_batch import build_record_batch
from partlog.kafka.records import CommitBatchRequest, TopicIdPartition
from partlog.kafka_front.apis import FrontConfig
from partlog.node import BrokerNode, NodeConfig
from partlog.produce.pipeline import ProduceConfig
from partlog.rpc.client import RpcClient, RpcRemoteError
from partlog.rpc.frame import RpcErrorCode
from partlog.rpc.wire import enc_commit
from partlog.wal.localdir_store import LocalDirStore
from tests.batches import wal_key
from tests.cluster_helpers import topic_partitions
from tests.tls_certs import client_context, server_context

# What tests/tls_certs.py names the brokers' client certificate.
BROKERS = "User:CN=partlog test client"
INTRUDER = "User:CN=intruder"


def _intruder_context(certs: Path, d: Path) -> ssl.SSLContext:
    """A client context with a certificate for CN=intruder signed by the
    test CA (a stolen CA-signed certificate, or a mis-issued one)."""
    for name in ("ca.crt", "ca.key", "openssl.cnf"):
        shutil.copy(certs / name, d / name)

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)

    openssl("req", "-new", "-config", "openssl.cnf", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-keyout", "intruder.key", "-out", "intruder.csr", "-subj", "/CN=intruder")  # fmt: skip
    openssl("x509", "-req", "-in", "intruder.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-set_serial", "9",
            "-days", "1", "-extfile", "openssl.cnf", "-extensions", "client_ext", "-out", "intruder.crt")  # fmt: skip
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=d / "ca.crt")
    ctx.load_cert_chain(d / "intruder.crt", d / "intruder.key")
    return ctx


async def _replicated(nodes: list[BrokerNode], tps: list[TopicIdPartition], hwm: int) -> None:
    """Every replica's high watermark reaches ``hwm`` (followers learn it on
    their next fetch, after the leader answered acks=all)."""
    deadline = time.monotonic() + 30
    while not all(n.broker.store.high_watermark(tp) == hwm for n in nodes for tp in tps):
        assert time.monotonic() < deadline, "the followers did not catch up"
        await asyncio.sleep(0.02)


def _batch(value: bytes) -> bytes:
    return build_record_batch([(None, value, int(time.time() * 1000))])


@pytest.mark.timeout(120)
def test_an_intruder_certificate_is_refused_cluster_action(tmp_path: Path, certs: Path) -> None:
    intruder = _intruder_context(certs, tmp_path)
    objects = LocalDirStore(tmp_path / "objects", fsync=False)
    meta = StaticMetadata.generate(azs=2, brokers_per_az=1, topics={"t": 2}, replication_factor=2)
    front = FrontConfig(authorizer=AuthorizerConfig(super_users=frozenset({BROKERS})))

    async def main() -> None:
        nodes = [
            BrokerNode(
                NodeConfig(
                    BrokerConfig(
                        b.broker_id,
                        b.az,
                        str(tmp_path / f"broker-{b.broker_id}"),
                        produce=ProduceConfig(commit_interval_ms=20),
                        sync=False,
                        server_ssl=server_context(certs, mutual=True),
                        client_ssl=client_context(certs, with_cert=True),
                    ),
                    kafka=front,
                ),
                meta,
                objects,
            )
            for b in meta.brokers()
        ]
        started: list[BrokerNode] = []
        try:
            for n in nodes:
                await n.start()
                started.append(n)
            ready = meta.with_ports({n.broker.broker_id: n.port for n in nodes})
            for n in nodes:
                n.broker.set_metadata(ready)
            b1 = nodes[0].broker
            tps = topic_partitions(ready)

            # The brokers' own RPC: a commit to the other leader, and acks=all
            # waiting for the follower's replica fetches, both as the super user.
            for i in range(3):
                results = await b1.produce([(tp, _batch(b"v%d" % i)) for tp in tps], acks=-1)
                assert [r.error for r in results] == [Errors.NONE] * len(tps), results
            assert b1.stats.commits_remote >= 1
            await _replicated(nodes, tps, 3)

            leader = next(n for n in nodes if n.broker.replicas.is_leader(tps[0]))
            served = leader.broker.stats.commits_served
            c = await RpcClient.connect("127.0.0.1", leader.port, ssl=intruder, cluster_id=ready.cluster_id)
            try:
                batch = _batch(b"forged")
                req = CommitBatchRequest.from_header(0, tps[0], 0, batch[:61])
                for method, body in (
                    ("commit", enc_commit(wal_key(int(time.time() * 1000)), 1, len(batch), [req])),
                    ("keys_referenced", {"keys": [wal_key(1)]}),
                    ("commit", enc_commit(wal_key(int(time.time() * 1000)), 1, len(batch), [req])),
                ):
                    with pytest.raises(RpcRemoteError) as refused:
                        await c.call(method, body)
                    assert refused.value.code == RpcErrorCode.CLUSTER_AUTHORIZATION_FAILED
                    assert int(refused.value.code) == 31  # Kafka's number
                    assert INTRUDER in refused.value.message
                # Refused, never served: the log is as the brokers left it.
                assert leader.broker.stats.commits_served == served
                assert leader.broker.store.log_end_offset(tps[0]) == 3
                failures = leader.broker.metrics.rpc_authorization_failures
                assert failures.labels("commit")._value.get() == 2
                assert failures.labels("keys_referenced")._value.get() == 1

                # An ACL granting CLUSTER_ACTION lets it in, on the same connection.
                assert isinstance(leader.acls, LocalAcls)
                grant = AclBinding(RT.CLUSTER, CLUSTER_NAME, PatternType.LITERAL, INTRUDER, "*",
                                   AclOperation.CLUSTER_ACTION, AclPermission.ALLOW)  # fmt: skip
                assert await leader.acls.create_acls([grant]) == [None]
                answer = await c.call("keys_referenced", {"keys": [wal_key(1)]})
                assert answer == {"referenced": []}
            finally:
                await c.close()

            # Replication went on meanwhile.
            results = await b1.produce([(tp, _batch(b"after")) for tp in tps], acks=-1)
            assert [r.error for r in results] == [Errors.NONE] * len(tps), results
            await _replicated(nodes, tps, 4)
        finally:
            for n in started:
                await n.stop()

    asyncio.run(main())
