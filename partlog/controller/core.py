"""The embedded controller (issue 4): cluster metadata as KRaft's controller
keeps it, simplified to one process, sans-IO, persisted in LMDB.

It owns brokers (AZ, address, broker epoch, fenced or not), topics and their
partitions (replicas, leader, leader epoch, ISR, partition epoch) and the
producer-id blocks (KIP-730).  Every method takes the current time as a
value; nothing here reads a clock, starts a thread or touches a socket, so
the asyncio shell (:mod:`partlog.controller.server`), the tests and the
simulations drive the same object.

Durability: every state change is validated first, then written in ONE LMDB
write transaction (``sync=True``: fsynced) together with the bumped
``version``, and only then applied to memory and returned.  A failed write
leaves memory as it was, so nothing that was not durable is ever answered or
published.

Rules (Kafka's KRaft semantics, simplified):

* **Brokers.**  ``register_broker`` starts a new incarnation with a fresh
  broker epoch (a controller-wide counter, never reused).  A broker that was
  still alive under an older epoch restarted faster than its session timeout:
  the old incarnation is fenced first, exactly as if it had timed out (it lost
  its in-memory state).  ``heartbeat`` keeps an incarnation alive; ``tick``
  fences those silent for longer than ``broker_session_timeout_ms``.  A
  fenced broker must register again (``BROKER_ID_NOT_REGISTERED``).
* **Fencing.**  The fenced broker leaves every ISR, except where it is the
  last member (KRaft keeps it, so the partition can come back with its
  data).  Partitions it led elect the first replica (in ``replicas`` order)
  that is alive and in the ISR; with none the partition is offline (leader
  ``NO_LEADER``), unless ``unclean_leader_election_enable``: then the first
  alive replica leads with ISR = {it}.
* **Offline partitions** are re-elected whenever brokers register (the last
  ISR member coming back leads again) and on every tick (unclean election).
* **Epochs.**  Every leader change (including to and from ``NO_LEADER``)
  bumps ``leader_epoch`` and ``partition_epoch``; every ISR change bumps
  ``partition_epoch``.
* **Preferred leaders.**  Every ``leader_imbalance_check_interval_ms`` a
  partition whose first replica is alive, in the ISR and not leading gets it
  back as leader (Kafka also waits for a 10% per-broker imbalance; we do not).
* **AlterPartition** is validated as Kafka's controller does (see
  :meth:`Controller.alter_partition`).
* **Producer ids**: :class:`partlog.kafka.producer_ids.ProducerIdManager`, in its
  own LMDB environment under ``data_dir/producer_ids``; a block is durable
  before it is returned.  Allocating a block is not a metadata change: it
  does not bump ``version``.

Identity: a new state directory gets a random cluster id
(``ControllerConfig.cluster_id`` to choose it), kept with the state and
never changed; topic ids are random UUIDs (Kafka's rule), so a topic that is
deleted and created again, or one of the same name in another cluster, never
matches old references.  Randomness is passed in (``new_uuid``).

Restart: reopening ``data_dir`` restores everything.  Brokers that were not
fenced are restored as registered but not yet heard from: they get one full
session timeout from the controller's start before they are fenced, as KRaft
gives brokers after a controller failover.

Layout of ``data_dir``::

    metadata/       LMDB: meta (format, version, last broker epoch, cluster id), brokers,
                    topics, parts (one value per partition)
    producer_ids/   LMDB of the ProducerIdManager

The module also holds the controller RPC bodies' encoders and decoders
(``enc_*``/``dec_*``), shared by the server and the client.
"""

from __future__ import annotations

import fcntl
import os
import re
import struct
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

import lmdb
import msgpack

from partlog.controller.cluster_meta import NO_LEADER, BrokerInfo, PartitionInfo, TopicInfo, check_alter_partition
from partlog.controller.rules import after_fencing, bump, preferred
from partlog.kafka.errors import Errors
from partlog.kafka.producer_ids import (
    PRODUCER_ID_BLOCK_SIZE,
    ProducerIdBlock,
    ProducerIdManager,
    ProducerIdsExhaustedError,
)
from partlog.kafka.records import TopicIdPartition
from partlog.limits import (
    AZ_CHARS_MAX,
    BROKERS_MAX,
    HOST_CHARS_MAX,
    PARTITIONS_PER_CLUSTER_MAX,
    PARTITIONS_PER_TOPIC_MAX,
    PORT_MAX,
    TOPICS_PER_REQUEST_MAX,
)

# partlog/tools/cli.py (being rewritten on another branch) still imports
# BROKER_ID_MAX from here; its home is partlog.limits.  Drop this re-export
# once that file imports it from there.
from partlog.limits import BROKER_ID_MAX as BROKER_ID_MAX
from partlog.rpc.wire import WireError, expect_bytes, expect_int, expect_list, expect_map, expect_str, field

__all__ = [
    "BROKER_SESSION_TIMEOUT_MS_DEFAULT",
    "LEADER_IMBALANCE_CHECK_INTERVAL_MS_DEFAULT",
    "BrokerFenced",
    "BrokerRegistered",
    "BrokerRegistration",
    "Controller",
    "ControllerConfig",
    "ControllerEvent",
    "ControllerStateError",
    "IsrChanged",
    "LeaderChanged",
    "MetadataSnapshot",
    "assign_replicas",
    "dec_alter_partition",
    "dec_alter_partition_response",
    "dec_broker_epoch",
    "dec_create_topics",
    "dec_create_topics_response",
    "dec_heartbeat_response",
    "dec_partition",
    "dec_pid_response",
    "dec_poll",
    "dec_poll_response",
    "dec_register",
    "dec_register_response",
    "dec_topic",
    "enc_alter_partition",
    "enc_alter_partition_response",
    "enc_broker_epoch",
    "enc_create_topics",
    "enc_create_topics_response",
    "enc_heartbeat_response",
    "enc_partition",
    "enc_pid_response",
    "enc_poll",
    "enc_register",
    "enc_register_response",
    "enc_snapshot",
    "enc_topic",
    "read_replicas",
    "valid_topic_name",
]

# Kafka's broker.session.timeout.ms default.
BROKER_SESSION_TIMEOUT_MS_DEFAULT = 9_000
# Kafka's leader.imbalance.check.interval.ms default.
LEADER_IMBALANCE_CHECK_INTERVAL_MS_DEFAULT = 300_000
# Kafka's limit on topic names (249: the name must fit in a file name with a
# partition suffix) and its legal characters.
TOPIC_NAME_CHARS_MAX = 249
_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")
# Address space, not disk: the metadata of PARTITIONS_PER_CLUSTER_MAX partitions and
# BROKERS_MAX brokers takes a few tens of MB.
MAP_SIZE_BYTES = 1 << 30
# Events wait here until the shell takes them (it logs them); a core driven
# without a shell must not grow without bound.
EVENTS_MAX = 10_000
FORMAT_VERSION = 1

