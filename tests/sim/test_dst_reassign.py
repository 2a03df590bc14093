"""The simulation with partition reassignment as an operation (``python -m
simulations.dst fuzz --reassign``): an operator moves partitions of the
topic (a leader or one follower to another broker, now and then a cancel)
through the controller while the faults run; the moves complete, the old
replicas drop their logs, and every invariant holds; the injected bugs are
found.  Seeds run through the CLI in a subprocess, as tests/sim/test_dst.py
does."""

from __future__ import annotations

import json
import re

import pytest

from tests.sim.test_dst import dst

pytestmark = pytest.mark.timeout(600)

# The injected bugs and the first seed of `fuzz --reassign` that finds each
# (`python -m simulations.dst fuzz --reassign --inject NAME --stop-at-first
# --shrink-runs 0`, from seed 1), with what it reports.  reassign_completes_early
# passes seed 1, and seed 3 is its first failure of its own (a move completed
# with a replica that had nothing in the ISR); seeds 4-7 fail too, 6 and 7 with
# an acknowledged offset reused (the empty replica led).  KIP-966's two rules
# (docs/design/elr.md) each save seed 2 (partition 10's replicas all down, 6 by
# a power loss): without the ELR the unclean rule leaves partition 10 offline
# for good (its last ISR member, 6, came back unclean); without both, 6 leads
# without what it lost (REASSIGN_FOUND_WITH).
REASSIGN_FIRST_FAILING_SEED = {
    "replica_drops_log_while_listed": 1,
    "reassign_completes_early": 3,
    "controller_without_elr": 2,
}
REASSIGN_FOUND_AS = {
    # t=1.1 s: the moved leader, in `removing`, dropped its log.
    "replica_drops_log_while_listed": "HWM went back",
    # t=14.6 s: the added replica joined the ISR with an empty log.
    "reassign_completes_early": "passes ISR member",
    # t=90 s: partition 10 offline for good, its producers stuck.
    "controller_without_elr": "producers still hold records",
}
# Bugs not found alone, with why.
REASSIGN_NOT_FOUND = {
    "unclean_shutdown_ignored": "not in seeds 1-10 alone: the ELR keeps seed 2's replicas that lost nothing "
    "(5, 1) and one of them comes back first; with controller_without_elr too (REASSIGN_FOUND_WITH) seed 2 "
    "acknowledges offset 26 twice, as before KIP-966",
}
# Bugs found only together, at seed 2, and what the simulation reports.
REASSIGN_FOUND_WITH = (("controller_without_elr", "unclean_shutdown_ignored"), "acknowledged for")
# Seeds of `fuzz --reassign` (1-10) that fail with no bug injected, and why:
# open findings (docs/design/dst.md), not a move's (the failure stays with
# the reassign fault dropped).  Seed 2 passes since KIP-966 (docs/design/elr.md).
REASSIGN_FAILING_WITHOUT_A_BUG: dict[int, str] = {}

MOVE = re.compile(r"move partition \d+ \[([\d, ]+)\] -> \[([\d, ]+)\]")


def test_seeds_pass_while_partitions_move() -> None:
    p = dst("replay", "1", "--reassign", "--json", "--events")
    assert p.returncode == 0, p.stdout + p.stderr
    r = json.loads(p.stdout)
    assert r["violations"] == []
    assert r["faults"].get("reassign_started", 0) >= 1 and r["faults"].get("reassign_completed", 0) >= 1, r["faults"]
    moves = [MOVE.search(what) for _, what in r["events"]]
    for m in filter(None, moves):
        before, after = ([int(b) for b in g.split(", ")] for g in m.groups())
        # A target of the same size, one broker replaced by one outside the replicas.
        assert len(after) == len(before) == len(set(after)) and len(set(after) - set(before)) == 1, m.group(0)


@pytest.mark.parametrize("name", sorted(REASSIGN_FIRST_FAILING_SEED))
def test_the_injected_bug_is_found(name: str) -> None:
    seed = REASSIGN_FIRST_FAILING_SEED[name]
    p = dst("fuzz", "--reassign", "--seeds", "1", "--first-seed", str(seed), "--inject", name, "--shrink-runs", "0")
    assert p.returncode == 1, p.stdout + p.stderr
    assert f"replay: python -m simulations.dst replay {seed} --reassign --inject {name}" in p.stdout
    assert REASSIGN_FOUND_AS[name] in p.stdout, p.stdout


def test_the_bugs_found_together_are_found() -> None:
    names, found_as = REASSIGN_FOUND_WITH
    injected = [arg for name in names for arg in ("--inject", name)]
    p = dst("fuzz", "--reassign", "--seeds", "1", "--first-seed", "2", *injected, "--shrink-runs", "0")
    assert p.returncode == 1, p.stdout + p.stderr
    assert found_as in p.stdout, p.stdout


def test_seed_2_passes() -> None:
    # The record flipped by KIP-966: partition 10's three replicas down at once, one by a power loss.
    p = dst("replay", "2", "--reassign", "--only-faults", "0,1,2")
    assert p.returncode == 0, p.stdout + p.stderr


def test_the_reassign_bugs_are_accounted_for() -> None:
    assert REASSIGN_FIRST_FAILING_SEED.keys() == REASSIGN_FOUND_AS.keys()
    assert not REASSIGN_FIRST_FAILING_SEED.keys() & REASSIGN_NOT_FOUND.keys()
    assert not set(REASSIGN_FIRST_FAILING_SEED.values()) & REASSIGN_FAILING_WITHOUT_A_BUG.keys()
