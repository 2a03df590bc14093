"""partlog's processes cap glibc's malloc arenas (partlog.util.malloc)."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from partlog.util.malloc import limit_malloc_arenas


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_the_cap_applies_on_glibc() -> None:
    # In a child: mallopt changes this whole process.
    out = subprocess.run(
        [sys.executable, "-c", "from partlog.util.malloc import limit_malloc_arenas as f; print(f())"],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert out.stdout.strip() == "True"


def test_an_operator_setting_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_ARENA_MAX", "8")
    assert limit_malloc_arenas() is True  # left to the environment: nothing called
