"""The symmetric simulation model (issue 17): one commit-cost model for
both designs, faults for both (failure modes, coordinator failover, slow
nodes, network degradation), producer retries, skew, Kafka's rack-aware
assignment, commit profiles from files, and what hostile profiles do.

Runs are short (virtual seconds); nothing here asserts a wall-clock timing.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import random
from collections import Counter
from pathlib import Path
from typing import Any, cast

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from partlog.controller.cluster_meta import StaticMetadata
from simulations.batches import BatchTemplates
from simulations.commit_server import CommitCostSampler, CommitServer, EmpiricalSampler
from simulations.context import SimContext
from simulations.crossover import LABELS, SWEEPS, run_sweeps, shape
from simulations.crossover import markdown as crossover_markdown
from simulations.crossover import write_plots as write_crossover_plots
from simulations.event_loop import EventLoop
from simulations.latency import LatencyDist
from simulations.metrics import DesignResult
from simulations.producers import ProducerGroup
from simulations.scenario import (
    DEFAULT_COMMIT_COST,
    CommitCost,
    Design,
    EventKind,
    EventSpec,
    FailureMode,
    ProducerSpec,
    Routing,
    Scenario,
    ScenarioError,
    load_commit_profile,
    load_scenario,
)
from simulations.simulation import simulate
from simulations.topology import rack_aware_assignment, topic_partitions
from simulations.verdicts import Check, Comparison
from tests.paths import REPO

SEED = 3


def run(scenario: Scenario, design: Design, routing: Routing = Routing.ANY_BROKER) -> DesignResult:
    return simulate(scenario, design, routing, SEED)


def with_events(scenario: Scenario, *events: EventSpec, retries: bool = True) -> Scenario:
    producers = tuple(dataclasses.replace(p, retries=retries) for p in scenario.producers)
    return dataclasses.replace(scenario, events=tuple(events), producers=producers)


# ------------------------------------------------------------ commit server


def constant_cost(ms: float, us_per_batch: float = 0.0) -> CommitCostSampler:
    return CommitCostSampler(CommitCost(LatencyDist(ms, ms), us_per_batch, "test"), random.Random(0))


def test_a_free_server_serves_at_once_and_a_busy_one_groups_the_waiting() -> None:
    loop = EventLoop()
    server = CommitServer(loop, constant_cost(2.0, us_per_batch=100.0), batches_max=10)
    done: list[tuple[float, str]] = []
    server.submit(1, lambda: done.append((loop.now_ms, "a")))
    # While "a" is served, three more arrive: one group of b and c (6 + 4
    # batches = batches_max), then d alone.
    for name, n in (("b", 6), ("c", 4), ("d", 1)):
        loop.at(1.0, server.submit, n, lambda name=name: done.append((loop.now_ms, name)))
    loop.run_until(100)
    a_end = 2.0 + 0.1
    bc_end = a_end + 2.0 + 10 * 0.1
    d_end = bc_end + 2.0 + 0.1
    assert done == [(a_end, "a"), (bc_end, "b"), (bc_end, "c"), (d_end, "d")]
    assert server.groups == 3 and server.served == 4
    assert server.wait_ms == [0.0, a_end - 1.0, a_end - 1.0, bc_end - 1.0]
    assert server.busy_ms == pytest.approx(d_end)


def test_abort_finishes_held_commits_now_and_the_old_group_never_finishes() -> None:
    loop = EventLoop()
    server = CommitServer(loop, constant_cost(5.0))
    done: list[float] = []
    for _ in range(3):
        server.submit(1, lambda: done.append(loop.now_ms))
    loop.at(1.0, server.abort)
    loop.run_until(100)
    assert done == [1.0, 1.0, 1.0]
    # It serves again after an abort.
    server.submit(1, lambda: done.append(loop.now_ms))
    loop.run_until(200)
    assert done[-1] == 105.0


class RecordingCost(CommitCostSampler):
    """A constant service time that records each group's batches."""

    __slots__ = ("totals",)

    def __init__(self, ms: float) -> None:
        super().__init__(CommitCost(LatencyDist(ms, ms), 0.0, "test"), random.Random(0))
        self.totals: list[int] = []

    def sample(self, batches: int) -> float:
        self.totals.append(batches)
        return super().sample(batches)


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.tuples(st.floats(0, 50), st.integers(1, 40)), min_size=1, max_size=60),
    st.integers(1, 64),
    st.floats(0.01, 5),
)
def test_every_commit_is_served_once_in_fifo_order_within_the_group_limit(
    arrivals: list[tuple[float, int]], batches_max: int, service_ms: float
) -> None:
    """Reference model: commits finish in arrival order, each exactly once;
    groups are runs of consecutive commits whose batches stay within
    ``batches_max`` unless the group is one commit alone."""
    loop = EventLoop()
    cost = RecordingCost(service_ms)
    server = CommitServer(loop, cost, batches_max=batches_max)
    order: list[int] = []
    arrivals = sorted(arrivals, key=lambda a: a[0])
    for i, (at, n) in enumerate(arrivals):
        loop.at(at, server.submit, n, order.append, i)
    loop.run_until(10_000)
    assert order == list(range(len(arrivals)))
    assert server.served == len(arrivals) and server.groups == len(cost.totals)
    # The groups partition the commits, in order.
    sizes = [n for _, n in arrivals]
    i = 0
    for total in cost.totals:
        first = i
        acc = 0
        while i < len(sizes) and acc + sizes[i] <= total:
            acc += sizes[i]
            i += 1
        assert acc == total, (cost.totals, sizes)
        assert total <= batches_max or i - first == 1
    assert i == len(sizes)
    assert all(w >= 0 for w in server.wait_ms) and len(server.wait_ms) == len(arrivals)


