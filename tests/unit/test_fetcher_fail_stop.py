"""A follower whose store fail-stopped reports no log end it may not hold.

The follower's appends go through the group-commit pipeline: stage 1
installs the new log end in the caches before stage 2's journal append
makes it durable.  When that append fails the store fail-stops and its
caches stay ahead of disk until a reopen.  The fetcher reports its log end
as the next fetch offset, which the leader counts toward its HWM (an
acks=all answer): it must never report from such a store.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import lmdb
import pytest

from partlog.kafka.errors import Errors
from partlog.kafka.records import TopicIdPartition
from partlog.replication.config import ReplicationConfig
from partlog.replication.fetcher import ReplicaFetchers
from partlog.replication.partition import FollowedPartition
from partlog.replication.stats import ReplicationStats
from partlog.rpc.wire import ReplicaFetchResult, dec_replica_fetch, enc_replica_fetch_response
from partlog.store import MetadataStore
from tests.clock import Clock
from tests.unit.test_store_replication import T0, commit1, open_store, plain, topic

LEADER = 1
FETCHES = 6


class _Leader:
    """The leader's side of replica_fetch, from its store; records the fetch
    offsets the follower reported."""

    # A leader before sparse answers (RPC version 4): it answers every partition.
    version = 3

    def __init__(self, store: MetadataStore, fetchers: list[ReplicaFetchers]) -> None:
        self.store = store
        self.fetchers = fetchers
        self.offsets: list[int] = []

    async def call(self, method: str, body: Any, timeout_ms: int) -> Any:
        assert method == "replica_fetch"
        _rid, _wait, entries_max, parts = dec_replica_fetch(body, 10)
        results = []
        for p in parts:
            self.offsets.append(p.fetch_offset)
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
        if len(self.offsets) >= FETCHES:
            self.fetchers[0].stopping = True
        await asyncio.sleep(0)
        return enc_replica_fetch_response(results)


@pytest.mark.timeout(30)
def test_a_fail_stopped_follower_never_reports_entries_it_lost(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock(T0)
    with (
        open_store(tmp_path / "leader", clock) as leader,
        open_store(tmp_path / "follower", clock, auto_high_watermark=False) as follower,
    ):
        [tp] = topic([leader, follower])
        for _ in range(3):
            commit1(leader, tp, plain())
        # The follower's first journal append fails, as a disk would.
        real = follower._commit_group
        fails = [1]

        def failing(*args: Any) -> Any:
            if fails:
                fails.pop()
                raise lmdb.Error("injected: I/O error")
            return real(*args)

        monkeypatch.setattr(follower._pipeline, "_apply", failing)
        holder: list[ReplicaFetchers] = []
        server = _Leader(leader, holder)

        async def main() -> None:
            changed = asyncio.Event()

            async def client(_broker_id: int) -> Any:
                return server

            async def drop(_broker_id: int) -> None:
                return None

            following: dict[TopicIdPartition, FollowedPartition] = {tp: FollowedPartition(LEADER, 0)}
            reopen_asked: list[bool] = []
            fetchers = ReplicaFetchers(
                2,
                follower,
                ReplicationConfig(replica_fetch_backoff_ms=1),
                ReplicationStats(),
                following,
                asyncio.Lock(),
                client=client,
                drop_client=drop,
                on_data=lambda: None,
                metadata_changed=lambda: changed,
                on_store_failed=lambda: reopen_asked.append(True),
                monotonic=time.monotonic,
            )
            holder.append(fetchers)
            fetchers.start()
            for _ in range(100):  # FETCHES fetches, or a bounded wait for them
                if len(server.offsets) >= FETCHES or not fetchers.tasks():
                    break
                await asyncio.sleep(0.01)
            fetchers.stopping = True
            for t in fetchers.tasks():
                t.cancel()
            await asyncio.gather(*fetchers.tasks(), return_exceptions=True)
            # A broker that only follows reopens its store too (the broker
            # wires this to LeaderCommits.store_failed).
            assert reopen_asked

        asyncio.run(main())
        assert follower.failed is not None
        follower.reopen()
        durable = follower.log_end_offset(tp)
        # Every offset reported to the leader is one the follower holds durably.
        assert max(server.offsets) <= durable, (server.offsets, durable)
