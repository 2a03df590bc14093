"""One-shot work gives up after a bounded wait and says so; daemons keep
retrying but log and count every failure (issue 13, item 6): the
controller is down (a loopback port nobody listens on).

Regression: ``walmgr gc --once --metadata controller://...`` with the
controller down retried every second for ever, silently, holding the
registry lock (the store-down cases are in tests/unit/test_walmgr_unavailable.py)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from partlog.controller.client import ControllerMetadata, ControllerUnavailableError
from partlog.tools.local_cluster import free_ports
from partlog.wal.localdir_store import LocalDirStore
from tests.unit.test_walmgr_unavailable import _config
from walmgr.daemon import Walmgr
from walmgr.registry import Registry


@pytest.mark.timeout(60)
def test_controller_down_bounded_wait_logged_and_counted(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    [port] = free_ports(1)  # nothing listens there

    async def main() -> None:
        source = ControllerMetadata("127.0.0.1", port, retry_backoff_ms=20, retry_backoff_max_ms=50)
        with pytest.raises(ControllerUnavailableError, match=f"127.0.0.1:{port}: no snapshot within 500 ms"):
            await source.start(timeout_ms=500)
        assert source.failures >= 2  # every attempt counted ...
        await source.stop()

    with caplog.at_level(logging.WARNING, logger="partlog.controller.client"):
        asyncio.run(main())
    # ... and logged: the daemon's retries are never silent.
    assert sum("metadata_poll failed (retrying)" in r.getMessage() for r in caplog.records) >= 2


@pytest.mark.timeout(60)
def test_walmgr_one_shot_gives_up_on_a_dead_controller_and_frees_the_registry(tmp_path: Path) -> None:
    [port] = free_ports(1)
    cfg = _config(tmp_path, metadata=f"controller://127.0.0.1:{port}")

    async def main() -> None:
        mgr = Walmgr(cfg, store=LocalDirStore(tmp_path / "objects", fsync=False))
        try:
            with pytest.raises(ControllerUnavailableError, match="no snapshot within 300 ms"):
                await mgr.start(metadata_timeout_ms=300)
        finally:
            await mgr.stop()

    asyncio.run(main())
    with Registry(cfg.registry):  # the lock was released
        pass
