"""The code blocks a newcomer copies first (the README's and the "Using the
store" page's), for the tests that run them as written."""

from __future__ import annotations

import re
from pathlib import Path

from tests.paths import REPO

README = REPO / "README.md"
USING_THE_STORE = REPO / "docs" / "using-the-store.md"


def section_code(title: str, page: Path = README) -> str:
    """The one ```python block of ``page``'s section ``title`` (a level-1 title
    stands for the whole page)."""
    text = page.read_text()
    if not text.startswith(f"# {title}\n"):
        text = text.split(f"## {title}\n", 1)[1]
    section = text.split("\n## ", 1)[0]
    [code] = re.findall(r"```python\n(.*?)```", section, re.S)
    return str(code)
