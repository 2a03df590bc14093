"""Object keys of WAL segments: ``<prefix>/<shard>/<created_ms:013d>-<broker_id>-<hex>.wal``,
and of tiered segments (:func:`parse_segment_key`, docs/design/tiered.md).

The creation time in the key is what the commit deadline is measured from
(design.md, "Deletion safety", step 1), so a key that does not parse is never
committed and never deleted.  ``shard`` is two lowercase hex digits that spread
keys over 256 listing prefixes; within a shard keys sort by creation time
because ``created_ms`` is zero-padded to 13 digits (good until year 2286).
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass

from partlog.kafka.crc32c import crc32c

# Longest object key, in UTF-8 bytes.  S3 allows 1024, but every store keys
# its file index by object key and LMDB keys are at most 511 bytes, so a WAL
# key must fit that (a prefix of up to ~470 bytes).  Checking it here, where
# keys are made and parsed, keeps a too-long key from reaching any store.
OBJECT_KEY_BYTES_MAX = 511
SHARD_COUNT = 256
# Every shard name, in listing order ("00" .. "ff").
ALL_SHARDS = tuple(f"{i:02x}" for i in range(SHARD_COUNT))

_NAME = re.compile(r"(?P<created>[0-9]{13})-(?P<broker>0|[1-9][0-9]{0,9})-(?P<rand>[0-9a-f]{1,64})\.wal")
_SHARD = re.compile(r"[0-9a-f]{2}")
# Both kinds of key carry created_ms in 13 digits.
CREATED_MS_MAX = 10**13 - 1
# A tiered segment's objects; the .log is the segment's unit and commit point.
LOG_SUFFIX = ".log"
SEGMENT_SUFFIXES = (LOG_SUFFIX, ".index", ".timeindex")
_UUID = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
_PARTITION = re.compile(r"0|[1-9][0-9]{0,9}")
_SEGMENT_NAME = re.compile(
    rf"(?P<start>[0-9]{{20}})-(?P<created>[0-9]{{13}})-(?P<id>{_UUID})(?P<suffix>\.log|\.index|\.timeindex)"
)


class WalKeyError(ValueError):
    """The object key is not a WAL key; the message names the key and why."""


@dataclass(frozen=True, slots=True)
class WalKey:
    prefix: str
    shard: str
    created_ms: int
    broker_id: int
    rand_hex: str

    @property
    def name(self) -> str:
        return f"{self.created_ms:013d}-{self.broker_id}-{self.rand_hex}.wal"

    def __str__(self) -> str:
        head = f"{self.prefix}/" if self.prefix else ""
        return f"{head}{self.shard}/{self.name}"


def shard_of(name: str) -> str:
    """The listing shard of a file name: a hash, so shards fill evenly."""
    return f"{crc32c(name.encode()) % SHARD_COUNT:02x}"


def make_wal_key(prefix: str, created_ms: int, broker_id: int, rand_hex: str) -> WalKey:
    if not 0 <= created_ms < 10**13:
        raise WalKeyError(f"created_ms {created_ms} does not fit 13 digits")
    if broker_id < 0:
        raise WalKeyError(f"broker_id {broker_id} is negative")
    name = f"{created_ms:013d}-{broker_id}-{rand_hex}.wal"
    key = WalKey(prefix.strip("/"), shard_of(name), created_ms, broker_id, rand_hex)
    return parse_wal_key(str(key))  # one validator for both directions


def parse_wal_key(key: str) -> WalKey:
    """Parse ``key`` or raise :class:`WalKeyError` saying what is wrong."""
    if len(key.encode()) > OBJECT_KEY_BYTES_MAX:
        raise WalKeyError(f"object key {key[:80]!r}... is longer than {OBJECT_KEY_BYTES_MAX} bytes")
    parts = key.split("/")
    if len(parts) < 2:
        raise WalKeyError(f"object key {key!r} has no <shard>/ component")
    *prefix_parts, shard, name = parts
    if any(p in ("", ".", "..") for p in prefix_parts):
        raise WalKeyError(f"object key {key!r} has an empty, '.' or '..' prefix component")
    if not _SHARD.fullmatch(shard):
        raise WalKeyError(f"object key {key!r}: shard {shard!r} is not two lowercase hex digits")
    m = _NAME.fullmatch(name)
    if m is None:
        raise WalKeyError(f"object key {key!r}: file name {name!r} is not <created_ms:013d>-<broker_id>-<hex>.wal")
    return WalKey("/".join(prefix_parts), shard, int(m["created"]), int(m["broker"]), m["rand"])


class SegmentKeyError(ValueError):
    """The object key is not a tiered segment's; the message names the key and why."""


