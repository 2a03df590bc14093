"""A local cluster's broker whose port was taken between ``free_ports`` and
its first start (another process bound it: a parallel test, in CI) starts
on new ports instead of failing the run."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

from partlog.tools.cluster_options import ClusterOptions
from partlog.tools.local_cluster import LocalCluster
from partlog.wal.localdir_store import LocalDirStore


def test_a_port_taken_before_the_first_start_is_replaced(tmp_path: Path) -> None:
    opts = ClusterOptions(azs=1, brokers_per_az=2, partitions=2, sync=False, kafka=True)

    async def main() -> None:
        cluster = LocalCluster(opts, str(tmp_path), LocalDirStore(tmp_path / "objects"))
        taken = cluster.ports[1], cluster.kafka_ports[2]
        squatters = []
        for port in taken:
            s = socket.socket()
            s.bind(("127.0.0.1", port))
            s.listen()
            squatters.append(s)
        try:
            await cluster.start()
            try:
                assert cluster.ports[1] != taken[0] and cluster.kafka_ports[2] != taken[1]
                assert {b.broker_id for b in cluster.admin.brokers()} == {1, 2}  # type: ignore[union-attr]
                for b in cluster.brokers.values():
                    assert await b.init_producer_id() is not None
            finally:
                await cluster.stop()
        finally:
            for s in squatters:
                s.close()

    asyncio.run(main())
