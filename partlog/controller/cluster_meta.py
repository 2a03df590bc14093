"""Cluster metadata as brokers and clients see it: brokers with their AZs,
topics with partition leaders, and produce routing.

Two sources implement the :class:`MetadataSource` protocol brokers use: the
static assignment here (a TOML file or generated from flags; leaders never
move, ISR changes are accepted locally) and the embedded controller's
(:mod:`partlog.controller.client`).  A broker embedding partlog can supply its
own.

Produce representatives (design.md, "The design in one page", item 4): a client in AZ ``z`` sends a
partition led by ``L`` to ``rep(L, z) = L`` when ``L`` is in ``z``, else to
``brokers_in(z)[stable_hash(L) mod |brokers_in(z)|]``.  Our ``stable_hash(L)``
is ``L``'s rank among the brokers of its own AZ (by id): with equally sized
AZs the map from one AZ's brokers to another's is then a bijection, so every
broker represents exactly one leader per other AZ and a WAL file costs one
local commit and at most AZs - 1 remote ones.  A real hash would collide and
raise that bound for no benefit.

Cluster identity (design.md, "Deletion safety", step 0): every source names the
cluster it describes (``cluster_id``, a random UUID made once, when the
cluster is created).  Brokers record it in their stores and WAL footers and
present it in every RPC handshake, and walmgr binds its registry to it, so
two clusters with topics of the same names never mistake one another's
objects or leaders.  Topic ids are random at creation (the controller) or
named in a cluster file; a cluster file topic without an id gets one derived
from the cluster id and the name, so it is stable for that cluster and no
other.
"""

from __future__ import annotations

import re
import tomllib
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol, runtime_checkable

from partlog.kafka.errors import Errors
from partlog.kafka.producer_ids import ProducerIdBlock
from partlog.kafka.records import TopicIdPartition
from partlog.kafka.topic_config import ConfigOp
from partlog.runtime import SYSTEM_ENTROPY

# A partition without a leader (all of its ISR is down).
NO_LEADER = -1


class MetadataError(ValueError):
    """Cluster metadata is inconsistent or a config file is wrong: a
    configuration error (exit status 2 in the CLIs)."""

    exit_status = 2


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    broker_id: int
    az: str
    host: str = "127.0.0.1"
    port: int = 0
    # The Kafka listener's port (partlog.kafka_front); 0: none.
    kafka_port: int = 0
    # Every Kafka listener's advertised address by its name,
    # "SASL_SSL:host:9093,PLAINTEXT:9092" (Kafka's advertised listeners; see
    # kafka_listener_addresses; a listener without a host is on ``host``);
    # empty: only the one listener on kafka_port, as before listeners had names.
    kafka_listeners: str = ""

    def kafka_address_of(self, listener: str) -> tuple[str, int]:
        """Where clients of the Kafka listener named ``listener`` reach this
        broker: (host, port), port 0 when it has no such listener; a broker
        registered without names has only ``kafka_port``, on ``host``."""
        if not self.kafka_listeners:
            return self.host, self.kafka_port
        host, port = kafka_listener_addresses(self.kafka_listeners).get(listener, (None, 0))
        return host or self.host, port

    def kafka_port_of(self, listener: str) -> int:
        return self.kafka_address_of(listener)[1]


# Room for a few listeners with DNS names (a registration is one RPC field
# and one etcd value; the RPC schema's limit is the same number).
KAFKA_LISTENERS_CHARS_MAX = 1_000
# Matched whole (fullmatch: re's "$" would also match before a final newline).
_LISTENER_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_HOST = re.compile(r"\[[0-9a-fA-F:.]+\]|[A-Za-z0-9._-]+")


