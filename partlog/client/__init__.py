"""The client library: a small producer and consumer speaking the broker RPC
(``producer.py``, ``consumer.py``) over a shared pool of broker connections
(``connections.py``).  Kafka clients talk to the brokers' Kafka front end
instead (``partlog.kafka_front``)."""

# The names below are imported on first use (partlog.lazy_exports).

from __future__ import annotations

from typing import TYPE_CHECKING

from partlog.lazy_exports import lazy_getattr

if TYPE_CHECKING:
    from partlog.client.connections import ClusterView, Connections
    from partlog.client.consumer import Consumer, CorruptRecordError
    from partlog.client.producer import ProduceError, Producer, RecordMetadata

_EXPORTS = {
    "ClusterView": "partlog.client.connections",
    "Connections": "partlog.client.connections",
    "Consumer": "partlog.client.consumer",
    "CorruptRecordError": "partlog.client.consumer",
    "ProduceError": "partlog.client.producer",
    "Producer": "partlog.client.producer",
    "RecordMetadata": "partlog.client.producer",
}

__all__ = [
    "ClusterView",
    "Connections",
    "Consumer",
    "CorruptRecordError",
    "ProduceError",
    "Producer",
    "RecordMetadata",
]

__getattr__ = lazy_getattr(__name__, _EXPORTS, globals())
