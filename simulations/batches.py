"""Kafka v2 record batches for the simulated producers.

Building a batch with kafka-python costs far more than the rest of a
produce; a simulation reuses a few templates per batch size instead (the
pipeline and the store only read headers, lengths and CRCs, so identical
bytes are fine for a non-idempotent producer, producer id -1).
"""

from __future__ import annotations

from partlog.kafka.record_batch import build_record_batch

# A one-record v2 batch of an empty-keyed record: its bytes beyond the value.
_OVERHEAD_PROBE_BYTES = 100


class BatchTemplates:
    """One valid batch per requested size, built once."""

    def __init__(self, timestamp_ms: int) -> None:
        self._timestamp_ms = timestamp_ms
        self._by_size: dict[int, bytes] = {}

    def get(self, batch_bytes: int) -> bytes:
        """A batch of exactly ``batch_bytes`` bytes (when at least the overhead)."""
        b = self._by_size.get(batch_bytes)
        if b is None:
            probe = len(self._build(_OVERHEAD_PROBE_BYTES)) - _OVERHEAD_PROBE_BYTES
            value = max(0, batch_bytes - probe)
            b = self._build(value)
            # The record's varint lengths grow with the value: adjust once more.
            if len(b) != batch_bytes and value > 0:
                b = self._build(max(0, value - (len(b) - batch_bytes)))
            self._by_size[batch_bytes] = b
        return b

    def _build(self, value_bytes: int) -> bytes:
        return build_record_batch([(None, b"v" * value_bytes, self._timestamp_ms)])
