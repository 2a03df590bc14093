"""What a simulated run records as it goes: its events (with the
acknowledgements and the loop's steps, what a seed's digest hashes), the
faults counted by kind, and the invariants it found broken.

Every part of the world (cluster, faults, workload, invariants) writes
here and nowhere else, so two runs of one seed can be compared entry by
entry.  A broken invariant ends the run where it was found
(:meth:`Journal.violated`).
"""

from __future__ import annotations

import asyncio
from typing import NoReturn

from simulations.dst.runtime import VirtualLoop


class Violation(Exception):
    """An invariant broke; the message says which and where."""


class Journal:
    """The run's record, stamped with virtual time."""

    def __init__(self, loop: VirtualLoop) -> None:
        self.loop = loop
        self.events: list[tuple[float, str]] = []
        self.violations: list[str] = []
        self.fault_counts: dict[str, int] = {}
        # The world's main task: a violation found anywhere cancels it.
        self.main_task: asyncio.Task[None] | None = None

    def event(self, what: str) -> None:
        self.events.append((round(self.loop.time(), 6), what))

    def count(self, kind: str, detail: str = "") -> None:
        self.fault_counts[kind] = self.fault_counts.get(kind, 0) + 1
        self.event(f"{kind} {detail}" if detail else kind)

    def violated(self, what: str) -> NoReturn:
        self.violations.append(f"t={self.loop.time():.3f}s: {what}")
        # Wherever it was found (the checker's task, walmgr's delete), the
        # run ends here: what follows a broken invariant proves nothing.
        if self.main_task is not None and not self.main_task.done():
            self.main_task.cancel()
        raise Violation(what)
