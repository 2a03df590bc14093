"""The embedded controller's state on disk: an LMDB environment under
``data_dir/metadata``, held by one controller at a time (``data_dir/LOCK``).

:class:`ControllerStateStore` reads what a state directory holds
(:meth:`~ControllerStateStore.load`) and writes a change the controller
decided in ONE write transaction (``sync=True``: fsynced) together with the
bumped ``version`` (:meth:`~ControllerStateStore.commit`).  It decides
nothing: :mod:`partlog.controller.core` validates and stages a change, has it
written here, and only then applies it to memory and answers.

Layout of ``data_dir``::

    LOCK            flock'ed by the controller that owns the directory
    metadata/       LMDB: meta (format, version, last broker epoch, cluster id), brokers,
                    topics, parts (one value per partition, wire.enc_partition's:
                    a reassignment's lists only while one is in progress), deleted_topics,
                    topic_configs (a configured topic's overrides: [[name, value]])
    producer_ids/   LMDB of the ProducerIdManager (opened by the controller)
"""

from __future__ import annotations

import fcntl
import os
import struct
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import lmdb
import msgpack

from partlog.controller.cluster_meta import PartitionInfo
from partlog.controller.model import BrokerRegistration
from partlog.controller.wire import dec_configs, dec_partition, enc_configs, enc_partition
from partlog.kafka.records import TopicIdPartition
from partlog.rpc.wire import WireError, expect_int, expect_list, expect_str

__all__ = [
    "FORMAT_VERSION",
    "MAP_SIZE_BYTES",
    "ControllerStateError",
    "ControllerStateStore",
    "StoredState",
    "read_replicas",
]

# Address space, not disk: the metadata of PARTITIONS_PER_CLUSTER_MAX partitions and
# BROKERS_MAX brokers takes a few tens of MB.
MAP_SIZE_BYTES = 1 << 30
FORMAT_VERSION = 1

_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_KEY_FORMAT = b"format"
_KEY_VERSION = b"version"
_KEY_BROKER_EPOCH = b"broker_epoch"
_KEY_CLUSTER_ID = b"cluster_id"


class ControllerStateError(RuntimeError):
    """The data directory holds something this controller cannot read."""


@dataclass(frozen=True, slots=True)
class StoredState:
    """What a state directory holds, as read at start (empty when new)."""

    # The format marker is there (False: a directory never written).
    formatted: bool
    version: int
    broker_epoch_last: int
    # None: no cluster id kept yet.
    cluster_id: uuid.UUID | None
    brokers: dict[int, BrokerRegistration]
    # topic id -> (name, partitions)
    topics: dict[uuid.UUID, tuple[str, int]]
    # deleted topic id -> name
    deleted: dict[uuid.UUID, str]
    parts: dict[TopicIdPartition, PartitionInfo]
    # topic id -> its config overrides (only topics the controller configured)
    configs: dict[uuid.UUID, tuple[tuple[str, str], ...]] = field(default_factory=dict)


