"""Kafka's ACL model as typed records: resource types, pattern types,
operations and permissions by Kafka's wire codes, an ACL binding, the filters
DescribeAcls and DeleteAcls send, and the validation CreateAcls applies.

The rules are Kafka's (``ResourcePatternFilter.matches``,
``AccessControlEntryFilter.matches``, ``AclControlManager.validateNewAcl``):
a binding names one resource pattern (LITERAL or PREFIXED; the LITERAL name
``*`` is every resource of its type) and one entry (principal ``Type:name``
or ``User:*``, host or ``*``, an operation, ALLOW or DENY).  A filter's
``None`` fields and its ANY codes match everything; the MATCH pattern type
matches every pattern that would apply to the filter's name.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

__all__ = [
    "CLUSTER_NAME",
    "PRINCIPAL_CHARS_MAX",
    "RESOURCE_NAME_CHARS_MAX",
    "WILDCARD",
    "WILDCARD_PRINCIPAL",
    "AclBinding",
    "AclBindingFilter",
    "AclOperation",
    "AclPermission",
    "PatternType",
    "ResourceType",
    "invalid_binding",
]

# The one CLUSTER resource's name, as Kafka's.
CLUSTER_NAME = "kafka-cluster"
# The LITERAL resource name and host that match every resource or host.
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"
# Bounds a binding's strings (Kafka's are bounded by the request size only).
RESOURCE_NAME_CHARS_MAX = 1_000
PRINCIPAL_CHARS_MAX = 1_000


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermission(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


# The resource types partlog authorizes (DELEGATION_TOKEN and USER have no
# API here that checks them).
_CONCRETE_TYPES = frozenset(
    {ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID}
)


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL: a resource pattern and an access-control entry."""

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission: AclPermission

    def applies_to(self, resource_type: ResourceType, name: str) -> bool:
        """This binding's pattern covers the resource ``resource_type``/``name``."""
        if self.resource_type != resource_type:
            return False
        if self.pattern_type == PatternType.PREFIXED:
            return name.startswith(self.resource_name)
        return self.resource_name in (name, WILDCARD)


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """What DescribeAcls and DeleteAcls select: None and ANY match all."""

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: AclPermission = AclPermission.ANY

    def matches(self, b: AclBinding) -> bool:
        if self.resource_type not in (ResourceType.ANY, b.resource_type):
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH, b.pattern_type):
            return False
        if self.resource_name is not None:
            if self.pattern_type == PatternType.MATCH:
                # Every pattern that would apply to a resource of this name.
                if b.pattern_type == PatternType.PREFIXED:
                    if not self.resource_name.startswith(b.resource_name):
                        return False
                elif b.resource_name not in (self.resource_name, WILDCARD):
                    return False
            elif b.resource_name != self.resource_name:
                return False
        if self.principal is not None and self.principal != b.principal:
            return False
        if self.host is not None and self.host != b.host:
            return False
        if self.operation not in (AclOperation.ANY, b.operation):
            return False
        return self.permission in (AclPermission.ANY, b.permission)

    def invalid(self) -> str | None:
        """Why Kafka refuses this filter (an UNKNOWN code), or None."""
        if self.resource_type == ResourceType.UNKNOWN:
            return "the resource type is UNKNOWN"
        if self.pattern_type == PatternType.UNKNOWN:
            return "the pattern type is UNKNOWN"
        if self.operation == AclOperation.UNKNOWN:
            return "the operation is UNKNOWN"
        if self.permission == AclPermission.UNKNOWN:
            return "the permission type is UNKNOWN"
        return None


def invalid_binding(b: AclBinding) -> str | None:
    """Why CreateAcls refuses ``b`` (answered INVALID_REQUEST), or None."""
    if b.resource_type not in _CONCRETE_TYPES:
        return f"resource type {b.resource_type.name} cannot carry an ACL here"
    if b.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"pattern type {b.pattern_type.name} is not LITERAL or PREFIXED"
    if b.operation in (AclOperation.ANY, AclOperation.UNKNOWN):
        return f"operation {b.operation.name} cannot be granted"
    if b.permission not in (AclPermission.ALLOW, AclPermission.DENY):
        return f"permission type {b.permission.name} is not ALLOW or DENY"
    if not b.resource_name or len(b.resource_name) > RESOURCE_NAME_CHARS_MAX:
        return f"the resource name must have 1 to {RESOURCE_NAME_CHARS_MAX} characters"
    if b.resource_type == ResourceType.CLUSTER and b.resource_name != CLUSTER_NAME:
        return f"the cluster resource is named {CLUSTER_NAME!r}"
    if b.pattern_type == PatternType.PREFIXED and b.resource_name == WILDCARD:
        return "a PREFIXED pattern cannot be '*' (use LITERAL '*')"
    kind, sep, name = b.principal.partition(":")
    if not sep or not kind or not name or len(b.principal) > PRINCIPAL_CHARS_MAX:
        return f"principal {b.principal!r} is not of the form Type:name"
    if not b.host or len(b.host) > RESOURCE_NAME_CHARS_MAX:
        return "the host must be an address or '*'"
    return None
