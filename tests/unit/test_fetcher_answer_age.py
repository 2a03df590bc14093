"""A follower applies no fetch answer older than ``replica_answer_age_max_ms``
and holds the objects of an answer it applies (partlog.store.release_grace).

The leader here answers from its store; the first answer "takes" longer than
the limit (the follower's monotonic clock is moved while it is in transit):
it is dropped and counted, and the fetch is sent again.  While the next
answer's append runs, the follower's store answers its WAL object as
referenced although no entry of its log names it yet.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from partlog.kafka.errors import Errors
from partlog.kafka.records import TopicIdPartition
from partlog.replication.config import ReplicationConfig
from partlog.replication.fetcher import ReplicaFetchers
from partlog.replication.partition import FollowedPartition
from partlog.replication.stats import ReplicationStats
from partlog.rpc.wire import ReplicaFetchResult, dec_replica_fetch, enc_replica_fetch_response
from partlog.runtime import ManualClock
from partlog.store import MetadataStore
from tests.clock import Clock
from tests.unit.test_store_replication import T0, commit1, open_store, plain, topic

LEADER = 1
AGE_MAX_MS = 1_000


class _SlowFirstLeader:
    """Answers from the leader's store; the first answer arrives after the
    follower's clock moved past the age limit."""

    # A leader before sparse answers (RPC version 4): it answers every partition.
    version = 3

    def __init__(self, store: MetadataStore, clock: ManualClock) -> None:
        self.store = store
        self.clock = clock
        self.calls = 0

    async def call(self, method: str, body: Any, timeout_ms: int) -> Any:
        assert method == "replica_fetch"
        _rid, _wait, entries_max, parts = dec_replica_fetch(body, 10)
        results = []
        for p in parts:
            read = self.store.read_log(p.topic_id_partition, p.fetch_offset, 1 << 20, entries_max)
            results.append(
                ReplicaFetchResult(
                    Errors.NONE,
                    read.high_watermark,
                    read.log_start_offset,
                    self.store.log_end_offset(p.topic_id_partition),
                    entries=read.entries,
                )
            )
        self.calls += 1
        if self.calls == 1:
            self.clock.advance(AGE_MAX_MS / 1000 + 0.001)
        await asyncio.sleep(0)
        return enc_replica_fetch_response(results)


@pytest.mark.timeout(30)
def test_a_stale_answer_is_dropped_and_a_fresh_one_held_while_applied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock(T0)
    mono = ManualClock()
    with (
        open_store(tmp_path / "leader", clock) as leader,
        open_store(tmp_path / "follower", clock, auto_high_watermark=False) as follower,
    ):
        [tp] = topic([leader, follower])
        commit1(leader, tp, plain())
        [entry] = leader.read_log(tp, 0, 1 << 20, 10).entries
        key = entry.object_key
        server = _SlowFirstLeader(leader, mono)
        seen_during_apply: list[set[str]] = []
        real = follower.append_replicated_fetch

        def append(appends: Any) -> Any:
            seen_during_apply.append(follower.referenced_files([key]))
            return real(appends)

        monkeypatch.setattr(follower, "append_replicated_fetch", append)
        stats = ReplicationStats()

        async def main() -> None:
            changed = asyncio.Event()

            async def client(_broker_id: int) -> Any:
                return server

            async def drop(_broker_id: int) -> None:
                return None

            following: dict[TopicIdPartition, FollowedPartition] = {tp: FollowedPartition(LEADER, 0)}
            fetchers = ReplicaFetchers(
                2,
                follower,
                ReplicationConfig(replica_fetch_backoff_ms=1, replica_answer_age_max_ms=AGE_MAX_MS),
                stats,
                following,
                asyncio.Lock(),
                client=client,
                drop_client=drop,
                on_data=lambda: None,
                metadata_changed=lambda: changed,
                monotonic=mono.monotonic,
            )
            fetchers.start()
            for _ in range(200):
                if follower.log_end_offset(tp) == 1:
                    break
                await asyncio.sleep(0.01)
            fetchers.stopping = True
            for t in fetchers.tasks():
                t.cancel()
            await asyncio.gather(*fetchers.tasks(), return_exceptions=True)

        asyncio.run(main())
        assert stats.replica_answers_stale == 1
        assert server.calls >= 2
        assert follower.log_end_offset(tp) == 1
        # Held from the check, before the append made it a reference.
        assert seen_during_apply and seen_during_apply[0] == {key}
