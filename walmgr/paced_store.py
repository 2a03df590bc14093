"""The bucket as walmgr reads it: paced, and read retries that back off.

A large scan sends thousands of LISTs and footer GETs a second.  S3 allows
about 5,500 GETs a second per prefix and answers 503 SlowDown above it; a
shared bucket's brokers need their share too.  So walmgr's requests go
through one :class:`PacedStore`:

* at most ``requests_per_s_max`` requests a second (0: no cap), as a
  virtual schedule of request slots (GCRA): a request that would come too
  soon waits for its slot, so bursts are smoothed, not refused;
* a read (LIST, footer GET, HEAD) that fails with a retriable error (503
  SlowDown, throttling, 5xx, a timeout) is sent again after an exponential
  backoff with jitter, up to ``read_attempts`` in all, then the error goes
  up as before (the shard or footer waits for the next cycle).  Deletions
  are paced, never retried here: the deleter's persisted plan retries them.

The waits and retries are counted (``stats``) for walmgr's metrics.  An S3
store also retries inside botocore (its ``max_attempts``); the backoff here
is on top of that, for what botocore gave up on.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from partlog.runtime import SYSTEM_CLOCK, SYSTEM_ENTROPY
from partlog.wal.objectstore import (
    LIST_KEYS_MAX,
    DeleteResult,
    ForwardingStore,
    ListPage,
    ObjectInfo,
    ObjectNotFoundError,
    ObjectStore,
    ObjectStoreError,
    RangeNotSatisfiableError,
)

T = TypeVar("T")

# A read is tried at most this often (the first attempt included).
READ_ATTEMPTS_DEFAULT = 6
# Backoff before retry n: min(max, base * 2^(n-1)), times a jitter in [0.5, 1].
BACKOFF_BASE_MS = 100
BACKOFF_MAX_MS = 5_000


class PacedStore(ForwardingStore):
    def __init__(
        self,
        inner: ObjectStore,
        requests_per_s_max: int = 0,
        read_attempts: int = READ_ATTEMPTS_DEFAULT,
        *,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = SYSTEM_CLOCK.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        if requests_per_s_max < 0:
            raise ValueError(f"requests_per_s_max must be >= 0, got {requests_per_s_max}")
        if read_attempts < 1:
            raise ValueError(f"read_attempts must be >= 1, got {read_attempts}")
        super().__init__(inner)
        self.requests_per_s_max = requests_per_s_max
        self.read_attempts = read_attempts
        self._sleep = sleep
        self._clock = clock
        # Jitter only: seeded from the system entropy unless a test passes one.
        self._rng = rng if rng is not None else random.Random(SYSTEM_ENTROPY.randbits(64))
        self._lock = threading.Lock()
        self._next_slot = 0.0
        # requests sent, reads retried, seconds waited for a slot and in backoff
        self.stats: dict[str, float] = {"requests": 0, "retries": 0, "paced_s": 0.0, "backoff_s": 0.0}

    def _pace(self) -> None:
        rate = self.requests_per_s_max
        with self._lock:
            self.stats["requests"] += 1
            if not rate:
                return
            now = self._clock()
            slot = max(now, self._next_slot)
            self._next_slot = slot + 1.0 / rate
            wait = slot - now
            if wait > 0:
                self.stats["paced_s"] += wait
        if wait > 0:
            self._sleep(wait)

    def _read(self, call: Callable[[], T]) -> T:
        for attempt in range(1, self.read_attempts + 1):
            self._pace()
            try:
                return call()
            except (ObjectNotFoundError, RangeNotSatisfiableError):
                raise  # an answer, not a failure
            except ObjectStoreError as e:
                if not e.retriable or attempt == self.read_attempts:
                    raise
                delay = min(BACKOFF_MAX_MS, BACKOFF_BASE_MS * 2 ** (attempt - 1)) / 1000
                delay *= self._rng.uniform(0.5, 1.0)
                with self._lock:
                    self.stats["retries"] += 1
                    self.stats["backoff_s"] += delay
                self._sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        return self._read(lambda: self.inner.get_range(key, offset, length))

    def get_suffix(self, key: str, length: int) -> tuple[bytes, int]:
        return self._read(lambda: self.inner.get_suffix(key, length))

    def get(self, key: str) -> bytes:
        return self._read(lambda: self.inner.get(key))

    def head(self, key: str) -> ObjectInfo:
        return self._read(lambda: self.inner.head(key))

    def list_page(self, prefix: str, start_after: str = "", max_keys: int = LIST_KEYS_MAX) -> ListPage:
        return self._read(lambda: self.inner.list_page(prefix, start_after, max_keys))

    def delete_many(self, keys: Sequence[str]) -> DeleteResult:
        self._pace()
        return self.inner.delete_many(keys)
