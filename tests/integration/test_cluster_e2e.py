"""End-to-end: multi-broker clusters in this process on loopback, on the
local store, under injected faults (failing uploads, timed-out commits),
malformed RPC input, fetch long-poll and the Prometheus endpoint (S3 and a
broker process killed with SIGKILL: tests/system/test_cluster_e2e_processes.py).

The invariant every produce test checks (``check_exactly_once``): each
acknowledged record is read back exactly once, at the offset its
acknowledgement gave; no record is ever stored twice (failed ones included);
one producer's records to one partition are stored in send order.  Nothing
here asserts a timing.
"""

from __future__ import annotations

import asyncio
import re
import socket
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from partlog.broker.server import Broker
from partlog.kafka.errors import Errors
from partlog.kafka.record_batch import parse_records
from partlog.kafka.records import CommitBatchRequest, CommitBatchResponse, TopicIdPartition
from partlog.produce.pipeline import Action
from partlog.rpc.client import RpcClient, RpcRemoteError
from partlog.rpc.frame import RpcErrorCode
from partlog.rpc.wire import enc_tp
from partlog.tools.cluster_options import ClusterOptions
from partlog.tools.cluster_run import run
from partlog.wal.localdir_store import LocalDirStore
from partlog.wal.objectstore import ObjectStoreError
from tests.batches import build_batch
from tests.cluster_helpers import (
    FlakyStore,
    Sent,
    broker_addr,
    check_cluster_result,
    check_exactly_once,
    consume_all,
    free_ports,
    produce,
    producer_in,
    running_cluster,
    topic_partitions,
    value_of,
)

T0 = 1_700_000_000_000


# ------------------------------------------------------------ 1. local store


@pytest.mark.timeout(120)
@pytest.mark.parametrize("brokers_per_az", [1, 2])
def test_cluster_run_on_local_store(tmp_path: Path, brokers_per_az: int) -> None:
    opts = ClusterOptions(
        azs=3,
        brokers_per_az=brokers_per_az,
        partitions=6 * brokers_per_az,
        producers_per_az=1,
        rate_per_producer=100,
        duration_s=1.5,
        data_dir=str(tmp_path),
        commit_interval_ms=50,
    )
    r = asyncio.run(run(opts))
    assert r["brokers"] == 3 * brokers_per_az
    check_cluster_result(r, azs=3)


# -------------------------------------------------------- 3. failing uploads


@pytest.mark.timeout(120)
def test_failed_uploads_are_retried_exactly_once(tmp_path: Path) -> None:
    objects = FlakyStore(LocalDirStore(tmp_path / "objects", fsync=False), fail_every=3)

    async def main() -> None:
        async with running_cluster(tmp_path, objects) as (brokers, meta):
            tps = topic_partitions(meta)
            producers = [producer_in(meta, az) for az in ("az1", "az2")]
            for p in producers:
                await p.start()
            try:
                sent = await produce(producers, tps, 150)
            finally:
                for p in producers:
                    await p.close()
            assert not sent.failed, "retriable upload errors must be retried until they succeed"
            assert len(sent.acked) == 300
            check_exactly_once(sent, await consume_all(broker_addr(meta, 1), tps, sent))
            assert objects.failed > 0
            assert sum(b.stats.upload_errors for b in brokers) == objects.failed
            assert sum(p.stats["retries"] for p in producers) > 0

    asyncio.run(main())


class _FirstPutFails(FlakyStore):
    """The first put waits until ``release`` is set, then fails (retriably)."""

    def __init__(self, inner: LocalDirStore) -> None:
        super().__init__(inner, fail_every=1 << 30)
        self.first_started = threading.Event()
        self.release = threading.Event()

    def put(self, key: str, data: bytes) -> None:
        with self._lock:
            self.puts += 1
            first = self.puts == 1
        if not first:
            self.inner.put(key, data)
            return
        self.first_started.set()
        self.release.wait(30)
        with self._lock:
            self.failed += 1
        raise ObjectStoreError(f"injected failure: put {key}", key=key, retriable=True)