def kafka_listener_addresses(text: str) -> dict[str, tuple[str | None, int]]:
    """``"NAME:PORT,NAME:HOST:PORT,..."`` (a host in brackets when IPv6) as
    {name: (host or None, port)}; ValueError when malformed."""
    if len(text) > KAFKA_LISTENERS_CHARS_MAX:
        raise ValueError(f"kafka_listeners: more than {KAFKA_LISTENERS_CHARS_MAX} characters")
    out: dict[str, tuple[str | None, int]] = {}
    for item in text.split(","):
        name, _, rest = item.partition(":")
        host, sep, port = rest.rpartition(":")
        if (
            not _LISTENER_NAME.fullmatch(name)
            or not (port.isascii() and port.isdigit())
            or not 0 < int(port) <= 65_535
            or (sep and not _HOST.fullmatch(host))
            or name in out
        ):
            raise ValueError(
                f"kafka_listeners: {item!r} is not NAME:PORT or NAME:HOST:PORT (or names a listener twice)"
            )
        out[name] = (host.strip("[]") if sep else None, int(port))
    return out


def format_kafka_listeners(addresses: Sequence[tuple[str, str, int]]) -> str:
    """The registration text of (name, host, port) listeners, as
    :func:`kafka_listener_addresses` reads it."""
    return ",".join(f"{n}:{f'[{h}]' if ':' in h else h}:{p}" for n, h, p in addresses)


def kafka_listener_ports(text: str) -> dict[str, int]:
    """``kafka_listener_addresses`` without the hosts; ValueError when malformed."""
    return {name: port for name, (_, port) in kafka_listener_addresses(text).items()}


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """One partition's replica assignment and leadership, as the controller
    last decided it.  ``partition_epoch`` grows with every change (leader,
    ISR or replicas), so a stale AlterPartition is refused, as KRaft's
    partition epoch.  During a reassignment (:mod:`partlog.controller.reassignment`)
    ``replicas`` is the union, the target first, then ``removing``; ``adding``
    are the target's new replicas (both by id, empty when none is in progress,
    as KRaft's PartitionRegistration).  Brokers act on ``replicas`` only.
    The ISR may be empty (offline, its last members in ``elr``)."""

    leader: int  # NO_LEADER when offline
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    partition_epoch: int = 0
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()
    # KIP-966's eligible leader replicas (partlog.controller.elr): out of the
    # ISR, disjoint from it, each with every committed record.
    elr: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class TopicInfo:
    topic_id: uuid.UUID
    name: str
    partitions: tuple[PartitionInfo, ...]
    # The controller's config overrides (Kafka's dynamic topic configs),
    # sorted (name, value) pairs; None: the controller never configured the
    # topic, and brokers keep what their stores hold (docs/design/topic-configs.md).
    configs: tuple[tuple[str, str], ...] | None = None

    @property
    def num_partitions(self) -> int:
        return len(self.partitions)

    @property
    def leaders(self) -> tuple[int, ...]:
        """leaders[p] is the broker id leading partition p (NO_LEADER: none)."""
        return tuple(p.leader for p in self.partitions)

    @classmethod
    def with_leaders(
        cls, topic_id: uuid.UUID, name: str, leaders: Sequence[int], replicas: Sequence[Sequence[int]] | None = None
    ) -> TopicInfo:
        """Partition p led by ``leaders[p]`` at epoch 0, replicated on
        ``replicas[p]`` (default: the leader alone), all in sync."""
        if replicas is None:
            replicas = [[x] for x in leaders]
        if len(replicas) != len(leaders):
            raise MetadataError(f"topic {name}: {len(leaders)} leaders but {len(replicas)} replica lists")
        parts = []
        for p, (leader, reps) in enumerate(zip(leaders, replicas, strict=True)):
            reps = tuple(reps)
            if leader not in reps or len(set(reps)) != len(reps):
                raise MetadataError(f"topic {name} partition {p}: leader {leader} not once in replicas {list(reps)}")
            parts.append(PartitionInfo(leader, 0, reps, reps))
        return cls(topic_id, name, tuple(parts))


def partition_of(topics: Mapping[uuid.UUID, TopicInfo], tp: TopicIdPartition) -> PartitionInfo | None:
    t = topics.get(tp.topic_id)
    if t is None or not 0 <= tp.partition < len(t.partitions):
        return None
    return t.partitions[tp.partition]


