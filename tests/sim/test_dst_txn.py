"""The simulation's transactional workload (``python -m simulations.dst fuzz
--txn``, simulations/dst/txn.py): a seed with transactional producers,
fencing and read_committed readers passes and replays to the same digest."""

from __future__ import annotations

import pytest

from simulations.dst.config import Faults, Shape
from simulations.dst.world import run

pytestmark = pytest.mark.timeout(600)


def test_a_transactional_seed_passes_and_replays_to_the_same_digest() -> None:
    shape = Shape(duration_s=5.0, settle_s=3.0, rate_per_producer=10.0, txn_producers=2, txn_timeout_ms=3_000)
    faults = Faults(broker_crashes_per_min=20.0, producer_restarts_per_min=30.0, connection_resets_per_min=30.0)
    a = run(11, shape, faults)
    b = run(11, shape, faults)
    assert a.ok, a.violations
    assert (a.digest, a.steps, a.acked) == (b.digest, b.steps, b.acked)
    [summary] = [what for _, what in a.events if what.startswith("transactions: ")]
    committed = int(summary.split()[1])
    assert committed > 0, summary
