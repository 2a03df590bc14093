"""The simulation with CreatePartitions as an operation (``python -m
simulations.dst fuzz --create-partitions``): the topic grows through the
controller while the faults run, the producers spread over the new
partitions and the read-back verifies them; the injected bug (a broker
that never creates added partitions) is found.  Seeds run through the CLI
in a subprocess, as tests/sim/test_dst.py does."""

from __future__ import annotations

import json

import pytest

from tests.sim.test_dst import dst

pytestmark = pytest.mark.timeout(900)

# The injected bug and the first seed of `fuzz --create-partitions` that
# finds it (`python -m simulations.dst fuzz --create-partitions --inject NAME
# --stop-at-first --shrink-runs 0`, from seed 1): at t=90 s of seed 1, five
# producers still hold records for the added partitions.  The failing seed
# runs until that check (70 s after the faults): minutes of wall time.
CREATE_PARTITIONS_FIRST_FAILING_SEED = {"broker_skips_added_partitions": 1}


def test_seeds_pass_while_the_topic_grows() -> None:
    p = dst("fuzz", "--create-partitions", "--seeds", "1", "--first-seed", "1", "--json")
    assert p.returncode == 0, p.stdout + p.stderr
    summary = json.loads(p.stdout)
    assert summary["failed_seeds"] == []
    assert summary["faults"].get("create_partitions", 0) >= 1, summary["faults"]


def test_the_injected_bug_is_found() -> None:
    name = "broker_skips_added_partitions"
    seed = CREATE_PARTITIONS_FIRST_FAILING_SEED[name]
    p = dst("fuzz", "--create-partitions", "--seeds", "1", "--first-seed", str(seed), "--inject", name,
            "--shrink-runs", "0", timeout_s=840)  # fmt: skip
    assert p.returncode == 1, p.stdout + p.stderr
    assert f"replay: python -m simulations.dst replay {seed} --create-partitions --inject {name}" in p.stdout
    assert "producers still hold records" in p.stdout, p.stdout