def test_empirical_sampler_stays_within_its_samples() -> None:
    rng = random.Random(1)
    s = EmpiricalSampler((5.0, 1.0, 3.0), rng)
    draws = [s.sample() for _ in range(2000)]
    assert min(draws) >= 1.0 and max(draws) <= 5.0
    assert 2.5 < sorted(draws)[1000] < 3.5


# --------------------------------------------------------------- profiles


def bench_doc(durable_p50: float = 0.94, durable_p99: float = 4.77, off_p50: float = 0.66) -> dict[str, Any]:
    def case(sync: bool, p50: float, p99: float) -> dict[str, Any]:
        return {"sync": sync, "committers": 1, "idempotent": False, "latency_ms_p50": p50, "latency_ms_p99": p99}

    return {
        "benchmark": "commit",
        "batches_per_commit": 64,
        "results": [case(False, off_p50, 5.9), case(True, durable_p50, durable_p99)],
    }


def test_the_default_cost_is_partlog_bench_commits_figures_split() -> None:
    assert DEFAULT_COMMIT_COST.fixed == LatencyDist(0.28, 4.11)
    assert DEFAULT_COMMIT_COST.us_per_batch == pytest.approx(10.312, abs=1e-3)
    # Both designs get it unless a scenario says otherwise.
    s = load_scenario("balanced-3az")
    assert s.commit.leader == s.commit.coordinator == DEFAULT_COMMIT_COST


def test_a_bench_commit_json_profile_gives_the_same_split(tmp_path: Path) -> None:
    p = tmp_path / "bench.json"
    p.write_text(json.dumps(bench_doc()))
    cost = load_commit_profile(p)
    assert cost.fixed == DEFAULT_COMMIT_COST.fixed and cost.us_per_batch == DEFAULT_COMMIT_COST.us_per_batch
    assert "bench.json" in cost.source


def test_a_coordinator_profile_of_samples_is_used_for_the_coordinator_only(tmp_path: Path) -> None:
    (tmp_path / "pg.json").write_text(json.dumps({"samples_ms": [8, 10, 12, 40], "us_per_batch": 2}))
    doc = (REPO / "simulations/scenarios/balanced-3az.toml").read_text()
    scenario_file = tmp_path / "s.toml"
    scenario_file.write_text(doc + '\n[commit]\ncoordinator_profile = "pg.json"\n')
    s = load_scenario(str(scenario_file), {"duration_s": 4})
    assert s.commit.leader == DEFAULT_COMMIT_COST
    assert s.commit.coordinator.samples_ms == (8.0, 10.0, 12.0, 40.0)
    assert s.commit.coordinator.us_per_batch == 2
    slow = run(s, Design.COORDINATOR)
    same = run(load_scenario("balanced-3az", {"duration_s": 4}), Design.COORDINATOR)
    assert slow.latency_ms_p50 is not None and same.latency_ms_p50 is not None
    assert slow.latency_ms_p50 > same.latency_ms_p50 + 5


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("not json", "not JSON"),
        ("[1, 2]", "must be a JSON object"),
        ('{"samples_ms": []}', "samples_ms must be a list"),
        ('{"samples_ms": [1, -2]}', "samples_ms[1]"),
        ('{"samples_ms": [1, "x"]}', "samples_ms[1]"),
        ('{"samples_ms": [1], "extra": 1}', "unknown key 'extra'"),
        ('{"benchmark": "other"}', "neither samples_ms"),
        ('{"benchmark": "commit", "batches_per_commit": 0, "results": []}', "batches_per_commit"),
        ('{"benchmark": "commit", "batches_per_commit": 64, "results": []}', "no result with sync=True"),
    ],
)
def test_bad_profiles_are_one_clear_error_naming_the_file(tmp_path: Path, content: str, needle: str) -> None:
    p = tmp_path / "profile.json"
    p.write_text(content)
    with pytest.raises(ScenarioError) as err:
        load_commit_profile(p)
    assert str(p) in str(err.value) and needle in str(err.value)


