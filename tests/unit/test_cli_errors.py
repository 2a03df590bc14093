"""Wrong input to the commands: a clear message and exit code 2, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from partlog.tools.cli import main


def test_cluster_with_a_bad_store(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cluster", "--store", "ftp://x"]) == 2  # refused before any broker starts
    assert "scheme must be file:// or s3://" in capsys.readouterr().err


def test_cluster_refuses_non_positive_sizes() -> None:
    with pytest.raises(SystemExit) as ei:
        main(["cluster", "--azs", "0"])
    assert ei.value.code == 2


def test_broker_with_bad_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cluster = tmp_path / "c.toml"
    cluster.write_text('cluster_id = "0c0ffee0-0000-4000-8000-000000000013"\n[[brokers]]\nid = 1\naz = "a"\nport = 1\n')
    assert main(["broker", "--cluster", str(cluster), "--id", "2", "--data-dir", str(tmp_path)]) == 2
    assert "no broker 2" in capsys.readouterr().err
    assert main(["broker", "--cluster", str(cluster), "--id", "1", "--data-dir", str(tmp_path), "--store", "x://"]) == 2
    assert "scheme" in capsys.readouterr().err
    cluster.write_text("not toml [")
    assert main(["broker", "--cluster", str(cluster), "--id", "1", "--data-dir", str(tmp_path)]) == 2
    assert "c.toml" in capsys.readouterr().err


def test_broker_needs_exactly_one_metadata_source(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["broker", "--id", "1", "--data-dir", str(tmp_path)]) == 2
    assert "exactly one of --cluster FILE, --controller HOST:PORT and --metadata etcd:" in capsys.readouterr().err
    assert main(["broker", "--controller", "127.0.0.1:1", "--id", "1", "--data-dir", str(tmp_path)]) == 2
    assert "--controller needs --az and --port" in capsys.readouterr().err
    args = ["broker", "--controller", "nohost", "--az", "a", "--port", "9", "--id", "1", "--data-dir", str(tmp_path)]
    assert main(args) == 2
    assert "expected HOST:PORT, got 'nohost'" in capsys.readouterr().err


def test_controller_and_topics_with_bad_arguments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as ei:
        main(["controller", "--data-dir", str(tmp_path), "--session-timeout-ms", "0"])
    assert ei.value.code == 2
    assert main(["topics", "create", "t", "--controller", "x:y", "--partitions", "1"]) == 2
    assert "expected HOST:PORT" in capsys.readouterr().err
    with pytest.raises(SystemExit) as ei:
        main(["topics", "create", "t", "--controller", "h:1", "--partitions", "0"])
    assert ei.value.code == 2
    with pytest.raises(SystemExit) as ei:
        main(["cluster", "--kill-broker-every", "-1"])
    assert ei.value.code == 2


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--kafka-protocols", "PLAINTEXT,FOO"], "--kafka-protocols: 'FOO' is not a security protocol"),
        (["--kafka-protocols", "SSL,ssl"], "--kafka-protocols: SSL is named twice"),
        (["--kafka-protocols", "SSL"], "listener SSL://127.0.0.1:0: needs TLS files"),
        (["--kafka-ssl-cert", "/nonexistent/c.pem"], "--kafka-ssl-cert and --kafka-ssl-key go together"),
        (["--kafka-sasl-mechanisms", "GSSAPI"], "sasl.enabled.mechanisms GSSAPI: each one of"),
    ],
)
def test_cluster_refuses_bad_kafka_listener_flags(
    args: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["cluster", "--serve", *args]) == 2  # before any broker starts
    err = capsys.readouterr().err
    assert said in err and err.count("\n") == 1 and "Traceback" not in err, err
