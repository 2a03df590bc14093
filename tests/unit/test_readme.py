"""The README's "Using the store" snippet runs as written (issue 13,
newcomer polish: it used an undefined ``header`` and ``file_size``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.readme import section_code


def test_using_the_store_snippet_runs_as_written(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", section_code("Using the store")],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "NONE 0"


