"""A full scan's progress (walmgr/progress.py): the shard-based share done,
keys/s and ETA; the log line's pacing; the daemon's gauges; the overlapped
listing and footer reads recording what a page-at-a-time scan records."""

from __future__ import annotations

import logging
import uuid
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from partlog.kafka.records import TopicIdPartition
from partlog.wal.key import ALL_SHARDS
from partlog.wal.localdir_store import LocalDirStore
from tests.clock import Clock
from tests.walmgr_helpers import orphan
from walmgr.progress import ProgressLog, ScanProgress, fan_out, fraction_after
from walmgr.registry import Registry
from walmgr.scanner import Scanner

TPS = [TopicIdPartition(uuid.UUID(int=0x9A), 0)]
NOW = 1_700_000_000_000 + 3_600_000


def test_the_share_done_follows_the_shards() -> None:
    assert fraction_after("00") == 1 / 256
    assert fraction_after("ff") == 1.0
    assert fraction_after(None) is None and fraction_after("zz") is None and fraction_after("0") is None
    shares = [fraction_after(s) or 0.0 for s in ALL_SHARDS]
    assert shares == sorted(shares) and 0.0 not in shares


@given(
    keys=st.integers(0, 10**7),
    seconds=st.floats(0, 1e5, allow_nan=False),
    shard=st.sampled_from([*ALL_SHARDS, None]),
)
def test_eta_is_none_or_finite_and_zero_at_the_end(keys: int, seconds: float, shard: str | None) -> None:
    p = ScanProgress(keys, 0, seconds, fraction_after(shard))
    eta = p.eta_s
    assert p.keys_per_s >= 0
    if shard is None or seconds == 0:
        assert eta is None
    else:
        assert eta is not None and 0 <= eta <= 255 * seconds
        if shard == "ff":
            assert eta == 0


def test_the_log_line_is_paced_and_every_update_reaches_the_gauges(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    seen: list[ScanProgress] = []
    sink = ProgressLog(interval_s=10, on_update=seen.append, clock=lambda: now[0])
    with caplog.at_level(logging.INFO, logger="walmgr.progress"):
        for i in range(1, 31):
            now[0] = float(i)
            sink(ScanProgress(i * 100, 0, float(i), fraction_after(ALL_SHARDS[i])))
    assert len(seen) == 30
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3  # at 10, 20 and 30 s
    assert "keys_listed=3000" in lines[-1] and "keys_per_s=100" in lines[-1] and "eta_s=" in lines[-1]


def test_fan_out_calls_each_sink() -> None:
    a: list[ScanProgress] = []
    b: list[ScanProgress] = []
    assert fan_out(None, None) is None
    assert fan_out(a.append, None) == a.append
    sink = fan_out(a.append, None, b.append)
    assert sink is not None
    sink(ScanProgress(1, 0, 1.0, None))
    assert len(a) == len(b) == 1


@settings(max_examples=8, deadline=None)
@given(objects=st.integers(0, 60), page_keys=st.integers(1, 9), in_flight=st.integers(1, 4))
def test_overlapped_footer_reads_record_what_serial_reads_do(
    tmp_path_factory: pytest.TempPathFactory, objects: int, page_keys: int, in_flight: int
) -> None:
    """Pages listed while the last page's footers are read: the same
    registry as one footer at a time with one key a page, and progress that
    only grows and ends at the report's count."""
    tmp = tmp_path_factory.mktemp("overlap")
    store = LocalDirStore(tmp / "store", fsync=False)
    for i in range(objects):
        orphan(store, TPS, created_ms=1_700_000_000_000 + i)
    store.put("wal/00/not-a-wal-key", b"junk")  # INVALID, among the WAL keys
    clock = Clock(NOW)
    updates: list[ScanProgress] = []
    with Registry(tmp / "a", sync=False) as fast, Registry(tmp / "b", sync=False) as slow:
        report = Scanner(
            store, fast, "wal", clock=clock, page_keys_max=page_keys, footer_reads_in_flight_max=in_flight
        ).full(updates.append)
        Scanner(store, slow, "wal", clock=clock, page_keys_max=1, footer_reads_in_flight_max=1).full()
        assert {r.key: (r.state, r.partitions) for r in fast.records(None)} == {
            r.key: (r.state, r.partitions) for r in slow.records(None)
        }
    assert report.keys_listed == objects + 1 and report.new_objects == objects and report.invalid_count == 1
    listed = [u.keys_listed for u in updates]
    assert listed == sorted(listed) and listed[-1] == report.keys_listed
    shares = [u.fraction_done for u in updates if u.fraction_done is not None]
    assert shares == sorted(shares) and all(0 < f <= 1 for f in shares)


def test_the_daemon_publishes_progress_and_resets_it_after_the_scan(tmp_path: Path) -> None:
    import asyncio

    from walmgr.config import WalmgrConfig
    from walmgr.daemon import Walmgr

    store_dir = tmp_path / "store"
    store = LocalDirStore(store_dir, fsync=False)
    for i in range(30):
        orphan(store, TPS, created_ms=1_700_000_000_000 + i)
    cfg = WalmgrConfig.for_cli(str(store_dir), str(tmp_path / "reg"))
    seen: list[float] = []

    async def run() -> None:
        mgr = Walmgr(cfg, store=store, clock=Clock(NOW))
        await mgr.start()
        try:
            m = mgr.metrics
            assert m is not None
            mgr.scan_progress = lambda p: seen.append(m.full_scan_progress._value.get())
            report = await mgr.scan(full=True)
            assert report.new_objects == 30
            assert m.full_scan_progress._value.get() == 1.0 and m.full_scan_eta_seconds._value.get() == 0.0
            assert m.scan_keys_per_s._value.get() > 0
        finally:
            await mgr.stop()

    asyncio.run(run())
    assert seen and all(0 < v <= 1 for v in seen)
