"""The parts of walmgr's deletion safety tests (design.md, "Deletion
safety"), with real parts: LMDB registries and stores, brokers on
loopback, LocalDirStore and SeaweedFS.  The tests are in
tests/{unit,integration}/test_walmgr_safety.py and
tests/system/test_walmgr_safety_s3.py; what they check:

1. Under concurrency: a replicated cluster produces (idempotent, acks=all)
   while uploads turn into orphans (stored, then "failed"; or stored after the
   commit deadline), some uploads are answered only after walmgr has looked
   at them (their commits still to come), commits and reference checks are
   answered late, a broker restarts, DeleteRecords and retention drop
   references, and walmgr cycles against a bucket that fails lists, footer
   reads and deletions.  Nothing referenced is ever deleted, every
   acknowledged record outside the removed ranges is read back exactly once,
   and once the faults stop every orphan goes within two cycles.
2. Clock skew within the bound: walmgr's clock ahead, the leader's behind.
3. Leadership changes between asking and deciding, and stale epochs.
4. Keys that are not WAL keys of the prefix: never planned, never deleted.
5. A deleter that crashes mid-plan resumes without re-sending or forgetting.
6. One active manager per registry.

No test asserts on timing; every wait is bounded.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import json
import random
import secrets
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import pytest

from partlog.broker.server import Broker, BrokerConfig
from partlog.client.consumer import Consumer
from partlog.client.producer import Producer
from partlog.controller.cluster_meta import StaticMetadata
from partlog.kafka.errors import Errors
from partlog.kafka.record_batch import build_record_batch
from partlog.kafka.records import CommitBatchRequest, DeleteRecordsRequest, TopicIdPartition
from partlog.replication.config import ReplicationConfig
from partlog.rpc.client import RpcClient
from partlog.rpc.wire import enc_commit
from partlog.runtime import SYSTEM_CLOCK
from partlog.runtime import Clock as RuntimeClock
from partlog.wal.key import WalKeyError, make_wal_key, parse_wal_key, shard_of
from partlog.wal.localdir_store import LocalDirStore
from partlog.wal.objectstore import DeleteResult, ForwardingStore, ListPage, ObjectStore, ObjectStoreError
from tests.cluster_helpers import (
    CONSUME_TIMEOUT_S,
    RecordKey,
    Sent,
    Where,
    check_exactly_once,
    free_ports,
    key_of,
    produce,
    running_cluster,
    topic_partitions,
)
from tests.walmgr_helpers import TEST_CLUSTER_ID, listed, orphan, segment
from walmgr import cli
from walmgr.bench import empty_broker
from walmgr.config import WalmgrConfig
from walmgr.cycle_report import CycleReport
from walmgr.daemon import Walmgr
from walmgr.deleter import execute_plan
from walmgr.model import ObjectRecord, Source, State
from walmgr.registry import Registry

DEADLINE_MS = 800
SKEW_MS = 100
GRACE_MS = 100
GATE_MS = DEADLINE_MS + SKEW_MS + GRACE_MS
WAIT_S = 60.0  # bound of every wait for a condition (a test that needs it has failed)
PREFIX = "wal"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def config(tmp_path: Path, store_url: str, **changes: Any) -> WalmgrConfig:
    base: dict[str, Any] = {
        "commit_deadline_ms": DEADLINE_MS,
        "max_clock_skew_ms": SKEW_MS,
        "grace_ms": GRACE_MS,
        "full_scan_interval_ms": 1,
    }
    return WalmgrConfig.for_cli(store_url, str(tmp_path / "registry"), **(base | changes))


async def until(
    cond: Callable[[], bool], what: str, timeout_s: float = WAIT_S, detail: Callable[[], object] | None = None
) -> None:
    """Poll ``cond``; on timeout fail with ``detail()`` (what the state was)."""
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out waiting for {what}" + (f": {detail()}" if detail else ""))
        await asyncio.sleep(0.02)


async def past_gate(keys: Iterable[str], gate_ms: int = GATE_MS) -> None:
    """Sleep until every key in ``keys`` is past the age gate by the wall clock."""
    newest = max((parse_wal_key(k).created_ms for k in keys), default=0)
    wait_ms = newest + gate_ms + 50 - now_ms()
    if wait_ms > 0:
        await asyncio.sleep(wait_ms / 1000)


# ------------------------------------------------------------ fault injection


class FaultyStore(ForwardingStore):
    """walmgr's view of the bucket, with seeded faults.

    ``list_page``, ``get_suffix``/``get_range`` and ``delete_many`` fail with a
    retriable :class:`ObjectStoreError`, half of the time after sleeping (a
    request that timed out).  ``delete_many`` also deletes and then loses the
    answer, or deletes part of a batch and reports errors for the rest.
    ``deleted`` holds every key the inner store deleted; ``delete_calls``
    every batch walmgr sent.
    """

    def __init__(
        self, inner: ObjectStore, seed: int, *, list_p: float, read_p: float, delete_p: float, sleep_s: float = 0.05
    ) -> None:
        super().__init__(inner)
        self.rng = random.Random(seed)
        self.list_p, self.read_p, self.delete_p, self.sleep_s = list_p, read_p, delete_p, sleep_s
        self.enabled = True
        self.injected: collections.Counter[str] = collections.Counter()
        self.deleted: set[str] = set()
        self.delete_calls: list[list[str]] = []
        self._first_deletes = ["partial", "lost", "", "error", "timeout", "partial"]
        self._lock = threading.Lock()

    def _roll(self, op: str, p: float, modes: Sequence[str] = ("error", "timeout")) -> str | None:
        with self._lock:
            if not self.enabled or self.rng.random() >= p:
                return None
            mode = self.rng.choice(modes)
            self.injected[f"{op}:{mode}"] += 1
            return mode

    def _fail(self, op: str, key: str, mode: str) -> None:
        if mode == "timeout":
            time.sleep(self.sleep_s)
        raise ObjectStoreError(f"injected {mode}: {op} {key}", key=key, retriable=True)

    def list_page(self, prefix: str, start_after: str = "", max_keys: int = 1000) -> ListPage:
        if mode := self._roll("list", self.list_p):
            self._fail("list", prefix, mode)
        return self.inner.list_page(prefix, start_after, max_keys)

    def get_suffix(self, key: str, length: int) -> tuple[bytes, int]:
        if mode := self._roll("get", self.read_p):
            self._fail("get_suffix", key, mode)
        return self.inner.get_suffix(key, length)

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        if mode := self._roll("get", self.read_p):
            self._fail("get_range", key, mode)
        return self.inner.get_range(key, offset, length)

    def delete_many(self, keys: Sequence[str]) -> DeleteResult:
        with self._lock:
            self.delete_calls.append(list(keys))
        with self._lock:  # the first batches meet each fault once, then chance decides
            forced = self._first_deletes.pop(0) if self.enabled and self._first_deletes else None
            if forced:
                self.injected[f"delete:{forced}"] += 1
        mode = forced or self._roll("delete", self.delete_p, ("error", "timeout", "lost", "partial"))
        if mode in ("error", "timeout"):
            self._fail("delete", keys[0], mode)
        send = list(keys[::2]) if mode == "partial" else list(keys)
        result = self.inner.delete_many(send)
        with self._lock:
            self.deleted.update(result.deleted)
        if mode == "lost":
            self._fail("delete", keys[0], "timeout")  # deleted, but walmgr never hears of it
        if mode == "partial":
            errors = {k: "InternalError: injected" for k in keys[1::2]}
            return DeleteResult(result.deleted, errors | result.errors)
        return result


class CycleProgress:
    """Which walmgr cycles started and which completed (numbers from 1)."""

    def __init__(self) -> None:
        self.started = 0
        self.done: list[int] = []

    def wait_for_one_started_after(self, mark: int, timeout_s: float) -> None:
        """Block (a worker thread) until a cycle started after ``mark`` completed, or ``timeout_s``."""
        end = time.monotonic() + timeout_s
        while time.monotonic() < end and not any(n > mark for n in self.done):
            time.sleep(0.01)


class LossyUploads(ForwardingStore):
    """The brokers' bucket, with faults while ``enabled``.

    * Every ``orphan_every``-th put stores the object and then fails: the
      broker never commits it, an orphan holding real batches.
    * Every ``late_every``-th put stores it only after the commit deadline,
      so the leaders refuse its commits: an orphan too.
    * ``hold(n)``: the next ``n`` puts store the object, then answer only
      once a walmgr cycle that started afterwards has completed (at most
      ``HOLD_S``, well within the commit deadline).  walmgr sees an object
      that nothing references yet and that will be committed: only the age
      gate keeps it from being deleted.
    """

    HOLD_S = DEADLINE_MS * 0.6 / 1000

    def __init__(
        self, inner: ObjectStore, progress: CycleProgress, *, orphan_every: int, late_every: int, late_s: float
    ) -> None:
        super().__init__(inner)
        self.progress = progress
        self.orphan_every, self.late_every, self.late_s = orphan_every, late_every, late_s
        self.enabled = True
        self.puts = 0
        self.orphans: list[str] = []
        self.late: list[str] = []
        self.held: list[str] = []
        self._holds = 0
        self._lock = threading.Lock()

    def hold(self, n: int) -> None:
        with self._lock:
            self._holds = n

    def put(self, key: str, data: bytes) -> None:
        with self._lock:
            self.puts += 1
            hold = self.enabled and self._holds > 0
            lose = self.enabled and not hold and self.puts % self.orphan_every == 0
            late = self.enabled and not hold and not lose and self.puts % self.late_every == 0
            if hold:
                self._holds -= 1
                self.held.append(key)
            if lose:
                self.orphans.append(key)
            if late:
                self.late.append(key)
        if late:
            time.sleep(self.late_s)
        mark = self.progress.started
        self.inner.put(key, data)
        if hold:
            self.progress.wait_for_one_started_after(mark, self.HOLD_S)
        if lose:
            raise ObjectStoreError(f"injected: the answer to put {key} was lost", key=key, retriable=True)


class BrokerFaults:
    """Seeded delays in the brokers' RPC handlers, while ``on``.

    * Reference checks answered after walmgr's check timeout.
    * Commits answered late, but within the commit deadline.
    """

    DELAY_S = DEADLINE_MS * 0.5 / 1000

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.on = True

    def install(self, broker: Broker) -> None:
        assert broker._server is not None
        handlers = broker._server.handlers
        check, commit = handlers["referenced_files"], handlers["commit"]

        async def slow_check(body: Any) -> Any:
            if self.on and self.rng.random() < 0.15:
                await asyncio.sleep(0.6)
            return await check(body)

        async def slow_commit(body: Any) -> Any:
            if self.on and self.rng.random() < 0.1:
                await asyncio.sleep(self.DELAY_S)
            return await commit(body)

        handlers["referenced_files"], handlers["commit"] = slow_check, slow_commit


# ------------------------------------------------------------- observation


class References:
    """Which objects the brokers' logs still reference: every entry of every
    replica at or above the partition leader's log start offset (a follower
    may briefly keep entries a leader's DeleteRecords or retention removed:
    those are deleted records, not references walmgr must honour)."""

    def __init__(self, tps: Sequence[TopicIdPartition]) -> None:
        self.tps = tps
        self.floor: dict[TopicIdPartition, int] = dict.fromkeys(tps, 0)

    def live(self, brokers: Iterable[Broker]) -> set[str]:
        running = list(brokers)
        for b in running:
            for tp in self.tps:
                if b.replicas.is_leader(tp):
                    self.floor[tp] = max(self.floor[tp], b.store.partition_state(tp)["log_start_offset"])
        out: set[str] = set()
        for b in running:
            for tp in self.tps:
                st = b.store.partition_state(tp)
                start = max(st["log_start_offset"], self.floor[tp])
                if start < st["log_end_offset"]:
                    out |= {e.object_key for e in b.store.read_log(tp, start, 1 << 62).entries}
        return out


def converged(brokers: Sequence[Broker], tps: Sequence[TopicIdPartition]) -> bool:
    """Every replica has the leader's log end and HWM, and a log start at or
    past the leader's.  A follower's log start may stay ahead for good, as in
    Kafka (a follower only raises it): its own retention ran with a higher
    HWM than the leader's at that moment (a CI failure: leader 81, follower 91)."""
    for tp in tps:
        states = [b.store.partition_state(tp) for b in brokers]
        if len({(s["log_end_offset"], s["high_watermark"]) for s in states}) != 1:
            return False
        leaders = [b for b in brokers if b.replicas.is_leader(tp)]
        if len(leaders) != 1:
            return False
        lead_start = leaders[0].store.partition_state(tp)["log_start_offset"]
        if any(s["log_start_offset"] < lead_start for s in states):
            return False
        if {b.store.log_end_offset(tp) for b in brokers} != {states[0]["log_end_offset"]}:
            return False
    return True