def check_alter_partition(
    p: PartitionInfo | None, broker_id: int, leader_epoch: int, partition_epoch: int, isr: Sequence[int]
) -> Errors:
    """Kafka's AlterPartition checks that need only the partition, in Kafka's
    order; NONE when the ISR change may be committed (a controller adds its
    own: the sender's broker epoch, liveness of added replicas)."""
    if p is None:
        return Errors.UNKNOWN_TOPIC_OR_PARTITION
    if p.leader != broker_id:
        return Errors.NOT_LEADER_OR_FOLLOWER
    if leader_epoch != p.leader_epoch:
        return Errors.FENCED_LEADER_EPOCH
    if partition_epoch != p.partition_epoch:
        return Errors.INVALID_UPDATE_VERSION
    if len(set(isr)) != len(isr):
        return Errors.INVALID_REQUEST
    if broker_id not in isr or not set(isr) <= set(p.replicas):
        return Errors.INELIGIBLE_REPLICA
    return Errors.NONE


class ClusterMismatchError(MetadataError):
    """Two parties that must belong to one cluster name different ones (a
    store, a metadata source, a peer, a registry).  Nothing may proceed: it
    is a configuration error (exit status 2 in the CLIs)."""

    exit_status = 2


def check_same_cluster(what: str, theirs: uuid.UUID | None, ours_what: str, ours: uuid.UUID | None) -> None:
    """Raise :class:`ClusterMismatchError` naming both ids when both are
    known and differ."""
    if theirs is not None and ours is not None and theirs != ours:
        raise ClusterMismatchError(f"{what} belongs to cluster {theirs}, but {ours_what} to cluster {ours}")


def parse_cluster_id(text: str, where: str) -> uuid.UUID:
    """A cluster id from configuration: a UUID in any of its usual spellings."""
    try:
        return uuid.UUID(str(text))
    except ValueError:
        raise MetadataError(f"{where}: cluster_id {text!r:.60} is not a UUID") from None


class MetadataSource(Protocol):
    """What a broker needs to know about the cluster, and the two things it
    tells the cluster's controller (ISR changes, producer-id blocks).

    ``cluster_id`` names the cluster (None only while a source has not yet
    learned it, e.g. before it first reached its controller); a broker
    refuses to start without one and refuses metadata naming another."""

    @property
    def cluster_id(self) -> uuid.UUID | None: ...

    def leader_of(self, tp: TopicIdPartition) -> int | None: ...

    def partition(self, tp: TopicIdPartition) -> PartitionInfo | None: ...

    def broker(self, broker_id: int) -> BrokerInfo | None: ...

    def brokers(self) -> list[BrokerInfo]: ...

    def topics(self) -> list[TopicInfo]: ...

    def representative(self, leader_id: int, az: str) -> int:
        """The broker a client in ``az`` should produce to for partitions led by ``leader_id``."""
        ...

    async def alter_partition(
        self, broker_id: int, tp: TopicIdPartition, leader_epoch: int, partition_epoch: int, isr: tuple[int, ...]
    ) -> PartitionInfo | Errors:
        """The leader asks to change the ISR (Kafka's AlterPartition); the
        answer is the partition as committed, or why not (FENCED_LEADER_EPOCH,
        INVALID_UPDATE_VERSION, NOT_LEADER_OR_FOLLOWER, INELIGIBLE_REPLICA,
        or a retriable error when the controller cannot be reached)."""
        ...

    async def allocate_producer_ids(self, broker_id: int) -> ProducerIdBlock | Errors | None:
        """The next block of producer ids for ``broker_id`` (KIP-730); a
        retriable error when none can be had now (the broker asks again);
        None when this source has no controller to hand them out (the broker
        then uses random 62-bit ids)."""
        ...

    def add_listener(self, fn: Callable[[], None]) -> None:
        """Call ``fn`` (in the event loop) after the metadata changed."""
        ...


# Capabilities some sources have beyond MetadataSource, named so callers ask
# ``isinstance(source, TopicAdmin)`` instead of probing attributes by string.


