"""The fan-out simulator (issue 7): the analytic cases it must reproduce on
the real pipeline and store, determinism, and the CLI's output contract.

Runs are shortened with duration overrides; nothing here asserts a timing.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from simulations.cli import main
from simulations.metrics import DesignResult
from simulations.runner import run_scenario, to_json
from simulations.scenario import (
    Design,
    FailureMode,
    GetMode,
    Routing,
    Scenario,
    ScenarioError,
    load_scenario,
    shipped_scenarios,
)
from simulations.simulation import simulate
from simulations.topology import broker_azs, initial_metadata
from tests.paths import REPO

SEED = 7


def _partlog(name: str, routing: Routing, **overrides: object) -> DesignResult:
    return simulate(load_scenario(name, overrides), Design.PARTLOG, routing, SEED)


def test_shipped_scenarios_are_the_issues() -> None:
    assert set(shipped_scenarios()) >= {
        "balanced-3az",
        "imbalanced-2az",
        "leadership-change",
        "jun-100x100",
        "broker-failure",
    }
    for name in shipped_scenarios():
        load_scenario(name)


@pytest.mark.parametrize("brokers_per_az", [1, 2, 3])
def test_balanced_representatives_one_local_at_most_azs_minus_one_remote(brokers_per_az: int) -> None:
    r = _partlog("balanced-3az", Routing.AZ_REPRESENTATIVE, duration_s=8, brokers_per_az=brokers_per_az)
    azs = 3
    assert r.files > 50
    assert r.commit_local_max == 1
    assert r.commit_remote_max <= azs - 1
    # The local commit is one direct call, there whenever the file holds a
    # partition the broker leads (nearly always: its own AZ's producers send
    # those to it).
    assert all(f.local <= 1 and f.total >= 1 for f in r.file_commits)
    assert r.commit_local_mean > 0.8
    # ...and the representative bijection keeps each broker to one leader per other AZ.
    assert r.commit_same_az_mean == 0
    assert r.batches_failed == 0 and r.produce_requests_failed == 0


def test_imbalance_lone_broker_commits_between_one_and_three() -> None:
    r = _partlog("imbalanced-2az", Routing.AZ_REPRESENTATIVE, duration_s=15)
    lone = [b for b in r.per_broker if b.az == "az2"]
    assert len(lone) == 1
    [b] = lone
    assert b.files > 30
    assert b.remote_min >= 1 and b.remote_max <= 3
    # Its files really do reach all three az1 leaders most of the time.
    assert b.remote_mean > 2.5
    # az1 brokers: only the first one represents the lone leader in az1.
    az1 = [x for x in r.per_broker if x.az == "az1"]
    assert max(x.remote_max for x in az1) <= 1


def _expected_distinct(leader_counts: list[int], partitions: int, k: int) -> float:
    """E[distinct leaders] among k partitions drawn uniformly without
    replacement, broker b leading leader_counts[b] of them."""
    total = math.comb(partitions, k)
    return sum(1 - math.comb(partitions - m, k) / total for m in leader_counts)


def test_jun_any_broker_distinct_leaders_match_expectation() -> None:
    scenario = load_scenario("jun-100x100", {"duration_s": 4})
    r = simulate(scenario, Design.PARTLOG, Routing.ANY_BROKER, SEED)
    files = r.file_commits
    assert len(files) > 60
    [topic] = initial_metadata(scenario.cluster, random.Random(f"{SEED}/assignment")).topics()
    counts = list(Counter(topic.leaders).values())
    assert len(counts) == scenario.cluster.brokers == len(broker_azs(scenario.cluster))
    # A file's partitions are the union of independent uniform draws, so given
    # its size they are a uniform subset: the expectation conditions on it.
    diffs = [f.distinct_leaders - _expected_distinct(counts, scenario.cluster.partitions, f.partitions) for f in files]
    n = len(diffs)
    mean = sum(diffs) / n
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1))
    assert abs(mean) <= 4 * sd / math.sqrt(n) + 0.05, (mean, sd, n)
    # And it is the amplification the thread feared: dozens of commit RPCs.
    assert r.distinct_leaders_mean > 50
    # One commit RPC per distinct leader broker: that is what the pipeline
    # does.  distinct_leaders is counted from each file's footer partitions
    # and the broker's metadata, independently of the commits it sent.
    assert all(f.total == f.distinct_leaders for f in files)


def test_jun_representatives_cap_the_fanout() -> None:
    r = _partlog("jun-100x100", Routing.AZ_REPRESENTATIVE, duration_s=1.5)
    assert r.files > 100
    assert r.commit_local_max == 1
    # 100 brokers do not split evenly over 3 AZs (34/33/33): the first broker
    # of each 33-broker AZ represents two leaders of the 34-broker AZ.
    assert r.commit_remote_max <= 3
    assert r.commit_remote_mean < 2.1
    over = {f.broker_id for f in r.file_commits if f.remote == 3}
    azs = broker_azs(load_scenario("jun-100x100").cluster)
    assert over and all(azs[b] != "az1" for b in over)


def test_leadership_change_costs_extra_commits_until_clients_learn() -> None:
    scenario = load_scenario("leadership-change", {"duration_s": 24})
    move_s = scenario.events[0].at_s
    settle_s = move_s + (scenario.metadata.client_propagation_ms + scenario.metadata.broker_propagation_ms) / 1000
    r = simulate(scenario, Design.PARTLOG, Routing.AZ_REPRESENTATIVE, SEED)
    before = [f for f in r.file_commits if f.at_ms < move_s * 1000]
    window = [f for f in r.file_commits if move_s * 1000 + 100 < f.at_ms < settle_s * 1000]
    after = [f for f in r.file_commits if f.at_ms > settle_s * 1000 + 1000]
    assert before and window and after
    assert max(f.remote for f in before) <= 2
    # Representatives chosen for the old leaders now hold partitions of new ones.
    assert max(f.total for f in window) > 3
    assert max(f.remote for f in after) <= 2
    assert r.batches_failed == 0


def test_broker_failure_reshapes_representatives_after_fencing() -> None:
    scenario = load_scenario("broker-failure", {"duration_s": 30})
    dead = scenario.events[0].broker
    r = simulate(scenario, Design.PARTLOG, Routing.AZ_REPRESENTATIVE, SEED)
    # Requests to the dead representative are refused and retried (Kafka's
    # retries) until the fencing moves its role: none is lost.
    assert r.produce_requests_retried > 0
    assert r.produce_requests_failed == 0
    fenced_ms = next(ms for ms, what in r.events if "fenced" in what)
    settled_ms = fenced_ms + scenario.metadata.client_propagation_ms + 1000
    after = [f for f in r.file_commits if f.at_ms > settled_ms]
    assert after and all(f.broker_id != dead for f in after)
    # The dead broker's AZ is left with one broker, which now represents
    # both leaders of each other AZ (the imbalance case); the others still
    # represent one leader per other AZ.
    dead_az = broker_azs(scenario.cluster)[dead]
    lone = [f for f in after if broker_azs(scenario.cluster)[f.broker_id] == dead_az]
    others = [f for f in after if broker_azs(scenario.cluster)[f.broker_id] != dead_az]
    assert lone and others
    assert max(f.remote for f in lone) <= 4 and max(f.remote for f in lone) > 2
    assert max(f.remote for f in others) <= 2


def test_same_seed_same_output_different_seed_differs() -> None:
    scenario = load_scenario("imbalanced-2az", {"duration_s": 3})
    a = json.dumps(to_json(run_scenario(scenario, 3), timing=False))
    b = json.dumps(to_json(run_scenario(scenario, 3), timing=False))
    c = json.dumps(to_json(run_scenario(scenario, 4), timing=False))
    assert a == b
    assert a != c


def test_cli_json_contract_and_byte_identical_reruns(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    args = ["run", "balanced-3az", "--duration-s", "3", "--seed", "5", "--json"]
    assert main([*args, "--out", str(tmp_path)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["seed"] == 5 and doc["simulated_s"] == 3
    assert doc["wall_s"] > 0 and doc["speedup"] > 0  # present; never asserted as a timing
    assert [(d["design"], d["routing"]) for d in doc["designs"]] == [
        ("partlog", "az-representative"),
        ("partlog", "any-broker"),
        ("coordinator", "any-broker"),
        ("classic", "leader-only"),
    ]
    for d in doc["designs"]:
        assert {"design", "routing", "commit_rpcs_per_file", "cross_az_bytes_per_s", "produce_latency_ms"} <= set(d)
        assert set(d["cross_az_bytes_per_s"]) == {"data", "metadata"}
        meta = d["cross_az_metadata_bytes_per_s"]
        assert meta["commit_rpcs"] + meta["replication"] == pytest.approx(
            d["cross_az_bytes_per_s"]["metadata"], rel=1e-4
        )
        assert set(d["produce_latency_ms"]) == {"p50", "p99", "p999"}
        assert set(d["send_latency_ms"]) == {"p50", "p99", "p999"}
        assert d["replication_lag_ms"]["p99"] is not None  # every design, the coordinator too
        assert set(d["object_requests_per_s"]) == {"put", "get"}
        assert isinstance(d["monthly_cost_usd"], float)
        assert [w["after"] for w in d["failures_by_window"]] == ["start"]
    fanout = doc["designs"][0]["commit_rpcs_per_file"]
    assert {"local_mean", "remote_mean", "cross_az_mean", "remote_max", "distinct_leader_brokers_mean"} <= set(fanout)
    assert set(doc["designs"][0]["commit_rpcs_per_s"]) == {
        "network_received_per_broker_mean",
        "network_received_per_broker_max",
        "local_per_broker_mean",
        "local_per_broker_max",
        "coordinator",
    }
    coordinator = doc["designs"][2]
    assert coordinator["commit_rpcs_per_file"]["remote_max"] == 1  # one RPC per file
    assert coordinator["commit_rpcs_per_s"]["coordinator"] > 0
    assert coordinator["commit_rpcs_per_s"]["network_received_per_broker_max"] == 0
    assert (tmp_path / "result.json").exists()
    assert sorted(p.name for p in tmp_path.glob("*.png")) == [
        "commit_rpcs_per_file.png",
        "cross_az_bytes.png",
        "produce_latency.png",
        "timeline.png",
    ]

    assert main([*args, "--no-timing"]) == 0
    first = capsys.readouterr().out
    assert main([*args, "--no-timing"]) == 0
    assert capsys.readouterr().out == first
    assert "wall_s" not in first and "speedup" not in first


def test_scenario_errors_name_file_and_key(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[cluster]\npartitions = 10\nbrokers_per_azz = 2\n[[producers]]\naz = "az1"\nsends_per_s = 1\n')
    with pytest.raises(ScenarioError, match=r"bad\.toml: cluster\.brokers_per_azz: unknown key"):
        load_scenario(str(bad))
    bad.write_text('[cluster]\npartitions = 10\n[[producers]]\naz = "az9"\nsends_per_s = 1\n')
    with pytest.raises(ScenarioError, match=r"bad\.toml: producers\[0\]\.az: 'az9' is not one of"):
        load_scenario(str(bad))
    with pytest.raises(ScenarioError, match="no such scenario"):
        load_scenario("no-such-scenario")


def test_same_seed_same_output_across_processes_and_hash_seeds() -> None:
    """Two interpreters with different str hashing give the same bytes."""
    root = REPO
    args = [sys.executable, "-m", "simulations", "run", "leadership-change", "--duration-s", "2", "--json"]
    outs = []
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        done = subprocess.run([*args, "--no-timing"], cwd=root, env=env, capture_output=True, text=True, check=True)
        outs.append(done.stdout)
    assert outs[0] and outs[0] == outs[1]
    json.loads(outs[0])


def test_network_commit_rpcs_exclude_a_brokers_own_commits() -> None:
    r = _partlog("balanced-3az", Routing.AZ_REPRESENTATIVE, duration_s=6)
    n = len(r.per_broker)
    sent_remote = sum(f.remote for f in r.file_commits) / r.simulated_s
    sent_local = sum(f.local for f in r.file_commits) / r.simulated_s
    received = sum(b.network_commit_rpcs_received_per_s for b in r.per_broker)
    local = sum(b.local_commits_per_s for b in r.per_broker)
    # Commits still on the wire when the run ends are sent, not yet received
    # (none may be: the two sums then differ only in float rounding).
    assert 0.95 * sent_remote <= received <= sent_remote or received == pytest.approx(sent_remote)
    assert local == pytest.approx(sent_local)
    assert r.network_commit_rpcs_per_s_per_broker_mean == pytest.approx(received / n)
    assert r.local_commits_per_s_per_broker_mean == pytest.approx(local / n)


def _with(scenario: Scenario, *, mode: FailureMode | None = None, retries: bool | None = None) -> Scenario:
    """``scenario`` with every failure event in ``mode`` and producers'
    retries switched as given."""
    events = scenario.events
    if mode is not None:
        events = tuple(dataclasses.replace(e, mode=mode) for e in events)
    producers = scenario.producers
    if retries is not None:
        producers = tuple(dataclasses.replace(p, retries=retries) for p in producers)
    return dataclasses.replace(scenario, events=events, producers=producers)


@pytest.mark.parametrize("timeout_ms", [2000, 10_000])
def test_commits_to_a_blackholed_leader_time_out_after_the_rpc_timeout(timeout_ms: int) -> None:
    base = load_scenario("broker-failure", {"duration_s": 30, "commit_rpc_timeout_ms": timeout_ms})
    scenario = _with(base, mode=FailureMode.BLACKHOLE, retries=False)
    r = simulate(scenario, Design.PARTLOG, Routing.AZ_REPRESENTATIVE, SEED)
    fail_s = scenario.events[0].at_s
    [start, failed, fenced] = r.failure_windows
    assert (start.from_ms, failed.from_ms, fenced.from_ms) == (0, fail_s * 1000, fenced.from_ms)
    assert start.produce_requests_failed == 0
    timed_out = {w.after: w.produce_requests_failed_by_reason.get("request_timed_out", 0) for w in r.failure_windows}
    # Commits sent to the dead broker from 15 s on are answered timeout_ms later.
    if fail_s + timeout_ms / 1000 < fenced.from_ms / 1000:
        assert timed_out[failed.after] > 0
    else:
        assert timed_out[failed.after] == 0 and timed_out[fenced.after] > 0
    assert sum(w.produce_requests_failed for w in r.failure_windows) == r.produce_requests_failed > 0
    # A refused connection is learnt at once: no commit waits for the timeout.
    refused = simulate(_with(base, retries=False), Design.PARTLOG, Routing.AZ_REPRESENTATIVE, SEED)
    assert refused.produce_requests_failed > 0
    assert all("request_timed_out" not in w.produce_requests_failed_by_reason for w in refused.failure_windows)
    assert refused.latency_ms_p99 is not None and r.latency_ms_p99 is not None


def test_get_modes_count_the_readers_of_each_file() -> None:
    runs = {}
    for mode in GetMode:
        scenario = load_scenario("balanced-3az", {"duration_s": 2, "get_mode": mode.value})
        runs[mode] = simulate(scenario, Design.PARTLOG, Routing.AZ_REPRESENTATIVE, SEED)
    # Files committed in the run (a PUT still uploading at the end is read by nobody yet).
    files_per_s = len(runs[GetMode.SHARED_CACHE].file_commits) / 2
    assert runs[GetMode.SHARED_CACHE].gets_per_s == pytest.approx(files_per_s)
    # RF 3 over 3 AZs: every file is read in every AZ, by each broker holding a replica.
    assert runs[GetMode.PER_AZ_CACHE].gets_per_s == pytest.approx(3 * files_per_s)
    files = runs[GetMode.PER_BROKER].file_commits
    assert runs[GetMode.PER_BROKER].gets_per_s == pytest.approx(sum(f.replica_brokers for f in files) / 2)
    assert runs[GetMode.PER_BROKER].gets_per_s > runs[GetMode.PER_AZ_CACHE].gets_per_s
    none = load_scenario("balanced-3az", {"duration_s": 2, "gets_per_file": 0})
    r = simulate(none, Design.PARTLOG, Routing.AZ_REPRESENTATIVE, SEED)
    assert r.puts_per_s > 0 and r.gets_per_s == 0 and r.cost.get_usd == 0


def test_replication_lag_includes_the_followers_apply() -> None:
    slow = {"duration_s": 3, "follower_apply_ms_p50": 40, "follower_apply_ms_p99": 40}
    fast = {"duration_s": 3, "follower_apply_ms_p50": 0, "follower_apply_ms_p99": 0}
    for design in (Design.PARTLOG, Design.COORDINATOR):
        lag_slow = simulate(load_scenario("balanced-3az", slow), design, Routing.AZ_REPRESENTATIVE, SEED)
        lag_fast = simulate(load_scenario("balanced-3az", fast), design, Routing.AZ_REPRESENTATIVE, SEED)
        assert lag_fast.replication_lag_ms_p50 is not None and lag_slow.replication_lag_ms_p50 is not None
        assert lag_slow.replication_lag_ms_p50 >= 40 > 10 > lag_fast.replication_lag_ms_p50
        assert lag_slow.cross_az_replication_bytes_per_s > 0


def test_designs_in_parallel_processes_give_the_same_results() -> None:
    scenario = load_scenario("imbalanced-2az", {"duration_s": 3})
    one = json.dumps(to_json(run_scenario(scenario, 5), timing=False))
    two = json.dumps(to_json(run_scenario(scenario, 5, jobs=2), timing=False))
    assert one == two
    with pytest.raises(ValueError, match="jobs must be >= 1"):
        run_scenario(scenario, 5, jobs=0)


def test_plots_without_matplotlib_are_a_clear_error_before_simulating(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name, *a))
    for argv in (
        ["run", "balanced-3az", "--out", str(tmp_path / "o")],
        ["sweep", "balanced-3az", "--param", "brokers_per_az=1,2", "--out", str(tmp_path / "s")],
        ["report", "--out", str(tmp_path / "R.md"), "--plots", str(tmp_path / "p")],
    ):
        assert main(argv) == 2
        assert "writes PNG plots with matplotlib: pip install 'partlog[sim]'" in capsys.readouterr().err
    assert not (tmp_path / "R.md").exists() and not (tmp_path / "o").exists()


def test_counts_print_as_integers() -> None:
    """Regression (issue 13, newcomer polish): counts printed as 12.00."""
    from simulations.table import _num

    assert _num(12) == "12" and _num(123_456) == "123,456"
    assert _num(1.5) == "1.50" and _num(None) == "-" and _num(25_000.0) == "25.00k"
