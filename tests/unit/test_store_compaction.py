"""The store's half of the cleaner's swap (partlog/store/compaction.py):
a cleaned copy of one or several segment rows replaces them in one write;
entries keep their offsets and timestamps and take the new headers, sizes
and positions; references move; anything that does not match changes
nothing."""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from partlog import Errors, MetadataStore, TopicIdPartition
from partlog.kafka.record_batch import build_record_batch
from partlog.kafka.records import DeleteRecordsRequest, FindBatchRequest
from partlog.store import SegmentSwap
from partlog.store.compaction import SegmentRewrite
from partlog.tiered.cleaner import OffsetMap, build_offset_map, clean_batch
from tests.clock import Clock
from tests.unit.test_replica_segments import segment_of
from tests.unit.test_store_replication import BIG, T0, commit1, open_store, topic


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MetadataStore]:
    s = open_store(tmp_path / "s", Clock(T0))
    yield s
    s.close()


def _stored_batches(store: MetadataStore, tp: TopicIdPartition, batches: list[bytes]) -> list[bytes]:
    """The batches as the leader stores them (offsets stamped; the CRC does not cover them)."""
    out = []
    for e, b in zip(store.read_log(tp, 0, BIG).entries, batches, strict=True):
        stamped = bytearray(b)
        stamped[:61] = e.header
        out.append(bytes(stamped))
    return out


def _setup(store: MetadataStore) -> tuple[TopicIdPartition, list[bytes], list[SegmentSwap]]:
    [tp] = topic([store])
    store.alter_topic_configs(tp.topic_id, {"cleanup.policy": "compact"})
    batches = [
        build_record_batch([(b"k%d" % (i % 2), b"v%d" % i, T0 + i), (b"x", b"%d" % i, T0 + i)]) for i in range(4)
    ]
    for b in batches:
        commit1(store, tp, b)
    swaps = [segment_of(store, tp, 0, 3), segment_of(store, tp, 4, 7)]
    for sw in swaps:
        assert store.swap_to_segment(sw).error == Errors.NONE
    return tp, _stored_batches(store, tp, batches), swaps


def _cleaned(batches: list[bytes]) -> list[bytes]:
    m = OffsetMap()
    build_offset_map(batches, m)
    return [clean_batch(b, m, now_ms=T0, delete_retention_ms=0).data for b in batches]


def _rewrite(
    tp: TopicIdPartition, cleaned: list[bytes], replaced: list[SegmentSwap], start: int, end: int
) -> SegmentRewrite:
    return SegmentRewrite(
        tp,
        start,
        end,
        f"tiered/{uuid.uuid4().hex}.log",
        sum(len(c) for c in cleaned),
        uploader=1,
        replaced=tuple(r.object_key for r in replaced),
        headers=tuple(c[:61] for c in cleaned),
    )


def test_rewrite_replaces_rows_and_references(store: MetadataStore) -> None:
    tp, batches, swaps = _setup(store)
    before = store.read_log(tp, 0, BIG).entries
    cleaned = _cleaned(batches)
    assert sum(map(len, cleaned)) < sum(map(len, batches))
    req = _rewrite(tp, cleaned, swaps, 0, 7)
    assert store.swap_to_segment(req).error == Errors.NONE
    assert [(r.start_offset, r.end_offset, r.object_key) for r in store.segments(tp)] == [(0, 7, req.object_key)]
    usage = store.file_usage()
    assert set(usage) == {req.object_key}  # the old segments lost their last reference
    assert usage[req.object_key].live_bytes == req.size
    [found] = store.find_batches([FindBatchRequest(tp, 0, BIG)], BIG)
    positions = [0]
    for c in cleaned[:-1]:
        positions.append(positions[-1] + len(c))
    assert [(b.object_key, b.metadata.byte_offset, b.metadata.byte_size) for b in found.batches] == [
        (req.object_key, p, len(c)) for p, c in zip(positions, cleaned, strict=True)
    ]
    after = store.read_log(tp, 0, BIG).entries
    assert [(e.base_offset, e.last_offset) for e in after] == [(e.base_offset, e.last_offset) for e in before]
    assert [e.header for e in after] == [c[:61] for c in cleaned]
    assert store.partition_state(tp)["live_bytes"] == req.size
    assert store.check() == []
    # A retry is a no-op; another rewrite naming the old rows is refused.
    assert store.swap_to_segment(req).error == Errors.NONE
    assert store.swap_to_segment(_rewrite(tp, cleaned, swaps, 0, 7)).error == Errors.INVALID_REQUEST
    assert store.check() == []


def test_rewrite_refusals_change_nothing(store: MetadataStore) -> None:
    tp, batches, swaps = _setup(store)
    cleaned = _cleaned(batches)
    rows = store.segments(tp)
    usage = store.file_usage()
    lying = bytearray(cleaned[1])
    struct.pack_into(">i", lying, 23, 0)  # another last offset delta
    bad_count = bytearray(cleaned[1])
    struct.pack_into(">i", bad_count, 57, 5)  # more records than stored
    for req, error in [
        (_rewrite(tp, cleaned, swaps[:1], 0, 7), Errors.INVALID_REQUEST),  # rows not as read
        (_rewrite(tp, [cleaned[0], bytes(lying), *cleaned[2:]], swaps, 0, 7), Errors.INVALID_REQUEST),
        (_rewrite(tp, [cleaned[0], bytes(bad_count), *cleaned[2:]], swaps, 0, 7), Errors.INVALID_REQUEST),
        (_rewrite(tp, cleaned[:3], swaps, 0, 7), Errors.INVALID_REQUEST),  # a header short
        (_rewrite(tp, cleaned, swaps, 0, 9), Errors.OFFSET_OUT_OF_RANGE),
    ]:
        got = store.swap_to_segment(req)
        assert got.error == error, (got, req)
        assert store.segments(tp) == rows and store.file_usage() == usage
    assert store.check() == []


def test_retention_and_delete_records_after_a_rewrite(store: MetadataStore) -> None:
    tp, batches, swaps = _setup(store)
    cleaned = _cleaned(batches)
    req = _rewrite(tp, cleaned, swaps, 0, 7)
    assert store.swap_to_segment(req).error == Errors.NONE
    # A cut inside the cleaned segment keeps the counters and references exact.
    [answer] = store.delete_records([DeleteRecordsRequest(tp, 4)])
    assert answer.errors == Errors.NONE
    assert store.partition_state(tp)["live_bytes"] == sum(len(c) for c in cleaned[2:])
    assert store.file_usage()[req.object_key].live_bytes == sum(len(c) for c in cleaned[2:])
    assert store.check() == []
    # A rewrite of the old range now starts below the log start.
    again = _rewrite(tp, cleaned, [SegmentSwap(tp, 0, 7, req.object_key, req.size, 1)], 0, 7)
    assert store.swap_to_segment(again).error == Errors.OFFSET_OUT_OF_RANGE
    assert store.delete_records([DeleteRecordsRequest(tp, 8)])[0].errors == Errors.NONE
    assert store.file_usage() == {} and store.check() == []