def divergence(brokers: Sequence[Broker], tps: Sequence[TopicIdPartition]) -> dict[str, object]:
    """Per partition, each broker's (log start, log end, HWM, leader epoch,
    leader?, ISR): what a failed convergence wait reports."""
    out: dict[str, object] = {}
    for tp in tps:
        rows = {}
        for b in brokers:
            st = b.store.partition_state(tp)
            rows[b.broker_id] = (
                st["log_start_offset"],
                st["log_end_offset"],
                st["high_watermark"],
                b.replicas.replica_epoch(tp),
                b.replicas.is_leader(tp),
                sorted(b.replicas.isr(tp) or ()),
            )
        out[str(tp)] = rows
    return out


async def consume_from(
    bootstrap: tuple[str, int], starts: dict[TopicIdPartition, int], sent: Sent
) -> dict[RecordKey, list[Where]]:
    """As cluster_helpers.consume_all, each partition read from ``starts[tp]``
    (its log start offset) up to its high watermark."""
    consumer = Consumer(bootstrap, max_wait_ms=50)
    await consumer.start()
    try:
        for tp, offset in starts.items():
            consumer.assign([tp], offset)
        want = dict(starts)
        for md in sent.acked.values():
            want[md.topic_id_partition] = max(want[md.topic_id_partition], md.offset + 1)
        seen: dict[RecordKey, list[Where]] = {}
        deadline = time.monotonic() + CONSUME_TIMEOUT_S

        def done() -> bool:
            return all(
                tp in consumer.high_watermarks and consumer.positions[tp] >= max(want[tp], consumer.high_watermarks[tp])
                for tp in starts
            )

        while not done():
            assert time.monotonic() < deadline, f"consume stuck: {consumer.positions} {consumer.errors}"
            for rec in await consumer.poll():
                seen.setdefault(key_of(rec.value), []).append((rec.topic_id_partition, rec.offset))
        return seen
    finally:
        await consumer.close()


