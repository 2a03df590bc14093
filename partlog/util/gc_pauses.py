"""Short pauses from Python's cyclic garbage collector in a long-running
server process (``partlog broker``, ``partlog cluster --serve``).

A full (generation 2) collection walks every object the collector tracks,
holding the interpreter: with a few thousand partitions that is over a
million objects and 100-200 ms in which no connection on the event loop
is served (librdkafka's 0127 allows a fetch 30 ms).  After a full
collection that took longer than ``GC_FULL_PAUSE_FREEZE_MS``, its
survivors are frozen (``gc.freeze``): later collections skip them, so
they walk only what was allocated since.  Reference counting still frees
frozen objects; only garbage cycles among them wait, until the first full
collection ``GC_UNFREEZE_INTERVAL_S`` after the last unfreeze, which
unfreezes them first (``gc.unfreeze``) and so reclaims them at that cost.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

# A full collection longer than this freezes its survivors.
GC_FULL_PAUSE_FREEZE_MS = 20
# Frozen objects are unfrozen (their garbage cycles collected) this often.
GC_UNFREEZE_INTERVAL_S = 3600


class FullCollectionFreezer:
    """A ``gc.callbacks`` entry: see the module doc.  ``monotonic`` is the
    process clock (seconds)."""

    def __init__(
        self,
        monotonic: Callable[[], float],
        *,
        freeze_ms: float = GC_FULL_PAUSE_FREEZE_MS,
        unfreeze_s: float = GC_UNFREEZE_INTERVAL_S,
    ) -> None:
        if freeze_ms < 0 or unfreeze_s <= 0:
            raise ValueError("freeze_ms must be >= 0 and unfreeze_s > 0")
        self._monotonic = monotonic
        self.freeze_ms = freeze_ms
        self.unfreeze_s = unfreeze_s
        self._started: float | None = None
        self._unfrozen_at = monotonic()
        self.full_collections = 0
        self.freezes = 0
        self.unfreezes = 0
        self.longest_full_ms = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if info.get("generation") != 2:
            return
        now = self._monotonic()
        if phase == "start":
            self._started = now
            if now - self._unfrozen_at >= self.unfreeze_s and gc.get_freeze_count():
                # Before this collection walks them: their cycles go now.
                gc.unfreeze()
                self.unfreezes += 1
                self._unfrozen_at = now
            return
        if self._started is None:
            return
        took_ms = (now - self._started) * 1000
        self._started = None
        self.full_collections += 1
        self.longest_full_ms = max(self.longest_full_ms, took_ms)
        if took_ms > self.freeze_ms:
            gc.freeze()
            self.freezes += 1
            # Debug: a command's stderr is its one-line error (the gauges count these).
            log.debug("a full garbage collection took %.0f ms: %d objects frozen", took_ms, gc.get_freeze_count())


def installed() -> FullCollectionFreezer | None:
    """This process's freezer, if :func:`install` added one."""
    return next((cb for cb in gc.callbacks if isinstance(cb, FullCollectionFreezer)), None)


def install(monotonic: Callable[[], float]) -> FullCollectionFreezer:
    """Add a :class:`FullCollectionFreezer` to ``gc.callbacks`` (once per
    process: the collector is the process's).  For the processes partlog's
    CLI runs; an embedding application decides for its own process."""
    freezer = installed()
    if freezer is None:
        freezer = FullCollectionFreezer(monotonic)
        gc.callbacks.append(freezer)
    return freezer


__all__ = ["GC_FULL_PAUSE_FREEZE_MS", "GC_UNFREEZE_INTERVAL_S", "FullCollectionFreezer", "install", "installed"]
