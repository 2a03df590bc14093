"""partlog.tiered.remote_storage: segment metadata and its hostile decode,
``ObjectStoreRsm`` on ``LocalDirStore`` (the same cases on SeaweedFS:
tests/system/test_tiered_rsm_s3.py), its upload and delete order, and the
fence between its keys and walmgr's."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Sequence
from pathlib import Path

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from partlog.kafka.batch_header import INT32_MAX
from partlog.kafka.records import TopicIdPartition
from partlog.tiered.remote_storage import (
    METADATA_BYTES_MAX,
    IndexType,
    ObjectStoreRsm,
    RemoteLogSegmentMetadata,
    RemoteMetadataError,
    RemoteStorageError,
    RemoteStorageManager,
)
from partlog.tiered.segment import SEGMENT_LEADER_EPOCHS_MAX, SegmentExtent
from partlog.wal.key import make_wal_key
from partlog.wal.localdir_store import LocalDirStore
from partlog.wal.objectstore import DeleteResult, ForwardingStore, ObjectStoreError
from tests.tiered_cases import CLUSTER_ID, CREATED_MS, rsm_round_trip, rsm_single_batch, sample_segment
from walmgr.deleter import refusal
from walmgr.listing import classify

INT64_MAX = 2**63 - 1


def test_rsm_round_trip_on_localdir(tmp_path: Path) -> None:
    rsm_round_trip(LocalDirStore(tmp_path, fsync=False))


def test_object_store_rsm_is_a_remote_storage_manager(tmp_path: Path) -> None:
    rsm: RemoteStorageManager = ObjectStoreRsm(LocalDirStore(tmp_path), cluster_id=CLUSTER_ID)  # mypy: the shape
    assert callable(rsm.copy_log_segment_data)


def test_rsm_single_batch_segment_on_localdir(tmp_path: Path) -> None:
    rsm_single_batch(LocalDirStore(tmp_path, fsync=False))


class RecordingStore(ForwardingStore):
    """Records puts and deletes; fails the put of a key ending in ``fail_suffix``."""

    def __init__(self, inner: LocalDirStore, fail_suffix: str = "") -> None:
        super().__init__(inner)
        self.calls: list[tuple[str, tuple[str, ...]]] = []
        self.fail_suffix = fail_suffix

    def put(self, key: str, data: bytes) -> None:
        self.calls.append(("put", (key,)))
        if self.fail_suffix and key.endswith(self.fail_suffix):
            raise ObjectStoreError("injected", key=key, retriable=True)
        super().put(key, data)

    def delete_many(self, keys: Sequence[str]) -> DeleteResult:
        self.calls.append(("delete", tuple(keys)))
        return super().delete_many(keys)


def _meta(tp: TopicIdPartition) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata.for_segment(uuid.uuid4(), tp, sample_segment(3), CREATED_MS)


def test_indexes_go_up_first_and_the_log_is_deleted_first(tmp_path: Path) -> None:
    store = RecordingStore(LocalDirStore(tmp_path, fsync=False))
    rsm = ObjectStoreRsm(store, cluster_id=CLUSTER_ID)
    segment = sample_segment(3)
    meta = RemoteLogSegmentMetadata.for_segment(uuid.uuid4(), TopicIdPartition(uuid.uuid4(), 1), segment, CREATED_MS)
    rsm.copy_log_segment_data(meta, segment)
    rsm.delete_log_segment_data(meta)
    suffixes = [(op, tuple(k.rsplit(".", 1)[1] for k in keys)) for op, keys in store.calls]
    assert suffixes == [
        ("put", ("index",)),
        ("put", ("timeindex",)),
        ("put", ("log",)),
        ("delete", ("log",)),
        ("delete", ("index", "timeindex")),
    ]


def test_a_failed_log_put_leaves_no_log(tmp_path: Path) -> None:
    inner = LocalDirStore(tmp_path, fsync=False)
    rsm = ObjectStoreRsm(RecordingStore(inner, fail_suffix=".log"), cluster_id=CLUSTER_ID)
    segment = sample_segment(3)
    tp = TopicIdPartition(uuid.uuid4(), 1)
    meta = RemoteLogSegmentMetadata.for_segment(uuid.uuid4(), tp, segment, CREATED_MS)
    with pytest.raises(RemoteStorageError) as raised:
        rsm.copy_log_segment_data(meta, segment)
    assert raised.value.retriable
    keys = [o.key for o in inner.list_page(rsm.partition_prefix(tp)).objects]
    assert len(keys) == 2 and not any(k.endswith(".log") for k in keys)
    rsm.delete_log_segment_data(meta)  # the failed attempt's parts go
    assert inner.list_page(rsm.partition_prefix(tp)).objects == []


def test_copy_refuses_metadata_of_another_segment(tmp_path: Path) -> None:
    rsm = ObjectStoreRsm(LocalDirStore(tmp_path, fsync=False), cluster_id=CLUSTER_ID)
    segment = sample_segment(3)
    meta = RemoteLogSegmentMetadata.for_segment(uuid.uuid4(), TopicIdPartition(uuid.uuid4(), 1), segment, CREATED_MS)
    other = RemoteLogSegmentMetadata(
        meta.segment_id, meta.topic_id_partition, meta.start_offset, meta.end_offset + 1,
        meta.max_timestamp_ms, meta.segment_size_bytes, meta.segment_leader_epochs, meta.created_ms,
    )  # fmt: skip
    with pytest.raises(ValueError, match="does not describe"):
        rsm.copy_log_segment_data(other, segment)


def test_a_log_shorter_than_its_metadata_is_corrupt(tmp_path: Path) -> None:
    store = LocalDirStore(tmp_path, fsync=False)
    rsm = ObjectStoreRsm(store, cluster_id=CLUSTER_ID)
    segment = sample_segment(3)
    meta = RemoteLogSegmentMetadata.for_segment(uuid.uuid4(), TopicIdPartition(uuid.uuid4(), 1), segment, CREATED_MS)
    rsm.copy_log_segment_data(meta, segment)
    key = rsm.segment_key(meta, ".log")
    store.put(key, segment.log[:100])
    size = meta.segment_size_bytes
    for start in (50, 150):
        with pytest.raises(RemoteStorageError) as raised:
            rsm.fetch_log_segment(meta, start, size - 1)
        assert not raised.value.retriable


def test_key_layout() -> None:
    rsm = ObjectStoreRsm(LocalDirStore("/nonexistent-never-written"), prefix="/tiered/", cluster_id=CLUSTER_ID)
    tp = TopicIdPartition(uuid.UUID("12345678-1234-5678-1234-567812345678"), 3)
    meta = RemoteLogSegmentMetadata(
        uuid.UUID("00000000-0000-0000-0000-0000000000ab"), tp, 1234, 2000, 5, 100, ((0, 1234),), 1_700_000_000_123
    )
    key = rsm.segment_key(meta, IndexType.TIMESTAMP.value)
    shard = key.split("/")[1]
    assert key == (
        f"tiered/{shard}/{CLUSTER_ID}/12345678-1234-5678-1234-567812345678/3/"
        "00000000000000001234-1700000000123-00000000-0000-0000-0000-0000000000ab.timeindex"
    )
    assert len(shard) == 2 and int(shard, 16) >= 0
    assert rsm.partition_prefix(tp) == key.rsplit("/", 1)[0] + "/"
    with pytest.raises(ValueError):
        ObjectStoreRsm(LocalDirStore("/nonexistent-never-written"), prefix="/", cluster_id=CLUSTER_ID)


def test_walmgr_never_lists_or_deletes_segment_keys() -> None:
    """walmgr's WAL rules never take a segment key: ``classify`` and the
    deleter's fence without a tiered prefix refuse them, even under the same
    prefix.  Segment keys are deleted only under ``tiered_prefix``, by their
    own rules (tests/unit/test_walmgr_segments.py)."""
    rsm = ObjectStoreRsm(LocalDirStore("/nonexistent-never-written"), cluster_id=CLUSTER_ID)
    for partition in (0, 10, 99):
        meta = _meta(TopicIdPartition(uuid.uuid4(), partition))
        for suffix in (".log", ".index", ".timeindex"):
            key = rsm.segment_key(meta, suffix)
            assert isinstance(classify(key, "wal"), str)
            assert refusal(key, "wal") is not None
            assert isinstance(classify(key, "tiered"), str)
            assert refusal(key, "tiered") is not None
    # And the other way: a WAL key is never under the segments' partition prefixes.
    wal = str(make_wal_key("wal", 1, 1, "ab"))
    assert not wal.startswith(rsm.prefix + "/")


# ------------------------------------------------------------ metadata


def _metadata(
    segment_id: uuid.UUID,
    topic_id: uuid.UUID,
    partition: int,
    start: int,
    span: int,
    max_ts: int,
    size: int,
    epoch_steps: list[tuple[int, int]],
    created_ms: int,
) -> RemoteLogSegmentMetadata:
    epochs: list[tuple[int, int]] = []
    epoch, offset = -1, start
    for de, do in epoch_steps:
        epoch += de
        offset = min(offset + (do if epochs else 0), start + span)
        if epochs and offset == epochs[-1][1]:
            break
        epochs.append((epoch, offset))
    return RemoteLogSegmentMetadata(
        segment_id, TopicIdPartition(topic_id, partition), start, start + span, max_ts, size, tuple(epochs), created_ms
    )


metadatas = st.builds(
    _metadata,
    st.uuids(),
    st.uuids(),
    st.integers(0, INT32_MAX),
    st.integers(0, 2**62),
    st.integers(0, INT32_MAX),
    st.integers(-1, INT64_MAX),
    st.integers(61, INT64_MAX),
    st.lists(st.tuples(st.integers(1, 1000), st.integers(1, 10**6)), min_size=1, max_size=30),
    st.integers(0, 10**13 - 1),
)


@given(meta=metadatas)
def test_property_metadata_round_trips(meta: RemoteLogSegmentMetadata) -> None:
    raw = meta.encode()
    assert RemoteLogSegmentMetadata.decode(raw) == meta
    assert meta.extent == SegmentExtent(meta.start_offset, meta.end_offset + 1, meta.segment_size_bytes)


def test_metadata_of_the_most_epochs_fits() -> None:
    epochs = tuple((e, e) for e in range(SEGMENT_LEADER_EPOCHS_MAX))
    meta = RemoteLogSegmentMetadata(uuid.uuid4(), TopicIdPartition(uuid.uuid4(), 0), 0, 10**6, 1, 100, epochs, 0)
    assert RemoteLogSegmentMetadata.decode(meta.encode()) == meta


msgpack_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.binary(max_size=20) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=10),
    max_leaves=40,
)


@given(
    meta=metadatas,
    raw=st.binary(max_size=300),
    doc=msgpack_values,
    fields=st.lists(msgpack_values, min_size=10, max_size=10),
    cut=st.integers(0, 200),
    flip=st.integers(0, 200),
)
def test_property_hostile_metadata_raises_only_metadata_errors(
    meta: RemoteLogSegmentMetadata, raw: bytes, doc: object, fields: list[object], cut: int, flip: int
) -> None:
    good = meta.encode()
    flipped = bytearray(good)
    flipped[flip % len(good)] ^= 0xFF
    # A valid record with one field replaced.
    fields_doc = msgpack.unpackb(good)
    fields_doc[flip % 10] = fields[flip % 10]
    for hostile in (
        raw,
        good[: cut % len(good)],
        good + raw[:1] if raw else good + b"\0",
        bytes(flipped),
        msgpack.packb(doc, use_bin_type=True),
        msgpack.packb(fields, use_bin_type=True),
        msgpack.packb(fields_doc, use_bin_type=True),
    ):
        with contextlib.suppress(RemoteMetadataError):
            RemoteLogSegmentMetadata.decode(hostile)


def test_metadata_refusals() -> None:
    tp = TopicIdPartition(uuid.uuid4(), 0)
    sid = uuid.uuid4()
    ok = {"start": 10, "end": 20, "ts": 5, "size": 100, "epochs": ((1, 10), (3, 15)), "created": 0}
    RemoteLogSegmentMetadata(sid, tp, ok["start"], ok["end"], ok["ts"], ok["size"], ok["epochs"], ok["created"])  # type: ignore[arg-type]
    for bad, match in (
        ({"start": -1}, "offsets"),
        ({"end": 9}, "offsets"),
        ({"end": 10 + INT32_MAX + 1}, "overflow"),
        ({"ts": -2}, "max timestamp"),
        ({"size": 60}, "shorter"),
        ({"epochs": ()}, "0 leader epochs"),
        ({"epochs": ((1, 10), (1, 15))}, "not ascending"),
        ({"epochs": ((1, 10), (3, 10))}, "not ascending"),
        ({"epochs": ((1, 9),)}, "not ascending"),
        ({"epochs": ((1, 21),)}, "not ascending"),
        ({"epochs": ((-1, 10),)}, "not ascending"),
        ({"created": -1}, "created_ms"),
        ({"created": 10**13}, "created_ms"),
    ):
        v = {**ok, **bad}
        with pytest.raises(RemoteMetadataError, match=match):
            RemoteLogSegmentMetadata(sid, tp, v["start"], v["end"], v["ts"], v["size"], v["epochs"], v["created"])  # type: ignore[arg-type]
    with pytest.raises(RemoteMetadataError, match="larger than"):
        RemoteLogSegmentMetadata.decode(b"\x90" * (METADATA_BYTES_MAX + 1))
    good = RemoteLogSegmentMetadata(sid, tp, 10, 20, 5, 100, ((1, 10),), 7).encode()
    doc = msgpack.unpackb(good)
    for i, value in ((0, 1), (0, False), (1, b"short"), (3, True), (3, 1.5), (8, -1), (8, True), (9, [1])):
        changed = list(doc)
        changed[i] = value
        with pytest.raises(RemoteMetadataError):
            RemoteLogSegmentMetadata.decode(msgpack.packb(changed, use_bin_type=True))
