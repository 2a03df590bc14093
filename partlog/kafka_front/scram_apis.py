"""KIP-554 on the Kafka port: AlterUserScramCredentials and
DescribeUserScramCredentials, answered from the cluster's credential store
(:class:`CredentialAdmin`: the controller's, through
partlog.controller.scram_client).

Clients send the salted password (never the password); the store keeps
only the keys derived from it.  A store that cannot be reached answers
every user of the request with its retriable error.  Who may call them is
checked here: ALTER / DESCRIBE on CLUSTER, as Kafka.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from partlog.acl.model import AclOperation
from partlog.controller.scram_store import ALTERATIONS_MAX, Upsertion, UserCredentials, UserResult
from partlog.kafka.errors import Errors
from partlog.kafka_front.authz import Authz
from partlog.kafka_front.handler import Handler, Session

DESCRIBE_KEY, ALTER_KEY = 50, 51


@runtime_checkable
class CredentialAdmin(Protocol):
    async def alter(
        self, deletions: Sequence[tuple[str, int]], upsertions: Sequence[Upsertion]
    ) -> list[UserResult] | Errors: ...

    async def describe(self, users: Sequence[str] | None) -> list[UserCredentials] | Errors: ...


class NoCredentialAdmin:
    """A listener whose credentials cannot be changed (held in memory, or
    the etcd back end): both APIs answer UNSUPPORTED_VERSION."""

    async def alter(
        self, deletions: Sequence[tuple[str, int]], upsertions: Sequence[Upsertion]
    ) -> list[UserResult] | Errors:
        return Errors.UNSUPPORTED_VERSION

    async def describe(self, users: Sequence[str] | None) -> list[UserCredentials] | Errors:
        return Errors.UNSUPPORTED_VERSION


class ScramApis:
    """``authz``: DESCRIBE on the cluster to describe, ALTER to alter, as
    Kafka's KafkaApis checks them (everything allowed with no authorizer)."""

    def __init__(self, admin: CredentialAdmin, authz: Authz | None = None) -> None:
        self.admin = admin
        self.authz = authz if authz is not None else Authz()

    def handlers(self) -> dict[int, Handler]:
        return {DESCRIBE_KEY: self.describe, ALTER_KEY: self.alter}

    async def describe(self, req: Any, body: Any, session: Session) -> Mapping[str, Any]:
        users = None if body.users is None else [u.name for u in body.users]
        if not self.authz.cluster(session, AclOperation.DESCRIBE):
            return {"throttle_time": 0, "error_code": int(Errors.CLUSTER_AUTHORIZATION_FAILED),
                    "error_message": None, "results": []}  # fmt: skip
        if users is not None and len(users) > ALTERATIONS_MAX:
            return {"throttle_time": 0, "error_code": int(Errors.INVALID_REQUEST),
                    "error_message": f"more than {ALTERATIONS_MAX} users", "results": []}  # fmt: skip
        answer = await self.admin.describe(users)
        if isinstance(answer, Errors):
            return {"throttle_time": 0, "error_code": int(answer), "error_message": None, "results": []}
        results = [
            {
                "user": r.user,
                "error_code": int(r.error),
                "error_message": r.message,
                "credential_infos": [{"mechanism": m, "iterations": i} for m, i in r.infos],
            }
            for r in answer
        ]
        return {"throttle_time": 0, "error_code": 0, "error_message": None, "results": results}

    async def alter(self, req: Any, body: Any, session: Session) -> Mapping[str, Any]:
        deletions = [(d.name, int(d.mechanism)) for d in body.deletions]
        upsertions = [
            Upsertion(u.name, int(u.mechanism), int(u.iterations), bytes(u.salt), bytes(u.salted_password))
            for u in body.upsertions
        ]
        users = list(dict.fromkeys([u for u, _ in deletions] + [x.user for x in upsertions]))
        if not self.authz.cluster(session, AclOperation.ALTER):
            return {"throttle_time": 0, "results": [
                {"user": u, "error_code": int(Errors.CLUSTER_AUTHORIZATION_FAILED), "error_message": None}
                for u in users]}  # fmt: skip
        if len(deletions) + len(upsertions) > ALTERATIONS_MAX:
            error, message = Errors.INVALID_REQUEST, f"more than {ALTERATIONS_MAX} alterations"
            return {"throttle_time": 0, "results": [{"user": u, "error_code": int(error), "error_message": message}
                                                     for u in users]}  # fmt: skip
        answer = await self.admin.alter(deletions, upsertions)
        if isinstance(answer, Errors):
            results = [{"user": u, "error_code": int(answer), "error_message": None} for u in users]
        else:
            results = [{"user": r.user, "error_code": int(r.error), "error_message": r.message} for r in answer]
        return {"throttle_time": 0, "results": results}


__all__ = ["CredentialAdmin", "NoCredentialAdmin", "ScramApis"]
