"""The fan-out simulator follows the brokers' rotation rule (issue 30):
scenarios run the load-following rule with its grace and PUT budget
(``[buffer] rotation_grace_ms``, ``wal_puts_per_s_max``), the same for
every design's brokers; a grace of the interval selects the interval-only
rule; the aggregate mode models the rule within the stated tolerance; and
at the budget the simulated PUTs never exceed it (plus forced closes), for
partlog and for the coordinator design.

Runs are short (virtual seconds); nothing here asserts a wall-clock timing.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from partlog.produce.rotation import EARLY_REASONS, ROTATION_GRACE_MS_DEFAULT, burst_tokens
from simulations.aggregate import aggregate, compare_rows
from simulations.metrics import DesignResult
from simulations.scenario import Design, Routing, ScenarioError, load_scenario
from simulations.simulation import simulate

SEED = 3
# The aggregate mode against the event-level one, on every compared figure.
AGGREGATE_TOLERANCE = 0.10
# The pipeline runs on whole milliseconds of the virtual clock: a close the
# log puts at t happened within a millisecond of it.
CLOCK_SLACK_MS = 2
DESIGNS = ((Design.PARTLOG, Routing.AZ_REPRESENTATIVE), (Design.COORDINATOR, Routing.ANY_BROKER))


def test_scenarios_run_the_brokers_rule_and_a_grace_of_the_interval_selects_the_old_one() -> None:
    s = load_scenario("balanced-3az", {"duration_s": 5})
    assert s.buffer.rotation_grace_ms == ROTATION_GRACE_MS_DEFAULT
    assert s.buffer.wal_puts_per_s_max is None
    assert s.buffer.puts_per_s_max() == -(-1000 // s.buffer.commit_interval_ms)
    for design, routing in DESIGNS:
        new = simulate(s, design, routing, SEED)
        assert set(new.puts_per_s_by_reason) & set(EARLY_REASONS), (design, new.puts_per_s_by_reason)
    old = load_scenario("balanced-3az", {"duration_s": 5, "rotation_grace_ms": s.buffer.commit_interval_ms})
    for design, routing in DESIGNS:
        r = simulate(old, design, routing, SEED)
        assert set(r.puts_per_s_by_reason) == {"interval"}, (design, r.puts_per_s_by_reason)
        assert r.puts_per_s == pytest.approx(sum(r.puts_per_s_by_reason.values()))


@pytest.mark.parametrize(
    ("key", "value", "needle"),
    [
        ("rotation_grace_ms", -1, "rotation_grace_ms"),
        ("rotation_grace_ms", 1.5, "rotation_grace_ms"),
        ("wal_puts_per_s_max", 0, "wal_puts_per_s_max"),
        ("wal_puts_per_s_max", "many", "wal_puts_per_s_max"),
    ],
)
def test_bad_rotation_keys_are_a_scenario_error_naming_the_key(key: str, value: object, needle: str) -> None:
    with pytest.raises(ScenarioError, match=needle):
        load_scenario("balanced-3az", {key: value})


def test_the_rotation_keys_are_in_the_scenario_key_list(tmp_path: Path) -> None:
    p = tmp_path / "s.toml"
    p.write_text(
        'name = "s"\nduration_s = 1\n[cluster]\nazs = ["az1"]\nbrokers_per_az = 1\npartitions = 1\n'
        'replication_factor = 1\n[[producers]]\naz = "az1"\nsends_per_s = 1\n'
        "[buffer]\nrotation_grace_ms = 7\nwal_puts_per_s_max = 9\n"
    )
    s = load_scenario(str(p))
    assert (s.buffer.rotation_grace_ms, s.buffer.wal_puts_per_s_max, s.buffer.puts_per_s_max()) == (7, 9, 9)


def _closes_in(log: list[tuple[float, str]], start: float, width: float) -> tuple[int, int]:
    """(early, forced) closes logged in [start, start + width)."""
    inside = [reason for at, reason in log if start <= at < start + width]
    early = sum(1 for r in inside if r in EARLY_REASONS)
    return early, len(inside) - early


def assert_within_budget(r: DesignResult, budget: int, windows_ms: tuple[int, ...] = (100, 250, 1000)) -> None:
    """docs/design/rotation.md's bound, per broker and any window of W ms:
    early closes <= burst + budget * W / 1000, all closes <= that plus the
    window's forced closes (windows start at a close: the worst case)."""
    burst = burst_tokens(budget)
    by_broker: dict[int, list[tuple[float, str]]] = {}
    for at, broker, reason in r.put_log:
        by_broker.setdefault(broker, []).append((at, reason))
    assert by_broker, "no PUT at all"
    for broker, log in by_broker.items():
        for width in windows_ms:
            bound = burst + budget * (width + CLOCK_SLACK_MS) / 1000
            for at, _ in log:
                early, forced = _closes_in(log, at, width)
                assert early <= bound, (r.design, broker, at, width, early, bound)
                assert early + forced <= bound + forced
        # And over the run: PUTs/s within the budget plus forced closes/s.
        forced_total = sum(1 for _, reason in log if reason not in EARLY_REASONS)
        assert len(log) <= burst + budget * (r.simulated_s * 1000 + CLOCK_SLACK_MS) / 1000 + forced_total


