"""The cleaner core's transaction rules (partlog/tiered/cleaner.py,
``TxnFilter``) against a reference model: plain writes and tombstones
interleaved with transactional producers that commit or abort, cut into
batches (any codec), then cleaned with the aborted transactions a
READ_COMMITTED fetch would list.  Read back from the beginning as a Kafka
consumer reads (``read_records``: markers never records, a read_committed
consumer skipping the listed aborted transactions), both isolation levels
see exactly the latest committed value per key, with no aborted data left;
markers are kept byte for byte (partlog never removes one:
docs/design/compaction.md); offsets, producer fields and the transactional
bit are preserved."""

from __future__ import annotations

import struct
import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from partlog.kafka import batch_header as bh
from partlog.kafka.compression import CODEC_NAMES, compress
from partlog.kafka.control_batch import control_header, control_record
from partlog.kafka.crc32c import crc32c
from partlog.kafka.record_batch import build_record_batch, read_records
from partlog.kafka.records import AbortedTxn, TopicIdPartition
from partlog.tiered.cleaner import OffsetMap, TxnFilter, build_offset_map, clean_batch, keyed_records
from partlog.tiered.segment import check_batch

TP = TopicIdPartition(uuid.UUID(int=2), 0)
T0 = 1_700_000_000_000
RETENTION_MS = 1000
KEYS = [b"a", b"b", b"c", b"d"]
PIDS = [11, 12, 13]

record = st.tuples(st.sampled_from(KEYS), st.one_of(st.none(), st.binary(max_size=6)))
# An operation: a plain batch, a producer's transactional batch (it opens
# its transaction), or the end of a producer's transaction (commit or abort;
# nothing when it has none open).
ops = st.lists(
    st.one_of(
        st.tuples(st.just("plain"), st.just(0), st.lists(record, min_size=1, max_size=4)),
        st.tuples(st.just("txn"), st.sampled_from(PIDS), st.lists(record, min_size=1, max_size=4)),
        st.tuples(st.just("end"), st.sampled_from(PIDS), st.booleans()),
    ),
    min_size=1,
    max_size=30,
)


def _data_batch(
    offset: int, records: list[tuple[bytes, bytes | None]], codec: int, pid: int, seq: int, txn: bool
) -> bytes:
    built = build_record_batch(
        [(k, v, T0 + offset + i) for i, (k, v) in enumerate(records)],
        producer_id=pid,
        producer_epoch=0 if pid >= 0 else -1,
        base_sequence=seq,
        transactional=txn,
    )
    out = bytearray(built)
    if codec:
        out = bytearray(built[: bh.HEADER_SIZE]) + compress(codec, built[bh.HEADER_SIZE :])
        struct.pack_into(">i", out, 8, len(out) - bh.LOG_OVERHEAD)
        struct.pack_into(">h", out, 21, struct.unpack_from(">h", out, 21)[0] | codec)
        struct.pack_into(">I", out, 17, crc32c(memoryview(out)[21:]))
    struct.pack_into(">q", out, 0, offset)  # not under the CRC, as the leader stamps it
    return bytes(out)


def _marker(offset: int, pid: int, committed: bool) -> bytes:
    header = control_header(
        base_offset=offset,
        partition_leader_epoch=0,
        producer_id=pid,
        producer_epoch=0,
        timestamp=T0 + offset,
        log_append_time=False,
        committed=committed,
        coordinator_epoch=0,
    )
    return header + control_record(committed, 0)


class Log:
    """The batches the operations write, and the reference model's view."""

    def __init__(self, steps: list[tuple[str, int, object]], closing: list[bool], codecs: list[int]) -> None:
        self.batches: list[bytes] = []
        self.aborted: list[AbortedTxn] = []
        self.aborted_offsets: set[int] = set()
        self.committed: dict[int, tuple[bytes, bytes | None]] = {}  # offset -> the record
        self.markers: list[int] = []  # batch indexes
        offset = 0
        open_txns: dict[int, list[tuple[int, tuple[bytes, bytes | None]]]] = {}
        first: dict[int, int] = {}
        seqs = dict.fromkeys(PIDS, 0)
        ends = [("end", pid, closing[i % len(closing)]) for i, pid in enumerate(PIDS)]
        for n, (kind, pid, arg) in enumerate([*steps, *ends]):
            if kind == "end":
                if pid not in open_txns:
                    continue
                committed = bool(arg)
                self.markers.append(len(self.batches))
                self.batches.append(_marker(offset, pid, committed))
                for o, r in open_txns.pop(pid):
                    if committed:
                        self.committed[o] = r
                    else:
                        self.aborted_offsets.add(o)
                if not committed:
                    self.aborted.append(AbortedTxn(pid, first[pid]))
                offset += 1
                continue
            records = list(arg)  # type: ignore[call-overload]
            codec = codecs[n % len(codecs)]
            if kind == "plain":
                self.batches.append(_data_batch(offset, records, codec, -1, -1, False))
                self.committed.update((offset + i, r) for i, r in enumerate(records))
            else:
                self.batches.append(_data_batch(offset, records, codec, pid, seqs[pid], True))
                seqs[pid] += len(records)
                if pid not in open_txns:
                    open_txns[pid] = []
                    first[pid] = offset
                open_txns[pid].extend((offset + i, r) for i, r in enumerate(records))
            offset += len(records)
        assert not open_txns

    def latest(self) -> dict[bytes, tuple[int, bytes | None]]:
        """The reference: the latest committed (offset, value) per key."""
        out: dict[bytes, tuple[int, bytes | None]] = {}
        for o in sorted(self.committed):
            k, v = self.committed[o]
            out[k] = (o, v)
        return out


