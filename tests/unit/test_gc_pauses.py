"""FullCollectionFreezer: a slow full collection freezes its survivors, and
frozen objects are unfrozen (their garbage cycles reclaimed) once per
interval, at the start of a full collection."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from partlog.util.gc_pauses import FullCollectionFreezer, install


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(autouse=True)
def _unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()


def _collection(f: FullCollectionFreezer, clock: _Clock, generation: int, took_s: float) -> None:
    f("start", {"generation": generation})
    clock.now += took_s
    f("stop", {"generation": generation, "collected": 0, "uncollectable": 0})


def test_a_slow_full_collection_freezes_and_a_fast_one_or_a_young_one_does_not() -> None:
    clock = _Clock()
    f = FullCollectionFreezer(clock, freeze_ms=20, unfreeze_s=3600)
    _collection(f, clock, 2, 0.010)
    _collection(f, clock, 0, 0.500)
    _collection(f, clock, 1, 0.500)
    assert (f.full_collections, f.freezes, gc.get_freeze_count()) == (1, 0, 0)
    _collection(f, clock, 2, 0.150)
    assert (f.full_collections, f.freezes) == (2, 1)
    assert gc.get_freeze_count() > 0
    assert f.longest_full_ms == pytest.approx(150)


def test_frozen_objects_are_unfrozen_once_per_interval_so_their_cycles_are_reclaimed() -> None:
    clock = _Clock()
    f = FullCollectionFreezer(clock, freeze_ms=20, unfreeze_s=3600)

    class Node:
        other: object = None

    a, b = Node(), Node()
    a.other, b.other = b, a  # a cycle, alive for now
    alive = weakref.ref(a)
    _collection(f, clock, 2, 0.150)
    assert gc.get_freeze_count() > 0
    del a, b  # now garbage, but frozen: a full collection skips it
    gc.collect()
    assert alive() is not None
    clock.now += 3599
    _collection(f, clock, 2, 0.001)
    assert f.unfreezes == 0 and gc.get_freeze_count() > 0
    clock.now += 2
    f("start", {"generation": 2})
    assert f.unfreezes == 1 and gc.get_freeze_count() == 0
    gc.collect()
    assert alive() is None


def test_install_adds_one_freezer_per_process() -> None:
    before = list(gc.callbacks)
    try:
        first = install(_Clock())
        assert install(_Clock()) is first
        assert sum(isinstance(cb, FullCollectionFreezer) for cb in gc.callbacks) == 1
    finally:
        gc.callbacks[:] = before


def test_limits_are_checked() -> None:
    with pytest.raises(ValueError):
        FullCollectionFreezer(_Clock(), freeze_ms=-1)
    with pytest.raises(ValueError):
        FullCollectionFreezer(_Clock(), unfreeze_s=0)
