"""When a broker's open WAL file closes ("rotates"), sans-IO: the rule and
the per-broker PUT budget.  Time comes in as wall milliseconds; nothing here
reads a clock or keeps a global.

The rule (issue 30, docs/design/rotation.md), first that holds wins:

* ``SIZE``: the file holds ``buffer_bytes_max`` bytes (or the batch limit);
  checked by the pipeline as batches are added.
* ``URGENT``: a coordinator's record is in it (the pipeline's ``urgent``).
* ``INTERVAL``: its first batch is ``commit_interval_ms`` old (or the
  wall clock went back past its opening).
* ``IDLE`` / ``ROUND_DONE``: early closes.  The broker has no upload or
  commit in flight (nothing closed and unanswered), the file is at least
  ``rotation_grace_ms`` old, and the PUT budget holds a token.  ``IDLE`` when
  the file opened with nothing in flight (a client's burst came to an idle
  broker), ``ROUND_DONE`` when it opened during the previous round and
  closes as that round completes.
* ``FLUSH``: the shell asked (shutdown, tests).

The budget is a token bucket of ``wal_puts_per_s_max`` tokens a second,
holding at most :func:`burst_tokens` of them.  Only the early closes need a
token: at the budget an idle file waits for a token or for its interval
deadline, whichever comes first (:meth:`RotationPolicy.next_ms`).  Every
other close spends a token too, when it has none going into debt down to
minus one burst, so forced closes (interval, size, urgent) count against
the budget and hold early closes back after them.  The bound this gives, in
any window of ``W`` ms: early closes <= burst + budget * W / 1000, and all
closes <= that plus the forced closes of the window (proved in design.md;
``tests/unit/test_rotation_model.py`` asserts it).
"""

from __future__ import annotations

import enum

from partlog import injected_bugs

# A client's burst of requests (librdkafka sends up to 5 per connection back
# to back, then waits for the answers) reaches the broker within about a
# millisecond on one network; 2 ms lets the burst share one file without
# adding more than 2 ms to an idle broker's answer.
ROTATION_GRACE_MS_DEFAULT = 2


# Tokens are counted in thousandths, so that a refill of ``rate`` tokens a
# second is ``rate`` thousandths a millisecond: integers, no drift.
_MILLI = 1000
# "Idle since the beginning of time": a new pipeline has nothing in flight.
_LONG_AGO_MS = -(1 << 62)


class RotationReason(enum.StrEnum):
    """Why a WAL file closed (the ``reason`` label of ``partlog_wal_puts``)."""

    IDLE = "idle"
    ROUND_DONE = "round_done"
    INTERVAL = "interval"
    SIZE = "size"
    URGENT = "urgent"
    FLUSH = "flush"


# The closes the budget can hold back; all others happen regardless.
EARLY_REASONS = frozenset({RotationReason.IDLE, RotationReason.ROUND_DONE})


