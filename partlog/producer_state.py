"""Idempotent-producer state of one partition, as Kafka's ProducerStateManager.

Pure functions over immutable entries, so the store can stage changes inside a
transaction and throw them away if the transaction fails.  The rules follow
Apache Kafka's ``ProducerAppendInfo`` / ``ProducerStateEntry`` for appends from
clients (AppendOrigin.CLIENT):

* a duplicate is a batch with the entry's epoch and the same first and last
  sequence as one of the last :data:`NUM_BATCHES_TO_RETAIN` batches; it is
  answered with the original offsets and appends nothing;
* a lower epoch is INVALID_PRODUCER_EPOCH;
* a higher epoch must start at sequence 0 (else OUT_OF_ORDER_SEQUENCE_NUMBER)
  and starts a fresh window;
* the same epoch needs ``first == last + 1``, or ``first == 0`` after 2^31-1;
* a producer with no entry (never seen, or expired) may start anywhere.
"""

from __future__ import annotations

from dataclasses import dataclass

from partlog.batch_header import INT32_MAX
from partlog.errors import Errors

# Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN: the idempotence window,
# which is also why producers allow at most 5 in-flight requests.
NUM_BATCHES_TO_RETAIN = 5
# Kafka's producer.id.expiration.ms default: one day.
PRODUCER_ID_EXPIRATION_MS_DEFAULT = 86_400_000


@dataclass(frozen=True, slots=True)
class AppendedBatch:
    """What the window remembers of one appended batch."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    max_timestamp: int
    log_append_time: int


@dataclass(frozen=True, slots=True)
class ProducerEntry:
    producer_epoch: int
    batches: tuple[AppendedBatch, ...]
    # Max timestamp of the last appended batch: Kafka expires producers by it.
    last_timestamp: int

    def find_duplicate(self, producer_epoch: int, first_seq: int, last_seq: int) -> AppendedBatch | None:
        if producer_epoch != self.producer_epoch:
            return None
        for b in self.batches:
            if b.first_seq == first_seq and b.last_seq == last_seq:
                return b
        return None

    def is_expired(self, now_ms: int, expiration_ms: int) -> bool:
        return now_ms - self.last_timestamp >= expiration_ms

    def to_wire(self) -> list[object]:
        return [
            self.producer_epoch,
            self.last_timestamp,
            [
                [b.first_seq, b.last_seq, b.first_offset, b.last_offset, b.max_timestamp, b.log_append_time]
                for b in self.batches
            ],
        ]

    @classmethod
    def from_wire(cls, data: list[object]) -> ProducerEntry:
        epoch, last_ts, batches = data
        return cls(
            int(epoch),  # type: ignore[call-overload]
            tuple(AppendedBatch(*b) for b in batches),  # type: ignore[attr-defined]
            int(last_ts),  # type: ignore[call-overload]
        )


def in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


def check_append(entry: ProducerEntry | None, producer_epoch: int, first_seq: int) -> Errors:
    """Kafka's checkProducerEpoch then checkSequence, for a non-duplicate batch."""
    if entry is None:
        return Errors.NONE
    if producer_epoch < entry.producer_epoch:
        return Errors.INVALID_PRODUCER_EPOCH
    if producer_epoch != entry.producer_epoch:
        return Errors.NONE if first_seq == 0 else Errors.OUT_OF_ORDER_SEQUENCE_NUMBER
    if not entry.batches:
        return Errors.NONE if first_seq == 0 else Errors.OUT_OF_ORDER_SEQUENCE_NUMBER
    if in_sequence(entry.batches[-1].last_seq, first_seq):
        return Errors.NONE
    return Errors.OUT_OF_ORDER_SEQUENCE_NUMBER


def after_append(entry: ProducerEntry | None, producer_epoch: int, batch: AppendedBatch) -> ProducerEntry:
    """The entry once ``batch`` is appended (the caller checked it first)."""
    kept: tuple[AppendedBatch, ...] = ()
    if entry is not None and entry.producer_epoch == producer_epoch:
        kept = entry.batches[-(NUM_BATCHES_TO_RETAIN - 1) :]
    ts = batch.log_append_time if batch.log_append_time >= 0 else batch.max_timestamp
    return ProducerEntry(producer_epoch, (*kept, batch), ts)
