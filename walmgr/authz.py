"""Who may notify walmgr: its notification listener under the cluster's
authorizer (issue 29: brokers authenticate to walmgr as principals allowed
CLUSTER_ACTION).

With ``authorizer = "standard"`` in walmgr's config, the listener's one
method, ``wal_uploaded``, needs CLUSTER_ACTION on the cluster for the
peer's principal (its certificate's subject under
``principal_mapping_rules`` with mutual TLS, else ``User:ANONYMOUS``), as
a broker's RPC does (:mod:`partlog.broker.rpc_authz`), decided over the
cluster's ACLs followed from the metadata walmgr uses
(:func:`partlog.controller.acl_sources.acl_source_for`).  A notification is
only a hint (walmgr reads every footer itself, and a notified key still
passes the whole deletion gate), so this guards walmgr's work, not its
deletions.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter

from partlog.acl import AuthorizerConfig
from partlog.acl.source import AclSource
from partlog.broker.rpc_authz import RpcClusterAuthz
from partlog.controller.acl_sources import FollowedAcls, acl_source_for
from partlog.controller.cluster_meta import MetadataSource
from partlog.kafka.principal_rules import PrincipalMapper
from partlog.runtime import Clock
from walmgr.config import WalmgrConfig

__all__ = ["NOTIFICATION_CALLERS", "NotificationAuthz", "notification_authz"]

NOTIFICATION_CALLERS = {"wal_uploaded": "brokers: a WAL object they uploaded"}


@dataclass(slots=True)
class NotificationAuthz:
    """The listener's hook, its principal rules, and the ACL source to
    start and stop with walmgr."""

    hook: RpcClusterAuthz
    principals: PrincipalMapper
    source: AclSource

    async def start(self) -> None:
        if isinstance(self.source, FollowedAcls):
            await self.source.start()

    async def stop(self) -> None:
        if isinstance(self.source, FollowedAcls):
            await self.source.stop()


def notification_authz(
    config: WalmgrConfig, metadata: MetadataSource | None, registry: CollectorRegistry, clock: Clock
) -> NotificationAuthz | None:
    """The listener's authorization under ``config`` (None: authorizer off)."""
    if config.authorizer != "standard":
        return None
    supers = frozenset(p.strip() for p in config.super_users.split(";") if p.strip())
    source = acl_source_for(metadata)
    refusals = Counter(
        "walmgr_rpc_authorization_failures",
        "notifications refused: the peer lacks CLUSTER_ACTION on the cluster",
        ["method"],
        registry=registry,
    )
    auth = AuthorizerConfig(
        super_users=supers, allow_everyone_if_no_acl_found=bool(config.allow_everyone_if_no_acl_found)
    )
    hook = RpcClusterAuthz(auth, source, refusals, clock, methods=NOTIFICATION_CALLERS)
    return NotificationAuthz(hook, PrincipalMapper.parse(config.principal_mapping_rules), source)
