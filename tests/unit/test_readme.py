"""The "Using the store" page's store example runs as written (it once used
an undefined ``header`` and ``file_size``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.readme import USING_THE_STORE, section_code


def test_using_the_store_snippet_runs_as_written(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", section_code("Using the store", USING_THE_STORE)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "NONE 0"
