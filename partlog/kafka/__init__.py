"""Kafka's formats and rules, no I/O: records, errors, batch header, CRC-32C, topic config, producer state."""

# The names below are imported on first use (partlog.lazy_exports).

from __future__ import annotations

from typing import TYPE_CHECKING

from partlog.lazy_exports import lazy_getattr

if TYPE_CHECKING:
    from partlog.kafka.batch_header import BatchHeader, BatchHeaderError, TimestampType
    from partlog.kafka.errors import Errors
    from partlog.kafka.records import CommitBatchRequest, CommitBatchResponse, TopicIdPartition
    from partlog.kafka.topic_config import TopicConfig, TopicConfigError

_EXPORTS = {
    "BatchHeader": "partlog.kafka.batch_header",
    "BatchHeaderError": "partlog.kafka.batch_header",
    "CommitBatchRequest": "partlog.kafka.records",
    "CommitBatchResponse": "partlog.kafka.records",
    "Errors": "partlog.kafka.errors",
    "TimestampType": "partlog.kafka.batch_header",
    "TopicConfig": "partlog.kafka.topic_config",
    "TopicConfigError": "partlog.kafka.topic_config",
    "TopicIdPartition": "partlog.kafka.records",
}

__all__ = [
    "BatchHeader",
    "BatchHeaderError",
    "CommitBatchRequest",
    "CommitBatchResponse",
    "Errors",
    "TimestampType",
    "TopicConfig",
    "TopicConfigError",
    "TopicIdPartition",
]

__getattr__ = lazy_getattr(__name__, _EXPORTS, globals())