def test_a_huge_profile_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    p = tmp_path / "huge.json"
    with open(p, "wb") as f:
        f.truncate((16 << 20) + 10)
    with pytest.raises(ScenarioError, match="larger than"):
        load_commit_profile(p)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    doc=st.one_of(
        json_values,
        st.fixed_dictionaries({"samples_ms": json_values}),
        st.fixed_dictionaries(
            {"benchmark": st.just("commit"), "batches_per_commit": json_values, "results": json_values}
        ),
        st.builds(bench_doc, st.floats(allow_nan=True), st.floats(allow_nan=True), st.floats(allow_nan=True)),
    )
)
def test_a_hostile_profile_is_a_cost_or_a_scenario_error(tmp_path: Path, doc: object) -> None:
    p = tmp_path / "hostile.json"
    try:
        p.write_text(json.dumps(doc))
    except ValueError:
        return
    try:
        cost = load_commit_profile(p)
    except ScenarioError as e:
        assert str(p) in str(e)
        return
    # What it accepts is a usable cost: finite, non-negative, p50 <= p99.
    assert 0 <= cost.fixed.ms_p50 <= cost.fixed.ms_p99 < float("inf")
    assert 0 <= cost.us_per_batch < float("inf")
    sampler = CommitCostSampler(cost, random.Random(0))
    assert all(0 <= sampler.sample(10) < float("inf") for _ in range(20))


# ---------------------------------------------------------------- symmetry


def test_at_equal_routing_and_store_the_designs_commit_alike() -> None:
    """The same store on both sides: at equal routing, partlog's leaders and
    the coordinator give per-request latencies within 5% (what is left is
    topology: parallel commits to several leaders against one)."""
    s = load_scenario("balanced-3az", {"duration_s": 20})
    partlog = run(s, Design.PARTLOG)
    coord = run(s, Design.COORDINATOR)
    for q in ("latency_ms_p50", "latency_ms_p99"):
        a, b = getattr(partlog, q), getattr(coord, q)
        assert abs(a - b) / b < 0.05, (q, a, b)


def test_a_scenario_can_give_the_coordinator_kip1163s_store_and_it_shows() -> None:
    s = load_scenario("balanced-3az", {"duration_s": 10, "coordinator_ms_p50": 10, "coordinator_ms_p99": 35})
    assert s.commit.coordinator != s.commit.leader
    assert "coordinator_*" in s.commit.coordinator.describe()
    slow = run(s, Design.COORDINATOR)
    same = run(load_scenario("balanced-3az", {"duration_s": 10}), Design.COORDINATOR)
    assert slow.latency_ms_p50 is not None and same.latency_ms_p50 is not None
    assert slow.latency_ms_p50 > same.latency_ms_p50 + 5


def test_a_heavier_load_raises_the_coordinators_store_utilization_more() -> None:
    """Per batch the coordinator does every leader's work on one store."""
    s = load_scenario("balanced-3az", {"duration_s": 5, "apply_us_per_batch": 500})
    partlog = run(s, Design.PARTLOG)
    coord = run(s, Design.COORDINATOR)
    assert coord.commit_store_utilization_max > 2 * partlog.commit_store_utilization_max


# ------------------------------------------------------------------ faults


def test_the_coordinator_fails_over_and_no_request_is_lost_with_retries() -> None:
    base = load_scenario("balanced-3az", {"duration_s": 20})
    fail = EventSpec(5.0, EventKind.COORDINATOR_FAILURE, mode=FailureMode.REFUSE, failover_ms=3000)
    r = run(with_events(base, fail), Design.COORDINATOR)
    moved = [what for _, what in r.events if "failed over" in what]
    assert moved == ["coordinator failed over to az2"]
    assert r.produce_requests_retried > 0 and r.produce_requests_failed == 0
    # Without retries the requests whose commits were refused fail, in the window.
    r = run(with_events(base, fail, retries=False), Design.COORDINATOR)
    [start, during, after] = r.failure_windows
    assert start.produce_requests_failed == 0 and during.produce_requests_failed > 0
    assert after.produce_requests_failed == 0
    # partlog ignores a coordinator failure.
    p = run(with_events(base, fail, retries=False), Design.PARTLOG)
    assert p.produce_requests_failed == 0


def test_losing_the_coordinators_az_fails_it_over_to_a_live_az() -> None:
    base = load_scenario("balanced-3az", {"duration_s": 30})
    r = run(
        with_events(base, EventSpec(5.0, EventKind.AZ_LOSS, az="az1", mode=FailureMode.BLACKHOLE)), Design.COORDINATOR
    )
    assert any("coordinator failed over to az2" in what for _, what in r.events)
    # Commits answered again after the failover: files keep coming.
    late = [f for f in r.file_commits if f.at_ms > 25_000]
    assert late


def test_blackhole_waits_for_timeouts_refuse_does_not() -> None:
    # Long enough for a blackholed request's 30 s timeout to pass.
    base = load_scenario("broker-failure", {"duration_s": 55})
    [first, *_] = base.events
    p99: dict[FailureMode, float] = {}
    for mode in FailureMode:
        r = run(with_events(base, dataclasses.replace(first, mode=mode)), Design.PARTLOG, Routing.AZ_REPRESENTATIVE)
        assert r.produce_requests_failed == 0, mode
        assert r.send_latency_ms_p99 is not None
        p99[mode] = r.send_latency_ms_p99
    # Refused: retried every second until the fencing (9 s); blackholed:
    # each request waits its 30 s timeout first.
    assert p99[FailureMode.REFUSE] < 15_000 < 30_000 < p99[FailureMode.BLACKHOLE]