# ------------------------------------------------------- 1. under concurrency


async def safety_under_faults(
    tmp_path: Path, objects: ObjectStore, store_url: str, *, records: int, restart: bool, seed: int
) -> None:
    delays = BrokerFaults(seed)
    faulty = FaultyStore(objects, seed, list_p=0.001, read_p=0.03, delete_p=0.4)
    progress = CycleProgress()
    uploads = LossyUploads(objects, progress, orphan_every=13, late_every=61, late_s=(DEADLINE_MS + 200) / 1000)
    [port] = free_ports(1)
    cfg = config(tmp_path, store_url, listen=f"127.0.0.1:{port}", check_timeout_ms=400, delete_batch_size=7)
    repl = ReplicationConfig(replica_lag_time_max_ms=500, replica_fetch_backoff_ms=50)
    mgr = Walmgr(cfg, store=faulty)
    await mgr.start()
    try:
        async with running_cluster(
            tmp_path,
            uploads,
            partitions=3,
            replication_factor=3,
            replication=repl,
            commit_deadline_ms=DEADLINE_MS,
            commit_rpc_timeout_ms=3000,
            walmgr_address=f"127.0.0.1:{port}",
        ) as (brokers, meta):
            mgr.metadata = meta
            tps = topic_partitions(meta)
            [topic] = meta.topics()
            for b in brokers:
                delays.install(b)
            refs = References(tps)
            stopped: set[int] = set()  # broker ids down for a restart

            def running() -> list[Broker]:
                return [b for b in brokers if b.broker_id not in stopped]

            violations: list[str] = []
            cycle_errors: list[BaseException] = []
            reports: list[CycleReport] = []
            loop_stop = asyncio.Event()

            def check_nothing_live_deleted(when: str) -> None:
                bad = faulty.deleted & refs.live(running())
                if bad:
                    violations.append(f"{when}: deleted objects still referenced: {sorted(bad)[:5]}")

            async def walmgr_loop() -> None:
                while not loop_stop.is_set():
                    progress.started += 1
                    n = progress.started
                    try:
                        reports.append(await mgr.cycle())
                        progress.done.append(n)
                    except Exception as e:  # a failed cycle is retried, as Walmgr.run does
                        cycle_errors.append(e)
                    check_nothing_live_deleted(f"after cycle {len(reports) + len(cycle_errors)}")
                    await asyncio.sleep(0.05)

            planted: set[str] = set()  # direct orphans
            invalid = {f"{PREFIX}/zz/not-a-wal-key.txt", "wal-old/00/0000000000001-1-ab.wal"}
            for k in invalid:
                objects.put(k, b"not a segment")
            deleted_records: dict[TopicIdPartition, int] = {}

            async def events(i: int) -> None:
                if i % 50 == 20:
                    uploads.hold(3)
                if i in (30, 200):
                    planted.update(
                        orphan(objects, [tps[j % 3], tps[(j + 1) % 3]], cluster_id=meta.cluster_id) for j in range(3)
                    )
                elif i == 60:
                    leader = next(b for b in running() if b.replicas.is_leader(tps[0]))
                    await until(lambda: leader.store.high_watermark(tps[0]) > 0, "acknowledged records on tp0")
                    [r] = await asyncio.to_thread(leader.store.delete_records, [DeleteRecordsRequest(tps[0], -1)])
                    assert r.errors == Errors.NONE
                    deleted_records[tps[0]] = r.low_watermark
                elif i == 90 and restart:
                    i_b = 2
                    old = brokers[i_b]
                    cfg_b = dataclasses.replace(old.config, port=old.port)
                    stopped.add(old.broker_id)
                    await old.stop()
                    await asyncio.sleep(0.3)
                    new = Broker(cfg_b, meta, uploads)
                    await new.start()
                    delays.install(new)
                    brokers[i_b] = new
                    stopped.discard(new.broker_id)
                elif i == 150:
                    # Retention on every replica, at one instant: retention.ms 300 for a moment.
                    t = now_ms()
                    for b in running():
                        await asyncio.to_thread(b.store.alter_topic_configs, topic.topic_id, {"retention.ms": 300})
                        await asyncio.to_thread(b.store.enforce_retention, t)
                        await asyncio.to_thread(b.store.alter_topic_configs, topic.topic_id, {"retention.ms": -1})

            loop = asyncio.create_task(walmgr_loop())
            producers = [
                Producer(("127.0.0.1", brokers[k].port), az=f"az{k + 1}", linger_ms=2, request_timeout_ms=5000)
                for k in range(2)
            ]
            for p in producers:
                await p.start()
            try:
                sent = await produce(producers, tps, records, during=events, pause_s=0.15)
            finally:
                for p in producers:
                    await p.close()
                loop_stop.set()
                await loop
            assert not violations, violations
            # Every cycle that failed, failed on an (injected) store error: nothing else went wrong.
            assert all(isinstance(e, ObjectStoreError) for e in cycle_errors), cycle_errors
            assert reports, "no walmgr cycle completed under the faults"
            assert uploads.orphans, "no upload turned into an orphan"
            assert faulty.injected, "no store fault was injected"
            assert uploads.held, "no upload was held"

            # The faults stop; the replicas converge (followers learn the log start offsets).
            faulty.enabled = uploads.enabled = delays.on = False
            await until(
                lambda: converged(brokers, tps), "the replicas to converge", detail=lambda: divergence(brokers, tps)
            )
            referenced = {k for b in brokers for k in b.store.file_usage()}
            check_nothing_live_deleted("after the faults")
            assert not violations, violations
            assert referenced <= listed(objects, PREFIX + "/"), "a referenced object was deleted"
            # Every acknowledged record not removed by DeleteRecords or retention is read back exactly once.
            starts = {tp: max(b.store.partition_state(tp)["log_start_offset"] for b in brokers) for tp in tps}
            assert starts[tps[0]] >= deleted_records[tps[0]] > 0
            kept = Sent(
                {k: md for k, md in sent.acked.items() if md.offset >= starts[md.topic_id_partition]},
                set(),
                sent.futures,
            )
            assert kept.acked, "retention and DeleteRecords removed everything: nothing left to check"
            check_exactly_once(kept, await consume_from(("127.0.0.1", brokers[0].port), starts, kept))

            # Every orphan older than the gate is gone within two cycles.
            wal_keys = listed(objects, PREFIX + "/") - invalid
            await past_gate(wal_keys)
            for _ in range(2):
                await mgr.cycle()
            remaining = listed(objects, PREFIX + "/")
            referenced = {k for b in brokers for k in b.store.file_usage()}
            assert remaining - referenced == {k for k in invalid if k.startswith(PREFIX + "/")}, sorted(
                remaining - referenced
            )[:10]
            assert referenced <= remaining
            assert {"wal-old/00/0000000000001-1-ab.wal"} <= listed(objects, "wal-old/")
            assert set(uploads.orphans) | set(uploads.late) | planted <= faulty.deleted
            # What the registry records as deleted, the store deleted.
            reg = mgr.registry
            assert reg is not None
            recorded = {r.key for r in reg.records({State.DELETED})}
            assert recorded <= faulty.deleted and recorded.isdisjoint(remaining)
            # Batches stayed within the configured size.
            assert max(len(c) for c in faulty.delete_calls) <= cfg.delete_batch_size
            assert reg.check() == []
    finally:
        await mgr.stop()


