"""A command that cannot reach its controller: a clear message and exit code 1."""

from __future__ import annotations

import pytest

from partlog.tools.cli import main
from tests.cluster_helpers import free_ports


def test_topics_create_gives_up_on_an_unreachable_controller(capsys: pytest.CaptureFixture[str]) -> None:
    [port] = free_ports(1)  # nobody listens there
    args = ["topics", "create", "t", "--controller", f"127.0.0.1:{port}", "--partitions", "1", "--timeout-ms", "300"]
    assert main(args) == 1
    assert "no snapshot within 300 ms" in capsys.readouterr().err
