"""walmgr against real brokers: orphans are deleted, referenced objects never.

A replicated cluster on loopback (static metadata, short commit deadline)
with walmgr listening for notifications.  Orphans are real WAL segments
uploaded and never committed; other objects lose their references through
DeleteRecords.  Keys that are not WAL objects, and a sibling prefix, sit in
the same bucket.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from partlog.broker.server import Broker
from partlog.client.producer import Producer
from partlog.kafka.records import DeleteRecordsRequest
from partlog.runtime import SYSTEM_CLOCK, SkewedClock
from partlog.wal.key import make_wal_key
from partlog.wal.localdir_store import LocalDirStore
from tests.cluster_helpers import (
    Sent,
    check_exactly_once,
    consume_all,
    free_ports,
    produce,
    running_cluster,
    topic_partitions,
)
from tests.walmgr_helpers import listed, orphan
from walmgr.config import WalmgrConfig
from walmgr.daemon import Walmgr
from walmgr.model import State
from walmgr.registry import Registry, RegistryLockedError

DEADLINE_MS = 800
SKEW_MS = 100
GRACE_MS = 100
GATE_S = (DEADLINE_MS + SKEW_MS + GRACE_MS) / 1000


def referenced_keys(brokers: list[Broker]) -> set[str]:
    return {k for b in brokers for k in b.store.file_usage()}


@pytest.mark.timeout(180)
def test_orphans_are_deleted_and_referenced_objects_never(tmp_path: Path) -> None:
    objects = LocalDirStore(tmp_path / "objects", fsync=False)
    [port] = free_ports(1)
    cfg = WalmgrConfig.for_cli(
        "file://" + str(tmp_path / "objects"),
        str(tmp_path / "registry"),
        commit_deadline_ms=DEADLINE_MS,
        max_clock_skew_ms=SKEW_MS,
        grace_ms=GRACE_MS,
        listen=f"127.0.0.1:{port}",
        full_scan_interval_ms=1,
    )

    async def main() -> None:
        # The cluster's one clock: it jumps past the age gate instead of the
        # test sleeping through it (every broker and walmgr see the jump).
        clock = SkewedClock(SYSTEM_CLOCK)
        mgr = Walmgr(cfg, store=objects, clock=clock)
        await mgr.start()
        try:
            async with running_cluster(
                tmp_path,
                objects,
                partitions=3,
                replication_factor=3,
                commit_deadline_ms=DEADLINE_MS,
                walmgr_address=f"127.0.0.1:{port}",
                clock=clock,
            ) as (brokers, meta):
                mgr.metadata = meta
                tps = topic_partitions(meta)
                with pytest.raises(RegistryLockedError):
                    Registry(cfg.registry)  # one active manager
                producer = Producer(("127.0.0.1", brokers[0].port), az="az1", linger_ms=2)
                await producer.start()
                try:
                    sent = await produce([producer], tps, 200)
                finally:
                    await producer.close()
                assert not sent.failed
                notified = sum(b.walmgr_notifications_sent for b in brokers)
                orphans = {orphan(objects, [tps[i % 3]], cluster_id=meta.cluster_id) for i in range(5)}
                objects.put("wal/zz/not-a-wal-key.txt", b"x")
                objects.put("wal-old/00/0000000000001-1-ab.wal", b"sibling prefix")
                bad = str(make_wal_key("wal", int(time.time() * 1000) - 10_000, 1, "bad0"))
                objects.put(bad, b"\x01not a segment")
                # DeleteRecords on one partition: its older objects lose their references.
                leader = next(b for b in brokers if b.replicas.is_leader(tps[0]))
                await asyncio.to_thread(leader.store.delete_records, [DeleteRecordsRequest(tps[0], -1)])
                clock.skew_ms += round((GATE_S + 0.2) * 1000)
                r1 = await mgr.cycle()
                # Nothing a cycle deleted is referenced by any replica.
                live_refs = referenced_keys(brokers)
                assert not (set(r1.planned) & live_refs)
                assert orphans <= set(r1.planned), (orphans - set(r1.planned), r1.doubt)
                remaining = listed(objects)
                assert orphans.isdisjoint(remaining)
                assert live_refs <= remaining, "a referenced object was deleted"
                assert {"wal/zz/not-a-wal-key.txt", "wal-old/00/0000000000001-1-ab.wal", bad} <= remaining
                reg = mgr.registry
                assert reg is not None
                inv = reg.get(bad)
                assert inv is not None and inv.state == State.INVALID
                assert notified > 0, "brokers notified walmgr of their uploads"
                # A second cycle has nothing left of what the first deleted.
                r2 = await mgr.cycle()
                assert not (set(r2.planned) & set(r1.planned))
                # Everything acknowledged outside the DeleteRecords partition is still readable.
                rest = tps[1:]
                kept = Sent(
                    {k: md for k, md in sent.acked.items() if md.topic_id_partition in rest},
                    set(),
                    {k: f for k, f in sent.futures.items() if f.result().topic_id_partition in rest},
                )
                check_exactly_once(kept, await consume_all(("127.0.0.1", brokers[1].port), rest, kept))
        finally:
            await mgr.stop()

    asyncio.run(main())
