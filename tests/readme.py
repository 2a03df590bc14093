"""The README's code blocks, for the tests that run them as written."""

from __future__ import annotations

import re

from tests.paths import REPO

README = REPO / "README.md"


def section_code(title: str) -> str:
    """The one ```python block of the README's ``## title`` section."""
    text = README.read_text()
    section = text.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]
    [code] = re.findall(r"```python\n(.*?)```", section, re.S)
    return str(code)