def test_slow_broker_and_network_degradation_slow_commits_then_heal() -> None:
    base = load_scenario("balanced-3az", {"duration_s": 20})
    calm = run(base, Design.PARTLOG)
    slow = run(
        with_events(base, EventSpec(2.0, EventKind.SLOW_BROKER, broker=1, factor=400.0, duration_s=10.0)),
        Design.PARTLOG,
    )
    assert slow.commit_store_utilization_max > 10 * calm.commit_store_utilization_max
    assert slow.latency_ms_p99 is not None and calm.latency_ms_p99 is not None
    assert slow.latency_ms_p99 > calm.latency_ms_p99
    assert any("back to normal" in what for _, what in slow.events)
    late_calm = calm.timeline_latency_ms_p99[15:]
    late_slow = slow.timeline_latency_ms_p99[15:]
    assert late_calm == late_slow or max(x or 0 for x in late_slow) < 2 * max(x or 0 for x in late_calm)
    degraded = run(with_events(base, EventSpec(2.0, EventKind.NETWORK_DEGRADATION, factor=50.0)), Design.COORDINATOR)
    coord = run(base, Design.COORDINATOR)
    assert degraded.latency_ms_p50 is not None and coord.latency_ms_p50 is not None
    assert degraded.latency_ms_p50 > coord.latency_ms_p50 + 20


def test_a_slow_az_slows_the_coordinator_that_sits_in_it() -> None:
    base = load_scenario("balanced-3az", {"duration_s": 10})
    slow_az1 = with_events(base, EventSpec(1.0, EventKind.SLOW_AZ, az="az1", factor=200.0))
    slow_az3 = with_events(base, EventSpec(1.0, EventKind.SLOW_AZ, az="az3", factor=200.0))
    assert run(slow_az1, Design.COORDINATOR).commit_store_utilization_max > 5 * (
        run(slow_az3, Design.COORDINATOR).commit_store_utilization_max
    )


@pytest.mark.parametrize("design", [Design.PARTLOG, Design.COORDINATOR, Design.CLASSIC])
def test_retries_turn_broker_failure_losses_into_latency(design: Design) -> None:
    base = load_scenario("broker-failure", {"duration_s": 30})
    no_retry = run(with_events(base, *base.events, retries=False), design, Routing.AZ_REPRESENTATIVE)
    retry = run(base, design, Routing.AZ_REPRESENTATIVE)
    assert no_retry.produce_requests_failed > 0
    assert retry.produce_requests_failed == 0 and retry.produce_requests_retried > 0
    assert retry.sends_failed == 0


# ------------------------------------------------------------------- load


def test_skew_makes_the_first_partitions_hot() -> None:
    scenario = load_scenario("balanced-3az", {"duration_s": 1})
    spec = dataclasses.replace(scenario.producers[0], skew=1.2, partitions_per_send=3)
    loop = EventLoop()
    ctx = cast(SimContext, dataclasses.make_dataclass("Ctx", [("loop", EventLoop)])(loop))
    tps = topic_partitions(scenario.cluster)
    group = ProducerGroup(
        ctx,
        spec,
        Routing.ANY_BROKER,
        cast(StaticMetadata, None),
        BatchTemplates(0),
        tps,
        send_rng=random.Random(1),
        route_rng=random.Random(2),
    )
    counts: Counter[int] = Counter()
    for _ in range(3000):
        chosen = group._choose()
        assert len(set(chosen)) == 3
        counts.update(tp.partition for tp in chosen)
    assert counts[0] > 5 * counts[30] and counts[0] == max(counts.values())
    uniform = dataclasses.replace(spec, skew=0.0)
    u = ProducerGroup(
        ctx,
        uniform,
        Routing.ANY_BROKER,
        cast(StaticMetadata, None),
        BatchTemplates(0),
        tps,
        send_rng=random.Random(1),
        route_rng=random.Random(2),
    )
    ucounts: Counter[int] = Counter(tp.partition for _ in range(3000) for tp in u._choose())
    assert max(ucounts.values()) < 2 * min(ucounts.values())
    assert isinstance(spec, ProducerSpec)


# ------------------------------------------------------- replica assignment


@settings(max_examples=200, deadline=None)
@given(
    per_az=st.lists(st.integers(1, 6), min_size=1, max_size=5),
    partitions=st.integers(1, 120),
    rf=st.integers(1, 4),
    start=st.integers(0, 1000),
    shift=st.integers(0, 1000),
)
def test_rack_aware_assignment_has_kafkas_properties(
    per_az: list[int], partitions: int, rf: int, start: int, shift: int
) -> None:
    azs: dict[int, str] = {}
    for a, n in enumerate(per_az):
        for _ in range(n):
            azs[len(azs) + 1] = f"az{a}"
    n = len(azs)
    rf = min(rf, n)
    out = rack_aware_assignment(azs, partitions, rf, start % n, shift % n)
    assert len(out) == partitions
    racks = len(per_az)
    for reps in out:
        assert len(reps) == rf == len(set(reps))
        # As many racks as the replication factor allows.
        assert len({azs[r] for r in reps}) == min(rf, racks)
    # Leaders (first replicas) go round the rack-alternated list: balanced.
    leads = Counter(r[0] for r in out)
    assert max(leads.values()) - min(leads.get(b, 0) for b in azs) <= 1 if partitions >= n else True