class ControllerStateStore:
    """The LMDB state of one controller's ``data_dir``, held exclusively
    until :meth:`close`.  ``OSError``/``lmdb.Error`` from the disk propagate;
    a directory that holds something else raises :class:`ControllerStateError`."""

    def __init__(self, data_dir: str | os.PathLike[str]) -> None:
        # As given: error messages name the directory the way the caller did.
        self.data_dir = data_dir
        root = os.fspath(data_dir)
        meta_dir = os.path.join(root, "metadata")
        os.makedirs(meta_dir, exist_ok=True)
        self._lock_fd = _lock_dir(root)
        try:
            # sync/metasync: a change is on disk before it is published or answered.
            self._env = lmdb.open(meta_dir, map_size=MAP_SIZE_BYTES, max_dbs=6, sync=True, metasync=True)
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
            self._db_configs = self._env.open_db(b"topic_configs")
        except BaseException:
            self.close()
            raise

    def load(self) -> StoredState:
        """Everything the directory holds.  Raises ControllerStateError for
        another format, state without a format marker, or a value that does
        not decode."""
        brokers: dict[int, BrokerRegistration] = {}
        topics: dict[uuid.UUID, tuple[str, int]] = {}
        deleted: dict[uuid.UUID, str] = {}
        parts: dict[TopicIdPartition, PartitionInfo] = {}
        configs: dict[uuid.UUID, tuple[tuple[str, str], ...]] = {}
        with self._env.begin() as txn:
            fmt = txn.get(_KEY_FORMAT, db=self._db_meta)
            if fmt is None:
                if txn.stat(self._db_brokers)["entries"] or txn.stat(self._db_parts)["entries"]:
                    raise ControllerStateError(f"{self.data_dir}: controller state without a format marker")
            elif _U32.unpack(fmt)[0] != FORMAT_VERSION:
                raise ControllerStateError(
                    f"{self.data_dir}: controller format {_U32.unpack(fmt)[0]}, this code reads {FORMAT_VERSION}"
                )
            raw = txn.get(_KEY_VERSION, db=self._db_meta)
            version = _U64.unpack(raw)[0] if raw else 0
            raw = txn.get(_KEY_BROKER_EPOCH, db=self._db_meta)
            broker_epoch_last = _U64.unpack(raw)[0] if raw else 0
            stored_cluster = txn.get(_KEY_CLUSTER_ID, db=self._db_meta)
            try:
                for k, v in txn.cursor(db=self._db_brokers):
                    b = _dec_broker(_U32.unpack(k)[0], msgpack.unpackb(v))
                    brokers[b.broker_id] = b
                for k, v in txn.cursor(db=self._db_topics):
                    tid = uuid.UUID(bytes=bytes(k))
                    name, n = expect_list(msgpack.unpackb(v), "topic", 2)
                    topics[tid] = expect_str(name, "topic.name"), expect_int(n, "topic.partitions")
                for k, v in txn.cursor(db=self._db_deleted):
                    deleted[uuid.UUID(bytes=bytes(k))] = expect_str(msgpack.unpackb(v), "deleted topic name")
                for k, v in txn.cursor(db=self._db_parts):
                    tp = TopicIdPartition(uuid.UUID(bytes=bytes(k[:16])), _U32.unpack(k[16:])[0])
                    parts[tp] = dec_partition(msgpack.unpackb(v))
                for k, v in txn.cursor(db=self._db_configs):
                    configs[uuid.UUID(bytes=bytes(k))] = dec_configs(msgpack.unpackb(v), "topic configs")
            except (ValueError, TypeError, struct.error, WireError) as e:
                raise ControllerStateError(f"{self.data_dir}: unreadable controller state: {e!r}") from e
        cluster_id = None
        if stored_cluster is not None:
            if len(stored_cluster) != 16:
                raise ControllerStateError(f"{self.data_dir}: unreadable cluster id {bytes(stored_cluster)!r}")
            cluster_id = uuid.UUID(bytes=bytes(stored_cluster))
        return StoredState(
            fmt is not None, version, broker_epoch_last, cluster_id, brokers, topics, deleted, parts, configs
        )

    def write_identity(self, version: int, cluster_id: uuid.UUID) -> None:
        """Mark the directory with this code's format and the cluster id it
        belongs to (a new directory, or one from before cluster ids)."""
        with self._env.begin(write=True) as txn:
            txn.put(_KEY_FORMAT, _U32.pack(FORMAT_VERSION), db=self._db_meta)
            txn.put(_KEY_VERSION, _U64.pack(version), db=self._db_meta)
            txn.put(_KEY_CLUSTER_ID, cluster_id.bytes, db=self._db_meta)

    def commit(
        self,
        version: int,
        *,
        broker_epoch_last: int | None,
        brokers: Iterable[BrokerRegistration],
        new_topics: Mapping[uuid.UUID, tuple[str, int]],
        parts: Mapping[TopicIdPartition, PartitionInfo],
        deleted_topics: Mapping[uuid.UUID, tuple[str, int]],
        configs: Mapping[uuid.UUID, tuple[tuple[str, str], ...]] | None = None,
    ) -> None:
        """Write one change durably with ``version``: the brokers and
        partitions it sets, the topics it creates, and the topics it deletes
        (id -> (name, partitions): their partitions go, the name is kept),
        and the config overrides it sets (id -> sorted pairs).
        Everything is encoded before the transaction begins, so the
        transaction itself only puts (nothing in it can fail but the disk)."""
        puts: list[tuple[Any, bytes, bytes]] = [(self._db_meta, _KEY_VERSION, _U64.pack(version))]
        if broker_epoch_last is not None:
            puts.append((self._db_meta, _KEY_BROKER_EPOCH, _U64.pack(broker_epoch_last)))
        for b in brokers:
            puts.append((self._db_brokers, _U32.pack(b.broker_id), msgpack.packb(_enc_broker(b))))
        for tid, (name, n) in new_topics.items():
            puts.append((self._db_topics, tid.bytes, msgpack.packb([name, n])))
        for tp, p in parts.items():
            puts.append((self._db_parts, tp.topic_id.bytes + _U32.pack(tp.partition), msgpack.packb(enc_partition(p))))
        for tid, pairs in (configs or {}).items():
            puts.append((self._db_configs, tid.bytes, msgpack.packb(enc_configs(pairs))))
        deletes: list[tuple[Any, bytes]] = []
        for tid, (name, n) in deleted_topics.items():
            puts.append((self._db_deleted, tid.bytes, msgpack.packb(name)))
            deletes.append((self._db_topics, tid.bytes))
            deletes.append((self._db_configs, tid.bytes))
            deletes.extend((self._db_parts, tid.bytes + _U32.pack(p)) for p in range(n))
        with self._env.begin(write=True) as txn:
            for db, k, v in puts:
                txn.put(k, v, db=db)
            for db, k in deletes:
                txn.delete(k, db=db)

    def close(self) -> None:
        self._env.close()
        os.close(self._lock_fd)  # releases the flock


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


def _enc_broker(b: BrokerRegistration) -> list[Any]:
    # The listeners' names only when the broker has them (seven fields).
    return [
        b.az,
        b.host,
        b.port,
        b.broker_epoch,
        b.fenced,
        b.kafka_port,
        *([b.kafka_listeners] if b.kafka_listeners else []),
    ]


def _dec_broker(broker_id: int, v: Any) -> BrokerRegistration:
    # Six fields since the Kafka listener; a state directory written before
    # it has five (no Kafka port).
    fields = expect_list(v, "broker")
    if len(fields) not in (5, 6, 7):
        raise WireError(f"broker: expected 5 to 7 fields, got {len(fields)}")
    az, host, port, epoch, fenced = fields[:5]
    kafka_port = expect_int(fields[5], "broker.kafka_port") if len(fields) >= 6 else 0
    listeners = expect_str(fields[6], "broker.kafka_listeners") if len(fields) == 7 else ""
    return BrokerRegistration(
        broker_id, expect_str(az, "broker.az"), expect_str(host, "broker.host"), expect_int(port, "broker.port"),
        expect_int(epoch, "broker.broker_epoch"), bool(fenced), kafka_port, listeners,
    )  # fmt: skip
