"""What a ``partlog cluster`` run keeps in its object store, sampled while
it runs: live WAL objects, the oldest one's age, and tiered segments.

With tiering on (``--tiering-segment-ms``), issue 31's target is that the
oldest live WAL object is at most ``segment.ms`` + 2 minutes old and the
count of WAL objects stays flat while segments grow: the leaders move
committed batches into per-partition segments, and walmgr deletes a WAL
object once none of its batches is referenced there any more.  Without
tiering every WAL object lives as long as the topic's retention, so the
same figures grow with the run.

Ages come from the ``created_ms`` in the keys (the writer's clock, the one
the deletion gate measures), against the sampler's clock passed in.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

from partlog.produce.pipeline import ProduceConfig
from partlog.tiered.remote_storage import TIERED_PREFIX_DEFAULT
from partlog.wal.key import LOG_SUFFIX, WalKeyError, parse_wal_key
from partlog.wal.objectstore import ObjectStore, iter_objects

# The brokers' default WAL key prefix (ProduceConfig.key_prefix).
WAL_PREFIX_DEFAULT = ProduceConfig().key_prefix
# A listing is bounded: a census of more objects than this stops counting
# there (and says so), so a huge shared bucket costs bounded time per sample.
CENSUS_OBJECTS_MAX = 200_000
# One sample per this many milliseconds.
CENSUS_INTERVAL_MS_DEFAULT = 2_000
# Issue 31's slack over segment.ms for the oldest live WAL object.
OLDEST_WAL_SLACK_MS = 120_000
# "Flat": the second half's largest count of WAL objects is at most this
# many times the first half's (without tiering it grows with the run: ~2).
WAL_FLAT_RATIO_MAX = 1.25


@dataclass(frozen=True, slots=True)
class Census:
    at_ms: int
    wal_objects: int
    wal_bytes: int
    oldest_wal_age_ms: int  # 0 with no WAL object
    segments: int  # .log objects under the tiered layout
    segment_bytes: int
    truncated: bool  # the listing stopped at CENSUS_OBJECTS_MAX


def take_census(
    objects: ObjectStore,
    now_ms: int,
    wal_prefix: str = WAL_PREFIX_DEFAULT,
    tiered_prefix: str = TIERED_PREFIX_DEFAULT,
) -> Census:
    """List the cluster's two prefixes once each, at most
    ``CENSUS_OBJECTS_MAX`` keys in all, and classify what they hold (other
    keys are ignored; keys outside the prefixes are never listed)."""
    wal = wal_bytes = segs = seg_bytes = 0
    oldest: int | None = None
    listed = itertools.chain(
        iter_objects(objects, wal_prefix.rstrip("/") + "/"), iter_objects(objects, tiered_prefix.rstrip("/") + "/")
    )
    infos = list(itertools.islice(listed, CENSUS_OBJECTS_MAX + 1))
    truncated = len(infos) > CENSUS_OBJECTS_MAX
    for info in infos[:CENSUS_OBJECTS_MAX]:
        if info.key.endswith(LOG_SUFFIX):
            segs += 1
            seg_bytes += info.size
            continue
        try:
            key = parse_wal_key(info.key)
        except WalKeyError:
            continue
        wal += 1
        wal_bytes += info.size
        oldest = key.created_ms if oldest is None else min(oldest, key.created_ms)
    age = 0 if oldest is None else max(0, now_ms - oldest)
    return Census(now_ms, wal, wal_bytes, age, segs, seg_bytes, truncated)


@dataclass(slots=True)
class CensusSampler:
    """Samples :func:`take_census` every ``interval_ms`` in a thread until
    stopped; ``clock_ms`` is the wall clock the keys' ``created_ms`` use."""

    objects: ObjectStore
    clock_ms: Callable[[], int]
    interval_ms: int = CENSUS_INTERVAL_MS_DEFAULT
    samples: list[Census] = field(default_factory=list)
    _stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self) -> None:
        while True:
            self.samples.append(await asyncio.to_thread(take_census, self.objects, self.clock_ms()))
            try:
                await asyncio.wait_for(self._stop.wait(), self.interval_ms / 1000)
                return
            except TimeoutError:
                pass

    def stop(self) -> None:
        self._stop.set()


def summarize(samples: list[Census], segment_ms: int) -> dict[str, object]:
    """The report's figures: the largest WAL count and oldest WAL age over
    the second half of the run (after the first segments rolled), against
    the first half's, and with tiering (``segment_ms`` > 0) the verdicts
    against ``segment.ms`` + slack and :data:`WAL_FLAT_RATIO_MAX`."""
    if not samples:
        return {}
    half = samples[len(samples) // 2 :]
    first_max = max(s.wal_objects for s in samples[: max(1, len(samples) // 2)])
    second_max = max(s.wal_objects for s in half)
    oldest_ms = max(s.oldest_wal_age_ms for s in half)
    last = samples[-1]
    out: dict[str, object] = {
        "census_samples": len(samples),
        "wal_objects_last": last.wal_objects,
        "wal_objects_max_first_half": first_max,
        "wal_objects_max_second_half": second_max,
        "oldest_wal_age_ms_max": oldest_ms,
        "segments_last": last.segments,
        "segment_bytes_last": last.segment_bytes,
        "census_truncated": any(s.truncated for s in samples),
    }
    if segment_ms > 0:
        out["oldest_wal_bound_ms"] = segment_ms + OLDEST_WAL_SLACK_MS
        out["oldest_wal_within_bound"] = oldest_ms <= segment_ms + OLDEST_WAL_SLACK_MS
        out["wal_objects_flat"] = second_max <= WAL_FLAT_RATIO_MAX * max(1, first_max)
    return out
