"""Cluster identity (design.md, "Deletion safety", step 0).

Two clusters whose topics have the same names, even the same topic ids,
must never be mistaken for one another: the cluster id is in every broker's
store, every WAL footer, every RPC handshake and walmgr's registry, and
walmgr refuses (or keeps the objects) when any of them names another.

Mutation checks (run by hand; each makes the named test fail, which shows
the test can fail):

* ``check_cluster`` in ``partlog/rpc/frame.py`` made a no-op (``return``
  at its top): ``test_walmgr_asking_another_clusters_brokers_refuses`` fails
  (the other cluster's leaders answer NOT_REFERENCED for the same topic ids
  and walmgr deletes live objects), and so do the handshake tests.
* The cluster checks in ``walmgr/scanner.py`` (``inspect_object``: the
  ``footer.cluster_id`` tests) and ``walmgr/decide.py`` (``plan_checks``:
  ``r.cluster_id != cluster_id``) removed together:
  ``test_walmgr_pointed_at_another_cluster_deletes_nothing`` fails (its
  objects are planned and deleted).
* ``Registry.bind_cluster``'s check removed:
  ``test_a_registry_bound_to_one_cluster_refuses_another`` fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from partlog.broker.server import Broker, BrokerConfig, start_brokers
from partlog.controller.client import ControllerMetadata
from partlog.controller.cluster_meta import (
    ClusterMismatchError,
    StaticMetadata,
)
from partlog.controller.core import ControllerConfig
from partlog.controller.server import ControllerServer
from partlog.kafka.errors import Errors
from partlog.kafka.record_batch import build_record_batch
from partlog.kafka.records import TopicIdPartition
from partlog.produce.pipeline import ProduceConfig
from partlog.rpc.client import RpcClient, RpcHandshakeError
from partlog.rpc.frame import RpcErrorCode
from partlog.rpc.server import RpcServer
from partlog.runtime import SYSTEM_CLOCK, Clock, SkewedClock
from partlog.store import MetadataStore, StoreError
from partlog.wal.localdir_store import LocalDirStore
from partlog.wal.objectstore import ObjectStore
from tests.walmgr_helpers import listed
from walmgr.config import WalmgrConfig
from walmgr.daemon import Walmgr
from walmgr.model import State
from walmgr.registry import Registry

A = uuid.UUID("aaaaaaaa-0000-4000-8000-00000000000a")
B = uuid.UUID("bbbbbbbb-0000-4000-8000-00000000000b")
DEADLINE_MS = 800
SKEW_MS = 100
GRACE_MS = 100
GATE_S = (DEADLINE_MS + SKEW_MS + GRACE_MS) / 1000


# ------------------------------------------------------------- handshake


def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def _echo(body: Any) -> Any:
    return body


@pytest.mark.timeout(30)
def test_handshake_refuses_another_cluster_both_ways() -> None:
    async def main() -> None:
        server = RpcServer({"echo": _echo}, cluster_id=A)
        await server.start()
        try:
            # A client of the same cluster, and a plain client that knows none.
            for cid in (A, None):
                c = await RpcClient.connect("127.0.0.1", server.port, cluster_id=cid)
                assert c.server_cluster_id == A
                assert await c.call("echo", 1) == 1
                await c.close()
            # A client of another cluster refuses the server's challenge itself.
            with pytest.raises(RpcHandshakeError) as e:
                await RpcClient.connect("127.0.0.1", server.port, cluster_id=B)
            assert e.value.code == RpcErrorCode.CLUSTER_MISMATCH
            assert str(A) in str(e.value) and str(B) in str(e.value)
        finally:
            await server.close()
        # A server that names no cluster: the client learns nothing, and
        # callers that need one (walmgr, ControllerMetadata) refuse it.
        anon = RpcServer({"echo": _echo})
        await anon.start()
        try:
            c = await RpcClient.connect("127.0.0.1", anon.port, cluster_id=A)
            assert c.server_cluster_id is None
            await c.close()
        finally:
            await anon.close()

    run(main())


@pytest.mark.timeout(30)
def test_server_refuses_a_hello_naming_another_cluster() -> None:
    """The server's own check, with a client that skips its side of it (as
    a peer of another version or a hostile one would)."""
    from partlog.rpc.frame import (
        CONNECTION_REQUEST_ID,
        HELLO_METHOD,
        FrameDecoder,
        Kind,
        encode_frame,
        hello_body,
        parse_challenge,
    )

    async def main() -> None:
        server = RpcServer({"echo": _echo}, cluster_id=A)
        await server.start()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            decoder = FrameDecoder()
            frames: list[Any] = []
            while not frames:
                frames += decoder.feed(await reader.read(65536))
            nonce, named = parse_challenge(frames.pop(0))
            assert named == A
            writer.write(encode_frame(Kind.REQUEST, CONNECTION_REQUEST_ID, HELLO_METHOD, hello_body(None, nonce, B)))
            while not frames:
                data = await reader.read(65536)
                assert data, "closed without an answer"
                frames += decoder.feed(data)
            answer = frames.pop(0)
            assert answer.kind == Kind.ERROR and answer.body[0] == RpcErrorCode.CLUSTER_MISMATCH
            assert await reader.read(65536) == b""  # then the close
            writer.close()
        finally:
            await server.close()

    run(main())


# ------------------------------------------------------------------ brokers


def _config(tmp_path: Path, name: str, broker_id: int, az: str) -> BrokerConfig:
    return BrokerConfig(
        broker_id,
        az,
        str(tmp_path / name / f"broker-{broker_id}"),
        produce=ProduceConfig(commit_interval_ms=20),
        sync=False,
        commit_deadline_ms=DEADLINE_MS,
    )


@contextlib.asynccontextmanager
async def cluster(
    tmp_path: Path, name: str, meta: StaticMetadata, objects: ObjectStore, clock: Clock = SYSTEM_CLOCK
) -> AsyncIterator[tuple[list[Broker], StaticMetadata]]:
    configs = [_config(tmp_path, name, b.broker_id, b.az) for b in meta.brokers()]
    brokers, meta = await start_brokers(configs, meta, objects, clock=clock)
    try:
        yield brokers, meta
    finally:
        for b in brokers:
            await b.stop()


def twin(meta: StaticMetadata, cluster_id: uuid.UUID) -> StaticMetadata:
    """The same brokers and topics (the same topic ids) in another cluster:
    what an operator who copied a cluster file without its id would build."""
    return StaticMetadata(meta.brokers(), meta.topics(), cluster_id=cluster_id)


async def produce_some(brokers: list[Broker], meta: StaticMetadata) -> set[str]:
    """One acknowledged batch per partition; the WAL objects now referenced."""
    [topic] = meta.topics()
    for p in range(topic.num_partitions):
        tp = TopicIdPartition(topic.topic_id, p)
        leader = next(b for b in brokers if b.replicas.is_leader(tp))
        [r] = await leader.produce([(tp, build_record_batch([(None, b"live", int(time.time() * 1000))]))], acks=1)
        assert r.error == Errors.NONE, r
    return {k for b in brokers for k in b.store.file_usage()}


def test_broker_refuses_another_clusters_store_metadata_and_peers(tmp_path: Path) -> None:
    objects = LocalDirStore(tmp_path / "objects", fsync=False)

    async def main() -> None:
        meta_a = StaticMetadata.generate(azs=1, brokers_per_az=1, topics={"t": 1}, cluster_id=A)
        async with cluster(tmp_path, "a", meta_a, objects) as (brokers, meta_a):
            [broker] = brokers
            with pytest.raises(ClusterMismatchError, match=str(B)):
                broker.set_metadata(twin(meta_a, B))
            # A peer of cluster B cannot even connect to A's broker.
            with pytest.raises(RpcHandshakeError) as e:
                await RpcClient.connect("127.0.0.1", broker.port, cluster_id=B)
            assert e.value.code == RpcErrorCode.CLUSTER_MISMATCH
        # A's data directory under B's metadata: refused before it listens.
        b = Broker(_config(tmp_path, "a", 1, "az1"), twin(meta_a, B), objects)
        with pytest.raises(StoreError, match=f"belongs to cluster {A}"):
            await b.listen()
        await b.stop()

    run(main())


# ------------------------------------------------------------------ walmgr


def _walmgr_config(tmp_path: Path, registry: str = "registry") -> WalmgrConfig:
    return WalmgrConfig.for_cli(
        "file://" + str(tmp_path / "objects"),
        str(tmp_path / registry),
        commit_deadline_ms=DEADLINE_MS,
        max_clock_skew_ms=SKEW_MS,
        grace_ms=GRACE_MS,
        full_scan_interval_ms=1,
    )


@contextlib.asynccontextmanager
async def a_cluster_with_live_objects(
    tmp_path: Path, objects: ObjectStore, clock: SkewedClock
) -> AsyncIterator[tuple[list[Broker], StaticMetadata, set[str]]]:
    """Cluster A on ``clock``, with live objects; then ``clock`` (every
    broker's and walmgr's) jumps past the age gate instead of a sleep."""
    meta_a = StaticMetadata.generate(azs=1, brokers_per_az=2, topics={"t": 2}, cluster_id=A)
    async with cluster(tmp_path, "a", meta_a, objects, clock) as (brokers, meta_a):
        live = await produce_some(brokers, meta_a)
        assert live
        clock.skew_ms += round((GATE_S + 0.2) * 1000)
        yield brokers, meta_a, live


@pytest.mark.timeout(120)
def test_walmgr_pointed_at_another_cluster_deletes_nothing(tmp_path: Path) -> None:
    """Cluster A's live objects in the bucket; a fresh walmgr whose metadata
    is cluster B's (the same topic ids, B's brokers lead them and reference
    nothing): the footers name A, so every object is INVALID, nothing is
    asked and nothing is deleted."""
    objects = LocalDirStore(tmp_path / "objects", fsync=False)

    clock = SkewedClock(SYSTEM_CLOCK)  # the clusters' and walmgr's one clock

    async def main() -> None:
        async with (
            a_cluster_with_live_objects(tmp_path, objects, clock) as (_brokers_a, meta_a, live),
            cluster(tmp_path, "b", twin(meta_a, B), objects, clock) as (_brokers_b, meta_b),
        ):
            assert {t.topic_id for t in meta_b.topics()} == {t.topic_id for t in meta_a.topics()}
            mgr = Walmgr(_walmgr_config(tmp_path), store=objects, metadata=meta_b, clock=clock)
            await mgr.start()
            try:
                assert mgr.cluster_id == B
                for _ in range(2):
                    report = await mgr.cycle()
                    assert report.planned == [], report.planned
                reg = mgr.registry
                assert reg is not None
                for key in live:
                    rec = reg.get(key)
                    assert rec is not None and rec.state == State.INVALID, rec
                    assert f"names cluster {A}" in rec.note
            finally:
                await mgr.stop()
            assert live <= listed(objects)

    run(main())


@pytest.mark.timeout(120)
def test_walmgr_asking_another_clusters_brokers_refuses(tmp_path: Path) -> None:
    """walmgr bound to cluster A, with A's metadata, but the addresses in it
    reach cluster B's brokers (which lead the same topic ids and reference
    nothing): the handshake names B, walmgr stops with ClusterMismatchError,
    and nothing is deleted."""
    objects = LocalDirStore(tmp_path / "objects", fsync=False)

    clock = SkewedClock(SYSTEM_CLOCK)  # the clusters' and walmgr's one clock

    async def main() -> None:
        async with (
            a_cluster_with_live_objects(tmp_path, objects, clock) as (brokers_a, meta_a, live),
            cluster(tmp_path, "b", twin(meta_a, B), objects, clock) as (brokers_b, _meta_b),
        ):
            spoofed = meta_a.with_ports({b.broker_id: b.port for b in brokers_b})
            mgr = Walmgr(_walmgr_config(tmp_path), store=objects, metadata=spoofed, clock=clock)
            await mgr.start()
            try:
                assert mgr.cluster_id == A
                refused: list[str] = []
                for _ in range(2):
                    try:
                        await mgr.cycle()
                    except ClusterMismatchError as e:
                        refused.append(str(e))
                # What matters first: no live object of A was deleted.
                assert live <= listed(objects), sorted(live - listed(objects))
                assert len(refused) == 2 and all(f"belongs to cluster {B}" in r for r in refused), refused
                with pytest.raises(ClusterMismatchError):
                    await mgr.run()  # the daemon stops too: no retry on a misconfiguration
            finally:
                await mgr.stop()
            assert live <= {k for b in brokers_a for k in b.store.file_usage()}

    run(main())


@pytest.mark.timeout(120)
def test_a_registry_bound_to_one_cluster_refuses_another(tmp_path: Path) -> None:
    objects = LocalDirStore(tmp_path / "objects", fsync=False)

    clock = SkewedClock(SYSTEM_CLOCK)  # the clusters' and walmgr's one clock

    async def main() -> None:
        async with a_cluster_with_live_objects(tmp_path, objects, clock) as (_brokers_a, meta_a, live):
            first = Walmgr(_walmgr_config(tmp_path), store=objects, metadata=meta_a, clock=clock)
            await first.start()
            await first.stop()
            with Registry(str(tmp_path / "registry")) as reg:
                assert reg.cluster_id == A
            # The same registry, now given cluster B's metadata.
            mgr = Walmgr(_walmgr_config(tmp_path), store=objects, metadata=twin(meta_a, B), clock=clock)
            with pytest.raises(ClusterMismatchError) as e:
                await mgr.start()
            assert str(A) in str(e.value) and str(B) in str(e.value)
            await mgr.stop()
            # And a configured cluster_id that disagrees with the metadata.
            cfg = _walmgr_config(tmp_path, "registry-2").replace(cluster_id=str(B))
            mgr = Walmgr(cfg, store=objects, metadata=meta_a, clock=clock)
            with pytest.raises(ClusterMismatchError):
                await mgr.start()
            await mgr.stop()
            assert live <= listed(objects)

    run(main())


@pytest.mark.timeout(60)
def test_controller_metadata_refuses_another_clusters_controller(tmp_path: Path) -> None:
    async def main() -> None:
        server = ControllerServer(ControllerConfig(str(tmp_path / "ctl"), cluster_id=A))
        await server.start()
        try:
            good = ControllerMetadata("127.0.0.1", server.port)
            assert await good.connect(timeout_ms=5_000) == A
            await good.stop()
            bad = ControllerMetadata("127.0.0.1", server.port, cluster_id=B)
            with pytest.raises(ClusterMismatchError, match=str(B)):
                await bad.start(timeout_ms=5_000)
            await bad.stop()
        finally:
            await server.stop()

    run(main())


def test_store_of_cluster_file_broker(tmp_path: Path) -> None:
    """``partlog broker --cluster FILE`` binds its store to the file's cluster."""
    meta = StaticMetadata.generate(azs=1, brokers_per_az=1, topics={"t": 1}, cluster_id=A)

    async def main() -> None:
        objects = LocalDirStore(tmp_path / "objects", fsync=False)
        async with cluster(tmp_path, "x", meta, objects) as (brokers, _):
            assert brokers[0].store.cluster_id == A

    run(main())
    with MetadataStore.open(os.path.join(tmp_path, "x", "broker-1"), readonly=True) as s:
        assert s.cluster_id == A


@pytest.mark.timeout(60)
def test_a_broker_binds_its_port_before_it_registers(tmp_path: Path) -> None:
    """Regression (issue 13, item 7): ``partlog broker`` on a port in use
    registered with the controller first and then died; the controller went
    on naming the dead broker.  The order now: reach the controller (its
    cluster id), bind the port, and only then register."""
    import socket

    from partlog.controller.cluster_meta import BrokerInfo

    async def main() -> None:
        server = ControllerServer(ControllerConfig(str(tmp_path / "ctl")))
        await server.start()
        busy = socket.socket()
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        try:
            me = BrokerInfo(1, "az1", "127.0.0.1", port)
            source = ControllerMetadata("127.0.0.1", server.port, me)
            assert await source.connect(timeout_ms=5_000) == server.controller.cluster_id
            cfg = BrokerConfig(1, "az1", str(tmp_path / "b1"), port=port, sync=False)
            broker = Broker(cfg, source, LocalDirStore(tmp_path / "objects", fsync=False))
            with pytest.raises(OSError):
                await broker.listen()
            await broker.stop()
            await source.stop()
            assert server.controller.registration(1) is None  # never told it serves there
        finally:
            busy.close()
            await server.stop()

    run(main())
