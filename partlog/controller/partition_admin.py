"""CreatePartitions between the Kafka front end and the controllers: the
request record, the capability a metadata source has when it can grow
topics (:class:`PartitionAdmin`), and the controller RPC's bodies::

    create_partitions  {"topics": [[name, count, [[broker ids]] or nil]], "validate_only"}
                    -> {"version", "topics": [[name, error, message or nil, topic or nil]]}

(its request schema is ``partlog.rpc.methods``'s, beside the other methods').

Both controllers decide with :func:`partlog.controller.rules.added_partitions`
(the embedded one in :meth:`Controller.create_partitions
<partlog.controller.core.Controller.create_partitions>`, etcd's in
:meth:`EtcdAdmin.create_partitions
<partlog.controller.etcd_admin.EtcdAdmin.create_partitions>`); a refusal
travels with Kafka's message.  Bounds: a request names at most
TOPICS_PER_REQUEST_MAX topics and ASSIGNMENT_ITEMS_PER_REQUEST_MAX
assignments and broker ids in them (the Kafka front end refuses the topics
past that, one by one, before it asks)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from partlog.controller.cluster_meta import TopicInfo
from partlog.controller.rules import Refused
from partlog.controller.wire import dec_topic, enc_topic
from partlog.kafka.errors import Errors
from partlog.limits import TOPICS_PER_REQUEST_MAX
from partlog.rpc.wire import WireError, expect_int, expect_list, expect_map, expect_str, field

__all__ = [
    "ASSIGNMENT_ITEMS_PER_REQUEST_MAX",
    "NewPartitions",
    "PartitionAdmin",
    "assignment_items",
    "dec_create_partitions",
    "dec_create_partitions_response",
    "enc_create_partitions",
    "enc_create_partitions_response",
]

# Assignments and the broker ids in them, all of one request's together
# (each counts one): well inside the RPC body's element limit
# (partlog.rpc.schema's BODY_ELEMENTS_MAX, 1,000,000).
ASSIGNMENT_ITEMS_PER_REQUEST_MAX = 250_000
# What a message may carry back (Kafka's are one sentence).
_MESSAGE_CHARS_MAX = 1_000


@dataclass(frozen=True, slots=True)
class NewPartitions:
    """Grow a topic to ``count`` partitions; ``assignments``: the replicas
    of each added partition (leader first), None to place them as a new
    topic's."""

    count: int
    assignments: tuple[tuple[int, ...], ...] | None = None


@runtime_checkable
class PartitionAdmin(Protocol):
    """A metadata source whose controller adds partitions to topics (the
    embedded controller's client, etcd); a static cluster file does not."""

    async def create_partitions(
        self, topics: Mapping[str, NewPartitions], validate_only: bool
    ) -> dict[str, TopicInfo | Refused]:
        """Per topic: the topic as grown (as it would be, with
        ``validate_only``), or the refusal.  Returns once this view holds
        the grown topics (or after the source's request timeout)."""
        ...


def assignment_items(assignments: Iterable[Sequence[int]]) -> int:
    """What ``assignments`` count against ASSIGNMENT_ITEMS_PER_REQUEST_MAX."""
    return sum(1 + len(a) for a in assignments)


def enc_create_partitions(topics: Mapping[str, NewPartitions], validate_only: bool) -> dict[str, Any]:
    return {
        "topics": [
            [name, n.count, None if n.assignments is None else [list(a) for a in n.assignments]]
            for name, n in topics.items()
        ],
        "validate_only": validate_only,
    }


def dec_create_partitions(body: Any) -> tuple[dict[str, NewPartitions], bool]:
    w = "create_partitions"
    m = expect_map(body, w)
    items = expect_list(field(m, "topics", w), f"{w}.topics")
    if len(items) > TOPICS_PER_REQUEST_MAX:
        raise WireError(f"{w}.topics: at most {TOPICS_PER_REQUEST_MAX} topics, got {len(items)}")
    validate_only = field(m, "validate_only", w)
    if type(validate_only) is not bool:
        raise WireError(f"{w}.validate_only: a bool, got {validate_only!r:.40}")
    out: dict[str, NewPartitions] = {}
    items_in_all = 0
    for i, it in enumerate(items):
        what = f"{w}.topics[{i}]"
        name, count, raw = expect_list(it, what, 3)
        assignments = None
        if raw is not None:
            assignments = tuple(
                tuple(expect_int(b, f"{what}.assignments[]") for b in expect_list(a, f"{what}.assignments"))
                for a in expect_list(raw, f"{what}.assignments")
            )
            items_in_all += assignment_items(assignments)
        name = expect_str(name, f"{what}.name")
        if name in out:
            raise WireError(f"{what}: topic {name!r:.300} named twice")
        out[name] = NewPartitions(expect_int(count, f"{what}.count"), assignments)
    if items_in_all > ASSIGNMENT_ITEMS_PER_REQUEST_MAX:
        raise WireError(f"{w}: {items_in_all} assignment items, at most {ASSIGNMENT_ITEMS_PER_REQUEST_MAX}")
    return out, validate_only


def enc_create_partitions_response(version: int, answers: Iterable[tuple[str, TopicInfo | Refused]]) -> dict[str, Any]:
    return {
        "version": version,
        "topics": [
            [name, int(a.error), a.message[:_MESSAGE_CHARS_MAX], None]
            if isinstance(a, Refused)
            else [name, 0, None, enc_topic(a)]
            for name, a in answers
        ],
    }


def dec_create_partitions_response(body: Any) -> dict[str, TopicInfo | Refused]:
    w = "create_partitions response"
    out: dict[str, TopicInfo | Refused] = {}
    for i, item in enumerate(expect_list(field(expect_map(body, w), "topics", w), f"{w}.topics")):
        what = f"{w}.topics[{i}]"
        name, code, message, topic = expect_list(item, what, 4)
        name = expect_str(name, f"{what}.name")
        code = expect_int(code, f"{what}.error")
        if code == 0:
            out[name] = dec_topic(topic, f"{what}.topic")
            continue
        try:
            err = Errors(code)
        except ValueError:
            err = Errors.UNKNOWN_SERVER_ERROR
        text = "" if message is None else expect_str(message, f"{what}.message")[:_MESSAGE_CHARS_MAX]
        out[name] = Refused(err, text)
    return out
