"""The controller's model, shared by both metadata back ends (the embedded
controller, :mod:`partlog.controller.core`, and the etcd one,
:mod:`partlog.controller.etcd_meta`): a broker as the controller keeps it,
the snapshot brokers learn, the events a change emits and their reasons,
and the defaults and bounds both back ends apply.  Types only: no rules
(:mod:`partlog.controller.rules`), no I/O.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import NamedTuple

from partlog.controller.cluster_meta import BrokerInfo, TopicInfo

__all__ = [
    "BROKER_SESSION_TIMEOUT_MS_DEFAULT",
    "DELETED_TOPICS_MAX",
    "FENCED_NEW_INCARNATION",
    "FENCED_SESSION_TIMEOUT",
    "LEADER_IMBALANCE_CHECK_INTERVAL_MS_DEFAULT",
    "REASON_ALTER_PARTITION",
    "REASON_BROKER_FENCED",
    "REASON_BROKER_REGISTERED",
    "REASON_OFFLINE",
    "REASON_PREFERRED",
    "BrokerFenced",
    "BrokerRegistered",
    "BrokerRegistration",
    "ControllerEvent",
    "IsrChanged",
    "LeaderChanged",
    "MetadataSnapshot",
    "TopicDeleted",
]

# Kafka's broker.session.timeout.ms default.
BROKER_SESSION_TIMEOUT_MS_DEFAULT = 9_000
# Kafka's leader.imbalance.check.interval.ms default.
LEADER_IMBALANCE_CHECK_INTERVAL_MS_DEFAULT = 300_000
# Deleted topic ids are kept for good and sent in every snapshot (16 bytes
# each); past this many, DeleteTopics is refused (POLICY_VIOLATION) rather
# than letting snapshots grow without bound.
DELETED_TOPICS_MAX = 100_000

# Leader-change and ISR-change reasons (logged by the shell).
REASON_BROKER_FENCED = "broker_fenced"
REASON_BROKER_REGISTERED = "broker_registered"
REASON_PREFERRED = "preferred"
REASON_ALTER_PARTITION = "alter_partition"
REASON_OFFLINE = "offline_partition"  # the periodic unclean election of offline partitions
# Why a broker was fenced.
FENCED_SESSION_TIMEOUT = "session_timeout"
FENCED_NEW_INCARNATION = "new_incarnation"


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """A broker as the controller keeps it (persisted)."""

    broker_id: int
    az: str
    host: str
    port: int
    broker_epoch: int
    fenced: bool
    kafka_port: int = 0
    kafka_listeners: str = ""

    def info(self) -> BrokerInfo:
        return BrokerInfo(self.broker_id, self.az, self.host, self.port, self.kafka_port, self.kafka_listeners)


class MetadataSnapshot(NamedTuple):
    """What brokers learn: the version, the ALIVE brokers, every topic, and
    the ids of deleted topics (their partitions hold no references: walmgr
    may delete objects only they were part of; brokers drop their logs)."""

    version: int
    brokers: list[BrokerInfo]
    topics: list[TopicInfo]
    cluster_id: uuid.UUID | None = None
    deleted_topics: frozenset[uuid.UUID] = frozenset()


# ------------------------------------------------------------------ events


@dataclass(frozen=True, slots=True)
class BrokerRegistered:
    broker_id: int
    broker_epoch: int
    az: str
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class BrokerFenced:
    broker_id: int
    broker_epoch: int
    reason: str


@dataclass(frozen=True, slots=True)
class LeaderChanged:
    """A partition's leader changed; ``leader`` is NO_LEADER when it went offline."""

    topic: str
    partition: int
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    reason: str
    unclean: bool = False


@dataclass(frozen=True, slots=True)
class IsrChanged:
    """The ISR changed without a leader change."""

    topic: str
    partition: int
    isr: tuple[int, ...]
    partition_epoch: int
    reason: str


@dataclass(frozen=True, slots=True)
class TopicDeleted:
    topic: str
    topic_id: uuid.UUID


ControllerEvent = BrokerRegistered | BrokerFenced | LeaderChanged | IsrChanged | TopicDeleted
