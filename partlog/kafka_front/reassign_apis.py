"""Kafka's AlterPartitionReassignments (api key 45) and
ListPartitionReassignments (46) on the Kafka port: move replicas between
brokers through the controller (a metadata source that is a
:class:`~partlog.controller.reassignment.ReassignmentAdmin`).  The flow,
its states and its safety argument are in docs/design/reassignment.md.

Checked here, in Kafka's order (ControllerApis, then
ReplicationControlManager per partition):

* ALTER on the cluster for AlterPartitionReassignments, DESCRIBE for
  ListPartitionReassignments; without it the whole answer is
  CLUSTER_AUTHORIZATION_FAILED, every partition too (Kafka's
  ``getErrorResponse``).
* Per partition, before the controller is asked, what would only cost the
  whole request there: a partition named twice in one request is
  INVALID_REQUEST for every copy (partlog's deliberate difference: Kafka
  applies the copies in order; which one wins is not a question worth
  answering); a target beyond the request's bounds is
  INVALID_REPLICA_ASSIGNMENT; a name no topic can have is
  UNKNOWN_TOPIC_OR_PARTITION; with v1's ``allow_replication_factor_change``
  false (KIP-860), a target of another size than the partition's replicas
  (without those being added) is INVALID_REPLICA_ASSIGNMENT.
* The controller decides the rest (an unknown topic or partition, an
  invalid target, NO_REASSIGNMENT_IN_PROGRESS for a cancel) with Kafka's
  codes and messages.

``timeout_ms`` > 0 bounds the wait for the controller: past it, the
partitions still pending are REQUEST_TIMED_OUT (they may still change, as
with Kafka); <= 0 waits only as long as the controller client's own
request timeout.  A metadata source without a controller (a static cluster
file) refuses every change with INVALID_REQUEST and lists nothing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from partlog.acl import AclOperation
from partlog.controller.reassignment import REASSIGNMENT_ITEMS_PER_REQUEST_MAX, Reassignment, ReassignmentAdmin
from partlog.controller.rules import Refused, valid_topic_name
from partlog.kafka.errors import Errors
from partlog.kafka_front.handler import ApiHandlers, Session, duration_ms, kafka_error, within_timeout
from partlog.limits import BROKERS_MAX, PARTITIONS_PER_CLUSTER_MAX

__all__ = ["ALTER_PARTITION_REASSIGNMENTS_KEY", "LIST_PARTITION_REASSIGNMENTS_KEY", "ReassignApis"]


ALTER_PARTITION_REASSIGNMENTS_KEY = 45
LIST_PARTITION_REASSIGNMENTS_KEY = 46
# Kafka's message for a request the principal may not make (AuthHelper).
_NOT_AUTHORIZED = "Request is not authorized."
_UNKNOWN_TOPIC = "This server does not host this topic-partition."
_TOO_BIG = (f"at most {BROKERS_MAX} replicas per partition, {PARTITIONS_PER_CLUSTER_MAX} partitions, and "
            f"{REASSIGNMENT_ITEMS_PER_REQUEST_MAX} partitions and broker ids together in one request")  # fmt: skip

Key = tuple[str, int]


class ReassignApis(ApiHandlers):
    """AlterPartitionReassignments and ListPartitionReassignments over the
    broker's metadata source."""

    def _admin(self) -> ReassignmentAdmin | None:
        m = self.broker.metadata
        return m if isinstance(m, ReassignmentAdmin) else None

    async def alter_partition_reassignments(self, req: Any, body: Any, session: Session) -> Mapping[str, Any]:
        allow_rf_change = bool(getattr(body, "allow_replication_factor_change", True))
        v1 = {"allow_replication_factor_change": allow_rf_change} if req.api_version >= 1 else {}
        if not self.authz.cluster(session, AclOperation.ALTER):
            return _alter_answer(body, {}, Refused(Errors.CLUSTER_AUTHORIZATION_FAILED, _NOT_AUTHORIZED), v1)
        named = Counter((t.name, int(p.partition_index)) for t in body.topics for p in t.partitions)
        refused: dict[Key, Refused] = {}
        wanted: dict[Key, tuple[int, ...] | None] = {}
        items = 0  # broker ids in the targets taken so far, plus one per partition
        admin = self._admin()
        for t in body.topics:
            for p in t.partitions:
                key = (t.name, int(p.partition_index))
                target = None if p.replicas is None else tuple(int(b) for b in p.replicas)
                if named[key] > 1:
                    refused[key] = Refused(Errors.INVALID_REQUEST, "Duplicate partition in one request.")
                elif len(wanted) >= PARTITIONS_PER_CLUSTER_MAX or (target is not None and (
                    len(target) > BROKERS_MAX or items + 1 + len(target) > REASSIGNMENT_ITEMS_PER_REQUEST_MAX
                )):
                    refused[key] = Refused(Errors.INVALID_REPLICA_ASSIGNMENT, _TOO_BIG)
                elif not valid_topic_name(t.name):
                    refused[key] = Refused(Errors.UNKNOWN_TOPIC_OR_PARTITION, _UNKNOWN_TOPIC)
                elif target is not None and not allow_rf_change and (rf_why := self._rf_changed(key, target)):
                    refused[key] = Refused(Errors.INVALID_REPLICA_ASSIGNMENT, rf_why)
                elif admin is None:
                    refused[key] = Refused(Errors.INVALID_REQUEST, "this cluster's topics come from its static file")
                else:
                    items += 1 + (0 if target is None else len(target))
                    wanted[key] = target
        answers: dict[Key, Refused | None] = {}
        if wanted and admin is not None:
            answers = await within_timeout(
                admin.alter_reassignments(wanted), duration_ms(body.timeout), wanted, "alter reassignments"
            )
        for key in wanted:
            if key not in answers:  # a controller that left one out: never say it was done
                answers[key] = Refused(Errors.UNKNOWN_SERVER_ERROR, "the controller did not answer for it")
        return _alter_answer(body, {**answers, **refused}, None, v1)

    def _rf_changed(self, key: Key, target: tuple[int, ...]) -> str | None:
        """KIP-860's refusal when ``target`` changes the partition's
        replication factor, judged from this broker's view (the replicas
        without those a reassignment is adding); None when it does not, or
        when the view has no such partition (the controller answers that)."""
        tp = self._tp(key[0], key[1])
        p = None if tp is None else self.broker.metadata.partition(tp)
        if p is None:
            return None
        adding = set(p.adding)
        current = len([r for r in p.replicas if r not in adding])
        if len(target) == current:
            return None
        return (f"The replication factor is changed from {current} to {len(target)} "
                "but allowReplicationFactorChange is false.")  # fmt: skip

    async def list_partition_reassignments(self, req: Any, body: Any, session: Session) -> Mapping[str, Any]:
        if not self.authz.cluster(session, AclOperation.DESCRIBE):
            topics = [
                {"name": t.name, "partitions": [{"partition_index": int(i)} for i in t.partition_indexes]}
                for t in body.topics or ()
            ]
            return {
                "throttle_time": 0,
                "error_code": int(Errors.CLUSTER_AUTHORIZATION_FAILED),
                "error_message": _NOT_AUTHORIZED,
                "topics": topics,
            }
        admin = self._admin()
        found: list[Reassignment] = []
        if admin is not None:
            asked = None
            if body.topics is not None:
                asked = list(dict.fromkeys((t.name, int(i)) for t in body.topics for i in t.partition_indexes))
            found = await admin.list_reassignments(asked)
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for r in found:
            by_topic.setdefault(r.topic, []).append(
                {
                    "partition_index": r.partition,
                    "replicas": list(r.replicas),
                    "adding_replicas": list(r.adding),
                    "removing_replicas": list(r.removing),
                }
            )
        return {
            "throttle_time": 0,
            "error_code": 0,
            "error_message": None,
            "topics": [{"name": n, "partitions": ps} for n, ps in by_topic.items()],
        }


def _alter_answer(
    body: Any, answers: Mapping[Key, Refused | None], everyone: Refused | None, v1: Mapping[str, Any]
) -> Mapping[str, Any]:
    """The response in the request's order; ``everyone``: one refusal for
    every partition and the whole answer."""
    responses = []
    for t in body.topics:
        parts = []
        for p in t.partitions:
            r = everyone or answers.get((t.name, int(p.partition_index)))
            parts.append(
                {
                    "partition_index": int(p.partition_index),
                    "error_code": 0 if r is None else kafka_error(r.error),
                    "error_message": None if r is None else (r.message or None),
                }
            )
        responses.append({"name": t.name, "partitions": parts})
    return {
        "throttle_time": 0,
        **v1,
        "error_code": 0 if everyone is None else kafka_error(everyone.error),
        "error_message": None if everyone is None else everyone.message,
        "responses": responses,
    }
