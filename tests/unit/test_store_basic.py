"""Basic end-to-end behaviour of MetadataStore on real LMDB and real v2 batches."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from partlog import (
    CreateTopicAndPartitionsRequest,
    DeleteRecordsRequest,
    Errors,
    FindBatchRequest,
    ListOffsetsRequest,
    MetadataStore,
    TopicIdPartition,
)
from tests.batches import build_batch, request, wal_key

NOW = 1_700_000_000_000


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MetadataStore]:
    with MetadataStore.open(tmp_path / "s", clock=lambda: NOW) as s:
        yield s


def test_commit_find_delete_roundtrip(store: MetadataStore) -> None:
    tid = uuid.uuid4()
    store.create_topic_and_partitions([CreateTopicAndPartitionsRequest(tid, "t", 2)])
    tp = TopicIdPartition(tid, 0)
    b1 = build_batch(3, producer_id=7, producer_epoch=0, base_sequence=0, timestamp_ms=NOW)
    b2 = build_batch(2, producer_id=7, producer_epoch=0, base_sequence=3, timestamp_ms=NOW)
    key = wal_key(NOW)
    resps = store.commit_file(key, 1, 10_000, [request(tp, b1), request(tp, b2, byte_offset=500), request(tp, b1)])
    assert [(r.errors, r.assigned_base_offset, r.is_duplicate) for r in resps] == [
        (Errors.NONE, 0, False),
        (Errors.NONE, 3, False),
        (Errors.NONE, 0, True),
    ]
    [found] = store.find_batches([FindBatchRequest(tp, 1, 1 << 20)], 1 << 20)
    assert found.errors == Errors.NONE and found.high_watermark == 5
    assert [b.metadata.base_offset for b in found.batches] == [0, 3]
    assert {b.object_key for b in found.batches} == {key}
    latest, earliest = store.list_offsets([ListOffsetsRequest(tp, -1), ListOffsetsRequest(tp, -2)])
    assert (latest.offset, earliest.offset) == (5, 0)
    assert store.referenced_files([key, "other"]) == {key}
    assert store.delete_records([DeleteRecordsRequest(tp, -1)])[0].low_watermark == 5
    assert store.file_usage() == {}
    assert store.check() == []
