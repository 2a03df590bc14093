"""Which partition of an internal topic a coordinator key belongs to.

Kafka places a group id in ``__consumer_offsets`` and a transactional id in
``__transaction_state`` by ``Utils.abs(key.hashCode()) % partitions``; the
leader of that partition is the key's coordinator.  The brokers' Kafka front
end and partlog's own client (which finds a transaction coordinator from
metadata) must agree, so the rule lives here, below both.
"""

from __future__ import annotations


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode`` (UTF-16 code units, int32 arithmetic),
    so that a key maps to the partition Kafka would pick."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(key: str, partitions: int) -> int:
    """The partition of ``key`` among ``partitions``."""
    assert partitions > 0
    # Kafka's Utils.abs: Integer.MIN_VALUE maps to 0.
    h = java_string_hash(key)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


__all__ = ["java_string_hash", "partition_for"]
