"""The local object store at its edges (issue 13, items 9 and 11), and
walmgr's scans over what it lists.

Regressions: a store root reached through a symlink refused every key (so
every upload failed and ``partlog cluster --data-dir LINK`` hung); a file
whose name is not UTF-8 crashed listing, and so every walmgr scan; opening
a store only to read (``partlog wal dump FILE``) created ``.partlog-tmp/``
beside the file.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from partlog.kafka.records import TopicIdPartition
from partlog.wal.localdir_store import LocalDirStore
from partlog.wal.objectstore import InvalidKeyError
from tests.clock import Clock
from tests.walmgr_helpers import TEST_CLUSTER_ID, orphan, segment
from walmgr.listing import NOT_UTF8_NOTE
from walmgr.model import State
from walmgr.registry import Registry
from walmgr.scanner import Scanner

BIN = Path(sys.executable).parent


def test_a_root_through_a_symlink_works(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    store = LocalDirStore(link, fsync=False)
    store.put("wal/00/a.wal", b"data")
    assert store.get("wal/00/a.wal") == b"data"
    assert [o.key for o in store.list_page("wal/").objects] == ["wal/00/a.wal"]
    assert store.delete_many(["wal/00/a.wal"]).deleted == ["wal/00/a.wal"]
    # A symlink inside the root that leaves it is still refused.
    (real / "wal").mkdir(exist_ok=True)
    (real / "wal" / "out").symlink_to(tmp_path)
    with pytest.raises(InvalidKeyError, match="outside"):
        store.get("wal/out/x")


def test_the_temp_directory_is_made_by_the_first_put(tmp_path: Path) -> None:
    store = LocalDirStore(tmp_path, fsync=False)
    assert not (tmp_path / ".partlog-tmp").exists()
    store.put("k", b"v")
    assert (tmp_path / ".partlog-tmp").is_dir()
    assert [o.key for o in store.list_page("").objects] == ["k"]


def test_wal_dump_of_a_file_leaves_nothing_beside_it(tmp_path: Path) -> None:
    tp = TopicIdPartition(uuid.uuid4(), 0)
    path = tmp_path / "segment.wal"
    path.write_bytes(segment([tp], 1_700_000_000_000))
    proc = subprocess.run([str(BIN / "partlog"), "wal", "dump", str(path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["segment.wal"]


def test_a_name_that_is_not_utf8_is_listed_and_refused_elsewhere(tmp_path: Path) -> None:
    store = LocalDirStore(tmp_path, fsync=False)
    store.put("wal/00/a", b"1")
    store.put("wal/00/c", b"3")
    os.makedirs(tmp_path / "wal" / "00", exist_ok=True)
    with open(os.path.join(os.fsencode(tmp_path), b"wal/00/b\xff"), "wb") as f:
        f.write(b"2")
    keys = [o.key for o in store.list_page("wal/").objects]
    assert keys == ["wal/00/a", "wal/00/b\udcff", "wal/00/c"]  # byte order: b\xff between a and c
    # It may be passed back as start_after (the next page starts after it).
    assert [o.key for o in store.list_page("wal/", start_after="wal/00/b\udcff").objects] == ["wal/00/c"]
    with pytest.raises(InvalidKeyError, match="not valid UTF-8"):
        store.get("wal/00/b\udcff")


def test_walmgr_scans_report_a_name_that_is_not_utf8_and_go_on(tmp_path: Path) -> None:
    objects = LocalDirStore(tmp_path / "objects", fsync=False)
    tp = TopicIdPartition(uuid.uuid4(), 0)
    now = int(time.time() * 1000)
    good = orphan(objects, [tp], now - 10_000)
    shard_dir = os.path.dirname(os.path.join(tmp_path, "objects", good))
    bad_name = os.fsencode(os.path.basename(good))[:-4] + b"\xfe.wal"
    with open(os.path.join(os.fsencode(shard_dir), bad_name), "wb") as f:
        f.write(segment([tp], now - 10_000, cluster_id=TEST_CLUSTER_ID))
    with Registry(tmp_path / "registry", sync=False) as reg:
        scanner = Scanner(objects, reg, "wal", clock=Clock(now))
        for report in (scanner.full(), scanner.incremental()):
            assert [why for _, why in report.invalid] == [NOT_UTF8_NOTE], report.invalid
            shown = report.invalid[0][0]
            assert "\\xfe" in shown and shown.isprintable()
        rec = reg.get(good)
        assert rec is not None and rec.state == State.TRACKED
        assert all(_printable(r.key) for r in reg.records())


def _printable(key: str) -> bool:
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
