"""Cluster metadata kept in etcd: the key layout (the ``etcd://`` URL is
:mod:`partlog.controller.etcd_url`'s, re-exported here), the
value codecs, and :class:`EtcdView`, the state a process rebuilds from a
range read plus the watch events after it.  Sans-IO: nothing here talks to
etcd (:mod:`partlog.controller.etcd_meta` does), so tests and the races'
property tests drive the same view as brokers.

Key layout under the cluster's prefix ``P`` (several clusters may share one
etcd under different prefixes; a key of ``P`` never begins another
cluster's prefix, because every key is ``P + "/" + ...``)::

    P/cluster_id              str(uuid): made once, by the first broker
    P/brokers/<id>            [az, host, port, kafka_port, lease]: under the
                              broker's session lease; its mod revision is
                              the broker epoch of that incarnation
    P/incarnations/<id>       the broker epoch the acting controller has
                              accepted (the older incarnation is fenced first)
    P/topics/<name>           [topic id (16 bytes), [[replicas] per partition]]:
                              CreatePartitions rewrites it with the same id
                              and more partitions, the existing ones as they were
    P/parts/<topic hex>/<p>   [leader, leader epoch, replicas, isr, partition epoch
                              (, adding, removing while reassigned)]: written at
                              the partition's first change; absent, the
                              partition is as created (first replica leads,
                              ISR = replicas, epochs 0); its replicas are its
                              own (a reassignment moves them off the topic's)
    P/deleted/<topic hex>     the deleted topic's name (kept for good)
    P/configs/<topic hex>     [[name, value]]: the config overrides of a topic
                              the controller configured (deleted with it)
    P/producer_ids            the first producer id of the next block
    P/election/<lease hex>    the acting controller's election (etcd's recipe:
                              the lowest create revision leads)

Every value is msgpack.  A value that does not decode or breaks an invariant
(another program's key, another version, a hostile writer) is refused by the
view: the key keeps its last good value, the refusal is counted and logged,
and nothing else changes: a bad key costs its own update, never the view.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import msgpack

from partlog.controller.cluster_meta import (
    KAFKA_LISTENERS_CHARS_MAX,
    NO_LEADER,
    BrokerInfo,
    MetadataError,
    PartitionInfo,
    TopicInfo,
    kafka_listener_ports,
)
from partlog.controller.etcd_url import (
    ETCD_ENDPOINTS_MAX,
    ETCD_PREFIX_DEFAULT,
    ETCD_SCHEME,
    EtcdTarget,
    parse_etcd_url,
)
from partlog.controller.model import MetadataSnapshot
from partlog.controller.reassignment import shape_error
from partlog.controller.rules import valid_topic_name
from partlog.controller.wire import dec_configs, dec_partition, enc_configs, enc_partition
from partlog.kafka.records import TopicIdPartition
from partlog.limits import AZ_CHARS_MAX, BROKER_ID_MAX, HOST_CHARS_MAX, PARTITIONS_PER_TOPIC_MAX, PORT_MAX
from partlog.rpc.wire import WireError

__all__ = [
    "ETCD_ENDPOINTS_MAX",
    "ETCD_PREFIX_DEFAULT",
    "ETCD_SCHEME",
    "ETCD_VALUE_BYTES_MAX",
    "EtcdTarget",
    "EtcdView",
    "Keys",
    "RegisteredBroker",
    "pack_value",
    "parse_etcd_url",
]

log = logging.getLogger(__name__)

# etcd refuses requests over 1.5 MiB (--max-request-bytes); a value larger
# than that cannot have come from etcd, and decoding one is not attempted.
ETCD_VALUE_BYTES_MAX = 3 * 1024 * 1024 // 2
# Replicas per partition: a replica list longer than the broker id space
# allows is hostile, and msgpack would happily decode millions of ints.
REPLICAS_MAX = 64


class Keys:
    """The keys of one cluster's prefix (see the module doc)."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.root = (prefix + "/").encode()
        self.cluster_id = self.root + b"cluster_id"
        self.brokers = self.root + b"brokers/"
        self.incarnations = self.root + b"incarnations/"
        self.topics = self.root + b"topics/"
        self.parts = self.root + b"parts/"
        self.deleted = self.root + b"deleted/"
        self.configs = self.root + b"configs/"
        self.producer_ids = self.root + b"producer_ids"
        self.election = self.root + b"election/"

    def broker(self, broker_id: int) -> bytes:
        return self.brokers + str(broker_id).encode()

    def incarnation(self, broker_id: int) -> bytes:
        return self.incarnations + str(broker_id).encode()

    def topic(self, name: str) -> bytes:
        return self.topics + name.encode()

    def part(self, tp: TopicIdPartition) -> bytes:
        return self.parts + f"{tp.topic_id.hex}/{tp.partition}".encode()

    def parts_of(self, topic_id: uuid.UUID) -> bytes:
        return self.parts + f"{topic_id.hex}/".encode()

    def deleted_topic(self, topic_id: uuid.UUID) -> bytes:
        return self.deleted + topic_id.hex.encode()

    def topic_configs(self, topic_id: uuid.UUID) -> bytes:
        return self.configs + topic_id.hex.encode()

    def candidate(self, lease_id: int) -> bytes:
        return self.election + f"{lease_id:016x}".encode()


