"""The sans-IO fetch path on a real MetadataStore and real segments: one read
per object, CRC checks, the stored header spliced in."""

from __future__ import annotations

import itertools
import uuid
from pathlib import Path

from kafka.record.default_records import DefaultRecordBatch

from partlog import CreateTopicAndPartitionsRequest, Errors, FindBatchRequest, MetadataStore, TopicIdPartition
from partlog.fetch.reads import RangeCache, assemble, plan_reads
from partlog.kafka.records import BatchInfo
from partlog.produce.pipeline import ProduceConfig, ProducePipeline, SendCommit, Upload
from partlog.wal.localdir_store import LocalDirStore
from tests.batches import build_batch

T0 = 1_700_000_000_000
BIG = 1 << 30
_KEYS = itertools.count()  # unique object keys across pipelines


def _setup(
    tmp_path: Path, log_append_time: bool = False
) -> tuple[MetadataStore, LocalDirStore, list[TopicIdPartition]]:
    store = MetadataStore.open(tmp_path / "meta", sync=False, clock=lambda: T0 + 5)
    tid = uuid.uuid4()
    store.create_topic_and_partitions([CreateTopicAndPartitionsRequest(tid, "t", 3)])
    if log_append_time:
        store.alter_topic_configs(tid, {"message.timestamp.type": "LogAppendTime"})
    return store, LocalDirStore(tmp_path / "objects", fsync=False), [TopicIdPartition(tid, p) for p in range(3)]


def _produce(store: MetadataStore, objects: LocalDirStore, items: list[tuple[TopicIdPartition, bytes]]) -> None:
    """Through the real pipeline: one segment, uploaded, committed."""
    p = ProducePipeline(1, ProduceConfig(), leader_of=lambda tp: 1, rand_hex=lambda: f"{next(_KEYS):x}")
    p.produce(0, items, T0)
    [up] = p.flush(T0)
    assert isinstance(up, Upload)
    objects.put(up.key, up.data)
    [c] = p.upload_done(up.segment_id, T0)
    assert isinstance(c, SendCommit)
    resps = store.commit_file(c.key, 1, c.file_size, list(c.requests))
    assert {r.errors for r in resps} == {Errors.NONE}
    p.commit_done(c.segment_id, 1, resps, T0)


def _fetch(
    store: MetadataStore, objects: LocalDirStore, tps: list[TopicIdPartition], cache: RangeCache | None = None
) -> tuple[dict[TopicIdPartition, bytes], int]:
    found = store.find_batches([FindBatchRequest(tp, 0, BIG) for tp in tps], BIG)
    by_tp: dict[TopicIdPartition, list[BatchInfo]] = {tp: list(f.batches) for tp, f in zip(tps, found, strict=True)}
    reads = plan_reads([b for bs in by_tp.values() for b in bs])
    got: dict[str, tuple[int, bytes] | BaseException] = {}
    for r in reads:
        data = cache.get(r.key, r.offset, r.length) if cache else None
        if data is None:
            try:
                data = objects.get_range(r.key, r.offset, r.length)
            except Exception as e:
                got[r.key] = e
                continue
            if cache:
                cache.put(r.key, r.offset, data)
        got[r.key] = (r.offset, data)
    out = assemble(by_tp, got)
    errors = [d for d in out if d.error != Errors.NONE]
    assert not errors, errors
    return {d.topic_id_partition: d.records for d in out}, len(reads)


def test_fetch_serves_offsets_and_one_read_per_object(tmp_path: Path) -> None:
    store, objects, tps = _setup(tmp_path)
    _produce(store, objects, [(tps[i % 3], build_batch(2, timestamp_ms=T0 + i)) for i in range(9)])
    _produce(store, objects, [(tps[i % 2], build_batch(1, timestamp_ms=T0 + i)) for i in range(4)])
    records, reads = _fetch(store, objects, tps)
    assert reads == 2  # two objects, whatever the number of partitions and batches
    for tp in tps:
        offsets = []
        pos = 0
        data = records[tp]
        while pos < len(data):
            length = int.from_bytes(data[pos + 8 : pos + 12], "big")
            batch = DefaultRecordBatch(data[pos : pos + length + 12])
            assert batch.validate_crc()
            offsets += [r.offset for r in batch]
            pos += length + 12
        assert offsets == list(range(len(offsets))) and offsets  # contiguous from 0
    store.close()


def test_fetch_log_append_time_header_is_spliced_with_valid_crc(tmp_path: Path) -> None:
    store, objects, tps = _setup(tmp_path, log_append_time=True)
    _produce(store, objects, [(tps[0], build_batch(3, timestamp_ms=T0 - 1000))])
    records, _ = _fetch(store, objects, tps[:1])
    batch = DefaultRecordBatch(records[tps[0]])
    assert batch.validate_crc()
    assert batch.timestamp_type == 1 and [r.timestamp for r in batch] == [T0 + 5] * 3
    store.close()


def test_corrupt_object_is_not_served(tmp_path: Path) -> None:
    store, objects, tps = _setup(tmp_path)
    _produce(store, objects, [(tps[0], build_batch(1)), (tps[0], build_batch(1)), (tps[1], build_batch(1))])
    [key] = store.file_usage()
    data = bytearray(objects.get(key))
    second = 1 + len(build_batch(1)) + 50
    data[second] ^= 0xFF  # inside tps[0]'s second batch
    objects.put(key, bytes(data))
    found = store.find_batches([FindBatchRequest(tp, 0, BIG) for tp in tps[:2]], BIG)
    by_tp = {tp: list(f.batches) for tp, f in zip(tps[:2], found, strict=True)}
    [r] = plan_reads([b for bs in by_tp.values() for b in bs])
    out = assemble(by_tp, {key: (r.offset, objects.get_range(r.key, r.offset, r.length))})
    # tps[0]: the good first batch is served, the bad one is not.
    assert out[0].error == Errors.NONE and len(out[0].records) == len(build_batch(1))
    assert out[1].error == Errors.NONE and len(out[1].records) == len(build_batch(1))
    # Only the bad batch: CORRUPT_MESSAGE naming object and byte.
    bad = {tps[0]: by_tp[tps[0]][1:]}
    [d] = assemble(bad, {key: (r.offset, objects.get_range(r.key, r.offset, r.length))})
    assert d.error == Errors.CORRUPT_MESSAGE and f"{key} at byte {1 + len(build_batch(1))}" in (d.error_message or "")
    # A failed read is retriable.
    [d] = assemble(bad, {key: FileNotFoundError("gone")})
    assert d.error == Errors.KAFKA_STORAGE_ERROR and d.error.retriable
    store.close()


def test_range_cache() -> None:
    c = RangeCache(bytes_max=100)
    c.put("k", 10, b"a" * 50)
    assert c.get("k", 20, 10) == b"a" * 10 and c.get("k", 5, 10) is None and c.get("other", 10, 1) is None
    c.put("j", 0, b"b" * 60)  # evicts k
    assert c.get("k", 10, 1) is None and c.evictions == 1 and c.bytes == 60
    c.put("huge", 0, b"x" * 101)  # larger than the cache: not kept
    assert c.get("huge", 0, 1) is None and c.bytes == 60
