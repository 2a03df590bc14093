"""The Kafka listener's connection limits, exercised (issue 29): the
per-address cap and the listener-wide cap refuse extra connections (counted
by reason) while the admitted ones keep being served, the idle timeout
(Kafka's ``connections.max.idle.ms``) closes a connection with nothing in
flight and never one waiting on a request, and a closed connection frees
its place.  A second listener with tight limits on a running broker; real
sockets on the loopback; no timing asserted beyond generous deadlines."""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator
from typing import Any

import pytest

from partlog.kafka_front.server import KafkaListener, ListenerLimits
from partlog.tools.local_cluster import TOPIC
from tests.kafka_helpers import API_VERSIONS_V0, ClusterThread, kio_request, read_frame


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterThread]:
    c = ClusterThread(str(tmp_path_factory.mktemp("kafka")), azs=1, brokers_per_az=1, partitions=1)
    try:
        yield c
    finally:
        c.close()


def _listener(cluster: ClusterThread, limits: ListenerLimits) -> KafkaListener:
    [broker] = cluster.cluster.brokers.values()

    async def start() -> KafkaListener:
        listener = KafkaListener(broker, limits=limits)
        await listener.start()
        return listener

    return cluster.call(start())


def _served(s: socket.socket) -> bool:
    try:
        s.sendall(API_VERSIONS_V0)
        return read_frame(s) is not None
    except OSError:
        return False


def _closed_by_peer(s: socket.socket, within_s: float = 15.0) -> bool:
    s.settimeout(within_s)
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def _refused(listener: KafkaListener, reason: str) -> float:
    return float(listener.metrics.connections_refused.labels(reason)._value.get())


@pytest.mark.parametrize("reason", ["connections_per_ip_max", "connections_max"])
def test_a_connection_past_a_cap_is_refused_and_the_admitted_ones_are_served(
    cluster: ClusterThread, reason: str
) -> None:
    limits: dict[str, Any] = {"connections_per_ip_max": 2} if reason == "connections_per_ip_max" else {
        "connections_max": 2}  # fmt: skip
    listener = _listener(cluster, ListenerLimits(**limits))
    try:
        a = socket.create_connection(("127.0.0.1", listener.port), timeout=10)
        b = socket.create_connection(("127.0.0.1", listener.port), timeout=10)
        assert _served(a) and _served(b)  # both admitted (accepted before the third arrives)
        before = _refused(listener, reason)
        c = socket.create_connection(("127.0.0.1", listener.port), timeout=10)
        assert _closed_by_peer(c), "the connection past the cap was not closed"
        assert _refused(listener, reason) == before + 1
        assert _served(a) and _served(b)
        # A closed connection frees its place.
        a.close()
        deadline = time.monotonic() + 10
        while True:
            d = socket.create_connection(("127.0.0.1", listener.port), timeout=10)
            if _served(d):
                break
            d.close()
            assert time.monotonic() < deadline, "the place of a closed connection was never freed"
            time.sleep(0.05)
        for s in (b, c, d):
            s.close()
    finally:
        cluster.call(listener.close())


def test_the_idle_timeout_closes_an_idle_connection_but_not_one_waiting_on_its_request(
    cluster: ClusterThread,
) -> None:
    listener = _listener(cluster, ListenerLimits(connections_max_idle_ms=300))
    try:
        idle = socket.create_connection(("127.0.0.1", listener.port), timeout=10)
        assert _served(idle)
        before = listener.metrics.idle_closed._value.get()
        assert _closed_by_peer(idle), "an idle connection outlived connections.max.idle.ms"
        assert listener.metrics.idle_closed._value.get() == before + 1
        # A long-poll Fetch (max_wait 2 s, nothing to read) is in flight past
        # the idle timeout: the connection stays and gets its answer.
        busy = socket.create_connection(("127.0.0.1", listener.port), timeout=10)
        fetch = {
            "replica_id": -1, "max_wait": 2_000, "min_bytes": 1_000_000, "max_bytes": 1 << 20,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": TOPIC, "partitions": [{"partition": 0, "current_leader_epoch": -1,
                        "fetch_offset": 0, "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
            "forgotten_topics_data": [], "rack_id": "",
        }  # fmt: skip
        busy.sendall(kio_request(1, 11, 5, fetch))
        busy.settimeout(15)
        frame = read_frame(busy)
        assert frame is not None and struct.unpack_from(">i", frame)[0] == 5
        busy.close()
        idle.close()
    finally:
        cluster.call(listener.close())


def test_a_request_that_arrived_during_a_stalled_loop_is_not_taken_for_idleness(cluster: ClusterThread) -> None:
    """Regression (CI, under load): the event loop stalled past
    connections.max.idle.ms while a client's request was arriving; the idle
    timer ran before the read its bytes would have woken, and the
    connection was closed as idle with the request in its buffer."""
    import asyncio
    import time

    listener = _listener(cluster, ListenerLimits(connections_max_idle_ms=300))
    try:
        s = socket.create_connection(("127.0.0.1", listener.port), timeout=10)
        assert _served(s)  # its read loop now waits, idle, for the next request

        async def stall() -> None:
            time.sleep(0.8)  # blocks the loop past the idle timeout, on purpose

        stalled = asyncio.run_coroutine_threadsafe(stall(), cluster.loop)
        time.sleep(0.2)  # the stall has begun (the idle wait started before it)
        s.sendall(API_VERSIONS_V0)  # arrives while the loop is stalled
        stalled.result(10)
        assert read_frame(s) is not None, "a request in the buffer was closed as idle"
        s.close()
    finally:
        cluster.call(listener.close())
