"""Cluster metadata as brokers and clients see it: brokers with their AZs,
topics with partition leaders, and produce routing.

For now the assignment is static (a TOML file or generated from flags);
replication and an elected controller come with issue 4.  Brokers only use
the :class:`MetadataSource` protocol, so a broker embedding partlog can supply
its own.

Produce representatives (design brief, item 4): a client in AZ ``z`` sends a
partition led by ``L`` to ``rep(L, z) = L`` when ``L`` is in ``z``, else to
``brokers_in(z)[stable_hash(L) mod |brokers_in(z)|]``.  Our ``stable_hash(L)``
is ``L``'s rank among the brokers of its own AZ (by id): with equally sized
AZs the map from one AZ's brokers to another's is then a bijection, so every
broker represents exactly one leader per other AZ and a WAL file costs one
local commit and at most AZs - 1 remote ones.  A real hash would collide and
raise that bound for no benefit.
"""

from __future__ import annotations

import tomllib
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from partlog.records import TopicIdPartition


class MetadataError(ValueError):
    """Cluster metadata is inconsistent or a config file is wrong."""


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    broker_id: int
    az: str
    host: str = "127.0.0.1"
    port: int = 0


@dataclass(frozen=True, slots=True)
class TopicInfo:
    topic_id: uuid.UUID
    name: str
    # leaders[p] is the broker id leading partition p
    leaders: tuple[int, ...]

    @property
    def num_partitions(self) -> int:
        return len(self.leaders)


class MetadataSource(Protocol):
    """What a broker needs to know about the cluster."""

    def leader_of(self, tp: TopicIdPartition) -> int | None: ...

    def broker(self, broker_id: int) -> BrokerInfo | None: ...

    def brokers(self) -> list[BrokerInfo]: ...

    def topics(self) -> list[TopicInfo]: ...

    def representative(self, leader_id: int, az: str) -> int:
        """The broker a client in ``az`` should produce to for partitions led by ``leader_id``."""
        ...


class StaticMetadata:
    """A fixed assignment: brokers and partition leaders do not change."""

    def __init__(self, brokers: list[BrokerInfo], topics: list[TopicInfo]) -> None:
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
            unknown = set(t.leaders) - set(self._brokers)
            if unknown:
                raise MetadataError(f"topic {t.name}: leaders {sorted(unknown)} are not brokers")
        self._by_az: dict[str, list[int]] = {}
        for b in sorted(brokers, key=lambda b: b.broker_id):
            self._by_az.setdefault(b.az, []).append(b.broker_id)

    # -------------------------------------------------------- MetadataSource

    def leader_of(self, tp: TopicIdPartition) -> int | None:
        t = self._topics.get(tp.topic_id)
        if t is None or not 0 <= tp.partition < len(t.leaders):
            return None
        return t.leaders[tp.partition]

    def broker(self, broker_id: int) -> BrokerInfo | None:
        return self._brokers.get(broker_id)

    def brokers(self) -> list[BrokerInfo]:
        return sorted(self._brokers.values(), key=lambda b: b.broker_id)

    def topics(self) -> list[TopicInfo]:
        return sorted(self._topics.values(), key=lambda t: t.name)

    def with_ports(self, ports: Mapping[int, int]) -> StaticMetadata:
        """The same assignment with brokers' listening ports filled in."""
        brokers = [
            BrokerInfo(b.broker_id, b.az, b.host, ports.get(b.broker_id, b.port)) for b in self._brokers.values()
        ]
        return StaticMetadata(brokers, list(self._topics.values()))

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
        cls, *, azs: int, brokers_per_az: int, topics: Mapping[str, int], first_port: int = 0
    ) -> StaticMetadata:
        """``azs`` x ``brokers_per_az`` brokers (ids from 1, AZs "az1".."azN",
        broker i in AZ ((i-1) mod azs)+1), partition leaders round-robin over
        all brokers; topic ids derived from names (uuid5), so every process
        generating the same cluster agrees."""
        if azs <= 0 or brokers_per_az <= 0:
            raise MetadataError(f"need azs > 0 and brokers_per_az > 0, got {azs} and {brokers_per_az}")
        n = azs * brokers_per_az
        brokers = [
            BrokerInfo(i, f"az{(i - 1) % azs + 1}", "127.0.0.1", first_port + i if first_port else 0)
            for i in range(1, n + 1)
        ]
        infos = []
        start = 0
        for name, partitions in topics.items():
            if partitions <= 0:
                raise MetadataError(f"topic {name}: partitions must be > 0, got {partitions}")
            leaders = tuple((start + p) % n + 1 for p in range(partitions))
            start += partitions
            infos.append(TopicInfo(uuid.uuid5(uuid.NAMESPACE_URL, f"partlog-topic:{name}"), name, leaders))
        return cls(brokers, infos)

    @classmethod
    def from_toml(cls, path: str) -> StaticMetadata:
        """A cluster file::

        [[brokers]]
        id = 1
        az = "az1"
        host = "127.0.0.1"   # optional
        port = 9101          # optional

        [[topics]]
        name = "orders"
        id = "6f1c..."       # optional: uuid5 of the name
        leaders = [1, 2, 3]  # partition p led by leaders[p]
        """
        try:
            with open(path, "rb") as f:
                doc = tomllib.load(f)
        except (OSError, tomllib.TOMLDecodeError) as e:
            raise MetadataError(f"{path}: {e}") from e
        return cls.from_dict(doc, where=path)

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any], *, where: str = "cluster config") -> StaticMetadata:
        try:
            brokers = [
                BrokerInfo(int(b["id"]), str(b["az"]), str(b.get("host", "127.0.0.1")), int(b.get("port", 0)))
                for b in doc.get("brokers", [])
            ]
            topics = [
                TopicInfo(
                    uuid.UUID(str(t["id"]))
                    if "id" in t
                    else uuid.uuid5(uuid.NAMESPACE_URL, f"partlog-topic:{t['name']}"),
                    str(t["name"]),
                    tuple(int(x) for x in t["leaders"]),
                )
                for t in doc.get("topics", [])
            ]
        except (KeyError, TypeError, ValueError) as e:
            raise MetadataError(f"{where}: bad broker or topic entry: {e!r}") from e
        try:
            return cls(brokers, topics)
        except MetadataError as e:
            raise MetadataError(f"{where}: {e}") from e
