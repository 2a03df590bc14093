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

Transactions (Kafka's ``ProducerStateEntry.currentTxnFirstOffset`` and
``coordinatorEpoch``): the first transactional batch of a producer with no
ongoing transaction starts one at its offset; a marker ends it and records
its coordinator epoch; a producer with an ongoing transaction never expires.
An entry with neither encodes exactly as before transactions.
"""

from __future__ import annotations

import itertools
import struct
from typing import NamedTuple

from partlog.kafka.batch_header import INT32_MAX
from partlog.kafka.errors import Errors

# Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN: the idempotence window,
# which is also why producers allow at most 5 in-flight requests.
NUM_BATCHES_TO_RETAIN = 5
# Kafka's producer.id.expiration.ms default: one day.
PRODUCER_ID_EXPIRATION_MS_DEFAULT = 86_400_000


# NamedTuples, not dataclasses: two of these are built per idempotent batch on
# the commit path, and tuple construction is several times cheaper.
class AppendedBatch(NamedTuple):
    """What the window remembers of one appended batch."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    max_timestamp: int
    log_append_time: int


class ProducerEntry(NamedTuple):
    producer_epoch: int
    batches: tuple[AppendedBatch, ...]
    # Max timestamp of the last appended batch: Kafka expires producers by it.
    last_timestamp: int
    # The first offset of the ongoing transaction, -1: none.
    txn_first_offset: int = -1
    # The coordinator epoch of the last marker, -1: none.
    coordinator_epoch: int = -1

    def find_duplicate(self, producer_epoch: int, first_seq: int, last_seq: int) -> AppendedBatch | None:
        if producer_epoch != self.producer_epoch:
            return None
        for b in self.batches:
            if b.first_seq == first_seq and b.last_seq == last_seq:
                return b
        return None

    def is_expired(self, now_ms: int, expiration_ms: int) -> bool:
        """Kafka's isProducerExpired: never while a transaction is ongoing."""
        return self.txn_first_offset < 0 and now_ms - self.last_timestamp >= expiration_ms

    def encode(self) -> bytes:
        """Fixed-width binary form for the store (msgpack was 2 us a batch):
        one pack call with a format per window length, as this runs once per
        partition and producer on every commit.  Transaction fields, when
        set, follow the head (:data:`_TXN_FLAG` in the count byte)."""
        batches = self.batches
        n = len(batches)
        if self.txn_first_offset >= 0 or self.coordinator_epoch >= 0:
            head = _ENTRY_HEAD.pack(self.producer_epoch, self.last_timestamp, n | _TXN_FLAG)
            head += _TXN.pack(self.txn_first_offset, self.coordinator_epoch)
            return head + b"".join(_BATCH.pack(*b) for b in batches)
        if n < len(_ENTRY_FORMATS):
            return _ENTRY_FORMATS[n].pack(self.producer_epoch, self.last_timestamp, n, *_chain(batches))
        head = _ENTRY_HEAD.pack(self.producer_epoch, self.last_timestamp, n)
        return head + b"".join(_BATCH.pack(*b) for b in batches)

    @classmethod
    def decode(cls, data: bytes) -> ProducerEntry:
        epoch, last_ts, n = _ENTRY_HEAD.unpack_from(data, 0)
        at = _ENTRY_HEAD.size
        txn_first = coordinator_epoch = -1
        if n & _TXN_FLAG:
            n &= ~_TXN_FLAG
            txn_first, coordinator_epoch = _TXN.unpack_from(data, at)
            at += _TXN.size
        if len(data) != at + n * _BATCH.size:
            raise ValueError(f"producer entry is {len(data)} bytes, expected {at + n * _BATCH.size}")
        return cls(
            epoch,
            tuple(AppendedBatch(*_BATCH.unpack_from(data, at + i * _BATCH.size)) for i in range(n)),
            last_ts,
            txn_first,
            coordinator_epoch,
        )


