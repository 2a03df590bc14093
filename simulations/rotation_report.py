"""The report's section on the rotation rule (issue 30): the shipped
scenarios under the interval-only rule (KIP-1163's: a grace of the commit
interval), the brokers' load-following rule at its default PUT budget, and
the same rule with ten times the budget; latency, PUTs/s and cost per
design, and what representatives cost a send that spans several brokers.

Both designs' brokers run the same rule and budget on the same load (the
real pipeline, :mod:`simulations.broker_shell`), so a difference between
them is the commit path's, not the rotation's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from partlog.produce.rotation import EARLY_REASONS, burst_tokens
from simulations.metrics import DesignResult
from simulations.runner import RunResult, run_scenario
from simulations.scenario import load_scenario
from simulations.verdicts import Comparison

# The scenarios the section compares the rules on: the balanced cluster and
# Jun Rao's 100 x 100, where a send spans ~33 brokers of its AZ.
ROTATION_SCENARIOS = ("balanced-3az", "jun-100x100")
# The raised budget: ten times the default (one PUT per interval).
RAISED_BUDGET_FACTOR = 10
_DESIGNS = {"designs": ["partlog", "coordinator"], "routings": ["az-representative", "any-broker"]}
_LABELS = (("partlog", "az-representative"), ("partlog", "any-broker"), ("coordinator", "any-broker"))


@dataclass(frozen=True, slots=True)
class RuleRun:
    rule: str
    budget: int | None  # PUTs/s per broker; None: the interval-only rule (no early closes)
    run: RunResult


def rule_runs(
    name: str, default: RunResult, seed: int, *, jobs: int = 1, overrides: Mapping[str, object] | None = None
) -> list[RuleRun]:
    """``default``: the scenario's run at its defaults (the load-following
    rule at the default budget), with ``overrides``; the other two rules
    run here, with the same overrides."""
    buf = default.scenario.buffer
    budget = buf.puts_per_s_max()
    raised = RAISED_BUDGET_FACTOR * budget
    base = {**(overrides or {}), **_DESIGNS}
    old = load_scenario(name, {**base, "rotation_grace_ms": buf.commit_interval_ms})
    more = load_scenario(name, {**base, "wal_puts_per_s_max": raised})
    return [
        RuleRun(f"interval-only (grace {buf.commit_interval_ms} ms)", None, run_scenario(old, seed, jobs=jobs)),
        RuleRun(f"load-following, {budget} PUTs/s (default)", budget, default),
        RuleRun(f"load-following, {raised} PUTs/s", raised, run_scenario(more, seed, jobs=jobs)),
    ]


def early_closes_max(d: DesignResult, window_ms: float) -> int:
    """The most early closes (idle, round_done) one broker made in any
    window of ``window_ms`` (windows start at a close: the worst case)."""
    by_broker: dict[int, list[float]] = {}
    for at, broker, reason in d.put_log:
        if reason in EARLY_REASONS:
            by_broker.setdefault(broker, []).append(at)
    best = 0
    for times in by_broker.values():
        times.sort()
        j = 0
        for i, t in enumerate(times):
            while times[j] < t - window_ms:
                j += 1
            best = max(best, i - j + 1)
    return best


def budget_bound(budget: int, window_ms: float) -> float:
    """docs/design/rotation.md: early closes in any window <= burst + budget x W."""
    return burst_tokens(budget) + budget * window_ms / 1000


def _n(x: float | None, digits: int = 0) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def _early_share(d: DesignResult) -> float:
    early = sum(v for k, v in d.puts_per_s_by_reason.items() if k in EARLY_REASONS)
    return early / d.puts_per_s if d.puts_per_s else 0.0


def _requests_per_send(d: DesignResult) -> float:
    return d.produce_requests / d.sends if d.sends else 0.0


def _changed(name: str, rules: Sequence[RuleRun]) -> str:
    """What the default rule changed against the interval-only one, per design."""
    old, new = rules[0].run, rules[1].run
    brokers = new.scenario.cluster.brokers
    parts = []
    for design, routing in _LABELS:
        o, n = old.design(design, routing), new.design(design, routing)
        parts.append(
            f"{design} ({routing}) send p50 {_n(o.send_latency_ms_p50)} -> {_n(n.send_latency_ms_p50)} ms, "
            f"p99 {_n(o.send_latency_ms_p99)} -> {_n(n.send_latency_ms_p99)} ms, PUTs/s {_n(o.puts_per_s, 1)} -> "
            f"{_n(n.puts_per_s, 1)}, ${_n(o.cost.total_usd)} -> ${_n(n.cost.total_usd)} a month "
            f"(produce requests per broker and second: {_n(n.produce_requests_per_s / brokers, 1)})"
        )
    return f"In `{name}`, the default rule against the interval-only one: " + "; ".join(parts) + "."


def rotation_lines(by_scenario: Mapping[str, Sequence[RuleRun]]) -> list[str]:
    first = next(iter(by_scenario.values()))[1].run.scenario.buffer
    out = [
        "## The rotation rule (issue 30)",
        "",
        "Every design's brokers run the brokers' rule (`partlog/produce/rotation.py`, docs/design/rotation.md): "
        f"a WAL file closes {first.rotation_grace_ms} ms after it opened on an idle broker, or when the "
        "previous file's round (upload, commits, acks=all replication) completes, each such early close taking "
        "a token of the broker's PUT budget (`wal_puts_per_s_max`, default one per commit interval: "
        f"{first.puts_per_s_max()} PUTs/s at {first.commit_interval_ms} ms), and at the latest after the "
        "commit interval. The coordinator design's brokers run the same rule and budget on the same load; "
        "the scenarios above run it. Here the same scenarios also run under the interval-only rule "
        "(KIP-1163's, a grace of the interval: what this report showed before) and with ten times the budget.",
        "",
    ]
    for name, rules in by_scenario.items():
        out += [
            f"`{name}` ({rules[1].run.scenario.duration_s:g} simulated s):",
            "",
            "| rule | design | send p50 / p99 ms | request p50 / p99 ms | PUT/s (busiest broker) | early closes "
            "| request + transfer $/month |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        for rr in rules:
            for design, routing in _LABELS:
                d = rr.run.design(design, routing)
                out.append(
                    f"| {rr.rule} | {design} ({routing}) | {_n(d.send_latency_ms_p50)} / {_n(d.send_latency_ms_p99)} "
                    f"| {_n(d.latency_ms_p50)} / {_n(d.latency_ms_p99)} | {_n(d.puts_per_s, 1)} "
                    f"({_n(d.puts_per_s_busiest_broker, 1)}) | {_early_share(d):.0%} | {_n(d.cost.total_usd)} |"
                )
        out.append("")
    for name, rules in by_scenario.items():
        out += [_changed(name, rules), ""]
    out += [
        "How the rule plays out: a broker whose requests come faster than its rounds complete (a round is "
        "about one PUT latency) closes a file at every round's end until its budget runs out, then at token "
        "times, so at the default budget it spends what the interval-only rule could spend at most and no "
        "more; a broker that sees few requests closes each file after the grace. Representatives split a send "
        "over more brokers of its AZ, and each of them receives a request of nearly every send, so partlog's "
        "brokers reach the budget at loads where the coordinator's (any-broker routing: one request per send) "
        "are still idle between requests; there the rule cuts the coordinator's latency more than partlog's.",
        "",
    ]
    out += [
        "**The representatives' penalty.** With AZ representatives a send of several partitions is split into "
        "one produce request per broker that represents them, and is answered when the slowest one is; with "
        "any-broker routing (the coordinator's) it is one request. Per send, representatives against any-broker "
        "routing on the same rule (partlog both):",
        "",
        "| scenario | rule | requests per send (representatives / any-broker) | send p50 ms | send p99 ms "
        "| p99 against the coordinator |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, rules in by_scenario.items():
        for rr in rules:
            rep = rr.run.design("partlog", "az-representative")
            any_ = rr.run.design("partlog", "any-broker")
            coord = rr.run.design("coordinator")
            cells = []
            for q in ("send_latency_ms_p50", "send_latency_ms_p99"):
                a, b = getattr(rep, q), getattr(any_, q)
                cells.append(f"{_n(a)} vs {_n(b)} (+{_n(a - b)}, {a / b:.2f}x)" if a and b else "-")
            vs = Comparison(
                "p99",
                "partlog (representatives)",
                rep.send_latency_ms_p99 or 0.0,
                "coordinator",
                coord.send_latency_ms_p99 or 0.0,
                " ms",
            )
            out.append(
                f"| `{name}` | {rr.rule} | {_requests_per_send(rep):.1f} / {_requests_per_send(any_):.1f} "
                f"| {cells[0]} | {cells[1]} | {vs.sentence()} |"
            )
    out.append("")
    return out
