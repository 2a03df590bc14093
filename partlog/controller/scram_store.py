"""SCRAM credentials in the embedded controller's metadata (KIP-554), and
the controller's three RPCs over them.

The credentials live in an LMDB environment of their own under the
controller's data directory (``scram_credentials/``), as the producer-id
counter does (:mod:`partlog.controller.producer_ids`): one value per user
and mechanism, ``[salt, iterations, stored_key, server_key]``, written
durably before the answer.  Never a password: KIP-554's clients send the
salted password and the controller keeps only the keys derived from it.

:meth:`ScramStore.alter` checks an AlterUserScramCredentials request as
Kafka's controller does, then applies every user's changes or none of
them: a (user, mechanism) named twice is DUPLICATE_RESOURCE, an empty name
or an iteration count out of Kafka's bounds UNACCEPTABLE_CREDENTIAL, an
unknown mechanism UNSUPPORTED_SASL_MECHANISM, deleting a credential that
does not exist RESOURCE_NOT_FOUND.

RPCs (``CONTROLLER_SCRAM_SCHEMAS``): ``scram_credential`` (a broker's
lookup when a client authenticates), ``alter_scram_credentials`` and
``describe_scram_credentials`` (the Kafka front's KIP-554 APIs and
``partlog users``).  A cluster on etcd keeps the same values there
(:mod:`partlog.controller.etcd_scram`), checked by the same functions.
"""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import lmdb
import msgpack

from partlog.kafka.errors import Errors
from partlog.kafka.scram_credential import (
    MECHANISM_NAMES,
    SALT_BYTES_MAX,
    SCRAM_ITERATIONS_MAX,
    SCRAM_ITERATIONS_MIN,
    USER_CHARS_MAX,
    ScramCredential,
)
from partlog.rpc.schema import INT32, Bytes, Int, List, Map, Nullable, Schema, Str, Tuple
from partlog.rpc.wire import WireError, expect_bytes, expect_int, expect_list, expect_map, expect_str

# Address space, not disk: USERS_MAX users of two mechanisms, ~300 bytes each.
MAP_SIZE_BYTES = 1 << 26
USERS_MAX = 10_000
# Alterations (deletions and upsertions) per request, and users per describe.
ALTERATIONS_MAX = 1_000
_KEY_BYTES_MAX = 64  # a SHA-512 key
_USER = Str(4 * USER_CHARS_MAX)
_MECHANISM = Int(-128, 127)  # an int8

CONTROLLER_SCRAM_SCHEMAS: dict[str, Schema] = {
    "scram_credential": Map(required={"user": _USER, "mechanism": _MECHANISM}),
    "alter_scram_credentials": Map(
        required={
            "deletions": List(Tuple(("user", _USER), ("mechanism", _MECHANISM)), ALTERATIONS_MAX),
            "upsertions": List(
                Tuple(
                    ("user", _USER),
                    ("mechanism", _MECHANISM),
                    ("iterations", INT32),
                    ("salt", Bytes(SALT_BYTES_MAX)),
                    ("salted_password", Bytes(_KEY_BYTES_MAX)),
                ),
                ALTERATIONS_MAX,
            ),
        }
    ),
    "describe_scram_credentials": Map(required={"users": Nullable(List(_USER, ALTERATIONS_MAX))}),
}


@dataclass(frozen=True, slots=True)
class Upsertion:
    user: str
    mechanism: int  # KIP-554's byte: 1 SCRAM-SHA-256, 2 SCRAM-SHA-512
    iterations: int
    salt: bytes
    salted_password: bytes


@dataclass(frozen=True, slots=True)
class UserResult:
    user: str
    error: Errors
    message: str | None = None


@dataclass(frozen=True, slots=True)
class UserCredentials:
    """A DescribeUserScramCredentials result: (mechanism byte, iterations) pairs."""

    user: str
    error: Errors
    message: str | None
    infos: tuple[tuple[int, int], ...] = ()


