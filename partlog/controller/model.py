"""The controller's model, shared by both metadata back ends (the embedded
controller, :mod:`partlog.controller.core`, and the etcd one,
:mod:`partlog.controller.etcd_meta`): a broker as the controller keeps it,
the snapshot brokers learn, the events a change emits and their reasons,
the defaults and bounds both back ends apply, and the embedded
controller's configuration (``ControllerConfig``).  Types only: no rules
(:mod:`partlog.controller.rules`), no I/O.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from typing import NamedTuple

from partlog.controller.cluster_meta import BrokerInfo, TopicInfo
from partlog.kafka.producer_ids import PRODUCER_ID_BLOCK_SIZE

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
    "REASON_UNCLEAN_SHUTDOWN",
    "BrokerFenced",
    "BrokerRegistered",
    "BrokerRegistration",
    "ControllerConfig",
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
REASON_UNCLEAN_SHUTDOWN = "unclean_shutdown"  # a registration after one (KIP-966)
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


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    data_dir: str | os.PathLike[str]
    broker_session_timeout_ms: int = BROKER_SESSION_TIMEOUT_MS_DEFAULT
    unclean_leader_election_enable: bool = False
    # The cluster's min.insync.replicas (a topic's override wins): the ELR's threshold.
    min_insync_replicas: int = 1
    # 0 disables periodic preferred-leader election.
    leader_imbalance_check_interval_ms: int = LEADER_IMBALANCE_CHECK_INTERVAL_MS_DEFAULT
    producer_id_block_size: int = PRODUCER_ID_BLOCK_SIZE
    # The cluster id a new state directory gets (None: a random one); for an
    # existing directory it must match the one kept there.
    cluster_id: uuid.UUID | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.data_dir, str | os.PathLike) or not os.fspath(self.data_dir):
            raise ValueError(f"ControllerConfig.data_dir must be a non-empty path, got {self.data_dir!r}")
        if self.cluster_id is not None and not isinstance(self.cluster_id, uuid.UUID):
            raise ValueError(f"ControllerConfig.cluster_id must be a uuid.UUID, got {self.cluster_id!r}")
        for name, low in (
            ("broker_session_timeout_ms", 1),
            ("leader_imbalance_check_interval_ms", 0),
            ("producer_id_block_size", 1),
            ("min_insync_replicas", 1),
        ):
            v = getattr(self, name)
            if type(v) is not int or v < low:
                raise ValueError(f"ControllerConfig.{name} must be an integer >= {low}, got {v!r}")
        if type(self.unclean_leader_election_enable) is not bool:
            raise ValueError(
                f"ControllerConfig.unclean_leader_election_enable must be a bool, "
                f"got {self.unclean_leader_election_enable!r}"
            )


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
