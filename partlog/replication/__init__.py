"""Replication: a leader's view of its replicas (sans-IO) and the asyncio replica manager."""

# The names below are imported on first use (partlog.lazy_exports).

from __future__ import annotations

from typing import TYPE_CHECKING

from partlog.lazy_exports import lazy_getattr

if TYPE_CHECKING:
    from partlog.replication.config import ReplicationConfig
    from partlog.replication.manager import ReplicaManager
    from partlog.replication.replica_state import ReplicaState

_EXPORTS = {
    "ReplicaManager": "partlog.replication.manager",
    "ReplicaState": "partlog.replication.replica_state",
    "ReplicationConfig": "partlog.replication.config",
}

__all__ = [
    "ReplicaManager",
    "ReplicaState",
    "ReplicationConfig",
]

__getattr__ = lazy_getattr(__name__, _EXPORTS, globals())
