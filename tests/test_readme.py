"""The snippets a newcomer copies first run as written: the README's Kafka
client example (against a cluster) and the "Using the store" page's store
example (it once used an undefined ``header`` and ``file_size``)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
USING_THE_STORE = ROOT / "docs" / "using-the-store.md"


def _section_code(title: str, page: Path = README) -> str:
    """The one python block of ``page``'s section ``title`` (a level-1 title
    stands for the whole page)."""
    text = page.read_text()
    if not text.startswith(f"# {title}\n"):
        text = text.split(f"## {title}\n", 1)[1]
    section = text.split("\n## ", 1)[0]
    [code] = re.findall(r"```python\n(.*?)```", section, re.S)
    return str(code)


def test_using_the_store_snippet_runs_as_written(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _section_code("Using the store", USING_THE_STORE)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "NONE 0"


def test_the_kafka_clients_snippet_runs_against_a_cluster(tmp_path: Path) -> None:
    from tests.kafka_helpers import ClusterThread

    cluster = ClusterThread(str(tmp_path / "cluster"))
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _section_code("Kafka clients"), cluster.bootstrap],
            capture_output=True,
            text=True,
            timeout=180,
            cwd=tmp_path,
        )
    finally:
        cluster.close()
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "consumed 100"
