"""walmgr's paced store (issue 18) on S3 (SeaweedFS): the throttled scan of
tests/unit/test_walmgr_paced_store.py, its bucket a real S3 bucket."""

from __future__ import annotations

import pytest

from partlog.wal.objectstore import ObjectStore
from partlog.wal.s3_store import S3Store
from tests.unit.test_walmgr_paced_store import (
    test_a_throttled_bucket_is_scanned_whole_with_backoff as test_a_throttled_bucket_is_scanned_whole_with_backoff,
)


@pytest.fixture
def bucket(s3_bucket: S3Store) -> ObjectStore:
    return s3_bucket
