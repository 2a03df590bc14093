"""The injected bugs (mutations the simulation must find) are all live:
each known name is checked at exactly one site in the code, every site
names a known bug, and asking for any other name is refused.  Also what
the simulation is expected to find within a few seeds.  Fast: the source
is read with ast, nothing runs a seed."""

from __future__ import annotations

import ast
from collections import Counter

import pytest

from partlog import injected_bugs
from tests.paths import REPO
from tests.sim.test_dst import INJECTED
from tests.sim.test_dst_create_partitions import CREATE_PARTITIONS_FIRST_FAILING_SEED
from tests.sim.test_dst_reassign import REASSIGN_FIRST_FAILING_SEED, REASSIGN_NOT_FOUND
from tests.sim.test_dst_tiering import TIERING_FIRST_FAILING_SEED, TIERING_NOT_FOUND
from tests.sim.test_dst_txn import TXN_FIRST_FAILING_SEED

# Where mutation sites may be: the code the simulation runs, and its own
# stand-ins (the transaction coordinator's, the transformers).
PACKAGES = ("partlog", "walmgr", "spark", "simulations")


def _call_sites() -> list[tuple[str, object]]:
    """(file:line, the first argument's value, or the argument's source
    when it is not a string literal) for every ``injected_bugs.on(...)``."""
    sites: list[tuple[str, object]] = []
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            text = path.read_text()
            if "injected_bugs" not in text:
                continue
            where = path.relative_to(REPO)
            for node in ast.walk(ast.parse(text, str(path))):
                if isinstance(node, ast.ImportFrom) and node.module == "partlog.injected_bugs":
                    # `from partlog.injected_bugs import on` would hide its sites from this test.
                    names = [a.name for a in node.names]
                    assert "on" not in names, f"{where}:{node.lineno}: call injected_bugs.on(...), not on(...)"
                if not (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "on"
                    and isinstance(node.func.value, ast.Name)
                    and node.func.value.id == "injected_bugs"
                ):
                    continue
                arg = node.args[0] if len(node.args) == 1 and not node.keywords else None
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    sites.append((f"{where}:{node.lineno}", arg.value))
                else:
                    sites.append((f"{where}:{node.lineno}", ast.unparse(node)))
    return sites


def test_every_known_bug_has_exactly_one_site_and_every_site_a_known_bug() -> None:
    sites = _call_sites()
    unknown = [(where, name) for where, name in sites if name not in injected_bugs.KNOWN]
    assert not unknown, f"injected_bugs.on() with a name not in KNOWN (or not a string literal): {unknown}"
    per_name = Counter(name for _, name in sites)
    assert {name: per_name[name] for name in injected_bugs.KNOWN} == dict.fromkeys(injected_bugs.KNOWN, 1), sites


def test_on_refuses_an_unknown_name_and_enable_too() -> None:
    assert injected_bugs.on("walmgr_gate_without_commit_deadline") is False
    with pytest.raises(ValueError, match="no_such_bug"):
        injected_bugs.on("no_such_bug")
    with pytest.raises(ValueError, match="no_such_bug"):
        injected_bugs.enable(["no_such_bug"])
    assert not injected_bugs.enabled()


def test_enable_switches_on_exactly_the_named_bugs() -> None:
    name, other = sorted(injected_bugs.KNOWN)[:2]
    try:
        injected_bugs.enable([name])
        assert injected_bugs.on(name) and not injected_bugs.on(other)
        assert injected_bugs.enabled() == {name}
    finally:
        injected_bugs.enable([])
    assert not injected_bugs.on(name) and not injected_bugs.enabled()


