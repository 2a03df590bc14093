"""Authorization on the Kafka listener: the checks the API handlers make, as
Kafka's ``KafkaApis`` makes them (docs/security.md, "Authorization", lists
which operation each API checks on which resource and what it answers).

:class:`Authz` is off unless the listener's config names an authorizer
(``FrontConfig.authorizer``): then every check is allowed and nothing
changes for a listener without one.  When on, it decides with
:class:`partlog.acl.Authorizer` over the ACL source's current set (the
cluster metadata's, followed without a restart), as the session's principal
from its host.  A decision is a few dict lookups (partlog.acl's index), so
checks run inline on the event loop.
"""

from __future__ import annotations

from collections.abc import Container, Iterator
from typing import Any, Protocol

from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from partlog.acl import CLUSTER_NAME, AclOperation, Authorizer, AuthorizerConfig, ResourceType
from partlog.acl.source import AclSource, LocalAcls
from partlog.kafka.errors import Errors
from partlog.kafka_front.codec import error_body, response_class

__all__ = ["Authz", "AuthzCollector", "Caller", "denied"]


class Caller(Protocol):
    """Who asks: a :class:`partlog.kafka_front.handler.Session`."""

    principal: str

    @property
    def host(self) -> str: ...


class Authz:
    """The listener's authorization checks (all allowed when off)."""

    def __init__(self, config: AuthorizerConfig | None = None, source: AclSource | None = None) -> None:
        self.enabled = config is not None
        self.source: AclSource = source if source is not None else LocalAcls()
        self.authorizer = Authorizer(config or AuthorizerConfig())

    def allowed(self, who: Caller, op: AclOperation, resource_type: ResourceType, name: str) -> bool:
        if not self.enabled:
            return True
        a = self.authorizer
        acls = self.source.acls
        if acls is not a.acls:
            a.update(acls)
        return a.authorize(who.principal, who.host, op, resource_type, name)

    def topic(self, who: Caller, op: AclOperation, name: str) -> bool:
        return self.allowed(who, op, ResourceType.TOPIC, name)

    def group(self, who: Caller, op: AclOperation, group_id: str) -> bool:
        return self.allowed(who, op, ResourceType.GROUP, group_id)

    def txn_id(self, who: Caller, op: AclOperation, transactional_id: str) -> bool:
        return self.allowed(who, op, ResourceType.TRANSACTIONAL_ID, transactional_id)

    def cluster(self, who: Caller, op: AclOperation) -> bool:
        return self.allowed(who, op, ResourceType.CLUSTER, CLUSTER_NAME)

    def idempotent_write(self, who: Caller) -> bool:
        """IDEMPOTENT_WRITE on the cluster, or WRITE on some topic (KIP-679)."""
        if not self.enabled or self.cluster(who, AclOperation.IDEMPOTENT_WRITE):
            return True
        a = self.authorizer
        return a.authorize_any(who.principal, who.host, AclOperation.WRITE, ResourceType.TOPIC)

    def authorized_operations(self, who: Caller, resource_type: ResourceType, name: str) -> int:
        """Kafka's ``authorizedOperations``: a bit (1 << code) for each of
        the operations the resource type supports that ``who`` may do on
        ``name`` (DESCRIBE implied by READ, WRITE, DELETE or ALTER, as the
        authorizer rules) -- Metadata's and the describe APIs' field."""
        ops = SUPPORTED_OPERATIONS[resource_type]
        return sum(1 << int(op) for op in ops if self.allowed(who, op, resource_type, name))

    def create_topic(self, who: Caller, name: str) -> bool:
        """CREATE on the cluster or on the topic, as Kafka's CreateTopics and
        Metadata's auto-creation."""
        return self.cluster(who, AclOperation.CREATE) or self.topic(who, AclOperation.CREATE, name)

    def metadata_refusals(
        self, who: Caller, asked: list[str] | None, existing: Container[str], auto_create: bool
    ) -> set[str]:
        """The topics a Metadata request names that are answered
        TOPIC_AUTHORIZATION_FAILED, as Kafka: those without DESCRIBE, and,
        when missing ones are created, those without CREATE."""
        if not self.enabled or asked is None:
            return set()
        refused = {n for n in asked if not self.topic(who, AclOperation.DESCRIBE, n)}
        if auto_create:
            refused.update(
                n for n in asked if n and n not in existing and n not in refused and not self.create_topic(who, n)
            )
        return refused


# Kafka's AclEntry.supportedOperations, for the types partlog describes.
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE,
                         AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS,
                         AclOperation.ALTER_CONFIGS),
    ResourceType.GROUP: (AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE,
                         AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS),
    ResourceType.CLUSTER: (AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
                           AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
                           AclOperation.DESCRIBE),
}  # fmt: skip
# Kafka's "not asked for" value of an authorized_operations field (Integer.MIN_VALUE).
OPERATIONS_NOT_ASKED = -(2**31)


def denied(req: Any, error: Errors) -> dict[str, Any]:
    """The answer of ``req``'s API and version that says ``error`` in every
    error code and nothing else: how a request refused as a whole is
    answered (JoinGroup without READ on its group, EndTxn without WRITE on
    its transactional id, ...)."""
    entity = error_body(response_class(req.api_key, req.api_version), int(error))
    return {name: getattr(entity, name) for name in entity.__dataclass_fields__}


class AuthzCollector(Collector):
    """``partlog_kafka_authorizations_total{result}``: decisions by result."""

    def __init__(self, authz: Authz) -> None:
        self._authz = authz

    def collect(self) -> Iterator[CounterMetricFamily]:
        d = self._authz.authorizer.decisions
        c = CounterMetricFamily(
            "partlog_kafka_authorizations",
            "Authorization decisions on the Kafka listener, by result",
            labels=["result"],
        )
        c.add_metric(["allowed"], d.allowed)
        c.add_metric(["denied"], d.denied)
        c.add_metric(["super_user"], d.by_super_user)
        c.add_metric(["no_acl_found"], d.by_default)
        yield c
