"""Brokers authenticate to walmgr as principals allowed CLUSTER_ACTION
(issue 29): with ``authorizer = "standard"`` walmgr's notification listener
refuses ``wal_uploaded`` from a peer whose certificate's principal may not
(CLUSTER_AUTHORIZATION_FAILED, counted, nothing registered, the connection
stays), and takes it from a super user; a bad authorizer config is one
error naming its key."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from partlog.rpc.client import RpcClient, RpcRemoteError
from partlog.rpc.frame import RpcErrorCode
from partlog.rpc.wire import enc_wal_uploaded
from partlog.wal.localdir_store import LocalDirStore
from tests.tls_certs import client_context
from tests.unit.test_walmgr_tls_options import _config
from walmgr.config import WalmgrConfigError
from walmgr.daemon import Walmgr

CLIENT = "User:CN=partlog test client"


def _walmgr_config(certs: Path, **extra: str) -> dict[str, str]:
    return {
        "tls_ca_file": str(certs / "ca.crt"),
        "tls_cert_file": str(certs / "server.crt"),
        "tls_key_file": str(certs / "server.key"),
        "listen": "127.0.0.1:0",
        "authorizer": "standard",
        **extra,
    }


@pytest.mark.timeout(60)
@pytest.mark.parametrize("super_users", ["", CLIENT])
def test_notifications_need_cluster_action(tmp_path: Path, certs: Path, super_users: str) -> None:
    objects = LocalDirStore(tmp_path / "objects", fsync=False)
    keys = {"super_users": super_users} if super_users else {}
    cfg = _config(tmp_path, "registry", **_walmgr_config(certs, **keys))

    async def main() -> None:
        mgr = Walmgr(cfg, store=objects)
        await mgr.start()
        try:
            assert mgr.metrics is not None and mgr.port
            ctx = client_context(certs, with_cert=True)
            c = await RpcClient.connect("127.0.0.1", mgr.port, ssl=ctx, cluster_id=mgr.cluster_id)
            try:
                body = enc_wal_uploaded([("wal/0/x", 10, int(time.time() * 1000), 1, [])])
                refused = mgr.metrics.prom.get_sample_value(
                    "walmgr_rpc_authorization_failures_total", {"method": "wal_uploaded"}
                )
                if super_users:
                    await c.call("wal_uploaded", body)
                    assert not refused
                else:
                    for _ in range(2):  # the connection stays
                        with pytest.raises(RpcRemoteError) as e:
                            await c.call("wal_uploaded", body)
                        assert e.value.code == RpcErrorCode.CLUSTER_AUTHORIZATION_FAILED
                    after = mgr.metrics.prom.get_sample_value(
                        "walmgr_rpc_authorization_failures_total", {"method": "wal_uploaded"}
                    )
                    assert after == 2
            finally:
                await c.close()
        finally:
            await mgr.stop()

    asyncio.run(main())


@pytest.mark.parametrize(
    ("keys", "bad"),
    [
        ({"authorizer": "acl"}, "authorizer"),
        ({"super_users": "User:a"}, "super_users"),
        ({"authorizer": "standard", "super_users": "nobody"}, "super_users"),
        ({"authorizer": "standard", "principal_mapping_rules": "RULE:broken"}, "principal_mapping_rules"),
    ],
)
def test_a_bad_authorizer_config_names_its_key(tmp_path: Path, keys: dict[str, str], bad: str) -> None:
    with pytest.raises(WalmgrConfigError) as e:
        _config(tmp_path, "r", **keys)
    assert e.value.key == bad
