"""The simulation's livelock checks (``simulations.dst.runtime``): a task
that never waits, and one that waits a network round trip each time but
never gets anywhere, both end the run with ``Livelock``; a busy but
plausible loop does not.  Fast: a bare virtual loop, no world."""

from __future__ import annotations

import asyncio
import random

import pytest

from simulations.dst.runtime import LIVELOCK_STEPS_MAX, LIVELOCK_WINDOW_S, Livelock, SimNetwork, VirtualLoop

LIMIT = f"{LIVELOCK_STEPS_MAX:,} steps within {LIVELOCK_WINDOW_S:g} s"


def _run(coro_factory: object, until_s: float) -> VirtualLoop:
    loop = VirtualLoop(SimNetwork(random.Random(1)))
    try:

        async def main() -> None:
            task = asyncio.ensure_future(coro_factory())  # type: ignore[operator]
            await asyncio.sleep(until_s)
            task.cancel()

        loop.run_until_complete(main())
        return loop
    finally:
        for task in asyncio.all_tasks(loop):
            # Left pending by the Livelock on purpose: no warning when collected.
            task._log_destroy_pending = False  # type: ignore[attr-defined]
        loop.close()


def test_a_task_that_never_waits_is_a_livelock() -> None:
    async def spin() -> None:
        for _ in range(3 * LIVELOCK_STEPS_MAX):  # bounded: without the check, the test fails
            await asyncio.sleep(0)

    with pytest.raises(Livelock, match=f"{LIMIT} of virtual time at 0.000 s"):
        _run(spin, 1.0)


def test_a_retry_that_waits_a_little_each_time_is_one_too() -> None:
    """What a follower re-fetching the same entries at once does: virtual
    time moves (each step waits), yet within a second far more steps run
    than any workload of the simulation makes."""

    async def retry() -> None:
        for _ in range(3 * LIVELOCK_STEPS_MAX):
            await asyncio.sleep(0.00002)

    with pytest.raises(Livelock, match=LIMIT):
        _run(retry, 5.0)


def test_a_busy_loop_under_the_limit_runs_and_its_busiest_second_is_counted() -> None:
    # A sleep is two loop steps: its timer's, and the task's.
    per_s = LIVELOCK_STEPS_MAX // 4

    async def busy() -> None:
        while True:
            await asyncio.sleep(LIVELOCK_WINDOW_S / per_s)

    loop = _run(busy, 3.0)
    assert 2 * per_s * 0.9 <= loop.busiest_second_steps <= LIVELOCK_STEPS_MAX
