"""``partlog topics`` and ``partlog object`` on the data directory a short
``partlog cluster`` run (in this process) left: every object adds up to
the topic's numbers (the tool on hand-made stores is in
tests/unit/test_metadata_tool.py)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from partlog.tools.cluster_options import ClusterOptions
from partlog.tools.cluster_run import run
from tests.unit.test_metadata_tool import run_json


def all_wal_keys(objects: Path) -> Iterator[str]:
    for root, _, files in os.walk(objects):
        for f in files:
            if f.endswith(".wal") and ".partlog-tmp" not in root:
                yield os.path.relpath(os.path.join(root, f), objects)


def test_end_to_end_on_a_cluster_data_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "cluster"
    opts = ClusterOptions(
        duration_s=2,
        azs=1,
        brokers_per_az=1,
        partitions=2,
        producers_per_az=1,
        rate_per_producer=200,
        data_dir=str(data),
        sync=False,
        replication_factor=1,
    )
    result = asyncio.run(run(opts))
    assert result["records_lost"] == 0
    doc = run_json(capsys, "topics", "--data-dir", str(data))
    [t] = doc["topics"]
    assert t["name"] == "partlog-cluster"
    assert [p["partition"] for p in t["partitions"]] == [0, 1]
    assert t["objects_total_bytes"] > 0 and t["live_bytes"] > 0
    assert t["deleted_part_bytes"] == 0  # nothing deleted, a registry present
    assert doc["registry"] == str(data / "walmgr")
    assert result["records_acked"] > 0
    assert sum(p["log_end_offset"] for p in t["partitions"]) >= result["records_acked"]
    # Every object on disk, asked about one by one, adds up to the topic's numbers.
    used = total = referenced = 0
    for key in all_wal_keys(data / "objects"):
        o = run_json(capsys, "object", key, "--data-dir", str(data))
        used += o["used_bytes"]
        if o["used_bytes"]:
            referenced += 1
            total += o["total_bytes"]
            assert o["total_bytes"] == os.path.getsize(data / "objects" / key)
    assert (used, total, referenced) == (t["live_bytes"], t["objects_total_bytes"], t["objects"])
