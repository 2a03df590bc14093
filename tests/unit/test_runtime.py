"""partlog.runtime: the clocks and entropy handed to the library."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st

from partlog.runtime import (
    SYSTEM_CLOCK,
    SYSTEM_ENTROPY,
    Clock,
    Entropy,
    ManualClock,
    SeededEntropy,
    SkewedClock,
)


def test_the_system_ones_and_the_fakes_meet_the_protocols() -> None:
    for clock in (SYSTEM_CLOCK, ManualClock(), SkewedClock(ManualClock(), 5)):
        assert isinstance(clock, Clock)
    for entropy in (SYSTEM_ENTROPY, SeededEntropy(1)):
        assert isinstance(entropy, Entropy)
    assert SYSTEM_CLOCK.wall_ms() > 1_600_000_000_000
    a = SYSTEM_CLOCK.monotonic()
    assert SYSTEM_CLOCK.monotonic() >= a
    assert len(SYSTEM_ENTROPY.token_bytes(8)) == 8
    assert SYSTEM_ENTROPY.uuid4().version == 4


@given(st.lists(st.floats(min_value=0, max_value=1e6, allow_nan=False), max_size=20))
def test_a_manual_clock_moves_only_forward_and_only_when_told(steps: list[float]) -> None:
    clock = ManualClock(wall_ms=1000, monotonic=5.0)
    mono, wall = clock.monotonic(), clock.wall_ms()
    for s in steps:
        clock.advance(s)
        assert clock.monotonic() >= mono and clock.wall_ms() >= wall
        mono, wall = clock.monotonic(), clock.wall_ms()
    assert clock.monotonic() == pytest.approx(5.0 + sum(steps))


def test_a_manual_clock_refuses_to_go_back_and_sleeping_advances_it() -> None:
    clock = ManualClock(wall_ms=0, monotonic=0.0)
    with pytest.raises(ValueError, match="does not go back"):
        clock.advance(-1)
    asyncio.run(clock.sleep(2.5))
    assert clock.monotonic() == 2.5 and clock.wall_ms() == 2500
    clock.set_wall_ms(100)  # NTP steps the wall clock back; monotonic stays
    assert clock.wall_ms() == 100 and clock.monotonic() == 2.5


def test_a_skewed_clock_shifts_wall_time_only() -> None:
    base = ManualClock(wall_ms=10_000, monotonic=3.0)
    skewed = SkewedClock(base, -400)
    assert skewed.wall_ms() == 9_600 and skewed.monotonic() == 3.0
    skewed.skew_ms = 250
    base.advance(1)
    assert skewed.wall_ms() == 11_250 and skewed.monotonic() == 4.0


@given(st.integers(min_value=0, max_value=2**32))
def test_seeded_entropy_replays(seed: int) -> None:
    a, b = SeededEntropy(seed), SeededEntropy(seed)
    assert [a.token_hex(8), a.uuid4(), a.randbits(62), a.token_bytes(3)] == [
        b.token_hex(8),
        b.uuid4(),
        b.randbits(62),
        b.token_bytes(3),
    ]
    assert a.uuid4().version == 4


def test_the_system_sources_refuse_inside_system_sources_forbidden() -> None:
    from partlog.runtime import SystemSourceForbiddenError, system_sources_forbidden

    with system_sources_forbidden():
        for read in (
            SYSTEM_CLOCK.wall_ms,
            SYSTEM_CLOCK.monotonic,
            SYSTEM_ENTROPY.uuid4,
            lambda: SYSTEM_ENTROPY.randbits(8),
        ):
            with pytest.raises(SystemSourceForbiddenError):
                read()
        SeededEntropy(1).uuid4()  # handed-in ones still work
    assert SYSTEM_CLOCK.wall_ms() > 0  # and the system ones again afterwards
