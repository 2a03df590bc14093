"""The release grace: object keys a store stopped referencing a moment ago,
or is about to reference, still answered as referenced to walmgr.

Why (docs/design/release-grace.md, where the argument is): a leader's fetch
answer names the objects of the entries (and segment rows) it carries.  The
answer may be built just before the leader swaps, rewrites or trims those
references away, and be applied by the follower a moment later.  Without a
grace, walmgr could ask both in between, hear "not referenced" from each,
and delete an object the follower is about to reference.  With it:

- every key a store releases (its last file-index reference, or a segment
  row dropped or replaced) counts as referenced for ``grace_ms`` after the
  release;
- a follower drops any answer older than half the grace when it would
  apply it (``ReplicationConfig.replica_answer_age_max_ms``), and holds the
  keys of an answer it applies from that check until the apply returned
  (:meth:`ReleaseGrace.hold`), then for the grace;
- an existing store opened (or reopened after a fail-stop) does not know
  what it released before: it answers every key as referenced for
  ``grace_ms`` (a store just created released nothing: no blanket);
- more released keys than ``RELEASED_KEYS_MAX`` within one grace: the map
  is dropped and every key counts as referenced for ``grace_ms`` (bounded
  memory, on the safe side).

Between a holder's emission and the receiver's check lies at most half the
grace, and each holder answers "referenced" until a grace after it released,
so the holders' "referenced" intervals overlap by at least half the grace:
walmgr, whose answers for one deletion span less than that
(``walmgr.config.WalmgrConfig.verdict_window_ms``), hears "referenced" from
one of them.  Time is the store's monotonic clock (seconds), passed in.
Thread-safe: writes note releases in the writer thread, walmgr's question
reads in a worker thread, the fetcher holds on the event loop.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from partlog import injected_bugs

# Released keys remembered within one grace before the map is dropped for a
# blanket grace (about 100 bytes each: 100k keys, ~10 MiB).
RELEASED_KEYS_MAX = 100_000
# The grace a broker's store gives (ReplicationConfig's default): well over
# a fetch's transit and apply, well under walmgr's swap deadline (5 min).
RELEASE_GRACE_MS_DEFAULT = 60_000


@dataclass(frozen=True, slots=True)
class Hold:
    """Keys held from a follower's check until its apply returned."""

    keys: frozenset[str]


class ReleaseGrace:
    """See the module doc.  ``grace_ms`` 0 turns the grace off (holds still
    count while held); ``monotonic`` returns seconds."""

    def __init__(self, grace_ms: int, monotonic: Callable[[], float]) -> None:
        if grace_ms < 0:
            raise ValueError(f"release grace must be >= 0 ms, got {grace_ms}")
        self.grace_ms = grace_ms
        self._now = monotonic
        self._lock = threading.Lock()
        # key -> when its grace ends (monotonic seconds), in release order,
        # so the expired ones are at the front.
        self._released: dict[str, float] = {}
        self._held: dict[str, int] = {}
        # Every key counts as referenced until then (open, or overflow).
        self._blanket_until = float("-inf")
        self.blankets = 0  # how many blanket graces began (opens, overflows)

    def opened(self) -> None:
        """The store was opened or reopened: every key counts for a grace."""
        with self._lock:
            self._blanket()

    def released(self, keys: Iterable[str]) -> None:
        """These keys lost their last reference in this store just now."""
        with self._lock:
            self._note_released(keys)

    def hold(self, keys: Iterable[str]) -> Hold:
        """Count ``keys`` as referenced until :meth:`end_hold` (the
        follower's apply of an answer naming them)."""
        h = Hold(frozenset(keys))
        with self._lock:
            for k in h.keys:
                self._held[k] = self._held.get(k, 0) + 1
        return h

    def end_hold(self, hold: Hold) -> None:
        """The apply returned (applied or not): the keys get a grace from now."""
        with self._lock:
            # One lock: no question sees a key neither held nor released.
            self._note_released(hold.keys)
            for k in hold.keys:
                n = self._held.pop(k)
                if n > 1:
                    self._held[k] = n - 1

    def covered(self, keys: Iterable[str]) -> set[str]:
        """The subset of ``keys`` the grace answers as referenced."""
        if injected_bugs.on("release_grace_ignored"):
            return set()
        with self._lock:
            if self.grace_ms == 0:  # (no clock read: a readonly store has none to read)
                return {k for k in keys if k in self._held}
            now = self._now()
            self._expire(now)
            if now < self._blanket_until:
                return set(keys)
            return {k for k in keys if k in self._held or k in self._released}

    def size(self) -> int:
        """Keys remembered now (released within a grace, or held)."""
        with self._lock:
            return len(self._released) + len(self._held)

    def _note_released(self, keys: Iterable[str]) -> None:
        if self.grace_ms == 0:
            return
        until = self._now() + self.grace_ms / 1000
        for k in keys:
            self._released.pop(k, None)
            self._released[k] = until
        if len(self._released) > RELEASED_KEYS_MAX:
            self._blanket()

    def _blanket(self) -> None:
        self._released.clear()
        if self.grace_ms == 0:
            return
        self._blanket_until = self._now() + self.grace_ms / 1000
        self.blankets += 1

    def _expire(self, now: float) -> None:
        while self._released:
            k, until = next(iter(self._released.items()))
            if until > now:
                return
            del self._released[k]


__all__ = ["RELEASED_KEYS_MAX", "RELEASE_GRACE_MS_DEFAULT", "Hold", "ReleaseGrace"]
