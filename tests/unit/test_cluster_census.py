"""The object census of ``partlog cluster`` (partlog.tools.cluster_census):
WAL objects and segments told apart by key, the oldest WAL object's age from
its key, the listing bounded, and the verdicts against their thresholds."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from partlog.tools import cluster_census
from partlog.tools.cluster_census import OLDEST_WAL_SLACK_MS, Census, summarize, take_census
from partlog.wal.key import make_wal_key
from partlog.wal.localdir_store import LocalDirStore


def test_the_census_counts_wal_objects_and_segment_logs_and_ignores_the_rest(tmp_path: Path) -> None:
    store = LocalDirStore(tmp_path, fsync=False)
    for created in (1_000, 5_000):
        store.put(str(make_wal_key("wal", created, 1, "ab")), b"x" * 10)
    store.put("tiered/3f/some/0/00000000000000000000-0000000001000-x.log", b"y" * 7)
    store.put("tiered/3f/some/0/00000000000000000000-0000000001000-x.index", b"z")
    store.put("other/thing.txt", b"q")
    c = take_census(store, now_ms=11_000)
    assert (c.wal_objects, c.wal_bytes, c.oldest_wal_age_ms) == (2, 20, 10_000)
    assert (c.segments, c.segment_bytes, c.truncated) == (1, 7, False)


def test_the_listing_stops_at_its_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = LocalDirStore(tmp_path, fsync=False)
    for created in range(5):
        store.put(str(make_wal_key("wal", 1_000 + created, 1, "ab")), b"x")
    monkeypatch.setattr(cluster_census, "CENSUS_OBJECTS_MAX", 3)
    c = take_census(store, now_ms=2_000)
    assert c.truncated and c.wal_objects == 3


def test_an_empty_store_has_no_oldest_object(tmp_path: Path) -> None:
    c = take_census(LocalDirStore(tmp_path, fsync=False), now_ms=5)
    assert c.wal_objects == 0 and c.oldest_wal_age_ms == 0


def _census(wal: int, age_ms: int) -> Census:
    return Census(0, wal, 0, age_ms, 0, 0, False)


def test_verdicts_without_tiering_are_not_given() -> None:
    r = summarize([_census(10, 1), _census(20, 2)], segment_ms=0)
    assert "oldest_wal_within_bound" not in r and "wal_objects_flat" not in r


def test_a_growing_wal_count_is_not_flat_and_an_old_object_misses_the_bound() -> None:
    r = summarize([_census(10, 1_000), _census(30, 1_000 + 5_000 + OLDEST_WAL_SLACK_MS)], segment_ms=5_000)
    assert r["wal_objects_flat"] is False and r["oldest_wal_within_bound"] is False
    r = summarize([_census(10, 1_000), _census(12, 5_000)], segment_ms=5_000)
    assert r["wal_objects_flat"] is True and r["oldest_wal_within_bound"] is True


@given(st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 10**9)), min_size=1, max_size=50))
def test_summary_figures_come_from_the_samples(pairs: list[tuple[int, int]]) -> None:
    samples = [_census(w, a) for w, a in pairs]
    r = summarize(samples, segment_ms=1)
    half = samples[len(samples) // 2 :]
    assert r["wal_objects_max_second_half"] == max(s.wal_objects for s in half)
    assert r["oldest_wal_age_ms_max"] == max(s.oldest_wal_age_ms for s in half)
    assert r["wal_objects_last"] == samples[-1].wal_objects