# ------------------------------------------------------------ 2. clock skew


async def commit(broker: Broker, key: str, tp: TopicIdPartition, file_size: int) -> Errors:
    """Commit one batch of ``key`` to its leader ``broker``, as an uploader would."""
    c = await RpcClient.connect("127.0.0.1", broker.port)
    try:
        batch = build_record_batch([(None, b"late", now_ms())])
        req = CommitBatchRequest.from_header(0, tp, 1, batch[:61])
        answer = await c.call("commit", enc_commit(key, 1, file_size, [req]))
        return Errors(answer[0][0])
    finally:
        await c.close()


@contextlib.asynccontextmanager
async def one_broker(
    tmp_path: Path, objects: ObjectStore, clock: RuntimeClock
) -> AsyncIterator[tuple[Broker, StaticMetadata, TopicIdPartition]]:
    """A single broker leading topic "t" (one partition) with its own clock."""
    meta = StaticMetadata.generate(azs=1, brokers_per_az=1, topics={"t": 1})
    cfg = BrokerConfig(1, "az1", str(tmp_path / "broker-1"), sync=False, commit_deadline_ms=DEADLINE_MS)
    broker = Broker(cfg, meta, objects, clock=clock)
    await broker.start()
    try:
        meta = meta.with_ports({1: broker.port})
        broker.set_metadata(meta)
        [tp] = topic_partitions(meta)
        yield broker, meta, tp
    finally:
        await broker.stop()


