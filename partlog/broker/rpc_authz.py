"""Authorization on the broker RPC: every method needs CLUSTER_ACTION on
the CLUSTER, as Kafka's inter-broker requests do
(``authorizeClusterOperation(request, CLUSTER_ACTION)`` in its KafkaApis).

:class:`RpcClusterAuthz` is the broker RPC server's ``authorize`` hook
(:mod:`partlog.rpc.peer`), given to the broker only when its authorizer is
on (``partlog broker --authorizer``): without one the server asks nothing.
It decides with :class:`partlog.acl.Authorizer` (``super.users`` pass, then
the ACLs, then ``allow.everyone.if.no.acl.found``) over the ACL source's
current set, as the peer's principal from its host.  A refusal is counted in
``partlog_rpc_authorization_failures_total{method}`` and logged, at most one
line per ``REFUSAL_LOG_INTERVAL_MS`` (a misconfigured peer retries often).

Every method of the broker RPC needs the same operation, because every one
is a cluster member's (:data:`METHOD_CALLERS` says whose): they carry
topic ids, not names, and trust their caller with what the Kafka listener
checks per topic and group (a broker forwards ``fetch``, ``list_offsets``,
``delete_records`` and ``offset_for_leader_epoch`` to leaders for Kafka
clients it has already authorized).  The native client's methods
(``produce``, ``fetch``, ``metadata``, ...) are no exception: on an
authorizing cluster the RPC port is the cluster's own, and an application
with narrower rights uses a Kafka listener.  A method not in the table is
refused too (fail closed): a new method must be placed here.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from prometheus_client import Counter

from partlog.acl import CLUSTER_NAME, AclOperation, Authorizer, AuthorizerConfig, ResourceType
from partlog.acl.source import AclSource
from partlog.rpc.peer import RpcPeer
from partlog.runtime import Clock

log = logging.getLogger(__name__)

# At most one log line per this long about refusals (the rest are counted).
REFUSAL_LOG_INTERVAL_MS = 10_000

# Every broker RPC method and who calls it; each needs CLUSTER_ACTION.
METHOD_CALLERS: Mapping[str, str] = {
    "commit": "brokers: a WAL segment's batches to their leaders",
    "replica_fetch": "followers replicating from their leader",
    "write_txn_markers": "transaction coordinators (brokers) to leaders",
    "verify_txn": "leaders asking a transaction coordinator (KIP-890)",
    "referenced_files": "walmgr: does this replica reference these objects",
    "keys_referenced": "walmgr: does this broker reference these keys at all",
    "fetch": "brokers for their Kafka clients; partlog.client consumers",
    "list_offsets": "brokers to leaders for their Kafka clients; partlog.client",
    "delete_records": "brokers to leaders for their Kafka clients",
    "offset_for_leader_epoch": "brokers to leaders for their Kafka clients",
    "produce": "partlog.client producers and the CLI",
    "metadata": "partlog.client and the CLI",
    "init_producer_id": "partlog.client producers",
    "add_partitions_to_txn": "partlog.client transactional producers",
    "end_txn": "partlog.client transactional producers",
}


class RpcClusterAuthz:
    """The broker RPC's authorize hook: CLUSTER_ACTION on the CLUSTER."""

    def __init__(
        self,
        config: AuthorizerConfig,
        source: AclSource,
        refusals: Counter,
        clock: Clock,
        methods: Mapping[str, str] = METHOD_CALLERS,
    ) -> None:
        """``methods``: the server's methods and their callers (walmgr's
        notification server passes its own)."""
        self.source = source
        self.methods = methods
        self.authorizer = Authorizer(config)
        self.refusals = refusals
        self.clock = clock
        self._logged_at: float | None = None
        self._unlogged = 0

    def __call__(self, peer: RpcPeer, method: str) -> bool:
        a = self.authorizer
        acls = self.source.acls
        if acls is not a.acls:
            a.update(acls)
        if method in self.methods and a.authorize(
            peer.principal, peer.host, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME
        ):
            return True
        self.refusals.labels(method).inc()
        self._log(peer, method)
        return False

    def _log(self, peer: RpcPeer, method: str) -> None:
        now = self.clock.monotonic()
        if self._logged_at is not None and (now - self._logged_at) * 1000 < REFUSAL_LOG_INTERVAL_MS:
            self._unlogged += 1
            return
        log.warning(
            "rpc: %s from %s refused %s: no CLUSTER_ACTION on the cluster (%d more refusals not logged)",
            peer.principal,
            peer.host,
            method,
            self._unlogged,
        )
        self._logged_at = now
        self._unlogged = 0


__all__ = ["METHOD_CALLERS", "REFUSAL_LOG_INTERVAL_MS", "RpcClusterAuthz"]
