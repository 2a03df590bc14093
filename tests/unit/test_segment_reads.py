"""Fetches of tiered segments read in aligned chunks (partlog.fetch.reads,
FetchService): one GET per chunk through the cache, and a segment whose
bytes were damaged or replaced fails closed, for its partition alone.

Real store, real batches: a partition's batches are swapped to a segment
(``swap_to_segment``), another partition's stay in their WAL object, and
both are fetched together through the broker's read code."""

from __future__ import annotations

import asyncio
import itertools
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from partlog import CreateTopicAndPartitionsRequest, Errors, FindBatchRequest, MetadataStore, TopicIdPartition
from partlog.broker.fetch_service import FetchService, NewData
from partlog.fetch.reads import ObjectRead, RangeCache, assemble, join_chunks, plan_reads, segment_chunks
from partlog.kafka.records import BatchInfo
from partlog.produce.pipeline import ProduceConfig, ProducePipeline, SendCommit, Upload
from partlog.store import SegmentSwap
from partlog.wal.localdir_store import LocalDirStore
from partlog.wal.objectstore import ObjectNotFoundError, RangeNotSatisfiableError
from tests.batches import build_batch

T0 = 1_700_000_000_000
BIG = 1 << 30
CHUNK = 4096
SEGMENT_KEY = f"tiered/00/{uuid.UUID(int=1)}/0/{0:020d}-{T0:013d}-{uuid.UUID(int=2)}.log"
_KEYS = itertools.count()


class Counter:
    def __init__(self) -> None:
        self.n = 0

    def inc(self) -> None:
        self.n += 1

    def set(self, _: float) -> None:
        pass


class MemStore:
    """The reads an object store answers, over a dict (S3's range rules)."""

    def __init__(self, objects: dict[str, bytes]) -> None:
        self.objects = objects
        self.gets: list[tuple[str, int, int]] = []

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        self.gets.append((key, offset, length))
        if key not in self.objects:
            raise ObjectNotFoundError(f"{key}: gone", key=key)
        data = self.objects[key]
        if offset >= len(data):
            raise RangeNotSatisfiableError(f"{key}: {offset} past {len(data)}", key=key)
        return data[offset : offset + length]


def _service(objects: MemStore, chunk_bytes: int = CHUNK) -> FetchService:
    metrics = SimpleNamespace(fetch_cache_hits=Counter(), fetch_gets=Counter(), cache_bytes=Counter())
    none = cast(Any, None)
    return FetchService(
        1, "az1", none, none, cast(Any, objects), RangeCache(64 * chunk_bytes or BIG), data=NewData(), peers=none,
        metrics=cast(Any, metrics), metadata=none, as_leader=none, clock=none, segment_read_chunk_bytes=chunk_bytes,
    )  # fmt: skip


def _setup(tmp_path: Path) -> tuple[MetadataStore, dict[str, bytes], list[TopicIdPartition]]:
    """Two partitions of 30 batches each in three WAL objects; partition
    0's swapped to one segment.  The objects by key (the segment's too)."""
    store = MetadataStore.open(tmp_path / "meta", sync=False, clock=lambda: T0 + 5)
    tid = uuid.uuid4()
    store.create_topic_and_partitions([CreateTopicAndPartitionsRequest(tid, "t", 2)])
    tps = [TopicIdPartition(tid, p) for p in range(2)]
    local = LocalDirStore(tmp_path / "objects", fsync=False)
    objects: dict[str, bytes] = {}
    for round_ in range(3):
        p = ProducePipeline(1, ProduceConfig(), leader_of=lambda tp: 1, rand_hex=lambda: f"{next(_KEYS):x}")
        items = [(tps[i % 2], build_batch(1 + i % 3, timestamp_ms=T0 + i, value_bytes=700)) for i in range(20)]
        p.produce(0, items, T0 + round_)
        [up] = p.flush(T0)
        assert isinstance(up, Upload)
        objects[up.key] = up.data
        local.put(up.key, up.data)
        [c] = p.upload_done(up.segment_id, T0)
        assert isinstance(c, SendCommit)
        assert {r.errors for r in store.commit_file(c.key, 1, c.file_size, list(c.requests))} == {Errors.NONE}
    records = _fetch_now(store, MemStore(objects), tps, 0, 0)
    hwm = store.high_watermark(tps[0])
    segment = records[tps[0]][1]
    swap = SegmentSwap(tps[0], 0, hwm - 1, SEGMENT_KEY, len(segment), 1)
    assert store.swap_to_segment(swap).error == Errors.NONE
    objects[SEGMENT_KEY] = segment
    return store, objects, tps