# ----------------------------------------------------- 3. leadership changes


def at_leader(meta: StaticMetadata, leader: int, epoch: int) -> StaticMetadata:
    """``meta`` with partition 0 of its topic led by ``leader`` at ``epoch``."""
    [t] = meta.topics()
    parts = list(t.partitions)
    parts[0] = dataclasses.replace(parts[0], leader=leader, leader_epoch=epoch, partition_epoch=epoch)
    return meta.with_topics([dataclasses.replace(t, partitions=tuple(parts))])


# ------------------------------------------------ 4. unknown key shapes


def weird_keys(tps: Sequence[TopicIdPartition], with_bare_prefix: bool) -> dict[str, bytes]:
    """Objects around the prefix ``wal`` that walmgr must never delete, most
    holding a valid WAL segment so that only the key protects them."""
    old = now_ms() - 3_600_000
    seg = segment(tps, old)
    name = f"{old:013d}-1-{secrets.token_hex(8)}.wal"
    shard = shard_of(name)
    wrong_shard = f"{(int(shard, 16) + 1) % 256:02x}"
    out = {
        f"{PREFIX}/zz/x.txt": b"not a segment",
        f"{PREFIX}/00/notakey": seg,
        f"{PREFIX}/{wrong_shard}/{name}": seg,  # a WAL name in the wrong shard
        f"{PREFIX}/sub/{shard}/{name}": seg,  # a WAL key of the prefix "wal/sub"
        f"{PREFIX}/{shard}/{old:013d}-1-{secrets.token_hex(8)}.wal.bak": seg,
        str(make_wal_key(PREFIX, old, 1, "bad0")): b"\x01not a segment",  # a WAL key, not a segment
        str(make_wal_key(PREFIX, old, 2, "ba1")): segment(tps, old, broker_id=1),  # the footer's broker differs
        f"{PREFIX}/00/" + "/".join(["a" * 200] * 3): seg,  # longer than any WAL key
        f"wal-old/{shard}/{name}": seg,
        f"walx/{shard}/{name}": seg,
        str(make_wal_key("wal2", old, 1, secrets.token_hex(8))): seg,  # a valid WAL key of prefix "wal2"
    }
    if with_bare_prefix:  # a file named like the prefix (a local directory cannot be both)
        out[PREFIX] = seg
    return out