@runtime_checkable
class TopicAdmin(Protocol):
    """A source that creates and deletes topics through its controller (the
    embedded controller's client, etcd); a static cluster file does not."""

    async def create_topics(
        self,
        topics: Mapping[str, tuple[int, int]],
        configs: Mapping[str, Mapping[str, str]] | None = None,
        *,
        assignments: Mapping[str, Sequence[tuple[int, tuple[int, ...]]]] | None = None,
        timeout_ms: int | None = None,
    ) -> Mapping[str, Any]:
        """``{name: (partitions, replication_factor)}``, -1 for the default,
        the config overrides of those that have some (validated before:
        INVALID_CONFIG when not), the manual replica assignments
        ``[(partition, replicas)]`` of those that have them (shape -1, -1),
        and how long to wait for the controller; per topic its TopicInfo or
        why not (an Errors, or a ``rules.Refused`` with Kafka's message).
        An embedder's source may take neither keyword: callers pass them
        only when they have them."""
        ...

    async def delete_topics(self, names: list[str]) -> dict[str, uuid.UUID | Errors]: ...


# One topic's config change: (replace, ops); replace is AlterConfigs (the
# SET ops are the whole new set), else IncrementalAlterConfigs.
ConfigChange = tuple[bool, Sequence[ConfigOp]]


@runtime_checkable
class TopicConfigAdmin(Protocol):
    """A source whose controller keeps topic config overrides."""

    async def alter_topic_configs(
        self, changes: Mapping[str, ConfigChange], *, validate_only: bool
    ) -> dict[str, tuple[Errors, str | None]]:
        """Per topic name: NONE, INVALID_CONFIG with Kafka's message,
        UNKNOWN_TOPIC_OR_PARTITION, or a retriable error; applied changes are
        in this source's topics when it answers."""
        ...


@runtime_checkable
class KnowsDeletedTopics(Protocol):
    """A source that remembers the ids of recently deleted topics, so a
    broker can drop their logs."""

    def deleted_topics(self) -> frozenset[uuid.UUID]: ...


@runtime_checkable
class CountsFailures(Protocol):
    """A source that retries its controller and counts the calls that
    failed (a metric)."""

    failures: int


@runtime_checkable
class Startable(Protocol):
    """A source with a session to start (register, first read) before use."""

    async def start(self, *, timeout_ms: int | None = None) -> None: ...


