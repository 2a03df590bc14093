"""The consumer's auto_offset_reset (Kafka's auto.offset.reset) against a
real broker: a position below the log start (DeleteRecords or retention
moved it) answers OFFSET_OUT_OF_RANGE; "earliest" moves to the log start,
"latest" to the HWM, "none" keeps the position and the error."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from partlog.client.consumer import Consumer
from partlog.kafka.errors import Errors
from partlog.kafka.record_batch import build_record_batch
from partlog.kafka.records import DeleteRecordsRequest
from partlog.wal.localdir_store import LocalDirStore
from tests.cluster_helpers import running_cluster, topic_partitions


@pytest.mark.timeout(60)
def test_auto_offset_reset_after_delete_records(tmp_path: Path) -> None:
    objects = LocalDirStore(tmp_path / "objects", fsync=False)

    async def main() -> None:
        async with running_cluster(tmp_path, objects, azs=1, partitions=1, commit_interval_ms=10) as ([broker], meta):
            [tp] = topic_partitions(meta)
            for i in range(5):
                batch = build_record_batch([(None, b"v%d" % i, int(time.time() * 1000))])
                [r] = await broker.produce([(tp, batch)], acks=1)
                assert r.error == Errors.NONE
            [d] = broker.store.delete_records([DeleteRecordsRequest(tp, 3)])
            assert d.errors == Errors.NONE and d.low_watermark == 3

            async def read_from_zero(reset: str) -> tuple[Consumer, list[bytes | None]]:
                consumer = Consumer([("127.0.0.1", broker.port)], max_wait_ms=10, auto_offset_reset=reset)
                await consumer.start()
                consumer.assign([tp], 0)
                got: list[bytes | None] = []
                for _ in range(5):
                    got += [r.value for r in await consumer.poll()]
                await consumer.close()
                return consumer, got

            earliest, got = await read_from_zero("earliest")
            assert got == [b"v3", b"v4"] and list(earliest.resets[tp]) == [(0, 3, 5)]
            latest, got = await read_from_zero("latest")
            assert got == [] and latest.positions[tp] == 5 and list(latest.resets[tp]) == [(0, 5, 5)]
            none, got = await read_from_zero("none")
            assert got == [] and none.positions[tp] == 0 and none.errors[tp] == Errors.OFFSET_OUT_OF_RANGE
            assert tp not in none.resets

    asyncio.run(main())
