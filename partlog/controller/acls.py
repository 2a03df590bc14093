"""ACLs in the embedded controller's metadata, and the brokers' view of them.

The controller keeps the cluster's ACLs in their own LMDB environment under
``data_dir/acls`` (one key per binding, and the ``version``), written in one
fsynced transaction per change BEFORE the change is answered or published,
as the producer-id blocks are (the controller's ``data_dir/LOCK`` makes it
the only writer).  :class:`AclService` is the controller's side
(validate with :func:`partlog.acl.source.apply_create`, write, then publish),
served by the controller's RPC server::

    acls_poll    {"version", "max_wait_ms"} -> {"version", "acls": [binding]}
                 at once when the version differs, else after a change, or
                 {"version"} alone after max_wait_ms
    create_acls  {"acls": [binding]}   -> {"results": [error message or nil]}
    delete_acls  {"filters": [filter]} -> {"results": [[binding]]}

    binding = [resource_type, name, pattern_type, principal, host, operation, permission]
    filter  = the same, with nil for "any" name, principal or host

:class:`ControllerAcls` is a broker's :class:`~partlog.acl.source.AclSource`:
it long-polls ``acls_poll`` on the broker's controller connection, so a
change reaches every broker without a restart, and sends changes to the
controller.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import struct
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any

import lmdb
import msgpack

from partlog.acl import (
    ACLS_MAX,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermission,
    AclSet,
    PatternType,
    ResourceType,
)
from partlog.acl.source import apply_create, apply_delete
from partlog.controller.long_poll import LongPolled
from partlog.rpc.wire import WireError

__all__ = ["ACLS_POLL_WAIT_MS", "AclService", "AclStateStore", "ControllerAcls", "dec_binding", "enc_binding"]

log = logging.getLogger(__name__)

# Address space, not disk: ACLS_MAX bindings of a few hundred bytes.
MAP_SIZE_BYTES = 1 << 30
# How long a broker's acls_poll parks at the controller (and the most it may).
ACLS_POLL_WAIT_MS = 10_000
# How long past its wait a poll's answer may take before the call fails.
ACLS_POLL_ANSWER_MS = 5_000
# A broker whose poll failed asks again after this long.
ACLS_POLL_RETRY_MS = 500
_U64 = struct.Struct(">Q")


def enc_binding(b: AclBinding) -> list[Any]:
    return [
        int(b.resource_type),
        b.resource_name,
        int(b.pattern_type),
        b.principal,
        b.host,
        int(b.operation),
        int(b.permission),
    ]


def _enum(cls: Any, v: Any) -> Any:
    try:
        return cls(v)
    except ValueError:
        return cls(0)


def dec_binding(v: Any) -> AclBinding:
    if not isinstance(v, (list, tuple)) or len(v) != 7:
        raise WireError("an ACL binding is a list of 7")
    rt, name, pt, principal, host, op, perm = v
    if not all(isinstance(x, str) for x in (name, principal, host)):
        raise WireError("an ACL binding's name, principal and host are strings")
    return AclBinding(
        _enum(ResourceType, rt),
        name,
        _enum(PatternType, pt),
        principal,
        host,
        _enum(AclOperation, op),
        _enum(AclPermission, perm),
    )


def enc_filter(f: AclBindingFilter) -> list[Any]:
    return [
        int(f.resource_type),
        f.resource_name,
        int(f.pattern_type),
        f.principal,
        f.host,
        int(f.operation),
        int(f.permission),
    ]


def dec_filter(v: Any) -> AclBindingFilter:
    if not isinstance(v, (list, tuple)) or len(v) != 7:
        raise WireError("an ACL filter is a list of 7")
    rt, name, pt, principal, host, op, perm = v
    if not all(x is None or isinstance(x, str) for x in (name, principal, host)):
        raise WireError("an ACL filter's name, principal and host are strings or nil")
    return AclBindingFilter(
        _enum(ResourceType, rt),
        name,
        _enum(PatternType, pt),
        principal,
        host,
        _enum(AclOperation, op),
        _enum(AclPermission, perm),
    )


class AclStateStore:
    """The ACLs on disk: one key per binding, and the version.  The LMDB
    environment is open only while it is read or written (at start and per
    change, both rare), so a controller that crashes without closing
    anything leaves nothing open for its successor in the same process."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._path = os.fspath(path)
        os.makedirs(self._path, exist_ok=True)

    @contextlib.contextmanager
    def _env(self) -> Iterator[Any]:
        env = lmdb.open(self._path, map_size=MAP_SIZE_BYTES, max_dbs=2, sync=True, metasync=True)
        try:
            yield env, env.open_db(b"acls"), env.open_db(b"meta")
        finally:
            env.close()

    def load(self) -> AclSet:
        with self._env() as (env, acls, meta), env.begin() as txn:
            raw = txn.get(b"version", db=meta)
            bindings = [dec_binding(msgpack.unpackb(k)) for k, _ in txn.cursor(db=acls)]
        assert len(bindings) <= ACLS_MAX, len(bindings)
        return AclSet(bindings, _U64.unpack(raw)[0] if raw else 0)

    def commit(self, new: AclSet, added: Sequence[AclBinding], removed: Sequence[AclBinding]) -> None:
        with self._env() as (env, acls, meta), env.begin(write=True) as txn:
            for b in removed:
                txn.delete(msgpack.packb(enc_binding(b)), db=acls)
            for b in added:
                txn.put(msgpack.packb(enc_binding(b)), b"", db=acls)
            txn.put(b"version", _U64.pack(new.version), db=meta)


