"""Wrong input to the commands: a clear message and exit code 2, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from partlog.cli import main


def test_cluster_with_a_bad_store(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cluster", "--store", "ftp://x"]) == 2  # refused before any broker starts
    assert "scheme must be file:// or s3://" in capsys.readouterr().err


def test_cluster_refuses_non_positive_sizes() -> None:
    with pytest.raises(SystemExit) as ei:
        main(["cluster", "--azs", "0"])
    assert ei.value.code == 2


def test_broker_with_bad_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cluster = tmp_path / "c.toml"
    cluster.write_text('[[brokers]]\nid = 1\naz = "a"\nport = 1\n')
    assert main(["broker", "--cluster", str(cluster), "--id", "2", "--data-dir", str(tmp_path)]) == 2
    assert "no broker 2" in capsys.readouterr().err
    assert main(["broker", "--cluster", str(cluster), "--id", "1", "--data-dir", str(tmp_path), "--store", "x://"]) == 2
    assert "scheme" in capsys.readouterr().err
    cluster.write_text("not toml [")
    assert main(["broker", "--cluster", str(cluster), "--id", "1", "--data-dir", str(tmp_path)]) == 2
    assert "c.toml" in capsys.readouterr().err
