"""scripts/conformance's parsing of librdkafka's test table and of its test
runner's summary (partlog.tools.conformance), without building anything."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from partlog.tools.conformance import (
    CAP_S_DEFAULT,
    CAP_S_MIN,
    NOT_APPLICABLE,
    SUITE_SCENARIO,
    SUITE_TIMEOUT_MULTIPLIER,
    ConformanceError,
    cap_for,
    conf_for,
    parse_suite,
    scenario_of,
    select,
    static_reason,
)
from partlog.tools.conformance_rows import CAP_MARK, SUBTESTS, Row, SuiteTest, number_rows, parse_summary, rows_of
from partlog.tools.conformance_security import SECURE_SCENARIOS, prepare

TEST_C = """
#define _TEST(NAME, FLAGS, ...) { .name = #NAME }
_TEST_DECL(0001_multiobj);
struct test tests[] = {
    {.name = "<MAIN>", .flags = TEST_F_LOCAL},
    _TEST(0000_unittests,
          TEST_F_LOCAL,
          _THRES(.ucpu = 100.0, .scpu = 20.0, .rss = 900.0)),
    _TEST(0001_multiobj, 0),
    _TEST(0028_long_topicnames,
          TEST_F_KNOWN_ISSUE,
          TEST_BRKVER(0, 9, 0, 0),
          .extra = "https://github.com/confluentinc/librdkafka/issues/529"),
    _TEST(0055_producer_latency, TEST_F_KNOWN_ISSUE_WIN32),
    _TEST(0107_topic_recreate,
          0,
          TEST_BRKVER_TOPIC_ADMINAPI,
          .scenario = "noautocreate"),
    _TEST(0103_transactions, 0, TEST_BRKVER(0, 11, 0, 0), .scenario = "default,ak23"),
    _TEST(0104_old_broker, 0, .scenario = "ak23"),
    _TEST(0129_fetch_aborted_msgs, 0, TEST_BRKVER(0, 11, 0, 0)),
    _TEST(0130_lowlatency_named, 0, .scenario = "lowlatency"),
    _TEST(8001_fetch_from_follower_mock_manual, TEST_F_MANUAL),
    _TEST(0171_share_consumer_consume, 0),
    {NULL}};
