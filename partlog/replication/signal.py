"""A broadcast wake-up for the leader's parked replica fetches."""

from __future__ import annotations

import asyncio


class Signal:
    """Wake every waiter at once; a waiter sees each fire after it started waiting."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def fire(self) -> None:
        self._event.set()
        self._event = asyncio.Event()

    def waiter(self) -> asyncio.Event:
        return self._event


__all__ = ["Signal"]
