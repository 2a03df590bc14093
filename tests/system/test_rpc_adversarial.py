"""The adversarial suite (issue 13): a live broker process over TCP, attacked
the way a hostile or broken peer on the loopback could.

Hypothesis generates valid requests for every method, the broker's, the
controller's and walmgr's, from the declared schemas
(``partlog.rpc.methods``) and mutates them: out-of-range integers, wrong
types, oversized strings and lists, deep nesting.  Then
msgpack bombs (an array header claiming millions of elements followed by
empty arrays, in a 7.6 MiB and a 63 MiB frame), garbage frames, half-sent
frames, slow senders, silent strangers, idle connections and floods of 500
connections.  After every attack:

* the broker process is still up;
* its RSS is at most ``RSS_GROWTH_MAX_BYTES`` above what it was after start
  (the server's request budget, 256 MiB, plus one largest frame in transit
  and its decoding copy: 2 x 64 MiB, rounded up);
* a normal produce and fetch round trip still succeeds.

Before issue 13, a 7.6 MiB bomb cost ~600 MB of RSS and a 63 MiB one 4.7 GB,
a half-sent frame held its connection for ever, and one commit with an
uploader id >= 2^31 fail-stopped the store.

Bounded: the broker runs with 1 s handshake and frame deadlines and a 3 s
idle timeout, so the timed attacks take seconds; the whole file runs in well
under the 3 minutes the issue allows.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import signal
import socket
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack
import psutil
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from partlog.kafka.errors import Errors
from partlog.kafka.record_batch import build_record_batch
from partlog.kafka.records import TopicIdPartition
from partlog.rpc.client import RpcClient
from partlog.rpc.frame import (
    CONNECTION_REQUEST_ID,
    HELLO_METHOD,
    RPC_VERSION,
    FrameDecoder,
    Kind,
    RpcError,
    RpcErrorCode,
    encode_frame,
    hello_body,
    parse_challenge,
)
from partlog.rpc.methods import BROKER_SCHEMAS, CONTROLLER_SCHEMAS, WALMGR_SCHEMAS
from partlog.rpc.schema import Bool, Bytes, Int, List, Map, Nullable, Schema, Str, Tuple
from partlog.rpc.wire import enc_tp
from partlog.tools.local_cluster import free_ports

BIN = Path(sys.executable).parent
RSS_GROWTH_MAX_BYTES = 384 * 1024 * 1024
DEADLINE_MS = 1_000  # the broker's handshake timeout and frame deadline here
IDLE_MS = 3_000
CLUSTER_ID = uuid.UUID("ad0e5a11-0000-4000-8000-000000000013")
TOPIC_ID = uuid.UUID("ad0e5a11-0000-4000-8000-0000000000ff")
WAIT_S = 10.0  # bound on any single wait for the broker's answer


@dataclass
class Victim:
    port: int
    proc: subprocess.Popen[bytes]
    tp: TopicIdPartition
    baseline_rss: int = 0

    def rss(self) -> int:
        return int(psutil.Process(self.proc.pid).memory_info().rss)


@pytest.fixture(scope="module")
def victim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Victim]:
    with running_victim(tmp_path_factory.mktemp("victim"), DEADLINE_MS, IDLE_MS) as v:
        yield v


# The patient broker's deadlines outlast floods and bombs.  With the module
# victim's 1 s handshake deadline, a slow machine took over 1 s to open 500
# connections, the first strangers timed out and freed their slots, and 128
# were accepted in all though never more than 64 at once (CI, stop 21); on a
# loaded machine a 63 MiB bomb took over 1 s to arrive and was refused by
# the frame deadline instead of by its decoded size.
PATIENT_DEADLINE_MS = 120_000


@pytest.fixture(scope="module")
def patient_victim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Victim]:
    with running_victim(tmp_path_factory.mktemp("patient"), PATIENT_DEADLINE_MS, PATIENT_DEADLINE_MS) as v:
        yield v


# The mutated requests test what a broker answers, not its deadlines: on a
# loaded CI machine the attacker's hello once came after the module victim's
# 1 s handshake deadline ("no hello within the handshake timeout").
TOLERANT_DEADLINE_MS = 30_000


@pytest.fixture(scope="module")
def tolerant_victim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Victim]:
    with running_victim(tmp_path_factory.mktemp("tolerant"), TOLERANT_DEADLINE_MS, TOLERANT_DEADLINE_MS) as v:
        yield v


@contextlib.contextmanager
def running_victim(tmp: Path, deadline_ms: int, idle_ms: int) -> Iterator[Victim]:
    """One broker started as a subprocess with the given handshake/frame
    deadline and idle timeout."""
    [port] = free_ports(1)
    cluster = tmp / "cluster.toml"
    cluster.write_text(
        f'cluster_id = "{CLUSTER_ID}"\n[[brokers]]\nid = 1\naz = "az1"\nport = {port}\n'
        f'[[topics]]\nname = "t"\nid = "{TOPIC_ID}"\nleaders = [1]\n'
    )
    log = open(tmp / "broker.log", "wb")  # noqa: SIM115 (closed below)
    proc = subprocess.Popen(
        [str(BIN / "partlog"), "broker", "--cluster", str(cluster), "--id", "1", "--data-dir", str(tmp / "data"),
         "--no-sync", "--commit-interval-ms", "20", "--handshake-timeout-ms", str(deadline_ms),
         "--frame-deadline-ms", str(deadline_ms), "--idle-timeout-ms", str(idle_ms)],
        stdout=subprocess.PIPE, stderr=log,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().decode()
        assert "listening" in line, (tmp / "broker.log").read_text()
        v = Victim(port, proc, TopicIdPartition(TOPIC_ID, 0))
        asyncio.run(round_trip(v))
        v.baseline_rss = v.rss()
        yield v
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


async def round_trip(v: Victim) -> None:
    """A normal produce (acks=1) and fetch of one record."""
    client = await RpcClient.connect("127.0.0.1", v.port, timeout_ms=int(WAIT_S * 1000))
    try:
        value = uuid.uuid4().bytes
        batch = build_record_batch([(None, value, int(time.time() * 1000))])
        res = await client.call("produce", {"batches": [[*enc_tp(v.tp), batch]], "acks": 1})
        [[err, offset, *_]] = res["results"]
        assert err == Errors.NONE, res
        f = await client.call("fetch", {"partitions": [[*enc_tp(v.tp), offset, 1 << 20]]})
        assert f["partitions"][0][0] == Errors.NONE and value in f["partitions"][0][3]
    finally:
        await client.close()


def healthy(v: Victim) -> None:
    """The checks after every attack."""
    assert v.proc.poll() is None, "the broker died"
    rss = v.rss()
    assert rss <= v.baseline_rss + RSS_GROWTH_MAX_BYTES, f"RSS {rss >> 20} MiB, baseline {v.baseline_rss >> 20} MiB"
    asyncio.run(round_trip(v))


# ------------------------------------------------------------ raw peers


class Raw:
    """A hand-driven connection: the attacker's side."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.decoder = FrameDecoder()
        self.frames: list[Any] = []

    @classmethod
    async def connect(cls, port: int, *, hello: bool = True) -> Raw:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        raw = cls(reader, writer)
        if hello:
            nonce, _ = parse_challenge(await raw.next_frame())
            raw.send(encode_frame(Kind.REQUEST, CONNECTION_REQUEST_ID, HELLO_METHOD, hello_body(None, nonce)))
            answer = await raw.next_frame()
            assert answer.kind == Kind.RESPONSE, answer
        return raw

    def send(self, data: bytes) -> None:
        self.writer.write(data)

    async def next_frame(self) -> Any:
        async with asyncio.timeout(WAIT_S):
            while not self.frames:
                data = await self.reader.read(1 << 16)
                if not data:
                    raise ConnectionError("closed")
                self.frames += self.decoder.feed(data)
        return self.frames.pop(0)

    async def closed_within(self, seconds: float) -> bool:
        """True when the server closes the connection within ``seconds``
        (frames it sends meanwhile, such as an error, are read and dropped).

        A reset counts as closed: bytes this side sends after the server's
        close (a trickle still under way) are answered with one, and asyncio
        then raises it from ``read`` even where the EOF is already buffered
        (CI, stop 49: a slow sender closed on time was "kept")."""
        try:
            async with asyncio.timeout(seconds):
                while await self.reader.read(1 << 16):
                    pass
            return True
        except ConnectionError:
            return True
        except TimeoutError:
            return False

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(Exception):
            await self.writer.wait_closed()