@pytest.mark.timeout(60)
def test_failed_first_upload_of_a_new_producer_is_retried_in_order(tmp_path: Path) -> None:
    """Regression: the producer sent a partition's second batch while the
    first was in flight.  The first batch's WAL upload failed; the second
    one's file was committed, and the leader, not knowing the producer yet,
    accepted its sequence 1 at offset 0.  The first batch's retries then got
    OUT_OF_ORDER_SEQUENCE_NUMBER until the delivery timeout: one transient
    upload failure failed a record and stored the next one ahead of it.
    Until a batch is acknowledged the producer now keeps one in flight."""
    objects = _FirstPutFails(LocalDirStore(tmp_path / "objects", fsync=False))

    async def main() -> None:
        async with running_cluster(tmp_path, objects, azs=1, partitions=1) as (brokers, meta):
            [tp] = topic_partitions(meta)
            producer = producer_in(meta, "az1", linger_ms=1, delivery_timeout_ms=5000)
            await producer.start()
            sent = Sent()
            try:
                sent.futures[(0, 0)] = producer.send(tp, value_of((0, 0)))
                assert await asyncio.to_thread(objects.first_started.wait, 30)
                sent.futures[(0, 1)] = producer.send(tp, value_of((0, 1)))
                # Give the second record every chance to be sent, uploaded
                # and queued for commit before the first upload fails.
                for _ in range(50):
                    if brokers[0].stats.uploads >= 1:
                        break
                    await asyncio.sleep(0.01)
                objects.release.set()
                await producer.flush()
            finally:
                objects.release.set()
                await producer.close()
            sent.collect()
            assert objects.failed == 1 and producer.stats["retries"] > 0
            assert not sent.failed, {k: f.exception() for k, f in sent.futures.items() if f.exception()}
            assert [sent.acked[(0, i)].offset for i in (0, 1)] == [0, 1]
            check_exactly_once(sent, await consume_all(broker_addr(meta, 1), [tp], sent))

    asyncio.run(main())


# -------------------------------------------------- 4. commit RPC timeouts


@pytest.mark.timeout(120)
def test_commit_rpc_timeouts_are_retried_and_answered_as_duplicates(tmp_path: Path) -> None:
    """Broker 2's store stalls past the 300 ms commit RPC timeout for the
    first commits other brokers send it, then applies them anyway.  The
    uploaders answer REQUEST_TIMED_OUT, the producers retry the same batches,
    and the leader answers those retries as duplicates of what the stalled
    commits applied: nothing lost, nothing twice."""
    stalls_max, stall_s = 3, 0.7
    objects = LocalDirStore(tmp_path / "objects", fsync=False)

    async def main() -> None:
        async with running_cluster(tmp_path, objects, commit_rpc_timeout_ms=300) as (brokers, meta):
            slow = brokers[1]
            assert slow.broker_id == 2
            real_commit = slow.store.commit_file
            state = {"stalled": 0, "duplicates": 0}
            lock = threading.Lock()

            def stalling_commit(
                object_key: str,
                uploader_broker_id: int,
                file_size: int,
                batches: Sequence[CommitBatchRequest],
                guards: Mapping[tuple[TopicIdPartition, int], int] | None = None,
            ) -> list[CommitBatchResponse]:
                # Runs in a worker thread (asyncio.to_thread); only commits
                # from other brokers' pipelines have an RPC timeout.
                with lock:
                    stall = uploader_broker_id != slow.broker_id and state["stalled"] < stalls_max
                    state["stalled"] += stall
                if stall:
                    time.sleep(stall_s)
                answers = real_commit(object_key, uploader_broker_id, file_size, batches, guards)
                with lock:
                    state["duplicates"] += sum(a.is_duplicate for a in answers)
                return answers

            slow.store.commit_file = stalling_commit  # type: ignore[method-assign]
            failed_commits: list[Errors] = []
            for b in brokers:
                _record_commit_errors(b, failed_commits)

            tps = topic_partitions(meta)
            # Producers in az1 and az3: broker 2's partitions reach it as remote commits.
            producers = [producer_in(meta, az) for az in ("az1", "az3")]
            for p in producers:
                await p.start()
            try:
                sent = await produce(producers, tps, 120)
            finally:
                for p in producers:
                    await p.close()
            assert state["stalled"] == stalls_max
            assert Errors.REQUEST_TIMED_OUT in failed_commits
            assert sum(p.stats["retries"] for p in producers) > 0
            # The stalled commits landed, so their retries were duplicates.
            assert state["duplicates"] > 0
            assert not sent.failed
            check_exactly_once(sent, await consume_all(broker_addr(meta, 1), tps, sent))

    asyncio.run(main())


