"""walmgr's deletion safety (design.md, "Deletion safety") on
SeaweedFS: nothing referenced is deleted under concurrent faults, and keys
that are not WAL keys of the prefix are never planned or deleted (the parts
are in tests/walmgr_safety_cases.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from partlog.wal.s3_store import S3Store
from tests.s3server import ACCESS_KEY_ID, SECRET_ACCESS_KEY
from tests.walmgr_helpers import listed
from tests.walmgr_safety_cases import (
    PREFIX,
    check_scan_json,
    safety_under_faults,
    scan_json,
    unknown_keys_are_never_deleted,
)


@pytest.mark.timeout(120)
def test_nothing_referenced_is_deleted_under_faults_on_seaweedfs(tmp_path: Path, s3_bucket: S3Store) -> None:
    """The smaller variant against a real S3 server (no restart)."""
    url = f"s3://{s3_bucket.bucket}?endpoint={s3_bucket.config.endpoint_url}"
    asyncio.run(safety_under_faults(tmp_path, s3_bucket, url, records=150, restart=False, seed=11))


def test_unknown_key_shapes_and_sibling_prefixes_are_never_deleted_seaweedfs(
    tmp_path: Path, s3_bucket: S3Store, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"s3://{s3_bucket.bucket}?endpoint={s3_bucket.config.endpoint_url}"
    weird = asyncio.run(unknown_keys_are_never_deleted(tmp_path, s3_bucket, url))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_ACCESS_KEY)
    out = scan_json(capsys, ["--store", url, "--registry", str(tmp_path / "registry")])
    check_scan_json(out, weird)
    assert PREFIX in listed(s3_bucket)