"""


def test_parse_suite_reads_each_entry_with_its_flags_and_scenario() -> None:
    tests = {t.name: t for t in parse_suite(TEST_C)}
    assert list(tests) == [
        "0000_unittests",
        "0001_multiobj",
        "0028_long_topicnames",
        "0055_producer_latency",
        "0107_topic_recreate",
        "0103_transactions",
        "0104_old_broker",
        "0129_fetch_aborted_msgs",
        "0130_lowlatency_named",
        "8001_fetch_from_follower_mock_manual",
        "0171_share_consumer_consume",
    ]
    assert tests["0000_unittests"].local
    assert tests["0028_long_topicnames"].known_issue
    assert not tests["0055_producer_latency"].known_issue  # only on Windows
    assert tests["0107_topic_recreate"].scenario == "noautocreate"
    assert tests["8001_fetch_from_follower_mock_manual"].manual


def test_static_reason_runs_broker_backed_tests_of_the_scenarios_partlog_makes() -> None:
    reasons = {t.name: static_reason(t) for t in parse_suite(TEST_C)}
    assert reasons["0001_multiobj"] is None
    assert reasons["0055_producer_latency"] == NOT_APPLICABLE["0055"]  # by design, not a Windows-only issue
    assert reasons["0103_transactions"] is None  # default is one of its scenarios
    assert reasons["0000_unittests"] is not None and "local" in reasons["0000_unittests"]
    assert reasons["0107_topic_recreate"] is None
    assert reasons["0104_old_broker"] == "needs scenario ak23"
    scenarios = {t.name: scenario_of(t) for t in parse_suite(TEST_C)}
    assert scenarios["0103_transactions"] == "default"
    assert scenarios["0107_topic_recreate"] == "noautocreate"
    # 0129 runs the default scenario on partlog's 50 ms commit cluster; a
    # suite entry naming "lowlatency" itself is no scenario partlog makes.
    assert scenarios["0129_fetch_aborted_msgs"] == "lowlatency"
    assert SUITE_SCENARIO["lowlatency"] == "default"
    assert reasons["0130_lowlatency_named"] == "needs scenario lowlatency"
    assert reasons["0171_share_consumer_consume"] == NOT_APPLICABLE["0171"]


def test_parse_summary_maps_states_and_keeps_the_reason() -> None:
    out = (
        "\x1b[36m[0001_multiobj / 1.8s] noise\x1b[0m\n"
        "|\x1b[32m <MAIN>                                   |     PASSED |   2.000s \x1b[0m|\n"
        "|\x1b[32m 0001_multiobj                            |     PASSED |   1.819s \x1b[0m|\n"
        "|\x1b[31m 0019_list_groups                         |     FAILED |  12.500s \x1b[0m|"
        "\x1b[31m 0019_list_groups.c:100: group not found\x1b[0m\n"
        "|\x1b[36m 0091_max_poll_interval_timeout           |    SKIPPED |   0.000s \x1b[0m|"
        "\x1b[36m not applicable for broker version 4.0.0.0\x1b[0m\n"
    )
    rows = parse_summary(out)
    assert set(rows) == {"0001_multiobj", "0019_list_groups", "0091_max_poll_interval_timeout"}
    assert (rows["0001_multiobj"].result, rows["0001_multiobj"].seconds) == ("pass", 1.819)
    assert rows["0019_list_groups"].result == "fail"
    assert rows["0019_list_groups"].reason == "0019_list_groups.c:100: group not found"
    assert rows["0091_max_poll_interval_timeout"].result == "n/a"
    assert "broker version" in rows["0091_max_poll_interval_timeout"].reason


def _args(tests: str = "", subset: str | None = None) -> argparse.Namespace:
    return argparse.Namespace(tests=tests, subset=subset)


def test_select_takes_test_numbers_and_refuses_unknown_ones() -> None:
    suite = parse_suite(TEST_C)
    assert [t.name for t in select(suite, _args("0001,0107"))] == ["0001_multiobj", "0107_topic_recreate"]
    assert select(suite, _args()) == suite
    with pytest.raises(ConformanceError, match="no such test"):
        select(suite, _args("0002"))
    with pytest.raises(ConformanceError, match="4-digit"):
        select(suite, _args("1"))
    assert all(isinstance(t, SuiteTest) for t in select(suite, _args(subset="ci")))


def test_rows_of_an_aborted_runner_take_the_banners_and_the_first_failure() -> None:
    suite = {t.name: t for t in parse_suite(TEST_C)}
    entries = [suite["0001_multiobj"], suite["0055_producer_latency"], suite["0103_transactions"]]
    out = (
        "[0001_multiobj / 1.8s] 0001_multiobj: duration 1818.780ms\n"
        "[0001_multiobj / 1.8s] ================= Test 0001_multiobj PASSED =================\n"
        "[0055_producer_latency / 5.0s] TEST FAILURE\n"
        '### Test "0055_producer_latency (sub:12)" failed at test.c:6846:test_CreateTopics_simple() at now: ###\n'
        "Failed to create 100 topic(s): Broker: Request timed out\n"
        "test-runner: test.c:7706: test_fail0: Assertion `0' failed.\n"
    )
    rows = rows_of(entries, out, 9.0)
    assert [(r.result, r.reason) for r in rows] == [
        ("pass", ""),
        ("fail", "test.c:6846: Failed to create 100 topic(s): Broker: Request timed out"),
        ("fail", "not reached: the runner aborted"),
    ]
    assert rows[0].seconds == 1.81878
    capped = rows_of(entries[2:], out + f"\n{CAP_MARK} 120s\n", 120.0)
    assert capped[0].reason == "over its cap of 120s: not reached: the runner aborted"


def test_a_long_number_gets_its_minimum_cap_within_the_runs_budget() -> None:
    assert cap_for("0001", CAP_S_DEFAULT, 10_000) == CAP_S_DEFAULT
    assert cap_for("0113", CAP_S_DEFAULT, 10_000) == CAP_S_MIN["0113"] > CAP_S_DEFAULT
    assert cap_for("0113", 2_000, 10_000) == 2_000
    assert cap_for("0113", CAP_S_DEFAULT, 300) == 300  # the run's --total-s still bounds it
    assert cap_for("0001", CAP_S_DEFAULT, -5) == 1.0


def test_a_number_with_a_timeout_multiplier_gets_its_own_conf(tmp_path: Path) -> None:
    conf = tmp_path / "test-default.conf"
    base = f"metadata.broker.list=127.0.0.1:9092\ntest.timeout.multiplier={SUITE_TIMEOUT_MULTIPLIER:g}\n"
    conf.write_text(base)
    assert conf_for("0001", conf) == conf
    own = conf_for("0081", conf)
    assert own != conf and own.read_text() == "metadata.broker.list=127.0.0.1:9092\ntest.timeout.multiplier=3\n"
    assert conf.read_text() == base
    assert SUITE_TIMEOUT_MULTIPLIER == 2.0  # trivup's, as LibrdkafkaTestApp.py writes it


def test_the_ssl_and_sasl_tests_run_on_a_cluster_of_their_own_scenario() -> None:
    table = """struct test tests[] = {
    _TEST(0097_ssl_verify, 0),
    _TEST(0097_ssl_verify_local, TEST_F_LOCAL),
    _TEST(0135_sasl_credentials, 0),
    _TEST(0142_reauthentication, 0, TEST_BRKVER(2, 2, 0, 0)),
    {NULL}};"""
    tests = {t.name: t for t in parse_suite(table)}
    assert scenario_of(tests["0097_ssl_verify"]) == "ssl"
    assert scenario_of(tests["0135_sasl_credentials"]) == "sasl"
    assert scenario_of(tests["0142_reauthentication"]) == "sasl"
    assert all(static_reason(tests[n]) is None for n in ("0097_ssl_verify", "0135_sasl_credentials"))
    assert static_reason(tests["0097_ssl_verify_local"]) is not None
    # They run in the suite's default scenario (TEST_SCENARIO), with the
    # listener their partlog scenario gives them.
    assert SUITE_SCENARIO["ssl"] == SUITE_SCENARIO["sasl"] == "default"
    assert SECURE_SCENARIOS == {"ssl": "SSL", "sasl": "SASL_PLAINTEXT"}


def test_the_ssl_scenario_makes_every_file_the_suite_names(tmp_path: Path) -> None:
    secure = prepare("ssl", tmp_path)
    for name in ("SSL_ca_pem", "SSL_ca_der", "SSL_all_cas_pem", "SSL_pub_pem", "SSL_pub_der", "SSL_priv_pem",
                 "SSL_priv_der", "SSL_pkcs"):  # fmt: skip
        assert Path(secure.env[name]).is_file(), name
    assert secure.env["SSL_client_auth"] == "required"
    assert Path(secure.env["SSL_all_cas_pem"]).read_text().count("BEGIN CERTIFICATE") == 2
    assert "ENCRYPTED" in Path(secure.env["SSL_priv_pem"]).read_text()  # ssl.key.password opens it
    assert f"ssl.key.password={secure.env['SSL_password']}" in secure.conf_lines
    assert "--kafka-ssl-client-auth=required" in secure.cluster_flags
    sasl = prepare("sasl", tmp_path)
    assert sasl.user is not None and f"sasl.password={sasl.user[1]}" in sasl.conf_lines
    with pytest.raises(ValueError):
        prepare("default", tmp_path)


def _summary(name: str, state: str, secs: float = 1.0) -> str:
    return f"| {name} | {state} | {secs:.3f}s | \n"


def test_a_number_run_per_subtests_filter_gets_one_merged_row() -> None:
    [t] = parse_suite("struct test tests[] = {\n    _TEST(0142_reauthentication, 0),\n    {NULL}};")
    patterns, why = SUBTESTS["0142"]
    assert len(patterns) > 1 and all(p.endswith(":") and "share" not in p for p in patterns)
    seen: list[tuple[str | None, int]] = []

    def runs(states: list[str]) -> list[Row]:
        def run(subtests: str | None, i: int) -> tuple[str, float]:
            seen.append((subtests, i))
            return _summary(t.name, states[i]), 2.0

        return number_rows([t], "0142", run)

    [row] = runs(["PASSED"] * len(patterns))
    assert (row.result, row.reason) == ("pass", why) and row.seconds == len(patterns) * 1.0
    assert seen == [(p, i) for i, p in enumerate(patterns)]
    [row] = runs(["PASSED", "FAILED"] + ["PASSED"] * (len(patterns) - 2))
    assert row.result == "fail" and row.reason.startswith(f"SUBTESTS={patterns[1]}: ")
    [row] = runs(["SKIPPED"] * len(patterns))
    assert row.result == "n/a"
    # A number without filters runs once, unfiltered.
    seen.clear()
    [plain] = parse_suite("struct test tests[] = {\n    _TEST(0001_multiobj, 0),\n    {NULL}};")

    def once(subtests: str | None, i: int) -> tuple[str, float]:
        seen.append((subtests, i))
        return _summary(plain.name, "PASSED"), 1.0

    [row] = number_rows([plain], "0001", once)
    assert row.result == "pass" and seen == [(None, 0)]