def _record_commit_errors(broker: Broker, out: list[Errors]) -> None:
    """Wrap ``broker.pipeline.commit_done`` to record the error of every failed commit RPC."""
    real = broker.pipeline.commit_done

    def commit_done(
        segment_id: int,
        leader_broker_id: int,
        responses: Any,
        now_ms: int,
        error: Errors = Errors.REQUEST_TIMED_OUT,
        error_message: str | None = None,
    ) -> list[Action]:
        if responses is None:
            out.append(error)
        return real(segment_id, leader_broker_id, responses, now_ms, error, error_message)

    broker.pipeline.commit_done = commit_done  # type: ignore[method-assign]


# -------------------------------------------------------- 6. malformed input


@pytest.mark.timeout(60)
def test_malformed_input_is_refused_and_the_broker_keeps_serving(tmp_path: Path) -> None:
    async def main() -> None:
        objects = LocalDirStore(tmp_path / "objects", fsync=False)
        async with running_cluster(tmp_path, objects, azs=1, partitions=2) as (brokers, meta):
            tp0, tp1 = topic_partitions(meta)
            client = await RpcClient.connect("127.0.0.1", brokers[0].port)
            try:
                good = build_batch(2, timestamp_ms=T0)
                bad_length = good[:8] + (len(good) + 5 - 12).to_bytes(4, "big") + good[12:]
                truncated = good[:40]
                bad_magic = good[:16] + b"\x01" + good[17:]
                bad_crc = good[:-1] + bytes([good[-1] ^ 0xFF])
                res = await client.call(
                    "produce",
                    {
                        "batches": [
                            [*enc_tp(tp0), good],
                            [*enc_tp(tp0), bad_length],
                            [*enc_tp(tp1), truncated],
                            [*enc_tp(tp0), bad_magic],
                            [*enc_tp(tp0), bad_crc],
                            [*enc_tp(tp1), good],
                        ]
                    },
                )
                errors = [r[0] for r in res["results"]]
                corrupt = int(Errors.CORRUPT_MESSAGE)
                assert errors == [0, corrupt, corrupt, corrupt, corrupt, 0]
                assert [res["results"][i][1] for i in (0, 5)] == [0, 0]
                # A whole-request of bad batches is answered at once, too.
                res = await client.call("produce", {"batches": [[*enc_tp(tp0), truncated]]})
                assert [r[0] for r in res["results"]] == [corrupt]

                tid = tp0.topic_id.bytes
                garbage: list[tuple[str, Any]] = [
                    ("produce", None),
                    ("produce", 42),
                    ("produce", [b"batches"]),
                    ("produce", {}),
                    ("produce", {"batches": "nope"}),
                    ("produce", {"batches": [7]}),
                    ("produce", {"batches": [[tid, 0]]}),
                    ("produce", {"batches": [[b"short", 0, good]]}),
                    ("produce", {"batches": [[tid, -1, good]]}),
                    ("produce", {"batches": [[tid, "0", good]]}),
                    ("produce", {"batches": [[tid, 0, "text"]]}),
                    ("produce", {"batches": [], "timeout_ms": -5}),
                    ("produce", {"batches": [], "timeout_ms": "soon"}),
                    ("produce", {"batches": [], "acks": 2}),
                    ("produce", {"batches": [], "acks": True}),
                    ("commit", None),
                    ("commit", "commit"),
                    ("commit", {}),
                    ("commit", {"key": 1, "uploader": 1, "file_size": 10, "batches": []}),
                    ("commit", {"key": "k", "uploader": "1", "file_size": 10, "batches": []}),
                    ("commit", {"key": "k", "uploader": 1, "file_size": 10, "batches": "x"}),
                    ("commit", {"key": "k", "uploader": 1, "file_size": 10, "batches": [[0, tid, 0, 1]]}),
                    ("commit", {"key": "k", "uploader": 1, "file_size": 10, "batches": [[0, tid, 0, 1, "h"]]}),
                    ("fetch", None),
                    ("fetch", []),
                    ("fetch", {}),
                    ("fetch", {"partitions": "all"}),
                    ("fetch", {"partitions": [[tid, 0, 0]]}),
                    ("fetch", {"partitions": [[tid, 0, "0", 1]]}),
                    ("fetch", {"partitions": [[b"x", 0, 0, 1]]}),
                    ("fetch", {"partitions": [], "max_wait_ms": "soon"}),
                    ("fetch", {"partitions": [], "max_wait_ms": float("inf")}),
                    ("fetch", {"partitions": [], "min_bytes": None}),
                    ("fetch", {"partitions": [], "max_bytes": float("nan")}),
                    ("fetch", {"partitions": [], "isolation": 2}),
                    ("fetch", {"partitions": [], "isolation": "read_committed"}),
                    ("list_offsets", {"partitions": [], "isolation": -1}),
                    ("write_txn_markers", None),
                    ("write_txn_markers", {"partitions": "all"}),
                    ("write_txn_markers", {"partitions": [[tid, 0, 1, 0, 0]]}),
                    ("write_txn_markers", {"partitions": [[tid, 0, -1, 0, 0, 1]]}),
                    ("write_txn_markers", {"partitions": [[tid, 0, 1, 1 << 15, 0, 1]]}),
                    ("write_txn_markers", {"partitions": [[tid, 0, 1, 0, -1, 1]]}),
                    ("write_txn_markers", {"partitions": [[tid, 0, 1, 0, 0, 2]]}),
                    ("write_txn_markers", {"partitions": [[tid, 0, 1, 0, 0, True]]}),
                ]
                for method, body in garbage:
                    with pytest.raises(RpcRemoteError) as info:
                        await client.call(method, body, timeout_ms=10_000)
                    assert info.value.code == RpcErrorCode.BAD_REQUEST, (method, body, info.value)

                # Well-formed commits with bad contents get per-batch errors.
                bad_key = await client.call(
                    "commit",
                    {"key": "not-a-wal-key", "uploader": 9, "file_size": 100, "batches": [[0, tid, 0, 1, good[:61]]]},
                )
                assert bad_key[0][0] == int(Errors.INVALID_REQUEST)

                # Still serving, on the same connection: produce and fetch.
                res = await client.call("produce", {"batches": [[*enc_tp(tp0), good]]})
                assert res["results"][0][:2] == [0, 2]
                f = await client.call("fetch", {"partitions": [[*enc_tp(tp0), 0, 1 << 20]]})
                [[err, hwm, _lso, records, _msg, _stable, _aborted]] = f["partitions"]
                assert (err, hwm) == (0, 4)
                got = parse_records(tp0, records)
                assert [r.offset for r in got] == [0, 1, 2, 3]
                assert all(r.value == b"v" * 10 for r in got)
            finally:
                await client.close()

    asyncio.run(main())


