"""Kafka's CreatePartitions (api key 37) on the Kafka port: add partitions
to existing topics through the controller (a metadata source that is a
:class:`~partlog.controller.partition_admin.PartitionAdmin`).

Checked here, in Kafka's order (ControllerApis.createPartitions): a topic
named twice is INVALID_REQUEST ("Duplicate topic name."), then ALTER on the
topic (TOPIC_AUTHORIZATION_FAILED).  Then, before the controller is asked,
what would only cost the whole request there: a name no topic can have is
UNKNOWN_TOPIC_OR_PARTITION (as Kafka answers it), an internal topic is
INVALID_REQUEST (partlog's group and transaction coordinators place ids by
the partition count: growing their topics would move every group), and
assignments beyond the request's bounds are INVALID_REPLICA_ASSIGNMENT for
that topic alone.  The controller decides the rest per topic
(:func:`partlog.controller.rules.added_partitions`) and its refusals carry
Kafka's messages.

``validate_only`` decides and changes nothing.  ``timeout_ms`` > 0 bounds
the wait for the controller and for this broker's view to hold the new
partitions: past it, the topics still pending are REQUEST_TIMED_OUT (the
partitions may still be added, as with Kafka); <= 0 waits only as long as
the controller client's own request timeout.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from partlog.acl import AclOperation
from partlog.controller.partition_admin import (
    ASSIGNMENT_ITEMS_PER_REQUEST_MAX,
    NewPartitions,
    PartitionAdmin,
    assignment_items,
)
from partlog.controller.rules import Refused, valid_topic_name
from partlog.kafka.errors import Errors
from partlog.kafka_front.group_coordinator import INTERNAL_TOPICS
from partlog.kafka_front.handler import ApiHandlers, Session, duration_ms, kafka_error, within_timeout
from partlog.limits import BROKERS_MAX, PARTITIONS_PER_TOPIC_MAX

__all__ = ["CREATE_PARTITIONS_KEY", "PartitionApis"]


CREATE_PARTITIONS_KEY = 37
# Kafka's message for UNKNOWN_TOPIC_OR_PARTITION, as the controllers answer it.
_UNKNOWN_TOPIC = "This server does not host this topic-partition."


class PartitionApis(ApiHandlers):
    """CreatePartitions over the broker's metadata source."""

    async def create_partitions(self, req: Any, body: Any, session: Session) -> Mapping[str, Any]:
        named = Counter(t.name for t in body.topics)
        refused: dict[str, Refused] = {}
        wanted: dict[str, NewPartitions] = {}
        admin = self.broker.metadata if isinstance(self.broker.metadata, PartitionAdmin) else None
        assigned = 0  # broker ids in the assignments taken so far
        for t in body.topics:
            name = t.name
            if named[name] > 1:
                refused[name] = Refused(Errors.INVALID_REQUEST, "Duplicate topic name.")
            elif not self.authz.topic(session, AclOperation.ALTER, name):
                refused[name] = Refused(Errors.TOPIC_AUTHORIZATION_FAILED, "ALTER on the topic is needed")
            elif not valid_topic_name(name):
                refused[name] = Refused(Errors.UNKNOWN_TOPIC_OR_PARTITION, _UNKNOWN_TOPIC)
            elif name in INTERNAL_TOPICS:
                refused[name] = Refused(Errors.INVALID_REQUEST, f"{name} is internal: its partition count is fixed")
            elif t.assignments is not None and (
                len(t.assignments) > PARTITIONS_PER_TOPIC_MAX
                or any(len(a.broker_ids) > BROKERS_MAX for a in t.assignments)
                or assigned + assignment_items(a.broker_ids for a in t.assignments) > ASSIGNMENT_ITEMS_PER_REQUEST_MAX
            ):
                why = (f"at most {PARTITIONS_PER_TOPIC_MAX} assignments of {BROKERS_MAX} brokers, and "
                       f"{ASSIGNMENT_ITEMS_PER_REQUEST_MAX} assignments and broker ids in one request")  # fmt: skip
                refused[name] = Refused(Errors.INVALID_REPLICA_ASSIGNMENT, why)
            elif admin is None:
                refused[name] = Refused(Errors.INVALID_REQUEST, "this cluster's topics come from its static file")
            else:
                assignments = None
                if t.assignments is not None:
                    assignments = tuple(tuple(int(b) for b in a.broker_ids) for a in t.assignments)
                    assigned += assignment_items(assignments)
                wanted[name] = NewPartitions(int(t.count), assignments)
        answers: dict[str, Any] = {}
        if wanted and admin is not None:
            answers = await within_timeout(
                admin.create_partitions(wanted, bool(body.validate_only)),
                duration_ms(body.timeout),
                wanted,
                "create partitions",
            )
        results = []
        for name in dict.fromkeys(t.name for t in body.topics):
            a = refused.get(name) or answers.get(name)
            if isinstance(a, Refused):
                results.append({"name": name, "error_code": kafka_error(a.error), "error_message": a.message or None})
            else:
                results.append({"name": name, "error_code": 0, "error_message": None})
        return {"throttle_time": 0, "results": results}