# Leader-change and ISR-change reasons (logged by the shell).
REASON_BROKER_FENCED = "broker_fenced"
REASON_BROKER_REGISTERED = "broker_registered"
REASON_PREFERRED = "preferred"
REASON_ALTER_PARTITION = "alter_partition"
REASON_OFFLINE = "offline_partition"  # the periodic unclean election of offline partitions
# Why a broker was fenced.
FENCED_SESSION_TIMEOUT = "session_timeout"
FENCED_NEW_INCARNATION = "new_incarnation"

_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_KEY_FORMAT = b"format"
_KEY_VERSION = b"version"
_KEY_BROKER_EPOCH = b"broker_epoch"
_KEY_CLUSTER_ID = b"cluster_id"


class ControllerStateError(RuntimeError):
    """The data directory holds something this controller cannot read."""


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    data_dir: str | os.PathLike[str]
    broker_session_timeout_ms: int = BROKER_SESSION_TIMEOUT_MS_DEFAULT
    unclean_leader_election_enable: bool = False
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
        ):
            v = getattr(self, name)
            if type(v) is not int or v < low:
                raise ValueError(f"ControllerConfig.{name} must be an integer >= {low}, got {v!r}")
        if type(self.unclean_leader_election_enable) is not bool:
            raise ValueError(
                f"ControllerConfig.unclean_leader_election_enable must be a bool, "
                f"got {self.unclean_leader_election_enable!r}"
            )


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

    def info(self) -> BrokerInfo:
        return BrokerInfo(self.broker_id, self.az, self.host, self.port, self.kafka_port)


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


# ------------------------------------------------------------ pure rules


def valid_topic_name(name: str) -> bool:
    """Kafka's rule: 1-249 of ``[a-zA-Z0-9._-]``, and not "." or ".."."""
    return 0 < len(name) <= TOPIC_NAME_CHARS_MAX and name not in (".", "..") and _TOPIC_NAME.fullmatch(name) is not None


def assign_replicas(brokers: Iterable[BrokerInfo], partitions: int, rf: int, start: int) -> list[tuple[int, ...]]:
    """Replica lists for ``partitions`` new partitions, leader first.

    The leader of partition p is broker ``(start + p) mod n`` of the brokers
    sorted by id.  Followers are taken by walking, from the leader, the
    brokers in AZ-interleaved order (AZs sorted, each AZ's brokers by id:
    the first of each AZ, then the second of each, ...), first skipping
    brokers in AZs that already hold a replica, then taking any: so the
    replicas are in distinct AZs whenever ``rf`` <= the number of AZs, also
    with unequal AZs (Kafka's rack-aware assignment does the same)."""
    by_id = sorted(brokers, key=lambda b: b.broker_id)
    n = len(by_id)
    if not 1 <= rf <= n:
        raise ValueError(f"replication factor {rf} with {n} brokers")
    by_az: dict[str, list[BrokerInfo]] = {}
    for b in by_id:
        by_az.setdefault(b.az, []).append(b)
    interleaved: list[BrokerInfo] = []
    for i in range(max(len(v) for v in by_az.values())):
        interleaved.extend(by_az[az][i] for az in sorted(by_az) if i < len(by_az[az]))
    position = {b.broker_id: i for i, b in enumerate(interleaved)}
    out = []
    for p in range(partitions):
        leader = by_id[(start + p) % n]
        reps = [leader.broker_id]
        azs = {leader.az}
        walk = [interleaved[(position[leader.broker_id] + k) % n] for k in range(1, n)]
        for b in walk:
            if len(reps) < rf and b.az not in azs:
                reps.append(b.broker_id)
                azs.add(b.az)
        for b in walk:
            if len(reps) < rf and b.broker_id not in reps:
                reps.append(b.broker_id)
        out.append(tuple(reps))
    return out


def read_replicas(data_dir: str | os.PathLike[str]) -> dict[TopicIdPartition, tuple[int, ...]]:
    """Every partition's replica list from a controller's state, read-only
    (beside a running controller: LMDB readers do not block its writer).
    Raises ControllerStateError when ``data_dir`` holds no controller state."""
    meta_dir = os.path.join(os.fspath(data_dir), "metadata")
    if not os.path.isfile(os.path.join(meta_dir, "data.mdb")):
        raise ControllerStateError(f"{data_dir}: no controller state here")
    try:
        env = lmdb.open(meta_dir, readonly=True, max_dbs=4, map_size=MAP_SIZE_BYTES)
    except lmdb.Error as e:
        raise ControllerStateError(f"{data_dir}: cannot open the controller state: {e}") from e
    try:
        db = env.open_db(b"parts", create=False)
        out: dict[TopicIdPartition, tuple[int, ...]] = {}
        with env.begin() as txn:
            for k, v in txn.cursor(db=db):
                tp = TopicIdPartition(uuid.UUID(bytes=bytes(k[:16])), _U32.unpack(k[16:])[0])
                out[tp] = dec_partition(msgpack.unpackb(v)).replicas
        return out
    except (lmdb.Error, ValueError, TypeError, struct.error, WireError) as e:
        raise ControllerStateError(f"{data_dir}: unreadable controller state: {e!r}") from e
    finally:
        env.close()


# ---------------------------------------------------------------- the core


