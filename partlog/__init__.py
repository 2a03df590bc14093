"""partlog: coordinator-free diskless Kafka storage (per-partition metadata logs)."""

from partlog.kafka.errors import Errors
from partlog.kafka.records import (
    AbortedTxn,
    BatchInfo,
    BatchMetadata,
    CommitBatchRequest,
    CommitBatchResponse,
    CreateTopicAndPartitionsRequest,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    FileUsage,
    FindBatchRequest,
    FindBatchResponse,
    IsolationLevel,
    ListOffsetsRequest,
    ListOffsetsResponse,
    TimestampType,
    TopicIdPartition,
    TxnMarkerRequest,
    TxnMarkerResponse,
)
from partlog.kafka.topic_config import TopicConfig, TopicConfigError
from partlog.store import (
    CorruptEntryError,
    LogRead,
    MetadataStore,
    OffsetOutOfRangeError,
    ReplicatedEntry,
    ReplicationError,
    StoreError,
)

__version__ = "0.1.0"

__all__ = [
    "AbortedTxn",
    "BatchInfo",
    "BatchMetadata",
    "CommitBatchRequest",
    "CommitBatchResponse",
    "CorruptEntryError",
    "CreateTopicAndPartitionsRequest",
    "DeleteRecordsRequest",
    "DeleteRecordsResponse",
    "Errors",
    "FileUsage",
    "FindBatchRequest",
    "FindBatchResponse",
    "IsolationLevel",
    "ListOffsetsRequest",
    "ListOffsetsResponse",
    "LogRead",
    "MetadataStore",
    "OffsetOutOfRangeError",
    "ReplicatedEntry",
    "ReplicationError",
    "StoreError",
    "TimestampType",
    "TopicConfig",
    "TopicConfigError",
    "TopicIdPartition",
    "TxnMarkerRequest",
    "TxnMarkerResponse",
    "__version__",
]