# ------------------------------------------------------------------ codecs


def pack_value(v: Any) -> bytes:
    """A value as every key of the layout stores it (msgpack)."""
    out = msgpack.packb(v)
    assert isinstance(out, bytes)
    return out


def _unpack(value: bytes, what: str) -> Any:
    if len(value) > ETCD_VALUE_BYTES_MAX:
        raise MetadataError(f"{what}: {len(value)} bytes, more than etcd stores")
    try:
        return msgpack.unpackb(value, raw=False, strict_map_key=True)
    except (ValueError, TypeError, msgpack.UnpackException) as e:
        raise MetadataError(f"{what}: not msgpack: {e}") from None


def _int(v: Any, what: str, low: int, high: int) -> int:
    if type(v) is not int or not low <= v <= high:
        raise MetadataError(f"{what}: {v!r:.40} is not an integer in [{low}, {high}]")
    return v


def _str(v: Any, what: str, chars_max: int) -> str:
    if not isinstance(v, str) or not 0 < len(v) <= chars_max:
        raise MetadataError(f"{what}: {v!r:.40} is not a string of 1 to {chars_max} characters")
    return v


def _list(v: Any, what: str, n: int | None = None, most: int | None = None) -> list[Any]:
    if not isinstance(v, list) or (n is not None and len(v) != n) or (most is not None and len(v) > most):
        raise MetadataError(f"{what}: {v!r:.40} is not a list{'' if n is None else f' of {n}'}")
    return v


def _replicas(v: Any, what: str) -> tuple[int, ...]:
    reps = tuple(_int(r, f"{what}[]", 0, BROKER_ID_MAX) for r in _list(v, what, most=REPLICAS_MAX))
    if not reps or len(set(reps)) != len(reps):
        raise MetadataError(f"{what}: {list(reps)} is empty or names a broker twice")
    return reps


def enc_broker(b: BrokerInfo, lease_id: int, unclean_shutdown: bool = False) -> bytes:
    # The listeners' names only when the broker has them (six items); KIP-966's
    # unclean shutdown as a seventh (then the listeners always), which an older
    # view refuses: upgrade every broker first (docs/design/elr.md).
    extra = [b.kafka_listeners, True] if unclean_shutdown else [b.kafka_listeners] if b.kafka_listeners else []
    return pack_value([b.az, b.host, b.port, b.kafka_port, lease_id, *extra])


def broker_unclean(value: bytes) -> bool:
    """Whether a broker's value (:func:`enc_broker`) says its store shut down uncleanly."""
    items = _unpack(value, "broker")
    return isinstance(items, list) and len(items) == 7 and items[6] is True


