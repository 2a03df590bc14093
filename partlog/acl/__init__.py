"""Authorization with Kafka's ACL model, sans-IO: the records and codes
(:mod:`partlog.acl.model`) and the StandardAuthorizer's decisions over an
indexed ACL set (:mod:`partlog.acl.authorizer`).  Where the ACLs are kept
(the cluster metadata) and which API checks what (the Kafka front end) are
the layers above."""

from partlog.acl.authorizer import ACLS_MAX, AclSet, Authorizer, AuthorizerConfig, Decisions
from partlog.acl.model import (
    CLUSTER_NAME,
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermission,
    PatternType,
    ResourceType,
    invalid_binding,
)

__all__ = [
    "ACLS_MAX",
    "CLUSTER_NAME",
    "WILDCARD",
    "WILDCARD_PRINCIPAL",
    "AclBinding",
    "AclBindingFilter",
    "AclOperation",
    "AclPermission",
    "AclSet",
    "Authorizer",
    "AuthorizerConfig",
    "Decisions",
    "PatternType",
    "ResourceType",
    "invalid_binding",
]
