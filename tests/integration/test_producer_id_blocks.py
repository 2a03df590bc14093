"""Producer ids come from controller blocks, unique across brokers and across
controller restarts (an in-process cluster; broker kills are in
tests/system/test_failover.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from partlog.kafka.producer_ids import PRODUCER_ID_BLOCK_SIZE
from partlog.tools.cluster_options import ClusterOptions
from partlog.tools.local_cluster import LocalCluster
from partlog.wal.localdir_store import LocalDirStore


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