@pytest.mark.parametrize(("design", "routing"), DESIGNS)
@pytest.mark.parametrize("budget", [None, 2, 25])
def test_at_the_budget_puts_never_exceed_it_plus_forced_closes(
    design: Design, routing: Routing, budget: int | None
) -> None:
    """Both designs' brokers run the same rule and budget; at a budget the
    load can exceed (the default at 250 ms is 4 PUTs/s per broker against
    rounds of ~130 ms) the PUTs stay within it."""
    overrides: dict[str, object] = {"duration_s": 10}
    if budget is not None:
        overrides["wal_puts_per_s_max"] = budget
    s = load_scenario("balanced-3az", overrides)
    r = simulate(s, design, routing, SEED)
    in_force = s.buffer.puts_per_s_max()
    assert_within_budget(r, in_force)
    if budget != 25:
        # The budget binds here: the busiest broker spends (nearly) all of it.
        busiest = max(p.files for p in r.per_broker) / r.simulated_s
        assert busiest >= 0.8 * in_force, (busiest, in_force)


def test_the_budget_check_catches_a_broker_over_its_budget() -> None:
    """The check itself can fail: a budget below what the run spent."""
    s = load_scenario("balanced-3az", {"duration_s": 5, "wal_puts_per_s_max": 25})
    r = simulate(s, Design.PARTLOG, Routing.AZ_REPRESENTATIVE, SEED)
    with pytest.raises(AssertionError):
        assert_within_budget(r, 2)


def test_both_designs_get_the_same_rule_and_spend_alike_at_the_budget() -> None:
    """Fairness: the same load, rule and budget give the same PUTs/s (within
    5%) and the same mix of close reasons on both sides at the budget."""
    s = load_scenario("balanced-3az", {"duration_s": 10})
    p = simulate(s, Design.PARTLOG, Routing.ANY_BROKER, SEED)
    c = simulate(s, Design.COORDINATOR, Routing.ANY_BROKER, SEED)
    assert abs(p.puts_per_s - c.puts_per_s) <= 0.05 * c.puts_per_s, (p.puts_per_s, c.puts_per_s)
    assert set(p.puts_per_s_by_reason) == set(c.puts_per_s_by_reason)


@pytest.mark.parametrize(
    "overrides",
    [
        {"rotation_grace_ms": 250},  # the interval-only rule
        {"wal_puts_per_s_max": 8},  # a budget near the load's own rate: partly bound
        {"wal_puts_per_s_max": 1000},  # no budget to speak of: closes at round ends
    ],
    ids=["interval-only", "budget-8", "budget-1000"],
)
def test_the_aggregate_mode_models_the_rule_within_10_percent(overrides: dict[str, object]) -> None:
    """The default budget is in the shipped scenarios' test
    (test_sim_symmetric.py); these are the other regimes of the rule."""
    s = load_scenario("balanced-3az", {"duration_s": 20, **overrides})
    for design, routing in (*DESIGNS, (Design.PARTLOG, Routing.ANY_BROKER)):
        a = aggregate(s, design, routing, SEED)
        e = simulate(s, design, routing, SEED)
        for metric, x, y in compare_rows(a, e):
            if y == 0:
                assert abs(x) < 0.05, (design, routing, metric, x)
            else:
                assert abs(x - y) <= AGGREGATE_TOLERANCE * abs(y), (design, routing, metric, x, y)


def test_the_aggregate_mode_gives_the_interval_only_rules_files_exactly() -> None:
    """With a grace of the interval the model is the old closed form:
    files/s = 1 / (interval + 1/R) per broker."""
    s = load_scenario("imbalanced-2az", {"rotation_grace_ms": 250})
    a = aggregate(s, Design.COORDINATOR, Routing.ANY_BROKER, SEED)
    rates = [spec.count * spec.sends_per_s for spec in s.producers]
    per_az = dict(zip((spec.az for spec in s.producers), rates, strict=True))
    sizes = dict(zip(s.cluster.azs, s.cluster.brokers_per_az, strict=True))
    want = sum(n / (0.25 + n / per_az[az]) for az, n in sizes.items() if az in per_az)
    assert a.files_per_s == pytest.approx(want, rel=1e-9)


def test_the_reports_rotation_section_compares_the_rules_on_both_designs() -> None:
    from simulations.rotation_report import budget_bound, early_closes_max, rotation_lines, rule_runs
    from simulations.runner import run_scenario

    overrides = {"duration_s": 3}
    default = run_scenario(load_scenario("balanced-3az", overrides), SEED)
    rules = rule_runs("balanced-3az", default, SEED, overrides=overrides)
    assert [r.budget for r in rules] == [None, 4, 40]
    assert rules[0].run.scenario.buffer.rotation_grace_ms == rules[0].run.scenario.buffer.commit_interval_ms
    old = rules[0].run.design("coordinator")
    assert early_closes_max(old, 1000) == 0
    for rr in rules[1:]:
        assert rr.budget is not None
        for d in (rr.run.design("partlog", "az-representative"), rr.run.design("coordinator")):
            assert 0 < early_closes_max(d, 1000) <= budget_bound(rr.budget, 1000)
    text = "\n".join(rotation_lines({"balanced-3az": rules}))
    assert text.count("| interval-only (grace 250 ms) |") == 4  # three designs, one penalty row
    assert "representatives' penalty" in text and "coordinator (any-broker)" in text
