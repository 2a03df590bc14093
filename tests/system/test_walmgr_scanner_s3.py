"""walmgr's scanner: every case of tests/walmgr_scanner_cases.py against
S3Store on a real S3 server (SeaweedFS); the same cases against a
LocalDirStore are tests/unit/test_walmgr_scanner.py."""

from __future__ import annotations

import pytest

from partlog.wal.s3_store import S3Store

# The cases (and the registry fixture), run against this module's store.
from tests.walmgr_scanner_cases import *  # noqa: F403
from tests.walmgr_scanner_cases import CountingStore


@pytest.fixture
def store(s3_bucket: S3Store) -> CountingStore:
    return CountingStore(s3_bucket)
