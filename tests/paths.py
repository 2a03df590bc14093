"""The repository's root, for tests that read its files or run its modules.

Test modules sit one directory deeper than this file (``tests/<tier>/``), so
they take the root from here rather than counting parents themselves."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
