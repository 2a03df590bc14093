"""Remote storage of segments, shaped like KIP-405's ``RemoteStorageManager``.

* :class:`RemoteLogSegmentMetadata` is KIP-405's record of one uploaded
  segment (its id, partition, offsets, max timestamp, size and
  ``segmentLeaderEpochs``), with a compact msgpack encoding whose decoder
  fails closed (:class:`RemoteMetadataError`, bounded by ``METADATA_BYTES_MAX``).
* :class:`RemoteStorageManager` is the interface: copy a segment, fetch a
  byte range of its ``.log``, fetch an index, delete it (idempotently).
* :class:`ObjectStoreRsm` implements it over partlog's ``ObjectStore``, under
  its own key prefix (docs/design/tiered.md, "Key layout")::

      <prefix>/<shard>/<cluster id>/<topic id>/<partition>/<start offset:020d>-<created_ms:013d>-<segment id>.log
                                                                                                          .index
                                                                                                          .timeindex

  ``shard`` is two hex digits hashed from ``<cluster id>/<topic id>/<partition>``,
  so one partition's segments share one listing prefix, sorted by start
  offset.  The cluster id is the writer's: a Kafka ``.log`` has no footer to
  name it, and walmgr must never take a clone's "not referenced" for its
  own (docs/design/tiered-gate.md).
  ``created_ms`` is the copy attempt's time on the uploader's clock: what a
  leader's swap deadline and walmgr's age gate measure
  (:func:`partlog.wal.key.parse_segment_key` parses these keys).

Like ``ObjectStore``, the interface is synchronous; asyncio shells call it
through ``asyncio.to_thread``.  Store errors come out as KIP-405's
exceptions: :class:`RemoteResourceNotFoundError` when an object is missing,
:class:`RemoteStorageError` (with ``retriable``) for the rest.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

import msgpack

from partlog.kafka.batch_header import HEADER_SIZE, INT32_MAX
from partlog.kafka.records import TopicIdPartition
from partlog.tiered.segment import (
    NO_TIMESTAMP,
    SEGMENT_LEADER_EPOCHS_MAX,
    BuiltSegment,
    SegmentExtent,
)
from partlog.wal.key import CREATED_MS_MAX, LOG_SUFFIX, segment_shard
from partlog.wal.objectstore import ObjectNotFoundError, ObjectStore, ObjectStoreError, check_key

log = logging.getLogger(__name__)

INT64_MAX = 2**63 - 1
METADATA_VERSION = 0
# An encoded metadata record is ~60 bytes plus ~10 per leader epoch: 256 KiB
# holds SEGMENT_LEADER_EPOCHS_MAX epochs with room to spare, and bounds what
# a decoder reads.
METADATA_BYTES_MAX = 256 * 1024
TIERED_PREFIX_DEFAULT = "tiered"
METADATA_FIELDS = 10


class RemoteMetadataError(ValueError):
    """Not a valid :class:`RemoteLogSegmentMetadata` (or its encoding)."""


class RemoteStorageError(Exception):
    """KIP-405's RemoteStorageException: the remote store failed.
    ``retriable`` says whether the same call may succeed later."""

    def __init__(self, message: str, *, retriable: bool = False) -> None:
        super().__init__(message)
        self.retriable = retriable


class RemoteResourceNotFoundError(RemoteStorageError):
    """KIP-405's RemoteResourceNotFoundException: an object of the segment is missing."""


