"""Which :class:`~partlog.acl.source.AclSource` follows a cluster's ACLs for a
process on a given metadata source: :func:`acl_source_for`.

Brokers (with ``--authorizer``) and walmgr (with ``authorizer =
"standard"``) take their ACLs from the cluster metadata they already use:
the embedded controller's (long-polled, :class:`ControllerAcls`), etcd's
(watched, :class:`~partlog.controller.etcd_acls.EtcdAcls`), or this
process's own memory on a static cluster file (:class:`LocalAcls`: empty
unless the process adds some, so only super users pass there).  A source
with ``start``/``stop`` must be started to follow changes.
"""

from __future__ import annotations

import sys
from typing import Protocol, runtime_checkable

from partlog.acl.source import AclSource, LocalAcls
from partlog.controller.acls import ControllerAcls
from partlog.controller.client import ControllerMetadata
from partlog.controller.cluster_meta import MetadataSource

__all__ = ["FollowedAcls", "acl_source_for"]


@runtime_checkable
class FollowedAcls(Protocol):
    """A source that follows the cluster's ACLs while the process runs."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


def acl_source_for(metadata: MetadataSource | None) -> AclSource:
    """The ACL source for a process whose cluster metadata is ``metadata``
    (None: none, as a static cluster's)."""
    if isinstance(metadata, ControllerMetadata):
        return ControllerAcls(metadata.call)
    # etcd's client (grpc) is imported only where metadata is on etcd; then
    # its module is loaded.
    etcd_meta = sys.modules.get("partlog.controller.etcd_meta")
    if etcd_meta is not None and isinstance(metadata, etcd_meta.EtcdMetadata):
        from partlog.controller.etcd_acls import EtcdAcls

        return EtcdAcls(
            metadata.target,
            request_timeout_ms=metadata.request_timeout_ms,
            retry_backoff_ms=metadata.retry_backoff_ms,
            retry_backoff_max_ms=metadata.retry_backoff_max_ms,
        )
    return LocalAcls()
