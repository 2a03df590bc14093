"""walmgr's scanner: its pure rules, and every case of
tests/walmgr_scanner_cases.py against a LocalDirStore (the same cases
against SeaweedFS are tests/system/test_walmgr_scanner_s3.py)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from partlog.wal.key import WalKey, make_wal_key
from partlog.wal.localdir_store import LocalDirStore
from partlog.wal.objectstore import ForwardingStore, ListPage, ObjectStoreError
from tests.clock import Clock

# The cases (and the registry fixture), run against this module's store.
from tests.walmgr_scanner_cases import *  # noqa: F403
from tests.walmgr_scanner_cases import NOW, T0, CountingStore, key_in_shard
from walmgr.listing import (
    GONE_AGE_MS_DEFAULT,
    INCREMENTAL_LOOKBACK_MS_DEFAULT,
    classify,
    group_of,
    list_shard,
    shard_start_after,
)
from walmgr.registry import Registry
from walmgr.scanner import SHARD_FAILURES_BEFORE_GIVING_UP, Scanner


@pytest.fixture
def store(tmp_path: Path) -> CountingStore:
    return CountingStore(LocalDirStore(tmp_path / "store", fsync=False))


def test_classify() -> None:
    good = str(make_wal_key("wal", T0, 3, "ab12"))
    parsed = classify(good, "wal")
    assert isinstance(parsed, WalKey) and parsed.created_ms == T0 and parsed.broker_id == 3
    assert classify(good, "wal/") == parsed
    assert classify(str(make_wal_key("a/b", T0, 3, "ab")), "a/b") == make_wal_key("a/b", T0, 3, "ab")
    wrong_shard = f"wal/{'00' if parsed.shard != '00' else '01'}/{parsed.name}"
    cases = {
        "wal-old/" + good[4:]: "not under 'wal/'",
        "wal2/x": "not under 'wal/'",
        "walx": "not under 'wal/'",
        "wal/readme.txt": "not a WAL key",
        "wal/zz/" + parsed.name: "not a WAL key",
        "wal/sub/" + good[4:]: "a WAL key of prefix 'wal/sub'",
        wrong_shard: "is not the hash shard",
    }
    for key, reason in cases.items():
        got = classify(key, "wal")
        assert isinstance(got, str) and reason in got, (key, got)
    with pytest.raises(ValueError, match="must not be empty"):
        classify(good, "")


def test_shard_start_after_and_groups() -> None:
    pos = key_in_shard("ab", T0 + 50_000)
    assert shard_start_after("wal", "ab", pos, 40_000) == f"wal/ab/{T0 + 10_000:013d}"
    assert shard_start_after("wal", "ab", pos, 0) == pos
    assert shard_start_after("wal", "ab", "", 40_000) == ""
    assert shard_start_after("wal", "ab", "wal/ab/junk", 40_000) == "wal/ab/junk"
    assert shard_start_after("wal", "ab", key_in_shard("ab", 5), 40_000) == f"wal/ab/{0:013d}"
    assert f"wal/ab/{T0 + 10_000:013d}" < key_in_shard("ab", T0 + 10_000)  # the boundary millisecond is listed
    assert group_of("wal/ab/x.wal", "wal") == "ab" and group_of("wal/readme", "wal") == "readme"
    with pytest.raises(ValueError, match="two lowercase hex"):
        list(list_shard(LocalDirStore("/nonexistent-walmgr"), "wal", "AB"))


def test_a_store_that_is_down_fails_the_scan_without_trying_every_shard(registry: Registry) -> None:
    class Down(ForwardingStore):
        lists = 0

        def list_page(self, prefix: str, start_after: str = "", max_keys: int = 1000) -> ListPage:
            with lock:
                Down.lists += 1
            raise ObjectStoreError("connection refused", retriable=True)

    lock = threading.Lock()
    s = Scanner(Down(LocalDirStore.__new__(LocalDirStore)), registry, "wal", clock=Clock(NOW))
    with pytest.raises(ObjectStoreError, match=r"256 of 256 shards not scanned \(0 advanced\)"):
        s.incremental()
    assert Down.lists <= SHARD_FAILURES_BEFORE_GIVING_UP + s.shard_lists_in_flight_max


def test_lookback_default_is_deadline_plus_skew() -> None:
    assert INCREMENTAL_LOOKBACK_MS_DEFAULT == 40_000
    assert GONE_AGE_MS_DEFAULT == 100_000