def test_the_assignment_is_the_seeds_and_the_same_in_every_design() -> None:
    s = load_scenario("balanced-3az", {"duration_s": 1})
    a = run(s, Design.PARTLOG).file_commits
    b = run(s, Design.PARTLOG).file_commits
    assert a == b


# ---------------------------------------------------------------- verdicts


def test_a_comparison_names_the_better_side_or_a_tie() -> None:
    assert Comparison("x", "a", 100, "b", 120).winner == "a"
    assert Comparison("x", "a", 100, "b", 120, higher_is_better=True).winner == "b"
    assert Comparison("x", "a", 100, "b", 104).winner is None
    assert Comparison("x", "a", 0, "b", 0).winner is None
    assert "tie" in Comparison("x", "a", 100, "b", 104).sentence()
    assert "**b**" in Comparison("x", "a", 130, "b", 100, " ms").sentence()
    assert Check("x", 2, 2).holds and not Check("x", 3, 2).holds
    assert Check("x", 3, 2, at_least=True).holds
    assert "**fails**" in Check("x", 3, 2).sentence()


@settings(max_examples=200, deadline=None)
@given(st.floats(0, 1e9), st.floats(0, 1e9))
def test_comparison_is_antisymmetric(a: float, b: float) -> None:
    one = Comparison("x", "a", a, "b", b).winner
    other = Comparison("x", "b", b, "a", a).winner
    assert one == other
    if one is not None:
        assert (one == "a") == (a < b)


def test_where_each_design_wins_runs_both_designs_at_every_point(tmp_path: Path) -> None:
    sweeps = run_sweeps(SEED, duration_s=1.0)
    assert [sw.param for sw in sweeps] == list(SWEEPS)
    for sw in sweeps:
        assert len(sw.runs) == len(sw.values)
        for r in sw.runs:
            assert {f"{d.design}/{d.routing}" for d in r.designs} == set(LABELS)
            # The same store on both sides at every point.
            assert r.scenario.commit.leader == r.scenario.commit.coordinator
    text = "\n".join(crossover_markdown(sweeps, ["report/crossover_send_p99.png"]))
    assert text.count("| winner |") == len(sweeps) * 4
    assert "![crossover_send_p99](report/crossover_send_p99.png)" in text
    written = write_crossover_plots(sweeps, tmp_path)
    assert {p.name for p in written} == {
        "crossover_send_p50.png",
        "crossover_send_p99.png",
        "crossover_requests.png",
        "crossover_cost.png",
    }
    assert all(p.stat().st_size > 1000 for p in written)
    # A shape's AZ count changes neither the load nor the store.
    two, five = shape(2, 2, 3, 1, 1), shape(5, 2, 3, 1, 1)
    assert sum(p.sends_per_s for p in two.producers) == sum(p.sends_per_s for p in five.producers)


# -------------------------------------------------- record producers, calibrate


RECORDS_TOML = """
name = "records"
duration_s = 5
designs = ["partlog", "coordinator"]
routings = ["az-representative"]
[cluster]
azs = ["az1", "az2", "az3"]
brokers_per_az = 2
partitions = 12
replication_factor = 3
[[producers]]
az = "az1"
count = 2
records_per_s = 500
[[producers]]
az = "az2"
count = 2
records_per_s = 500
"""


def test_record_producers_batch_records_as_partlogs_client_does(tmp_path: Path) -> None:
    p = tmp_path / "records.toml"
    p.write_text(RECORDS_TOML)
    s = load_scenario(str(p))
    assert s.producers[0].records_per_s == 500 and s.producers[0].sends_per_s == 0
    for design in (Design.PARTLOG, Design.COORDINATOR):
        r = simulate(s, design, Routing.AZ_REPRESENTATIVE, SEED)
        assert r.produce_requests_failed == 0 and r.batches_acked > 0
        # 4 producers x 500 records/s x 5 s; with at most 5 requests in
        # flight per broker, records wait and batches grow: far fewer
        # batches than records.
        assert r.batches_acked < 4 * 500 * 5 / 3
        # A batch's latency counts from its oldest record, which waited for
        # the linger and for a free request slot: more than a request's.
        assert r.batch_latency_ms_p50 is not None and r.latency_ms_p50 is not None
        assert r.batch_latency_ms_p50 > r.latency_ms_p50