class _Draft:
    """Changes staged over the controller's state: validate and decide
    against it, then write it in one transaction, then apply it."""

    def __init__(self, c: Controller) -> None:
        self.c = c
        self.brokers: dict[int, BrokerRegistration] = {}
        self.parts: dict[TopicIdPartition, PartitionInfo] = {}
        self.new_topics: dict[uuid.UUID, tuple[str, int]] = {}
        self.deleted_topics: dict[uuid.UUID, str] = {}
        self.broker_epoch_last: int | None = None
        self.events: list[ControllerEvent] = []
        self.elections = 0
        self.unclean_elections = 0
        self.preferred_elections = 0

    def empty(self) -> bool:
        return not (
            self.brokers or self.parts or self.new_topics or self.deleted_topics or self.broker_epoch_last is not None
        )

    def broker(self, broker_id: int) -> BrokerRegistration | None:
        b = self.brokers.get(broker_id)
        return b if b is not None else self.c._brokers.get(broker_id)

    def alive(self, broker_id: int) -> bool:
        b = self.broker(broker_id)
        return b is not None and not b.fenced

    def part(self, tp: TopicIdPartition) -> PartitionInfo:
        p = self.parts.get(tp)
        return p if p is not None else self.c._parts[tp]

    def all_parts(self) -> Iterator[tuple[TopicIdPartition, PartitionInfo]]:
        for tp in self.c._parts:
            yield tp, self.part(tp)
        for tp, p in self.parts.items():
            if tp not in self.c._parts:
                yield tp, p

    def topic_name(self, tp: TopicIdPartition) -> str:
        name = self.c._topic_names.get(tp.topic_id)
        return name if name is not None else self.new_topics[tp.topic_id][0]

    def set_part(self, tp: TopicIdPartition, new: PartitionInfo, reason: str, unclean: bool = False) -> None:
        old = self.part(tp)
        new = bump(old, new)
        if new == old:
            return
        self.parts[tp] = new
        name = self.topic_name(tp)
        if new.leader != old.leader:
            if new.leader != NO_LEADER:
                self.elections += 1
                self.unclean_elections += unclean
                self.preferred_elections += reason == REASON_PREFERRED
            self.events.append(
                LeaderChanged(name, tp.partition, new.leader, new.leader_epoch, new.isr, reason, unclean)
            )
        else:
            self.events.append(IsrChanged(name, tp.partition, new.isr, new.partition_epoch, reason))

    def fence(self, broker_ids: Iterable[int], reason: str) -> None:
        """Fence these brokers and fix up every partition they touch."""
        dead = set()
        for bid in broker_ids:
            b = self.broker(bid)
            assert b is not None and not b.fenced, f"fencing broker {bid} that is not alive"
            self.brokers[bid] = replace(b, fenced=True)
            self.events.append(BrokerFenced(bid, b.broker_epoch, reason))
            dead.add(bid)
        self.reconcile(dead, REASON_BROKER_FENCED)

    def elect_preferred(self) -> None:
        for tp, p in list(self.all_parts()):
            new = preferred(p, self.alive)
            if new is not p:
                self.set_part(tp, new, REASON_PREFERRED)

    def reconcile(self, brokers: set[int], reason: str) -> None:
        """Re-derive ISR and leader of every partition replicated on
        ``brokers`` or offline."""
        unclean = self.c.config.unclean_leader_election_enable
        for tp, p in list(self.all_parts()):
            if tp in self.c._offline or p.leader == NO_LEADER or not brokers.isdisjoint(p.replicas):
                new, was_unclean = after_fencing(p, self.alive, unclean)
                self.set_part(tp, new, reason, was_unclean)