class StaticMetadata:
    """A fixed assignment: brokers and partition leaders do not change.

    ISR changes are committed here, in memory: with leaders that never move
    no election can pick a replica the ISR left, so no controller is needed
    to make them durable.  Producer ids: none (brokers fall back to random
    62-bit ids, design.md)."""

    def __init__(
        self,
        brokers: list[BrokerInfo],
        topics: list[TopicInfo],
        deleted_topics: Iterable[uuid.UUID] = (),
        *,
        cluster_id: uuid.UUID,
    ) -> None:
        # No default: two sources built without one would silently describe
        # "the same" cluster, which is what the id exists to rule out.
        if not isinstance(cluster_id, uuid.UUID):
            raise MetadataError(f"cluster_id must be a uuid.UUID, got {type(cluster_id).__name__}")
        self._cluster_id = cluster_id
        ids = [b.broker_id for b in brokers]
        if len(set(ids)) != len(ids):
            raise MetadataError(f"duplicate broker ids in {sorted(ids)}")
        if not brokers:
            raise MetadataError("no brokers")
        self._brokers = {b.broker_id: b for b in brokers}
        self._topics = {t.topic_id: t for t in topics}
        names = [t.name for t in topics]
        if len(set(names)) != len(names):
            raise MetadataError(f"duplicate topic names in {sorted(names)}")
        for t in topics:
            unknown = {r for p in t.partitions for r in p.replicas} - set(self._brokers)
            if unknown:
                raise MetadataError(f"topic {t.name}: replicas {sorted(unknown)} are not brokers")
        self._by_az: dict[str, list[int]] = {}
        for b in sorted(brokers, key=lambda b: b.broker_id):
            self._by_az.setdefault(b.az, []).append(b.broker_id)
        self._listeners: list[Callable[[], None]] = []
        self._deleted_topics = frozenset(deleted_topics) - set(self._topics)

    @property
    def cluster_id(self) -> uuid.UUID:
        return self._cluster_id

    def topic_deleted(self, topic_id: uuid.UUID) -> bool:
        """True when the file lists the topic as deleted: its partitions hold
        no references (walmgr may delete objects only they were part of)."""
        return topic_id in self._deleted_topics

    def deleted_topics(self) -> frozenset[uuid.UUID]:
        return self._deleted_topics

    # -------------------------------------------------------- MetadataSource

    def partition(self, tp: TopicIdPartition) -> PartitionInfo | None:
        return partition_of(self._topics, tp)

    def leader_of(self, tp: TopicIdPartition) -> int | None:
        p = self.partition(tp)
        if p is None or p.leader == NO_LEADER:
            return None
        return p.leader

    async def alter_partition(
        self, broker_id: int, tp: TopicIdPartition, leader_epoch: int, partition_epoch: int, isr: tuple[int, ...]
    ) -> PartitionInfo | Errors:
        p = self.partition(tp)
        err = check_alter_partition(p, broker_id, leader_epoch, partition_epoch, isr)
        if err != Errors.NONE:
            return err
        assert p is not None
        new = replace(p, isr=tuple(r for r in p.replicas if r in isr), partition_epoch=p.partition_epoch + 1)
        t = self._topics[tp.topic_id]
        parts = list(t.partitions)
        parts[tp.partition] = new
        self._topics[tp.topic_id] = replace(t, partitions=tuple(parts))
        return new

    async def allocate_producer_ids(self, broker_id: int) -> ProducerIdBlock | Errors | None:
        return None

    def add_listener(self, fn: Callable[[], None]) -> None:
        self._listeners.append(fn)

    def broker(self, broker_id: int) -> BrokerInfo | None:
        return self._brokers.get(broker_id)

    def brokers(self) -> list[BrokerInfo]:
        return sorted(self._brokers.values(), key=lambda b: b.broker_id)

    def topics(self) -> list[TopicInfo]:
        return sorted(self._topics.values(), key=lambda t: t.name)

    def with_ports(self, ports: Mapping[int, int], kafka_ports: Mapping[int, int] | None = None) -> StaticMetadata:
        """The same assignment with brokers' listening ports (RPC, and
        Kafka when given) filled in."""
        kp = kafka_ports or {}
        brokers = [
            replace(b, port=ports.get(b.broker_id, b.port), kafka_port=kp.get(b.broker_id, b.kafka_port))
            for b in self._brokers.values()
        ]
        return StaticMetadata(brokers, list(self._topics.values()), self._deleted_topics, cluster_id=self._cluster_id)

    def with_topics(self, topics: list[TopicInfo]) -> StaticMetadata:
        """The same cluster and brokers with other topics (or other leaders)."""
        return StaticMetadata(self.brokers(), topics, self._deleted_topics, cluster_id=self._cluster_id)

    # ------------------------------------------------------------- routing

    def azs(self) -> list[str]:
        return sorted(self._by_az)

    def brokers_in(self, az: str) -> list[int]:
        return list(self._by_az.get(az, []))

    def representative(self, leader_id: int, az: str) -> int:
        """``rep(L, z)`` (module doc); the leader itself for an unknown AZ."""
        leader = self._brokers[leader_id]
        local = self._by_az.get(az)
        if leader.az == az or not local:
            return leader_id
        rank = self._by_az[leader.az].index(leader_id)
        return local[rank % len(local)]

    def produce_target(self, tp: TopicIdPartition, client_az: str) -> int | None:
        leader = self.leader_of(tp)
        return None if leader is None else self.representative(leader, client_az)

    # -------------------------------------------------------- construction

    @classmethod
    def generate(
        cls,
        *,
        azs: int,
        brokers_per_az: int,
        topics: Mapping[str, int],
        first_port: int = 0,
        replication_factor: int = 1,
        cluster_id: uuid.UUID | None = None,
    ) -> StaticMetadata:
        """``azs`` x ``brokers_per_az`` brokers (ids from 1, AZs "az1".."azN",
        broker i in AZ ((i-1) mod azs)+1), partition leaders round-robin over
        all brokers, the other replicas on the brokers after the leader (so
        one per AZ while ``replication_factor <= azs``).  ``cluster_id``
        defaults to a new random one (a new cluster); topic ids are derived
        from it and the names, so every process generating the same cluster
        with the same id agrees."""
        cluster_id = SYSTEM_ENTROPY.uuid4() if cluster_id is None else cluster_id
        if azs <= 0 or brokers_per_az <= 0:
            raise MetadataError(f"need azs > 0 and brokers_per_az > 0, got {azs} and {brokers_per_az}")
        n = azs * brokers_per_az
        if not 1 <= replication_factor <= n:
            raise MetadataError(f"replication factor must be in [1, {n}] (the brokers), got {replication_factor}")
        brokers = [
            BrokerInfo(i, f"az{(i - 1) % azs + 1}", "127.0.0.1", first_port + i if first_port else 0)
            for i in range(1, n + 1)
        ]
        infos = []
        start = 0
        for name, partitions in topics.items():
            if partitions <= 0:
                raise MetadataError(f"topic {name}: partitions must be > 0, got {partitions}")
            leaders = [(start + p) % n + 1 for p in range(partitions)]
            replicas = [[(leader - 1 + k) % n + 1 for k in range(replication_factor)] for leader in leaders]
            start += partitions
            infos.append(TopicInfo.with_leaders(topic_id_for(cluster_id, name), name, leaders, replicas))
        return cls(brokers, infos, cluster_id=cluster_id)

    @classmethod
    def from_toml(cls, path: str) -> StaticMetadata:
        """A cluster file::

        cluster_id = "0f6c..."   # required: `partlog cluster-id` prints a new one

        [[brokers]]
        id = 1
        az = "az1"
        host = "127.0.0.1"   # optional
        port = 9101          # optional
        kafka_port = 9092    # optional: the Kafka listener (partlog.kafka_front)

        [[topics]]
        name = "orders"
        id = "6f1c..."       # optional: derived from cluster_id and the name
        leaders = [1, 2, 3]  # partition p led by leaders[p]
        replicas = [[1, 2], [2, 3], [3, 1]]  # optional: the leader alone

        deleted_topics = ["6f1c..."]   # optional: ids of deleted topics (walmgr)
        """
        try:
            with open(path, "rb") as f:
                doc = tomllib.load(f)
        except OSError as e:
            raise MetadataError(f"cluster file {path}: {e.strerror or e}") from e
        except tomllib.TOMLDecodeError as e:
            raise MetadataError(f"cluster file {path}: not valid TOML: {e}") from e
        except UnicodeDecodeError as e:
            raise MetadataError(f"cluster file {path}: not UTF-8 at byte {e.start}") from e
        return cls.from_dict(doc, where=path)

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any], *, where: str = "cluster config") -> StaticMetadata:
        if "cluster_id" not in doc:
            raise MetadataError(
                f"{where}: no cluster_id (every cluster needs its own; `partlog cluster-id` prints a new one)"
            )
        cluster_id = parse_cluster_id(doc["cluster_id"], where)
        try:
            brokers = [
                BrokerInfo(
                    int(b["id"]),
                    str(b["az"]),
                    str(b.get("host", "127.0.0.1")),
                    int(b.get("port", 0)),
                    int(b.get("kafka_port", 0)),
                )
                for b in doc.get("brokers", [])
            ]
            topics = [
                TopicInfo.with_leaders(
                    uuid.UUID(str(t["id"])) if "id" in t else topic_id_for(cluster_id, str(t["name"])),
                    str(t["name"]),
                    [int(x) for x in t["leaders"]],
                    [[int(x) for x in r] for r in t["replicas"]] if "replicas" in t else None,
                )
                for t in doc.get("topics", [])
            ]
            deleted = [uuid.UUID(str(t)) for t in doc.get("deleted_topics", [])]
        except MetadataError as e:
            raise MetadataError(f"{where}: {e}") from e
        except (KeyError, TypeError, ValueError) as e:
            raise MetadataError(f"{where}: bad broker or topic entry: {e!r}") from e
        try:
            return cls(brokers, topics, deleted, cluster_id=cluster_id)
        except MetadataError as e:
            raise MetadataError(f"{where}: {e}") from e


def topic_id_for(cluster_id: uuid.UUID, name: str) -> uuid.UUID:
    """The id of a cluster file's topic that names none: uuid5 of the name
    in the cluster's namespace, so the same name in another cluster (or a
    cluster re-created with a new id) never gets the same topic id.  The
    controller does not use it: its topic ids are random (Kafka's rule)."""
    return uuid.uuid5(cluster_id, f"partlog-topic:{name}")
