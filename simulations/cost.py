"""Monthly cost of a design's object-store requests and cross-AZ transfer,
from the rates a run measured and the scenario's prices."""

from __future__ import annotations

from dataclasses import dataclass

from simulations.scenario import Scenario

# A 30-day month, as cloud price sheets count it.
SECONDS_PER_MONTH = 30 * 24 * 3600
BYTES_PER_GB = 1e9


@dataclass(frozen=True, slots=True)
class MonthlyCost:
    put_usd: float
    get_usd: float
    cross_az_usd: float

    @property
    def total_usd(self) -> float:
        return self.put_usd + self.get_usd + self.cross_az_usd


def monthly_cost(scenario: Scenario, puts_per_s: float, gets_per_s: float, cross_az_bytes_per_s: float) -> MonthlyCost:
    o = scenario.object_store
    return MonthlyCost(
        put_usd=puts_per_s * SECONDS_PER_MONTH / 1000 * o.put_usd_per_1000,
        get_usd=gets_per_s * SECONDS_PER_MONTH / 1000 * o.get_usd_per_1000,
        cross_az_usd=cross_az_bytes_per_s * SECONDS_PER_MONTH / BYTES_PER_GB * scenario.cross_az_usd_per_gb,
    )
