"""A clock whose wall time tests set by hand: ``clock.now`` (ms).

It is a :class:`partlog.runtime.Clock` (what walmgr, the scanner and the
brokers take) that can also be called, ``clock() == clock.now``, where a
component takes only a ``() -> wall ms`` function (the store).  Its
monotonic time is the machine's: durations and rates measured with it stay
real, while the wall time, which decides ages and gates, is the test's."""

from __future__ import annotations

from partlog.runtime import SYSTEM_CLOCK


class Clock:
    def __init__(self, now: int) -> None:
        self.now = now

    def wall_ms(self) -> int:
        return self.now

    def monotonic(self) -> float:
        return SYSTEM_CLOCK.monotonic()

    async def sleep(self, seconds: float) -> None:
        await SYSTEM_CLOCK.sleep(seconds)

    def __call__(self) -> int:
        return self.now
