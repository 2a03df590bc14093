"""Dynamic broker and group configs on etcd, for clusters whose metadata
lives there (``--metadata etcd://...``): :class:`EtcdConfigs`, a broker's
:class:`~partlog.controller.dynamic_configs.DynamicConfigSource` (rules:
:mod:`partlog.kafka.dynamic_config`), under the cluster's prefix::

    P/dynamic_configs/<hex of msgpack([resource_type, name])>   msgpack of {config: value}

One key per resource, named by it (a key that is not the canonical name
of a resource is refused).  Unlike an ACL (:mod:`partlog.controller.etcd_acls`),
a resource's value is the product of every change made to it: an APPEND
or a SET of one config must not undo another writer's SET of another.  So
an alteration reads the prefix (bounded, at one revision), decides with
:func:`~partlog.kafka.dynamic_config.alter`, and writes every changed
resource in one transaction that compares each changed key's
``mod_revision`` with the one read (``create_revision == 0`` for a key
the read did not see); a lost compare (another writer came between)
reads and decides again, at most ``ALTER_ATTEMPTS_MAX`` times.  A change
naming more than ``ETCD_TXN_OPS_MAX`` resources is written in batches of
at most that many (etcd's ``--max-txn-ops``), each batch atomic.

* Following: a range read of the prefix, then a watch from the revision
  after it; ``configs`` is rebuilt once per burst of events, its
  ``version`` the etcd revision it is as of.  Every (re)connection and a
  compacted revision read the prefix again.  A change answers once this
  side's ``configs`` holds it (or after the request timeout, if the
  watch lags).

Reads are bounded: the prefix is read in pages of
``CONFIGS_READ_PAGE_KEYS`` keys at one revision, values over
``CONFIGS_VALUE_BYTES_MAX`` are not decoded, and at most
``DYNAMIC_RESOURCES_MAX`` resources are held.  A value that is not one
:func:`~partlog.kafka.dynamic_config.alter` could have made (undecodable,
not a map of strings, an unknown config, a bad value, under a key that
does not name a resource) is refused: logged, counted in ``refused``, and
never held, so the defaults apply in its place (it fails closed).

Until etcd first answers, ``configs`` is empty (the defaults); following
keeps retrying with capped backoff (``failures`` counts the attempts).
A change that cannot reach etcd raises :class:`EtcdUnavailableError`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import aetcd.exceptions
import aetcd.rpc
import aetcd.utils
import msgpack
from aetcd.rtypes import EventKind

from partlog.controller.etcd_connection import ETCD_ERRORS
from partlog.controller.etcd_follow import REFUSALS_LOGGED_MAX, EtcdFollower
from partlog.controller.etcd_layout import Keys
from partlog.controller.etcd_meta import (
    REQUEST_TIMEOUT_MS_DEFAULT,
    RETRY_BACKOFF_MAX_MS_DEFAULT,
    RETRY_BACKOFF_MS_DEFAULT,
    EtcdUnavailableError,
)
from partlog.controller.etcd_url import EtcdTarget
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

__all__ = [
    "ALTER_ATTEMPTS_MAX",
    "CONFIGS_READ_PAGE_KEYS",
    "CONFIGS_VALUE_BYTES_MAX",
    "ETCD_TXN_OPS_MAX",
    "EtcdConfigs",
    "config_key",
    "configs_root",
]

log = logging.getLogger(__name__)

# A resource holds a few dozen configs of short values: a larger value is
# not one of ours (and is not decoded).
CONFIGS_VALUE_BYTES_MAX = 64 * 1024
# A key's suffix is the hex of msgpack([type, name]): a name of at most
# RESOURCE_NAME_CHARS_MAX characters (4 bytes of UTF-8 each) and a few
# bytes of framing, twice over in hex.  A longer key is not decoded.
_KEY_SUFFIX_BYTES_MAX = 2 * (4 * RESOURCE_NAME_CHARS_MAX + 16)
# etcd's default --max-txn-ops: compares and puts per transaction.
ETCD_TXN_OPS_MAX = 128
# Keys per range read of the prefix (the configs are read in such pages).
CONFIGS_READ_PAGE_KEYS = 1_000
# Reads and decisions of one batch of changes when other writers keep
# changing its resources in between: then the change times out.
ALTER_ATTEMPTS_MAX = 5


def configs_root(keys: Keys) -> bytes:
    return keys.root + b"dynamic_configs/"


def config_key(root: bytes, resource_type: int, name: str) -> bytes:
    """The one key of resource ``(resource_type, name)`` under ``root`` (:func:`configs_root`)."""
    packed = msgpack.packb([resource_type, name])
    assert isinstance(packed, bytes)
    return root + packed.hex().encode()


def _pack(configs: dict[str, str]) -> bytes:
    out = msgpack.packb(configs)
    assert isinstance(out, bytes)
    return out


def _decode_key(root: bytes, key: bytes) -> Resource | str:
    """The resource a key names, or why it is refused."""
    suffix = key[len(root) :]
    if not key.startswith(root) or len(suffix) > _KEY_SUFFIX_BYTES_MAX:
        return "not a resource's key"
    try:
        got = msgpack.unpackb(bytes.fromhex(suffix.decode("ascii")))
    except Exception as e:  # anything a hostile key makes hex or msgpack raise
        return f"not a resource's key: {e}"
    if (
        not isinstance(got, list)
        or len(got) != 2
        or type(got[0]) is not int  # bool is an int: not a resource type
        or not isinstance(got[1], str)
    ):
        return "not a resource's key: not [type, name]"
    # Only the canonical spelling (hex case, msgpack's shortest ints) is
    # the resource's key: two keys of one resource would be two values.
    if config_key(root, got[0], got[1]) != key:
        return "not the resource's own key"
    return got[0], got[1]


def _decode(root: bytes, key: bytes, value: bytes) -> tuple[Resource, dict[str, str]] | str:
    """The resource and configs a key holds, or why it is refused."""
    resource = _decode_key(root, key)
    if isinstance(resource, str):
        return resource
    if len(value) > CONFIGS_VALUE_BYTES_MAX:
        return f"a value of {len(value)} bytes (at most {CONFIGS_VALUE_BYTES_MAX})"
    try:
        configs = msgpack.unpackb(value)
    except Exception as e:  # anything a hostile value makes msgpack raise
        return f"not msgpack: {e}"
    if not isinstance(configs, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in configs.items()):
        return "not a map of config names to string values"
    why = invalid_resource(resource[0], resource[1], configs)
    if why is not None:
        return why
    return resource, configs


def _keep(held: dict[Resource, dict[str, str]], resource: Resource, configs: dict[str, str]) -> str | None:
    """Hold ``configs`` within ``DYNAMIC_RESOURCES_MAX`` resources; the
    refusal of what is not held, or None."""
    if resource in held or len(held) < DYNAMIC_RESOURCES_MAX:
        held[resource] = configs
        return None
    return f"{resource[0]} {resource[1][:80]!r}: over {DYNAMIC_RESOURCES_MAX} resources"


@dataclass
class _Read:
    """One bounded read of the prefix at ``revision``."""

    revision: int = 0
    held: dict[Resource, dict[str, str]] = field(default_factory=dict)
    # Every key seen, valid or not, by mod_revision: what a write compares
    # (a refused value under a resource's key is overwritten, not raced).
    mods: dict[bytes, int] = field(default_factory=dict)
    refusals: list[str] = field(default_factory=list)  # the first REFUSALS_LOGGED_MAX, to log
    refused: int = 0


def _batches(changes: Sequence[DynamicChange]) -> Iterator[list[DynamicChange]]:
    """Consecutive runs of ``changes`` naming at most ETCD_TXN_OPS_MAX
    resources each: each run's writes fit one transaction."""
    batch: list[DynamicChange] = []
    names: set[Resource] = set()
    for c in changes:
        r = (c.resource_type, c.name)
        if r not in names and len(names) == ETCD_TXN_OPS_MAX:
            yield batch
            batch, names = [], set()
        batch.append(c)
        names.add(r)
    if batch:
        yield batch


