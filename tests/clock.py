"""A clock tests set by hand: ``clock()`` returns ``clock.now`` (ms)."""

from __future__ import annotations


class Clock:
    def __init__(self, now: int) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now