class Controller:
    """The controller's state machine over LMDB.  See the module doc for the
    rules.  Not thread-safe: one caller at a time (the shell holds a lock).

    Remote input reaches these methods already decoded; values a remote can
    get wrong are answered with an :class:`Errors` code, argument types and
    ranges the shell checks are asserted (``ValueError`` here is a bug in the
    caller).  ``OSError``/``lmdb.Error`` from the disk propagate; the change
    that failed was then neither applied nor answered.
    """

    def __init__(
        self, config: ControllerConfig, *, now_ms: int, new_uuid: Callable[[], uuid.UUID] | None = None
    ) -> None:
        self.config = config
        # Looked up at each call (not bound at import): a deterministic
        # simulation replaces uuid.uuid4 with a seeded one.
        self._new_uuid = new_uuid if new_uuid is not None else lambda: uuid.uuid4()
        root = os.fspath(config.data_dir)
        meta_dir = os.path.join(root, "metadata")
        os.makedirs(meta_dir, exist_ok=True)
        self._lock_fd = _lock_dir(root)
        try:
            # sync/metasync: a change is on disk before it is published or answered.
            self._env = lmdb.open(meta_dir, map_size=MAP_SIZE_BYTES, max_dbs=5, sync=True, metasync=True)
        except BaseException:
            os.close(self._lock_fd)
            raise
        try:
            self._db_meta = self._env.open_db(b"meta")
            self._db_brokers = self._env.open_db(b"brokers")
            self._db_topics = self._env.open_db(b"topics")
            self._db_parts = self._env.open_db(b"parts")
            # Deleted topics: id -> name (kept: walmgr needs to know them).
            self._db_deleted = self._env.open_db(b"deleted_topics")
            self._pids = ProducerIdManager(os.path.join(root, "producer_ids"), block_size=config.producer_id_block_size)
        except BaseException:
            self._env.close()
            os.close(self._lock_fd)
            raise
        self.version = 0
        self.cluster_id = uuid.UUID(int=0)  # set by _load
        self._broker_epoch_last = 0
        self._brokers: dict[int, BrokerRegistration] = {}
        self._last_heartbeat_ms: dict[int, int] = {}
        self._topic_names: dict[uuid.UUID, str] = {}
        self._topic_ids: dict[str, uuid.UUID] = {}
        self._num_partitions: dict[uuid.UUID, int] = {}
        self._parts: dict[TopicIdPartition, PartitionInfo] = {}
        self._offline: set[TopicIdPartition] = set()
        self._deleted: dict[uuid.UUID, str] = {}
        self._events: deque[ControllerEvent] = deque(maxlen=EVENTS_MAX)
        self._snapshot: MetadataSnapshot | None = None
        self._next_preferred_check_ms = now_ms + config.leader_imbalance_check_interval_ms
        # In-memory counters (like metrics, they restart at 0).
        self.leader_elections = 0
        self.unclean_leader_elections = 0
        self.preferred_leader_elections = 0
        try:
            self._load(now_ms)
        except BaseException:
            self.close()
            raise

    # -------------------------------------------------------- persistence

    def _load(self, now_ms: int) -> None:
        with self._env.begin() as txn:
            fmt = txn.get(_KEY_FORMAT, db=self._db_meta)
            if fmt is None:
                if txn.stat(self._db_brokers)["entries"] or txn.stat(self._db_parts)["entries"]:
                    raise ControllerStateError(f"{self.config.data_dir}: controller state without a format marker")
            elif _U32.unpack(fmt)[0] != FORMAT_VERSION:
                raise ControllerStateError(
                    f"{self.config.data_dir}: controller format {_U32.unpack(fmt)[0]}, this code reads {FORMAT_VERSION}"
                )
            raw = txn.get(_KEY_VERSION, db=self._db_meta)
            self.version = _U64.unpack(raw)[0] if raw else 0
            raw = txn.get(_KEY_BROKER_EPOCH, db=self._db_meta)
            self._broker_epoch_last = _U64.unpack(raw)[0] if raw else 0
            stored_cluster = txn.get(_KEY_CLUSTER_ID, db=self._db_meta)
            try:
                for k, v in txn.cursor(db=self._db_brokers):
                    b = _dec_broker(_U32.unpack(k)[0], msgpack.unpackb(v))
                    self._brokers[b.broker_id] = b
                    if not b.fenced:
                        # Not heard from yet: a full session from our start.
                        self._last_heartbeat_ms[b.broker_id] = now_ms
                for k, v in txn.cursor(db=self._db_topics):
                    tid = uuid.UUID(bytes=bytes(k))
                    name, n = expect_list(msgpack.unpackb(v), "topic", 2)
                    name, n = expect_str(name, "topic.name"), expect_int(n, "topic.partitions")
                    self._topic_names[tid] = name
                    self._topic_ids[name] = tid
                    self._num_partitions[tid] = n
                for k, v in txn.cursor(db=self._db_deleted):
                    self._deleted[uuid.UUID(bytes=bytes(k))] = expect_str(msgpack.unpackb(v), "deleted topic name")
                for k, v in txn.cursor(db=self._db_parts):
                    tp = TopicIdPartition(uuid.UUID(bytes=bytes(k[:16])), _U32.unpack(k[16:])[0])
                    self._parts[tp] = p = dec_partition(msgpack.unpackb(v))
                    if p.leader == NO_LEADER:
                        self._offline.add(tp)
            except (ValueError, TypeError, struct.error, WireError) as e:
                raise ControllerStateError(f"{self.config.data_dir}: unreadable controller state: {e!r}") from e
        wanted = self.config.cluster_id
        if stored_cluster is not None:
            if len(stored_cluster) != 16:
                raise ControllerStateError(f"{self.config.data_dir}: unreadable cluster id {bytes(stored_cluster)!r}")
            self.cluster_id = uuid.UUID(bytes=bytes(stored_cluster))
            if wanted is not None and wanted != self.cluster_id:
                raise ControllerStateError(
                    f"{self.config.data_dir}: holds cluster {self.cluster_id}, not the configured cluster {wanted}"
                )
        elif fmt is not None and (self._brokers or self._parts):
            # State from before cluster ids: its topics and brokers belong to
            # a cluster nobody named, and walmgr could not tell it apart.
            raise ControllerStateError(f"{self.config.data_dir}: controller state without a cluster id")
        else:
            self.cluster_id = wanted if wanted is not None else self._new_uuid()
        if fmt is None or stored_cluster is None:
            with self._env.begin(write=True) as txn:
                txn.put(_KEY_FORMAT, _U32.pack(FORMAT_VERSION), db=self._db_meta)
                txn.put(_KEY_VERSION, _U64.pack(self.version), db=self._db_meta)
                txn.put(_KEY_CLUSTER_ID, self.cluster_id.bytes, db=self._db_meta)
        self.check()

    def _commit(self, d: _Draft) -> None:
        """Write ``d`` in one durable transaction with version + 1, then apply
        it.  Everything is encoded before the transaction begins, so the
        transaction itself only puts (nothing in it can fail but the disk)."""
        if d.empty():
            return
        version = self.version + 1
        puts: list[tuple[Any, bytes, bytes]] = [(self._db_meta, _KEY_VERSION, _U64.pack(version))]
        if d.broker_epoch_last is not None:
            puts.append((self._db_meta, _KEY_BROKER_EPOCH, _U64.pack(d.broker_epoch_last)))
        for b in d.brokers.values():
            puts.append((self._db_brokers, _U32.pack(b.broker_id), msgpack.packb(_enc_broker(b))))
        for tid, (name, n) in d.new_topics.items():
            puts.append((self._db_topics, tid.bytes, msgpack.packb([name, n])))
        for tp, p in d.parts.items():
            puts.append((self._db_parts, tp.topic_id.bytes + _U32.pack(tp.partition), msgpack.packb(enc_partition(p))))
        deletes: list[tuple[Any, bytes]] = []
        for tid, name in d.deleted_topics.items():
            puts.append((self._db_deleted, tid.bytes, msgpack.packb(name)))
            deletes.append((self._db_topics, tid.bytes))
            deletes.extend((self._db_parts, tid.bytes + _U32.pack(p)) for p in range(self._num_partitions[tid]))
        with self._env.begin(write=True) as txn:
            for db, k, v in puts:
                txn.put(k, v, db=db)
            for db, k in deletes:
                txn.delete(k, db=db)
        # Durable: now publish.
        self.version = version
        if d.broker_epoch_last is not None:
            self._broker_epoch_last = d.broker_epoch_last
        self._brokers.update(d.brokers)
        for tid, (name, n) in d.new_topics.items():
            self._topic_names[tid] = name
            self._topic_ids[name] = tid
            self._num_partitions[tid] = n
        self._parts.update(d.parts)
        for tp, p in d.parts.items():
            if p.leader == NO_LEADER:
                self._offline.add(tp)
            else:
                self._offline.discard(tp)
        for tid, name in d.deleted_topics.items():
            for index in range(self._num_partitions.pop(tid)):
                gone = TopicIdPartition(tid, index)
                del self._parts[gone]
                self._offline.discard(gone)
            del self._topic_names[tid]
            del self._topic_ids[name]
            self._deleted[tid] = name
        self._events.extend(d.events)
        self.leader_elections += d.elections
        self.unclean_leader_elections += d.unclean_elections
        self.preferred_leader_elections += d.preferred_elections
        self._snapshot = None

    def close(self) -> None:
        self._pids.close()
        self._env.close()
        os.close(self._lock_fd)  # releases the flock

    def __enter__(self) -> Controller:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------- brokers

    def register_broker(
        self, broker_id: int, az: str, host: str, port: int, now_ms: int, kafka_port: int = 0
    ) -> int | Errors:
        """Start a new incarnation of ``broker_id``; returns its broker epoch
        (or INVALID_REQUEST when BROKERS_MAX distinct brokers are known).

        An incarnation still alive under an older epoch is fenced first (the
        broker restarted within its session timeout and lost its in-memory
        state).  Offline partitions are then re-elected: the broker that is
        the sole ISR member of an offline partition leads it again."""
        _check_broker_args(broker_id, az, host, port)
        if type(kafka_port) is not int or not 0 <= kafka_port <= PORT_MAX:
            raise ValueError(f"kafka_port must be in [0, {PORT_MAX}], got {kafka_port!r}")
        old = self._brokers.get(broker_id)
        if old is None and len(self._brokers) >= BROKERS_MAX:
            return Errors.INVALID_REQUEST
        d = _Draft(self)
        if old is not None and not old.fenced:
            d.fence([broker_id], FENCED_NEW_INCARNATION)
        epoch = self._broker_epoch_last + 1
        d.broker_epoch_last = epoch
        d.brokers[broker_id] = BrokerRegistration(broker_id, az, host, port, epoch, fenced=False, kafka_port=kafka_port)
        d.events.append(BrokerRegistered(broker_id, epoch, az, host, port))
        d.reconcile({broker_id}, REASON_BROKER_REGISTERED)
        self._commit(d)
        self._last_heartbeat_ms[broker_id] = now_ms
        return epoch

    def _check_sender(self, broker_id: int, broker_epoch: int) -> Errors:
        b = self._brokers.get(broker_id)
        if b is None:
            return Errors.BROKER_ID_NOT_REGISTERED
        if broker_epoch != b.broker_epoch:
            return Errors.STALE_BROKER_EPOCH
        if b.fenced:
            return Errors.BROKER_ID_NOT_REGISTERED
        return Errors.NONE

    def heartbeat(self, broker_id: int, broker_epoch: int, now_ms: int) -> Errors:
        """NONE, STALE_BROKER_EPOCH (an older incarnation) or
        BROKER_ID_NOT_REGISTERED (unknown or fenced: register again)."""
        err = self._check_sender(broker_id, broker_epoch)
        if err == Errors.NONE:
            self._last_heartbeat_ms[broker_id] = max(now_ms, self._last_heartbeat_ms.get(broker_id, now_ms))
        return err

    def tick(self, now_ms: int) -> None:
        """Fence brokers silent for longer than the session timeout, elect
        leaders for offline partitions (unclean, if enabled), and run the
        periodic preferred-leader election when due.  One transaction."""
        timeout = self.config.broker_session_timeout_ms
        expired = sorted(
            bid for bid, b in self._brokers.items() if not b.fenced and now_ms - self._last_heartbeat_ms[bid] > timeout
        )
        d = _Draft(self)
        if expired:
            d.fence(expired, FENCED_SESSION_TIMEOUT)
        elif self.config.unclean_leader_election_enable and self._offline:
            d.reconcile(set(), REASON_OFFLINE)
        interval = self.config.leader_imbalance_check_interval_ms
        if interval and now_ms >= self._next_preferred_check_ms:
            self._next_preferred_check_ms = now_ms + interval
            d.elect_preferred()
        self._commit(d)
        for bid in expired:
            self._last_heartbeat_ms.pop(bid, None)

    def elect_preferred_leaders(self) -> None:
        """Run the preferred-leader election now (what ``tick`` does every
        ``leader_imbalance_check_interval_ms``)."""
        d = _Draft(self)
        d.elect_preferred()
        self._commit(d)

    # -------------------------------------------------------------- topics

    def create_topic(self, name: str, partitions: int, replication_factor: int) -> TopicInfo | Errors:
        """Create a topic over the alive brokers (see :func:`assign_replicas`),
        ISR = replicas, epochs 0.

        Re-creating a topic with the same shape (partitions and replication
        factor) returns the existing topic unchanged, so a retried or
        concurrent create (every process of a cluster creating its topics
        at start) succeeds; another shape is TOPIC_ALREADY_EXISTS.  Errors:
        INVALID_REQUEST (a name Kafka would refuse), INVALID_PARTITIONS
        (< 1, or over PARTITIONS_PER_TOPIC_MAX / PARTITIONS_PER_CLUSTER_MAX in all),
        INVALID_REPLICATION_FACTOR (< 1 or more than the alive brokers)."""
        if not valid_topic_name(name):
            return Errors.INVALID_REQUEST
        existing = self._topic_ids.get(name)
        if existing is not None:
            info = self._topic_info(existing)
            if info.num_partitions == partitions and len(info.partitions[0].replicas) == replication_factor:
                return info
            return Errors.TOPIC_ALREADY_EXISTS
        if (
            not 1 <= partitions <= PARTITIONS_PER_TOPIC_MAX
            or len(self._parts) + partitions > PARTITIONS_PER_CLUSTER_MAX
        ):
            return Errors.INVALID_PARTITIONS
        alive = [b.info() for b in self._brokers.values() if not b.fenced]
        if not 1 <= replication_factor <= len(alive):
            return Errors.INVALID_REPLICATION_FACTOR
        tid = self._new_uuid()
        if tid in self._topic_names or tid in self._deleted:
            # A repeating uuid source: refuse rather than merge two topics
            # (or bring back a deleted one, whose objects walmgr may delete).
            return Errors.TOPIC_ALREADY_EXISTS
        d = _Draft(self)
        d.new_topics[tid] = (name, partitions)
        for p, reps in enumerate(assign_replicas(alive, partitions, replication_factor, len(self._parts))):
            d.parts[TopicIdPartition(tid, p)] = PartitionInfo(reps[0], 0, reps, reps, 0)
        self._commit(d)
        return self._topic_info(tid)

    def delete_topics(self, names: Iterable[str]) -> dict[str, uuid.UUID | Errors]:
        """Delete topics (Kafka's DeleteTopics): one durable change for all
        of them. Per name: the deleted topic's id, or UNKNOWN_TOPIC_OR_PARTITION.
        A deleted topic's id is kept for good, in every snapshot, so brokers
        drop its logs and walmgr knows its partitions reference nothing."""
        d = _Draft(self)
        out: dict[str, uuid.UUID | Errors] = {}
        for name in names:
            if name in out:
                continue  # named twice: one answer, one deletion
            tid = self._topic_ids.get(name)
            if tid is None:
                out[name] = Errors.UNKNOWN_TOPIC_OR_PARTITION
                continue
            if len(self._deleted) + len(d.deleted_topics) >= DELETED_TOPICS_MAX:
                out[name] = Errors.POLICY_VIOLATION
                continue
            d.deleted_topics[tid] = name
            d.events.append(TopicDeleted(name, tid))
            out[name] = tid
        self._commit(d)
        return out

    def alter_partition(
        self,
        broker_id: int,
        broker_epoch: int,
        tp: TopicIdPartition,
        leader_epoch: int,
        partition_epoch: int,
        new_isr: Iterable[int],
    ) -> PartitionInfo | Errors:
        """The leader's ISR change (Kafka's AlterPartition), checked in this
        order: STALE_BROKER_EPOCH / BROKER_ID_NOT_REGISTERED (the sender),
        UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER (the sender does
        not lead), FENCED_LEADER_EPOCH, INVALID_UPDATE_VERSION (partition
        epoch), INVALID_REQUEST (duplicate ids), INELIGIBLE_REPLICA (not a
        subset of the replicas, without the leader, or adding a replica that
        is not alive).  Success commits the ISR (in replicas order) with
        partition_epoch + 1 and returns the new state; the current ISR
        again returns the current state unchanged."""
        err = self._check_sender(broker_id, broker_epoch)
        if err != Errors.NONE:
            return err
        p = self._parts.get(tp)
        asked = list(new_isr)
        err = check_alter_partition(p, broker_id, leader_epoch, partition_epoch, asked)
        if err != Errors.NONE:
            return err
        assert p is not None
        wanted = set(asked)
        d = _Draft(self)
        if any(not d.alive(r) for r in wanted - set(p.isr)):
            return Errors.INELIGIBLE_REPLICA
        isr = tuple(r for r in p.replicas if r in wanted)
        if isr == p.isr:
            return p
        d.set_part(tp, replace(p, isr=isr), REASON_ALTER_PARTITION)
        self._commit(d)
        return self._parts[tp]

    # -------------------------------------------------------- producer ids

    def allocate_producer_ids(self, broker_id: int, broker_epoch: int) -> ProducerIdBlock | Errors:
        """The next block of producer ids for an alive broker, durable before
        it is returned (STALE_BROKER_EPOCH / BROKER_ID_NOT_REGISTERED as for
        heartbeats; UNKNOWN_SERVER_ERROR after 2^63 ids, as Kafka)."""
        err = self._check_sender(broker_id, broker_epoch)
        if err != Errors.NONE:
            return err
        try:
            return self._pids.allocate(broker_id)
        except ProducerIdsExhaustedError:
            return Errors.UNKNOWN_SERVER_ERROR

    # ---------------------------------------------------------- inspection

    def snapshot(self) -> MetadataSnapshot:
        """The current metadata: version, ALIVE brokers (by id), all topics
        (by name).  Cached until the next change."""
        if self._snapshot is None or self._snapshot.version != self.version:
            brokers = [b.info() for b in sorted(self._brokers.values(), key=lambda b: b.broker_id) if not b.fenced]
            topics = [self._topic_info(self._topic_ids[n]) for n in sorted(self._topic_ids)]
            self._snapshot = MetadataSnapshot(self.version, brokers, topics, self.cluster_id, frozenset(self._deleted))
        return self._snapshot

    def _topic_info(self, tid: uuid.UUID) -> TopicInfo:
        n = self._num_partitions[tid]
        return TopicInfo(tid, self._topic_names[tid], tuple(self._parts[TopicIdPartition(tid, p)] for p in range(n)))

    def registration(self, broker_id: int) -> BrokerRegistration | None:
        return self._brokers.get(broker_id)

    def registrations(self) -> list[BrokerRegistration]:
        return sorted(self._brokers.values(), key=lambda b: b.broker_id)

    def partition(self, tp: TopicIdPartition) -> PartitionInfo | None:
        return self._parts.get(tp)

    def topic(self, name: str) -> TopicInfo | None:
        tid = self._topic_ids.get(name)
        return None if tid is None else self._topic_info(tid)

    @property
    def offline_partitions(self) -> int:
        return len(self._offline)

    def take_events(self) -> list[ControllerEvent]:
        """Events since the last call (the shell logs them)."""
        out = list(self._events)
        self._events.clear()
        return out

    def check(self) -> None:
        """Assert the invariants every committed state keeps (tests call it
        after each step): a leader is alive and in the ISR; the ISR is a
        non-empty subset of the replicas in replicas order; an ISR of a
        partition with a leader holds only alive brokers; an offline
        partition keeps exactly its last ISR member."""
        for tp, p in self._parts.items():
            assert len(set(p.replicas)) == len(p.replicas) > 0, f"{tp}: replicas {p.replicas}"
            assert p.isr and p.isr == tuple(r for r in p.replicas if r in p.isr), f"{tp}: isr {p.isr} of {p.replicas}"
            assert p.leader_epoch >= 0 and p.partition_epoch >= p.leader_epoch, f"{tp}: epochs {p}"
            if p.leader == NO_LEADER:
                assert len(p.isr) == 1, f"{tp}: offline with isr {p.isr}"
            else:
                assert p.leader in p.isr, f"{tp}: leader {p.leader} not in isr {p.isr}"
                for r in p.isr:
                    b = self._brokers.get(r)
                    assert b is not None and not b.fenced, f"{tp}: isr member {r} is not alive"
        assert self._offline == {tp for tp, p in self._parts.items() if p.leader == NO_LEADER}
        assert not self._deleted.keys() & self._topic_names.keys(), "a topic both live and deleted"
        assert all(tp.topic_id in self._num_partitions for tp in self._parts), "a partition of no topic"
        for tid, n in self._num_partitions.items():
            assert all(TopicIdPartition(tid, p) in self._parts for p in range(n)), f"topic {tid}: partitions missing"
        assert all(b.broker_epoch <= self._broker_epoch_last for b in self._brokers.values())


