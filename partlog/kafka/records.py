"""Request and response records of the per-leader API.

These mirror KIP-1164's ``BatchCoordinator`` records field for field, in
snake_case (KIP-1164, "Batch Coordinator").  Where partlog adds a field
it comes last and has a default, so code written against the KIP reads the same.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from typing import NamedTuple

from partlog.kafka.batch_header import BatchHeader
from partlog.kafka.batch_header import TimestampType as TimestampType  # re-exported: it lived here
from partlog.kafka.errors import Errors


@dataclass(frozen=True, slots=True)
class TopicIdPartition:
    topic_id: uuid.UUID
    partition: int
    # UUID.__hash__ is Python code; partitions are dict keys on every commit,
    # so the hash is computed once.
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.topic_id.int, self.partition)))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        # Every dict hit with a key that is another instance calls this: the
        # generated one built two tuples and called UUID.__eq__ (Python code),
        # some 8% of a busy broker's time with 2,000 partitions of RF 3.
        if self is other:
            return True
        if not isinstance(other, TopicIdPartition):
            return NotImplemented
        return (
            self._hash == other._hash and self.partition == other.partition and self.topic_id.int == other.topic_id.int
        )

    def __str__(self) -> str:
        return f"{self.topic_id}-{self.partition}"


@dataclass(frozen=True, slots=True)
class CreateTopicAndPartitionsRequest:
    topic_id: uuid.UUID
    topic_name: str
    num_partitions: int
    # Kafka topic configs by their Kafka names ("retention.ms", ...); see
    # partlog.kafka.topic_config.  Not part of the hash so requests stay usable in sets.
    configs: Mapping[str, str | int] = field(default_factory=dict, hash=False, compare=False)


@dataclass(frozen=True, slots=True)
class CommitBatchRequest:
    """One batch of a WAL object, as the uploading broker saw it.

    ``header`` is the batch's first 61 bytes as uploaded (Kafka v2 format).  The
    leader validates the other fields against it and stores a patched copy.
    Build requests with :meth:`from_header` to keep the two consistent.
    """

    request_id: int
    topic_id_partition: TopicIdPartition
    byte_offset: int
    size: int
    base_offset: int
    last_offset: int
    batch_max_timestamp: int
    message_timestamp_type: TimestampType
    producer_id: int
    producer_epoch: int
    base_sequence: int
    last_sequence: int
    header: bytes = b""

    @classmethod
    def from_header(
        cls,
        request_id: int,
        topic_id_partition: TopicIdPartition,
        byte_offset: int,
        header: bytes,
    ) -> CommitBatchRequest:
        """The request for a batch whose first 61 bytes are ``header``.

        Raises :class:`partlog.kafka.batch_header.BatchHeaderError` if ``header`` is
        not a parseable v2 header.
        """

        h = BatchHeader.parse(header)
        return cls(
            request_id=request_id,
            topic_id_partition=topic_id_partition,
            byte_offset=byte_offset,
            size=h.size,
            base_offset=h.base_offset,
            last_offset=h.base_offset + h.last_offset_delta,
            batch_max_timestamp=h.max_timestamp,
            message_timestamp_type=h.timestamp_type,
            producer_id=h.producer_id,
            producer_epoch=h.producer_epoch,
            base_sequence=h.base_sequence,
            last_sequence=h.last_sequence,
            header=bytes(header[:61]),
        )


class CommitBatchResponse(NamedTuple):
    """The answer for one batch of a commit.  A named tuple, not a frozen
    dataclass: the store makes one per batch on the commit path, and a
    tuple costs 0.3 us where the dataclass cost 1.4 (a profile of the commit path)."""

    errors: Errors
    assigned_base_offset: int
    log_append_time: int
    log_start_offset: int
    is_duplicate: bool
    request: CommitBatchRequest


class IsolationLevel(IntEnum):
    """Kafka's fetch isolation: READ_COMMITTED stops at the last stable
    offset and is answered the aborted transactions of what it returns."""

    READ_UNCOMMITTED = 0
    READ_COMMITTED = 1


@dataclass(frozen=True, slots=True)
class FindBatchRequest:
    topic_id_partition: TopicIdPartition
    offset: int
    max_partition_fetch_bytes: int
    # partlog: Kafka's isolation_level of the fetch.
    isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    topic_id_partition: TopicIdPartition
    byte_offset: int
    byte_size: int
    base_offset: int
    last_offset: int
    log_append_timestamp: int
    batch_max_timestamp: int
    timestamp_type: TimestampType
    producer_id: int
    producer_epoch: int
    base_sequence: int
    last_sequence: int
    # partlog: the leader epoch the batch was appended in, and the stored,
    # patched 61-byte header that a fetch splices over the uploaded one.
    partition_leader_epoch: int = -1
    header: bytes = b""
    # partlog: the whole batch of an entry stored inline in the metadata log
    # (a transaction marker's control batch): there is no WAL object to read,
    # ``object_key`` is empty.
    inline: bytes = b""


@dataclass(frozen=True, slots=True)
class BatchInfo:
    batch_id: int
    object_key: str
    metadata: BatchMetadata


class AbortedTxn(NamedTuple):
    """An aborted transaction as Fetch answers it."""

    producer_id: int
    first_offset: int


@dataclass(frozen=True, slots=True)
class FindBatchResponse:
    errors: Errors
    batches: tuple[BatchInfo, ...]
    log_start_offset: int
    high_watermark: int
    # partlog: a human-readable reason for ``errors`` (e.g. where an entry
    # failed its CRC); None when there is nothing to add.
    error_message: str | None = None
    # partlog: Kafka's last stable offset; -1 with an error.
    last_stable_offset: int = -1
    # partlog: READ_COMMITTED only, the aborted transactions that overlap
    # the batches returned (Kafka's FetchResponse aborted_transactions).
    aborted: tuple[AbortedTxn, ...] = ()


@dataclass(frozen=True, slots=True)
class ListOffsetsRequest:
    topic_id_partition: TopicIdPartition
    timestamp: int
    # partlog: Kafka's isolation_level (LATEST answers the LSO with READ_COMMITTED).
    isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED

    EARLIEST_TIMESTAMP = -2
    LATEST_TIMESTAMP = -1
    MAX_TIMESTAMP = -3


@dataclass(frozen=True, slots=True)
class ListOffsetsResponse:
    errors: Errors
    topic_id_partition: TopicIdPartition
    timestamp: int
    offset: int


@dataclass(frozen=True, slots=True)
class TxnMarkerRequest:
    """One COMMIT or ABORT marker for one partition (Kafka's WriteTxnMarkers,
    one topic partition of one marker)."""

    topic_id_partition: TopicIdPartition
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    committed: bool  # True: COMMIT, False: ABORT


class TxnMarkerResponse(NamedTuple):
    error: Errors
    offset: int  # the marker's offset; -1 on error


@dataclass(frozen=True, slots=True)
class DeleteRecordsRequest:
    topic_id_partition: TopicIdPartition
    offset: int


@dataclass(frozen=True, slots=True)
class DeleteRecordsResponse:
    errors: Errors
    low_watermark: int


@dataclass(frozen=True, slots=True)
class FileUsage:
    """What one WAL object still holds for this store: live batches and bytes."""

    live_batches: int
    live_bytes: int


_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")


@dataclass(frozen=True, slots=True)
class ReplicatedEntry:
    """One metadata-log entry as a leader hands it to its followers.

    Everything a follower needs to store the entry exactly as the leader did,
    except what is local to each store (file and batch ids, the running max
    timestamp), which the follower assigns itself.
    """

    # The stored 61-byte header: base offset and partition leader epoch patched.
    header: bytes
    object_key: str
    byte_offset: int
    size: int
    log_append_time: int  # -1 unless LogAppendTime
    batch_max_timestamp: int  # as sent by the producer
    uploader_broker_id: int
    file_size: int

    @property
    def base_offset(self) -> int:
        return int(_I64.unpack_from(self.header, 0)[0])

    @property
    def last_offset(self) -> int:
        return self.base_offset + int(_I32.unpack_from(self.header, 23)[0])

    @property
    def partition_leader_epoch(self) -> int:
        return int(_I32.unpack_from(self.header, 12)[0])


@dataclass(frozen=True, slots=True)
class LogRead:
    """A leader's answer to a follower fetch (:meth:`partlog.store.MetadataStore.read_log`)."""

    entries: tuple[ReplicatedEntry, ...]
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    leader_epoch: int