class EtcdConfigs(EtcdFollower):
    """The cluster's dynamic configs on etcd at ``target`` (see the module
    doc and :class:`~partlog.controller.etcd_follow.EtcdFollower`)."""

    WHAT = "dynamic configs"

    def __init__(
        self,
        target: EtcdTarget,
        *,
        request_timeout_ms: int = REQUEST_TIMEOUT_MS_DEFAULT,
        retry_backoff_ms: int = RETRY_BACKOFF_MS_DEFAULT,
        retry_backoff_max_ms: int = RETRY_BACKOFF_MAX_MS_DEFAULT,
    ) -> None:
        super().__init__(
            target,
            configs_root(Keys(target.prefix)),
            request_timeout_ms=request_timeout_ms,
            retry_backoff_ms=retry_backoff_ms,
            retry_backoff_max_ms=retry_backoff_max_ms,
        )
        self.configs = DynamicConfigs()
        # The configs by resource, as of ``revision`` (``configs`` is rebuilt from it).
        self._held: dict[Resource, dict[str, str]] = {}
        self._listeners: list[Callable[[], None]] = []

    def add_listener(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` after every change of ``configs``."""
        self._listeners.append(callback)

    # ------------------------------------------------------------ following

    async def _read(self) -> _Read:
        """The prefix's valid resources (bounded, see the module doc), every
        key's mod_revision, and the revision of the read."""
        c = await self.conn.client()
        await c.connect()
        end = aetcd.utils.prefix_range_end(self.root)
        out = _Read()
        key = self.root
        while True:
            # aetcd's get_prefix has no limit: its stub, on the same channel;
            # every page at the first one's revision (one consistent read).
            request = aetcd.rpc.RangeRequest(
                key=key, range_end=end, limit=CONFIGS_READ_PAGE_KEYS, revision=out.revision
            )
            resp = await c.kvstub.Range(request, timeout=self.conn.request_timeout_ms / 1000, metadata=c.metadata)
            out.revision = out.revision or int(resp.header.revision)
            for kv in resp.kvs:
                out.mods[kv.key] = int(kv.mod_revision)
                got = _decode(self.root, kv.key, kv.value)
                why = f"{kv.key[:80]!r}: {got}" if isinstance(got, str) else _keep(out.held, *got)
                if why is not None:
                    out.refused += 1
                    if len(out.refusals) < REFUSALS_LOGGED_MAX:
                        out.refusals.append(why)
            if not resp.more or not resp.kvs:
                break
            key = resp.kvs[-1].key + b"\0"
        return out

    async def _reload(self) -> None:
        got = await self._read()
        self._refuse(got.refusals, got.refused)
        self._held, self.revision = got.held, got.revision

    def _apply_event(self, kind: Any, key: bytes, value: bytes) -> None:
        if kind == EventKind.DELETE:
            resource = _decode_key(self.root, key)
            if not isinstance(resource, str):
                self._held.pop(resource, None)
            return
        got = _decode(self.root, key, value)
        if isinstance(got, str):
            # A valid resource overwritten by garbage is gone (its defaults apply).
            resource = _decode_key(self.root, key)
            if not isinstance(resource, str):
                self._held.pop(resource, None)
            self._refuse([f"{key[:80]!r}: {got}"])
        else:
            why = _keep(self._held, *got)
            if why is not None:
                self._refuse([why])

    def _rebuild(self) -> None:
        # A copy: the watch goes on changing ``_held`` under readers of ``configs``.
        self.configs = DynamicConfigs({r: dict(c) for r, c in self._held.items()}, self.revision)
        for callback in self._listeners:
            try:
                callback()
            except Exception:  # one listener's bug must not stop the others or the watch
                log.exception("dynamic configs listener failed")

    # --------------------------------------------------------------- changes

    async def alter_dynamic_configs(
        self, changes: Sequence[DynamicChange], *, validate_only: bool
    ) -> list[tuple[Errors, str | None]]:
        """Kafka's answer per change, decided on etcd's configs now (not the
        followed copy, which may lag); an applied change is in ``configs``
        when this returns (unless the watch lags past the request timeout)."""
        async with self._lock:
            try:
                if validate_only:
                    got = await self._read()
                    answers, _ = alter(DynamicConfigs(got.held, got.revision), changes)
                    return answers
                out: list[tuple[Errors, str | None]] = []
                revision = 0
                for batch in _batches(changes):
                    answers, written = await self._alter_batch(batch)
                    out += answers
                    revision = max(revision, written)
                    if written < 0:
                        # Lost to other writers: the rest is not tried either
                        # (a later change may depend on this one, as Kafka's order).
                        why = "another writer kept changing these configs; try again"
                        out += [(Errors.REQUEST_TIMED_OUT, why)] * (len(changes) - len(out))
                        break
            except ETCD_ERRORS as e:
                self.failures += 1
                raise EtcdUnavailableError(f"AlterConfigs: etcd {self.conn.target.url()}: {e}") from e
            if revision > 0:
                await self._until_seen(revision)
            return out

    async def _alter_batch(self, batch: list[DynamicChange]) -> tuple[list[tuple[Errors, str | None]], int]:
        """Decide and write one batch (at most ETCD_TXN_OPS_MAX resources):
        its answers and the revision written (0: nothing to write; -1: every
        attempt lost a compare, and the answers are REQUEST_TIMED_OUT)."""
        c = await self.conn.client()
        t = c.transactions
        for attempt in range(ALTER_ATTEMPTS_MAX):
            got = await self._read()
            answers, changed = alter(DynamicConfigs(got.held, got.revision), batch)
            if not changed:
                return answers, 0
            compare: list[Any] = []
            ops: list[Any] = []
            for (rtype, name), configs in sorted(changed.items()):
                key = config_key(self.root, rtype, name)
                seen = got.mods.get(key)
                compare.append(t.mod(key) == seen if seen is not None else t.create(key) == 0)
                ops.append(t.put(key, _pack(configs)) if configs else t.delete(key))
            ok, resp = await self.conn.txn(compare, ops)
            if ok:
                r = resp[0]
                header = r.response_put.header if r.HasField("response_put") else r.response_delete_range.header
                revision = int(header.revision)
                log.info(
                    "dynamic configs changed at revision %d: %s (attempt %d)", revision, sorted(changed)[:10], attempt
                )
                return answers, revision
            log.info("dynamic configs: a compare lost to another writer (attempt %d); reading again", attempt)
        why = f"another writer changed these configs during each of {ALTER_ATTEMPTS_MAX} attempts; try again"
        return [(Errors.REQUEST_TIMED_OUT, why)] * len(batch), -1
