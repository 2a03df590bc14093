"""Tiered segments under broker kills (issue 31): leaders build, upload and
swap in segments while brokers are killed and restarted mid-way, with
walmgr deleting WAL objects whose references all moved and the orphans a
kill leaves.  Nothing acknowledged is lost or duplicated, no referenced
object is deleted, new leaders resume from the segment rows, and the live
WAL objects stay young."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from partlog.tools.cluster_options import ClusterOptions
from partlog.tools.cluster_run import run


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_brokers_killed_while_tiering_lose_nothing_and_walmgr_deletes_nothing_referenced(tmp_path: Path) -> None:
    opts = ClusterOptions(
        azs=3,
        brokers_per_az=1,
        partitions=4,
        producers_per_az=1,
        rate_per_producer=300,
        duration_s=12.0,
        data_dir=str(tmp_path),
        commit_interval_ms=50,
        sync=False,
        kill_broker_every_s=3.0,
        restart_after_s=0.5,
        seed=5,
        orphan_rate=0.1,
        tiering_segment_ms=1_000,
    )
    r = asyncio.run(run(opts))
    assert r["brokers_killed"] >= 2
    assert r["leader_elections"] >= 1
    assert r["records_acked"] > 0
    assert r["records_lost"] == 0, r["records_lost_examples"]
    assert r["records_duplicated"] == 0
    assert r["order_violations"] == 0
    assert r["records_verified"] == r["records_acked"]
    assert r["objects_deleted_referenced"] == 0
    assert r["orphans_deleted"] == r["orphans_created"]
    # Segments were built, and WAL objects whose batches all moved were deleted.
    assert r["segments_last"] > 0
    assert r["objects_deleted"] > r["orphans_created"]
