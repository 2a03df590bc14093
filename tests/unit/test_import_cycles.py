"""Dependencies point down: no import cycle among partlog's, walmgr's and
spark's modules (tests/import_cycles.py; ARCHITECTURE.md, "Layers")."""

from __future__ import annotations

import subprocess
import sys

from tests.paths import REPO


def test_no_import_cycles() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "tests.import_cycles", "--root", str(REPO), "partlog", "walmgr", "spark"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "[runtime]" in out.stdout and "0 cycle(s)" in out.stdout, out.stdout
