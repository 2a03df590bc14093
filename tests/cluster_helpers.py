"""Helpers for the end-to-end cluster tests (tests/*/test_cluster_e2e*.py):
in-process clusters, a failing object store, producing tagged records,
consuming everything back and checking it exactly once and in order.

Every record value is ``<producer>:<sequence>``, so a consumer knows which
``send()`` a record came from and the checks need no other bookkeeping.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from partlog.broker.server import Broker, BrokerConfig, start_brokers
from partlog.client.consumer import Consumer
from partlog.client.producer import Producer, RecordMetadata
from partlog.controller.cluster_meta import StaticMetadata
from partlog.kafka.records import TopicIdPartition
from partlog.produce.pipeline import ProduceConfig
from partlog.replication.config import ReplicationConfig
from partlog.runtime import SYSTEM_CLOCK, Clock
from partlog.store import COMMIT_DEADLINE_MS_DEFAULT
from partlog.tools.local_cluster import free_ports as free_ports  # re-exported for the tests
from partlog.wal.objectstore import (
    ForwardingStore,
    ObjectStore,
    ObjectStoreError,
)

# (producer index, sequence number within that producer)
RecordKey = tuple[int, int]
Where = tuple[TopicIdPartition, int]

# Bounds for the waits in these tests: generous, since a 2-core machine
# running the suite may be slow; a test that needs them has failed anyway.
CONSUME_TIMEOUT_S = 60.0
BROKER_START_TIMEOUT_S = 30.0


class FlakyStore(ForwardingStore):
    """Wraps an :class:`ObjectStore`; every ``fail_every``-th put raises a
    retriable :class:`ObjectStoreError` (deterministic: by call count)."""

    def __init__(self, inner: ObjectStore, fail_every: int) -> None:
        super().__init__(inner)
        self.fail_every = fail_every
        self.puts = 0
        self.failed = 0
        self._lock = threading.Lock()

    def put(self, key: str, data: bytes) -> None:
        with self._lock:
            self.puts += 1
            fail = self.puts % self.fail_every == 0
            if fail:
                self.failed += 1
        if fail:
            raise ObjectStoreError(f"injected failure: put {key}", key=key, retriable=True)
        self.inner.put(key, data)

    def describe(self) -> str:
        return f"flaky({self.inner.describe()})"


@contextlib.asynccontextmanager
async def running_cluster(
    data_dir: Path,
    objects: ObjectStore,
    *,
    azs: int = 3,
    brokers_per_az: int = 1,
    partitions: int = 6,
    commit_interval_ms: int = 20,
    commit_rpc_timeout_ms: int = 10_000,
    sync: bool = False,
    metrics_ports: dict[int, int] | None = None,
    replication_factor: int = 1,
    replication: ReplicationConfig | None = None,
    commit_deadline_ms: int | None = None,
    walmgr_address: str = "",
    clock: Clock = SYSTEM_CLOCK,
    release_grace_ms: int = 0,
) -> AsyncIterator[tuple[list[Broker], StaticMetadata]]:
    """Brokers on 127.0.0.1 sharing ``objects``, topic "t", on ``clock``;
    stopped on exit.  Without the release grace unless ``release_grace_ms``
    says (docs/design/release-grace.md): these tests assert a reference
    gone, and walmgr's deletion, as soon as it can be."""
    replication = dataclasses.replace(replication or ReplicationConfig(), release_grace_ms=release_grace_ms)
    meta = StaticMetadata.generate(
        azs=azs, brokers_per_az=brokers_per_az, topics={"t": partitions}, replication_factor=replication_factor
    )
    configs = [
        BrokerConfig(
            b.broker_id,
            b.az,
            os.path.join(data_dir, f"broker-{b.broker_id}"),
            produce=ProduceConfig(commit_interval_ms=commit_interval_ms),
            sync=sync,
            commit_rpc_timeout_ms=commit_rpc_timeout_ms,
            metrics_port=(metrics_ports or {}).get(b.broker_id, 0),
            replication=replication,
            walmgr_address=walmgr_address,
            commit_deadline_ms=commit_deadline_ms or COMMIT_DEADLINE_MS_DEFAULT,
        )
        for b in meta.brokers()
    ]
    brokers, meta = await start_brokers(configs, meta, objects, clock=clock)
    try:
        yield brokers, meta
    finally:
        for br in brokers:
            await br.stop()


