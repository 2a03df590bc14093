"""The embedding documentation stays true: examples/embed_broker.py runs and
verifies what it produced, and every ```python block of docs/embedding.md
compiles; blocks fenced ```python runnable also run, each in a fresh
interpreter."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import REPO

ROOT = REPO
EXAMPLE = ROOT / "examples" / "embed_broker.py"
DOC = ROOT / "docs" / "embedding.md"
TIMEOUT_S = 120

# ```python or ```python runnable, up to the closing fence at line start.
_BLOCK = re.compile(r"^```python(?P<runnable>[ \t]+runnable)?[ \t]*\n(?P<code>.*?)^```[ \t]*$", re.M | re.S)


def _blocks() -> list[tuple[int, bool, str]]:
    """(line number, runnable, code) of every python block in the doc."""
    text = DOC.read_text(encoding="utf-8")
    return [
        (text.count("\n", 0, m.start()) + 1, m.group("runnable") is not None, m.group("code"))
        for m in _BLOCK.finditer(text)
    ]


def _params() -> list[object]:
    return [
        pytest.param(line, runnable, code, id=f"line{line}-{'run' if runnable else 'compile'}")
        for line, runnable, code in _blocks()
    ]


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT_S, check=False
    )


def test_example_runs_and_verifies(tmp_path: Path) -> None:
    proc = _run([str(EXAMPLE)], tmp_path)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    lines = proc.stdout.splitlines()
    # Offsets are deterministic: contiguous per partition, in produce order.
    for expected in [
        "reply 0: demo-0 NONE base_offset=0",
        "reply 0: demo-1 NONE base_offset=0",
        "reply 1: demo-0 NONE base_offset=3",
        "reply 2: demo-1 NONE base_offset=2",
        "commit 3 batch(es) to broker 1",
        "commit 1 batch(es) to broker 1",
        "fetch: 4 batches from 2 objects, 2 GETs",
        "record demo-0@0: a0",
        "record demo-0@4: a4",
        "record demo-1@2: b2",
        "file_usage: 2 WAL objects, 4 live batches",
        "verified 8 records",
    ]:
        assert expected in lines, f"missing {expected!r} in:\n{proc.stdout}"
    uploads = [line for line in lines if line.startswith("upload ")]
    assert len(uploads) == 2 and all(line.endswith(": ok") for line in uploads)
    assert not any("MISMATCH" in line or "FAILED" in line for line in lines)


def test_doc_has_runnable_blocks() -> None:
    blocks = _blocks()
    assert len(blocks) >= 5, "docs/embedding.md lost its code blocks"
    assert sum(runnable for _, runnable, _ in blocks) >= 4


@pytest.mark.parametrize(("line", "runnable", "code"), _params())
def test_doc_block(line: int, runnable: bool, code: str, tmp_path: Path) -> None:
    compile(code, f"{DOC.name}:{line}", "exec")
    if runnable:
        proc = _run(["-c", code], tmp_path)
        assert proc.returncode == 0, (
            f"{DOC.name} block at line {line} failed:\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
        )
