"""The CI subset of librdkafka's own test suite against a local partlog
cluster (``scripts/conformance --subset ci``; docs/design/conformance.md).
The first run on a machine fetches librdkafka's source through npm and
builds its test runner (cached under ~/.cache/partlog); later runs reuse it."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.serial  # the suite's own timeouts assume a machine that is not saturated
@pytest.mark.timeout(1_800)
def test_librdkafka_ci_subset_passes_against_partlog(tmp_path: Path) -> None:
    missing = [tool for tool in ("gcc", "g++", "make") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} missing: librdkafka's test runner cannot be built")
    r = subprocess.run(
        [str(ROOT / "scripts" / "conformance"), "--subset", "ci", "--keep-going", "--json", "--log-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode in (0, 1), r.stderr
    report = json.loads(r.stdout)
    failed = [f"{t['test']}: {t['reason']}" for t in report["tests"] if t["result"] == "fail"]
    assert not failed, f"{failed}; logs in {tmp_path}"
    assert report["counts"]["pass"] >= 10, report["counts"]