class ScramStore:
    """The controller's credentials, persisted."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        os.makedirs(path, exist_ok=True)
        self._env = lmdb.open(os.fspath(path), map_size=MAP_SIZE_BYTES, max_dbs=2, sync=True, metasync=True)
        self._db = self._env.open_db(b"scram")

    def close(self) -> None:
        self._env.close()

    def get(self, user: str, mechanism: int) -> ScramCredential | None:
        name = MECHANISM_NAMES.get(mechanism)
        if name is None:
            return None
        with self._env.begin(db=self._db) as txn:
            raw = txn.get(_key(user, mechanism))
        if raw is None:
            return None
        return dec_credential_value(name, raw)

    def alter(self, deletions: Sequence[tuple[str, int]], upsertions: Sequence[Upsertion]) -> list[UserResult]:
        """Validate, then apply each user's changes whose checks all passed
        (in one durable write); one result per user named, in first-named order."""
        with self._env.begin(db=self._db) as txn:
            present = {(u, m) for u, m in deletions if _check(u, m) is None and txn.get(_key(u, m)) is not None}
            known = _users(txn)
        errors = check_alterations(deletions, upsertions, present, known)
        with self._env.begin(write=True, db=self._db) as txn:
            for user, mechanism in deletions:
                if user not in errors:
                    txn.delete(_key(user, mechanism))
            for x in upsertions:
                if x.user not in errors:
                    txn.put(_key(x.user, x.mechanism), enc_credential(credential_of(x)))
        return user_results(deletions, upsertions, errors)

    def describe(self, users: Sequence[str] | None) -> list[UserCredentials]:
        """Every user's mechanisms and iterations (``users`` None: all of them)."""
        with self._env.begin(db=self._db) as txn:
            found: dict[str, list[tuple[int, int]]] = {}
            for key, raw in txn.cursor():
                name, _, mech = bytes(key).rpartition(b"\0")
                found.setdefault(name.decode(), []).append((mech[0], msgpack.unpackb(raw)[1]))
        return describe_found(found, users)