class IndexType(Enum):
    """KIP-405's IndexType, the two this package writes; the value is the file suffix."""

    OFFSET = ".index"
    TIMESTAMP = ".timeindex"


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentMetadata:
    """One segment in remote storage (KIP-405's RemoteLogSegmentMetadata)."""

    # A fresh id per copy attempt (KIP-405's RemoteLogSegmentId): a retried
    # upload never overwrites what an earlier attempt may have referenced.
    segment_id: uuid.UUID
    topic_id_partition: TopicIdPartition
    start_offset: int
    # Inclusive, as Kafka's.
    end_offset: int
    max_timestamp_ms: int
    segment_size_bytes: int
    # (leader epoch, its first offset in the segment), both strictly
    # ascending; never empty (Kafka refuses an empty map too).
    segment_leader_epochs: tuple[tuple[int, int], ...]
    # When the copy attempt started, on the uploader's clock (ms since the
    # epoch; KIP-405's eventTimestampMs).  It is in every key of the
    # segment: a leader refuses to swap a segment older than its swap
    # deadline, which is what lets walmgr delete orphans by age.
    created_ms: int

    def __post_init__(self) -> None:
        if not 0 <= self.created_ms <= CREATED_MS_MAX:
            raise RemoteMetadataError(f"created_ms {self.created_ms}: does not fit 13 digits")
        if not 0 <= self.topic_id_partition.partition <= INT32_MAX:
            raise RemoteMetadataError(f"partition {self.topic_id_partition.partition}: not in [0, {INT32_MAX}]")
        if not 0 <= self.start_offset <= self.end_offset <= INT64_MAX:
            raise RemoteMetadataError(f"offsets [{self.start_offset}, {self.end_offset}]: not a segment's")
        if self.end_offset - self.start_offset > INT32_MAX:
            raise RemoteMetadataError(f"offsets [{self.start_offset}, {self.end_offset}]: relative offsets overflow")
        if not NO_TIMESTAMP <= self.max_timestamp_ms <= INT64_MAX:
            raise RemoteMetadataError(f"max timestamp {self.max_timestamp_ms}: below {NO_TIMESTAMP}")
        if not HEADER_SIZE <= self.segment_size_bytes <= INT64_MAX:
            raise RemoteMetadataError(f"segment of {self.segment_size_bytes} bytes: shorter than one batch")
        epochs = self.segment_leader_epochs
        if not 1 <= len(epochs) <= SEGMENT_LEADER_EPOCHS_MAX:
            raise RemoteMetadataError(f"{len(epochs)} leader epochs: must be 1 to {SEGMENT_LEADER_EPOCHS_MAX}")
        prev_epoch, prev_offset = -1, self.start_offset - 1
        for epoch, offset in epochs:
            if not prev_epoch < epoch <= INT32_MAX or not prev_offset < offset <= self.end_offset:
                raise RemoteMetadataError(
                    f"leader epoch {epoch} from offset {offset}: not ascending within "
                    f"[{self.start_offset}, {self.end_offset}] after epoch {prev_epoch} from {prev_offset}"
                )
            prev_epoch, prev_offset = epoch, offset

    @classmethod
    def for_segment(
        cls, segment_id: uuid.UUID, topic_id_partition: TopicIdPartition, segment: BuiltSegment, created_ms: int
    ) -> RemoteLogSegmentMetadata:
        """The metadata of ``segment`` uploaded as ``segment_id`` at ``created_ms``."""
        return cls(
            segment_id=segment_id,
            topic_id_partition=topic_id_partition,
            start_offset=segment.base_offset,
            end_offset=segment.next_offset - 1,
            max_timestamp_ms=segment.max_timestamp_ms,
            segment_size_bytes=segment.log_size_bytes,
            segment_leader_epochs=segment.leader_epochs,
            created_ms=created_ms,
        )

    @property
    def extent(self) -> SegmentExtent:
        """What the segment's indexes are validated against."""
        return SegmentExtent(self.start_offset, self.end_offset + 1, self.segment_size_bytes)

    def encode(self) -> bytes:
        """``[version, segment id, topic id, partition, start, end, max
        timestamp, size, created_ms, [epoch, offset, epoch, offset, ...]]`` in msgpack,
        the ids as 16 raw bytes."""
        flat = [n for pair in self.segment_leader_epochs for n in pair]
        raw: bytes = msgpack.packb(
            [
                METADATA_VERSION,
                self.segment_id.bytes,
                self.topic_id_partition.topic_id.bytes,
                self.topic_id_partition.partition,
                self.start_offset,
                self.end_offset,
                self.max_timestamp_ms,
                self.segment_size_bytes,
                self.created_ms,
                flat,
            ],
            use_bin_type=True,
        )
        assert len(raw) <= METADATA_BYTES_MAX
        return raw

    @classmethod
    def decode(cls, raw: bytes) -> RemoteLogSegmentMetadata:
        """The metadata :meth:`encode` wrote; anything else is a
        :class:`RemoteMetadataError`, in time and memory bounded by
        ``METADATA_BYTES_MAX``."""
        if len(raw) > METADATA_BYTES_MAX:
            raise RemoteMetadataError(f"metadata of {len(raw)} bytes: larger than {METADATA_BYTES_MAX}")
        try:
            doc = msgpack.unpackb(
                raw,
                raw=False,
                strict_map_key=True,
                max_str_len=0,
                max_bin_len=16,
                max_array_len=2 * SEGMENT_LEADER_EPOCHS_MAX,
                max_map_len=0,
                max_ext_len=0,
            )
        except Exception as e:  # msgpack raises several unrelated types
            raise RemoteMetadataError(f"metadata is not msgpack of the expected shape: {e}") from None
        if not isinstance(doc, list) or len(doc) != METADATA_FIELDS:
            raise RemoteMetadataError(f"metadata is not a list of {METADATA_FIELDS} fields")
        version, segment_id, topic_id, *numbers, flat = doc
        if version != METADATA_VERSION or type(version) is not int:
            raise RemoteMetadataError(f"metadata version {version!r:.20}, this code reads {METADATA_VERSION}")
        if not (_is_uuid_bytes(segment_id) and _is_uuid_bytes(topic_id)):
            raise RemoteMetadataError("a segment or topic id is not 16 bytes")
        if not isinstance(flat, list) or len(flat) % 2:
            raise RemoteMetadataError("leader epochs are not a flat list of pairs")
        if not all(type(n) is int for n in (*numbers, *flat)):
            raise RemoteMetadataError("a numeric field is not an integer")
        partition, start, end, max_timestamp_ms, size, created_ms = numbers
        return cls(
            segment_id=uuid.UUID(bytes=segment_id),
            topic_id_partition=TopicIdPartition(uuid.UUID(bytes=topic_id), partition),
            start_offset=start,
            end_offset=end,
            max_timestamp_ms=max_timestamp_ms,
            segment_size_bytes=size,
            segment_leader_epochs=tuple(zip(flat[0::2], flat[1::2], strict=True)),
            created_ms=created_ms,
        )