def topic_partitions(meta: StaticMetadata) -> list[TopicIdPartition]:
    [topic] = meta.topics()
    return [TopicIdPartition(topic.topic_id, p) for p in range(topic.num_partitions)]


def value_of(key: RecordKey) -> bytes:
    return f"{key[0]}:{key[1]}".encode()


def key_of(value: bytes | None) -> RecordKey:
    pi, seq = (value or b"").split(b":")
    return int(pi), int(seq)


@dataclass
class Sent:
    """What producing gave: per record, its acknowledgement or failure."""

    acked: dict[RecordKey, RecordMetadata] = field(default_factory=dict)
    failed: set[RecordKey] = field(default_factory=set)
    futures: dict[RecordKey, asyncio.Future[RecordMetadata]] = field(default_factory=dict)

    def collect(self) -> None:
        for key, f in self.futures.items():
            if not f.done():
                continue
            if f.cancelled() or f.exception() is not None:
                self.failed.add(key)
            else:
                self.acked[key] = f.result()

    @property
    def all_keys(self) -> set[RecordKey]:
        return set(self.futures)


async def produce(
    producers: Sequence[Producer],
    tps: Sequence[TopicIdPartition],
    records_per_producer: int,
    *,
    every: int = 10,
    pause_s: float = 0.005,
    during: Callable[[int], object] | None = None,
    sent: Sent | None = None,
    first_seq: int = 0,
) -> Sent:
    """Send ``records_per_producer`` records from each producer, round-robin
    over ``tps``, pausing every ``every`` records (so several WAL files and
    commits happen); ``during(i)`` runs (and is awaited if it returns an
    awaitable) at each pause.  Then flush every producer and collect."""
    sent = sent if sent is not None else Sent()
    for i in range(first_seq, first_seq + records_per_producer):
        for pi, p in enumerate(producers):
            key = (pi, i)
            sent.futures[key] = p.send(tps[(i + pi) % len(tps)], value_of(key))
        if i % every == 0:
            await asyncio.sleep(pause_s)
            if during is not None:
                r = during(i)
                if asyncio.iscoroutine(r):
                    await r
    for p in producers:
        await p.flush()
    sent.collect()
    return sent


async def consume_all(
    bootstrap: tuple[str, int],
    tps: Sequence[TopicIdPartition],
    sent: Sent,
    *,
    timeout_s: float = CONSUME_TIMEOUT_S,
) -> dict[RecordKey, list[Where]]:
    """Read every partition from offset 0 up to its high watermark and up to
    past every acknowledged offset; where each record was found."""
    consumer = Consumer(bootstrap, max_wait_ms=50)
    await consumer.start()
    try:
        consumer.assign(tps)
        want = {tp: 0 for tp in tps}
        for md in sent.acked.values():
            want[md.topic_id_partition] = max(want[md.topic_id_partition], md.offset + 1)
        seen: dict[RecordKey, list[Where]] = {}
        deadline = time.monotonic() + timeout_s

        def done() -> bool:
            return all(
                tp in consumer.high_watermarks and consumer.positions[tp] >= max(want[tp], consumer.high_watermarks[tp])
                for tp in tps
            )

        while not done():
            assert time.monotonic() < deadline, (
                f"consume did not finish: positions {consumer.positions}, hwm {consumer.high_watermarks}, "
                f"want {want}, errors {consumer.errors}"
            )
            for rec in await consumer.poll():
                seen.setdefault(key_of(rec.value), []).append((rec.topic_id_partition, rec.offset))
        return seen
    finally:
        await consumer.close()


