"""The simulation with tiered segments (``python -m simulations.dst fuzz
--tiering``, simulations/dst/tiering.py): the leaders' builder loops upload
segments and swap references, followers apply the swaps, under every fault
of the fuzz mix; fixed seeds pass, and the injected swap bug is found.

Seeds run through the CLI in a subprocess, as tests/sim/test_dst.py does
(it fixes PYTHONHASHSEED, so a seed here is the seed a developer replays).
About a minute in all."""

from __future__ import annotations

import json

import pytest

from partlog.store.layout import Segment
from simulations.dst.tiering import missing_rows
from tests.sim.test_dst import dst

pytestmark = pytest.mark.timeout(600)

# The injected swap bug and the first seed of `fuzz --tiering` that finds it
# (`python -m simulations.dst fuzz --tiering --inject NAME --stop-at-first
# --shrink-runs 0`, from seed 1; docs/design/dst.md, "Injected bugs").
TIERING_FIRST_FAILING_SEED = {
    # Seed 2 since the slow replies (issue 31's release grace): seed 1 now
    # fails first on its producers, stuck on a partition the bug broke.
    "swap_positions_off_by_one": 2,
    # Found at t=6.0 s of seed 1: an orphan of 1,148 ms deleted (the swap deadline is 5 min).
    "walmgr_segment_gate_without_swap_deadline": 1,
}
# The release grace's two bugs (docs/design/release-grace.md), each alone and
# both together: not found by `fuzz --tiering` seeds 1-10, slow replies
# (+2-6 s, six a minute) and the invariant that no broker gains a reference
# to a deleted object included.  The race needs a late answer naming a WAL
# object whose every partition swapped it out, and walmgr deleting it, in
# one answer's delay; the unit tests (tests/unit/test_release_grace.py,
# tests/unit/test_fetcher_answer_age.py) fail with either bug.
TIERING_NOT_FOUND = {
    "release_grace_ignored": "seeds 1-10 pass",
    "follower_applies_stale_answers": "seeds 1-10 pass",
}


def test_tiering_seeds_pass_and_swap_on_leaders_and_followers() -> None:
    p = dst("fuzz", "--tiering", "--seeds", "2", "--first-seed", "1", "--json")
    assert p.returncode == 0, p.stdout + p.stderr
    summary = json.loads(p.stdout)
    assert summary["failed_seeds"] == []
    tiering = summary["tiering"]
    # Several segments per partition and seed, swapped on leaders and followers.
    assert tiering["swaps on leaders"] >= 2 * 12, tiering
    assert tiering["swaps applied on followers"] >= tiering["swaps on leaders"], tiering
    assert tiering["entries read through segments"] > 0, tiering


def test_the_injected_swap_bug_is_found() -> None:
    name = "swap_positions_off_by_one"
    seed = TIERING_FIRST_FAILING_SEED[name]
    p = dst("fuzz", "--tiering", "--seeds", "1", "--first-seed", str(seed), "--inject", name, "--shrink-runs", "0")
    assert p.returncode == 1, p.stdout + p.stderr
    assert f"replay: python -m simulations.dst replay {seed} --tiering --inject {name}" in p.stdout
    assert "its batch is not at tiered/" in p.stdout, p.stdout


def test_the_injected_segment_gate_bug_is_found() -> None:
    """walmgr's segment age gate without the swap deadline deletes an orphan
    a leader could still swap in (docs/design/tiered-gate.md)."""
    name = "walmgr_segment_gate_without_swap_deadline"
    seed = TIERING_FIRST_FAILING_SEED[name]
    p = dst("fuzz", "--tiering", "--seeds", "1", "--first-seed", str(seed), "--inject", name, "--shrink-runs", "0")
    assert p.returncode == 1, p.stdout + p.stderr
    assert "it may still be swapped in" in p.stdout, p.stdout


def _row(start: int, end: int, key: str) -> Segment:
    return Segment(start, end, 100, 1, key)


def test_missing_rows_waives_only_what_a_former_leaders_row_hides() -> None:
    leader = [_row(0, 9, "a"), _row(10, 19, "b"), _row(20, 29, "c"), _row(30, 39, "d")]
    # In step: nothing missing; a member behind misses the rest below the HWM.
    assert missing_rows(leader, 40, leader, 0) == []
    assert missing_rows(leader, 40, leader[:2], 0) == [(20, 29), (30, 39)]
    assert missing_rows(leader, 30, leader[:2], 0) == [(20, 29)]  # (30, 39) is not below the HWM
    assert missing_rows(leader, 40, leader[:2], 30) == [(30, 39)]  # (20, 29) below the log start
    # A former leader's row [0, 14] hides the current leader's rows starting
    # at or before 14; those after it are owed.
    former = [_row(0, 14, "x")]
    assert missing_rows(leader, 40, former, 0) == [(20, 29), (30, 39)]
    assert missing_rows(leader, 40, [*former, _row(20, 29, "c")], 0) == [(30, 39)]
