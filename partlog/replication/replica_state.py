"""A partition leader's view of its replicas, sans-IO: ISR, high watermark
and acks=all completion, as Kafka's ``Partition`` and ``Replica`` do.

Inputs carry the time as a value: ``follower_fetch`` (a follower fetched at
``fetch_offset``, i.e. its log end offset), ``leader_appended`` (the leader's
log end moved).  ISR changes are two-phase, as Kafka's AlterPartition:
``isr_proposal(now)`` says which ISR the leader wants (followers lagging for
``replica_lag_time_max_ms`` out, caught-up ones in); the shell asks the
controller, then reports ``isr_committed`` or ``isr_failed``;
``replicas_changed`` takes a reassignment's new replica set at the same
leader epoch.  The HWM only moves forward.

Kafka's rules, kept here:

* A follower is caught up at a fetch when its fetch offset reaches the
  leader's log end offset, or the leader's log end offset as of the previous
  fetch (``Replica.updateFetchStateOrThrow``); it leaves the ISR when it has
  not been caught up for ``replica_lag_time_max_ms`` (30 s).
* It rejoins the ISR when its log end offset reaches the HWM (and the start
  of the leader's current epoch).
* HWM = min log end offset over the *maximal* ISR (the committed ISR plus
  replicas a pending expansion adds; a pending shrink still counts the
  replica leaving, so the HWM never passes a replica the controller may
  still elect: ``PendingExpandIsr`` / ``PendingShrinkIsr``) and over
  followers outside it that are caught up and eligible (about to join:
  ``shouldWaitForReplicaToJoinIsr``).  It does not advance while the
  committed ISR is below the effective minimum (KIP-966's strict min ISR,
  ``isUnderMinIsr``).
* The effective minimum is ``min(min_insync_replicas, replicas)``
  (``effectiveMinIsr``: a minimum above the replication factor is allowed).
* acks=all: refused with NOT_ENOUGH_REPLICAS before the append when the
  committed ISR is below the effective minimum; completed when the HWM
  passes the append; NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR is below
  the minimum at completion.

The brokers (``partlog.replication.manager``) and the simulations run this module.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from partlog.kafka.errors import Errors

# Kafka's replica.lag.time.max.ms default.
REPLICA_LAG_TIME_MAX_MS_DEFAULT = 30_000


@dataclass(slots=True)
class _Follower:
    log_end_offset: int = 0
    last_caught_up_ms: int = 0
    # The leader's log end offset at this follower's previous fetch.
    last_fetch_leader_leo: int = 0
    last_fetch_ms: int = 0


@dataclass(frozen=True, slots=True)
class AckResult:
    """An acks=all append that completed (or failed) after the ISR moved."""

    required_offset: int  # the HWM the append waits for (its last offset + 1)
    token: int
    error: Errors


@dataclass(slots=True)
class _Waiting:
    required_offset: int
    token: int


@dataclass(slots=True)
class ReplicaState:
    leader_id: int
    replicas: tuple[int, ...]
    min_insync_replicas: int = 1
    replica_lag_time_max_ms: int = REPLICA_LAG_TIME_MAX_MS_DEFAULT
    leader_epoch_start_offset: int = 0
    log_end_offset: int = 0
    high_watermark: int = 0
    isr: set[int] = field(default_factory=set)  # as the controller committed it
    partition_epoch: int = 0
    # When this leadership started: ISR members count as caught up then.
    start_ms: int = 0
    _followers: dict[int, _Follower] = field(default_factory=dict)
    _waiting: list[_Waiting] = field(default_factory=list)
    _pending: frozenset[int] | None = None  # an ISR change the controller has not answered
    # Members an expansion whose answer was lost (a timeout, a reset
    # connection) may have added: the controller may have committed it and
    # may elect them.  They count in the maximal ISR (the HWM waits for them,
    # walmgr's checks must name them) until the controller's answer to a
    # later proposal, or a newer partition epoch, settles the ISR.  Kafka
    # keeps such an expansion pending until its outcome is known.
    _uncertain: frozenset[int] = frozenset()
    # Whether a replica may join the ISR (not fenced); the shell sets it.
    eligible: Callable[[int], bool] | None = None
    _now_ms: int = 0  # the latest time an input carried

    def __post_init__(self) -> None:
        if self.leader_id not in self.replicas:
            raise ValueError(f"leader {self.leader_id} is not one of the replicas {self.replicas}")
        # Above the replica count is allowed, as in Kafka (effective_min_isr).
        if self.min_insync_replicas < 1:
            raise ValueError(f"min_insync_replicas must be >= 1, got {self.min_insync_replicas}")
        if self.replica_lag_time_max_ms <= 0:
            raise ValueError(f"replica_lag_time_max_ms must be > 0, got {self.replica_lag_time_max_ms}")
        if not self.isr:
            self.isr = set(self.replicas)  # a new leader starts from the ISR it was elected with
        self.isr.add(self.leader_id)
        self._now_ms = self.start_ms
        # ISR members count as caught up when the leadership starts; the
        # others not before they fetch (Kafka's resetReplicaState), so a
        # replica still catching up (one a reassignment adds) does not hold
        # the new leader's HWM back.
        never = self.start_ms - self.replica_lag_time_max_ms - 1
        for r in self.replicas:
            if r != self.leader_id:
                caught = self.start_ms if r in self.isr else never
                self._followers.setdefault(r, _Follower(last_caught_up_ms=caught, last_fetch_ms=caught))

    # ------------------------------------------------------------- inputs

    @property
    def effective_min_isr(self) -> int:
        return min(self.min_insync_replicas, len(self.replicas))

    @property
    def under_min_isr(self) -> bool:
        return len(self.isr) < self.effective_min_isr

    def check_acks_all(self) -> Errors:
        """Before an acks=all append: NOT_ENOUGH_REPLICAS if the ISR is too small."""
        return Errors.NOT_ENOUGH_REPLICAS if self.under_min_isr else Errors.NONE

    def leader_appended(self, log_end_offset: int, now_ms: int, wait_token: int | None = None) -> list[AckResult]:
        """The leader's log now ends at ``log_end_offset``; with ``wait_token``
        an acks=all append waits for the HWM to reach it."""
        if log_end_offset < self.log_end_offset:
            raise ValueError(f"log end offset went back from {self.log_end_offset} to {log_end_offset}")
        self.log_end_offset = log_end_offset
        self._now_ms = max(self._now_ms, now_ms)
        if wait_token is not None:
            self._waiting.append(_Waiting(log_end_offset, wait_token))
        return self._advance()

    def follower_fetch(self, follower_id: int, fetch_offset: int, now_ms: int) -> list[AckResult]:
        """A follower fetched from ``fetch_offset``: everything before it is on its log."""
        f = self._followers.get(follower_id)
        if f is None:
            raise ValueError(f"broker {follower_id} is not a follower of this partition")
        if self._caught_up_again(f, fetch_offset):
            # A caught-up follower fetching again at an unchanged log end:
            # most fetches of a quiet partition.  Only its times move;
            # _advance would find the HWM at the log end and nothing waiting
            # (the same as _follower_fetch: a differential test checks it).
            self._fetched_again(f, now_ms)
            return []
        return self._follower_fetch(follower_id, f, fetch_offset, now_ms)

    def quiet_fetch(self, follower_id: int, fetch_offset: int, now_ms: int | None) -> bool:
        """A fetch by ``follower_id`` at ``fetch_offset`` that would take the
        fast path of :meth:`follower_fetch` (an ISR member at an unchanged
        log end, with the HWM there and nothing waiting: a fetch by it checks
        no ISR change either) is taken at ``now_ms`` as that call would take
        it (None: only checked); False, and nothing changed, for any other
        (the full path's to take)."""
        f = self._followers.get(follower_id)
        if f is None or not self._caught_up_again(f, fetch_offset) or follower_id not in self.isr:
            return False
        if now_ms is not None:
            self._fetched_again(f, now_ms)
        return True

    def _caught_up_again(self, f: _Follower, fetch_offset: int) -> bool:
        """``follower_fetch``'s fast path: the follower at the log end it
        already reported, with the HWM there and nothing waiting."""
        leo = self.log_end_offset
        return fetch_offset == leo == f.log_end_offset == self.high_watermark and not self._waiting

    def _fetched_again(self, f: _Follower, now_ms: int) -> None:
        f.last_caught_up_ms = f.last_fetch_ms = now_ms
        f.last_fetch_leader_leo = self.log_end_offset
        if now_ms > self._now_ms:
            self._now_ms = now_ms

    def _follower_fetch(self, follower_id: int, f: _Follower, fetch_offset: int, now_ms: int) -> list[AckResult]:
        if fetch_offset > self.log_end_offset:
            raise ValueError(
                f"follower {follower_id} fetched at {fetch_offset}, past the log end {self.log_end_offset}"
            )
        f.log_end_offset = fetch_offset
        if fetch_offset >= self.log_end_offset:
            f.last_caught_up_ms = now_ms
        elif fetch_offset >= f.last_fetch_leader_leo:
            f.last_caught_up_ms = max(f.last_caught_up_ms, f.last_fetch_ms)
        f.last_fetch_leader_leo = self.log_end_offset
        f.last_fetch_ms = now_ms
        self._now_ms = max(self._now_ms, now_ms)
        return self._advance()

    def isr_proposal(self, now_ms: int, expand_for: int | None = None) -> tuple[int, ...] | None:
        """The ISR the leader wants now, if it differs from the committed one
        and no change is pending; it is pending from now on.

        Lagging members leave.  Only ``expand_for``, the follower whose fetch
        is being answered, may join (Kafka's ``maybeExpandIsr`` runs on that
        follower's fetch; the periodic check only shrinks).  A follower that
        stopped fetching at the HWM would otherwise rejoin on every periodic
        check and leave again, without ever having fetched: the ISR flaps,
        and its log start never learns what retention removed.  Only
        ``eligible`` replicas may join (Kafka's ``isReplicaIsrEligible``: not
        fenced by the controller, which would refuse them)."""
        self._now_ms = max(self._now_ms, now_ms)
        eligible = self.eligible
        if self._pending is not None:
            return None
        want = {self.leader_id}
        for fid, f in self._followers.items():
            if fid in self.isr:
                if now_ms - f.last_caught_up_ms <= self.replica_lag_time_max_ms:
                    want.add(fid)
            elif (
                fid == expand_for
                and f.log_end_offset >= self.high_watermark
                and f.log_end_offset >= self.leader_epoch_start_offset
                and (eligible is None or eligible(fid))
            ):
                want.add(fid)
        if want == self.isr and not self._uncertain:
            return None
        # With an uncertain outcome, even the unchanged ISR is proposed: the
        # controller's answer (the state it holds) settles it.
        self._pending = frozenset(want)
        return tuple(r for r in self.replicas if r in want)

    def isr_committed(self, isr: set[int] | frozenset[int] | tuple[int, ...], partition_epoch: int) -> list[AckResult]:
        """The controller committed ``isr`` (an answer to the proposal, or a
        change it made itself, e.g. fencing a dead follower)."""
        if partition_epoch < self.partition_epoch:
            return []
        self.isr = set(isr) | {self.leader_id}
        self.partition_epoch = partition_epoch
        self._pending = None
        self._uncertain = frozenset()
        return self._advance()

    def replicas_changed(
        self,
        replicas: tuple[int, ...],
        isr: set[int] | frozenset[int] | tuple[int, ...],
        partition_epoch: int,
        now_ms: int,
    ) -> list[AckResult]:
        """The controller changed the replica set at the same leader epoch (a
        reassignment adds the target's replicas, then removes the old ones),
        committing ``isr`` at ``partition_epoch``.

        An added replica starts unknown: log end 0, never caught up (Kafka's
        empty ``ReplicaState``), so it neither holds the HWM back nor joins
        the ISR before it fetched up to the HWM (the usual expansion).  A
        removed one is forgotten, with any pending or uncertain ISR change
        naming it (the controller refuses an ISR outside the replicas).  A
        newer partition epoch settles a pending change as ``isr_committed``
        does.  A stale one (below ours) is ignored."""
        if partition_epoch < self.partition_epoch:
            return []
        if self.leader_id not in replicas or len(set(replicas)) != len(replicas):
            raise ValueError(f"replicas {replicas} must name the leader {self.leader_id} once each")
        self._now_ms = max(self._now_ms, now_ms)
        keep = set(replicas)
        for r in [r for r in self._followers if r not in keep]:
            del self._followers[r]
        never = now_ms - self.replica_lag_time_max_ms - 1  # as a new leader's replicas out of the ISR
        for r in replicas:
            if r != self.leader_id and r not in self._followers:
                self._followers[r] = _Follower(last_caught_up_ms=never, last_fetch_ms=never)
        self.replicas = tuple(replicas)
        if partition_epoch > self.partition_epoch:
            self._pending = None
            self._uncertain = frozenset()
        elif self._pending is not None:
            self._pending &= keep
        self._uncertain &= keep
        self.isr = (set(isr) & keep) | {self.leader_id}
        self.partition_epoch = partition_epoch
        return self._advance()

    def isr_failed(self, outcome_unknown: bool = False) -> None:
        """The proposal was refused (``outcome_unknown=False``), or its
        answer was lost, so the controller may have committed it: propose
        again later.  Members it would have added stay in the maximal ISR
        until an answer or a newer partition epoch settles it."""
        if outcome_unknown and self._pending is not None:
            self._uncertain |= self._pending - self.isr
        self._pending = None

    @property
    def maximal_isr(self) -> set[int]:
        maximal = self.isr | self._uncertain
        return maximal | self._pending if self._pending is not None else maximal

    # ---------------------------------------------------------- internals

    def _holds_back_hwm(self, follower_id: int, f: _Follower, maximal: set[int]) -> bool:
        if follower_id in maximal:
            return True
        # Caught up and about to join: the HWM must not run away from it.
        return self._now_ms - f.last_caught_up_ms <= self.replica_lag_time_max_ms and (
            self.eligible is None or self.eligible(follower_id)
        )

    def _advance(self) -> list[AckResult]:
        if not self.under_min_isr:
            maximal = self.maximal_isr
            candidate = min(
                [self.log_end_offset]
                + [f.log_end_offset for r, f in self._followers.items() if self._holds_back_hwm(r, f, maximal)]
            )
            if candidate > self.high_watermark:
                self.high_watermark = candidate
        done: list[AckResult] = []
        keep: list[_Waiting] = []
        for w in self._waiting:
            if self.high_watermark >= w.required_offset:
                # Completed, but Kafka still refuses it if the ISR is below the
                # minimum at completion (Partition.checkEnoughReplicasReachOffset).
                err = Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND if self.under_min_isr else Errors.NONE
                done.append(AckResult(w.required_offset, w.token, err))
            else:
                keep.append(w)
        self._waiting = keep
        return done

    def fail_waiting(self, error: Errors) -> list[AckResult]:
        """Leadership is lost: every acks=all append waiting fails with ``error``."""
        done = [AckResult(w.required_offset, w.token, error) for w in self._waiting]
        self._waiting = []
        return done

    @property
    def waiting(self) -> int:
        return len(self._waiting)
