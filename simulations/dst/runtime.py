"""The deterministic runtime: the real asyncio code on a virtual clock and an
in-memory network, one thread, one seed.

* :class:`VirtualLoop` is an asyncio event loop whose ``time()`` is virtual:
  when nothing is ready, it jumps to the next timer instead of sleeping.
  Everything asyncio schedules (``sleep``, ``timeout``, ``call_later``)
  therefore runs in virtual time, as fast as the CPU allows.
* Its ``create_server`` and ``create_connection`` (which
  ``asyncio.start_server`` and ``asyncio.open_connection`` call, and so
  ``partlog.rpc.server``, ``partlog.rpc.client``) make in-memory transports between *nodes* instead of
  sockets: :class:`SimNetwork` decides each segment's delivery time and can
  refuse, black-hole or reset connections (faults).
* Every task belongs to the node that created it (a context variable), so a
  crash cancels exactly that node's tasks and closes its transports.
* Time and randomness are handed in, not patched: :class:`VirtualClock` is
  the run's :class:`partlog.runtime.Clock` (the loop's time), and the world
  gives every node the run's seeded :class:`partlog.runtime.SeededEntropy`.
  :func:`deterministic_process` runs the code inside
  :func:`partlog.runtime.system_sources_forbidden`, so a component left on
  the machine's clock or entropy fails at once; it patches only how work is
  scheduled: ``asyncio.to_thread`` (inline: the store's calls run in the
  loop's thread, in order) and ``lmdb.open`` (no fsync: a simulated crash
  is a process crash).  Set iteration order of strings needs
  ``PYTHONHASHSEED``: the CLI re-runs itself with it fixed.

Nothing here knows partlog: :mod:`simulations.dst.world` builds the cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import random
import selectors
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import lmdb

from partlog.runtime import system_sources_forbidden

# The node (a process of the simulated cluster) the running code belongs to.
NODE: contextvars.ContextVar[str] = contextvars.ContextVar("dst_node", default="world")
# Virtual time starts at a fixed wall-clock instant, so keys and timestamps
# look real and every run of a seed sees the same ones.
EPOCH_S = 1_790_000_000.0


class Idle(Exception):
    """Nothing is ready and no timer is due: the simulated world is stuck
    (every task waits for something nobody will do)."""


class Livelock(Exception):
    """Far more steps than any real workload makes in a short stretch of
    virtual time: some task spins without waiting (a busy retry loop), and
    the run would never end.  A finding, like a broken invariant."""


# Loop steps allowed within LIVELOCK_WINDOW_S of virtual time.  A task
# that never waits, and a retry that waits a little (a network round trip)
# but never gets anywhere, would both run the seed for hours of wall time.
# The busiest second of the fuzz modes' seeds is about 13,000 steps (seeds
# 1-6 and 1-2 of each mode, issue 33); a follower re-fetching the same
# entries at once (``replica_session_keeps_old_items``) makes about 90,000.
LIVELOCK_WINDOW_S = 1.0
LIVELOCK_STEPS_MAX = 40_000


class _StepBudget:
    """At most ``steps_max`` loop steps within each window of ``window_s``
    virtual seconds (a window opens at the first step after the last one
    closed, not aligned to the clock)."""

    __slots__ = ("_start_s", "_steps", "peak", "steps_max", "window_s")

    def __init__(self, window_s: float, steps_max: int) -> None:
        self.window_s, self.steps_max = window_s, steps_max
        self.peak = 0  # the most steps a finished window held
        self._start_s, self._steps = 0.0, 0

    @property
    def busiest(self) -> int:
        return max(self.peak, self._steps)

    def over(self, now_s: float) -> bool:
        if now_s - self._start_s >= self.window_s:
            self.peak = max(self.peak, self._steps)
            self._start_s, self._steps = now_s, 0
            return False
        self._steps += 1
        return self._steps > self.steps_max


class _VirtualSelector(selectors.SelectSelector):
    """Never blocks: a timeout advances the virtual clock instead."""

    def __init__(self, loop_ref: Callable[[], VirtualLoop]) -> None:
        super().__init__()
        self._loop_ref = loop_ref

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        loop = self._loop_ref()
        if timeout is None:
            raise Idle(f"at {loop.time():.3f} s nothing is ready and no timer is due")
        if timeout > 0:
            loop.advance(timeout)
        # No file descriptor carries anything here (the network is in
        # memory, and nothing calls call_soon_threadsafe): skip the syscall.
        return []


class SimTask(asyncio.Task):  # type: ignore[type-arg]
    """A task whose hash is its creation number, not its address: the real
    code keeps tasks in sets and iterates them (cancelling, gathering), and
    an address-based order would differ from run to run."""

    _sim_id = 0

    def __hash__(self) -> int:
        return self._sim_id


class SimFuture(asyncio.Future):  # type: ignore[type-arg]
    """A future hashed by creation number (``asyncio.wait`` puts futures in
    a set and registers its callbacks in the set's order)."""

    _sim_id = 0

    def __hash__(self) -> int:
        return self._sim_id


class VirtualLoop(asyncio.SelectorEventLoop):
    """An event loop on virtual time with in-memory networking."""

    def __init__(self, network: SimNetwork) -> None:
        self._now = 0.0
        super().__init__(selector=_VirtualSelector(lambda: self))
        self.network = network
        network.loop = self
        # Insertion-ordered (dicts, not sets): a crash cancels in creation order.
        self.tasks_by_node: dict[str, dict[asyncio.Task[Any], None]] = {}
        self._tasks_made = 0
        self.set_task_factory(self._make_task)
        self.steps = 0
        self.after_step: Callable[[], None] | None = None
        self.latency: Callable[[], float] | None = None
        self._budget = _StepBudget(LIVELOCK_WINDOW_S, LIVELOCK_STEPS_MAX)

    def time(self) -> float:
        return self._now

    @property
    def busiest_second_steps(self) -> int:
        """The most steps one second of virtual time took (what the
        livelock limit is measured against)."""
        return self._budget.busiest

    def took_s(self) -> float:
        """Virtual seconds the calls made since the last ask took (the world
        sets ``latency``: the object store's); 0 when nothing is modelled."""
        return self.latency() if self.latency is not None else 0.0

    def create_future(self) -> asyncio.Future[Any]:
        fut = SimFuture(loop=self)
        self._tasks_made += 1
        fut._sim_id = self._tasks_made
        return fut

    def advance(self, seconds: float) -> None:
        assert seconds >= 0
        self._now += seconds

    def _run_once(self) -> None:
        super()._run_once()  # type: ignore[misc]
        self.steps += 1
        if self._budget.over(self._now):
            raise Livelock(
                f"{LIVELOCK_STEPS_MAX:,} steps within {LIVELOCK_WINDOW_S:g} s of virtual time at "
                f"{self._now:.3f} s; ready now: {self._describe_ready()}"
            )
        if self.after_step is not None:
            self.after_step()

    def _describe_ready(self) -> str:
        """What the ready callbacks are (the spinning tasks' coroutines)."""
        names: dict[str, int] = {}
        for h in list(self._ready)[:50]:  # type: ignore[attr-defined]
            cb = h._callback
            owner = getattr(cb, "__self__", None)
            if isinstance(owner, asyncio.Task):
                coro = owner.get_coro()
                name = getattr(coro, "__qualname__", repr(coro))
            else:
                name = getattr(cb, "__qualname__", repr(cb))
            names[name] = names.get(name, 0) + 1
        return ", ".join(f"{k} x{v}" for k, v in sorted(names.items(), key=lambda kv: -kv[1])[:5])

    def _make_task(self, loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        task = SimTask(coro, loop=loop, **kwargs)
        self._tasks_made += 1
        task._sim_id = self._tasks_made
        node = NODE.get() if kwargs.get("context") is None else kwargs["context"].get(NODE, "world")
        self.tasks_by_node.setdefault(node, {})[task] = None
        task.add_done_callback(lambda t: self.tasks_by_node.get(node, {}).pop(t, None))
        return task

    # ------------------------------------------------------- networking

    async def create_server(  # type: ignore[override]
        self, protocol_factory: Callable[[], asyncio.BaseProtocol], host: str | None = None, port: int = 0, **kw: Any
    ) -> SimServer:
        return self.network.listen(NODE.get(), host or "127.0.0.1", port, protocol_factory)

    async def create_connection(  # type: ignore[override]
        self, protocol_factory: Callable[[], asyncio.BaseProtocol], host: str | None = None, port: int = 0, **kw: Any
    ) -> tuple[asyncio.Transport, asyncio.BaseProtocol]:
        return await self.network.connect(NODE.get(), host or "127.0.0.1", port, protocol_factory)


# ---------------------------------------------------------------- network


@dataclass
class SimServer:
    """What ``create_server`` returns, as much of ``asyncio.Server`` as
    partlog uses."""

    network: SimNetwork
    node: str
    host: str
    port: int
    protocol_factory: Callable[[], asyncio.BaseProtocol]
    closed: bool = False
    sockets: list[Any] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.sockets = [_FakeSocket((self.host, self.port))]

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.network.listeners.pop((self.host, self.port), None)

    async def wait_closed(self) -> None:
        return None

    def is_serving(self) -> bool:
        return not self.closed


@dataclass
class _FakeSocket:
    address: tuple[str, int]

    def getsockname(self) -> tuple[str, int]:
        return self.address


class SimTransport(asyncio.Transport):
    """One direction-pair end of an in-memory connection between two nodes."""

    def __init__(self, network: SimNetwork, node: str, local: tuple[str, int], remote: tuple[str, int]) -> None:
        super().__init__()
        self.network = network
        self.node = node
        self.local = local
        self.remote = remote
        self.peer: SimTransport | None = None
        self.protocol: asyncio.BaseProtocol | None = None
        self._closing = False
        self._lost = False
        self._paused = False
        self._held: list[bytes] = []
        # Delivery times stay in order: TCP never reorders one connection's bytes.
        self._last_delivery = 0.0

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": self.remote, "sockname": self.local}.get(name, default)

    def is_closing(self) -> bool:
        return self._closing

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closing or self.peer is None or not data:
            return
        self.network.send(self, bytes(data))

    def writelines(self, list_of_data: Any) -> None:
        for d in list_of_data:
            self.write(d)

    def can_write_eof(self) -> bool:
        return False

    def get_write_buffer_size(self) -> int:
        return 0

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        return None

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        self.network.closed(self)

    def abort(self) -> None:
        self.close()

    def pause_reading(self) -> None:
        self._paused = True

    def resume_reading(self) -> None:
        self._paused = False
        held, self._held = self._held, []
        for data in held:
            self._receive(data)

    def is_reading(self) -> bool:
        return not self._paused

    def _receive(self, data: bytes) -> None:
        if self._lost or self.protocol is None:
            return
        if self._paused:
            self._held.append(data)
            return
        self.protocol.data_received(data)  # type: ignore[attr-defined]

    def _connection_lost(self) -> None:
        if self._lost:
            return
        self._lost = True
        self._closing = True
        if self.protocol is not None:
            self.protocol.connection_lost(None)


class SimNetwork:
    """Connections between nodes, with the faults the world asks for.

    ``latency_s(src, dst)`` gives each segment's one-way delay.  A link is
    *down* (a partition) when ``reachable(src, dst)`` is False: connecting
    then fails (refused, or black-holed until the caller's timeout), and
    open connections across it are reset."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.loop: VirtualLoop | None = None
        self.listeners: dict[tuple[str, int], SimServer] = {}
        self.transports: dict[str, dict[SimTransport, None]] = {}  # ordered: resets replay
        self.latency_s: Callable[[str, str], float] = lambda a, b: 0.0002
        self.reachable: Callable[[str, str], bool] = lambda a, b: True
        self.black_hole: Callable[[str, str], bool] = lambda a, b: False
        self._next_port = 20_000
        self.bytes_sent = 0
        self.connections_made = 0
        self.resets = 0

    def listen(
        self, node: str, host: str, port: int, protocol_factory: Callable[[], asyncio.BaseProtocol]
    ) -> SimServer:
        if port == 0:
            while ("127.0.0.1", self._next_port) in self.listeners:
                self._next_port += 1
            port = self._next_port
            self._next_port += 1
        if (host, port) in self.listeners:
            raise OSError(98, f"error while attempting to bind on address ({host!r}, {port}): address already in use")
        server = SimServer(self, node, host, port, protocol_factory)
        self.listeners[(host, port)] = server
        return server

    async def connect(
        self, node: str, host: str, port: int, protocol_factory: Callable[[], asyncio.BaseProtocol]
    ) -> tuple[asyncio.Transport, asyncio.BaseProtocol]:
        loop = self.loop
        assert loop is not None
        server = self.listeners.get((host, port))
        if server is not None and not self.reachable(node, server.node) and self.black_hole(node, server.node):
            await asyncio.sleep(3600)  # a SYN into the void: the caller's timeout ends it
        await asyncio.sleep(self.latency_s(node, server.node if server else node))
        server = self.listeners.get((host, port))
        if server is None or server.closed or not self.reachable(node, server.node):
            raise ConnectionRefusedError(111, f"Connect call failed ({host!r}, {port})")
        self.connections_made += 1
        local = ("127.0.0.1", 40_000 + self.connections_made % 20_000)
        client = SimTransport(self, node, local, (host, port))
        srv = SimTransport(self, server.node, (host, port), local)
        client.peer, srv.peer = srv, client
        self.transports.setdefault(node, {})[client] = None
        self.transports.setdefault(server.node, {})[srv] = None
        # The server's protocol runs as the server's node.
        ctx = contextvars.copy_context()
        ctx.run(NODE.set, server.node)
        server_protocol = ctx.run(server.protocol_factory)
        srv.protocol = server_protocol
        ctx.run(server_protocol.connection_made, srv)
        protocol = protocol_factory()
        client.protocol = protocol
        protocol.connection_made(client)
        return client, protocol

    def send(self, src: SimTransport, data: bytes) -> None:
        loop = self.loop
        assert loop is not None and src.peer is not None
        peer = src.peer
        if not self.reachable(src.node, peer.node):
            self.reset(src)
            return
        self.bytes_sent += len(data)
        at = max(loop.time() + self.latency_s(src.node, peer.node), src._last_delivery)
        src._last_delivery = at
        loop.call_at(at, peer._receive, data)

    def closed(self, t: SimTransport) -> None:
        """``t`` closed: its peer sees EOF after the bytes already in flight."""
        loop = self.loop
        assert loop is not None
        peer = t.peer
        loop.call_soon(t._connection_lost)
        if peer is not None:
            at = max(loop.time() + self.latency_s(t.node, peer.node), t._last_delivery)
            loop.call_at(at, peer._connection_lost)
        self.transports.get(t.node, {}).pop(t, None)

    def reset(self, t: SimTransport) -> None:
        """Both ends lose the connection now (a RST, a dead link)."""
        self.resets += 1
        for end in (t, t.peer):
            if end is not None:
                end._closing = True
                self.transports.get(end.node, {}).pop(end, None)
                assert self.loop is not None
                self.loop.call_soon(end._connection_lost)

    def cut(self, node: str) -> None:
        """Reset every connection of ``node`` and close its listeners (a crash)."""
        for t in list(self.transports.get(node, ())):
            self.reset(t)
        for _key, server in list(self.listeners.items()):
            if server.node == node:
                server.close()

    def heal_check(self) -> None:
        """Reset connections across links that went down."""
        for ts in list(self.transports.values()):
            for t in list(ts):
                if t.peer is not None and not self.reachable(t.node, t.peer.node):
                    self.reset(t)


class VirtualClock:
    """The simulation's :class:`partlog.runtime.Clock`: the virtual loop's
    time, as wall time from ``EPOCH_S`` and as monotonic time."""

    def __init__(self, loop: VirtualLoop) -> None:
        self.loop = loop

    def wall_ms(self) -> int:
        return int((EPOCH_S + self.loop.time()) * 1000)

    def monotonic(self) -> float:
        return self.loop.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


# --------------------------------------------------------------- patching


@contextlib.contextmanager
def deterministic_process(loop: VirtualLoop) -> Iterator[None]:
    """Run the real code in one thread, in order, without the system clock
    and entropy (module doc)."""
    saved: list[tuple[Any, str, Any]] = []

    def patch(obj: Any, name: str, value: Any) -> None:
        saved.append((obj, name, getattr(obj, name)))
        setattr(obj, name, value)

    async def to_thread(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        # Inline, in order: the store's group commit then sees one caller at a time.
        await asyncio.sleep(0)
        try:
            return fn(*args, **kwargs)
        finally:
            # What the call cost in virtual time (an object store's latency):
            # its effects are visible now, its answer comes this much later.
            took = loop.took_s()
            if took > 0:
                await asyncio.sleep(took)

    def lmdb_open(path: Any, *args: Any, **kwargs: Any) -> Any:
        # A simulated crash is a process crash: the OS keeps what was
        # written, so fsync only costs wall time here.
        kwargs["sync"] = False
        kwargs["metasync"] = False
        return open_lmdb(path, *args, **kwargs)

    open_lmdb = lmdb.open
    patch(lmdb, "open", lmdb_open)
    patch(asyncio, "to_thread", to_thread)
    try:
        with system_sources_forbidden():
            yield
    finally:
        for obj, name, value in reversed(saved):
            setattr(obj, name, value)


def run_node(node: str, coro: Any) -> asyncio.Task[Any]:
    """Start ``coro`` as a task of ``node`` (its children inherit the node)."""
    ctx = contextvars.copy_context()
    ctx.run(NODE.set, node)
    return asyncio.get_running_loop().create_task(coro, context=ctx)


def cancel_node(loop: VirtualLoop, node: str) -> int:
    """Cancel every task of ``node`` (a crash: nothing gets to clean up)."""
    tasks = list(loop.tasks_by_node.get(node, ()))
    for t in tasks:
        t.cancel()
    return len(tasks)


__all__ = [
    "EPOCH_S",
    "NODE",
    "Idle",
    "Livelock",
    "SimNetwork",
    "SimServer",
    "SimTransport",
    "VirtualClock",
    "VirtualLoop",
    "cancel_node",
    "deterministic_process",
    "run_node",
]