def _fetch_now(
    store: MetadataStore, objects: MemStore, tps: list[TopicIdPartition], offset: int, chunk_bytes: int
) -> dict[TopicIdPartition, tuple[Errors, bytes]]:
    """Partition 0 from ``offset``, the others from 0, in one fetch."""
    found = store.find_batches([FindBatchRequest(tp, offset if tp.partition == 0 else 0, BIG) for tp in tps], BIG)
    by_tp: dict[TopicIdPartition, list[BatchInfo]] = {tp: list(f.batches) for tp, f in zip(tps, found, strict=True)}
    service = _service(objects, chunk_bytes)
    reads = plan_reads([b for bs in by_tp.values() for b in bs])

    async def read_all() -> list[tuple[int, bytes] | BaseException]:
        return list(await asyncio.gather(*(service._read_planned(r) for r in reads)))

    got = asyncio.run(read_all())
    out = assemble(by_tp, {r.key: g for r, g in zip(reads, got, strict=True)})
    return {d.topic_id_partition: (d.error, d.records) for d in out}


def _batches(records: bytes) -> list[bytes]:
    out, pos = [], 0
    while pos < len(records):
        size = int.from_bytes(records[pos + 8 : pos + 12], "big") + 12
        out.append(records[pos : pos + size])
        pos += size
    return out


@given(offset=st.integers(0, 10_000), length=st.integers(1, 50_000), chunk=st.integers(1, 20_000))
def test_chunks_are_aligned_and_cover_the_read_exactly(offset: int, length: int, chunk: int) -> None:
    read = ObjectRead("k", offset, length)
    chunks = segment_chunks(read, chunk)
    assert all(c.fill.offset % chunk == 0 and c.fill.length == chunk for c in chunks)
    assert all(c.fill.offset <= c.want_offset <= c.want_offset + c.want_length <= c.fill.offset + chunk for c in chunks)
    assert chunks[0].want_offset == offset
    assert sum(c.want_length for c in chunks) == length
    assert all(a.want_offset + a.want_length == b.want_offset for a, b in itertools.pairwise(chunks))
    data = bytes(range(256)) * 400
    parts: list[bytes | BaseException] = [data[c.want_offset : c.want_offset + c.want_length] for c in chunks]
    assert join_chunks(read, chunks, parts) == (offset, data[offset : offset + length])


def test_a_segment_is_read_in_chunks_through_the_cache(tmp_path: Path) -> None:
    store, objects, tps = _setup(tmp_path)
    mem = MemStore(objects)
    plain = _fetch_now(store, MemStore(objects), tps, 0, 0)
    chunked = _fetch_now(store, mem, tps, 0, CHUNK)
    assert chunked == plain and {e for e, _ in chunked.values()} == {Errors.NONE}
    size = len(objects[SEGMENT_KEY])
    segment_gets = [g for g in mem.gets if g[0] == SEGMENT_KEY]
    # Every chunk of the segment once, aligned; the WAL objects as before.
    assert sorted(segment_gets) == [(SEGMENT_KEY, o, CHUNK) for o in range(0, size, CHUNK)]
    assert len(mem.gets) - len(segment_gets) == 3

    async def catch_up() -> None:
        """A consumer's fetches, one after another, on one broker."""
        service = _service(mem, CHUNK)
        offset, gets = 0, []
        while offset < store.high_watermark(tps[0]):
            [found] = store.find_batches([FindBatchRequest(tps[0], offset, 1500)], 1500)
            [r] = plan_reads(list(found.batches))
            before = len(mem.gets)
            got = await service._read_planned(r)
            assert not isinstance(got, BaseException) and len(got[1]) == r.length
            while service._inflight:  # the chunk read ahead lands before the next fetch
                await asyncio.sleep(0.001)
            gets.append(len(mem.gets) - before)
            offset = found.batches[-1].metadata.last_offset + 1
        # The first fetch reads its chunk and the next one ahead; every later
        # fetch finds its chunk cached and reads at most the next one ahead.
        assert gets[0] == 2 and all(n <= 1 for n in gets[1:]) and len(gets) > 2 * sum(gets[1:])

    mem.gets.clear()
    asyncio.run(catch_up())
    every_chunk_once = [(SEGMENT_KEY, o, CHUNK) for o in range(0, size, CHUNK)]
    assert sorted(g for g in mem.gets if g[0] == SEGMENT_KEY) == every_chunk_once


