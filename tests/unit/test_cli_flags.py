"""The ranges of ``partlog``'s numeric flags are argparse types
(partlog/tools/cmd/flags.py): a bad value is refused while the line is
parsed, with one line naming the subcommand and the flag, exit status 2."""

from __future__ import annotations

import argparse

import pytest

from partlog.tools.cli import main
from partlog.tools.cmd.flags import (
    int_in,
    non_negative_float,
    non_negative_int,
    positive_float,
    positive_int,
    positive_int_at_most,
)


def _refused(parse: object, text: str) -> str:
    assert callable(parse)
    with pytest.raises(argparse.ArgumentTypeError) as ei:
        parse(text)
    return str(ei.value)


def test_the_types_keep_the_comparisons_and_words_of_the_flags() -> None:
    assert positive_int("1") == 1 and _refused(positive_int, "0") == "must be > 0"
    assert non_negative_int("0") == 0 and _refused(non_negative_int, "-1") == "must be >= 0"
    assert positive_float("0.5") == 0.5 and _refused(positive_float, "0") == "must be > 0"
    assert non_negative_float("0") == 0.0 and _refused(non_negative_float, "-0.5") == "must be >= 0"
    port = int_in(0, 65_535)
    assert port("0") == 0 and port("65535") == 65_535
    assert _refused(port, "65536") == "must be in [0, 65535], got 65536"
    timeout = positive_int_at_most(100)
    assert timeout("100") == 100
    assert _refused(timeout, "0") == "must be > 0"
    assert _refused(timeout, "101") == "must be in [1, 100], got 101"
    # Not a number: argparse's own words for type=int and type=float.
    assert _refused(positive_int, "1e8") == "invalid int value: '1e8'"
    assert _refused(positive_float, "x") == "invalid float value: 'x'"


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["cluster", "--azs", "0"], "partlog cluster: argument --azs: must be > 0 (see partlog cluster --help)"),
        (["cluster", "--kill-broker-every", "-1"], "partlog cluster: argument --kill-broker-every: must be >= 0"),
        (["bench", "commit", "--rss-batches", "-1"], "partlog bench commit: argument --rss-batches: must be >= 0"),
        (["controller", "--data-dir", "d", "--port", "70000"], "argument --port: must be in [0, 65535], got 70000"),
        (["broker", "--id", "-1", "--data-dir", "d"], "argument --id: must be in [0, 2147483647], got -1"),
        (["broker", "--id", "1", "--data-dir", "d", "--handshakes-max", "0"], "argument --handshakes-max: must be > 0"),
        (["produce", "t", "--bootstrap-server", "h:1", "--timeout-ms", "0"], "argument --timeout-ms: must be > 0"),
        (["consume", "t", "--bootstrap-server", "h:1", "--max-messages", "0"], "argument --max-messages: must be > 0"),
        (["topics", "create", "t", "--partitions", "0"], "partlog topics create: argument --partitions: must be > 0"),
        (["cluster", "--message-bytes", "1e8"], "partlog cluster: argument --message-bytes: invalid int value: '1e8'"),
        (["cluster", "--tiering-segment-ms", "-1"], "partlog cluster: argument --tiering-segment-ms: must be >= 0"),
        (
            ["broker", "--id", "1", "--data-dir", "d", "--transaction-max-timeout-ms", "0"],
            "argument --transaction-max-timeout-ms: must be > 0",
        ),
    ],
)
def test_a_value_out_of_range_is_one_line_and_exit_2(
    argv: list[str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as ei:
        main(argv)
    assert ei.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and line in err, err


def test_cluster_options_out_of_range_are_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    """Bounds checked by ClusterOptions (not argparse), before anything starts."""
    assert main(["cluster", "--tiering-segment-ms", "1000", "--tiering-segment-bytes", "1000"]) == 2
    err = capsys.readouterr().err
    assert err == "partlog cluster: tiering-segment-bytes must be in [1,048,576, 2,147,483,647], got 1,000\n", err


def test_the_broker_session_timeout_is_bounded_and_its_help_names_the_default(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from partlog.tools.cluster_options import DEMO_BROKER_SESSION_TIMEOUT_MS

    assert main(["cluster", "--broker-session-timeout-ms", "1000"]) == 2
    err = capsys.readouterr().err
    assert err == "partlog cluster: broker-session-timeout-ms must be in [2,000, 60,000], got 1,000\n", err
    with pytest.raises(SystemExit):
        main(["cluster", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert f"broker.session.timeout.ms; default {DEMO_BROKER_SESSION_TIMEOUT_MS:,})" in out, out