@pytest.mark.serial  # a real cluster's batching, which CPU contention changes: alone (scripts/test)
def test_calibrate_rows_compare_a_real_cluster_with_the_simulator() -> None:
    """A short real cluster (3 s of producing) against the simulator: the
    JSON contract, and the fan-out rows, which the model must get right."""
    from simulations.calibrate import Shape, calibrate

    result = calibrate(Shape(duration_s=3.0), SEED)
    rows = {r["metric"]: r for r in result["rows"]}
    assert set(rows) == {
        "commit time p50 ms",
        "commit time p99 ms",
        "commit RPCs/file: local",
        "commit RPCs/file: same AZ",
        "commit RPCs/file: cross AZ",
        "produce latency p50 ms",
        "produce latency p99 ms",
        "produce requests/s",
        "network commit RPCs/s",
        "WAL files/s",
    }
    for r in rows.values():
        assert set(r) >= {"metric", "predicted", "measured", "within_tolerance", "why"}
        assert r["measured"] >= 0 and r["predicted"] >= 0
        assert r["why"] == "" or not r["within_tolerance"]
    # 3 AZs x 2 brokers, representatives: one local commit and two cross-AZ
    # ones per file, measured and predicted.
    for m in ("commit RPCs/file: local", "commit RPCs/file: cross AZ"):
        assert rows[m]["within_tolerance"], rows[m]
    assert result["of"] == 10 and 0 <= result["within"] <= 10
    # The fit of the followers' append time to the measured commit time.
    fitted = {r["metric"]: r for r in result["rows_given_measured_commit_time"]}
    assert set(fitted) == set(rows)
    assert result["of_given_measured_commit_time"] == 8
    assert result["fitted_follower_apply_ms"]["p50"] > 0


# ------------------------------------------------------------------ storage


def test_storage_figures_per_design() -> None:
    from simulations.storage import KAFKA_FILES_PER_REPLICA, figures

    for partitions in (60, 600):
        s = load_scenario("balanced-3az", {"duration_s": 3, "partitions": partitions})
        p = figures(run(s, Design.PARTLOG, Routing.AZ_REPRESENTATIVE), s, pages_per_commit=2.0)
        c = figures(run(s, Design.COORDINATOR), s, pages_per_commit=2.0)
        k = figures(run(s, Design.CLASSIC, Routing.LEADER_ONLY), s, pages_per_commit=2.0)
        # partlog's metadata files do not grow with the partitions; classic's do.
        assert p.open_files_per_broker == 3 and c.open_files_per_broker == 0 and c.open_files_coordinator == 3
        assert k.open_files_per_broker == KAFKA_FILES_PER_REPLICA * partitions * 3 / 6
        assert p.fsyncs_per_s == p.metadata_writes_per_s > 0 and k.fsyncs_per_s == 0
        assert p.pages_written_per_s > 0
        # walmgr lists and reads footers; the coordinator knows its files.
        assert p.gc_lists_per_hour >= 120 * 256 and p.gc_gets_per_hour > 0 and p.gc_usd_per_month > 0
        assert c.gc_lists_per_hour == c.gc_gets_per_hour == 0 and c.gc_deletes_per_hour > 0
        assert p.wal_objects_alive > 0


def test_a_durable_store_writes_pages_per_commit(tmp_path: Path) -> None:
    from simulations.storage import measure_store_writes

    pages = measure_store_writes(batches_per_commit=5, commits=300, directory=str(tmp_path))
    assert 0 < pages < 1000


# ------------------------------------------------------- hostile scenarios

HOSTILE_KEYS = [
    ("commit", "apply_ms_p50"),
    ("commit", "follower_apply_ms_p99"),
    ("network", "rtt_cross_az_ms_p50"),
    ("object_store", "put_ms_p99"),
    ("object_store", "put_usd_per_1000"),
    ("cost", "cross_az_usd_per_gb"),
    ("commit", "apply_us_per_batch"),
    ("commit", "coordinator_ms_p99"),
    ("commit", "coordinator_us_per_batch"),
    ("commit", "profile"),
    ("commit", "coordinator_profile"),
    ("object_store", "get_mode"),
    ("object_store", "put_mb_per_s"),
    ("object_store", "gets_per_file"),
    ("metadata", "coordinator_failover_ms"),
    ("producers", "skew"),
    ("producers", "retries"),
    ("producers", "retry_backoff_ms"),
    ("producers", "delivery_timeout_ms"),
    ("producers", "records_per_s"),
    ("producers", "linger_ms"),
    ("events", "mode"),
    ("events", "factor"),
    ("events", "duration_s"),
    ("events", "failover_ms"),
    ("events", "kind"),
    ("events", "az"),
]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(HOSTILE_KEYS), json_values), min_size=1, max_size=4))
def test_hostile_scenario_values_are_a_scenario_error_naming_the_key(
    changes: list[tuple[tuple[str, str], Any]],
) -> None:
    """Any value for the new keys gives a valid scenario or one
    ScenarioError naming the key; never another exception."""
    from simulations.scenario import parse_scenario, read_scenario_doc

    doc, _ = read_scenario_doc("broker-failure")
    doc = json.loads(json.dumps(doc))
    for (section, key), value in changes:
        if section == "producers":
            doc["producers"][0][key] = value
        elif section == "events":
            doc["events"][0][key] = value
        else:
            doc.setdefault(section, {})[key] = value
    try:
        s = parse_scenario(doc, "hostile.toml")
    except ScenarioError as e:
        assert "hostile.toml" in str(e)
        return
    # Accepted: the values are usable.
    assert all(p.sends_per_s > 0 or p.records_per_s > 0 for p in s.producers)
    assert all(e.factor >= 1 and e.duration_s >= 0 for e in s.events)
    assert s.object_store.put_bytes_per_s > 0
    # Every latency and price is finite.
    finite = [s.commit.leader.fixed.ms_p99, s.commit.coordinator.fixed.ms_p99, s.commit.follower_apply.ms_p99]
    finite += [s.network.rtt_cross_az.ms_p99, s.object_store.put.ms_p99, s.object_store.put_usd_per_1000]
    finite += [s.cross_az_usd_per_gb, s.commit.leader.us_per_batch]
    assert all(math.isfinite(x) for x in finite), finite


