"""walmgr end to end on a local directory with a broker listening on the
loopback (the sweep asks every broker before a deletion, issue 29): the
soak bench at a small size, and the key shapes walmgr must never delete.
Moved from tests/unit when the sweep made them open a port."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from partlog.wal.localdir_store import LocalDirStore
from tests.walmgr_safety_cases import check_scan_json, scan_json, unknown_keys_are_never_deleted
from walmgr import cli


def test_unknown_key_shapes_and_sibling_prefixes_are_never_deleted_local(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    objects = LocalDirStore(tmp_path / "objects", fsync=False)
    url = "file://" + str(tmp_path / "objects")
    weird = asyncio.run(unknown_keys_are_never_deleted(tmp_path, objects, url))
    out = scan_json(capsys, ["--store", url, "--registry", str(tmp_path / "registry")])
    check_scan_json(out, weird)


def test_bench_soak_learns_and_deletes_every_orphan_within_its_memory_bound(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The soak at a small size on a local directory: the daemon's cycle
    deletes every orphan the generator made, and the report says so."""
    store = f"file://{tmp_path}/objects"
    assert cli.main(["bench", "soak", "--objects", "250", "--store", store, "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["objects"] == 250 and r["deleted_files"] == 250 and r["objects_left"] == 0
    assert r["all_deleted"] and r["within_bound"] and r["rss_anon_peak_mib"] > 0
    assert r["cycles"][0]["keys_listed"] == 250 and r["cycles"][-1]["deleted_files"] == 0
