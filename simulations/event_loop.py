"""A virtual clock and a heap of timed callbacks: the whole of the
simulator's notion of time.

Nothing here reads the wall clock.  Events at the same instant run in the
order they were scheduled (a sequence number breaks ties), so a run is a pure
function of its inputs and seed.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

# Events a single run may process.  A runaway schedule (an event rescheduling
# itself at the same instant) would otherwise spin forever; real scenarios stay
# far below (jun-100x100 at its shipped rate: a few million).
EVENTS_MAX = 200_000_000


class EventLoop:
    """Callbacks ordered by virtual time in milliseconds (floats: network
    latencies are fractions of a millisecond)."""

    __slots__ = ("_heap", "_seq", "events_run", "now_ms")

    def __init__(self) -> None:
        self.now_ms = 0.0
        self._heap: list[tuple[float, int, Callable[..., None], tuple[Any, ...]]] = []
        self._seq = 0
        self.events_run = 0

    def at(self, when_ms: float, fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn(*args)`` at virtual time ``when_ms`` (not before now)."""
        assert when_ms >= self.now_ms, f"event scheduled in the past: {when_ms} < {self.now_ms}"
        self._seq += 1
        heapq.heappush(self._heap, (when_ms, self._seq, fn, args))

    def after(self, delay_ms: float, fn: Callable[..., None], *args: Any) -> None:
        self.at(self.now_ms + delay_ms, fn, *args)

    def run_until(self, end_ms: float, progress: Callable[[float], None] | None = None) -> None:
        """Run every event due up to ``end_ms``; the clock ends at ``end_ms``.
        ``progress(now_ms)`` is called about every simulated second."""
        heap = self._heap
        pop = heapq.heappop
        next_progress_ms = 1000.0
        while heap and heap[0][0] <= end_ms:
            when, _, fn, args = pop(heap)
            self.now_ms = when
            fn(*args)
            self.events_run += 1
            if progress is not None and when >= next_progress_ms:
                progress(when)
                next_progress_ms = when + 1000.0
            assert self.events_run < EVENTS_MAX, f"more than {EVENTS_MAX} events: runaway schedule?"
        self.now_ms = end_ms
        if progress is not None:
            progress(end_ms)
