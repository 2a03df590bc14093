"""Shrinking a failing seed: drop faults while it still fails.

Fault number k draws its details from its own random stream
(``simulations.dst.faults``), and the times and kinds of all faults come from one
stream that does not depend on what the faults did, so a run that injects
only some of a seed's faults still injects those at the same times.  The
search is a greedy delta debugging: try to drop halves of the remaining
faults, then quarters, down to single faults, keeping every drop after
which the run still breaks the same kind of invariant.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from simulations.dst.config import Faults, Result, Shape
from simulations.dst.world import run

# A violation's kind: what must still break for a smaller run to count.
_KINDS = [
    ("deleted", "a deletion while referenced"),
    ("acknowledged for", "two acknowledgements of one offset"),
    ("not readable", "acknowledged records not readable"),
    ("acknowledged", "an acknowledged record read back wrong"),
    ("read ", "a record read twice or out of order"),
    ("HWM", "a high watermark going back"),
    ("epoch", "controller epochs"),
    ("orphans", "orphans not deleted"),
    ("store", "a store inconsistent with its log"),
    ("corrupt", "corrupt batches"),
    ("run failed", "the run failed"),
]


def violation_kind(message: str) -> str:
    text = re.sub(r"^t=[0-9.]+s: ", "", message)
    for needle, kind in _KINDS:
        if needle in text:
            return kind
    return "other"


def shrink(
    first: Result,
    shape: Shape,
    faults: Faults,
    *,
    runs_max: int,
    progress: Callable[[str], None] = lambda line: None,
) -> tuple[Result, int]:
    """The smallest failing run found from ``first`` (a failing run) within
    ``runs_max`` more runs, and the runs spent."""
    assert not first.ok
    want = violation_kind(first.violations[0])
    best = first
    keep = first.fault_numbers
    runs = 0
    chunk = max(1, len(keep) // 2)
    while keep and runs < runs_max:
        dropped_any = False
        i = 0
        while i < len(keep) and runs < runs_max:
            trial = keep[:i] + keep[i + chunk :]
            r = run(first.seed, shape, faults, frozenset(trial))
            runs += 1
            if not r.ok and violation_kind(r.violations[0]) == want:
                keep, best, dropped_any = trial, r, True
                progress(f"  shrink: {len(keep)} faults still fail ({runs} runs)")
            else:
                i += chunk
        if chunk == 1 and not dropped_any:
            break
        chunk = max(1, chunk // 2)
    return best, runs


__all__ = ["shrink", "violation_kind"]
