"""Broker sessions on etcd survive the etcd raft leader being killed (issue
32): a real 3-member etcd on loopback, brokers holding sessions (partlog's
:class:`~partlog.controller.etcd_session.EtcdSession`, as a broker uses it),
and the raft leader SIGKILLed again and again.  etcd keeps a lease across a
leader change (the new leader renews every lease on promotion); a
keep-alive must reach another member well within the TTL, so no healthy
broker's lease expires, no session registers again and the acting
controller fences nobody."""

from __future__ import annotations

import asyncio
import time

import pytest

from partlog.controller.cluster_meta import BrokerInfo
from partlog.controller.etcd_meta import EtcdMetadata
from partlog.tools.etcd_launcher import EtcdCluster
from tests.system.test_etcd_metadata import WAIT_S, Brokers, needs_etcd

# The session of the batching test that saw a healthy broker fenced.
SESSION_MS = 8_000
BROKERS = 3
# Kills per test run: each is an etcd election (about 1-2 s) and a restart.
LEADER_KILLS = 12
# How long the brokers run on two members after a kill before the killed
# one comes back: longer than a keep-alive period (a third of the TTL).
AFTER_KILL_S = 3.0
NEW_LEADER_WAIT_S = 15.0
# One run's bound (about 5 s a kill when all goes well).
RUN_S = 300.0


async def _new_leader(cluster: EtcdCluster, old: int) -> int:
    """The raft leader, once it is not member ``old``."""
    deadline = time.monotonic() + NEW_LEADER_WAIT_S
    while time.monotonic() < deadline:
        leader = await asyncio.to_thread(cluster.leader)
        if leader is not None and leader != old:
            return leader
        await asyncio.sleep(0.05)
    raise AssertionError(f"no new etcd leader within {NEW_LEADER_WAIT_S} s")


@needs_etcd
@pytest.mark.parametrize("round_", range(2))
def test_sessions_survive_etcd_leader_kills(tmp_path: object, round_: int) -> None:
    asyncio.run(_sessions_survive_etcd_leader_kills(str(tmp_path)))


async def _sessions_survive_etcd_leader_kills(tmp: str) -> None:
    with EtcdCluster(tmp) as cluster:
        async with asyncio.timeout(RUN_S):
            await _kill_leaders(cluster)


async def _kill_leaders(cluster: EtcdCluster) -> None:
    b = Brokers(cluster.url("/leader-kill"))
    try:
        for bid in range(1, BROKERS + 1):
            m = EtcdMetadata(
                b.url, BrokerInfo(bid, f"az{bid}", "127.0.0.1", 9000 + bid), create_cluster=True,
                session_timeout_ms=SESSION_MS,
            )  # fmt: skip
            await m.start(timeout_ms=10_000)
            b.sources[bid] = m
        await b.admin.start(timeout_ms=10_000)
        admin = b.admin
        assert await admin.wait_for(lambda: all(admin.view.accepted(x) for x in b.sources), WAIT_S)
        epochs = {bid: m.broker_epoch for bid, m in b.sources.items()}
        leases = {bid: m.session.lease_id for bid, m in b.sources.items() if m.session is not None}
        for kill in range(LEADER_KILLS):
            leader = await _new_leader(cluster, -1)  # any (an election may be under way)
            await asyncio.to_thread(cluster.kill, leader)
            await _new_leader(cluster, leader)
            await asyncio.sleep(AFTER_KILL_S)
            await asyncio.to_thread(cluster.restart, leader)
            gone = {bid: m.broker_epoch for bid, m in b.sources.items() if m.broker_epoch != epochs[bid]}
            assert not gone, f"kill {kill}: sessions ended (new epochs {gone}, were {epochs})"
        # Every lease is still the first one, and etcd still holds it
        # with time left; the controller fenced nobody.
        c = await admin.conn.client()
        for bid, m in b.sources.items():
            assert m.registrations == 1 and m.session is not None and m.session.lease_id == leases[bid]
            info = await c.get_lease_info(leases[bid])
            assert info.TTL > 0, (bid, info)
        assert all(admin.view.accepted(x) for x in b.sources)
        assert all(m.acting is None or m.acting.leader_elections == 0 for m in b.sources.values())
    finally:
        await b.stop()