# ------------------------------------------- regressions from the hostile review


def test_any_broker_routing_falls_back_to_another_az_when_its_own_has_no_broker() -> None:
    """Regression (review): with 1 broker per AZ and one broker fenced, the
    coordinator design's producers in that AZ failed every send (no_leader)
    while partlog's fell back to a leader elsewhere.  KIP-1163 clients
    prefer their AZ, they do not refuse to produce."""
    base = load_scenario("balanced-3az", {"duration_s": 12, "brokers_per_az": 1, "session_timeout_ms": 2000})
    fail = EventSpec(2.0, EventKind.BROKER_FAILURE, broker=1, mode=FailureMode.REFUSE)
    for design in (Design.PARTLOG, Design.COORDINATOR):
        r = run(with_events(base, fail), design)
        assert r.sends_failed_live == 0, (design, r.failure_windows)


def test_overlapping_slowdowns_heal_only_their_own() -> None:
    """Regression (review): the shorter of two overlapping slowdowns reset
    the store to full speed while the longer one still ran."""
    from simulations.controller import Controller
    from simulations.metrics import Recorder
    from simulations.network import Network
    from simulations.topology import broker_azs, initial_metadata

    s = load_scenario("balanced-3az", {"duration_s": 10})
    loop = EventLoop()
    azs = broker_azs(s.cluster)
    ctx = SimContext(s, loop, Network(s.network, random.Random(0)), Recorder(), 0, azs)
    server = CommitServer(loop, constant_cost(1.0))
    controller = Controller(ctx, initial_metadata(s.cluster), {}, {}, {}, None, random.Random(0), {1: server})
    controller.schedule(
        [
            EventSpec(1.0, EventKind.SLOW_BROKER, broker=1, factor=10.0, duration_s=3.0),
            EventSpec(2.0, EventKind.SLOW_AZ, az=azs[1], factor=2.0, duration_s=0.5),
            EventSpec(1.5, EventKind.NETWORK_DEGRADATION, factor=4.0, duration_s=1.0),
            EventSpec(1.8, EventKind.NETWORK_DEGRADATION, factor=3.0, duration_s=2.0),
        ]
    )
    seen: dict[int, tuple[float, dict[str, float]]] = {}
    for t in (500, 1200, 1900, 2200, 2700, 3000, 3900, 4100):
        loop.at(t, lambda t=t: seen.__setitem__(t, (server.slow_factor, dict(ctx.network._degraded))))
    loop.run_until(5000)
    assert [seen[t][0] for t in sorted(seen)] == [1.0, 10.0, 10.0, 10.0, 10.0, 10.0, 10.0, 1.0]
    # 4x from 1.5 to 2.5 s, 3x from 1.8 to 3.8 s: the larger while both run.
    assert [seen[t][1].get("", 1.0) for t in sorted(seen)] == [1.0, 1.0, 4.0, 4.0, 3.0, 3.0, 1.0, 1.0]


def test_acks_all_waits_for_a_dead_follower_until_it_is_fenced() -> None:
    """Regression (review): dead, unfenced followers (and a coordinator
    replica in a lost AZ) still acknowledged after one round trip; an
    acks=all commit waits until the ISR drops them, in every design."""
    base = load_scenario("balanced-3az", {"duration_s": 12, "session_timeout_ms": 3000})
    loss = EventSpec(5.0, EventKind.AZ_LOSS, az="az3", mode=FailureMode.BLACKHOLE)
    for design in (Design.PARTLOG, Design.COORDINATOR):
        calm = run(base, design)
        lost = run(with_events(base, loss), design)
        assert calm.latency_ms_p99 is not None and lost.latency_ms_p99 is not None
        # Commits in the 3 s before the fencing wait for it.
        assert lost.latency_ms_p99 > calm.latency_ms_p99 + 1000, design
        assert lost.sends_failed_live == 0


def test_sends_without_a_leader_count_as_failed_sends_of_live_producers() -> None:
    """Regression (review): a send failing at once for want of a leader was
    not counted in sends_failed_live."""
    from simulations.metrics import Recorder

    rec = Recorder()
    rec.sends_failed += 1
    rec.sends_failed_live += 1  # what ProducerGroup._send does now
    base = load_scenario("balanced-3az", {"duration_s": 8, "replication_factor": 1, "session_timeout_ms": 60_000})
    fail = EventSpec(2.0, EventKind.BROKER_FAILURE, broker=2, mode=FailureMode.REFUSE)
    r = run(with_events(base, fail, retries=False), Design.PARTLOG, Routing.AZ_REPRESENTATIVE)
    assert r.sends_failed > 0 and r.sends_failed_live == r.sends_failed


def test_a_comparison_with_a_missing_side_names_no_winner() -> None:
    from simulations.verdicts import compare

    assert compare("p99", "partlog", None, "coordinator", 50.0) == "n/a (no samples for partlog)"
    assert "**coordinator**" in compare("p99", "partlog", 80.0, "coordinator", 50.0)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 5000), st.integers(0, 5000), st.integers(1, 40), st.integers(0, 2**32))