def _lock_dir(root: str) -> int:
    """Hold ``root/LOCK`` exclusively for this controller's life: two
    controllers on one data directory would each believe their own memory
    (split brain), and LMDB must not be opened twice in one process.  flock
    locks belong to the open file, so a second open in this process is
    refused too."""
    fd = os.open(os.path.join(root, "LOCK"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        os.close(fd)
        raise ControllerStateError(f"{root}: another controller holds this data directory ({e})") from e
    return fd


def _check_broker_args(broker_id: int, az: str, host: str, port: int) -> None:
    if not 0 <= broker_id <= BROKER_ID_MAX:
        raise ValueError(f"broker_id must be in [0, {BROKER_ID_MAX}], got {broker_id}")
    if not 0 < len(az) <= AZ_CHARS_MAX:
        raise ValueError(f"az must be 1-{AZ_CHARS_MAX} characters, got {az!r:.300}")
    if len(host) > HOST_CHARS_MAX:
        raise ValueError(f"host must be at most {HOST_CHARS_MAX} characters")
    if not 0 <= port <= PORT_MAX:
        raise ValueError(f"port must be in [0, {PORT_MAX}], got {port}")


# ------------------------------------------------------------------ bodies
#
# The controller RPC's bodies, both directions (partlog.controller.server
# lists the methods).  Requests: enc_* for the client, dec_* for the server;
# responses: enc_*_response for the server, dec_*_response for the client.
# Decoders check shapes and raise WireError naming the field; Kafka errors
# travel as "error" (an unknown code decodes as UNKNOWN_SERVER_ERROR).

# Deleted topic ids are kept for good and sent in every snapshot (16 bytes
# each); past this many, DeleteTopics is refused (POLICY_VIOLATION) rather
# than letting snapshots grow without bound.
DELETED_TOPICS_MAX = 100_000


def _enc_broker(b: BrokerRegistration) -> list[Any]:
    return [b.az, b.host, b.port, b.broker_epoch, b.fenced, b.kafka_port]


def _dec_broker(broker_id: int, v: Any) -> BrokerRegistration:
    # Six fields since the Kafka listener; a state directory written before
    # it has five (no Kafka port).
    fields = expect_list(v, "broker")
    if len(fields) not in (5, 6):
        raise WireError(f"broker: expected 5 or 6 fields, got {len(fields)}")
    az, host, port, epoch, fenced = fields[:5]
    kafka_port = expect_int(fields[5], "broker.kafka_port") if len(fields) == 6 else 0
    return BrokerRegistration(
        broker_id, expect_str(az, "broker.az"), expect_str(host, "broker.host"), expect_int(port, "broker.port"),
        expect_int(epoch, "broker.broker_epoch"), bool(fenced), kafka_port,
    )  # fmt: skip


def enc_partition(p: PartitionInfo) -> list[Any]:
    return [p.leader, p.leader_epoch, list(p.replicas), list(p.isr), p.partition_epoch]


def dec_partition(v: Any, what: str = "partition") -> PartitionInfo:
    leader, leader_epoch, replicas, isr, partition_epoch = expect_list(v, what, 5)
    return PartitionInfo(
        expect_int(leader, f"{what}.leader"),
        expect_int(leader_epoch, f"{what}.leader_epoch"),
        tuple(expect_int(r, f"{what}.replicas[]") for r in expect_list(replicas, f"{what}.replicas")),
        tuple(expect_int(r, f"{what}.isr[]") for r in expect_list(isr, f"{what}.isr")),
        expect_int(partition_epoch, f"{what}.partition_epoch"),
    )


def enc_topic(t: TopicInfo) -> list[Any]:
    return [t.name, t.topic_id.bytes, [enc_partition(p) for p in t.partitions]]


def dec_topic(v: Any, what: str = "topic") -> TopicInfo:
    name, tid, parts = expect_list(v, what, 3)
    raw = expect_bytes(tid, f"{what}.topic_id")
    if len(raw) != 16:
        raise WireError(f"{what}.topic_id: expected 16 bytes, got {len(raw)}")
    return TopicInfo(
        uuid.UUID(bytes=raw),
        expect_str(name, f"{what}.name"),
        tuple(
            dec_partition(p, f"{what}.partitions[{i}]") for i, p in enumerate(expect_list(parts, f"{what}.partitions"))
        ),
    )


def _dec_error(m: dict[str, Any], what: str) -> Errors:
    code = expect_int(field(m, "error", what), f"{what}.error")
    try:
        return Errors(code)
    except ValueError:
        return Errors.UNKNOWN_SERVER_ERROR


# register_broker


def enc_register(b: BrokerInfo) -> dict[str, Any]:
    return {"broker_id": b.broker_id, "az": b.az, "host": b.host, "port": b.port, "kafka_port": b.kafka_port}


def dec_register(body: Any) -> BrokerInfo:
    w = "register_broker"
    m = expect_map(body, w)
    bid = expect_int(field(m, "broker_id", w), f"{w}.broker_id")
    az = expect_str(field(m, "az", w), f"{w}.az")
    host = expect_str(field(m, "host", w), f"{w}.host")
    port = expect_int(field(m, "port", w), f"{w}.port")
    if not 0 <= bid <= BROKER_ID_MAX:
        raise WireError(f"{w}.broker_id: must be in [0, {BROKER_ID_MAX}], got {bid}")
    if not 0 < len(az) <= AZ_CHARS_MAX:
        raise WireError(f"{w}.az: must be 1-{AZ_CHARS_MAX} characters, got {len(az)}")
    if len(host) > HOST_CHARS_MAX:
        raise WireError(f"{w}.host: must be at most {HOST_CHARS_MAX} characters, got {len(host)}")
    if not 0 <= port <= PORT_MAX:
        raise WireError(f"{w}.port: must be in [0, {PORT_MAX}], got {port}")
    kafka_port = expect_int(m.get("kafka_port", 0), f"{w}.kafka_port")
    if not 0 <= kafka_port <= PORT_MAX:
        raise WireError(f"{w}.kafka_port: must be in [0, {PORT_MAX}], got {kafka_port}")
    return BrokerInfo(bid, az, host, port, kafka_port)


def enc_register_response(answer: int | Errors) -> dict[str, Any]:
    if isinstance(answer, Errors):
        return {"error": int(answer), "broker_epoch": -1}
    return {"error": 0, "broker_epoch": answer}


def dec_register_response(body: Any) -> int | Errors:
    w = "register_broker response"
    m = expect_map(body, w)
    err = _dec_error(m, w)
    if err != Errors.NONE:
        return err
    epoch = expect_int(field(m, "broker_epoch", w), f"{w}.broker_epoch")
    if epoch < 0:
        raise WireError(f"{w}.broker_epoch: negative ({epoch})")
    return epoch


# heartbeat and allocate_producer_ids: who is asking


def enc_broker_epoch(broker_id: int, broker_epoch: int) -> dict[str, Any]:
    return {"broker_id": broker_id, "broker_epoch": broker_epoch}


def dec_broker_epoch(body: Any, w: str) -> tuple[int, int]:
    m = expect_map(body, w)
    return expect_int(field(m, "broker_id", w), f"{w}.broker_id"), expect_int(
        field(m, "broker_epoch", w), f"{w}.broker_epoch"
    )


def enc_heartbeat_response(err: Errors, version: int) -> dict[str, Any]:
    return {"error": int(err), "version": version}


def dec_heartbeat_response(body: Any) -> Errors:
    return _dec_error(expect_map(body, "heartbeat response"), "heartbeat response")


def enc_pid_response(answer: ProducerIdBlock | Errors, broker_id: int) -> dict[str, Any]:
    if isinstance(answer, Errors):
        return {"error": int(answer), "broker_id": broker_id, "first_producer_id": -1, "size": 0}
    return {
        "error": 0,
        "broker_id": answer.assigned_broker_id,
        "first_producer_id": answer.first_producer_id,
        "size": answer.size,
    }


def dec_pid_response(body: Any) -> ProducerIdBlock | Errors:
    w = "allocate_producer_ids response"
    m = expect_map(body, w)
    err = _dec_error(m, w)
    if err != Errors.NONE:
        return err
    block = ProducerIdBlock(
        expect_int(field(m, "broker_id", w), f"{w}.broker_id"),
        expect_int(field(m, "first_producer_id", w), f"{w}.first_producer_id"),
        expect_int(field(m, "size", w), f"{w}.size"),
    )
    if block.first_producer_id < 0 or block.size <= 0:
        raise WireError(f"{w}: bad block {block}")
    return block


# metadata_poll


def enc_poll(version: int, max_wait_ms: int) -> dict[str, Any]:
    return {"version": version, "max_wait_ms": max_wait_ms}


def dec_poll(body: Any) -> tuple[int, int]:
    w = "metadata_poll"
    m = expect_map(body, w)
    version = expect_int(field(m, "version", w), f"{w}.version")
    wait = expect_int(field(m, "max_wait_ms", w), f"{w}.max_wait_ms")
    if wait < 0:
        raise WireError(f"{w}.max_wait_ms: must be >= 0, got {wait}")
    return version, wait


def enc_snapshot(s: MetadataSnapshot) -> dict[str, Any]:
    """A metadata_poll answer with news; without news it is ``{"version": v}``."""
    return {
        "version": s.version,
        "brokers": [[b.broker_id, b.az, b.host, b.port, b.kafka_port] for b in s.brokers],
        "topics": [enc_topic(t) for t in s.topics],
        "deleted_topics": [tid.bytes for tid in sorted(s.deleted_topics)],
    }


def dec_poll_response(body: Any) -> MetadataSnapshot | None:
    """The new snapshot, or None when the answer is "unchanged"."""
    w = "metadata_poll response"
    m = expect_map(body, w)
    version = expect_int(field(m, "version", w), f"{w}.version")
    if "topics" not in m and "brokers" not in m:
        return None
    brokers = []
    for i, b in enumerate(expect_list(field(m, "brokers", w), f"{w}.brokers")):
        what = f"{w}.brokers[{i}]"
        # Five fields since the Kafka listener (its port last); four before.
        fields = expect_list(b, what)
        if len(fields) not in (4, 5):
            raise WireError(f"{what}: expected 4 or 5 items, got {len(fields)}")
        bid, az, host, port = fields[:4]
        brokers.append(
            BrokerInfo(
                expect_int(bid, f"{what}.id"),
                expect_str(az, f"{what}.az"),
                expect_str(host, f"{what}.host"),
                expect_int(port, f"{what}.port"),
                expect_int(fields[4], f"{what}.kafka_port") if len(fields) == 5 else 0,
            )
        )
    topics = [dec_topic(t, f"{w}.topics[{i}]") for i, t in enumerate(expect_list(field(m, "topics", w), f"{w}.topics"))]
    deleted = set()
    for i, raw in enumerate(expect_list(m.get("deleted_topics", []), f"{w}.deleted_topics")):
        tid = expect_bytes(raw, f"{w}.deleted_topics[{i}]")
        if len(tid) != 16:
            raise WireError(f"{w}.deleted_topics[{i}]: a topic id is 16 bytes, got {len(tid)}")
        deleted.add(uuid.UUID(bytes=tid))
    if deleted & {t.topic_id for t in topics}:
        raise WireError(f"{w}: a topic both live and deleted")
    return MetadataSnapshot(version, brokers, topics, deleted_topics=frozenset(deleted))


# alter_partition


def enc_alter_partition(
    broker_id: int, broker_epoch: int, tp: TopicIdPartition, leader_epoch: int, partition_epoch: int, isr: Iterable[int]
) -> dict[str, Any]:
    return {
        "broker_id": broker_id,
        "broker_epoch": broker_epoch,
        "topic_id": tp.topic_id.bytes,
        "partition": tp.partition,
        "leader_epoch": leader_epoch,
        "partition_epoch": partition_epoch,
        "isr": list(isr),
    }


def dec_alter_partition(body: Any) -> tuple[int, int, TopicIdPartition, int, int, list[int]]:
    w = "alter_partition"
    m = expect_map(body, w)
    bid, epoch = dec_broker_epoch(m, w)
    raw = expect_bytes(field(m, "topic_id", w), f"{w}.topic_id")
    if len(raw) != 16:
        raise WireError(f"{w}.topic_id: expected 16 bytes, got {len(raw)}")
    part = expect_int(field(m, "partition", w), f"{w}.partition")
    if part < 0:
        raise WireError(f"{w}.partition: negative ({part})")
    isr = expect_list(field(m, "isr", w), f"{w}.isr")
    if len(isr) > BROKERS_MAX:
        raise WireError(f"{w}.isr: at most {BROKERS_MAX} broker ids, got {len(isr)}")
    return (
        bid,
        epoch,
        TopicIdPartition(uuid.UUID(bytes=raw), part),
        expect_int(field(m, "leader_epoch", w), f"{w}.leader_epoch"),
        expect_int(field(m, "partition_epoch", w), f"{w}.partition_epoch"),
        [expect_int(r, f"{w}.isr[{i}]") for i, r in enumerate(isr)],
    )


def enc_alter_partition_response(answer: PartitionInfo | Errors) -> dict[str, Any]:
    if isinstance(answer, Errors):
        return {"error": int(answer), "partition": None}
    return {"error": 0, "partition": enc_partition(answer)}


def dec_alter_partition_response(body: Any) -> PartitionInfo | Errors:
    w = "alter_partition response"
    m = expect_map(body, w)
    err = _dec_error(m, w)
    if err != Errors.NONE:
        return err
    return dec_partition(field(m, "partition", w), f"{w}.partition")


# create_topics


def enc_delete_topics(names: Iterable[str]) -> dict[str, Any]:
    return {"topics": list(names)}


def dec_delete_topics(body: Any) -> list[str]:
    w = "delete_topics"
    m = expect_map(body, w)
    names = [expect_str(n, f"{w}.topics[{i}]") for i, n in enumerate(expect_list(field(m, "topics", w), f"{w}.topics"))]
    if len(names) > TOPICS_PER_REQUEST_MAX:
        raise WireError(f"{w}.topics: at most {TOPICS_PER_REQUEST_MAX}, got {len(names)}")
    return names


def enc_delete_topics_response(out: Mapping[str, uuid.UUID | Errors]) -> dict[str, Any]:
    return {
        "topics": [[name, int(a), None] if isinstance(a, Errors) else [name, 0, a.bytes] for name, a in out.items()]
    }


def dec_delete_topics_response(body: Any) -> dict[str, uuid.UUID | Errors]:
    w = "delete_topics response"
    m = expect_map(body, w)
    out: dict[str, uuid.UUID | Errors] = {}
    for i, item in enumerate(expect_list(field(m, "topics", w), f"{w}.topics")):
        name, code, tid = expect_list(item, f"{w}.topics[{i}]", 3)
        name = expect_str(name, f"{w}.topics[{i}].name")
        code = expect_int(code, f"{w}.topics[{i}].error")
        if code == 0:
            raw = expect_bytes(tid, f"{w}.topics[{i}].topic_id")
            if len(raw) != 16:
                raise WireError(f"{w}.topics[{i}].topic_id: 16 bytes, got {len(raw)}")
            out[name] = uuid.UUID(bytes=raw)
        else:
            try:
                out[name] = Errors(code)
            except ValueError:
                out[name] = Errors.UNKNOWN_SERVER_ERROR
    return out


def enc_create_topics(topics: Mapping[str, tuple[int, int]]) -> dict[str, Any]:
    return {"topics": [[name, partitions, rf] for name, (partitions, rf) in topics.items()]}


def dec_create_topics(body: Any) -> list[tuple[str, int, int]]:
    w = "create_topics"
    items = expect_list(field(expect_map(body, w), "topics", w), f"{w}.topics")
    if len(items) > TOPICS_PER_REQUEST_MAX:
        raise WireError(f"{w}.topics: at most {TOPICS_PER_REQUEST_MAX} topics, got {len(items)}")
    out = []
    for i, it in enumerate(items):
        name, partitions, rf = expect_list(it, f"{w}.topics[{i}]", 3)
        out.append(
            (
                expect_str(name, f"{w}.topics[{i}].name"),
                expect_int(partitions, f"{w}.topics[{i}].partitions"),
                expect_int(rf, f"{w}.topics[{i}].replication_factor"),
            )
        )
    return out


def enc_create_topics_response(version: int, answers: Iterable[tuple[str, TopicInfo | Errors]]) -> dict[str, Any]:
    return {
        "version": version,
        "topics": [[name, int(a), None] if isinstance(a, Errors) else [name, 0, enc_topic(a)] for name, a in answers],
    }


def dec_create_topics_response(body: Any) -> dict[str, TopicInfo | Errors]:
    w = "create_topics response"
    out: dict[str, TopicInfo | Errors] = {}
    for i, item in enumerate(expect_list(field(expect_map(body, w), "topics", w), f"{w}.topics")):
        what = f"{w}.topics[{i}]"
        name, code, topic = expect_list(item, what, 3)
        err = _dec_error({"error": code}, what)
        out[expect_str(name, f"{what}.name")] = err if err != Errors.NONE else dec_topic(topic, f"{what}.topic")
    return out