def request(method: str, body: Any, request_id: int = 7) -> bytes:
    return encode_frame(Kind.REQUEST, request_id, method, body)


# --------------------------------------------------- schema-driven bodies


def valid(schema: Schema) -> st.SearchStrategy[Any]:
    """Small legal values of ``schema``."""
    if isinstance(schema, Int):
        return st.one_of(st.integers(max(schema.lo, -3), min(schema.hi, 3)), st.sampled_from([schema.lo, schema.hi]))
    if isinstance(schema, Bool):
        return st.booleans()
    if isinstance(schema, Bytes):
        return st.binary(min_size=schema.min_len, max_size=max(schema.min_len, min(schema.max_len, 80)))
    if isinstance(schema, Str):
        return st.text(max_size=min(schema.max_bytes // 4, 20))
    if isinstance(schema, Nullable):
        return st.one_of(st.none(), valid(schema.inner))
    if isinstance(schema, List):
        return st.lists(valid(schema.item), max_size=min(schema.max_items, 3))
    if isinstance(schema, Tuple):
        return st.tuples(*(valid(s) for s in schema.items)).map(list)
    if isinstance(schema, Map):
        return st.fixed_dictionaries(
            {k: valid(s) for k, s in schema.required.items()},
            optional={k: valid(s) for k, s in schema.optional.items()},
        )
    raise AssertionError(f"no strategy for {schema!r}")


HOSTILE = [
    1 << 31, (1 << 63) - 1, -(1 << 63), (1 << 64) - 1, -1, -(1 << 31) - 1, 1.5, math.inf, math.nan,
    "x" * 2000, "\u00e9" * 300, b"", b"\x00" * 70_000, None, True, False, [], {}, [[[[[[]]]]]],
    {"k": 1}, [0] * 20_000, {"batches": None},
]  # fmt: skip


@st.composite
def mutated(draw: st.DrawFn, schema: Schema) -> Any:
    """A legal body with one node replaced by a hostile value (or with an
    unknown field added)."""
    body = draw(valid(schema))
    nodes: list[tuple[Any, Any]] = []  # (container, key)

    def collect(v: Any) -> None:
        if isinstance(v, dict):
            for k in v:
                nodes.append((v, k))
                collect(v[k])
        elif isinstance(v, list):
            for i in range(len(v)):
                nodes.append((v, i))
                collect(v[i])

    collect(body)
    if not nodes or draw(st.integers(0, 9)) == 0:
        if isinstance(body, dict):
            body["unknown_field"] = draw(st.sampled_from(HOSTILE))
            return body
        return draw(st.sampled_from(HOSTILE))
    container, key = draw(st.sampled_from(nodes))
    container[key] = draw(st.sampled_from(HOSTILE))
    return body


METHODS = sorted(BROKER_SCHEMAS)


@settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_mutated_requests_fail_only_themselves(tolerant_victim: Victim, data: st.DataObject) -> None:
    victim = tolerant_victim
    method = data.draw(st.sampled_from(METHODS), label="method")
    body = data.draw(mutated(BROKER_SCHEMAS[method]), label="body")

    async def attack() -> None:
        raw = await Raw.connect(victim.port)
        try:
            raw.send(request(method, body, request_id=11))
            answer = await raw.next_frame()
            assert answer.request_id == 11, answer
            if answer.kind == Kind.ERROR:
                assert answer.body[0] in (RpcErrorCode.BAD_REQUEST, RpcErrorCode.UNKNOWN_METHOD), answer.body
            # The connection is still in sync and usable.
            raw.send(request("metadata", {}, request_id=12))
            while (nxt := await raw.next_frame()).request_id != 12:
                pass
            assert nxt.kind == Kind.RESPONSE
        finally:
            await raw.close()

    asyncio.run(attack())
    assert victim.proc.poll() is None


def test_the_exact_item_3_requests_then_healthy(victim: Victim) -> None:
    key = f"wal/00/{int(time.time() * 1000):013d}-1-ab.wal"
    header = build_record_batch([(None, b"x", 1)])[:61]
    item = [0, TOPIC_ID.bytes, 0, 1, header]

    async def attack() -> None:
        raw = await Raw.connect(victim.port)
        for i, body in enumerate(
            [
                {"key": key, "uploader": 1 << 31, "file_size": 100, "batches": [item]},
                {"key": key, "uploader": 1, "file_size": (1 << 64) - 1, "batches": [item]},
                {"key": key, "uploader": 1, "file_size": "100", "batches": [item]},
            ]
        ):
            raw.send(request("commit", body, request_id=20 + i))
            answer = await raw.next_frame()
            assert answer.kind == Kind.ERROR and answer.body[0] == RpcErrorCode.BAD_REQUEST, answer
        await raw.close()

    asyncio.run(attack())
    healthy(victim)


def _bomb_frame(method: str, total_bytes: int, nested: bool) -> bytes:
    """``{"batches"|"checks"|"partitions": [...]}`` holding as many empty
    arrays as fit in ``total_bytes``: one byte each, ~64 bytes each once
    decoded.  Flat: one array header claiming them all (refused by the
    schema's largest list).  Nested: arrays of 9,000, each under that limit,
    so only the budget of decoded objects stops it."""
    field = {"produce": "batches", "referenced_files": "checks", "replica_fetch": "partitions"}[method]
    n = total_bytes - 200
    if nested:
        inner = b"\xdc" + struct.pack(">H", 9_000) + b"\x90" * 9_000
        k = n // len(inner)
        array = b"\xdc" + struct.pack(">H", k) + inner * k
    else:
        array = b"\xdd" + struct.pack(">I", n) + b"\x90" * n
    body = b"\x81" + msgpack.packb(field) + array
    envelope: bytes = msgpack.packb([RPC_VERSION, int(Kind.REQUEST), 5, method], use_bin_type=True)
    payload = b"\x95" + envelope[1:] + body  # the 4-array envelope becomes a 5-array with the body
    return struct.pack(">I", len(payload)) + bytes(payload)


@pytest.mark.parametrize(
    ("method", "mib", "nested"),
    [
        ("produce", 7.6, False),
        ("produce", 7.6, True),
        ("referenced_files", 7.6, True),
        ("replica_fetch", 7.6, True),
        ("produce", 63.0, True),
    ],
)
def test_msgpack_bombs_cost_bounded_memory(patient_victim: Victim, method: str, mib: float, nested: bool) -> None:
    victim = patient_victim
    frame = _bomb_frame(method, int(mib * 1024 * 1024), nested)
    peak = [0]

    async def attack() -> None:
        raw = await Raw.connect(victim.port)
        raw.send(frame)
        sampler = asyncio.ensure_future(_sample_rss(victim, peak))
        try:
            answer = await raw.next_frame()
        finally:
            sampler.cancel()
        assert answer.request_id == 5 and answer.kind == Kind.ERROR, answer
        why = "objects" if nested else "max_array_len"
        assert answer.body[0] == RpcErrorCode.BAD_REQUEST and why in answer.body[1], answer.body
        await raw.close()

    asyncio.run(attack())
    # Shown with -s: the numbers behind the bound.
    print(f"\n{method} {mib} MiB bomb: broker RSS peak {peak[0] >> 20} MiB, baseline {victim.baseline_rss >> 20} MiB")
    assert peak[0] <= victim.baseline_rss + RSS_GROWTH_MAX_BYTES, f"peak RSS {peak[0] >> 20} MiB during the bomb"
    healthy(victim)


async def _sample_rss(v: Victim, peak: list[int]) -> None:
    while True:
        peak[0] = max(peak[0], v.rss())
        await asyncio.sleep(0.01)


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(garbage=st.binary(min_size=1, max_size=300), framed=st.booleans())
def test_garbage_costs_only_its_connection(victim: Victim, garbage: bytes, framed: bool) -> None:
    async def attack() -> None:
        raw = await Raw.connect(victim.port, hello=framed)
        raw.send(struct.pack(">I", len(garbage)) + garbage if framed else garbage)
        await asyncio.sleep(0)
        await raw.close()

    asyncio.run(attack())
    assert victim.proc.poll() is None


def test_half_sent_frames_and_slow_senders_are_closed_at_the_deadline(victim: Victim) -> None:
    async def attack() -> None:
        half = await Raw.connect(victim.port)
        half.send(struct.pack(">I", 1 << 20) + b"\x95" + b"x" * 100)  # then nothing
        slow = await Raw.connect(victim.port)
        frame = request("metadata", {})
        trickle = asyncio.ensure_future(_trickle(slow, frame))
        stranger = await Raw.connect(victim.port, hello=False)  # says nothing at all
        await round_trip(victim)  # others are served meanwhile
        bound = 3 * DEADLINE_MS / 1000
        assert await half.closed_within(bound), "a half-sent frame kept its connection"
        assert await slow.closed_within(bound), "a slow sender kept its connection"
        assert await stranger.closed_within(bound), "a silent stranger kept its connection"
        trickle.cancel()
        for r in (half, slow, stranger):
            await r.close()

    asyncio.run(attack())
    healthy(victim)


async def _trickle(raw: Raw, frame: bytes) -> None:
    with contextlib.suppress(Exception):
        for b in frame:
            raw.send(bytes([b]))
            await asyncio.sleep(0.2)


def test_a_close_is_seen_after_the_trickle_that_followed_it_was_reset() -> None:
    """The regression of ``closed_within``: the server closes at once, this
    side goes on sending and only then looks."""

    async def run() -> None:
        async def close_at_once(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.close()

        server = await asyncio.start_server(close_at_once, "127.0.0.1", 0)
        async with server:
            raw = Raw(*await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1]))
            for _ in range(3):  # the first byte is answered with a reset, a later write fails on it
                raw.send(b"x")
                await asyncio.sleep(0.1)
            assert await raw.closed_within(1.0)
            await raw.close()

    asyncio.run(run())


def test_idle_connections_are_closed(victim: Victim) -> None:
    async def attack() -> None:
        idle = await Raw.connect(victim.port)
        assert await idle.closed_within(IDLE_MS / 1000 + 3), "an idle connection was kept"
        await idle.close()

    asyncio.run(attack())
    healthy(victim)


@pytest.mark.parametrize("authenticated", [False, True])
def test_floods_of_500_connections(patient_victim: Victim, authenticated: bool) -> None:
    """Strangers (no hello) may hold at most the handshake slots (64 by
    default); one address at most its connections (256)."""
    victim = patient_victim

    async def attack() -> None:
        conns: list[Raw] = []
        accepted = refused = 0
        for _ in range(500):
            try:
                raw = await Raw.connect(victim.port, hello=authenticated)
            except (ConnectionError, OSError, RpcError, TimeoutError):
                refused += 1
                continue
            conns.append(raw)
        if not authenticated:
            for raw in conns:
                first = await raw.next_frame()
                if first.kind == Kind.ERROR:
                    assert first.body[0] == RpcErrorCode.TOO_MANY_CONNECTIONS, first.body
                    refused += 1
                else:
                    accepted += 1
            assert accepted <= 64, accepted
        else:
            accepted = len(conns)
            assert accepted <= 256, accepted
        assert refused >= 500 - 256, (accepted, refused)
        for c in conns:
            await c.close()

    asyncio.run(attack())
    wait_until_closed_by_the_broker(victim)
    healthy(victim)


def wait_until_closed_by_the_broker(v: Victim) -> None:
    """Until the broker has closed its side of every connection to its port
    (a socket the client closed sits in CLOSE_WAIT until the server notices)."""
    broker = psutil.Process(v.proc.pid)
    deadline = time.monotonic() + WAIT_S
    while any(c.laddr and c.laddr.port == v.port and c.status != psutil.CONN_LISTEN
              for c in broker.net_connections(kind="tcp")):  # fmt: skip
        assert time.monotonic() < deadline, "the broker kept connections its clients had closed"
        time.sleep(0.02)


def test_rss_after_the_whole_suite(victim: Victim) -> None:
    healthy(victim)
    print(f"broker RSS {victim.rss() >> 20} MiB, baseline {victim.baseline_rss >> 20} MiB", file=sys.stderr)
    assert os.path.exists(f"/proc/{victim.proc.pid}")


@pytest.fixture(scope="module")
def other_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, tuple[int, subprocess.Popen[bytes]]]]:
    """A controller and a walmgr (its notification listener), each a process
    of its own: the targets for the controller's and walmgr's methods."""
    tmp = tmp_path_factory.mktemp("others")
    ctl_port, wm_port = free_ports(2)
    config = tmp / "walmgr.toml"
    config.write_text(
        f'store = "file://{tmp}/objects"\nregistry = "{tmp}/reg"\nlisten = "127.0.0.1:{wm_port}"\n'
        "cycle_interval_ms = 600000\n"
    )
    ctl = subprocess.Popen(
        [str(BIN / "partlog"), "controller", "--data-dir", str(tmp / "ctl"), "--port", str(ctl_port)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    wm = subprocess.Popen(
        [str(BIN / "walmgr"), "run", "--config", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        assert ctl.stdout is not None and "listening" in ctl.stdout.readline().decode()
        deadline = time.monotonic() + WAIT_S
        while True:  # walmgr listens once started
            try:
                with socket.create_connection(("127.0.0.1", wm_port), timeout=1):
                    break
            except OSError:
                assert time.monotonic() < deadline and wm.poll() is None, "walmgr did not start"
                time.sleep(0.05)
        yield {"controller": (ctl_port, ctl), "walmgr": (wm_port, wm)}
    finally:
        for p in (ctl, wm):
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()


OTHER_METHODS = [("controller", m) for m in sorted(CONTROLLER_SCHEMAS)] + [
    ("walmgr", m) for m in sorted(WALMGR_SCHEMAS)
]


@settings(
    max_examples=80,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_mutated_controller_and_walmgr_requests_fail_only_themselves(
    other_servers: dict[str, tuple[int, subprocess.Popen[bytes]]], data: st.DataObject
) -> None:
    server, method = data.draw(st.sampled_from(OTHER_METHODS), label="method")
    schema = (CONTROLLER_SCHEMAS if server == "controller" else WALMGR_SCHEMAS)[method]
    body = data.draw(mutated(schema), label="body")
    port, proc = other_servers[server]

    async def attack() -> None:
        raw = await Raw.connect(port)
        try:
            raw.send(request(method, body, request_id=11))
            if method == "metadata_poll":
                return  # a legal poll may park up to 30 s: its answer is not awaited here
            answer = await raw.next_frame()
            assert answer.request_id == 11, answer
            if answer.kind == Kind.ERROR:
                assert answer.body[0] == RpcErrorCode.BAD_REQUEST, answer.body
        finally:
            await raw.close()

    asyncio.run(attack())
    assert proc.poll() is None, f"the {server} died"
