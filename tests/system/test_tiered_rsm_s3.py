"""``ObjectStoreRsm`` on SeaweedFS: the round trip tests/unit/test_tiered_remote_storage.py
runs on ``LocalDirStore`` (copy, ranged fetches, index fetches, delete twice)."""

from __future__ import annotations

from partlog.wal.s3_store import S3Store
from tests.tiered_cases import rsm_round_trip, rsm_single_batch


def test_rsm_round_trip_on_s3(s3_bucket: S3Store) -> None:
    rsm_round_trip(s3_bucket)


def test_rsm_single_batch_segment_on_s3(s3_bucket: S3Store) -> None:
    rsm_single_batch(s3_bucket)