# For each injected bug, the first seed of the fuzz run that finds it
# (`python -m simulations.dst fuzz --inject NAME --stop-at-first
# --shrink-runs 0`, from seed 1; docs/design/dst.md, "Injected bugs"), and so
# whether a run of FEW_SEEDS seeds is expected to find it.  A seed names a
# schedule only with the code of its day: these are expectations, measured
# by hand (re-checked for seeds 1-5 at issue 30, after the rotation and
# follower-append changes moved every schedule: the bugs listed at seeds
# above 5 were not found in seeds 1-5; their exact first seeds are from
# earlier issues); CI runs one of them
# (tests/sim/test_dst.py, INJECTED).
FIRST_FAILING_SEED = {
    "walmgr_gate_without_commit_deadline": 1,
    # 14 before issue 30's rotation and follower appends, 2 at issue 30;
    # issue 33: seeds 1-5 pass already at 04d06b2, seed 10 fails.
    "acks_all_before_hwm": 10,
    "retention_past_hwm": 19,
    "not_leader_counts_as_unreferenced": 11,
    "no_fetch_epoch_fencing": 38,
    "producer_ids_not_persisted": 63,
    # Issue 30: found by check_rotation at t=4.6 s of seed 1.
    "rotation_leaves_idle_file_open": 1,
    # Measured at issue 30: "leader's HWM passes ISR member's log end".
    "follower_ack_before_journal_sync": 2,
    # Issue 33: the followers re-fetch the same entries for ever; the
    # livelock check (steps per virtual second) ends seed 1 at t=2.7 s.
    "replica_session_keeps_old_items": 1,
    # Issue 33: followers never get new entries; "producers still hold
    # records 70 s after the faults stopped" at t=90 s of seed 1.
    "quiet_lane_ignores_writes": 1,
}
# Bugs the simulation no longer finds within the seeds tried, and how that
# was measured: not a pass, a gap to close (docs/design/dst.md).
NOT_FOUND_IN_SEEDS = {
    # Seed 1 at issue 29; at stop 49 (issue 33) seeds 1-24 pass with both
    # switched on (seed 1 at stop 48's code too): the follower a leader-only
    # check misses is rarely behind the leader's removal when walmgr asks.
    "walmgr_asks_only_leaders": "seeds 1-24 pass (with walmgr_skips_the_sweep)",
    "walmgr_skips_the_sweep": "seeds 1-24 pass (with walmgr_asks_only_leaders)",
}
# walmgr's two checks guard each other (issue 29): a bug in the leader
# check is masked by the sweep, and the sweep is only needed when a footer
# is wrong, which the simulation's writers never do.  These are found only
# with their partner switched on too (`--inject A --inject B`), measured
# that way at issue 29.
FOUND_WITH = {
    "walmgr_asks_only_leaders": "walmgr_skips_the_sweep",
    "not_leader_counts_as_unreferenced": "walmgr_skips_the_sweep",
    "walmgr_skips_the_sweep": "walmgr_asks_only_leaders",
}
# A few seeds: what a developer runs before pushing (a seed takes 10-35 s).
FEW_SEEDS = 5


def test_each_injected_bug_states_whether_a_few_seeds_find_it() -> None:
    # The transaction bugs are found with `fuzz --txn` (tests/sim/test_dst_txn.py),
    # the tiering bug with `fuzz --tiering` (tests/sim/test_dst_tiering.py).
    # and the CreatePartitions bug with `fuzz --create-partitions` (tests/sim/test_dst_create_partitions.py),
    # the reassignment bugs with `fuzz --reassign` (tests/sim/test_dst_reassign.py);
    # the release grace's are not found (TIERING_NOT_FOUND).
    other_modes = (
        TXN_FIRST_FAILING_SEED.keys()
        | TIERING_FIRST_FAILING_SEED.keys()
        | CREATE_PARTITIONS_FIRST_FAILING_SEED.keys()
        | REASSIGN_FIRST_FAILING_SEED.keys()
        | TIERING_NOT_FOUND.keys()
        | REASSIGN_NOT_FOUND.keys()
    )
    assert FIRST_FAILING_SEED.keys() | NOT_FOUND_IN_SEEDS.keys() | other_modes == injected_bugs.KNOWN.keys()
    found_within_few = sorted(name for name, seed in FIRST_FAILING_SEED.items() if seed <= FEW_SEEDS)
    assert found_within_few == [
        "follower_ack_before_journal_sync",
        "quiet_lane_ignores_writes",
        "replica_session_keeps_old_items",
        "rotation_leaves_idle_file_open",
        "walmgr_gate_without_commit_deadline",
    ]
    assert FOUND_WITH.keys() <= injected_bugs.KNOWN.keys() and set(FOUND_WITH.values()) <= injected_bugs.KNOWN.keys()
    # The one CI checks with a seed (tests/sim/test_dst.py) is one of those,
    # at the seed this table names.
    name, seed = INJECTED
    assert name in found_within_few and FIRST_FAILING_SEED[name] == seed and name not in FOUND_WITH
