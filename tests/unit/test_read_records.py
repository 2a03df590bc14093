"""``read_records``: what a Kafka consumer delivers from a fetch answer.

Against a reference: a log of transactional and plain batches from a few
producers, each transaction ended by a COMMIT or ABORT marker (or still
open); read_committed delivers exactly the plain records and those of
committed transactions, read_uncommitted every data record, and neither a
control record.  The aborted list is what a leader answers for the range
(Kafka's ``collectAbortedTransactions``: every aborted transaction whose
range meets the fetch)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from hypothesis import example, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder

from partlog.kafka import batch_header as bh
from partlog.kafka.crc32c import crc32c
from partlog.kafka.record_batch import CONTROL_TYPE_ABORT, CONTROL_TYPE_COMMIT, read_records
from partlog.kafka.records import TopicIdPartition


def _tp() -> TopicIdPartition:
    return TopicIdPartition(uuid.UUID(int=7), 0)


def _batch(base: int, pid: int, values: list[bytes], *, transactional: bool) -> bytes:
    b = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=transactional, producer_id=pid,
        producer_epoch=0 if pid >= 0 else -1, base_sequence=0 if pid >= 0 else -1, batch_size=1 << 30,
    )  # fmt: skip
    for i, v in enumerate(values):
        b.append(i, timestamp=1_000, key=None, value=v, headers=[])
    raw = bytearray(b.build())
    raw[0:8] = base.to_bytes(8, "big", signed=True)
    return bytes(raw)


def _marker(base: int, pid: int, control_type: int) -> bytes:
    """A control batch as a leader writes it: one record, key (version 0,
    type), value (version 0, coordinator epoch 0); CONTROL|TRANSACTIONAL."""
    b = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=True, producer_id=pid, producer_epoch=0,
        base_sequence=-1, batch_size=1 << 30,
    )  # fmt: skip
    b.append(0, timestamp=1_000, key=(0).to_bytes(2, "big") + control_type.to_bytes(2, "big"),
             value=(0).to_bytes(2, "big") + (0).to_bytes(4, "big"), headers=[])  # fmt: skip
    raw = bytearray(b.build())
    raw[0:8] = base.to_bytes(8, "big", signed=True)
    attrs = int.from_bytes(raw[21:23], "big") | bh.ATTR_CONTROL
    raw[21:23] = attrs.to_bytes(2, "big")
    raw[17:21] = crc32c(bytes(raw[21:])).to_bytes(4, "big")
    return bytes(raw)


@dataclass
class _Log:
    data: bytes = b""
    next_offset: int = 0


# One step: (producer 0-1 or -1 for a plain producer, action, values).  Two
# transactional producers are enough to interleave; fewer make a producer's
# abort-then-commit (its second transaction after an aborted one) common.
_steps = st.lists(
    st.tuples(st.integers(-1, 1), st.sampled_from(["data", "data", "commit", "abort"]), st.integers(1, 3)),
    max_size=40,
)


@settings(max_examples=300)
@example([(0, "data", 1), (0, "abort", 1), (0, "data", 1), (0, "commit", 1)], 0)
@given(_steps, st.integers(0, 60))
def test_read_committed_delivers_plain_and_committed_records_only(steps: list[tuple[int, str, int]],
                                                                 start: int) -> None:  # fmt: skip
    log = _Log()
    open_txn: dict[int, list[tuple[int, bytes]]] = {}  # pid -> its records (offset, value)
    first_offset: dict[int, int] = {}
    committed: list[tuple[int, bytes]] = []
    everything: list[tuple[int, bytes]] = []
    aborted: list[tuple[int, int]] = []
    n = 0
    for pid, action, count in steps:
        base = log.next_offset
        if action == "data":
            values = [f"v{n + i}".encode() for i in range(count)]
            n += count
            recs = [(base + i, v) for i, v in enumerate(values)]
            everything += recs
            if pid < 0:
                log.data += _batch(base, -1, values, transactional=False)
                committed += recs
            else:
                log.data += _batch(base, 1000 + pid, values, transactional=True)
                first_offset.setdefault(pid, base)
                open_txn.setdefault(pid, []).extend(recs)
            log.next_offset = base + count
        elif pid >= 0 and pid in first_offset:
            ctype = CONTROL_TYPE_COMMIT if action == "commit" else CONTROL_TYPE_ABORT
            log.data += _marker(base, 1000 + pid, ctype)
            log.next_offset = base + 1
            if action == "commit":
                committed += open_txn.pop(pid)
            else:
                open_txn.pop(pid)
                aborted.append((1000 + pid, first_offset[pid]))
            del first_offset[pid]
    # The LSO: the first offset of any open transaction; a leader answers
    # read_committed only below it.
    lso = min(first_offset.values(), default=log.next_offset)
    below = b""
    pos = 0
    while pos < len(log.data):
        size = int.from_bytes(log.data[pos + 8 : pos + 12], "big") + bh.LOG_OVERHEAD
        if int.from_bytes(log.data[pos : pos + 8], "big") < lso:
            below += log.data[pos : pos + size]
        pos += size
    got, _ = read_records(_tp(), below, start, aborted)
    assert [(r.offset, r.value) for r in got] == sorted(x for x in committed if start <= x[0] < lso)
    got_all, after = read_records(_tp(), log.data, start)
    assert [(r.offset, r.value) for r in got_all] == sorted(x for x in everything if x[0] >= start)
    assert after == max(start, log.next_offset)
