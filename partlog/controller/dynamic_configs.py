"""Dynamic broker and group configs in the embedded controller's metadata,
and the brokers' view of them (rules: :mod:`partlog.kafka.dynamic_config`).

The controller keeps them in their own LMDB environment under
``data_dir/dynamic_configs`` (one key per resource, and the ``version``),
written in one fsynced transaction per change BEFORE the change is answered
or published, as the ACLs are (:mod:`partlog.controller.acls`)::

    configs_poll           {"version", "max_wait_ms"} -> {"version", "configs": [resource]}
                           at once when the version differs, else after a change,
                           or {"version"} alone after max_wait_ms
    alter_dynamic_configs  {"changes": [change], "validate_only"} -> {"results": [[code, message]]}

    resource = [resource_type, name, [[config, value]]]
    change   = [resource_type, name, replace, [[op, config, value or nil]]]

:class:`ControllerConfigs` is a broker's :class:`DynamicConfigSource`: it
long-polls ``configs_poll`` on the broker's controller connection, so a
change reaches every broker without a restart.  :class:`LocalConfigs` is a
static cluster's: none, and none may be set.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import struct
import sys
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any, Protocol

import lmdb
import msgpack

from partlog.controller.client import ControllerMetadata
from partlog.controller.long_poll import LongPolled
from partlog.kafka.dynamic_config import (
    DYNAMIC_RESOURCES_MAX,
    RESOURCE_NAME_CHARS_MAX,
    DynamicChange,
    DynamicConfigs,
    Resource,
    alter,
    invalid_resource,
)
from partlog.kafka.errors import Errors
from partlog.kafka.topic_config import TOPIC_CONFIG_NAME_CHARS_MAX, TOPIC_CONFIG_VALUE_CHARS_MAX, ConfigOp
from partlog.rpc.schema import INT64, Bool, Int, List, Map, Nullable, Schema, Str, Tuple

__all__ = [
    "CONTROLLER_DYNAMIC_CONFIG_SCHEMAS",
    "ControllerConfigs",
    "DynamicConfigService",
    "DynamicConfigSource",
    "LocalConfigs",
    "dec_change",
    "dynamic_config_source_for",
    "enc_change",
    "source_stats",
]

log = logging.getLogger(__name__)

# Address space, not disk: DYNAMIC_RESOURCES_MAX resources of a few configs.
MAP_SIZE_BYTES = 1 << 30
# How long a broker's configs_poll parks at the controller (and the most it may).
CONFIGS_POLL_WAIT_MS = 10_000
# How long past its wait a poll's answer may take before the call fails.
CONFIGS_POLL_ANSWER_MS = 5_000
# A broker whose poll failed asks again after this long.
CONFIGS_POLL_RETRY_MS = 500
# Resources one alteration may name (Kafka has no bound).
CHANGES_PER_REQUEST_MAX = 1_000
# Configs one resource may hold or one change name: a few dozen are known.
CONFIGS_PER_RESOURCE_MAX = 64
_U64 = struct.Struct(">Q")
_NAME = Str(4 * RESOURCE_NAME_CHARS_MAX)
_CONFIG_NAME = Str(4 * TOPIC_CONFIG_NAME_CHARS_MAX)
_CONFIG_VALUE = Str(4 * TOPIC_CONFIG_VALUE_CHARS_MAX)
_RESOURCE_TYPE = Int(-128, 127)  # an int8

CONTROLLER_DYNAMIC_CONFIG_SCHEMAS: dict[str, Schema] = {
    "configs_poll": Map(required={"version": INT64, "max_wait_ms": Int(0, CONFIGS_POLL_WAIT_MS)}),
    "alter_dynamic_configs": Map(
        required={
            "changes": List(
                Tuple(
                    _RESOURCE_TYPE,
                    _NAME,
                    Bool(),
                    List(Tuple(Int(0, 3), _CONFIG_NAME, Nullable(_CONFIG_VALUE)), CONFIGS_PER_RESOURCE_MAX),
                ),
                CHANGES_PER_REQUEST_MAX,
            ),
            "validate_only": Bool(),
        }
    ),
}


def enc_change(c: DynamicChange) -> list[Any]:
    return [c.resource_type, c.name, c.replace, [[o.op, o.name, o.value] for o in c.ops]]


def dec_change(v: Any) -> DynamicChange:
    rtype, name, replace, ops = v
    return DynamicChange(rtype, name, replace, tuple(ConfigOp(op, k, val) for op, k, val in ops))


def _enc_configs(held: DynamicConfigs) -> list[Any]:
    return [[t, n, sorted(c.items())] for (t, n), c in sorted(held.resources.items())]


def _dec_configs(rows: Any, version: int) -> DynamicConfigs:
    """The controller's answer; a malformed one raises (the poll keeps the last)."""
    if not isinstance(rows, list) or len(rows) > DYNAMIC_RESOURCES_MAX:
        raise ValueError("configs: a list of at most DYNAMIC_RESOURCES_MAX resources")
    out: dict[Resource, dict[str, str]] = {}
    for t, n, pairs in rows:
        if not isinstance(t, int) or not isinstance(n, str) or len(pairs) > CONFIGS_PER_RESOURCE_MAX:
            raise ValueError("configs: a resource is [type, name, [[config, value]]]")
        configs = {str(k): str(val) for k, val in pairs}
        why = invalid_resource(t, n, configs)
        if why is not None:
            # Fail closed: a value the rules refuse is not applied (defaults hold).
            log.error("dynamic configs: the controller's %s %r refused: %s", t, n[:80], why)
            continue
        out[(t, n)] = configs
    return DynamicConfigs(out, version)


