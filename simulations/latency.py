"""Latency distributions given by their median and 99th percentile.

Network round trips and object-store requests are right-skewed with a long
tail; a lognormal is the usual first model and is fixed by two numbers users
know from their dashboards (p50, p99).  KIP-1163 states its latencies the same
way ("upload p50 ~100 ms, p99 200-400 ms").
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

# z-score of the 99th percentile of a standard normal.
_Z_P99 = 2.3263478740408408


@dataclass(frozen=True, slots=True)
class LatencyDist:
    """Lognormal with median ``ms_p50`` and 99th percentile ``ms_p99``
    (equal: a constant)."""

    ms_p50: float
    ms_p99: float

    def __post_init__(self) -> None:
        if not 0 <= self.ms_p50 <= self.ms_p99:
            raise ValueError(f"need 0 <= p50 <= p99, got p50={self.ms_p50} p99={self.ms_p99}")

    @property
    def mu(self) -> float:
        return math.log(self.ms_p50) if self.ms_p50 > 0 else float("-inf")

    @property
    def sigma(self) -> float:
        if self.ms_p50 == 0 or self.ms_p50 == self.ms_p99:
            return 0.0
        return math.log(self.ms_p99 / self.ms_p50) / _Z_P99


class LatencySampler:
    """Draws from a :class:`LatencyDist` with one seeded stream.  Hot path:
    the parameters are computed once."""

    __slots__ = ("_const", "_gauss", "_mu", "_sigma")

    def __init__(self, dist: LatencyDist, rng: random.Random) -> None:
        # gauss (Box-Muller, one draw in two cached) is several times
        # cheaper than lognormvariate's rejection loop: this is the hot path.
        self._gauss = rng.gauss
        self._mu = dist.mu
        self._sigma = dist.sigma
        self._const = dist.ms_p50 if self._sigma == 0.0 else None

    def sample(self) -> float:
        if self._const is not None:
            return self._const
        return math.exp(self._mu + self._sigma * self._gauss())