def _is_uuid_bytes(value: object) -> bool:
    return isinstance(value, bytes) and len(value) == 16


class RemoteStorageManager(Protocol):
    """KIP-405's RemoteStorageManager, the part partlog needs."""

    def copy_log_segment_data(self, metadata: RemoteLogSegmentMetadata, segment: BuiltSegment) -> None:
        """Upload ``segment`` as ``metadata`` says; on return it is durable
        and complete.  A failed copy may leave parts behind (never a
        complete-looking segment): retry with a new segment id, and delete
        the failed attempt's."""
        ...

    def fetch_log_segment(self, metadata: RemoteLogSegmentMetadata, start_position: int, end_position: int) -> bytes:
        """Bytes ``[start_position, end_position]`` of the ``.log``, the end
        inclusive as KIP-405's; a range outside the segment is a ValueError."""
        ...

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes:
        """The whole index, unvalidated: the lookups validate it."""
        ...

    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Delete every object of the segment; deleting what is not there succeeds."""
        ...


class ObjectStoreRsm:
    """A :class:`RemoteStorageManager` over an ``ObjectStore`` (module doc)."""

    def __init__(self, store: ObjectStore, prefix: str = TIERED_PREFIX_DEFAULT, *, cluster_id: uuid.UUID) -> None:
        clean = prefix.strip("/")
        if not clean:
            # Segments need a fence of their own, apart from the WAL prefix.
            raise ValueError("the tiered key prefix must not be empty")
        check_key(f"{clean}/00")
        self.store = store
        self.prefix = clean
        self.cluster_id = cluster_id

    def partition_prefix(self, topic_id_partition: TopicIdPartition) -> str:
        """``<prefix>/<shard>/<cluster id>/<topic id>/<partition>/``: every key of the partition's segments."""
        tp, cluster = topic_id_partition, self.cluster_id
        shard = segment_shard(cluster, tp.topic_id, tp.partition)
        return f"{self.prefix}/{shard}/{cluster}/{tp.topic_id}/{tp.partition}/"

    def segment_key(self, metadata: RemoteLogSegmentMetadata, suffix: str) -> str:
        """The key of one of the segment's objects (``suffix``: ``.log``, or an IndexType's value)."""
        head = self.partition_prefix(metadata.topic_id_partition)
        return f"{head}{metadata.start_offset:020d}-{metadata.created_ms:013d}-{metadata.segment_id}{suffix}"

    def copy_log_segment_data(self, metadata: RemoteLogSegmentMetadata, segment: BuiltSegment) -> None:
        tp, created_ms = metadata.topic_id_partition, metadata.created_ms
        if metadata != RemoteLogSegmentMetadata.for_segment(metadata.segment_id, tp, segment, created_ms):
            raise ValueError(f"segment {metadata.segment_id}: the metadata does not describe the segment given")
        # The indexes first and the .log last: each PUT is atomic but the
        # three are not, so the .log is the commit point.  A segment whose
        # .log exists is complete, and a crash between PUTs leaves only
        # indexes, which nothing references (the metadata entry that makes a
        # segment readable is written after this returns) and which an
        # orphan sweep can delete by key.  Deletion runs in reverse.
        for suffix, data in (
            (IndexType.OFFSET.value, segment.offset_index),
            (IndexType.TIMESTAMP.value, segment.time_index),
            (LOG_SUFFIX, segment.log),
        ):
            key = self.segment_key(metadata, suffix)
            with _translated(key):
                self.store.put(key, data)
        log.debug(
            "segment copied key=%s offsets=%d..%d bytes=%d",
            self.segment_key(metadata, LOG_SUFFIX),
            metadata.start_offset,
            metadata.end_offset,
            metadata.segment_size_bytes,
        )

    def fetch_log_segment(self, metadata: RemoteLogSegmentMetadata, start_position: int, end_position: int) -> bytes:
        size = metadata.segment_size_bytes
        if not 0 <= start_position <= end_position < size:
            raise ValueError(f"segment {metadata.segment_id}: range [{start_position}, {end_position}] of {size} bytes")
        key = self.segment_key(metadata, LOG_SUFFIX)
        length = end_position - start_position + 1
        with _translated(key):
            data = self.store.get_range(key, start_position, length)
        if len(data) != length:
            # The object is shorter than its metadata says: corrupt for good.
            raise RemoteStorageError(f"{key}: read {len(data)} bytes at {start_position}, metadata says {length}")
        return data

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes:
        key = self.segment_key(metadata, index_type.value)
        with _translated(key):
            return self.store.get(key)

    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        # The .log first, alone: while any index is left, no .log claims the
        # segment complete (see copy_log_segment_data).
        self._delete([self.segment_key(metadata, LOG_SUFFIX)])
        self._delete([self.segment_key(metadata, t.value) for t in IndexType])
        log.debug("segment deleted key=%s", self.segment_key(metadata, LOG_SUFFIX))

    def _delete(self, keys: list[str]) -> None:
        with _translated(keys[0]):
            result = self.store.delete_many(keys)
        if result.errors:
            key, why = next(iter(result.errors.items()))
            raise RemoteStorageError(f"{key}: not deleted ({why})", retriable=True)


@contextmanager
def _translated(key: str) -> Iterator[None]:
    """Store errors as KIP-405's."""
    try:
        yield
    except ObjectNotFoundError as e:
        raise RemoteResourceNotFoundError(f"{key}: not found ({e})") from e
    except ObjectStoreError as e:
        # A range past the end (RangeNotSatisfiableError) is a .log shorter
        # than its metadata: not retriable, as the store says.
        raise RemoteStorageError(f"{key}: {e}", retriable=e.retriable) from e


__all__ = [
    "LOG_SUFFIX",
    "METADATA_BYTES_MAX",
    "TIERED_PREFIX_DEFAULT",
    "IndexType",
    "ObjectStoreRsm",
    "RemoteLogSegmentMetadata",
    "RemoteMetadataError",
    "RemoteResourceNotFoundError",
    "RemoteStorageError",
    "RemoteStorageManager",
]
