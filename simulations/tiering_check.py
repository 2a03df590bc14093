"""The tiering model against the real planner, so the model does not drift
from what partlog builds (``python -m simulations tiering --cross-check``).

A small synthetic log: ``partitions`` partitions receive batches (Poisson,
seeded) that land in one stream of WAL objects rotating ``files_per_s``
times a second.  A loop as ``partlog/broker/tiering.py`` runs it calls the
real :func:`partlog.tiered.planner.plan_segment` for every partition at
every pass (every ``interval_s``; builds take no time here, and no pass
budget binds), so segments close where partlog closes them.  A WAL object's
references are gone when the last segment holding one of its batches is
swapped.  Measured after a warm-up of one segment.ms: segments a second,
mean segment bytes, and the mean and largest age of a WAL object when its
last reference goes, each against :func:`simulations.tiering.shape` and
the model's WAL lifetime on the same load.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from partlog.tiered.planner import EntryShape, plan_segment
from partlog.tiered.segment import SegmentConfig
from simulations.scenario import load_scenario
from simulations.tiering import Load, Shape, TieringConfig, shape

# How close the model's mean figures must come to the planner's.
CROSS_CHECK_TOLERANCE = 0.1
CHECK_TOLERANCE_NOTE = (
    f"The model against partlog.tiered.planner on a synthetic log: means within {CROSS_CHECK_TOLERANCE:.0%}, "
    "the model's largest age a bound."
)


@dataclass(frozen=True, slots=True)
class CheckCase:
    partitions: int = 16
    batches_per_s: float = 0.3  # per partition
    batch_bytes: int = 16384
    files_per_s: float = 4.0
    segment_ms: int = 300_000
    segment_bytes: int = 1 << 30
    interval_s: float = 10.0
    period_s: float = 4 * 3600.0
    seed: int = 1


@dataclass(frozen=True, slots=True)
class Figure:
    name: str
    model: float
    planner: float
    # The model's value is a bound (the planner's must not exceed it).
    bound: bool = False

    @property
    def ok(self) -> bool:
        if self.bound:
            return self.planner <= self.model
        return abs(self.model - self.planner) <= CROSS_CHECK_TOLERANCE * max(abs(self.planner), 1e-9)


@dataclass(frozen=True, slots=True)
class CrossCheck:
    case: CheckCase
    figures: tuple[Figure, ...]
    segments: int
    files: int

    @property
    def ok(self) -> bool:
        return all(f.ok for f in self.figures)


def model_shape(case: CheckCase) -> tuple[Shape, TieringConfig]:
    """The model on the case's load: one broker, builds that take no time."""
    cfg = TieringConfig(
        segment_ms=case.segment_ms,
        segment_bytes=case.segment_bytes,
        interval_s=case.interval_s,
        # Every partition may close a segment in one pass.
        segments_per_pass=case.partitions,
        bytes_per_pass=1 << 62,
        build_bytes_max=case.segment_bytes,
    )
    load = Load(
        design="partlog",
        routing="az-representative",
        azs=1,
        brokers=1,
        partitions=case.partitions,
        replication_factor=1,
        produce_bytes_per_s=case.partitions * case.batches_per_s * case.batch_bytes,
        batches_per_s=case.partitions * case.batches_per_s,
        wal_files_per_s=case.files_per_s,
        spread=1,
        put_ms=0.0,
        get_ms=0.0,
        put_bytes_per_s=1e18,
        prices=load_scenario("tiering-3az"),
    )
    return shape(load, cfg), cfg


def cross_check(case: CheckCase = CheckCase()) -> CrossCheck:
    rng = random.Random(f"tiering-check/{case.seed}")
    config = SegmentConfig(segment_bytes=case.segment_bytes, segment_ms=case.segment_ms)
    # Per partition: its batches (one record each) and the WAL object of each.
    logs: list[list[EntryShape]] = []
    files: list[list[int]] = []
    for _ in range(case.partitions):
        t = 0.0
        entries: list[EntryShape] = []
        keys: list[int] = []
        while True:
            t += rng.expovariate(case.batches_per_s)
            if t >= case.period_s:
                break
            ms = round(t * 1000)
            entries.append(EntryShape(len(entries), len(entries), case.batch_bytes, ms))
            keys.append(math.floor(t * case.files_per_s))
        logs.append(entries)
        files.append(keys)
    # The loop: a pass every interval; every closed segment is swapped at once.
    swapped_at: list[list[float]] = [[math.inf] * len(e) for e in logs]
    closes: list[tuple[float, int]] = []
    nxt = [0] * case.partitions
    arrived = [0] * case.partitions
    passes = int(case.period_s / case.interval_s)
    for i in range(1, passes + 1):
        now_s = i * case.interval_s
        now_ms = round(now_s * 1000)
        for p, entries in enumerate(logs):
            while arrived[p] < len(entries) and entries[arrived[p]].max_timestamp_ms <= now_ms:
                arrived[p] += 1
            while True:
                # Every arrived batch is committed (HWM = the next offset).
                plan = plan_segment(nxt[p], arrived[p], entries[nxt[p] : arrived[p]], config, now_ms)
                if plan is None:
                    break
                for off in range(plan.start_offset, plan.end_offset + 1):
                    swapped_at[p][off] = now_s
                closes.append((now_s, plan.size_bytes))
                nxt[p] = plan.end_offset + 1
    # Figures after a warm-up of one segment.ms, and files whose last
    # reference went before the end (a segment.ms and a pass of margin).
    warm = case.segment_ms / 1000
    tail = case.period_s - 2 * warm - case.interval_s
    window = [(t, b) for t, b in closes if warm <= t < tail]
    gone: dict[int, float] = {}
    for p, keys in enumerate(files):
        for off, key in enumerate(keys):
            gone[key] = max(gone.get(key, 0.0), swapped_at[p][off])
    ages = [g - key / case.files_per_s for key, g in gone.items() if warm <= key / case.files_per_s < tail]
    s, _ = model_shape(case)
    k = max(1.0, s.partitions_per_file)
    model_mean = s.close_s_mean - s.span_s / (k + 1) + s.delay_s_mean
    figures = (
        Figure("segments/s", s.segments_per_s, len(window) / (tail - warm)),
        Figure("segment bytes (mean)", s.segment_bytes, sum(b for _, b in window) / max(1, len(window))),
        Figure("WAL object age when its last reference goes, mean s", model_mean, sum(ages) / max(1, len(ages))),
        Figure(
            "WAL object age when its last reference goes, max s",
            s.close_s_max + s.delay_s_max + 1 / case.files_per_s,
            max(ages, default=0.0),
            bound=True,
        ),
    )
    return CrossCheck(case, figures, len(closes), len(ages))