@pytest.mark.timeout(60)
def test_batch_with_bad_crc_is_refused_and_the_partition_stays_readable(tmp_path: Path) -> None:
    """Regression: the broker checked only a batch's length and magic on
    produce, so a batch with a bad CRC-32C was acknowledged, committed, and
    then every fetch from its offset answered CORRUPT_MESSAGE: acknowledged
    records after it could never be read.  Kafka refuses it on produce."""

    async def main() -> None:
        objects = LocalDirStore(tmp_path / "objects", fsync=False)
        async with running_cluster(tmp_path, objects, azs=1, partitions=1) as (brokers, meta):
            [tp] = topic_partitions(meta)
            client = await RpcClient.connect("127.0.0.1", brokers[0].port)
            try:
                good = build_batch(2, timestamp_ms=T0)
                bad_crc = good[:-1] + bytes([good[-1] ^ 0x01])
                res = await client.call(
                    "produce", {"batches": [[*enc_tp(tp), good], [*enc_tp(tp), bad_crc], [*enc_tp(tp), good]]}
                )
                assert [r[:2] for r in res["results"]] == [[0, 0], [int(Errors.CORRUPT_MESSAGE), -1], [0, 2]]
                assert "CRC" in res["results"][1][4]
                f = await client.call("fetch", {"partitions": [[*enc_tp(tp), 0, 1 << 20]]})
                [[err, hwm, _lso, records, _msg, _stable, _aborted]] = f["partitions"]
                assert (err, hwm) == (0, 4)
                assert [r.offset for r in parse_records(tp, records)] == [0, 1, 2, 3]
            finally:
                await client.close()

    asyncio.run(main())


