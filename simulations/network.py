"""The simulated network: round trips inside and across AZs, and FIFO
delivery per connection.

Brokers talk over one connection per peer (TCP): a message never overtakes
an earlier one on the same connection.  The pipeline relies on it (a
leader must see a sender's commits in WAL-file order), so the model keeps
it: a message sampled to arrive before its predecessor arrives with it.
Bandwidth is not modelled (messages here are small or already timed by the
object store model).
"""

from __future__ import annotations

import random

from simulations.latency import LatencySampler
from simulations.scenario import NetworkSpec


class Network:
    def __init__(self, spec: NetworkSpec, rng: random.Random) -> None:
        self._same = LatencySampler(spec.rtt_same_az, rng)
        self._cross = LatencySampler(spec.rtt_cross_az, rng)
        # (sender node, receiver node) -> latest arrival time so far.
        self._last_arrival_ms: dict[tuple[int, int], float] = {}
        # Degraded cross-AZ links (network-degradation events): an AZ ("":
        # every link) -> how many times longer its round trips take.
        self._degraded: dict[str, float] = {}

    def set_degraded(self, links: dict[str, float]) -> None:
        """Cross-AZ round trips from each AZ in ``links`` ("": every link)
        that many times longer; the rest normal."""
        self._degraded = {az: f for az, f in links.items() if f != 1.0}

    def rtt_ms(self, az_a: str, az_b: str) -> float:
        if az_a == az_b:
            return self._same.sample()
        rtt = self._cross.sample()
        if self._degraded:
            d = self._degraded
            rtt *= max(d.get("", 1.0), d.get(az_a, 1.0), d.get(az_b, 1.0))
        return rtt

    def one_way_ms(self, az_a: str, az_b: str) -> float:
        return self.rtt_ms(az_a, az_b) / 2

    def deliver_at(self, src: int, dst: int, az_src: str, az_dst: str, send_ms: float) -> float:
        """When a message sent at ``send_ms`` on connection src->dst arrives
        (a node's call to itself arrives at once)."""
        t = send_ms if src == dst else send_ms + self.one_way_ms(az_src, az_dst)
        key = (src, dst)
        last = self._last_arrival_ms.get(key, 0.0)
        if t < last:
            t = last
        self._last_arrival_ms[key] = t
        return t