def test_retry_backoff_is_kafkas_exponential_backoff(base: int, cap: int, attempt: int, seed: int) -> None:
    from simulations.producers import retry_backoff_ms

    spec = dataclasses.replace(
        load_scenario("balanced-3az").producers[0], retry_backoff_ms=base, retry_backoff_max_ms=cap
    )
    b = retry_backoff_ms(spec, attempt, random.Random(seed))
    if cap <= base:
        assert b == min(base, cap)  # constant, no jitter
    else:
        assert 0 <= b <= cap  # the jitter never passes the max
        if attempt == 1:
            assert 0.8 * max(base, 1) - 1e-9 <= b <= min(cap, 1.2 * max(base, 1)) + 1e-9


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("[" * 100_000 + "]" * 100_000, "not JSON"),
        ('{"samples_ms": [1], "samples_ms": [1000]}', "duplicate key"),
    ],
)
def test_profile_review_cases(tmp_path: Path, content: str, needle: str) -> None:
    p = tmp_path / "p.json"
    p.write_text(content)
    with pytest.raises(ScenarioError, match=needle):
        load_commit_profile(p)


def test_a_profile_that_is_not_a_regular_file_is_refused(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(ScenarioError, match="not a regular file"):
        load_commit_profile(fifo)


def test_bench_profiles_need_exactly_one_committer_and_a_slower_durable_case(tmp_path: Path) -> None:
    doc = bench_doc()
    for r in doc["results"]:
        r["committers"] = True
    p = tmp_path / "b.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(ScenarioError, match="no result"):
        load_commit_profile(p)
    p.write_text(json.dumps(bench_doc(durable_p50=0.5, off_p50=0.66)))
    with pytest.raises(ScenarioError, match="faster than the no-sync"):
        load_commit_profile(p)


def test_a_latency_with_a_near_zero_p50_and_a_huge_spread_is_refused() -> None:
    for over in ({"rtt_cross_az_ms_p50": 5e-324}, {"rtt_cross_az_ms_p50": 0.01, "rtt_cross_az_ms_p99": 3_600_000}):
        with pytest.raises(ScenarioError, match="rtt_cross_az"):
            load_scenario("balanced-3az", over)


# ------------------------------------------------------------ aggregate mode


@pytest.mark.parametrize("name", ["balanced-3az", "imbalanced-2az"])
def test_the_aggregate_mode_agrees_with_the_event_level_mode_within_10_percent(name: str) -> None:
    from simulations.aggregate import aggregate, compare_rows

    s = load_scenario(name, {"duration_s": 20})
    for design, routing in (
        (Design.PARTLOG, Routing.AZ_REPRESENTATIVE),
        (Design.PARTLOG, Routing.ANY_BROKER),
        (Design.COORDINATOR, Routing.ANY_BROKER),
    ):
        a = aggregate(s, design, routing, SEED)
        e = simulate(s, design, routing, SEED)
        for metric, x, y in compare_rows(a, e):
            if y == 0:
                assert abs(x) < 0.05, (design, routing, metric, x)
            else:
                assert abs(x - y) <= 0.10 * abs(y), (design, routing, metric, x, y)


def test_the_aggregate_mode_runs_1000_brokers_and_100k_partitions_and_refuses_what_it_cannot() -> None:
    from simulations.aggregate import aggregate

    s = load_scenario("jun-100x100", {"brokers_per_az": [334, 333, 333], "partitions": 100_000})
    a = aggregate(s, Design.PARTLOG, Routing.AZ_REPRESENTATIVE, SEED)
    assert a.files_per_s > 0 and a.commit_remote_mean <= 3
    with pytest.raises(ScenarioError, match="no classic"):
        aggregate(s, Design.CLASSIC, Routing.LEADER_ONLY, SEED)


def test_aggregate_cli_json_and_errors(capsys: pytest.CaptureFixture[str]) -> None:
    from simulations.cli import main

    assert main(["aggregate", "balanced-3az", "--set", "brokers_per_az=2,2,2", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["mode"] == "aggregate"
    assert [(d["design"], d["routing"]) for d in doc["designs"]] == [
        ("partlog", "az-representative"),
        ("partlog", "any-broker"),
        ("coordinator", "any-broker"),
    ]
    assert all(d["wal_files_per_s"] > 0 for d in doc["designs"])
    assert main(["aggregate", "balanced-3az", "--set", "no_such_key=1"]) == 2
    assert "no_such_key" in capsys.readouterr().err


def test_the_aggregate_mode_refuses_more_pairs_than_its_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """A mistaken --set (10,000 brokers, any-broker routing) must be one clear
    error, not hours of work: (broker, leader) pairs are bounded by name."""
    from simulations import aggregate as agg

    s = load_scenario("balanced-3az")
    monkeypatch.setattr(agg, "AGGREGATE_PAIRS_MAX", 10)
    with pytest.raises(ScenarioError, match="pairs to weigh"):
        agg.aggregate(s, Design.PARTLOG, Routing.ANY_BROKER, SEED)