# ------------------------------------------------------------ 7. long-poll


@pytest.mark.timeout(60)
def test_fetch_long_poll_returns_when_a_commit_lands(tmp_path: Path) -> None:
    async def main() -> None:
        objects = LocalDirStore(tmp_path / "objects", fsync=False)
        async with running_cluster(tmp_path, objects) as (brokers, meta):
            tp0 = topic_partitions(meta)[0]
            leader, uploader = brokers[0], brokers[1]
            assert meta.leader_of(tp0) == leader.broker_id
            fetcher = await RpcClient.connect("127.0.0.1", leader.port)
            producer = await RpcClient.connect("127.0.0.1", uploader.port)
            try:
                fetch = asyncio.ensure_future(
                    fetcher.call("fetch", {"partitions": [[*enc_tp(tp0), 0, 1 << 20]], "max_wait_ms": 2000})
                )
                # The fetch is parked in the leader before anything is produced.
                for _ in range(500):
                    if leader.stats.fetches or fetch.done():
                        break
                    await asyncio.sleep(0.01)
                assert leader.stats.fetches == 1 and not fetch.done()
                # Produced through another broker: the commit reaches the leader as an RPC.
                res = await producer.call("produce", {"batches": [[*enc_tp(tp0), build_batch(3, timestamp_ms=T0)]]})
                assert res["results"][0][:2] == [0, 0]
                [[err, hwm, _lso, records, _msg, _stable, _aborted]] = (await fetch)["partitions"]
                assert (err, hwm) == (0, 3)
                assert [r.offset for r in parse_records(tp0, records)] == [0, 1, 2]

                # Nothing new: the long-poll ends empty after its wait.
                idle = await fetcher.call("fetch", {"partitions": [[*enc_tp(tp0), 3, 1 << 20]], "max_wait_ms": 300})
                assert idle["partitions"] == [[0, 3, 0, b"", None, 3, []]]
            finally:
                await fetcher.close()
                await producer.close()

    asyncio.run(main())


# -------------------------------------------------------------- 8. metrics


@pytest.mark.timeout(60)
def test_metrics_endpoint_serves_prometheus_text(tmp_path: Path) -> None:
    [port] = free_ports(1)

    async def main() -> str:
        objects = LocalDirStore(tmp_path / "objects", fsync=False)
        async with running_cluster(tmp_path, objects, azs=1, partitions=2, metrics_ports={1: port}) as (brokers, meta):
            client = await RpcClient.connect("127.0.0.1", brokers[0].port)
            try:
                tp0, tp1 = topic_partitions(meta)
                res = await client.call(
                    "produce", {"batches": [[*enc_tp(tp0), build_batch(1)], [*enc_tp(tp1), build_batch(1)]]}
                )
                assert [r[0] for r in res["results"]] == [0, 0]
            finally:
                await client.close()

            def scrape() -> str:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
                    body: bytes = resp.read()
                    return body.decode()

            return await asyncio.to_thread(scrape)

    text = asyncio.run(main())

    def value(pattern: str) -> float:
        m = re.search(rf"^{pattern} (\S+)$", text, re.MULTILINE)
        assert m is not None, f"{pattern} not in metrics:\n{text}"
        return float(m.group(1))

    assert "# TYPE partlog_uploads_total counter" in text
    assert "# TYPE partlog_commits_total counter" in text
    assert value("partlog_uploads_total") >= 1
    assert value(r'partlog_commits_total\{where="local"\}') >= 1
    assert value("partlog_produce_requests_total") == 1
    assert value("partlog_broker_id") == 1
    # The store: the produce's group made durable in the journal.
    assert value("partlog_store_group_commits_total") >= 1
    assert value("partlog_store_journal_bytes_total") > 0
    assert 0 <= value("partlog_store_overlay_groups") <= value("partlog_store_checkpoint_groups_max") == 64


@pytest.mark.timeout(60)
def test_stopped_broker_releases_its_metrics_port(tmp_path: Path) -> None:
    [port] = free_ports(1)

    async def main() -> None:
        objects = LocalDirStore(tmp_path / "objects", fsync=False)
        async with running_cluster(tmp_path, objects, azs=1, partitions=1, metrics_ports={1: port}):
            pass

    asyncio.run(main())
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))  # a broker restarted in this process could serve metrics again
