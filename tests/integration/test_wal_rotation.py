"""A broker closes its WAL file when it is idle (issue 30): with a commit
interval of a minute, produce requests are still answered, each WAL PUT
counted by its reason: the shell's timer wakes for the grace deadline of a
file opened on an idle broker."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from partlog.broker.server import BrokerConfig, start_brokers
from partlog.controller.cluster_meta import StaticMetadata
from partlog.kafka.errors import Errors
from partlog.kafka.record_batch import build_record_batch
from partlog.kafka.records import TopicIdPartition
from partlog.produce.pipeline import ProduceConfig
from partlog.wal.localdir_store import LocalDirStore

# Far beyond the test's own timeout: an answer proves an early close.
INTERVAL_MS = 60_000


def _batch() -> bytes:
    return build_record_batch([(None, b"v" * 100, int(time.time() * 1000))])


def test_an_idle_broker_answers_long_before_its_commit_interval(tmp_path: Path) -> None:
    async def main() -> dict[str, float]:
        meta = StaticMetadata.generate(azs=1, brokers_per_az=1, topics={"t": 1})
        config = BrokerConfig(
            1, "az1", str(tmp_path / "b1"), sync=False, produce=ProduceConfig(commit_interval_ms=INTERVAL_MS)
        )
        [broker], meta = await start_brokers([config], meta, LocalDirStore(tmp_path / "objects"))
        try:
            tp = TopicIdPartition(meta.topics()[0].topic_id, 0)
            for _ in range(3):  # one after the other: each finds the broker idle
                [r] = await asyncio.wait_for(broker.produce([(tp, _batch())], acks=-1), 30)
                assert r.error == Errors.NONE, r
            # Two at once: the second opens a file during the first's round.
            answers = await asyncio.wait_for(
                asyncio.gather(*(broker.produce([(tp, _batch())], acks=-1) for _ in range(2))), 30
            )
            assert all(r.error == Errors.NONE for rs in answers for r in rs), answers
            return {
                reason: broker.metrics.registry.get_sample_value("partlog_wal_puts_total", {"reason": reason}) or 0.0
                for reason in ("idle", "round_done", "interval")
            }
        finally:
            await broker.stop()

    puts = asyncio.run(main())
    assert puts["interval"] == 0 and puts["idle"] >= 3, puts