def segment_shard(cluster_id: uuid.UUID | str, topic_id: uuid.UUID | str, partition: int | str) -> str:
    """The listing shard of a partition's segments: hashed from
    ``<cluster id>/<topic id>/<partition>``, so partitions spread evenly."""
    return shard_of(f"{cluster_id}/{topic_id}/{partition}")


@dataclass(frozen=True, slots=True)
class SegmentKey:
    """``<prefix>/<shard>/<cluster id>/<topic id>/<partition>/<start:020d>-<created_ms:013d>-<segment id><suffix>``,
    as ``partlog.tiered.remote_storage.ObjectStoreRsm`` writes it.  A Kafka
    ``.log`` has no footer, so the key names the cluster that wrote it
    (docs/design/tiered-gate.md)."""

    prefix: str
    shard: str
    cluster_id: uuid.UUID
    topic_id: uuid.UUID
    partition: int
    start_offset: int
    created_ms: int
    segment_id: uuid.UUID
    suffix: str

    @property
    def stem(self) -> str:
        """The key less its suffix: the same for the three objects of one copy attempt."""
        return str(self)[: -len(self.suffix)]

    def __str__(self) -> str:
        name = f"{self.start_offset:020d}-{self.created_ms:013d}-{self.segment_id}{self.suffix}"
        head = f"{self.prefix}/" if self.prefix else ""
        return f"{head}{self.shard}/{self.cluster_id}/{self.topic_id}/{self.partition}/{name}"


def parse_segment_key(key: str) -> SegmentKey:
    """Parse a tiered segment's key or raise :class:`SegmentKeyError`.

    Exactly the keys ``ObjectStoreRsm`` writes and nothing else: the ids
    (cluster, topic, segment) in canonical lowercase form, the partition an
    int32 without leading zeros, the shard the one hashed from
    ``<cluster id>/<topic id>/<partition>``, so the key is a function of
    what it parses to (``str`` gives it back).  A key without a cluster id
    (the layout before it) is refused: walmgr keeps it, never deletes it."""
    try:
        size = len(key.encode())
    except UnicodeEncodeError:  # lone surrogates: a listed name that is not UTF-8
        raise SegmentKeyError(f"object key {key[:80]!r} is not UTF-8") from None
    if size > OBJECT_KEY_BYTES_MAX:
        raise SegmentKeyError(f"object key {key[:80]!r}... is longer than {OBJECT_KEY_BYTES_MAX} bytes")
    parts = key.split("/")
    if len(parts) < 6:
        raise SegmentKeyError(f"object key {key!r} has no <prefix>/<shard>/<cluster id>/<topic id>/<partition>/")
    *prefix_parts, shard, cluster, topic, partition, name = parts
    if any(p in ("", ".", "..") for p in prefix_parts):
        raise SegmentKeyError(f"object key {key!r} has an empty, '.' or '..' prefix component")
    if not re.fullmatch(_UUID, cluster):
        raise SegmentKeyError(f"object key {key!r}: {cluster!r} is not a cluster id")
    if not re.fullmatch(_UUID, topic) or not _PARTITION.fullmatch(partition) or int(partition) > 2**31 - 1:
        raise SegmentKeyError(f"object key {key!r}: {topic!r}/{partition!r} is not <topic id>/<partition>")
    if shard != segment_shard(cluster, topic, partition):
        raise SegmentKeyError(f"object key {key!r}: shard {shard!r} is not the partition's")
    m = _SEGMENT_NAME.fullmatch(name)
    if m is None:
        raise SegmentKeyError(f"object key {key!r}: {name!r} is not <start:020d>-<created_ms:013d>-<id><suffix>")
    parsed = SegmentKey(
        "/".join(prefix_parts),
        shard,
        uuid.UUID(cluster),
        uuid.UUID(topic),
        int(partition),
        int(m["start"]),
        int(m["created"]),
        uuid.UUID(m["id"]),
        m["suffix"],
    )
    assert str(parsed) == key, (parsed, key)
    return parsed
