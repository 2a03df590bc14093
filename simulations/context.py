"""What the simulated nodes share: the clock, the network, the recorder,
who is who; and the messages they exchange."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from partlog.kafka.errors import Errors
from partlog.kafka.records import CommitBatchResponse, TopicIdPartition
from partlog.produce.pipeline import SendCommit
from simulations.event_loop import EventLoop
from simulations.metrics import Recorder
from simulations.network import Network
from simulations.scenario import FailureMode, Scenario


@dataclass(frozen=True, slots=True)
class ProduceRequest:
    """One produce request, as it travels from a producer to a broker."""

    producer_az: str
    sent_ms: float
    # The producer send it is part of (Recorder.send_started).
    send_id: int
    batches: tuple[tuple[TopicIdPartition, bytes], ...]
    nbytes: int
    acks_all: bool
    request_timeout_ms: int = 30_000
    # The producer's retry hook: called with the request and why it failed;
    # True when it will send the batches again (then the failure is not final).
    retry: Callable[[ProduceRequest, Sequence[tuple[TopicIdPartition, bytes]], str], bool] | None = None
    # When the batches were first sent (delivery.timeout.ms and the latency
    # a client sees count from there); -1: this is the first attempt.
    first_sent_ms: float = -1.0
    attempt: int = 0
    # Called with the request and when its answer reaches the producer,
    # when every batch was acknowledged (closed-loop producers).
    answered: Callable[[ProduceRequest, float], None] | None = None

    @property
    def since_ms(self) -> float:
        return self.sent_ms if self.first_sent_ms < 0 else self.first_sent_ms


class CommitSender(Protocol):
    node_id: int
    az: str

    def commit_answered(
        self, c: SendCommit, responses: Sequence[CommitBatchResponse] | None, error: Errors
    ) -> None: ...


class CommitTarget(Protocol):
    node_id: int
    az: str

    def receive_commit(self, sender: CommitSender, c: SendCommit, sent_ms: float) -> None: ...


class ProduceTarget(Protocol):
    node_id: int
    az: str
    alive: bool

    def on_produce(self, req: ProduceRequest) -> None: ...


@dataclass(slots=True)
class SimContext:
    scenario: Scenario
    loop: EventLoop
    network: Network
    recorder: Recorder
    # Virtual time 0 is this wall-clock instant for the real code (object
    # keys, the store's commit deadline, batch timestamps).
    epoch_ms: int
    broker_azs: dict[int, str]
    commit_targets: dict[int, CommitTarget] = field(default_factory=dict)
    produce_targets: dict[int, ProduceTarget] = field(default_factory=dict)
    # A dead broker (a lost AZ) -> when the others learn it was fenced: until
    # then it is still in the ISRs (the coordinator's replicas) it was in.
    dead_until_ms: dict[int, float] = field(default_factory=dict)
    az_dead_until_ms: dict[str, float] = field(default_factory=dict)

    def ack_stall_ms(self, follower: int) -> float | None:
        """None for a live follower; for a dead one still in ISRs, how much
        longer an acks=all commit waits for it (until the ISR drops it, at
        the fencing, as Kafka's and partlog's leaders wait)."""
        target = self.produce_targets.get(follower)
        if target is None or target.alive:
            return None
        return max(0.0, self.dead_until_ms.get(follower, self.loop.now_ms) - self.loop.now_ms)

    def now_ms(self) -> int:
        """The current virtual time as the real code sees it."""
        return self.epoch_ms + int(self.loop.now_ms)

    def dead_commit_target(
        self, target: CommitTarget, sender: CommitSender, c: SendCommit, sent_ms: float, mode: FailureMode
    ) -> None:
        """A commit reached (or was held by) a dead node: with REFUSE the
        sender's connection is refused or reset and it learns at once (a
        one-way back: NETWORK_EXCEPTION, as partlog/broker/server.py maps a
        lost connection); with BLACKHOLE its RPC times out."""
        loop = self.loop
        if mode is FailureMode.REFUSE:
            back = loop.now_ms + self.network.one_way_ms(target.az, sender.az)
            loop.at(back, sender.commit_answered, c, None, Errors.NETWORK_EXCEPTION)
        else:
            when = max(loop.now_ms, sent_ms + self.scenario.commit.commit_rpc_timeout_ms)
            loop.at(when, sender.commit_answered, c, None, Errors.REQUEST_TIMED_OUT)

    def dead_target(self, req: ProduceRequest, mode: FailureMode, why: str = "broker_dead") -> None:
        """A produce request reached (or was held by) a dead broker: with
        REFUSE the producer learns at once (connection refused or reset),
        with BLACKHOLE only at its ``request_timeout_ms``."""
        if mode is FailureMode.REFUSE:
            self.produce_failed(req, req.batches, why)
        else:
            when = max(self.loop.now_ms, req.sent_ms + req.request_timeout_ms)
            self.loop.at(when, self.produce_failed, req, req.batches, "request_timed_out")

    def produce_answered(self, req: ProduceRequest, arrival_ms: float) -> None:
        """Every batch of ``req`` acknowledged; the answer reaches its producer at ``arrival_ms``."""
        self.recorder.answered(req.send_id, req.since_ms, arrival_ms - req.since_ms)
        if req.answered is not None:
            req.answered(req, arrival_ms)

    def produce_failed(self, req: ProduceRequest, batches: Sequence[tuple[TopicIdPartition, bytes]], why: str) -> None:
        """``batches`` of ``req`` failed now with ``why``: its producer
        sends them again if it may (Kafka's retries within
        delivery.timeout.ms), else the failure is recorded.  The hook
        returns True when it took care of them (a retry, or its own record
        of the failure)."""
        if req.retry is not None and req.retry(req, batches, why):
            return
        self.recorder.failed(self.loop.now_ms, req.send_id, 1, len(batches), why)