def source_stats(source: DynamicConfigSource) -> dict[str, int]:
    """A source's figures for the broker's metrics: resources held, values
    refused on reading and failed reads (etcd's follower counts the last two)."""
    return {
        "resources": len(source.configs.resources),
        **{k: int(getattr(source, k, 0)) for k in ("refused", "failures")},
    }


def dynamic_config_source_for(metadata: object) -> DynamicConfigSource:
    """The source for a process on ``metadata``: the embedded controller's
    (long-polled), etcd's (watched), else a static cluster's (none)."""
    if isinstance(metadata, ControllerMetadata):
        return ControllerConfigs(metadata.call)
    # etcd's client (grpc) is imported only where metadata is on etcd.
    etcd_meta = sys.modules.get("partlog.controller.etcd_meta")
    if etcd_meta is not None and isinstance(metadata, etcd_meta.EtcdMetadata):
        from partlog.controller.etcd_configs import EtcdConfigs

        return EtcdConfigs(
            metadata.target,
            request_timeout_ms=metadata.request_timeout_ms,
            retry_backoff_ms=metadata.retry_backoff_ms,
            retry_backoff_max_ms=metadata.retry_backoff_max_ms,
        )
    return LocalConfigs()


class DynamicConfigSource(Protocol):
    """Where a broker reads and changes the cluster's dynamic configs."""

    configs: DynamicConfigs

    def add_listener(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` after every change of ``configs``."""
        ...

    async def alter_dynamic_configs(
        self, changes: Sequence[DynamicChange], *, validate_only: bool
    ) -> list[tuple[Errors, str | None]]:
        """Kafka's answer per change; an applied change is in ``configs``
        when this returns."""
        ...


class LocalConfigs:
    """A static cluster's: its configs come from its file, none is dynamic."""

    def __init__(self) -> None:
        self.configs = DynamicConfigs()

    def add_listener(self, callback: Callable[[], None]) -> None:
        pass  # nothing ever changes

    async def alter_dynamic_configs(
        self, changes: Sequence[DynamicChange], *, validate_only: bool
    ) -> list[tuple[Errors, str | None]]:
        why = "this cluster's configs come from its static cluster file"
        return [(Errors.INVALID_REQUEST, why)] * len(changes)


class DynamicConfigStateStore:
    """The configs on disk: one key per resource, and the version.  Open
    only while read or written (at start and per change, both rare), as
    :class:`partlog.controller.acls.AclStateStore`."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._path = os.fspath(path)
        os.makedirs(self._path, exist_ok=True)

    @contextlib.contextmanager
    def _env(self) -> Iterator[Any]:
        env = lmdb.open(self._path, map_size=MAP_SIZE_BYTES, max_dbs=2, sync=True, metasync=True)
        try:
            yield env, env.open_db(b"configs"), env.open_db(b"meta")
        finally:
            env.close()

    def load(self) -> DynamicConfigs:
        with self._env() as (env, configs, meta), env.begin() as txn:
            raw = txn.get(b"version", db=meta)
            held = {tuple(msgpack.unpackb(k)): msgpack.unpackb(v) for k, v in txn.cursor(db=configs)}
        return DynamicConfigs({(int(t), str(n)): dict(c) for (t, n), c in held.items()},
                              _U64.unpack(raw)[0] if raw else 0)  # fmt: skip

    def commit(self, version: int, changed: dict[Resource, dict[str, str]]) -> None:
        with self._env() as (env, configs, meta), env.begin(write=True) as txn:
            for (t, n), c in changed.items():
                key = msgpack.packb([t, n])
                if c:
                    txn.put(key, msgpack.packb(c), db=configs)
                else:
                    txn.delete(key, db=configs)
            txn.put(b"version", _U64.pack(version), db=meta)


class DynamicConfigService:
    """The controller's dynamic configs: changes one at a time, each durable
    before it is answered and published to the brokers' polls."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._store = DynamicConfigStateStore(path)
        self.configs = self._store.load()
        self._lock = asyncio.Lock()
        self._changed = asyncio.Event()

    def handlers(self) -> dict[str, Callable[[Any], Awaitable[Any]]]:
        return {"configs_poll": self._poll, "alter_dynamic_configs": self._alter}

    async def _alter(self, body: Any) -> Any:
        changes = [dec_change(v) for v in body["changes"]]
        async with self._lock:
            answers, changed = alter(self.configs, changes)
            if changed and not body["validate_only"]:
                resources = {**self.configs.resources, **changed}
                new = DynamicConfigs({k: v for k, v in resources.items() if v}, self.configs.version + 1)
                await asyncio.to_thread(self._store.commit, new.version, changed)
                self.configs = new
                changed_event, self._changed = self._changed, asyncio.Event()
                changed_event.set()
                log.info("dynamic configs changed version=%d resources=%s", new.version, sorted(changed)[:10])
        return {"results": [[int(e), m] for e, m in answers]}

    async def _poll(self, body: Any) -> Any:
        version, wait_ms = body["version"], body["max_wait_ms"]
        if self.configs.version == version:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait_ms / 1000):
                    await self._changed.wait()
        held = self.configs
        if held.version == version:
            return {"version": version}
        return {"version": held.version, "configs": _enc_configs(held)}


# ``call(method, body, timeout_ms=...)``: ControllerMetadata.call.
Call = Callable[..., Awaitable[Any]]


class ControllerConfigs(LongPolled):
    """A broker's view of the controller's dynamic configs."""

    METHOD = "configs_poll"
    POLL_WAIT_MS = CONFIGS_POLL_WAIT_MS
    RETRY_MS = CONFIGS_POLL_RETRY_MS

    def __init__(self, call: Call) -> None:
        super().__init__()
        self._call = call
        self.configs = DynamicConfigs()
        self._loaded = False
        self._listeners: list[Callable[[], None]] = []

    def add_listener(self, callback: Callable[[], None]) -> None:
        self._listeners.append(callback)

    async def start(self) -> None:
        """Read the configs once (a restarted broker applies them from its
        start), then follow their changes; a controller that does not
        answer leaves the defaults until it does."""
        with contextlib.suppress(Exception):
            await self._poll_once(0)
        self._task = asyncio.create_task(self._poll_loop())

    async def _poll_once(self, wait_ms: int) -> None:
        asked = self.configs.version if self._loaded else -1
        body = {"version": asked, "max_wait_ms": wait_ms}
        resp = await self._call("configs_poll", body, timeout_ms=wait_ms + CONFIGS_POLL_ANSWER_MS)
        # An alteration's own read and the long-poll race: never step back.
        if "configs" in resp and (not self._loaded or resp["version"] > self.configs.version):
            self.configs = _dec_configs(resp["configs"], resp["version"])
            self._loaded = True
            for callback in self._listeners:
                try:
                    callback()
                except Exception:  # one listener's bug must not stop the others or the poll
                    log.exception("dynamic configs listener failed")

    async def alter_dynamic_configs(
        self, changes: Sequence[DynamicChange], *, validate_only: bool
    ) -> list[tuple[Errors, str | None]]:
        body = {"changes": [enc_change(c) for c in changes], "validate_only": validate_only}
        resp = await self._call("alter_dynamic_configs", body)
        await self._poll_once(0)
        out: list[tuple[Errors, str | None]] = []
        for code, message in resp["results"]:
            err = Errors(code) if code in Errors._value2member_map_ else Errors.UNKNOWN_SERVER_ERROR
            out.append((err, message))
        return out
