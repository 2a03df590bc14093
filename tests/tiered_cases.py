"""Helpers and store cases for partlog.tiered: committed batches as a leader
stores them, segments built from them the way a leader will, and the
``ObjectStoreRsm`` round trip that tests/unit/test_tiered_remote_storage.py
runs on ``LocalDirStore`` and tests/system/test_tiered_rsm_s3.py on SeaweedFS."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import pytest

from partlog.kafka.batch_header import HEADER_SIZE, patch_header
from partlog.kafka.records import TopicIdPartition
from partlog.tiered.remote_storage import (
    IndexType,
    ObjectStoreRsm,
    RemoteLogSegmentMetadata,
    RemoteResourceNotFoundError,
)
from partlog.tiered.segment import (
    BuiltSegment,
    SegmentBuilder,
    SegmentConfig,
    find_offset,
    offset_index_lookup,
)
from partlog.wal.objectstore import ObjectStore, iter_objects
from tests.batches import build_batch


def stamped(batch: bytes, base_offset: int, epoch: int = 0) -> bytes:
    """``batch`` as the leader stores it: base offset and leader epoch stamped
    (both outside the CRC)."""
    header = patch_header(
        batch[:HEADER_SIZE], base_offset=base_offset, partition_leader_epoch=epoch, log_append_time=None
    )
    return header + batch[HEADER_SIZE:]


def committed_log(shapes: Sequence[tuple[int, int, int]], *, first_offset: int = 0, epoch: int = 0) -> list[bytes]:
    """Stamped batches, contiguous from ``first_offset``: one per
    ``(records, value bytes, first timestamp ms)``."""
    out = []
    offset = first_offset
    for records, value_bytes, timestamp_ms in shapes:
        out.append(stamped(build_batch(records, value_bytes=value_bytes, timestamp_ms=timestamp_ms), offset, epoch))
        offset += records
    return out


def build_segments(batches: Sequence[bytes], config: SegmentConfig, now_ms: int = 0) -> list[BuiltSegment]:
    """Every segment of ``batches``, rolled where the builder says."""
    builder = SegmentBuilder(config)
    out = []
    for batch in batches:
        if builder.roll_reason(batch, now_ms) is not None:
            out.append(builder.build())
        builder.append(batch, now_ms)
    if not builder.empty:
        out.append(builder.build())
    return out


# The copy attempt's time in the tests' segment keys.
CREATED_MS = 1_700_000_000_000
# The cluster the sample segments' keys name.
CLUSTER_ID = uuid.UUID("5e65e65e-0000-4000-8000-0000005e65e6")


def sample_segment(batches: int = 12) -> BuiltSegment:
    """One segment of ``batches`` batches of ~1 KiB with offset- and time-index entries."""
    shapes = [(3, 300, 1_700_000_000_000 + 10 * i) for i in range(batches)]
    log = committed_log(shapes, first_offset=1000, epoch=4)
    (segment,) = build_segments(log, SegmentConfig(index_interval_bytes=2048))
    return segment


def rsm_round_trip(store: ObjectStore) -> None:
    """Copy, ranged fetches, index fetches, lookups through fetched bytes,
    delete twice: against ``store``."""
    rsm = ObjectStoreRsm(store, cluster_id=CLUSTER_ID)
    tp = TopicIdPartition(uuid.uuid4(), 7)
    segment = sample_segment()
    assert segment.offset_index and segment.time_index
    meta = RemoteLogSegmentMetadata.for_segment(uuid.uuid4(), tp, segment, CREATED_MS)
    rsm.copy_log_segment_data(meta, segment)

    keys = sorted(o.key for o in iter_objects(store, rsm.partition_prefix(tp)))
    stem = f"{rsm.partition_prefix(tp)}{segment.base_offset:020d}-{CREATED_MS:013d}-{meta.segment_id}"
    assert keys == sorted(stem + suffix for suffix in (".log", ".index", ".timeindex"))
    assert all(k.startswith("tiered/") for k in keys)

    size = segment.log_size_bytes
    assert rsm.fetch_log_segment(meta, 0, size - 1) == segment.log
    for start, end in ((0, 0), (1, 60), (size // 2, size - 1), (size - 1, size - 1)):
        assert rsm.fetch_log_segment(meta, start, end) == segment.log[start : end + 1]
    for start, end in ((-1, 3), (5, 4), (0, size)):
        with pytest.raises(ValueError):
            rsm.fetch_log_segment(meta, start, end)
    offset_index = rsm.fetch_index(meta, IndexType.OFFSET)
    assert offset_index == segment.offset_index
    assert rsm.fetch_index(meta, IndexType.TIMESTAMP) == segment.time_index

    # A read as the fetch path will do it: position from the fetched index,
    # one ranged GET from there, scan to the batch.
    for target in (meta.start_offset, meta.start_offset + 17, meta.end_offset):
        position = offset_index_lookup(offset_index, meta.extent, target)
        tail = rsm.fetch_log_segment(meta, position, size - 1)
        found = find_offset(tail, 0, target)
        assert found is not None
        assert find_offset(segment.log, 0, target) == position + found

    rsm.delete_log_segment_data(meta)
    rsm.delete_log_segment_data(meta)  # idempotent
    assert list(iter_objects(store, rsm.partition_prefix(tp))) == []
    with pytest.raises(RemoteResourceNotFoundError):
        rsm.fetch_log_segment(meta, 0, 10)
    with pytest.raises(RemoteResourceNotFoundError):
        rsm.fetch_index(meta, IndexType.OFFSET)


def rsm_single_batch(store: ObjectStore) -> None:
    """A one-batch segment has an empty offset index: an empty object round-trips."""
    rsm = ObjectStoreRsm(store, cluster_id=CLUSTER_ID)
    (segment,) = build_segments(committed_log([(1, 10, 5)], first_offset=42), SegmentConfig())
    assert segment.offset_index == b"" and len(segment.time_index) == 12
    meta = RemoteLogSegmentMetadata.for_segment(uuid.uuid4(), TopicIdPartition(uuid.uuid4(), 0), segment, CREATED_MS)
    rsm.copy_log_segment_data(meta, segment)
    assert rsm.fetch_index(meta, IndexType.OFFSET) == b""
    assert rsm.fetch_index(meta, IndexType.TIMESTAMP) == segment.time_index
    assert offset_index_lookup(b"", meta.extent, 42) == 0
    rsm.delete_log_segment_data(meta)