def check_exactly_once(sent: Sent, seen: dict[RecordKey, list[Where]]) -> None:
    """Every acknowledged record is stored once, where its acknowledgement
    said; no record is stored twice; nothing is stored that was not sent;
    one producer's records to one partition are stored in send order."""
    phantom = set(seen) - sent.all_keys
    assert not phantom, f"records read that were never sent: {sorted(phantom)[:10]}"
    twice = {k: w for k, w in seen.items() if len(w) > 1}
    assert not twice, f"records stored more than once: {dict(list(twice.items())[:10])}"
    for key, md in sent.acked.items():
        where = seen.get(key)
        assert where == [(md.topic_id_partition, md.offset)], f"record {key}: acked at {md}, read at {where}"
    last: dict[tuple[int, TopicIdPartition], tuple[int, int]] = {}
    for (pi, seq), where in sorted(seen.items()):
        tp, off = where[0]
        prev = last.get((pi, tp))
        assert prev is None or off > prev[1], f"producer {pi} on {tp}: seq {seq} at {off} after seq {prev}"
        last[(pi, tp)] = (seq, off)


# ------------------------------------------------------ broker processes


def write_cluster_toml(
    path: Path, meta: StaticMetadata, ports: dict[int, int], deleted_topics: Sequence[uuid.UUID] = ()
) -> None:
    lines = [f'cluster_id = "{meta.cluster_id}"\n']
    lines += [f"deleted_topics = {[str(t) for t in deleted_topics]}\n"] if deleted_topics else []
    lines += [f'[[brokers]]\nid = {b.broker_id}\naz = "{b.az}"\nport = {ports[b.broker_id]}\n' for b in meta.brokers()]
    for t in meta.topics():
        replicas = [list(p.replicas) for p in t.partitions]
        lines.append(
            f'[[topics]]\nname = "{t.name}"\nid = "{t.topic_id}"\nleaders = {list(t.leaders)}\nreplicas = {replicas}\n'
        )
    path.write_text("".join(lines))


def start_broker_process(
    cluster: Path, data_dir: Path, broker_id: int, *, store_url: str, extra: Sequence[str] = ()
) -> subprocess.Popen[bytes]:
    """``partlog broker`` as a child process; its output goes to a log file in ``data_dir``."""
    with open(data_dir / f"broker-{broker_id}.log", "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "partlog.tools.cli", "broker", "--cluster", str(cluster), "--id", str(broker_id),
             "--data-dir", str(data_dir), "--store", store_url, *extra],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )  # fmt: skip


def wait_listening(port: int, proc: subprocess.Popen[bytes], timeout_s: float = BROKER_START_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"broker process exited with {proc.returncode} before listening on {port}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"broker did not listen on port {port} within {timeout_s} s")


def stop_processes(procs: Sequence[subprocess.Popen[bytes]]) -> None:
    """SIGTERM, then SIGKILL whatever did not exit: no child outlives a test."""
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(10)


def check_cluster_result(r: dict[str, Any], azs: int) -> None:
    """The checks every ``partlog cluster`` run passes: nothing lost, failed,
    duplicated or out of order, and the commit fan-out of a balanced cluster."""
    assert r["records_acked"] > 0
    assert r["records_failed"] == 0
    assert r["records_lost"] == 0, r["records_lost_examples"]
    assert r["records_duplicated"] == 0
    assert r["order_violations"] == 0
    assert r["records_verified"] == r["records_acked"]
    assert r["wal_files"] > 0
    fan = r["commit_rpcs_per_file"]
    # Representatives: a balanced cluster's WAL file needs at most one
    # commit per other AZ, and brokers lead partitions their own AZ sends.
    assert fan["remote_max"] <= azs - 1
    assert fan["local_mean"] > 0


def producer_in(meta: StaticMetadata, az: str, **kwargs: Any) -> Producer:
    """A producer in ``az`` bootstrapping from that AZ's first broker."""
    first = meta.broker(meta.brokers_in(az)[0])
    assert first is not None
    kwargs.setdefault("linger_ms", 2)
    kwargs.setdefault("retry_backoff_ms", 20)
    return Producer((first.host, first.port), az=az, **kwargs)


def broker_addr(meta: StaticMetadata, broker_id: int) -> tuple[str, int]:
    """The RPC address of ``broker_id``."""
    b = meta.broker(broker_id)
    assert b is not None
    return b.host, b.port
