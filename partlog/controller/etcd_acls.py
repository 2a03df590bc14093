"""ACLs on etcd, for clusters whose metadata lives there (``--metadata
etcd://...``): :class:`EtcdAcls`, a broker's (or an admin tool's)
:class:`~partlog.acl.source.AclSource`, under the cluster's prefix::

    P/acls/<hex of the binding's msgpack>   the binding's msgpack (controller.acls.enc_binding)

One key per binding, named by its content: a binding has one key, and a
key one binding (a value that does not name its own key is refused).  So
a write never conflicts with another: two admins creating the same ACL
write the same key and value, and deleting a key deletes exactly that
binding whoever made it and whenever.  Changes are therefore plain
transactions without comparisons (last writer wins, and the last write of
a key can only be the same binding or its deletion).

* Creation validates against this side's current set
  (:func:`~partlog.acl.source.apply_create`, ``ACLS_MAX`` included) and
  writes every accepted binding in one transaction (``ETCD_TXN_OPS_MAX``
  per transaction: etcd's ``--max-txn-ops`` default).
* Deletion reads the prefix (bounded), selects with
  :func:`~partlog.acl.source.apply_delete`, and deletes the matching keys
  in one transaction.
* Following: a range read of the prefix, then a watch from the revision
  after it; the :class:`~partlog.acl.authorizer.AclSet` is rebuilt whole
  once per burst of events.  Every (re)connection and a compacted revision
  read the prefix again.  A change answers once this side's set holds it
  (or after the request timeout, if the watch lags).

Reads are bounded: the prefix is read in pages of ``ACL_READ_PAGE_KEYS``
keys at one revision, values over ``ACL_VALUE_BYTES_MAX`` are not decoded,
and the set holds at most ``ACLS_MAX`` bindings (more can only come from
another writer, or creators racing at the limit).  Over the limit a DENY
binding takes the place of an ALLOW one, never the reverse: dropping a
DENY would grant what it denies (the rest are refused).  A value that is not a
valid binding (undecodable, an unknown code, what CreateAcls would refuse,
another key's binding) is refused: logged, counted in ``refused``, and
never part of the set, so it grants nothing.

Until etcd first answers, the set is empty (deny, unless the authorizer
allows everyone on resources without ACLs): it fails closed, and keeps
retrying with capped backoff (``failures`` counts the attempts).  A
change that cannot reach etcd raises :class:`EtcdUnavailableError`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import aetcd.exceptions
import aetcd.rpc
import aetcd.utils
import msgpack
from aetcd.rtypes import EventKind

from partlog.acl import ACLS_MAX, AclBinding, AclBindingFilter, AclPermission, AclSet, invalid_binding
from partlog.acl.source import apply_create, apply_delete
from partlog.controller.acls import dec_binding, enc_binding
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

__all__ = ["ACL_READ_PAGE_KEYS", "ACL_VALUE_BYTES_MAX", "ETCD_TXN_OPS_MAX", "EtcdAcls", "acl_key", "acls_root"]

log = logging.getLogger(__name__)

# A binding's three strings are at most 1,000 characters (4 bytes of UTF-8
# each) plus a few small integers: a larger value is not one of ours.
ACL_VALUE_BYTES_MAX = 16 * 1024
# etcd's default --max-txn-ops: a change of more bindings takes several
# transactions (each atomic; every binding is its own key, see the module doc).
ETCD_TXN_OPS_MAX = 128
# Keys per range read of the prefix (the set is read in such pages).
ACL_READ_PAGE_KEYS = 1_000


def acls_root(keys: Keys) -> bytes:
    return keys.root + b"acls/"


def _pack(b: AclBinding) -> bytes:
    out = msgpack.packb(enc_binding(b))
    assert isinstance(out, bytes)
    return out


def acl_key(root: bytes, b: AclBinding) -> bytes:
    """The one key of ``b`` under ``root`` (:func:`acls_root`)."""
    return root + _pack(b).hex().encode()


def _decode(root: bytes, key: bytes, value: bytes) -> AclBinding | str:
    """The binding a key holds, or why it is refused."""
    if len(value) > ACL_VALUE_BYTES_MAX:
        return f"a value of {len(value)} bytes (at most {ACL_VALUE_BYTES_MAX})"
    try:
        b = dec_binding(msgpack.unpackb(value))
    except Exception as e:  # anything a hostile value makes msgpack or the decoder raise
        return f"not a binding: {e}"
    why = invalid_binding(b)
    if why is not None:
        return why
    if key != acl_key(root, b):
        return "the binding is not the one its key names"
    return b


def _keep(held: dict[bytes, AclBinding], key: bytes, b: AclBinding) -> str | None:
    """Hold ``b`` under ``key`` within ``ACLS_MAX`` bindings, a DENY in
    place of an ALLOW when full; the refusal of what is not held, or None."""
    if key in held or len(held) < ACLS_MAX:
        held[key] = b
        return None
    if b.permission == AclPermission.DENY:
        allow = next((k for k, x in held.items() if x.permission != AclPermission.DENY), None)
        if allow is not None:
            dropped = held.pop(allow)
            held[key] = b
            return f"{allow[:80]!r}: over {ACLS_MAX} ACLs (an ALLOW gives way to a DENY: {dropped})"
    return f"{key[:80]!r}: over {ACLS_MAX} ACLs"


class EtcdAcls(EtcdFollower):
    """The cluster's ACLs on etcd at ``target`` (see the module doc and
    :class:`~partlog.controller.etcd_follow.EtcdFollower`)."""

    WHAT = "ACLs"
    UNTIL_LOADED = "denying until etcd answers"

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
            acls_root(Keys(target.prefix)),
            request_timeout_ms=request_timeout_ms,
            retry_backoff_ms=retry_backoff_ms,
            retry_backoff_max_ms=retry_backoff_max_ms,
        )
        self.acls = AclSet()
        # The bindings by key, as of ``revision`` (the set is rebuilt from it).
        self._held: dict[bytes, AclBinding] = {}

    # ------------------------------------------------------------ following

    async def read(self) -> AclSet:
        """The ACLs in etcd now, by one bounded read (an admin's list);
        :class:`EtcdUnavailableError` if etcd does not answer."""
        try:
            held, revision = await self._read()
        except ETCD_ERRORS as e:
            self.failures += 1
            raise EtcdUnavailableError(f"etcd {self.conn.target.url()}: {e}") from e
        return AclSet(held.values(), revision)

    async def _read(self) -> tuple[dict[bytes, AclBinding], int]:
        """The prefix's valid bindings (bounded, see the module doc) and
        the revision of the read."""
        c = await self.conn.client()
        await c.connect()
        end = aetcd.utils.prefix_range_end(self.root)
        held: dict[bytes, AclBinding] = {}
        refusals: list[str] = []  # the first REFUSALS_LOGGED_MAX, to log
        refused = 0
        key, revision = self.root, 0
        while True:
            # aetcd's get_prefix has no limit: its stub, on the same channel;
            # every page at the first one's revision (one consistent read).
            request = aetcd.rpc.RangeRequest(key=key, range_end=end, limit=ACL_READ_PAGE_KEYS, revision=revision)
            resp = await c.kvstub.Range(request, timeout=self.conn.request_timeout_ms / 1000, metadata=c.metadata)
            revision = revision or int(resp.header.revision)
            for kv in resp.kvs:
                got = _decode(self.root, kv.key, kv.value)
                why = f"{kv.key[:80]!r}: {got}" if isinstance(got, str) else _keep(held, kv.key, got)
                if why is not None:
                    refused += 1
                    if len(refusals) < REFUSALS_LOGGED_MAX:
                        refusals.append(why)
            if not resp.more or not resp.kvs:
                break
            key = resp.kvs[-1].key + b"\0"
        self._refuse(refusals, refused)
        return held, revision

    async def _reload(self) -> None:
        self._held, self.revision = await self._read()

    def _apply_event(self, kind: Any, key: bytes, value: bytes) -> None:
        if kind == EventKind.DELETE:
            self._held.pop(key, None)
            return
        got = _decode(self.root, key, value)
        if isinstance(got, str):
            # A valid binding overwritten by garbage is gone.
            self._held.pop(key, None)
            self._refuse([f"{key[:80]!r}: {got}"])
        else:
            why = _keep(self._held, key, got)
            if why is not None:
                self._refuse([why])

    def _rebuild(self) -> None:
        self.acls = AclSet(self._held.values(), self.revision)

    # --------------------------------------------------------------- changes

    async def _txn(self, ops: list[Any]) -> int:
        """Run ``ops`` in transactions of at most ETCD_TXN_OPS_MAX: the
        revision of the last that changed a key (0: none did; deleting a
        key already gone changes nothing, and no watch event comes)."""
        revision = 0
        for i in range(0, len(ops), ETCD_TXN_OPS_MAX):
            _, resp = await self.conn.txn([], ops[i : i + ETCD_TXN_OPS_MAX])
            for r in resp:
                if r.HasField("response_put"):
                    revision = int(r.response_put.header.revision)
                elif r.response_delete_range.deleted:
                    revision = int(r.response_delete_range.header.revision)
        return revision

    async def create_acls(self, bindings: Sequence[AclBinding]) -> list[str | None]:
        async with self._lock:
            answers, added = apply_create(self.acls, bindings)
            if added:
                try:
                    c = await self.conn.client()
                    ops = [c.transactions.put(acl_key(self.root, b), _pack(b)) for b in added]
                    revision = await self._txn(ops)
                except ETCD_ERRORS as e:
                    self.failures += 1
                    raise EtcdUnavailableError(f"CreateAcls: etcd {self.conn.target.url()}: {e}") from e
                log.info("acls created: %d at revision %d", len(added), revision)
                await self._until_seen(revision)
            return answers

    async def delete_acls(self, filters: Sequence[AclBindingFilter]) -> list[list[AclBinding]]:
        async with self._lock:
            try:
                held, _ = await self._read()
                gone = apply_delete(AclSet(held.values()), filters)
                removed = {b for bs in gone for b in bs}
                revision = 0
                if removed:
                    c = await self.conn.client()
                    ops = [c.transactions.delete(k) for k, b in held.items() if b in removed]
                    revision = await self._txn(ops)
            except ETCD_ERRORS as e:
                self.failures += 1
                raise EtcdUnavailableError(f"DeleteAcls: etcd {self.conn.target.url()}: {e}") from e
            if revision:
                log.info("acls deleted: %d at revision %d", len(removed), revision)
                await self._until_seen(revision)
            return gone
