"""What the simulated nodes share: the clock, the network, the recorder,
who is who; and the messages they exchange."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from partlog.kafka.errors import Errors
from partlog.kafka.records import CommitBatchResponse, TopicIdPartition
from partlog.produce.pipeline import SendCommit
from simulations.event_loop import EventLoop
from simulations.metrics import Recorder
from simulations.network import Network
from simulations.scenario import Scenario


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

    def now_ms(self) -> int:
        """The current virtual time as the real code sees it."""
        return self.epoch_ms + int(self.loop.now_ms)
