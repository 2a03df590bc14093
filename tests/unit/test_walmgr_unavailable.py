"""One-shot work fails when the store cannot be read; daemons go on and
count the failure (issue 13, item 6).

Regression: with the store unreachable ``walmgr gc --once`` exited 0
printing "plan: 0" (the controller-down cases are in
tests/integration/test_walmgr_controller_down.py).
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from partlog.kafka.records import TopicIdPartition
from partlog.wal.localdir_store import LocalDirStore
from partlog.wal.objectstore import LIST_KEYS_MAX, ForwardingStore, ListPage, ObjectStoreError
from tests.walmgr_helpers import orphan
from walmgr.config import WalmgrConfig
from walmgr.daemon import Walmgr


def _config(tmp_path: Path, **changes: object) -> WalmgrConfig:
    return WalmgrConfig.for_cli("file://" + str(tmp_path / "objects"), str(tmp_path / "registry"), **changes)


class DownStore(ForwardingStore):
    def list_page(self, prefix: str, start_after: str = "", max_keys: int = LIST_KEYS_MAX) -> ListPage:
        raise ObjectStoreError("injected: connection refused", retriable=True)


@pytest.mark.timeout(60)
def test_a_one_shot_cycle_fails_when_the_store_cannot_be_read(tmp_path: Path) -> None:
    store = DownStore(LocalDirStore(tmp_path / "objects", fsync=False))

    async def main() -> None:
        mgr = Walmgr(_config(tmp_path), store=store)
        await mgr.start()
        try:
            # The daemon goes on (and counts the failure) ...
            report = await mgr.cycle()
            assert "connection refused" in report.scan_error
            # ... a one-shot cycle raises instead of reporting "nothing to delete".
            with pytest.raises(ObjectStoreError, match="connection refused"):
                await mgr.cycle(scan_errors_fatal=True)
        finally:
            await mgr.stop()

    asyncio.run(main())


class ShardListsDown(ForwardingStore):
    """Per-shard LISTs (the incremental scan's) fail; the whole-prefix
    listing (the full scan's) works."""

    def list_page(self, prefix: str, start_after: str = "", max_keys: int = LIST_KEYS_MAX) -> ListPage:
        if prefix.count("/") >= 2:
            raise ObjectStoreError("injected: 503 SlowDown", retriable=True)
        return super().list_page(prefix, start_after, max_keys)


@pytest.mark.timeout(60)
def test_the_full_scan_runs_when_the_incremental_one_failed(tmp_path: Path) -> None:
    """Regression (issue 14, found by the deterministic simulation): a
    failed incremental scan skipped the cycle's due full scan too, so one
    unlucky LIST per cycle kept walmgr from learning any object."""
    objects = LocalDirStore(tmp_path / "objects", fsync=False)
    key = orphan(objects, [TopicIdPartition(uuid.UUID(int=1), 0)], 1_700_000_000_000)

    async def main() -> None:
        mgr = Walmgr(_config(tmp_path), store=ShardListsDown(objects))
        await mgr.start()
        try:
            report = await mgr.cycle(full_scan=True)
            assert "503 SlowDown" in report.scan_error and report.incremental is None
            assert report.full is not None and report.full.new_objects == 1
            assert mgr.registry is not None and mgr.registry.get(key) is not None
        finally:
            await mgr.stop()

    asyncio.run(main())
