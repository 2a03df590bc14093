"""Transactional and idempotent batches through the cleaner and the
store's swap (partlog/tiered/cleaner.py, partlog/store/compaction.py): the
store takes the cleaned headers (producer fields and the transactional bit
kept, aborted data emptied, inline markers unchanged), a READ_COMMITTED
fetch from the beginning reads the latest committed value per key, and an
idempotent producer's retries are still answered as duplicates, its next
batch appended: its state does not move with the clean."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from partlog import Errors, MetadataStore, TopicIdPartition
from partlog.kafka.record_batch import build_record_batch, read_records
from partlog.kafka.records import FindBatchRequest, IsolationLevel, TxnMarkerRequest
from partlog.store.compaction import SegmentRewrite
from partlog.tiered.cleaner import OffsetMap, TxnFilter, build_offset_map, clean_batch
from tests.clock import Clock
from tests.unit.test_replica_segments import segment_of
from tests.unit.test_store_replication import BIG, T0, commit, commit1, open_store, topic

A, B = 5, 6  # a transactional producer, an idempotent one


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MetadataStore]:
    s = open_store(tmp_path / "s", Clock(T0))
    yield s
    s.close()


def _log(store: MetadataStore, tp: TopicIdPartition, originals: dict[int, bytes]) -> list[bytes]:
    """The partition's batches as its segment holds them: the stored header
    over each original batch, a marker's synthesized control batch."""
    [r] = store.find_batches([FindBatchRequest(tp, 0, BIG)], BIG)
    out = []
    for b in r.batches:
        m = b.metadata
        out.append(m.inline or m.header + originals[m.base_offset][61:])
    return out


def _read(
    store: MetadataStore, tp: TopicIdPartition, data: bytes, isolation: IsolationLevel
) -> list[tuple[bytes, bytes]]:
    [r] = store.find_batches([FindBatchRequest(tp, 0, BIG, isolation)], BIG)
    aborted = [(a.producer_id, a.first_offset) for a in r.aborted]
    return [(r.key or b"", r.value or b"") for r in read_records(tp, data, 0, aborted)[0]]


def test_cleaned_transactions_and_idempotent_retries(store: MetadataStore) -> None:
    [tp] = topic([store])
    store.alter_topic_configs(tp.topic_id, {"cleanup.policy": "compact"})
    idem = [
        build_record_batch([(b"a", b"%d" % s, T0)], producer_id=B, producer_epoch=0, base_sequence=s) for s in range(3)
    ]
    originals = {
        0: build_record_batch([(b"a", b"plain", T0)]),
        1: build_record_batch(
            [(b"a", b"aborted", T0), (b"b", b"aborted", T0)],
            producer_id=A,
            producer_epoch=0,
            base_sequence=0,
            transactional=True,
        ),
        4: idem[0],
        5: idem[1],
    }
    commit1(store, tp, originals[0])
    commit1(store, tp, originals[1])
    [m] = store.write_txn_markers([TxnMarkerRequest(tp, A, 0, 0, False)], T0)  # at 3
    assert m.error == Errors.NONE
    commit1(store, tp, originals[4])
    commit1(store, tp, originals[5])
    swap = segment_of(store, tp, 0, 5)
    assert store.swap_to_segment(swap).error == Errors.NONE
    batches = _log(store, tp, originals)

    [r] = store.find_batches([FindBatchRequest(tp, 0, BIG, IsolationLevel.READ_COMMITTED)], BIG)
    assert [(a.producer_id, a.first_offset) for a in r.aborted] == [(A, 1)]
    offset_map = OffsetMap()
    build_offset_map(batches, offset_map, TxnFilter(r.aborted))
    txns = TxnFilter(r.aborted)
    cleaned = [clean_batch(b, offset_map, now_ms=T0, delete_retention_ms=0, txns=txns).data for b in batches]
    assert cleaned[2] == batches[2]  # the marker
    req = SegmentRewrite(
        tp, 0, 5, f"tiered/{uuid.uuid4().hex}.log", sum(map(len, cleaned)), 1,
        replaced=(swap.object_key,), headers=tuple(c[:61] for c in cleaned),
    )  # fmt: skip
    assert store.swap_to_segment(req).error == Errors.NONE
    assert store.check() == []
    data = b"".join(cleaned)
    for isolation in IsolationLevel:
        assert _read(store, tp, data, isolation) == [(b"a", b"1")]

    # B's batches, one emptied by the clean, are still known: retries are duplicates.
    for seq in (0, 1):
        [again] = commit(store, [(tp, idem[seq])])
        assert again.errors == Errors.NONE and again.is_duplicate and again.assigned_base_offset == 4 + seq
    assert commit1(store, tp, idem[2]).assigned_base_offset == 6
