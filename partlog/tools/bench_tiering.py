"""``partlog bench tiering``: a catch-up read of one partition's history,
from tiered segments against from WAL objects, in one run (issue 31).

One in-process broker on a SeaweedFS S3 server started on 127.0.0.1, two
topics of ``partitions`` partitions: ``wal`` (tiering off) and ``tiered``
(``remote.storage.enable``, ``segment.bytes`` of ``segment_mib``, 64 MiB
by default, the most the builder makes).  Written in rounds: each
round, partition 0 of both topics gets ``fragment_kib`` of records and every
other partition one record of ``others_kib``, then the producer flushes, so
each round is its own WAL object, shared by all the partitions of both
topics.  A WAL object holds each partition's batches contiguously, so what
a WAL read of partition 0 pays for is how many objects its history spans
(``mib`` / ``fragment_kib``), not the others' bytes, which are kept small
to keep the run short.

Once the builder has closed every segment it can (the tail left is less
than a segment), partlog's consumer (fetches of ``partition_fetch_kib``,
Kafka's default 1 MiB) reads partition 0 of each topic from offset 0 to the
end of the last segment, on a cold fetch cache:
GET requests per 4 MiB read (the broker's ``partlog_fetch_gets``; local
segment copies are off, so every segment byte comes from the store) and MiB/s
for both, their ratio, and verdicts against the issue's targets (GETs <= 1
per 4 MiB from segments; throughput >= 3x the WAL read).  Bounded: ``mib``
at most ``MIB_MAX``, and every phase ends by ``deadline_s`` (TimeoutError).
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
import uuid
from collections.abc import Callable
from typing import Any

from partlog.broker.server import Broker, BrokerConfig
from partlog.client.consumer import Consumer
from partlog.client.producer import Producer
from partlog.controller.cluster_meta import StaticMetadata
from partlog.fetch.reads import CACHE_BYTES_MAX_DEFAULT, SEGMENT_READ_CHUNK_BYTES_DEFAULT, RangeCache
from partlog.kafka.records import TopicIdPartition
from partlog.produce.pipeline import ProduceConfig
from partlog.wal.objectstore import ObjectStore

MiB = 1 << 20
KiB = 1 << 10
MIB_MAX = 16 * 1024
PARTITIONS_MAX = 256
# The builder makes segments of at most 64 MiB (SEGMENT_BYTES_BUILD_MAX).
SEGMENT_MIB_MAX = 64
# No new segment for this long: the builder has closed all it can.
SETTLED_S = 10.0
# Issue 31's targets for the catch-up read.
GETS_PER_4_MIB_TARGET = 1.0
THROUGHPUT_RATIO_TARGET = 3.0
RECORD_BYTES = 64 * KiB
TIERING_INTERVAL_MS = 200
COMMIT_INTERVAL_MS = 10


def run(
    *,
    mib: int = 1024,
    partitions: int = 32,
    segment_mib: int = 64,
    fragment_kib: int = 256,
    others_kib: int = 1,
    partition_fetch_kib: int = 1024,
    chunk_bytes: int = SEGMENT_READ_CHUNK_BYTES_DEFAULT,
    deadline_s: float = 3600.0,
    objects: ObjectStore | None = None,
    progress: Callable[[str], None] = lambda m: None,
) -> dict[str, Any]:
    """The measurement (module doc); ``objects``: a store to use instead of
    starting SeaweedFS (the tests pass one)."""
    if not 1 <= mib <= MIB_MAX or not 2 <= partitions <= PARTITIONS_MAX:
        raise ValueError(f"mib must be in [1, {MIB_MAX}] and partitions in [2, {PARTITIONS_MAX}]")
    if not 1 <= segment_mib <= SEGMENT_MIB_MAX:
        raise ValueError(f"segment_mib must be in [1, {SEGMENT_MIB_MAX}]")
    if fragment_kib < 1 or others_kib < 1 or partition_fetch_kib < 1 or chunk_bytes < 0:
        raise ValueError("sizes must be positive (chunk_bytes >= 0)")
    server = None
    if objects is None:
        from partlog.util.seaweedfs import ACCESS_KEY_ID, SECRET_ACCESS_KEY, s3_client, start_seaweedfs
        from partlog.wal.s3_store import S3Config, S3Store

        progress("starting SeaweedFS on 127.0.0.1")
        # Room for the WAL objects and the segments of both topics.
        server = start_seaweedfs(volume_size_limit_mb=64, max_volumes=max(64, mib // 16))
        bucket = f"partlog-bench-{uuid.uuid4().hex[:12]}"
        s3_client(server.endpoint_url).create_bucket(Bucket=bucket)
        objects = S3Store(
            S3Config(bucket, server.endpoint_url, access_key_id=ACCESS_KEY_ID, secret_access_key=SECRET_ACCESS_KEY)
        )
    try:
        with tempfile.TemporaryDirectory(prefix="partlog-bench-tiering-") as data_dir:
            return asyncio.run(
                _run(
                    objects, data_dir, mib, partitions, segment_mib * MiB, fragment_kib * KiB, others_kib * KiB,
                    partition_fetch_kib * KiB, chunk_bytes, time.monotonic() + deadline_s, progress,
                )
            )  # fmt: skip
    finally:
        if server is not None:
            server.stop()


async def _run(
    objects: ObjectStore,
    data_dir: str,
    mib: int,
    partitions: int,
    segment_bytes: int,
    fragment_bytes: int,
    others_bytes: int,
    partition_fetch_bytes: int,
    chunk_bytes: int,
    deadline: float,
    progress: Callable[[str], None],
) -> dict[str, Any]:
    meta = StaticMetadata.generate(azs=1, brokers_per_az=1, topics={"wal": partitions, "tiered": partitions})
    config = BrokerConfig(
        1, "az1", os.path.join(data_dir, "b1"), sync=False,
        produce=ProduceConfig(commit_interval_ms=COMMIT_INTERVAL_MS),
        tiering_interval_ms=TIERING_INTERVAL_MS, segment_read_chunk_bytes=chunk_bytes,
        local_segment_bytes_per_partition=0,  # every segment read from the store
    )  # fmt: skip
    broker = Broker(config, meta, objects)
    await broker.start()
    broker.set_metadata(meta.with_ports({1: broker.port}))
    try:
        topics = {t.name: t.topic_id for t in meta.topics()}
        broker.alter_topic_configs(topics["tiered"], {"remote.storage.enable": "true", "segment.bytes": segment_bytes})
        rounds = max(1, mib * MiB // fragment_bytes)
        started = time.monotonic()
        await _write(broker, topics, partitions, rounds, fragment_bytes, others_bytes, deadline, progress)
        write_s = time.monotonic() - started
        tiered_tp = TopicIdPartition(topics["tiered"], 0)
        progress("waiting for the builder to close every segment it can")
        segments = await _settled(broker, tiered_tp, deadline)
        if not segments:
            raise ValueError(f"nothing tiered: {mib} MiB is less than a segment of {segment_bytes // MiB} MiB")
        end = segments[-1].end_offset + 1
        cases = {}
        for name in ("wal", "tiered"):
            progress(f"catch-up read of {name} partition 0, offsets [0, {end})")
            tp = TopicIdPartition(topics[name], 0)
            cases[name] = await _read(broker, tp, end, partition_fetch_bytes, deadline)
        wal, tiered = cases["wal"], cases["tiered"]
        ratio = tiered["mib_per_s"] / wal["mib_per_s"] if wal["mib_per_s"] else 0.0
        return {
            "mib": mib,
            "partitions": partitions,
            "segment_mib": segment_bytes // MiB,
            "fragment_kib": fragment_bytes // KiB,
            "partition_fetch_kib": partition_fetch_bytes // KiB,
            "chunk_bytes": chunk_bytes,
            "rounds": rounds,
            "write_s": write_s,
            "segments": len(segments),
            "segment_bytes_mean": sum(s.size for s in segments) / len(segments) if segments else 0,
            "wal": wal,
            "tiered": tiered,
            "throughput_ratio": ratio,
            "gets_per_4_mib_target": GETS_PER_4_MIB_TARGET,
            "throughput_ratio_target": THROUGHPUT_RATIO_TARGET,
            "gets_ok": tiered["gets_per_4_mib"] <= GETS_PER_4_MIB_TARGET,
            "throughput_ok": ratio >= THROUGHPUT_RATIO_TARGET,
        }
    finally:
        await broker.stop()


def _check(deadline: float, what: str) -> None:
    if time.monotonic() > deadline:
        raise TimeoutError(f"bench tiering: past the deadline during {what}")


async def _write(
    broker: Broker,
    topics: dict[str, uuid.UUID],
    partitions: int,
    rounds: int,
    fragment_bytes: int,
    others_bytes: int,
    deadline: float,
    progress: Callable[[str], None],
) -> None:
    """``rounds`` rounds, each flushed before the next (one WAL object each)."""
    producer = Producer(("127.0.0.1", broker.port), linger_ms=1, batch_bytes_max=max(fragment_bytes, 64 * KiB) + KiB)
    await producer.start()
    record = os.urandom(min(RECORD_BYTES, fragment_bytes))
    other = os.urandom(others_bytes)
    try:
        for i in range(rounds):
            _check(deadline, "the writes")
            futures = []
            for topic_id in topics.values():
                tp0 = TopicIdPartition(topic_id, 0)
                futures += [producer.send(tp0, record) for _ in range(max(1, fragment_bytes // len(record)))]
                futures += [producer.send(TopicIdPartition(topic_id, p), other) for p in range(1, partitions)]
            await producer.flush()
            await asyncio.gather(*futures)
            if i % 256 == 255:
                progress(f"wrote {i + 1} of {rounds} rounds")
    finally:
        await producer.close()


async def _settled(broker: Broker, tp: TopicIdPartition, deadline: float) -> list[Any]:
    """The partition's segments once no new one appeared for ``SETTLED_S``
    (the builder closes one per period while a whole one is left)."""
    rows = broker.store.segments(tp)
    since = time.monotonic()
    while time.monotonic() - since < SETTLED_S:
        _check(deadline, "tiering")
        await asyncio.sleep(0.2)
        now = broker.store.segments(tp)
        if len(now) != len(rows):
            rows, since = now, time.monotonic()
    return rows


async def _read(
    broker: Broker, tp: TopicIdPartition, end: int, partition_fetch_bytes: int, deadline: float
) -> dict[str, Any]:
    """Partition ``tp`` from offset 0 to ``end`` on a cold cache: bytes, GETs, time."""
    broker.fetches.cache = RangeCache(broker.config.fetch_cache_bytes_max or CACHE_BYTES_MAX_DEFAULT)
    gets0, hits0 = broker.stats.fetch_gets, broker.metrics.fetch_cache_hits._value.get()
    consumer = Consumer(("127.0.0.1", broker.port), max_wait_ms=50, partition_max_bytes=partition_fetch_bytes)
    await consumer.start()
    consumer.assign([tp])
    n = read_bytes = 0
    started = time.monotonic()
    try:
        while n < end:
            _check(deadline, "the reads")
            for r in await consumer.poll():
                if r.offset >= end:
                    break
                assert r.offset == n, (r.offset, n)  # every record once, in order
                n += 1
                read_bytes += len(r.value or b"")
    finally:
        await consumer.close()
    seconds = time.monotonic() - started
    gets = broker.stats.fetch_gets - gets0
    return {
        "records": n,
        "mib": read_bytes / MiB,
        "seconds": seconds,
        "mib_per_s": read_bytes / MiB / seconds if seconds else 0.0,
        "gets": gets,
        "gets_per_4_mib": gets / (read_bytes / (4 * MiB)) if read_bytes else 0.0,
        "cache_hits": int(broker.metrics.fetch_cache_hits._value.get() - hits0),
    }


def print_report(result: dict[str, Any]) -> None:
    r = result
    print(
        f"catch-up read of {r['mib']} MiB of partition 0, {r['partitions']} partitions a topic sharing the WAL "
        f"objects ({r['rounds']} objects, {r['fragment_kib']} KiB of partition 0 each), fetches of "
        f"{r['partition_fetch_kib']} KiB, segment read chunks of {r['chunk_bytes'] // KiB} KiB"
    )
    mean_mib = r["segment_bytes_mean"] / MiB
    print(f"  segments: {r['segments']}, {mean_mib:.1f} MiB on average; writes took {r['write_s']:.0f} s")
    print(f"  {'source':8} {'MiB':>8} {'seconds':>8} {'MiB/s':>8} {'GETs':>7} {'GETs/4MiB':>10} {'cache hits':>10}")
    for name in ("wal", "tiered"):
        c = r[name]
        print(
            f"  {name:8} {c['mib']:>8.1f} {c['seconds']:>8.2f} {c['mib_per_s']:>8.1f} {c['gets']:>7} "
            f"{c['gets_per_4_mib']:>10.2f} {c['cache_hits']:>10}"
        )
    verdict = {True: "ok", False: "MISSED"}
    print(
        f"  GETs per 4 MiB from segments {r['tiered']['gets_per_4_mib']:.2f} (target <= "
        f"{r['gets_per_4_mib_target']:.0f}): {verdict[r['gets_ok']]}"
    )
    print(
        f"  throughput tiered / WAL {r['throughput_ratio']:.2f}x (target >= {r['throughput_ratio_target']:.0f}x): "
        f"{verdict[r['throughput_ok']]}"
    )
