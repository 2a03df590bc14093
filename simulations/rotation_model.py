"""The rotation rule in expectation, for the aggregate mode: how long a
broker's WAL file stays open and how many files it closes a second, under
the brokers' rule (``partlog/produce/rotation.py``, docs/design/rotation.md)
with the scenario's grace and PUT budget.  The event-level mode runs the
rule itself (the real pipeline); this is its steady-state counterpart, the
same for every design's brokers.

One broker receives produce requests at rate R (Poisson).  A file closes at
time 0; its round (upload, then its commits answered, acks=all at the
replicas) ends at T.  The next request arrives at A ~ Exp(R) and opens the
next file, which closes (first that holds):

* opened idle (A >= T): ``rotation_grace_ms`` g after it opened;
* opened during the round (A < T): when the round ends, but at least g
  after it opened;
* at the latest ``commit_interval_ms`` I after it opened.

So the file is open D = clamp(T - A, g, I) (or g when A >= T), and one
cycle lasts C = A + D; files/s = 1 / E[C].  With g >= I, D = I and
files/s = 1 / (I + 1/R): the interval-only rule.  The budget of B early
closes a second: an early close needs a token, and the bucket (refilled at
B a second) is empty after the previous close when it holds one token (its
size for B < 20), so C = min(A + I, max(A + D, 1/B)): a file waits for the
token, never past I.  A bigger bucket lets some closes come sooner than
1/B; the model ignores that (it errs towards fewer files).  The mean is
taken over quadrature points of A and T; the file is open E[C] - E[A].

T is the upload (the store's PUT latency, quadrature over its lognormal,
plus the file's bytes over the PUT bandwidth) plus the commit: one round
trip to the farthest commit target, its group commit, and for acks=all
the round trip to its replicas and their append (means).  Queueing in the
commit stores is left out; the event-level mode has it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

from simulations.latency import LatencyDist
from simulations.scenario import Scenario

# Quadrature points over the PUT latency's lognormal: the file's open time
# is a nonlinear function of the round time, so its mean needs the spread.
_QUADRATURE_POINTS = 32
_RANGE = range(_QUADRATURE_POINTS)
_Z = tuple(NormalDist().inv_cdf((i + 0.5) / _QUADRATURE_POINTS) for i in _RANGE)
# Fixed-point passes: the upload time depends on the file's bytes, which
# depend on how long it stays open.
_PASSES = 3


@dataclass(frozen=True, slots=True)
class Rotation:
    """One broker's files in steady state."""

    files_per_s: float
    # Mean time a file is open (first request to close), seconds.
    open_s: float
    # Mean round time (close to the last commit answered), seconds.
    round_s: float


def mean_ms(d: LatencyDist) -> float:
    """The lognormal's mean."""
    return d.ms_p50 * math.exp(d.sigma**2 / 2)


def rotation(scenario: Scenario, request_rate: float, byte_rate: float, commit_ms: float) -> Rotation:
    """One broker receiving ``request_rate`` requests/s and ``byte_rate``
    bytes/s, whose files' commits take ``commit_ms`` (mean) once uploaded."""
    buf = scenario.buffer
    interval = float(buf.commit_interval_ms)
    grace = float(buf.rotation_grace_ms)
    budget = buf.puts_per_s_max()
    put = scenario.object_store.put
    put_ms = [math.exp(put.mu + put.sigma * z) if put.sigma else put.ms_p50 for z in _Z]
    bytes_per_ms = scenario.object_store.put_bytes_per_s / 1000
    rate = request_rate / 1000  # per ms
    size_ms = buf.buffer_bytes_max / (byte_rate / 1000) if byte_rate > 0 else math.inf
    # The gap A to the next request, at quadrature points scaled to keep its
    # mean 1/R exact (the interval-only rule's files/s then is 1 / (I + 1/R)).
    gaps = [-math.log(1 - (i + 0.5) / _QUADRATURE_POINTS) for i in _RANGE]
    gaps = [x * len(gaps) / sum(gaps) / rate for x in gaps]
    gap = 1 / rate
    token_ms = 1000 / budget if grace < interval else 0.0
    g = min(grace, interval)
    cycle = gap + interval  # the interval-only rule's, to start from
    round_ms = 0.0
    for _ in range(_PASSES):
        upload_extra = min(byte_rate * cycle / 1000, buf.buffer_bytes_max) / bytes_per_ms
        rounds = [p + upload_extra + commit_ms for p in put_ms]
        round_ms = sum(rounds) / len(rounds)
        total = 0.0
        for t in rounds:
            for a in gaps:
                # Free of the budget: the grace after an idle open, else the
                # round's end (at least the grace), at most the interval.
                free = a + (g if a >= t else min(interval, max(t - a, g)))
                # An early close waits for a token (1/B after the last close:
                # see the module docstring), never past the interval.
                total += min(a + interval, max(free, token_ms))
        cycle = total / (len(rounds) * len(gaps))
    open_ms = cycle - gap
    if open_ms >= size_ms:
        # Size closes: forced, and at a sustained rate they keep the bucket
        # in debt, so no early close comes between them.
        return Rotation(byte_rate / buf.buffer_bytes_max, size_ms / 1000, round_ms / 1000)
    return Rotation(1000 / cycle, open_ms / 1000, round_ms / 1000)