async def unknown_keys_are_never_deleted(tmp_path: Path, objects: ObjectStore, store_url: str) -> dict[str, bytes]:
    """Two cycles over the weird keys and one real orphan, all past the gate:
    only the orphan is planned and deleted; the rest are reported (under the
    prefix) or never read (outside it).  Then the deleter's own fence."""
    # Partitions of a topic the metadata says was deleted: no leader is asked.
    gone_topic = [TopicIdPartition(uuid_of("gone"), 0)]
    generated = StaticMetadata.generate(azs=1, brokers_per_az=1, topics={"t": 1}, cluster_id=TEST_CLUSTER_ID)
    meta = StaticMetadata(
        generated.brokers(), generated.topics(), [gone_topic[0].topic_id], cluster_id=generated.cluster_id
    )
    weird = weird_keys(gone_topic, with_bare_prefix=not isinstance(objects, LocalDirStore))
    for k, data in weird.items():
        objects.put(k, data)
    control = orphan(objects, gone_topic, now_ms() - 3_600_000)
    cfg = config(tmp_path, store_url)
    # The cluster's broker holds nothing: the sweep's answer for the orphan.
    broker, meta = await empty_broker(meta)
    mgr = Walmgr(cfg, store=objects, metadata=meta)
    await mgr.start()
    try:
        reg = mgr.registry
        assert reg is not None
        r1 = await mgr.cycle()
        r2 = await mgr.cycle()
        assert r1.planned == [control] and not r2.planned
        everything = listed(objects)
        assert set(weird) <= everything and control not in everything
        under = {k for k in weird if k.startswith(PREFIX + "/")}
        oversized = {k for k in under if len(k.encode()) > 511}
        # Under the prefix: reported, recorded INVALID (too long to record: reported by every scan).
        assert r1.full is not None and r2.full is not None
        assert r1.incremental is not None
        reported = {k for k, _ in r1.incremental.invalid} | {k for k, _ in r1.full.invalid}
        assert under <= reported, under - reported
        assert oversized <= {k for k, _ in r2.full.invalid}
        for k in under - oversized:
            rec = reg.get(k)
            assert rec is not None and rec.state == State.INVALID and rec.note, (k, rec)
        # Outside it ("wal", "wal-old/", "walx/", "wal2/"): never even read.
        for k in set(weird) - under:
            assert reg.get(k) is None, k
        # Never planned: an INVALID record, or a key that is not a WAL key, cannot enter the plan ...
        for k in under - oversized:
            rec = reg.get(k)
            assert rec is not None
            with pytest.raises(ValueError):
                reg.plan([rec.with_state(State.TRACKED)])
        # ... and a WAL-shaped key that is not a WAL key of this prefix, forced
        # into the plan, is refused by the deleter's own fence.
        content_invalid = {
            k for k in under - oversized if "not a WAL segment" in _note(reg, k) or "footer says" in _note(reg, k)
        }
        forced = [k for k in weird if k not in oversized | content_invalid and _is_wal_key(k)]
        assert len(forced) == 5, forced  # wrong shard, wal/sub, wal-old, walx, wal2
        reg.put_many([_record(k) for k in forced])
        assert {r.key for r in reg.plan([_record(k) for k in forced])} == set(forced)
        sent: list[str] = []

        def delete(keys: Sequence[str]) -> DeleteResult:
            sent.extend(keys)
            return objects.delete_many(keys)

        report = execute_plan(objects, reg, PREFIX, batch_size=10, clock=SYSTEM_CLOCK, delete=delete)
        assert set(report.refused) == set(forced) and not sent, (report.refused, sent)
        assert set(weird) <= listed(objects)
        assert all(r.state == State.INVALID for k in forced if (r := reg.get(k)) is not None)
        assert not reg.planned(10)
    finally:
        await mgr.stop()
        await broker.close()
    return weird


