"""CreateAcls, DescribeAcls and DeleteAcls (API keys 30, 29, 31; v1-3) on the
Kafka listener, as Kafka's brokers answer them:

* a listener without an authorizer answers SECURITY_DISABLED;
* CreateAcls and DeleteAcls need ALTER on the cluster, DescribeAcls DESCRIBE
  (else CLUSTER_AUTHORIZATION_FAILED for every creation, filter or the
  whole answer);
* a creation Kafka would refuse (an ANY or UNKNOWN code, a MATCH pattern, a
  principal not ``Type:name``) is answered INVALID_REQUEST with the reason,
  the others are made; a filter with an UNKNOWN code is answered
  INVALID_REQUEST.

The ACLs live in the listener's ACL source (the cluster metadata):
:class:`partlog.kafka_front.authz.Authz` holds it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from partlog.acl import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermission,
    PatternType,
    ResourceType,
)
from partlog.kafka.errors import Errors
from partlog.kafka_front.handler import ApiHandlers, Session

__all__ = ["AclApis"]


def _code(cls: Any, v: Any) -> Any:
    try:
        return cls(int(v))
    except ValueError:
        return cls(0)


def _filter(f: Any) -> AclBindingFilter:
    return AclBindingFilter(
        _code(ResourceType, f.resource_type_filter),
        f.resource_name_filter,
        _code(PatternType, f.pattern_type_filter),
        f.principal_filter,
        f.host_filter,
        _code(AclOperation, f.operation),
        _code(AclPermission, f.permission_type),
    )


def _binding_row(b: AclBinding) -> dict[str, Any]:
    return {
        "resource_type": int(b.resource_type),
        "resource_name": b.resource_name,
        "pattern_type": int(b.pattern_type),
        "principal": b.principal,
        "host": b.host,
        "operation": int(b.operation),
        "permission_type": int(b.permission),
    }


class AclApis(ApiHandlers):
    async def create_acls(self, req: Any, body: Any, session: Session) -> Mapping[str, Any]:
        creations = list(body.creations)
        error = self._refused(session, AclOperation.ALTER)
        if error is not None:
            return {"throttle_time": 0, "results": [{"error_code": int(error), "error_message": None}] * len(creations)}
        bindings = [
            AclBinding(
                _code(ResourceType, c.resource_type),
                c.resource_name,
                _code(PatternType, c.resource_pattern_type),
                c.principal,
                c.host,
                _code(AclOperation, c.operation),
                _code(AclPermission, c.permission_type),
            )
            for c in creations
        ]
        answers = await self.authz.source.create_acls(bindings) if bindings else []
        return {
            "throttle_time": 0,
            "results": [
                {"error_code": 0 if why is None else int(Errors.INVALID_REQUEST), "error_message": why}
                for why in answers
            ],
        }

    async def describe_acls(self, req: Any, body: Any, session: Session) -> Mapping[str, Any]:
        error = self._refused(session, AclOperation.DESCRIBE)
        f = _filter(body)
        why = f.invalid()
        if error is None and why is not None:
            error = Errors.INVALID_REQUEST
        if error is not None:
            return {"throttle_time": 0, "error_code": int(error), "error_message": why, "resources": []}
        by_resource: dict[tuple[int, str, int], list[dict[str, Any]]] = {}
        for b in self.authz.source.acls.select(f):
            by_resource.setdefault((b.resource_type, b.resource_name, b.pattern_type), []).append(
                {
                    "principal": b.principal,
                    "host": b.host,
                    "operation": int(b.operation),
                    "permission_type": int(b.permission),
                }
            )
        resources = [
            {"resource_type": rt, "resource_name": name, "pattern_type": pt, "acls": acls}
            for (rt, name, pt), acls in by_resource.items()
        ]
        return {"throttle_time": 0, "error_code": 0, "error_message": None, "resources": resources}

    async def delete_acls(self, req: Any, body: Any, session: Session) -> Mapping[str, Any]:
        filters = [_filter(f) for f in body.filters]
        error = self._refused(session, AclOperation.ALTER)
        if error is not None:
            refused: list[dict[str, Any]] = [
                {"error_code": int(error), "error_message": None, "matching_acls": []}
            ] * len(filters)
            return {"throttle_time": 0, "filter_results": refused}
        valid = [f for f in filters if f.invalid() is None]
        gone = iter(await self.authz.source.delete_acls(valid) if valid else [])
        results: list[dict[str, Any]] = []
        for f in filters:
            why = f.invalid()
            if why is not None:
                results.append({"error_code": int(Errors.INVALID_REQUEST), "error_message": why, "matching_acls": []})
                continue
            matching = [{"error_code": 0, "error_message": None, **_binding_row(b)} for b in next(gone)]
            results.append({"error_code": 0, "error_message": None, "matching_acls": matching})
        return {"throttle_time": 0, "filter_results": results}

    def _refused(self, session: Session, op: AclOperation) -> Errors | None:
        if not self.authz.enabled:
            return Errors.SECURITY_DISABLED
        if not self.authz.cluster(session, op):
            return Errors.CLUSTER_AUTHORIZATION_FAILED
        return None
