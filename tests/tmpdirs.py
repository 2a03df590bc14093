"""Temporary directories of module fixtures, removed when the fixture ends.

pytest keeps a ``tmp_path_factory`` directory until the run ends, and an
etcd member preallocates 128 MB of WAL: a dozen module clusters on etcd held
several GiB of CI's disk at once (stop 41's CI filled /tmp)."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def module_dir(factory: pytest.TempPathFactory, name: str) -> Iterator[Path]:
    """``factory.mktemp(name)``, removed (whatever is in it) on exit."""
    d = factory.mktemp(name)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)
