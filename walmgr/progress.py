"""Progress of a long full scan: keys/s and an ETA, for the logs, the
metrics and (``walmgr scan`` on a terminal) a progress bar.

A full scan lists the prefix in key order, and WAL keys are spread evenly
over the 256 hash shards (``wal/<shard>/...``, the shard a hash of the
name), so the shard of the last key listed says how far the scan is:
after shard ``i`` of 256, about ``(i + 1) / 256`` of the keys are behind
it.  No count from an earlier scan is needed, and a bucket that grew or
shrank since does not mislead the estimate.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from partlog.runtime import SYSTEM_CLOCK
from partlog.wal.key import ALL_SHARDS

log = logging.getLogger(__name__)

_SHARD_INDEX = {shard: i for i, shard in enumerate(ALL_SHARDS)}
# A progress line in the log at most this often (a scan of 1M keys at
# 2,000 keys/s takes 8 minutes: about 50 lines).
PROGRESS_LOG_INTERVAL_S = 10.0


@dataclass(frozen=True, slots=True)
class ScanProgress:
    keys_listed: int
    new_objects: int
    seconds: float
    # Share of the prefix listed, from the last key's shard; None before a
    # WAL key was listed.
    fraction_done: float | None

    @property
    def keys_per_s(self) -> float:
        return self.keys_listed / self.seconds if self.seconds > 0 else 0.0

    @property
    def eta_s(self) -> float | None:
        """Seconds left at the pace so far; None while unknown."""
        f = self.fraction_done
        if f is None or f <= 0 or self.seconds <= 0:
            return None
        return self.seconds * (1.0 - f) / f


def fraction_after(shard: str | None) -> float | None:
    """The share of a prefix's keys at or before ``shard`` (module doc)."""
    if shard is None or shard not in _SHARD_INDEX:
        return None
    return (_SHARD_INDEX[shard] + 1) / len(ALL_SHARDS)


ProgressSink = Callable[[ScanProgress], None]


class ProgressLog:
    """A sink that logs a line every ``interval_s`` (and sets gauges, when
    given): the daemon's, for every full scan."""

    def __init__(
        self,
        *,
        interval_s: float = PROGRESS_LOG_INTERVAL_S,
        on_update: ProgressSink | None = None,
        clock: Callable[[], float] = SYSTEM_CLOCK.monotonic,
    ) -> None:
        self.interval_s = interval_s
        self.on_update = on_update
        self.clock = clock
        self._last = clock()

    def __call__(self, p: ScanProgress) -> None:
        if self.on_update is not None:
            self.on_update(p)
        now = self.clock()
        if now - self._last < self.interval_s:
            return
        self._last = now
        eta = p.eta_s
        log.info(
            "full scan progress keys_listed=%d new_objects=%d keys_per_s=%.0f done=%s eta_s=%s",
            p.keys_listed,
            p.new_objects,
            p.keys_per_s,
            "?" if p.fraction_done is None else f"{p.fraction_done:.0%}",
            "?" if eta is None else f"{eta:.0f}",
        )


def fan_out(*sinks: ProgressSink | None) -> ProgressSink | None:
    """One sink calling each of ``sinks`` (the Nones left out)."""
    live = [s for s in sinks if s is not None]
    if not live:
        return None
    if len(live) == 1:
        return live[0]

    def call(p: ScanProgress) -> None:
        for s in live:
            s(p)

    return call


class ProgressBar:
    """A tqdm bar over the 256 shards, with keys and keys/s beside it, for
    ``walmgr scan`` on a terminal (tqdm turns itself off when stderr is not
    one).  Use as a context manager; the instance is the sink."""

    def __init__(self, description: str = "full scan") -> None:
        from tqdm import tqdm

        self._bar: Any = tqdm(total=len(ALL_SHARDS), desc=description, unit="shard", disable=None, leave=False)
        self._shards = 0

    def __call__(self, p: ScanProgress) -> None:
        if p.fraction_done is not None:
            shards = round(p.fraction_done * len(ALL_SHARDS))
            if shards > self._shards:
                self._bar.update(shards - self._shards)
                self._shards = shards
        self._bar.set_postfix(keys=p.keys_listed, keys_per_s=f"{p.keys_per_s:.0f}", refresh=False)

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, *exc: object) -> None:
        self._bar.close()