def test_no_read_ahead_without_room_in_the_cache() -> None:
    none = cast(Any, None)
    metrics = cast(Any, SimpleNamespace())
    small = FetchService(
        1, "a", none, none, none, RangeCache(7 * CHUNK), data=NewData(), peers=none, metrics=metrics,
        metadata=none, as_leader=none, clock=none, segment_read_chunk_bytes=CHUNK,
    )  # fmt: skip
    assert small.chunk_bytes == 0


_MUTATIONS = st.one_of(
    st.tuples(st.just("truncate"), st.integers(0, 1 << 20)),
    st.tuples(st.just("flip"), st.integers(0, 1 << 20), st.integers(1, 255)),
    st.tuples(st.just("garbage"), st.integers(0, 1 << 20), st.binary(min_size=1, max_size=300)),
    st.tuples(st.just("append"), st.binary(min_size=1, max_size=5000)),
    st.tuples(st.just("missing")),
)


def _mutate(data: bytes, m: tuple[Any, ...]) -> bytes | None:
    kind = m[0]
    if kind == "truncate":
        return data[: m[1] % (len(data) + 1)]
    if kind == "flip":
        i = m[1] % len(data)
        return data[:i] + bytes([data[i] ^ m[2]]) + data[i + 1 :]
    if kind == "garbage":
        i, junk = m[1] % len(data), bytes(m[2])
        return data[:i] + junk + data[i + len(junk) :]
    if kind == "append":
        return data + bytes(m[1])
    return None


def test_a_damaged_segment_fails_closed_for_its_partition_alone(tmp_path: Path) -> None:
    """Whatever happened to the segment's bytes, a fetch answers whole
    batches of the log, in order, from the offset asked (possibly none),
    or nothing with CORRUPT_MESSAGE (the bytes are wrong) or
    KAFKA_STORAGE_ERROR (the object is gone); never other bytes.  The other
    partition of the same fetch, in a WAL object, is served whole."""
    store, objects, tps = _setup(tmp_path)
    clean = _fetch_now(store, MemStore(objects), tps, 0, 0)
    good = _batches(clean[tps[0]][1])
    first_offsets = [int.from_bytes(b[:8], "big") for b in good]

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(mutation=_MUTATIONS, start=st.integers(0, len(good) - 1), chunk=st.sampled_from([0, 512, CHUNK, 1 << 20]))
    def check(mutation: tuple[Any, ...], start: int, chunk: int) -> None:
        damaged = dict(objects)
        data = _mutate(objects[SEGMENT_KEY], mutation)
        if data is None:
            del damaged[SEGMENT_KEY]
        else:
            damaged[SEGMENT_KEY] = data
        got = _fetch_now(store, MemStore(damaged), tps, first_offsets[start], chunk)
        assert got[tps[1]] == clean[tps[1]]
        error, records = got[tps[0]]
        served = _batches(records)
        assert served == good[start : start + len(served)]
        if error == Errors.NONE:
            assert served or data is None or len(data) > 0
        else:
            assert not served and error in (Errors.CORRUPT_MESSAGE, Errors.KAFKA_STORAGE_ERROR)
        if data is None:
            assert error == Errors.KAFKA_STORAGE_ERROR
        if data is not None and data[: len(objects[SEGMENT_KEY])] == objects[SEGMENT_KEY]:
            assert (error, served) == (Errors.NONE, good[start:])  # appended bytes are never read

    check()
