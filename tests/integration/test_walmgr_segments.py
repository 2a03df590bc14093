"""walmgr's gate for tiered segments (docs/design/tiered-gate.md) on
SeaweedFS with a real broker: orphans (swaps the leader refused past the
swap deadline) and a segment dropped by DeleteRecords are deleted only past
the segment age gate, ``.log`` first and its indexes in the next cycle; an
index left alone is deleted past the gate unasked; the swapped live segment
is kept (its leader says referenced); keys naming another cluster, and
keys that parse as nothing, are INVALID and never deleted.

walmgr's clock is moved ahead past the gate for the second half (the swap
deadline is five minutes): the live segment is then past the gate too,
which is the point: only the brokers' answers keep it."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from partlog.controller.cluster_meta import StaticMetadata
from partlog.kafka.records import DeleteRecordsRequest, TopicIdPartition
from partlog.runtime import SYSTEM_CLOCK, SkewedClock
from partlog.store.layout import SEGMENT_SWAP_DEADLINE_MS_DEFAULT
from partlog.tiered.remote_storage import ObjectStoreRsm, RemoteLogSegmentMetadata
from partlog.wal.key import parse_segment_key, shard_of
from partlog.wal.objectstore import iter_objects
from partlog.wal.s3_store import S3Store
from tests.integration.test_tiering import _broker, _covered, _produce, _until
from tests.tiered_cases import sample_segment
from walmgr.config import WalmgrConfig
from walmgr.daemon import Walmgr
from walmgr.model import State

SKEW_MS = 1_000
GRACE_MS = 1_000
GATE_MS = SEGMENT_SWAP_DEADLINE_MS_DEFAULT + SKEW_MS + GRACE_MS
OTHER_CLUSTER = uuid.UUID("0e0e0e0e-0000-4000-8000-0000000e0e0e")


def _tiered(store: S3Store) -> set[str]:
    return {o.key for o in iter_objects(store, "tiered/")}


def _stem(key: str) -> str:
    return parse_segment_key(key).stem


async def _walmgr(tmp_path: Path, store: S3Store, meta: StaticMetadata, ahead_ms: int = 0) -> Walmgr:
    cfg = WalmgrConfig.for_cli(
        "file://" + str(tmp_path / "unused"),  # the store is given below
        str(tmp_path / "registry"),
        max_clock_skew_ms=SKEW_MS,
        grace_ms=GRACE_MS,
        full_scan_interval_ms=1,
    )
    mgr = Walmgr(cfg, store=store, metadata=meta, clock=SkewedClock(SYSTEM_CLOCK, ahead_ms))
    await mgr.start()
    return mgr


@pytest.mark.timeout(300)
def test_the_gate_deletes_orphans_and_dropped_segments_never_live_or_foreign_ones(
    tmp_path: Path, s3_bucket: S3Store
) -> None:
    async def main() -> None:
        meta = StaticMetadata.generate(azs=1, brokers_per_az=1, topics={"t": 1})
        broker = _broker(tmp_path, meta, s3_bucket)
        await broker.start()
        meta = meta.with_ports({1: broker.port})
        broker.set_metadata(meta)
        [topic] = meta.topics()
        tp = TopicIdPartition(topic.topic_id, 0)
        cluster = meta.cluster_id
        assert cluster is not None
        try:
            # Orphans: the leader's store refuses the swaps (its clock past the
            # swap deadline), then swaps the range under a new key.
            await _produce(broker, tp, [b"k1", b"k2"])
            store_clock = broker.store._clock
            broker.store._clock = lambda: store_clock() + SEGMENT_SWAP_DEADLINE_MS_DEFAULT + 60_000
            broker.alter_topic_configs(topic.topic_id, {"remote.storage.enable": "true", "segment.ms": 1})
            refused = broker.metrics.tiered_swaps.labels(outcome="commit_deadline_exceeded")
            await _until(lambda: refused._value.get() >= 1, "a swap refused past the deadline")
            broker.store._clock = store_clock
            await _until(lambda: _covered(broker.store.segments(tp)) == 2, "the range swapped under a new key")
            [row] = broker.store.segments(tp)
            live = row.object_key
            assert parse_segment_key(live).cluster_id == cluster
            orphan_logs = {k for k in _tiered(s3_bucket) if k.endswith(".log")} - {live}
            assert orphan_logs and broker.store.referenced_files(orphan_logs) == set()

            # A clone's complete segment (same topic id, another cluster), an
            # index whose copy stopped there, keys that parse as nothing.
            now = SYSTEM_CLOCK.wall_ms()
            segment = sample_segment(2)
            foreign_meta = RemoteLogSegmentMetadata.for_segment(uuid.uuid4(), tp, segment, now - 3_600_000)
            foreign = ObjectStoreRsm(s3_bucket, cluster_id=OTHER_CLUSTER)
            foreign.copy_log_segment_data(foreign_meta, segment)
            foreign_keys = {k for k in _tiered(s3_bucket) if str(OTHER_CLUSTER) in k}
            assert len(foreign_keys) == 3
            lone_meta = RemoteLogSegmentMetadata.for_segment(uuid.uuid4(), tp, segment, now)
            lone_index = ObjectStoreRsm(s3_bucket, cluster_id=cluster).segment_key(lone_meta, ".index")
            s3_bucket.put(lone_index, segment.offset_index)
            old_layout = f"tiered/{shard_of(f'{tp.topic_id}/0')}/{tp.topic_id}/0/" + live.rsplit("/", 1)[1]
            hostile = {"tiered/zz/garbage": b"x", old_layout: segment.log, live + ".bak": segment.log}
            for k, data in hostile.items():
                s3_bucket.put(k, data)
            keep_forever = foreign_keys | set(hostile)

            # Before the gate (walmgr's clock true): recorded, nothing deleted.
            everything = _tiered(s3_bucket)
            mgr = await _walmgr(tmp_path, s3_bucket, meta)
            try:
                r = await mgr.cycle()
                reg = mgr.registry
                assert reg is not None
                assert r.segments is not None and r.segments.keys_listed == len(everything)
                assert _tiered(s3_bucket) == everything
                for k in everything - keep_forever:
                    rec = reg.get(k)
                    assert rec is not None and rec.state == State.TRACKED and rec.partitions == (tp,), (k, rec)
                for k in keep_forever:
                    rec = reg.get(k)
                    assert rec is not None and rec.state == State.INVALID, (k, rec)
                assert str(OTHER_CLUSTER) in reg.get(min(foreign_keys)).note  # type: ignore[union-attr]
            finally:
                await mgr.stop()

            # Past the gate: the orphans' .log and the lone index go; the live
            # segment is asked about and kept; the orphans' indexes wait a cycle.
            mgr = await _walmgr(tmp_path, s3_bucket, meta, ahead_ms=GATE_MS + 60_000)
            try:
                reg = mgr.registry
                assert reg is not None
                r = await mgr.cycle()
                left = _tiered(s3_bucket)
                assert not orphan_logs & left and lone_index not in left
                orphan_stems = {_stem(o) for o in orphan_logs}
                orphan_indexes = {k for k in everything - keep_forever if _stem(k) in orphan_stems} - orphan_logs
                assert orphan_indexes and orphan_indexes <= left
                assert live in left and keep_forever <= left
                live_rec = reg.get(live)
                assert live_rec is not None and live_rec.state == State.TRACKED
                assert live_rec.note.startswith("referenced: broker 1")
                r = await mgr.cycle()
                assert not orphan_indexes & _tiered(s3_bucket)
                assert (
                    _tiered(s3_bucket)
                    == {k for k in everything - keep_forever if _stem(k) == _stem(live)} | keep_forever
                )

                # DeleteRecords: the live segment's last reference goes; it is
                # deleted through the same gate, .log first.
                await asyncio.to_thread(broker.store.delete_records, [DeleteRecordsRequest(tp, -1)])
                assert broker.store.segments(tp) == [] and broker.store.referenced_files({live}) == set()
                await mgr.cycle()
                assert live not in _tiered(s3_bucket)
                await mgr.cycle()
                assert _tiered(s3_bucket) == keep_forever
                assert all(getattr(reg.get(k), "state", None) == State.INVALID for k in keep_forever)
                assert mgr.metrics is not None
                text = generate_latest(mgr.metrics.prom).decode()
                deleted = len(everything) - len(keep_forever)
                assert f"walmgr_segment_deleted_files_total {float(deleted)}" in text, text
            finally:
                await mgr.stop()
            assert broker.store.check() == []
        finally:
            await broker.stop()

    asyncio.run(main())
