"""Failover with the embedded controller: brokers killed and restarted under
acks=all load lose no acknowledged record and duplicate none; producer ids
come from controller blocks, unique across brokers and controller restarts."""

from __future__ import annotations

import asyncio
from pathlib import Path

from partlog.cluster_run import ClusterOptions, LocalCluster, run
from partlog.objectstore import LocalDirStore
from partlog.producer_ids import PRODUCER_ID_BLOCK_SIZE


def test_brokers_killed_under_load_lose_and_duplicate_nothing(tmp_path: Path) -> None:
    opts = ClusterOptions(
        azs=3,
        brokers_per_az=1,
        partitions=6,
        producers_per_az=1,
        rate_per_producer=300,
        duration_s=9.0,
        data_dir=str(tmp_path),
        commit_interval_ms=50,
        sync=False,
        kill_broker_every_s=2.5,
        restart_after_s=0.5,
        seed=3,
    )
    r = asyncio.run(run(opts))
    assert r["brokers_killed"] >= 2
    assert r["leader_elections"] >= 1  # a killed leader's partitions moved
    assert r["records_acked"] > 0
    assert r["records_lost"] == 0
    assert r["records_duplicated"] == 0
    assert r["order_violations"] == 0
    assert r["records_verified"] == r["records_acked"]


def test_producer_ids_come_from_blocks_unique_across_controller_restarts(tmp_path: Path) -> None:
    opts = ClusterOptions(azs=3, brokers_per_az=1, partitions=3, sync=False)

    async def main() -> list[int]:
        ids: list[int] = []
        for _ in range(2):  # the second round restarts the controller on the same state
            cluster = LocalCluster(opts, str(tmp_path), LocalDirStore(tmp_path / "objects"))
            await cluster.start()
            try:
                for b in cluster.brokers.values():
                    for _ in range(5):
                        pid = await b.init_producer_id()
                        assert pid is not None
                        ids.append(pid)
            finally:
                await cluster.stop()
        return ids

    ids = asyncio.run(main())
    assert len(set(ids)) == len(ids) == 30
    # From the controller's blocks (6 blocks at most), not random 62-bit ids.
    assert max(ids) < 6 * PRODUCER_ID_BLOCK_SIZE
