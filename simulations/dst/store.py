"""The simulated object store: S3's semantics in memory, with its faults.

Every decision comes from the world's seeded random stream, drawn in the
loop's thread (the runtime runs store calls inline), so a seed replays the
same errors.  Faults, each with a rate:

* ``error_rate``: a call fails with a retriable 503 SlowDown;
* ``lost_put_rate``: a PUT succeeds but its response is lost (the caller
  sees an error; the object exists: an orphan for walmgr);
* ``list_lag_s``: a listing may miss keys written less than this long ago
  (eventual consistency of listings);
* ``latency_s``/``slow_rate``/``slow_s``: what each PUT and GET takes, in
  virtual time (the runtime's ``to_thread`` sleeps it after the call: the call's
  effect is visible at once, its answer comes later); a ``slow_rate`` share
  of calls are slow (S3's tail: a PUT or GET that takes seconds).

``before_delete`` is called with the keys of every DeleteObjects before they
are removed: the world's deletion-safety invariant hangs there.
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from partlog.wal.objectstore import (
    DELETE_KEYS_MAX,
    LIST_KEYS_MAX,
    DeleteResult,
    ListPage,
    ObjectInfo,
    ObjectNotFoundError,
    ObjectStoreError,
    RangeNotSatisfiableError,
    check_key,
)


@dataclass
class StoreFaults:
    error_rate: float = 0.0
    lost_put_rate: float = 0.0
    list_lag_s: float = 0.0
    list_miss_rate: float = 0.0
    latency_s: tuple[float, float] = (0.0, 0.0)
    slow_rate: float = 0.0
    slow_s: tuple[float, float] = (0.5, 2.5)


@dataclass
class StoreStats:
    puts: int = 0
    gets: int = 0
    lists: int = 0
    deletes: int = 0
    errors_injected: int = 0
    lost_puts: int = 0
    listing_misses: int = 0
    slow_calls: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)


class SimObjectStore:
    """An :class:`partlog.wal.objectstore.ObjectStore` in memory."""

    def __init__(self, rng: random.Random, faults: StoreFaults, *, monotonic: Callable[[], float]) -> None:
        self.rng = rng
        self.monotonic = monotonic  # the virtual loop's time: when objects were written
        self.faults = faults
        self.objects: dict[str, tuple[bytes, float]] = {}  # key -> (data, written at, virtual s)
        # Keys in listing order (UTF-8 byte order; partlog's keys are ASCII,
        # so str order is the same): a LIST is a bisect, not a sort.
        self._sorted: list[str] = []
        self.stats = StoreStats()
        self.before_delete: Callable[[Sequence[str]], None] = lambda keys: None
        # Called once the keys are gone, before the call returns (a crash
        # here loses the confirmation, not the deletion).
        self.after_delete: Callable[[Sequence[str]], None] = lambda keys: None
        self.deleted: list[str] = []
        self._owed_s = 0.0  # latency of the calls not yet waited for

    def took_s(self) -> float:
        """The latency the calls made since the last ask owe (then zero)."""
        owed, self._owed_s = self._owed_s, 0.0
        return owed

    def _call(self) -> None:
        f = self.faults
        if f.latency_s[1] > 0:
            self._owed_s += self.rng.uniform(*f.latency_s)
        if f.slow_rate and self.rng.random() < f.slow_rate:
            self.stats.slow_calls += 1
            self._owed_s += self.rng.uniform(*f.slow_s)

    def describe(self) -> str:
        return "sim://objects"

    def _maybe_fail(self, op: str, key: str | None = None) -> None:
        if op == "put" or op == "get":
            # Brokers' uploads and reads take time.  walmgr's scans cost
            # none: in production their footer reads run in parallel, here
            # inline, and summing their latencies would model a scanner
            # walmgr does not have.
            self._call()
        if self.faults.error_rate and self.rng.random() < self.faults.error_rate:
            self.stats.errors_injected += 1
            self.stats.by_kind[op] = self.stats.by_kind.get(op, 0) + 1
            raise ObjectStoreError(f"sim: {op} {key or ''}: 503 SlowDown (injected)", key=key, retriable=True)

    def put(self, key: str, data: bytes) -> None:
        check_key(key)
        self._maybe_fail("put", key)
        self.stats.puts += 1
        if key not in self.objects:
            bisect.insort(self._sorted, key)
        self.objects[key] = (bytes(data), self.monotonic())
        if self.faults.lost_put_rate and self.rng.random() < self.faults.lost_put_rate:
            self.stats.lost_puts += 1
            raise ObjectStoreError(f"sim: put {key}: response lost (injected; the object exists)", key=key,
                                   retriable=True)  # fmt: skip

    def _data(self, key: str) -> bytes:
        check_key(key)
        got = self.objects.get(key)
        if got is None:
            raise ObjectNotFoundError(f"sim: no object {key}", key=key)
        return got[0]

    def get(self, key: str) -> bytes:
        self._maybe_fail("get", key)
        self.stats.gets += 1
        return self._data(key)

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        self._maybe_fail("get", key)
        self.stats.gets += 1
        data = self._data(key)
        if offset >= len(data):
            raise RangeNotSatisfiableError(f"sim: {key}: range starts at {offset}, object has {len(data)}", key=key)
        return data[offset : offset + length]

    def get_suffix(self, key: str, length: int) -> tuple[bytes, int]:
        self._maybe_fail("get_suffix", key)
        self.stats.gets += 1
        data = self._data(key)
        if not data:
            raise RangeNotSatisfiableError(f"sim: {key}: suffix of an empty object", key=key)
        return data[max(0, len(data) - length) :], len(data)

    def head(self, key: str) -> ObjectInfo:
        data = self._data(key)
        return ObjectInfo(key, len(data), int(self.objects[key][1] * 1000))

    def list_page(self, prefix: str, start_after: str = "", max_keys: int = LIST_KEYS_MAX) -> ListPage:
        self._maybe_fail("list")
        self.stats.lists += 1
        now = self.monotonic()
        i = (
            bisect.bisect_right(self._sorted, max(start_after, prefix))
            if start_after >= prefix
            else bisect.bisect_left(self._sorted, prefix)
        )
        out: list[ObjectInfo] = []
        for k in self._sorted[i:]:
            if not k.startswith(prefix):
                break
            data, at = self.objects[k]
            lagging = now - at < self.faults.list_lag_s
            if lagging and self.faults.list_miss_rate and self.rng.random() < self.faults.list_miss_rate:
                self.stats.listing_misses += 1
                continue  # a recent key this listing does not see yet
            if len(out) == max_keys:
                return ListPage(out, True)
            out.append(ObjectInfo(k, len(data), int(at * 1000)))
        return ListPage(out, False)

    def delete_many(self, keys: Sequence[str]) -> DeleteResult:
        if len(keys) > DELETE_KEYS_MAX:
            raise ValueError(f"delete_many takes at most {DELETE_KEYS_MAX} keys")
        for k in keys:
            check_key(k)
        self._maybe_fail("delete")
        self.before_delete(keys)
        self.stats.deletes += len(keys)
        for k in keys:
            if self.objects.pop(k, None) is not None:
                del self._sorted[bisect.bisect_left(self._sorted, k)]
                self.deleted.append(k)
        self.after_delete(keys)
        return DeleteResult(list(keys))
