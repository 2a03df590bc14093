"""Time and randomness, handed in.

Library code (brokers, the controller, walmgr, RPC, the clients) never reads
the wall clock, a monotonic clock or an entropy source from a global: it is
given a :class:`Clock` and an :class:`Entropy` by whoever builds it, and
passes them on.  The real ones (:data:`SYSTEM_CLOCK`, :data:`SYSTEM_ENTROPY`)
are the defaults and the only place the library reads ``time`` and
``secrets``; ``tests/unit/test_runtime.py`` fails on a direct read anywhere else.

The deterministic simulation hands in a virtual clock (its event loop's
time, plus a per-broker skew) and seeded entropy, so a seed replays exactly
without patching ``time``, ``secrets``, ``uuid`` or ``random``; it runs inside
:func:`system_sources_forbidden`, so a component left on the system ones
fails loudly.  Tests hand in a :class:`ManualClock` and advance it instead
of sleeping.

Clocks, in the three senses the code needs:

* ``wall_ms()``: milliseconds since the Unix epoch.  WAL key names,
  LogAppendTime, retention, walmgr's age gate.  May jump (NTP); never used
  for a timeout.
* ``monotonic()``: seconds on a clock that never goes back, with an
  arbitrary origin.  Deadlines, timeouts, latencies.
* ``sleep(seconds)``: wait that long on this clock.  The asyncio shells
  sleep on their event loop (``asyncio.sleep``), whose clock the simulation
  already virtualises; ``sleep`` here is for code that waits between
  monotonic readings of this clock (a manual clock advances instead).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import secrets
import time
import uuid
from collections.abc import Iterator
from typing import Protocol, runtime_checkable

NS_PER_MS = 1_000_000

# While > 0, the system clock and entropy refuse to be read (see
# system_sources_forbidden): a deterministic simulation hands every
# component its own, and a component that fell back to the machine's must
# fail at once, not make a seed unreplayable.
_system_forbidden = 0


class SystemSourceForbiddenError(RuntimeError):
    """SYSTEM_CLOCK or SYSTEM_ENTROPY was read inside
    :func:`system_sources_forbidden`: a component was not handed its Clock or
    Entropy."""


@contextlib.contextmanager
def system_sources_forbidden() -> Iterator[None]:
    """While active, :data:`SYSTEM_CLOCK` and :data:`SYSTEM_ENTROPY` raise
    :class:`SystemSourceForbiddenError` instead of reading the machine: the
    deterministic simulation runs inside it, so a component that was not
    handed the simulation's clock or entropy is found, not silently real."""
    global _system_forbidden
    _system_forbidden += 1
    try:
        yield
    finally:
        _system_forbidden -= 1


def _check_allowed(what: str) -> None:
    if _system_forbidden:
        raise SystemSourceForbiddenError(f"{what} read where only a handed-in one may be (system_sources_forbidden)")


@runtime_checkable
class Clock(Protocol):
    """Wall time, monotonic time and waiting (module docstring)."""

    def wall_ms(self) -> int: ...

    def monotonic(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


@runtime_checkable
class Entropy(Protocol):
    """Random bytes and identifiers."""

    def token_bytes(self, n: int) -> bytes: ...

    def token_hex(self, n: int) -> str: ...

    def randbits(self, k: int) -> int: ...

    def uuid4(self) -> uuid.UUID: ...


class SystemClock:
    """The machine's clocks."""

    def wall_ms(self) -> int:
        _check_allowed("SYSTEM_CLOCK.wall_ms")
        return time.time_ns() // NS_PER_MS

    def monotonic(self) -> float:
        _check_allowed("SYSTEM_CLOCK.monotonic")
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    def __repr__(self) -> str:
        return "SystemClock()"


class SystemEntropy:
    """The operating system's entropy (``secrets``, ``uuid.uuid4``)."""

    def token_bytes(self, n: int) -> bytes:
        _check_allowed("SYSTEM_ENTROPY.token_bytes")
        return secrets.token_bytes(n)

    def token_hex(self, n: int) -> str:
        _check_allowed("SYSTEM_ENTROPY.token_hex")
        return secrets.token_hex(n)

    def randbits(self, k: int) -> int:
        _check_allowed("SYSTEM_ENTROPY.randbits")
        return secrets.randbits(k)

    def uuid4(self) -> uuid.UUID:
        _check_allowed("SYSTEM_ENTROPY.uuid4")
        return uuid.uuid4()

    def __repr__(self) -> str:
        return "SystemEntropy()"


SYSTEM_CLOCK: Clock = SystemClock()
SYSTEM_ENTROPY: Entropy = SystemEntropy()


class ManualClock:
    """A clock that moves only when told to: ``advance(seconds)``, or a
    ``sleep``, which advances it by the time slept and yields once to the
    event loop.  For tests that would otherwise sleep in real time."""

    def __init__(self, wall_ms: int = 1_700_000_000_000, monotonic: float = 1_000.0) -> None:
        if wall_ms < 0:
            raise ValueError(f"wall_ms must be >= 0, got {wall_ms}")
        self._wall_ms = wall_ms
        self._monotonic = monotonic

    def wall_ms(self) -> int:
        return self._wall_ms

    def monotonic(self) -> float:
        return self._monotonic

    async def sleep(self, seconds: float) -> None:
        self.advance(seconds)
        await asyncio.sleep(0)

    def advance(self, seconds: float) -> None:
        """Move both clocks ``seconds`` forward."""
        if seconds < 0:
            raise ValueError(f"a clock does not go back: advance({seconds})")
        self._monotonic += seconds
        self._wall_ms += round(seconds * 1000)

    def set_wall_ms(self, wall_ms: int) -> None:
        """Make the wall clock jump (either way), as NTP may; the monotonic
        clock does not move."""
        self._wall_ms = wall_ms

    def __repr__(self) -> str:
        return f"ManualClock(wall_ms={self._wall_ms}, monotonic={self._monotonic})"


class SkewedClock:
    """Another clock's time, with the wall clock off by ``skew_ms`` (which
    may change: a clock jump).  The monotonic clock is the base's: skew is a
    property of wall time, and deadlines are not affected by it."""

    def __init__(self, base: Clock, skew_ms: int = 0) -> None:
        self.base = base
        self.skew_ms = skew_ms

    def wall_ms(self) -> int:
        return self.base.wall_ms() + self.skew_ms

    def monotonic(self) -> float:
        return self.base.monotonic()

    async def sleep(self, seconds: float) -> None:
        await self.base.sleep(seconds)

    def __repr__(self) -> str:
        return f"SkewedClock({self.base!r}, skew_ms={self.skew_ms})"


class SeededEntropy:
    """Entropy from a seeded generator: the same seed gives the same tokens
    and ids in the same order.  For the simulation and tests only; never for
    secrets a peer must not guess."""

    def __init__(self, seed: int | random.Random) -> None:
        self._rng = seed if isinstance(seed, random.Random) else random.Random(seed)

    def token_bytes(self, n: int) -> bytes:
        return self._rng.randbytes(n)

    def token_hex(self, n: int) -> str:
        return self._rng.randbytes(n).hex()

    def randbits(self, k: int) -> int:
        return self._rng.getrandbits(k)

    def uuid4(self) -> uuid.UUID:
        return uuid.UUID(int=self._rng.getrandbits(128), version=4)

    def __repr__(self) -> str:
        return "SeededEntropy(...)"
