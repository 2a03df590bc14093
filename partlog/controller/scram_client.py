"""SCRAM credentials as brokers and admin tools reach them: through the
embedded controller (:mod:`partlog.controller.scram_store` holds them).

:class:`ControllerScramCredentials` is the Kafka listener's credential
lookup (one ``scram_credential`` call per authentication: a client that
cannot be checked because the controller is unreachable fails
authentication, logged) and the admin side of KIP-554 (``alter``,
``describe``), answering the retriable error that stands for the whole
request when the controller cannot be reached.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from partlog.controller.client import ControllerMetadata
from partlog.controller.scram_store import (
    Upsertion,
    UserCredentials,
    UserResult,
    dec_alter_results,
    dec_credential,
    dec_describe_results,
)
from partlog.kafka.errors import Errors
from partlog.kafka.scram_credential import MECHANISM_IDS, ScramCredential

log = logging.getLogger(__name__)


class ControllerScramCredentials:
    def __init__(self, controller: ControllerMetadata) -> None:
        self.controller = controller

    async def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        body = {"user": user, "mechanism": MECHANISM_IDS[mechanism]}
        answer = await self.controller.admin_call("scram_credential", body, lambda b: dec_credential(b, mechanism))
        if isinstance(answer, Errors):
            log.warning("no SCRAM credential lookup for %r: the controller answered %s", user, answer.name)
            return None
        return answer

    async def alter(
        self, deletions: Sequence[tuple[str, int]], upsertions: Sequence[Upsertion]
    ) -> list[UserResult] | Errors:
        body = {
            "deletions": [[u, m] for u, m in deletions],
            "upsertions": [[x.user, x.mechanism, x.iterations, x.salt, x.salted_password] for x in upsertions],
        }
        return await self.controller.admin_call("alter_scram_credentials", body, dec_alter_results)

    async def describe(self, users: Sequence[str] | None) -> list[UserCredentials] | Errors:
        body = {"users": None if users is None else list(users)}
        return await self.controller.admin_call("describe_scram_credentials", body, dec_describe_results)


__all__ = ["ControllerScramCredentials"]
