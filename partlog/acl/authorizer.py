"""The authorizer: Kafka's StandardAuthorizer decisions over an ACL set, sans-IO.

:meth:`Authorizer.authorize` answers whether ``principal`` from ``host`` may
perform ``operation`` on one resource, as ``StandardAuthorizerData`` does:

1. A principal named in ``super.users`` is allowed everything.
2. The ACLs that apply are those of the resource's type whose pattern covers
   its name: LITERAL with that name, LITERAL ``*``, PREFIXED with a prefix of
   the name.  Of those, an entry matches when its principal is the caller's
   or ``User:*``, its host the caller's or ``*``, and its operation ALL or
   the one asked; an ALLOW entry also matches DESCRIBE when it grants READ,
   WRITE, DELETE or ALTER, and DESCRIBE_CONFIGS when it grants ALTER_CONFIGS
   (implication never applies to DENY).
3. A matching DENY wins; else a matching ALLOW allows; else, when no ACL at
   all applies to the resource, ``allow.everyone.if.no.acl.found`` decides
   (false by default); else the answer is no.

Work per decision is bounded: ACLs are indexed by (type, name) for LITERAL
and by (type, prefix) for PREFIXED, so a decision costs one lookup per
prefix length of the name (names are at most RESOURCE_NAME_CHARS_MAX) plus
the entries on the resources that apply; the set holds at most ``ACLS_MAX``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from partlog.acl.model import (
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermission,
    PatternType,
    ResourceType,
)

__all__ = ["ACLS_MAX", "AclSet", "Authorizer", "AuthorizerConfig", "Decisions"]

# The most ACLs a cluster holds (Kafka has no limit; this bounds the memory
# of every broker's index and the size of one DescribeAcls answer).
ACLS_MAX = 100_000

_IMPLIES_DESCRIBE = frozenset(
    {AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE, AclOperation.ALTER}
)
_IMPLIES_DESCRIBE_CONFIGS = frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS})

_Key = tuple[ResourceType, str]


class AclSet:
    """An immutable set of ACLs with its indexes, at a version."""

    __slots__ = ("_literal", "_prefix_lengths", "_prefixed", "bindings", "version")

    def __init__(self, bindings: Iterable[AclBinding] = (), version: int = 0) -> None:
        self.bindings: frozenset[AclBinding] = frozenset(bindings)
        assert len(self.bindings) <= ACLS_MAX, len(self.bindings)
        self.version = version
        self._literal: dict[_Key, list[AclBinding]] = {}
        self._prefixed: dict[_Key, list[AclBinding]] = {}
        lengths: dict[ResourceType, set[int]] = {}
        for b in self.bindings:
            key = (b.resource_type, b.resource_name)
            if b.pattern_type == PatternType.PREFIXED:
                self._prefixed.setdefault(key, []).append(b)
                lengths.setdefault(b.resource_type, set()).add(len(b.resource_name))
            else:
                self._literal.setdefault(key, []).append(b)
        # Only the prefix lengths some ACL has are looked up.
        self._prefix_lengths = {t: sorted(ls) for t, ls in lengths.items()}

    def __len__(self) -> int:
        return len(self.bindings)

    def applying(self, resource_type: ResourceType, name: str) -> list[AclBinding]:
        """The ACLs whose pattern covers this resource."""
        out = list(self._literal.get((resource_type, name), ()))
        if name != WILDCARD:
            out.extend(self._literal.get((resource_type, WILDCARD), ()))
        for n in self._prefix_lengths.get(resource_type, ()):
            if n > len(name):
                break
            out.extend(self._prefixed.get((resource_type, name[:n]), ()))
        return out

    def select(self, f: AclBindingFilter) -> list[AclBinding]:
        """The ACLs ``f`` matches, in a stable order (DescribeAcls, DeleteAcls)."""
        return sorted((b for b in self.bindings if f.matches(b)), key=_order)

    def with_changes(self, added: Iterable[AclBinding], removed: Iterable[AclBinding]) -> AclSet:
        return AclSet((self.bindings - frozenset(removed)) | frozenset(added), self.version + 1)


def _order(b: AclBinding) -> tuple[int, str, int, str, str, int, int]:
    return (b.resource_type, b.resource_name, b.pattern_type, b.principal, b.host, b.operation, b.permission)


def _entry_matches(b: AclBinding, principal: str, host: str, op: AclOperation) -> bool:
    if b.principal != principal and b.principal != WILDCARD_PRINCIPAL:
        return False
    if b.host != WILDCARD and b.host != host:
        return False
    if b.operation == AclOperation.ALL or b.operation == op:
        return True
    if b.permission != AclPermission.ALLOW:
        return False
    if op == AclOperation.DESCRIBE:
        return b.operation in _IMPLIES_DESCRIBE
    if op == AclOperation.DESCRIBE_CONFIGS:
        return b.operation in _IMPLIES_DESCRIBE_CONFIGS
    return False


@dataclass(frozen=True, slots=True)
class AuthorizerConfig:
    """Kafka's ``super.users`` (principals, ``User:admin``) and
    ``allow.everyone.if.no.acl.found``."""

    super_users: frozenset[str] = frozenset()
    allow_everyone_if_no_acl_found: bool = False


@dataclass(slots=True)
class Decisions:
    """Decisions made, by result (the broker's metric)."""

    allowed: int = 0
    denied: int = 0
    by_super_user: int = 0
    by_default: int = 0


class Authorizer:
    """Decisions over the ACL set it was last given (:meth:`update`)."""

    def __init__(self, config: AuthorizerConfig | None = None, acls: AclSet | None = None) -> None:
        self.config = config or AuthorizerConfig()
        self.acls = acls or AclSet()
        self.decisions = Decisions()

    def update(self, acls: AclSet) -> None:
        self.acls = acls

    def authorize(
        self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType, name: str
    ) -> bool:
        assert operation not in (AclOperation.ANY, AclOperation.UNKNOWN, AclOperation.ALL), operation
        d = self.decisions
        if principal in self.config.super_users:
            d.allowed += 1
            d.by_super_user += 1
            return True
        allowed = False
        applying = self.acls.applying(resource_type, name)
        for b in applying:
            if _entry_matches(b, principal, host, operation):
                if b.permission == AclPermission.DENY:
                    d.denied += 1
                    return False
                allowed = True
        if not applying:
            d.by_default += 1
            allowed = self.config.allow_everyone_if_no_acl_found
        if allowed:
            d.allowed += 1
        else:
            d.denied += 1
        return allowed

    def authorize_any(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType) -> bool:
        """Whether some resource of ``resource_type`` may be operated on
        (Kafka's ``authorizeByResourceType``, KIP-679: WRITE on any topic
        lets a producer be idempotent): an ALLOW entry for this principal and
        host that no DENY entry's pattern covers, or no ACL of the type at all
        with ``allow.everyone.if.no.acl.found``."""
        if principal in self.config.super_users:
            return True
        of_type = [b for b in self.acls.bindings if b.resource_type == resource_type]
        if not of_type:
            return self.config.allow_everyone_if_no_acl_found
        denies = [
            b for b in of_type if b.permission == AclPermission.DENY and _entry_matches(b, principal, host, operation)
        ]
        for b in of_type:
            if b.permission != AclPermission.ALLOW or not _entry_matches(b, principal, host, operation):
                continue
            if not any(_covers(d, b) for d in denies):
                return True
        return False


def _covers(deny: AclBinding, allow: AclBinding) -> bool:
    """Every resource ``allow``'s pattern covers is covered by ``deny``'s."""
    if deny.pattern_type == PatternType.LITERAL:
        return deny.resource_name == WILDCARD or (
            allow.pattern_type == PatternType.LITERAL and deny.resource_name == allow.resource_name
        )
    return allow.resource_name.startswith(deny.resource_name) and allow.resource_name != WILDCARD