def dec_broker(broker_id: int, value: bytes) -> tuple[BrokerInfo, int]:
    what = f"broker {broker_id}"
    items = _unpack(value, what)
    if isinstance(items, list) and len(items) == 7 and isinstance(items[6], bool):
        items.pop()  # the unclean shutdown (broker_unclean)
        if items[5] == "":
            items.pop()  # no listeners' names
    if isinstance(items, list) and len(items) == 6:
        listeners = _str(items.pop(), f"{what}.kafka_listeners", KAFKA_LISTENERS_CHARS_MAX)
        try:
            kafka_listener_ports(listeners)
        except ValueError as e:
            raise MetadataError(f"{what}: {e}") from None
    else:
        listeners = ""
    az, host, port, kafka_port, lease = _list(items, what, 5)
    info = BrokerInfo(
        broker_id,
        _str(az, f"{what}.az", AZ_CHARS_MAX),
        _str(host, f"{what}.host", HOST_CHARS_MAX),
        _int(port, f"{what}.port", 1, PORT_MAX),
        _int(kafka_port, f"{what}.kafka_port", 0, PORT_MAX),
        listeners,
    )
    return info, _int(lease, f"{what}.lease", 0, (1 << 63) - 1)


def enc_topic(topic_id: uuid.UUID, replicas: Iterable[tuple[int, ...]]) -> bytes:
    return pack_value([topic_id.bytes, [list(r) for r in replicas]])


def dec_topic(name: str, value: bytes) -> tuple[uuid.UUID, tuple[tuple[int, ...], ...]]:
    what = f"topic {name!r:.60}"
    tid, assignment = _list(_unpack(value, what), what, 2)
    if not isinstance(tid, bytes) or len(tid) != 16:
        raise MetadataError(f"{what}: topic id {tid!r:.40} is not 16 bytes")
    parts = _list(assignment, f"{what}.partitions", most=PARTITIONS_PER_TOPIC_MAX)
    if not parts:
        raise MetadataError(f"{what}: no partitions")
    return uuid.UUID(bytes=tid), tuple(_replicas(r, f"{what}.partitions[{i}]") for i, r in enumerate(parts))


def enc_topic_configs(configs: tuple[tuple[str, str], ...]) -> bytes:
    return pack_value(enc_configs(configs))


def dec_topic_configs(what: str, value: bytes) -> tuple[tuple[str, str], ...]:
    try:
        return dec_configs(_unpack(value, what), what)
    except WireError as e:
        raise MetadataError(str(e)) from None


def enc_part(p: PartitionInfo) -> bytes:
    return pack_value(enc_partition(p))


def dec_part(what: str, value: bytes) -> PartitionInfo:
    """A partition's state, checked against the invariants every committed
    state keeps.  Its replicas are its own: a reassignment moves them away
    from the topic key's, which stay as created."""
    try:
        p = dec_partition(_unpack(value, what), what)
    except WireError as e:
        raise MetadataError(str(e)) from None
    for name, ids in (("replicas", p.replicas), ("adding", p.adding), ("removing", p.removing), ("elr", p.elr)):
        if len(ids) > REPLICAS_MAX or not all(0 <= r <= BROKER_ID_MAX for r in ids):
            raise MetadataError(f"{what}: {name} {list(ids)[:REPLICAS_MAX]} too many or not broker ids")
    why = shape_error(p)
    if why is not None:
        raise MetadataError(f"{what}: {why}")
    # An empty ISR only offline (an unclean shutdown's last member gone; an older view refuses it).
    if (not p.isr and p.leader != NO_LEADER) or p.isr != tuple(r for r in p.replicas if r in p.isr):
        raise MetadataError(f"{what}: isr {list(p.isr)} is not a subset of the replicas in their order")
    if p.elr != tuple(r for r in p.replicas if r in p.elr and r not in p.isr):
        raise MetadataError(f"{what}: elr {list(p.elr)} is not out of the isr, within the replicas in their order")
    if p.leader != NO_LEADER and p.leader not in p.isr:
        raise MetadataError(f"{what}: leader {p.leader} is not in the isr {list(p.isr)}")
    if not 0 <= p.leader_epoch <= p.partition_epoch < 1 << 31:
        raise MetadataError(f"{what}: epochs {p.leader_epoch}/{p.partition_epoch} out of order or range")
    return p


