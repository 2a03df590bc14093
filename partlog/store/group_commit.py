"""Pipelined group commit: sequence the next group while the last one syncs.

A durable commit costs an fsync (~0.5-1 ms here) that releases the GIL.  If
callers simply took turns owning the write transaction, the CPU would idle
during every fsync.  Instead, work is split in two stages, like a database's
WAL writer:

* **sequence** (``prepare``): take every queued write, decide its outcome
  against the in-memory state, advance that state, and produce the bytes to
  write.  Pure CPU; one group at a time, in arrival order.
* **commit** (``apply``): write one prepared group in one transaction and
  make it durable.  One group at a time, in sequence order.

Group N+1 is sequenced while group N commits.  A caller is answered only after
the group holding its write committed, so acknowledged still means durable.
There are no dedicated threads: waiting callers take whichever stage is free
(the leader/follower pattern), so one caller alone runs both stages itself.

The in-memory state runs ahead of disk by at most ``depth_max`` groups.  If a
commit fails (an I/O error) that state can no longer be trusted, so the
pipeline stops for good (fail-stop, as Kafka takes a failed log directory
offline): every pending and later call raises, and the owner must reopen.

``exclusive(fn)`` runs ``fn`` alone, after draining the pipeline, for
operations that read what earlier writes wrote (deletions, topic changes).
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Sequence
from typing import Any, Generic, Protocol, TypeVar

T = TypeVar("T")
P = TypeVar("P", bound="Prepared")

# Groups sequenced but not yet committed.  Two lets one group sync while the
# next is sequenced; more would only add memory and latency.
PIPELINE_DEPTH_MAX = 2


class PipelineFailedError(RuntimeError):
    """A commit failed earlier; the owner must be reopened."""


class Prepared(Protocol):
    """What ``prepare`` returns: one outcome per write, in order."""

    @property
    def results(self) -> Sequence[Any]: ...

    @property
    def errors(self) -> Sequence[BaseException | None]: ...


class Write:
    __slots__ = ("done", "error", "event", "payload", "result", "weight")

    def __init__(self, payload: Any, weight: int) -> None:
        self.event = threading.Event()
        self.payload = payload
        self.weight = weight
        self.done = False
        self.result: Any = None
        self.error: BaseException | None = None


class _Slot(Generic[P]):
    """A sequenced group: its writes, what ``prepare`` made of them, its weight."""

    __slots__ = ("prepared", "weight", "writes")

    def __init__(self, writes: list[Write], prepared: P, weight: int) -> None:
        self.writes = writes
        self.prepared = prepared
        self.weight = weight


class GroupCommitPipeline(Generic[P]):
    """See the module doc.  ``prepare(writes, into)`` sequences ``writes``,
    into a new group when ``into`` is None, else appending to ``into`` (a group
    not yet committing); ``apply(group)`` makes a group durable."""

    def __init__(
        self,
        *,
        prepare: Callable[[list[Write], P | None], P],
        apply: Callable[[P], None],
        group_weight_max: int,
        depth_max: int = PIPELINE_DEPTH_MAX,
        name: str = "store",
    ) -> None:
        self._prepare = prepare
        self._apply = apply
        self.group_weight_max = group_weight_max
        self.depth_max = depth_max
        self.name = name
        self._cond = threading.Condition()
        self._queue: collections.deque[Write] = collections.deque()
        self._slots: collections.deque[_Slot[P]] = collections.deque()
        self._sequencing = False
        self._committing = False
        # The slot the sequencer is appending to; the committer leaves it alone.
        self._extending: _Slot[P] | None = None
        self._exclusive_waiting = 0
        self._parked: collections.deque[Write] = collections.deque()
        self.failed: BaseException | None = None
        self.stats = {"groups": 0, "writes": 0, "exclusive": 0}

    def _check(self) -> None:
        if self.failed is not None:
            raise PipelineFailedError(f"{self.name}: an earlier commit failed ({self.failed!r}); reopen it")

    def _open_slot(self) -> _Slot[P] | None:
        """The newest slot if it is not committing: new writes can join it.

        Joining the open group instead of starting another keeps groups as
        large as the arrivals during one fsync, which is what amortises it."""
        if not self._slots or (self._committing and len(self._slots) == 1):
            return None
        return self._slots[-1]

    def _sequencer_target(self) -> tuple[bool, _Slot[P] | None]:
        """Whether a write can be sequenced now, and into which open slot."""
        if self._sequencing or not self._queue or self._exclusive_waiting:
            return False, None
        target = self._open_slot()
        if target is not None and target.weight + self._queue[0].weight > self.group_weight_max:
            target = None
        return target is not None or len(self._slots) < self.depth_max, target

    def _can_commit(self) -> bool:
        return not self._committing and bool(self._slots) and self._slots[0] is not self._extending

    def _kick(self) -> None:
        """Wake one parked caller if a stage is free and has work.

        Callers park on their own event rather than one shared condition, so a
        state change wakes the one thread that can use it, not all of them."""
        if self._parked and (self._sequencer_target()[0] or self._can_commit()):
            self._parked.popleft().event.set()

    def submit(self, payload: Any, weight: int = 1) -> Any:
        """Sequence and commit ``payload``; return its result once durable."""
        w = Write(payload, weight)
        lock = self._cond
        with lock:
            self._check()
            self._queue.append(w)
            while True:
                if w.done:
                    self._kick()
                    break
                if self.failed is not None:
                    # Another caller's commit failed while this write was not
                    # where ``_fail`` could see it; nothing more is committed.
                    self._fail(self.failed, [w])
                    continue
                can_sequence, target = self._sequencer_target()
                if can_sequence:
                    self._sequencing = True
                    self._extending = target
                    room = self.group_weight_max - (target.weight if target is not None else 0)
                    group = self._take_group(room)
                    self._kick()
                    lock.release()
                    try:
                        prepared = self._prepare(group, target.prepared if target is not None else None)
                    except BaseException as e:  # a bug: prepare reports write errors itself
                        lock.acquire()
                        self._sequencing = False
                        self._extending = None
                        self._fail(e, group)
                        continue
                    lock.acquire()
                    self._sequencing = False
                    self._extending = None
                    if self.failed is not None:
                        # A commit failed while this group was being
                        # sequenced: ``_fail`` cleared the slots without it
                        # (and maybe ``target``), so fail it here instead of
                        # committing after the failure or losing its callers.
                        self._fail(self.failed, group)
                        continue
                    weight = sum(x.weight for x in group)
                    if target is not None:
                        target.writes.extend(group)
                        target.weight += weight
                    else:
                        self._slots.append(_Slot(group, prepared, weight))
                    self._notify_exclusive()
                elif self._can_commit():
                    self._committing = True
                    slot = self._slots[0]
                    self._kick()
                    lock.release()
                    try:
                        self._apply(slot.prepared)
                    except BaseException as e:
                        lock.acquire()
                        self._committing = False
                        self._fail(e, slot.writes)
                        continue
                    lock.acquire()
                    self._committing = False
                    if self.failed is not None:
                        # The sequencer failed meanwhile and already answered
                        # this slot's callers with the failure.
                        continue
                    self._slots.popleft()
                    results, errors = slot.prepared.results, slot.prepared.errors
                    for gw, result, error in zip(slot.writes, results, errors, strict=True):
                        gw.result, gw.error, gw.done = result, error, True
                        if gw is not w:
                            gw.event.set()
                    self.stats["groups"] += 1
                    self.stats["writes"] += len(slot.writes)
                    self._notify_exclusive()
                else:
                    self._parked.append(w)
                    lock.release()
                    try:
                        w.event.wait()
                        # A wake-up may be lost between wait and clear; the
                        # state is re-read under the lock right after.
                        w.event.clear()
                    finally:
                        lock.acquire()
                    if w in self._parked:
                        self._parked.remove(w)
        if w.error is not None:
            raise w.error
        return w.result

    def fail_stop(self, error: BaseException) -> None:
        """Refuse every new write from now on (a checkpoint failed).  Writes
        already submitted finish: their durability does not depend on what
        failed outside the stages."""
        with self._cond:
            if self.failed is None:
                self.failed = error
            self._cond.notify_all()

    def _notify_exclusive(self) -> None:
        if self._exclusive_waiting:
            self._cond.notify_all()

    def exclusive(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` with the pipeline drained and no other write running."""
        with self._cond:
            self._check()
            self._exclusive_waiting += 1
            try:
                while self._sequencing or self._committing or self._slots:
                    self._cond.wait()
                    self._check()
            finally:
                self._exclusive_waiting -= 1
            self._sequencing = self._committing = True
        try:
            return fn()
        finally:
            with self._cond:
                self._sequencing = self._committing = False
                self.stats["exclusive"] += 1
                self._cond.notify_all()
                self._kick()

    def _take_group(self, room: int) -> list[Write]:
        group: list[Write] = []
        weight = 0
        while self._queue and (not group or weight + self._queue[0].weight <= room):
            w = self._queue.popleft()
            group.append(w)
            weight += w.weight
        return group

    def _fail(self, error: BaseException, group: list[Write]) -> None:
        """Stop for good: fail this group, every sequenced group and the queue."""
        if self.failed is None:
            self.failed = error
        failure = PipelineFailedError(f"{self.name}: commit failed ({error!r}); nothing of this write is durable")
        failure.__cause__ = error
        pending = [*group, *(w for slot in self._slots for w in slot.writes), *self._queue]
        self._slots.clear()
        self._queue.clear()
        for w in pending:
            if not w.done:
                w.error, w.done = failure, True
                w.event.set()
        self._cond.notify_all()