def check_alterations(
    deletions: Sequence[tuple[str, int]],
    upsertions: Sequence[Upsertion],
    present: set[tuple[str, int]],
    known_users: set[str],
) -> dict[str, tuple[Errors, str]]:
    """Each user whose alterations fail, with the first failure, as Kafka's
    controller checks them: ``present`` holds the (user, mechanism) pairs
    deleted that exist, ``known_users`` the users holding any credential."""
    errors: dict[str, tuple[Errors, str]] = {}
    pairs = [(u, m) for u, m in deletions] + [(x.user, x.mechanism) for x in upsertions]
    twice = (Errors.DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request")
    for pair, n in Counter(pairs).items():
        if n > 1:
            errors.setdefault(pair[0], twice)
    for user, mechanism in deletions:
        problem = _check(user, mechanism)
        if problem is None and (user, mechanism) not in present:
            problem = (Errors.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist")
        if problem is not None:
            errors.setdefault(user, problem)
    for x in upsertions:
        problem = _check(x.user, x.mechanism)
        if problem is None and x.iterations < SCRAM_ITERATIONS_MIN:
            problem = (Errors.UNACCEPTABLE_CREDENTIAL, "Too few iterations")
        if problem is None and x.iterations > SCRAM_ITERATIONS_MAX:
            problem = (Errors.UNACCEPTABLE_CREDENTIAL, "Too many iterations")
        if problem is None and x.user not in known_users and len(known_users) >= USERS_MAX:
            problem = (Errors.UNACCEPTABLE_CREDENTIAL, f"More than {USERS_MAX} users")
        if problem is not None:
            errors.setdefault(x.user, problem)
    return errors


def user_results(
    deletions: Sequence[tuple[str, int]], upsertions: Sequence[Upsertion], errors: dict[str, tuple[Errors, str]]
) -> list[UserResult]:
    """One result per user named, in first-named order."""
    users = dict.fromkeys([u for u, _ in deletions] + [x.user for x in upsertions])
    out = []
    for user in users:
        error, message = errors.get(user, (Errors.NONE, ""))
        out.append(UserResult(user, error, message or None))
    return out


def describe_found(found: dict[str, list[tuple[int, int]]], users: Sequence[str] | None) -> list[UserCredentials]:
    """DescribeUserScramCredentials' results from every user's (mechanism, iterations)."""
    if users is None:
        return [UserCredentials(u, Errors.NONE, None, tuple(found[u])) for u in sorted(found)]
    out = []
    counts = Counter(users)
    for user in counts:
        if counts[user] > 1:
            out.append(UserCredentials(user, Errors.DUPLICATE_RESOURCE, "Cannot describe the same user twice"))
        elif user not in found:
            out.append(UserCredentials(user, Errors.RESOURCE_NOT_FOUND,
                                       "Attempt to describe a user credential that does not exist"))  # fmt: skip
        else:
            out.append(UserCredentials(user, Errors.NONE, None, tuple(found[user])))
    return out


def credential_of(x: Upsertion) -> ScramCredential:
    return ScramCredential.from_salted_password(MECHANISM_NAMES[x.mechanism], x.salted_password, x.salt, x.iterations)


def enc_credential(cred: ScramCredential) -> bytes:
    value = [cred.salt, cred.iterations, cred.stored_key, cred.server_key]
    return bytes(msgpack.packb(value, use_bin_type=True))


def dec_credential_value(mechanism: str, raw: bytes) -> ScramCredential:
    salt, iterations, stored_key, server_key = msgpack.unpackb(raw)
    return ScramCredential(mechanism, salt, iterations, stored_key, server_key)


def _key(user: str, mechanism: int) -> bytes:
    return user.encode() + b"\0" + bytes([mechanism])


def _users(txn: Any) -> set[str]:
    return {bytes(k).rpartition(b"\0")[0].decode() for k, _ in txn.cursor()}


def _check(user: str, mechanism: int) -> tuple[Errors, str] | None:
    if not user:
        return Errors.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    if len(user) > USER_CHARS_MAX or "\0" in user:
        return Errors.UNACCEPTABLE_CREDENTIAL, f"Username must be 1-{USER_CHARS_MAX} characters, without NUL"
    if mechanism not in MECHANISM_NAMES:
        return Errors.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    return None


# ------------------------------------------------------------------ the RPCs


def scram_handlers(store: ScramStore) -> dict[str, Callable[[Any], Awaitable[Any]]]:
    """The controller's handlers (bodies already checked against the schemas)."""

    async def credential(body: Any) -> Any:
        cred = store.get(body["user"], body["mechanism"])
        if cred is None:
            return {"found": False}
        return {"found": True, "salt": cred.salt, "iterations": cred.iterations,
                "stored_key": cred.stored_key, "server_key": cred.server_key}  # fmt: skip

    async def alter(body: Any) -> Any:
        deletions = [(u, m) for u, m in body["deletions"]]
        upsertions = [Upsertion(*x) for x in body["upsertions"]]
        results = await asyncio.to_thread(store.alter, deletions, upsertions)  # a durable write
        return {"results": [[r.user, int(r.error), r.message] for r in results]}

    async def describe(body: Any) -> Any:
        results = store.describe(body["users"])
        return {"results": [[r.user, int(r.error), r.message, [list(i) for i in r.infos]] for r in results]}

    return {
        "scram_credential": credential,
        "alter_scram_credentials": alter,
        "describe_scram_credentials": describe,
    }


def dec_credential(body: Any, mechanism: str) -> ScramCredential | None:
    m = expect_map(body, "scram_credential response")
    if not m.get("found"):
        return None
    return ScramCredential(
        mechanism,
        expect_bytes(m.get("salt"), "salt"),
        expect_int(m.get("iterations"), "iterations"),
        expect_bytes(m.get("stored_key"), "stored_key"),
        expect_bytes(m.get("server_key"), "server_key"),
    )


def dec_alter_results(body: Any) -> list[UserResult]:
    out = []
    for item in expect_list(expect_map(body, "alter response").get("results"), "results"):
        user, error, message = expect_list(item, "result")
        out.append(UserResult(expect_str(user, "user"), _error(error), message if isinstance(message, str) else None))
    return out


def dec_describe_results(body: Any) -> list[UserCredentials]:
    out = []
    for item in expect_list(expect_map(body, "describe response").get("results"), "results"):
        user, error, message, infos = expect_list(item, "result")
        pairs = tuple((expect_int(m, "mechanism"), expect_int(i, "iterations")) for m, i in expect_list(infos, "infos"))
        out.append(UserCredentials(expect_str(user, "user"), _error(error),
                                   message if isinstance(message, str) else None, pairs))  # fmt: skip
    return out


def _error(v: Any) -> Errors:
    try:
        return Errors(expect_int(v, "error"))
    except ValueError:
        raise WireError(f"unknown error code {v!r}") from None


__all__ = [
    "CONTROLLER_SCRAM_SCHEMAS",
    "ScramStore",
    "Upsertion",
    "UserCredentials",
    "UserResult",
    "check_alterations",
    "credential_of",
    "dec_alter_results",
    "dec_credential",
    "dec_credential_value",
    "dec_describe_results",
    "describe_found",
    "enc_credential",
    "scram_handlers",
    "user_results",
]