def default_puts_per_s_max(commit_interval_ms: int) -> int:
    """The budget when none is set: what the interval-only rule could spend.

    KIP-1163's cost model is one PUT per commit interval per broker at most
    (WAL files mix partitions so that request costs stay there), plus one
    per ``buffer_bytes_max`` at high throughput.  A budget of one PUT per
    interval keeps that bill (at 250 ms, 4 PUTs/s: 4 * 86,400 * 30 / 1000 *
    $0.005 = $52 a month per broker at S3 standard's PUT price; at the
    benchmarks' 50 ms, 20 PUTs/s and $259) and spends it on closing files
    when the broker is idle instead of on timer closes (docs/design/rotation.md).
    """
    return -(-1000 // commit_interval_ms)


def burst_tokens(puts_per_s_max: int) -> int:
    """The bucket's size: a tenth of a second's budget, at least one PUT, so
    that any one second holds at most 1.1 times the budget of early closes."""
    return max(1, puts_per_s_max // 10)


class PutBudget:
    """A token bucket of ``puts_per_s_max`` tokens a second; full at start."""

    def __init__(self, puts_per_s_max: int, now_ms: int = _LONG_AGO_MS) -> None:
        assert puts_per_s_max > 0
        self.puts_per_s_max = puts_per_s_max
        self.burst = burst_tokens(puts_per_s_max)
        self._capacity = self.burst * _MILLI
        self._level = self._capacity  # thousandths of a token
        self._at_ms = now_ms

    def _level_at(self, now_ms: int) -> int:
        # A wall clock stepped back refills nothing (and does not stall it:
        # see _advance).
        elapsed = max(0, now_ms - self._at_ms)
        return min(self._capacity, self._level + elapsed * self.puts_per_s_max)

    def _advance(self, now_ms: int) -> None:
        self._level = self._level_at(now_ms)
        self._at_ms = now_ms

    def tokens(self, now_ms: int) -> float:
        """Tokens held at ``now_ms`` (negative: in debt); changes nothing."""
        return self._level_at(now_ms) / _MILLI

    def has_token(self, now_ms: int) -> bool:
        return self._level_at(now_ms) >= _MILLI

    def token_at_ms(self, now_ms: int) -> int:
        """The first millisecond at or after ``now_ms`` holding a whole token
        (no earlier than the last take or spend: the level is known from there)."""
        now_ms = max(now_ms, self._at_ms)
        level = self._level_at(now_ms)
        if level >= _MILLI:
            return now_ms
        return now_ms + -(-(_MILLI - level) // self.puts_per_s_max)

    def take(self, now_ms: int) -> None:
        """An early close: it needs a whole token."""
        self._advance(now_ms)
        assert self._level >= _MILLI, "an early close without a token"
        self._level -= _MILLI

    def spend(self, now_ms: int) -> None:
        """A forced close: a token if there is one, else debt, down to minus
        one burst (a long run of forced closes must not starve early ones
        for longer than two bursts take to refill)."""
        self._advance(now_ms)
        self._level = max(-self._capacity, self._level - _MILLI)


class RotationPolicy:
    """The rule for the one open file of a pipeline.  The pipeline tells it
    when a file opens (``opened``), whether anything is in flight after each
    input (``observe``), and when a file closes (``closed``); it answers
    whether the file is due (``due``) and when to ask next (``next_ms``)."""

    def __init__(self, commit_interval_ms: int, rotation_grace_ms: int, wal_puts_per_s_max: int) -> None:
        self.commit_interval_ms = commit_interval_ms
        self.rotation_grace_ms = rotation_grace_ms
        self.budget = PutBudget(wal_puts_per_s_max)
        self.opened_ms: int | None = None  # None: no file open
        # Whether nothing was in flight when the open file opened.
        self.opened_idle = False
        # When the broker last became idle (nothing in flight); None while busy.
        self.idle_since_ms: int | None = _LONG_AGO_MS
        # The open file's early close was held back for want of a token.
        self._waited = False
        # Files whose early close waited for a token (partlog_wal_budget_waits).
        self.budget_waits = 0

    def opened(self, now_ms: int) -> None:
        assert self.opened_ms is None
        self.opened_ms = now_ms
        self.opened_idle = self.idle_since_ms is not None
        self._waited = False

    def observe(self, busy: bool, now_ms: int) -> None:
        """Whether a file closed earlier is still in its round (upload or
        commits not done), after an input at ``now_ms``."""
        if busy:
            self.idle_since_ms = None
        elif self.idle_since_ms is None:
            self.idle_since_ms = now_ms

    def early_at_ms(self) -> int | None:
        """When the open file may close early (budget permitting), or None."""
        if self.opened_ms is None or self.idle_since_ms is None:
            return None
        if not self.opened_idle and injected_bugs.on("rotation_leaves_idle_file_open"):
            return None
        return max(self.opened_ms + self.rotation_grace_ms, self.idle_since_ms)

    def due(self, now_ms: int) -> RotationReason | None:
        """Why the open file must close at ``now_ms``, or None."""
        if self.opened_ms is None:
            return None
        if now_ms >= self.opened_ms + self.commit_interval_ms or now_ms < self.opened_ms:
            # (Before its opening: the wall clock stepped back, and the
            # file's age is unknown; waiting for the clock to catch up
            # would hold its produces for the step's length.)
            return RotationReason.INTERVAL
        early = self.early_at_ms()
        if early is None or now_ms < early:
            return None
        if not self.budget.has_token(now_ms):
            if not self._waited:
                self._waited = True
                self.budget_waits += 1
            return None
        return RotationReason.IDLE if self.opened_idle else RotationReason.ROUND_DONE

    def next_ms(self) -> int | None:
        """When ``due`` may next answer a reason (no input coming before)."""
        if self.opened_ms is None:
            return None
        deadline = self.opened_ms + self.commit_interval_ms
        early = self.early_at_ms()
        if early is not None:
            deadline = min(deadline, self.budget.token_at_ms(early))
        return deadline

    def closed(self, reason: RotationReason, now_ms: int) -> None:
        """The open file closed at ``now_ms`` for ``reason``."""
        assert self.opened_ms is not None
        if reason in EARLY_REASONS:
            self.budget.take(now_ms)
        else:
            self.budget.spend(now_ms)
        self.opened_ms = None
