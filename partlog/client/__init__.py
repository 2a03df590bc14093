"""The client library: a small producer and consumer speaking the broker RPC
(``producer.py``, ``consumer.py``), a transactional producer
(``txn_producer.py``) over a shared pool of broker connections
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
    from partlog.client.txn_producer import TransactionalProducer, TxnTimeoutError
    from partlog.client.txn_state import ProducerFencedError, TransactionStateError

_EXPORTS = {
    "ClusterView": "partlog.client.connections",
    "Connections": "partlog.client.connections",
    "Consumer": "partlog.client.consumer",
    "CorruptRecordError": "partlog.client.consumer",
    "ProduceError": "partlog.client.producer",
    "Producer": "partlog.client.producer",
    "RecordMetadata": "partlog.client.producer",
    "TransactionalProducer": "partlog.client.txn_producer",
    "TxnTimeoutError": "partlog.client.txn_producer",
    "ProducerFencedError": "partlog.client.txn_state",
    "TransactionStateError": "partlog.client.txn_state",
}

__all__ = [
    "ClusterView",
    "Connections",
    "Consumer",
    "CorruptRecordError",
    "ProduceError",
    "Producer",
    "ProducerFencedError",
    "RecordMetadata",
    "TransactionStateError",
    "TransactionalProducer",
    "TxnTimeoutError",
]

__getattr__ = lazy_getattr(__name__, _EXPORTS, globals())
