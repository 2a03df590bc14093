"""Metadata (API key 3) on the Kafka listener: the brokers of the client's
listener and the topics it asks for, by name or (v12+) by topic id, as
Kafka's ``KafkaApis.handleTopicMetadataRequest`` answers them.

What a client without rights learns (Kafka's rule, docs/security.md):

* by name: a topic it may not DESCRIBE is TOPIC_AUTHORIZATION_FAILED
  whether or not it exists; all topics: those it may not describe are left
  out;
* by id: an unknown id is UNKNOWN_TOPIC_ID (ids are not secret, and cannot
  be guessed); a known one it may not describe is TOPIC_AUTHORIZATION_FAILED
  with a null name, so the id does not turn into the name;
* a missing topic that would be auto-created needs CREATE (on the cluster
  or the topic), else TOPIC_AUTHORIZATION_FAILED; an invalid name is
  INVALID_TOPIC_EXCEPTION (after the DESCRIBE check), never created.

A request naming tens of thousands of topics hands the event loop back
every ``METADATA_ITEMS_PER_SLICE`` topics and partitions.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from partlog.acl import CLUSTER_NAME, AclOperation, ResourceType
from partlog.controller.rules import valid_topic_name
from partlog.kafka.errors import Errors
from partlog.kafka_front.admin_apis import AdminApis
from partlog.kafka_front.authz import OPERATIONS_NOT_ASKED
from partlog.kafka_front.group_coordinator import INTERNAL_TOPICS, OFFSETS_TOPIC, GroupCoordinator
from partlog.kafka_front.handler import ApiHandlers, Session, client_az
from partlog.kafka_front.port import BrokerPort
from partlog.kafka_front.txn_coordinator import TXN_STATE_TOPIC, TxnCoordinator

__all__ = ["METADATA_ITEMS_PER_SLICE", "MetadataApi"]

# Topics and partitions a Metadata answer builds before it hands the event
# loop back (about 20 us each: some 20 ms a slice).
METADATA_ITEMS_PER_SLICE = 1_000
_NO_ID = uuid.UUID(int=0)


@dataclass(frozen=True, slots=True)
class _Asked:
    """One topic of the request: its name ("" for none) and, asked by id, the id."""

    name: str
    topic_id: uuid.UUID | None = None


class MetadataApi(ApiHandlers):
    """``auto_create``: Kafka's auto.create.topics.enable; ``num_partitions``
    what an auto-created topic gets; the coordinators make their own
    internal topics, ``admin`` the others."""

    def __init__(
        self,
        broker: BrokerPort,
        *,
        auto_create: bool,
        num_partitions: int,
        groups: GroupCoordinator,
        txns: TxnCoordinator,
        admin: AdminApis,
    ) -> None:
        super().__init__(broker)
        self.auto_create = auto_create
        self.num_partitions = num_partitions
        self.groups = groups
        self.txns = txns
        self.admin = admin

    async def metadata(self, req: Any, body: Any, session: Session) -> Mapping[str, Any]:
        meta = self.broker.metadata
        az = client_az(req.client_id) or session.az
        # Each broker's address on the listener this client came in on (Kafka's
        # advertised listeners): a broker without that listener is not listed.
        addresses = {b.broker_id: b.kafka_address_of(session.listener) for b in meta.brokers()}
        listening = {b.broker_id: b for b in meta.brokers() if addresses[b.broker_id][1]}
        brokers = [
            {"node_id": i, "host": addresses[i][0], "port": addresses[i][1], "rack": b.az} for i, b in listening.items()
        ]
        topics = self._topics_by_name()
        asked: list[_Asked] | None
        if body.topics is None or (req.api_version == 0 and not body.topics):
            asked = None
        else:
            by_id = {t.topic_id: t.name for t in topics.values()}
            asked = []
            for t in body.topics:
                name = getattr(t, "name", None)
                tid = getattr(t, "topic_id", None)
                if name is None and tid is not None and tid != _NO_ID:
                    asked.append(_Asked(by_id.get(tid, ""), tid))
                else:
                    asked.append(_Asked(name or ""))
        names = None if asked is None else [a.name for a in asked if a.topic_id is None or a.name]
        auto_create = bool(getattr(body, "allow_auto_topic_creation", True)) and self.auto_create
        refused = self.authz.metadata_refusals(session, names, topics, auto_create)
        if names is not None and auto_create:
            missing = [n for n in dict.fromkeys(names) if n not in topics and n not in refused and valid_topic_name(n)]
            if OFFSETS_TOPIC in missing:
                # As Kafka: the offsets topic is made with its own shape.
                missing.remove(OFFSETS_TOPIC)
                await self.groups.ensure_offsets_topic()
            if TXN_STATE_TOPIC in missing:
                missing.remove(TXN_STATE_TOPIC)
                await self.txns.ensure_topic()
            if missing:
                await self.admin.create({n: (self.num_partitions, -1) for n in missing})
            topics = self._topics_by_name()
        if asked is None:
            # All topics: those the principal may describe.
            asked = [_Asked(n) for n in sorted(topics) if self.authz.topic(session, AclOperation.DESCRIBE, n)]
        with_ops = bool(getattr(body, "include_topic_authorized_operations", False))
        out = []
        done = 0  # topics and partitions answered since the loop was last handed back
        for a in asked:
            if done >= METADATA_ITEMS_PER_SLICE:
                # A request naming tens of thousands of topics must not hold
                # the event loop (other connections, the broker's heartbeat)
                # for its whole answer; ``topics`` is the snapshot taken above.
                done = 0
                await asyncio.sleep(0)
            name = a.name
            t = topics.get(name) if name not in refused else None
            done += 1 + (len(t.partitions) if t is not None else 0)
            if t is None:
                out.append(_missing(a, refused))
                continue
            entry = self._described(name, t, listening, az)
            if with_ops:
                # As Kafka: for the topics described; an error's entry keeps
                # "not asked".  Inside the sliced loop: 8 decisions a topic.
                entry["topic_authorized_operations"] = self.authz.authorized_operations(
                    session, ResourceType.TOPIC, name
                )
            out.append(entry)
        cluster_ops = OPERATIONS_NOT_ASKED
        if 8 <= req.api_version <= 10 and getattr(body, "include_cluster_authorized_operations", False):
            cluster_ops = self.authz.authorized_operations(session, ResourceType.CLUSTER, CLUSTER_NAME)
        cluster_id = meta.cluster_id
        return {
            "cluster_authorized_operations": cluster_ops,
            "throttle_time": 0,
            "brokers": brokers,
            "cluster_id": str(cluster_id) if cluster_id is not None else None,
            # No KRaft controller is visible to clients; Kafka clients only
            # need an id here (admin requests go to any broker).
            "controller_id": self.broker.broker_id,
            "topics": out,
        }

    def _described(self, name: str, t: Any, listening: Mapping[int, Any], az: str | None) -> dict[str, Any]:
        meta = self.broker.metadata
        parts = []
        for p, info in enumerate(t.partitions):
            leader = info.leader
            error = Errors.NONE
            if leader < 0 or leader not in listening:
                error, shown = Errors.LEADER_NOT_AVAILABLE, -1
            elif az is not None:
                shown = meta.representative(leader, az)
                if shown not in listening:
                    shown = leader
            else:
                shown = leader
            parts.append(
                {
                    "error_code": int(error),
                    "partition_index": p,
                    "leader_id": shown,
                    "leader_epoch": info.leader_epoch,
                    "replica_nodes": list(info.replicas),
                    "isr_nodes": list(info.isr),
                    "offline_replicas": [r for r in info.replicas if r not in listening],
                }
            )
        return {
            "error_code": 0,
            "name": name,
            "topic_id": t.topic_id,
            "is_internal": name in INTERNAL_TOPICS,
            "partitions": parts,
        }


def _missing(a: _Asked, refused: set[str]) -> dict[str, Any]:
    """The answer for a topic not described: refused, unknown or invalid."""
    row: dict[str, Any] = {"name": a.name, "topic_id": _NO_ID, "is_internal": False, "partitions": []}
    if a.topic_id is not None:
        # By id: never the name of a topic the principal may not describe.
        error = Errors.TOPIC_AUTHORIZATION_FAILED if a.name and a.name in refused else Errors.UNKNOWN_TOPIC_ID
        return {**row, "error_code": int(error), "name": None, "topic_id": a.topic_id}
    if a.name in refused:
        error = Errors.TOPIC_AUTHORIZATION_FAILED
    elif not valid_topic_name(a.name):
        error = Errors.INVALID_TOPIC_EXCEPTION
    else:
        error = Errors.UNKNOWN_TOPIC_OR_PARTITION
    return {**row, "error_code": int(error)}