_ENTRY_HEAD = struct.Struct(">hqB")  # producer epoch, last timestamp, batch count
_BATCH = struct.Struct(">iiqqqq")  # first/last seq, first/last offset, max timestamp, log append time
# Set in the count byte when the transaction fields follow the head.
_TXN_FLAG = 0x80
_TXN = struct.Struct(">qi")  # ongoing transaction's first offset, coordinator epoch
# The whole entry of a window of n batches, as one format (same bytes).
_ENTRY_FORMATS = tuple(struct.Struct(">hqB" + "iiqqqq" * n) for n in range(NUM_BATCHES_TO_RETAIN + 1))
_chain = itertools.chain.from_iterable


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
    if entry is None:
        return ProducerEntry(producer_epoch, (*kept, batch), ts)
    return ProducerEntry(producer_epoch, (*kept, batch), ts, entry.txn_first_offset, entry.coordinator_epoch)


class ProducerWindow:
    """One producer's state while one commit appends to it, kept in its
    encoded form (:meth:`ProducerEntry.encode`): the store caches producer
    state as those bytes (a fifth of the memory of the tuples, and nothing for
    the garbage collector to scan), a commit opens a window on them with
    :meth:`from_encoded`, appends, and hands :meth:`encoded` to the journal
    and the cache, with no tuple per batch on the way.  Its decisions are
    exactly :meth:`ProducerEntry.find_duplicate`, :func:`check_append` and
    :func:`after_append`; tests/unit/test_producer_window.py checks them against
    those on random histories."""

    __slots__ = (
        "body",
        "coordinator_epoch",
        "epoch",
        "known",
        "last_seq",
        "last_timestamp",
        "max_first",
        "n",
        "next_seq",
        "txn_first",
    )

    def __init__(self, entry: ProducerEntry | None) -> None:
        self._load(None if entry is None else entry.encode())

    @classmethod
    def from_encoded(cls, raw: bytes | None) -> ProducerWindow:
        """A window on an encoded entry (None: no state)."""
        window = cls.__new__(cls)
        window._load(raw)
        return window

    def _load(self, raw: bytes | None) -> None:
        self.txn_first = self.coordinator_epoch = -1
        if raw is None:
            self.known = False  # no state (never seen, or expired)
            self.epoch = self.last_timestamp = -1
            self.body = b""
            self.n = 0
            self.max_first = self.next_seq = -1
            self.last_seq = INT32_MAX
            return
        self.known = True
        self.epoch, self.last_timestamp, n = _ENTRY_HEAD.unpack_from(raw, 0)
        if n & _TXN_FLAG:
            n &= ~_TXN_FLAG
            self.txn_first, self.coordinator_epoch = _TXN.unpack_from(raw, _ENTRY_HEAD.size)
            self.body = raw[_ENTRY_HEAD.size + _TXN.size :]
        else:
            self.body = raw[_ENTRY_HEAD.size :]
        if n > NUM_BATCHES_TO_RETAIN or len(self.body) != n * _BATCH.size:
            raise ValueError(f"producer entry of {n} batches is {len(raw)} bytes")
        self.n = n
        # For continues(): the highest first sequence in the window (kept as a
        # running max: stale only on the high side) and the next sequence.
        self.max_first = max(_FIRSTS[n].unpack_from(self.body)) if n else -1
        self.last_seq = _I32.unpack_from(self.body, n * _BATCH.size - _BATCH.size + 4)[0] if n else INT32_MAX
        self.next_seq = self.last_seq + 1 if self.last_seq < INT32_MAX else -1

    def expired(self, now_ms: int, expiration_ms: int) -> bool:
        """Known, with no ongoing transaction, and its last batch older than
        ``expiration_ms`` (Kafka's isProducerExpired)."""
        return self.known and self.txn_first < 0 and now_ms - self.last_timestamp >= expiration_ms

    def end_txn(self, producer_epoch: int, coordinator_epoch: int, timestamp: int) -> None:
        """A marker was appended (Kafka's appendEndTxnMarker; the caller
        checked epochs): no transaction ongoing, the marker's coordinator
        epoch recorded, a new producer epoch starts an empty window."""
        if not self.known or producer_epoch != self.epoch:
            self.body = b""
            self.n = 0
            self.max_first = self.next_seq = -1
            self.last_seq = INT32_MAX
        self.known = True
        self.epoch = producer_epoch
        self.txn_first = -1
        self.coordinator_epoch = coordinator_epoch
        self.last_timestamp = timestamp

    def continues(self, producer_epoch: int, first_seq: int) -> bool:
        """True if a batch of this epoch starting at ``first_seq`` directly
        continues the window: then it is no duplicate (every batch in the
        window starts below it) and in sequence, so the caller may skip
        :meth:`find_duplicate` and :meth:`check_append` (the common case,
        cheaper).  False decides nothing.  Expiry is the caller's check."""
        return first_seq == self.next_seq and producer_epoch == self.epoch and first_seq > self.max_first

    def find_duplicate(self, producer_epoch: int, first_seq: int, last_seq: int) -> AppendedBatch | None:
        if not self.known or producer_epoch != self.epoch:
            return None
        for b in _BATCH.iter_unpack(self.body):
            if b[0] == first_seq and b[1] == last_seq:
                return AppendedBatch(*b)
        return None

    def check_append(self, producer_epoch: int, first_seq: int) -> Errors:
        if not self.known:
            return Errors.NONE
        if producer_epoch < self.epoch:
            return Errors.INVALID_PRODUCER_EPOCH
        if producer_epoch != self.epoch or not self.n:
            return Errors.NONE if first_seq == 0 else Errors.OUT_OF_ORDER_SEQUENCE_NUMBER
        last = self.last_seq
        if first_seq == last + 1 or (first_seq == 0 and last == INT32_MAX):
            return Errors.NONE
        return Errors.OUT_OF_ORDER_SEQUENCE_NUMBER

    def append(self, producer_epoch: int, batch: AppendedBatch) -> None:
        """``batch`` appended (the caller checked it first)."""
        self.append_values(producer_epoch, *batch)

    def append_values(
        self,
        producer_epoch: int,
        first_seq: int,
        last_seq: int,
        first_offset: int,
        last_offset: int,
        max_timestamp: int,
        log_append_time: int,
    ) -> None:
        """:meth:`append` with the batch's fields as arguments (no tuple)."""
        record = _BATCH.pack(first_seq, last_seq, first_offset, last_offset, max_timestamp, log_append_time)
        if not self.known or producer_epoch != self.epoch:
            self.body = record
            self.n = 1
            self.max_first = first_seq
        elif self.n < NUM_BATCHES_TO_RETAIN:
            self.body += record
            self.n += 1
        else:
            self.body = self.body[_BATCH.size :] + record
        self.known = True
        self.epoch = producer_epoch
        self.last_timestamp = log_append_time if log_append_time >= 0 else max_timestamp
        if first_seq > self.max_first:
            self.max_first = first_seq
        self.last_seq = last_seq
        self.next_seq = last_seq + 1 if last_seq < INT32_MAX else -1

    def encoded(self) -> bytes:
        """The state as :meth:`ProducerEntry.encode` writes it."""
        assert self.known, "a window that appended nothing has no entry"
        if self.txn_first >= 0 or self.coordinator_epoch >= 0:
            return (
                _ENTRY_HEAD.pack(self.epoch, self.last_timestamp, self.n | _TXN_FLAG)
                + _TXN.pack(self.txn_first, self.coordinator_epoch)
                + self.body
            )
        return _ENTRY_HEAD.pack(self.epoch, self.last_timestamp, self.n) + self.body

    def entry(self) -> ProducerEntry:
        return ProducerEntry.decode(self.encoded())


# First sequences of the batches of a window of n (each record's first 4 bytes).
_FIRSTS = tuple(struct.Struct(">" + "i36x" * n) for n in range(NUM_BATCHES_TO_RETAIN + 1))
_I32 = struct.Struct(">i")