class AclService:
    """The controller's ACLs: changes one at a time, each durable before it
    is answered and published to the brokers' polls."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._store = AclStateStore(path)
        self.acls = self._store.load()
        self._lock = asyncio.Lock()
        self._changed = asyncio.Event()

    def handlers(self) -> dict[str, Callable[[Any], Awaitable[Any]]]:
        return {"acls_poll": self._poll, "create_acls": self._create, "delete_acls": self._delete}

    async def _change(self, added: Sequence[AclBinding], removed: Sequence[AclBinding]) -> None:
        new = self.acls.with_changes(added, removed)
        await asyncio.to_thread(self._store.commit, new, added, removed)
        self.acls = new
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()
        log.info("acls changed version=%d added=%d removed=%d", new.version, len(added), len(removed))

    async def _create(self, body: Any) -> Any:
        bindings = [dec_binding(v) for v in body["acls"]]
        async with self._lock:
            answers, added = apply_create(self.acls, bindings)
            if added:
                await self._change(added, ())
        return {"results": answers}

    async def _delete(self, body: Any) -> Any:
        filters = [dec_filter(v) for v in body["filters"]]
        async with self._lock:
            gone = apply_delete(self.acls, filters)
            removed = list({b: None for bs in gone for b in bs})
            if removed:
                await self._change((), removed)
        return {"results": [[enc_binding(b) for b in bs] for bs in gone]}

    async def _poll(self, body: Any) -> Any:
        version, wait_ms = body["version"], min(body["max_wait_ms"], ACLS_POLL_WAIT_MS)
        if self.acls.version == version:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait_ms / 1000):
                    await self._changed.wait()
        acls = self.acls
        if acls.version == version:
            return {"version": version}
        return {"version": acls.version, "acls": [enc_binding(b) for b in acls.bindings]}


# ``call(method, body, timeout_ms=...)``: ControllerMetadata.call.
Call = Callable[..., Awaitable[Any]]


class ControllerAcls(LongPolled):
    """A broker's view of the controller's ACLs (an ``AclSource``): ``start``
    reads them once (a broker never starts deciding on an empty set), then
    follows their changes."""

    METHOD = "acls_poll"
    POLL_WAIT_MS = ACLS_POLL_WAIT_MS
    RETRY_MS = ACLS_POLL_RETRY_MS

    def __init__(self, call: Call) -> None:
        super().__init__()
        self._call = call
        self.acls = AclSet()
        self._loaded = False

    async def _poll_once(self, wait_ms: int) -> None:
        # The controller's versions start at 0 with no ACLs; -1 asks for them.
        asked = self.acls.version if self._loaded else -1
        # The call waits for the parked poll, and then some.
        body = {"version": asked, "max_wait_ms": wait_ms}
        resp = await self._call("acls_poll", body, timeout_ms=wait_ms + ACLS_POLL_ANSWER_MS)
        # A create's own read and the long-poll race: never step back.
        if "acls" in resp and (not self._loaded or resp["version"] > self.acls.version):
            self.acls = AclSet([dec_binding(v) for v in resp["acls"]], resp["version"])
            self._loaded = True

    async def create_acls(self, bindings: Sequence[AclBinding]) -> list[str | None]:
        resp = await self._call("create_acls", {"acls": [enc_binding(b) for b in bindings]})
        await self._poll_once(0)
        return list(resp["results"])

    async def delete_acls(self, filters: Sequence[AclBindingFilter]) -> list[list[AclBinding]]:
        resp = await self._call("delete_acls", {"filters": [enc_filter(f) for f in filters]})
        await self._poll_once(0)
        return [[dec_binding(v) for v in bs] for bs in resp["results"]]
