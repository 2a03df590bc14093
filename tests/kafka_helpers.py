"""A partlog cluster with Kafka listeners, run in a thread of its own, so
that blocking Kafka clients (confluent-kafka, kafka-python, kcat) can talk
to it from the test's thread."""

from __future__ import annotations

import asyncio
import shutil
import socket
import struct
import threading
from collections.abc import Coroutine, Iterator
from concurrent.futures import Future
from typing import Any, TypeVar

import pytest

from partlog.kafka_front.apis import FrontConfig
from partlog.tools.cluster_options import ClusterOptions
from partlog.tools.local_cluster import LocalCluster
from partlog.wal.localdir_store import LocalDirStore
from partlog.wal.objectstore import ObjectStore
from tests.tmpdirs import module_dir

T = TypeVar("T")


# For clusters whose tests kill brokers: fenced (and led elsewhere) within 3 s.
QUICK_FENCING_MS = 3_000


class ClusterThread:
    """A LocalCluster (controller, brokers with Kafka listeners) on an event
    loop in a background thread."""

    def __init__(
        self, data_dir: str, front: FrontConfig | None = None, objects: ObjectStore | None = None, **opts: Any
    ) -> None:
        defaults: dict[str, Any] = {
            "azs": 3,
            "brokers_per_az": 1,
            "partitions": 3,
            "walmgr": False,
            "sync": False,
            "commit_interval_ms": 20,
            # Kafka's default: under a loaded CI machine a 3 s session
            # lapsed between two etcd keepalives and fenced a broker mid-test.
            # Tests that kill brokers pass QUICK_FENCING_MS to wait less.
            "broker_session_timeout_ms": 9_000,
        }
        defaults.update(opts)
        self.opts = ClusterOptions(**defaults)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        store = objects or LocalDirStore(f"{data_dir}/objects")
        self.cluster = LocalCluster(self.opts, data_dir, store, front=front)
        self.call(self.cluster.start())

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 60.0) -> T:
        fut: Future[T] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return fut.result(timeout)

    @property
    def bootstrap(self) -> str:
        return self.cluster.kafka_bootstrap()

    def kafka_port(self, broker_id: int) -> int:
        return self.cluster.kafka_ports[broker_id]

    def produce_requests(self) -> dict[int, int]:
        return {bid: b.stats.produce_requests for bid, b in self.cluster.brokers.items()}

    def kill(self, broker_id: int) -> None:
        self.call(self.cluster.kill(broker_id))

    def restart(self, broker_id: int) -> None:
        self.call(self.cluster.start_broker(broker_id))

    def close(self) -> None:
        try:
            self.call(self.cluster.stop())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)
            self.loop.close()


def raw_request(
    api_key: int, version: int, correlation_id: int, body: bytes, client_id: str = "t", flexible: bool = False
) -> bytes:
    """A request frame built by hand (for malformed-request tests)."""
    cid = client_id.encode()
    header = struct.pack(">hhih", api_key, version, correlation_id, len(cid)) + cid
    if flexible:
        header += b"\0"
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


def read_frame(sock: socket.socket) -> bytes | None:
    """One response frame's payload, or None if the peer closed."""
    head = _read_exactly(sock, 4)
    if head is None:
        return None
    (size,) = struct.unpack(">i", head)
    return _read_exactly(sock, size)


def _read_exactly(sock: socket.socket, n: int) -> bytes | None:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


API_VERSIONS_V0 = raw_request(18, 0, 1, b"")


def kio_request(api_key: int, version: int, correlation_id: int, data: dict[str, Any], client_id: str = "t") -> bytes:
    """A request frame built with kio from plain values (partlog.kafka_front.codec.build)."""
    import io

    from kio.index import load_request_schema
    from kio.schema.request_header.v1.header import RequestHeader as V1
    from kio.schema.request_header.v2.header import RequestHeader as V2
    from kio.serial import entity_writer

    from partlog.kafka_front.codec import build

    cls = load_request_schema(api_key, version)
    header_cls = V2 if cls.__flexible__ else V1
    out = io.BytesIO()
    fields: dict[str, Any] = {
        "request_api_key": api_key,
        "request_api_version": version,
        "correlation_id": correlation_id,
        "client_id": client_id,
    }
    header = header_cls(**fields)
    entity_writer(header_cls)(out, header)
    entity_writer(cls)(out, build(cls, data))
    payload = out.getvalue()
    return struct.pack(">i", len(payload)) + payload


def kio_answer(api_key: int, version: int, frame: bytes) -> Any:
    """The body of a response frame (payload without the size prefix)."""
    from kio.serial import entity_reader

    from partlog.kafka_front.codec import response_class

    cls = response_class(api_key, version)
    offset = 4 + (1 if cls.__flexible__ and api_key != 18 else 0)
    body, _ = entity_reader(cls)(frame, offset)
    return body


# The two metadata back ends, for a module fixture's params (etcd's tests
# skip where etcd is not installed).
BACK_ENDS = ["embedded", pytest.param("etcd", marks=pytest.mark.skipif(shutil.which("etcd") is None,
                                                                        reason="etcd is not installed"))]  # fmt: skip


def cluster_on_back_end(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, name: str, **opts: Any
) -> Iterator[ClusterThread]:
    """A module fixture's body: a ClusterThread on ``request.param``'s back
    end (one of BACK_ENDS), closed after the module."""
    metadata = "" if request.param == "embedded" else "etcd"
    with module_dir(tmp_path_factory, f"{name}-{request.param}") as d:
        c = ClusterThread(str(d), metadata=metadata, **opts)
        try:
            yield c
        finally:
            c.close()


def admin_client(cluster: ClusterThread) -> Any:
    """confluent-kafka's AdminClient bootstrapped at ``cluster``."""
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": cluster.bootstrap})
