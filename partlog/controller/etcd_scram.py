"""SCRAM credentials on etcd (KIP-554), for clusters whose metadata lives
there (``--metadata etcd://...``): the same checks and values as the
embedded controller's store (:mod:`partlog.controller.scram_store`), under
the cluster's prefix::

    P/scram/<user, hex of UTF-8>/<mechanism byte>   [salt, iterations, stored_key, server_key]

The metadata views ignore these keys (they are not part of a snapshot).
An alteration reads what it deletes, checks, then writes every accepted
user's puts and deletes in one etcd transaction; two admins altering the
same user at once: the last write wins, as two Kafka admins' do.  Calls
that cannot reach etcd answer the retriable COORDINATOR_NOT_AVAILABLE
(a lookup: no credential, so that authentication fails, logged).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from partlog.controller.etcd_connection import ETCD_ERRORS, EtcdConnection
from partlog.controller.etcd_layout import Keys
from partlog.controller.scram_store import (
    Upsertion,
    UserCredentials,
    UserResult,
    check_alterations,
    credential_of,
    dec_credential_value,
    describe_found,
    enc_credential,
    user_results,
)
from partlog.kafka.errors import Errors
from partlog.kafka.scram_credential import MECHANISM_IDS, MECHANISM_NAMES, ScramCredential

log = logging.getLogger(__name__)


class EtcdScramCredentials:
    def __init__(self, conn: EtcdConnection, keys: Keys) -> None:
        self.conn = conn
        self.root = keys.root + b"scram/"

    def _key(self, user: str, mechanism: int) -> bytes:
        return self.root + user.encode().hex().encode() + b"/" + str(mechanism).encode()

    def _parse(self, key: bytes) -> tuple[str, int] | None:
        try:
            user_hex, mech = key[len(self.root) :].decode().split("/")
            return bytes.fromhex(user_hex).decode(), int(mech)
        except (ValueError, UnicodeDecodeError):
            return None

    async def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        try:
            got = await (await self.conn.client()).get(self._key(user, MECHANISM_IDS[mechanism]))
        except ETCD_ERRORS as e:
            log.warning("no SCRAM credential lookup for %r: etcd: %s", user, e)
            return None
        return None if got is None else dec_credential_value(mechanism, got.value)

    async def _all(self) -> dict[tuple[str, int], bytes]:
        c = await self.conn.client()
        out = {}
        for kv in await c.get_prefix(self.root):
            parsed = self._parse(kv.key)
            if parsed is not None and parsed[1] in MECHANISM_NAMES:
                out[parsed] = kv.value
        return out

    async def alter(
        self, deletions: Sequence[tuple[str, int]], upsertions: Sequence[Upsertion]
    ) -> list[UserResult] | Errors:
        try:
            stored = await self._all()
            present = {p for p in deletions if p in stored}
            errors = check_alterations(deletions, upsertions, present, {u for u, _ in stored})
            c = await self.conn.client()
            t = c.transactions
            ops = [t.delete(self._key(u, m)) for u, m in deletions if u not in errors]
            ops += [
                t.put(self._key(x.user, x.mechanism), enc_credential(credential_of(x)))
                for x in upsertions
                if x.user not in errors
            ]
            if ops:
                await self.conn.txn([], ops)
        except ETCD_ERRORS as e:
            log.warning("AlterUserScramCredentials: etcd: %s", e)
            return Errors.COORDINATOR_NOT_AVAILABLE
        return user_results(deletions, upsertions, errors)

    async def describe(self, users: Sequence[str] | None) -> list[UserCredentials] | Errors:
        try:
            stored = await self._all()
        except ETCD_ERRORS as e:
            log.warning("DescribeUserScramCredentials: etcd: %s", e)
            return Errors.COORDINATOR_NOT_AVAILABLE
        found: dict[str, list[tuple[int, int]]] = {}
        for (user, mech), raw in sorted(stored.items()):
            found.setdefault(user, []).append((mech, dec_credential_value(MECHANISM_NAMES[mech], raw).iterations))
        return describe_found(found, users)


__all__ = ["EtcdScramCredentials"]