def uuid_of(name: str) -> uuid.UUID:
    return uuid.uuid5(uuid.NAMESPACE_URL, f"walmgr-test/{name}")


def _is_wal_key(key: str) -> bool:
    try:
        parse_wal_key(key)
    except WalKeyError:
        return False
    return True


def _note(reg: Registry, key: str) -> str:
    rec = reg.get(key)
    return rec.note if rec is not None else ""


def _record(key: str) -> ObjectRecord:
    return ObjectRecord(key, 1, 0, 1, (), Source.SCAN, State.TRACKED, now_ms())


def scan_json(capsys: pytest.CaptureFixture[str], args: list[str]) -> dict[str, Any]:
    capsys.readouterr()
    assert cli.main(["scan", "--json", *args]) == 0
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    return out


def check_scan_json(out: dict[str, Any], weird: dict[str, bytes]) -> None:
    """``walmgr scan --json`` lists the invalid keys under the prefix as "invalid"."""
    status = {o["key"]: o["status"] for o in out["objects"]}
    under = {k for k in weird if k.startswith(PREFIX + "/")}
    oversized = {k for k in under if len(k.encode()) > 511}
    for k in under - oversized:
        assert status.get(k) == "invalid", (k, status.get(k))
    assert oversized <= {i["key"] for i in out["invalid"]}
    # (The sibling-prefix keys were forced into the plan above; refused, they are invalid too.)
    assert all(status[k] == "invalid" for k in set(weird) & set(status))