def _clean(log: Log, batches: list[bytes], now_ms: int) -> list[bytes]:
    m = OffsetMap()
    assert keyed_records(batches) <= m.room()
    build_offset_map(batches, m, TxnFilter(log.aborted))
    txns = TxnFilter(log.aborted)
    return [clean_batch(b, m, now_ms=now_ms, delete_retention_ms=RETENTION_MS, txns=txns).data for b in batches]


def _views(log: Log, batches: list[bytes]) -> tuple[dict[bytes, tuple[int, bytes | None]], int, int]:
    """What a read_committed consumer reads as {key: (offset, value)}, and
    the record counts of both isolation levels, checking each record is the
    one written at its offset."""
    data = b"".join(batches)
    committed, _ = read_records(TP, data, 0, [(a.producer_id, a.first_offset) for a in log.aborted])
    uncommitted, _ = read_records(TP, data, 0)
    for r in uncommitted:
        assert r.offset not in log.aborted_offsets, r  # no aborted data, even read_uncommitted
        assert log.committed[r.offset] == (r.key, r.value)  # offsets preserved
    offsets = [r.offset for r in committed]
    assert offsets == sorted(set(offsets))
    return {r.key: (r.offset, r.value) for r in committed if r.key is not None}, len(committed), len(uncommitted)


def _check_shape(log: Log, before: list[bytes], after: list[bytes]) -> None:
    assert len(before) == len(after)
    for i, (b, a) in enumerate(zip(before, after, strict=True)):
        hb, ha = check_batch(b), check_batch(a)  # whole, valid CRC
        same = ("base_offset", "last_offset_delta", "max_timestamp", "producer_id", "producer_epoch", "base_sequence")
        assert [getattr(ha, f) for f in same] == [getattr(hb, f) for f in same]
        assert (ha.is_transactional, ha.is_control) == (hb.is_transactional, hb.is_control)
        assert ha.record_count <= hb.record_count
        if i in log.markers:
            assert a == b  # markers kept, byte for byte


@settings(max_examples=300, deadline=None)
@given(
    ops,
    st.lists(st.booleans(), min_size=1, max_size=3),
    st.lists(st.sampled_from(sorted(CODEC_NAMES)), min_size=1, max_size=4),
)
def test_read_committed_is_latest_committed_per_key(
    steps: list[tuple[str, int, object]], closing: list[bool], codecs: list[int]
) -> None:
    log = Log(steps, closing, codecs)
    latest = log.latest()
    once = _clean(log, log.batches, T0)
    _check_shape(log, log.batches, once)
    view, n_committed, n_uncommitted = _views(log, once)
    # Exactly the latest committed record per key; tombstones stay before the horizon.
    assert view == latest
    assert n_committed == n_uncommitted == len(latest)
    # Cleaning again before the horizon changes nothing.
    assert _clean(log, once, T0 + RETENTION_MS - 1) == once
    # Past the horizon the tombstones go; markers still stay.
    twice = _clean(log, once, T0 + RETENTION_MS)
    _check_shape(log, log.batches, twice)
    view, n_committed, _ = _views(log, twice)
    assert view == {k: ov for k, ov in latest.items() if ov[1] is not None}
    assert n_committed == len(view)


def test_aborted_data_neither_stays_nor_supersedes() -> None:
    # a=1 plain; producer 11 writes a=2 and b=9, aborted; producer 12 writes
    # a=3, committed: a=3 wins, a=2 and b=9 go, and a=1 goes only because
    # of the committed a=3, never because of the aborted a=2.
    log = Log(
        [
            ("plain", 0, [(b"a", b"1")]),
            ("txn", 11, [(b"a", b"2"), (b"b", b"9")]),
            ("end", 11, False),
            ("txn", 12, [(b"c", b"3")]),
            ("end", 12, True),
        ],
        [True],
        [0],
    )
    once = _clean(log, log.batches, T0)
    assert _views(log, once)[0] == {b"a": (0, b"1"), b"c": (4, b"3")}
    aborted = check_batch(once[1])
    assert aborted.record_count == 0 and aborted.is_transactional and aborted.producer_id == 11
    # Without the aborted transactions (before the rules): the aborted batch stays whole.
    m = OffsetMap()
    build_offset_map(log.batches, m)
    kept = [clean_batch(b, m, now_ms=T0, delete_retention_ms=RETENTION_MS).data for b in log.batches]
    assert kept[1] == log.batches[1]