def dec_uuid(value: bytes, what: str) -> uuid.UUID:
    try:
        return uuid.UUID(value.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        raise MetadataError(f"{what}: {value!r:.60} is not a UUID") from None


def dec_counter(value: bytes, what: str) -> int:
    # Up to 2^63: the counter after the very last block.
    return _int(_unpack(value, what), what, 0, 1 << 63)


def _canonical_int(text: str, high: int) -> int | None:
    """``text`` as we write integers in keys (ASCII digits, no leading
    zero), at most ``high``; None otherwise: two spellings of one partition
    or broker must never both be taken for it."""
    if not 0 < len(text) <= len(str(high)) or not text.isascii() or not text.isdigit():
        return None
    n = int(text)
    return n if str(n) == text and n <= high else None


def _canonical_topic_id(text: str) -> uuid.UUID | None:
    """A topic id spelled as ``uuid.hex`` (32 lowercase hex digits), else None."""
    try:
        tid = uuid.UUID(hex=text)
    except ValueError:
        return None
    return tid if tid.hex == text else None


# -------------------------------------------------------------------- view


@dataclass(frozen=True, slots=True)
class RegisteredBroker:
    info: BrokerInfo
    epoch: int  # the mod revision of its key: one per incarnation
    lease: int
    unclean_shutdown: bool = False  # KIP-966: its store may have lost acknowledged entries


@dataclass(frozen=True, slots=True)
class _Topic:
    topic_id: uuid.UUID
    name: str
    revision: int  # the create revision of its key: fences a re-created name
    replicas: tuple[tuple[int, ...], ...]
    modified: int  # the mod revision of its key: fences a concurrent CreatePartitions


@dataclass(frozen=True, slots=True)
class KV:
    """One key's state as etcd reports it (a range read or a watch event);
    ``value`` None for a deletion."""

    key: bytes
    value: bytes | None
    create_revision: int
    mod_revision: int


class EtcdView:
    """A cluster's metadata as of ``revision``: :meth:`load` a range read of
    the prefix, then :meth:`apply` every watch event after it."""

    def __init__(self, keys: Keys) -> None:
        self.keys = keys
        self.revision = 0
        self.cluster_id: uuid.UUID | None = None
        self.brokers: dict[int, RegisteredBroker] = {}
        self.incarnations: dict[int, int] = {}
        self._topics: dict[str, _Topic] = {}
        self._by_id: dict[uuid.UUID, _Topic] = {}
        # The same by ``topic_id.hex``, the spelling partition keys use: a
        # failover brings one event per partition to every broker's view.
        self._by_hex: dict[str, _Topic] = {}
        # Partitions written since creation, by topic id and index:
        # (state, mod revision).
        self._parts: dict[uuid.UUID, dict[int, tuple[PartitionInfo, int]]] = {}
        # Per topic, built on demand: the partitions as created, their
        # TopicIdPartitions, every partition's state now (kept up to date
        # in place), and the topic as it is now (dropped at each change of
        # one of its partitions).  A change of one partition rebuilds its
        # topic only, by one tuple copy: failing over thousands of
        # partitions adopts the view once per burst of events, and a
        # per-partition rebuild of every topic made that the bottleneck.
        self._created: dict[uuid.UUID, tuple[PartitionInfo, ...]] = {}
        self._tps: dict[uuid.UUID, tuple[TopicIdPartition, ...]] = {}
        self._current: dict[uuid.UUID, list[PartitionInfo]] = {}
        self._infos: dict[uuid.UUID, TopicInfo] = {}
        self.deleted: dict[uuid.UUID, str] = {}
        # Configured topics' overrides, by topic id: (overrides, mod revision).
        self._configs: dict[uuid.UUID, tuple[tuple[tuple[str, str], ...], int]] = {}
        self.producer_ids_next = 0
        # Election candidates: key -> (create revision, value).
        self.candidates: dict[bytes, int] = {}
        # Keys refused (undecodable or breaking an invariant), for metrics.
        self.refused = 0
        # Set when the cluster id changes under the view (see apply).
        self.frozen = False
        self._snapshot: MetadataSnapshot | None = None

    def load(self, kvs: Iterable[KV], revision: int) -> None:
        """Replace everything by a range read of the prefix at ``revision``.

        What must never go back survives a reload: the cluster id, the
        deleted topics, the producer-id counter's floor, and a frozen view
        stays frozen.  A read older than this view (etcd restored from a
        backup) is refused whole."""
        if revision < self.revision:
            raise MetadataError(
                f"etcd answered revision {revision}, older than {self.revision} already seen: "
                "restored from a backup? Refusing to go back"
            )
        keep = (self.cluster_id, dict(self.deleted), self.producer_ids_next, self.frozen, self.refused)
        self.__init__(self.keys)  # type: ignore[misc]
        self.cluster_id, self.deleted, self.producer_ids_next, self.frozen, self.refused = keep
        # Partitions after their topics ("parts/" sorts before "topics/"),
        # deleted records before topics (a re-used id is refused).
        order = (self.keys.cluster_id, self.keys.deleted, self.keys.topics, self.keys.parts)
        for kv in sorted(kvs, key=lambda kv: next((i for i, p in enumerate(order) if kv.key.startswith(p)), 0)):
            self.apply(kv)
        self.revision = revision

    def apply(self, kv: KV) -> None:
        """One key changed (or was read).  A refused value leaves that key
        as it was; a key this layout does not know is ignored.  Once the
        cluster id changes under it, the view is frozen: it applies nothing
        more (another cluster's brokers and topics must never be adopted)."""
        self.revision = max(self.revision, kv.mod_revision)
        self._snapshot = None
        if self.frozen:
            self.refused += 1
            return
        try:
            self._apply(kv)
        except (MetadataError, ValueError, TypeError, OverflowError) as e:
            self.refused += 1
            log.error("etcd %s: refused: %s", kv.key[:200].decode(errors="replace"), e)

    def _apply(self, kv: KV) -> None:
        k, v, rev = kv.key, kv.value, kv.mod_revision
        keys = self.keys
        if k == keys.cluster_id:
            # Made once and never changed: a change is another cluster's
            # doing (or a wiped prefix), and nothing after it is followed.
            cid = None if v is None else dec_uuid(v, "cluster_id")
            if self.cluster_id is not None and cid != self.cluster_id:
                self.frozen = True
                raise MetadataError(f"cluster_id changed from {self.cluster_id} to {cid}: this view is frozen")
            self.cluster_id = cid
        elif k.startswith(keys.brokers):
            bid = self._id(k, keys.brokers)
            if v is None:
                self.brokers.pop(bid, None)
            else:
                info, lease = dec_broker(bid, v)
                self.brokers[bid] = RegisteredBroker(info, rev, lease, broker_unclean(v))
        elif k.startswith(keys.incarnations):
            bid = self._id(k, keys.incarnations)
            if v is None:
                self.incarnations.pop(bid, None)
            else:
                self.incarnations[bid] = dec_counter(v, f"incarnation of broker {bid}")
        elif k.startswith(keys.topics):
            name = k[len(keys.topics) :].decode(errors="replace")
            if not valid_topic_name(name):
                raise MetadataError(f"topic name {name!r:.60} is not one Kafka allows")
            # Decoded before anything changes: a refused value keeps the topic.
            created = None if v is None else dec_topic(name, v)
            old = self._topics.get(name)
            other = created is not None and created[0] in self._by_id and (old is None or old.topic_id != created[0])
            if created is not None and (created[0] in self.deleted or other):
                raise MetadataError(f"topic {name!r}: id {created[0]} is another topic's or a deleted one's")
            if old is not None and created is not None and old.topic_id == created[0]:
                self._grown(old, created[1], rev)
                return
            if old is not None:
                del self._topics[name], self._by_id[old.topic_id], self._by_hex[old.topic_id.hex]
                for cache in (self._parts, self._created, self._tps, self._current, self._infos):
                    cache.pop(old.topic_id, None)
            if created is not None:
                nt = _Topic(created[0], name, kv.create_revision, created[1], rev)
                self._topics[name] = self._by_id[nt.topic_id] = self._by_hex[nt.topic_id.hex] = nt
        elif k.startswith(keys.parts):
            tid_hex, _, index = k[len(keys.parts) :].decode(errors="replace").partition("/")
            # Only the canonical spelling (uuid.hex) of a live topic's id is found.
            owner = self._by_hex.get(tid_hex)
            tid = None if owner is None else owner.topic_id
            n = _canonical_int(index, PARTITIONS_PER_TOPIC_MAX)
            if tid is None or owner is None or n is None or n >= len(owner.replicas):
                if v is None:
                    return  # a deleted topic's partitions going with it
                raise MetadataError(f"partition {tid_hex[:40]}/{index[:20]} of no live topic")
            if v is None:
                # Only a topic's deletion removes its partitions: a lone
                # deletion would put it back as created (every replica in
                # the ISR, epochs 0) and let a lagging replica lead.
                raise MetadataError(f"partition {owner.name}/{n} deleted while its topic lives: keeping it")
            else:
                what = f"partition {owner.name}/{n}"
                self._written(tid, n, dec_part(what, v), rev)
        elif k.startswith(keys.deleted):
            if v is None:
                raise MetadataError("a deleted topic's record deleted: deletions are final, keeping it")
            deleted_id = _canonical_topic_id(k[len(keys.deleted) :].decode(errors="replace"))
            if deleted_id is None:
                raise MetadataError(f"deleted topic key {k[-40:]!r}")
            tid = deleted_id
            name = _unpack(v, "deleted topic name")
            self.deleted[tid] = _str(name, "deleted topic name", 255)
        elif k.startswith(keys.configs):
            tid = _canonical_topic_id(k[len(keys.configs) :].decode(errors="replace"))
            if tid is None:
                raise MetadataError(f"topic configs key {k[-40:]!r}")
            if v is None:
                self._configs.pop(tid, None)
            else:
                self._configs[tid] = (dec_topic_configs(f"configs of topic {tid}", v), rev)
            self._infos.pop(tid, None)
        elif k == keys.producer_ids:
            # Only grows: a deleted or lowered counter would hand ids out twice.
            if v is None:
                raise MetadataError("producer_ids deleted: keeping its last value as the floor")
            value = dec_counter(v, "producer_ids")
            if value < self.producer_ids_next:
                raise MetadataError(f"producer_ids went down from {self.producer_ids_next} to {value}: keeping it")
            self.producer_ids_next = value
        elif k.startswith(keys.election):
            if v is None:
                self.candidates.pop(k, None)
            else:
                self.candidates[k] = kv.create_revision

    def _grown(self, old: _Topic, replicas: tuple[tuple[int, ...], ...], revision: int) -> None:
        """Topic ``old`` rewritten with the same id: CreatePartitions added
        partitions.  Its partitions keep their states (dropping them would
        put each back as created and let a lagging replica lead); anything
        but the same partitions and more is refused."""
        n = len(old.replicas)
        if len(replicas) < n or replicas[:n] != old.replicas:
            raise MetadataError(f"topic {old.name!r}: rewritten with other partitions than it has: keeping it")
        nt = _Topic(old.topic_id, old.name, old.revision, replicas, revision)
        self._topics[nt.name] = self._by_id[nt.topic_id] = self._by_hex[nt.topic_id.hex] = nt
        for cache in (self._created, self._tps, self._current, self._infos):
            cache.pop(nt.topic_id, None)

    @staticmethod
    def _id(key: bytes, prefix: bytes) -> int:
        text = key[len(prefix) :].decode(errors="replace")
        n = _canonical_int(text, BROKER_ID_MAX)
        if n is None:
            raise MetadataError(f"broker id {text[:20]!r} is not one Kafka allows, spelled as we write it")
        return n

    # ---------------------------------------------------------- reading

    def topic_names(self) -> list[str]:
        return sorted(self._topics)

    def topic_of(self, name: str) -> tuple[uuid.UUID, int] | None:
        """(topic id, create revision of its key) for a live topic."""
        t = self._topics.get(name)
        return None if t is None else (t.topic_id, t.revision)

    def topic_modified(self, name: str) -> int | None:
        """The mod revision of a live topic's key (it moves when it grows)."""
        t = self._topics.get(name)
        return None if t is None else t.modified

    def created_replicas(self, name: str) -> tuple[tuple[int, ...], ...] | None:
        """A live topic's replicas as its key holds them (as created or grown;
        a reassignment moves a partition's own, in its key, not these)."""
        t = self._topics.get(name)
        return None if t is None else t.replicas

    def topic_revision(self, topic_id: uuid.UUID) -> tuple[str, int] | None:
        t = self._by_id.get(topic_id)
        return None if t is None else (t.name, t.revision)

    def partition_count(self) -> int:
        return sum(len(t.replicas) for t in self._topics.values())

    def partition(self, tp: TopicIdPartition) -> PartitionInfo | None:
        got = self._parts.get(tp.topic_id, {}).get(tp.partition)
        if got is not None:
            return got[0]
        t = self._by_id.get(tp.topic_id)
        if t is None or not 0 <= tp.partition < len(t.replicas):
            return None
        return self._created_of(t)[tp.partition]

    def configs_of(self, topic_id: uuid.UUID) -> tuple[tuple[tuple[str, str], ...] | None, int]:
        """A topic's overrides (None: never configured) and the mod revision
        of their key (0: none)."""
        got = self._configs.get(topic_id)
        return (None, 0) if got is None else got

    def part_revision(self, tp: TopicIdPartition) -> int:
        """The mod revision of the partition's key (0: never written)."""
        got = self._parts.get(tp.topic_id, {}).get(tp.partition)
        return 0 if got is None else got[1]

    def set_partition(self, tp: TopicIdPartition, p: PartitionInfo, revision: int) -> None:
        """A change this process committed (the watch brings it too)."""
        if tp.topic_id in self._by_id and revision > self.part_revision(tp):
            self._written(tp.topic_id, tp.partition, p, revision)
            self._snapshot = None

    def _written(self, tid: uuid.UUID, i: int, p: PartitionInfo, revision: int) -> None:
        self._parts.setdefault(tid, {})[i] = (p, revision)
        current = self._current.get(tid)
        if current is not None:
            current[i] = p
        self._infos.pop(tid, None)

    def partitions(self) -> Iterator[tuple[TopicIdPartition, PartitionInfo]]:
        for t in self._topics.values():
            tps = self._tps.get(t.topic_id)
            if tps is None:
                tps = self._tps[t.topic_id] = tuple(TopicIdPartition(t.topic_id, i) for i in range(len(t.replicas)))
            yield from zip(tps, self._info(t).partitions, strict=True)

    def _created_of(self, t: _Topic) -> tuple[PartitionInfo, ...]:
        got = self._created.get(t.topic_id)
        if got is None:
            got = self._created[t.topic_id] = tuple(PartitionInfo(r[0], 0, r, r, 0) for r in t.replicas)
        return got

    def _info(self, t: _Topic) -> TopicInfo:
        """The topic as it is now: as created, with what was written since."""
        got = self._infos.get(t.topic_id)
        if got is None:
            current = self._current.get(t.topic_id)
            if current is None:
                current = self._current[t.topic_id] = list(self._created_of(t))
                for i, (p, _) in self._parts.get(t.topic_id, {}).items():
                    current[i] = p
            configs = self._configs.get(t.topic_id)
            got = self._infos[t.topic_id] = TopicInfo(
                t.topic_id, t.name, tuple(current), None if configs is None else configs[0]
            )
        return got

    def leader_candidate(self) -> bytes | None:
        """The election key that leads (the lowest create revision)."""
        return min(self.candidates, key=self.candidates.__getitem__) if self.candidates else None

    def accepted(self, broker_id: int) -> bool:
        """Alive for the controller's decisions: registered, and this
        incarnation accepted (an older one was fenced first)."""
        b = self.brokers.get(broker_id)
        return b is not None and self.incarnations.get(broker_id) == b.epoch

    def snapshot(self) -> MetadataSnapshot:
        """The view as the embedded controller's snapshot (alive brokers by
        id, topics by name); ``version`` is the etcd revision."""
        if self._snapshot is None:
            brokers = [self.brokers[b].info for b in sorted(self.brokers)]
            topics = [self._info(self._topics[name]) for name in sorted(self._topics)]
            self._snapshot = MetadataSnapshot(self.revision, brokers, topics, self.cluster_id, frozenset(self.deleted))
        return self._snapshot
