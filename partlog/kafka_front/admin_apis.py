"""The admin APIs of the Kafka front end: CreateTopics (with topic configs,
validated here and kept by the controller) and DeleteTopics (through the
controller, for a metadata source that has one) and DeleteRecords (answered
by each partition's leader).  The config APIs are
:mod:`partlog.kafka_front.config_apis`'s."""

from __future__ import annotations

import asyncio
import inspect
import logging
import uuid
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from partlog.acl import AclOperation
from partlog.controller.cluster_meta import TopicAdmin
from partlog.controller.partition_admin import ASSIGNMENT_ITEMS_PER_REQUEST_MAX
from partlog.controller.rules import Refused, valid_topic_name
from partlog.controller.topic_create import Assignment, assignment_bounds, shape_refusal
from partlog.kafka.errors import Errors, peer_error
from partlog.kafka.records import TopicIdPartition
from partlog.kafka.topic_config import TopicConfig, TopicConfigError, validate_overrides
from partlog.kafka_front.config_apis import ConfigApis
from partlog.kafka_front.group_coordinator import INTERNAL_TOPICS
from partlog.kafka_front.handler import ApiHandlers, Session, duration_ms, kafka_error
from partlog.kafka_front.port import BrokerPort
from partlog.limits import TOPICS_PER_REQUEST_MAX

_NO_ID = uuid.UUID(int=0)
log = logging.getLogger(__name__)

# The longest a CreateTopics waits for the controller, whatever timeout_ms
# it asks (Kafka has no cap; a connection's request must not pin a handler
# for ever).  1,000 topics take well under a second (docs/design/create-topics.md).
CREATE_TOPICS_TIMEOUT_MS_MAX = 300_000


class AdminApis(ApiHandlers):
    """``num_partitions`` and ``default_replication_factor``: what a topic
    created without them gets (Kafka's num.partitions and
    default.replication.factor)."""

    def __init__(self, broker: BrokerPort, *, num_partitions: int, default_replication_factor: int) -> None:
        super().__init__(broker)
        self.num_partitions = num_partitions
        self.default_replication_factor = default_replication_factor

    async def create(
        self,
        topics: Mapping[str, tuple[int, int]],
        configs: Mapping[str, Mapping[str, str]] | None = None,
        assignments: Mapping[str, Sequence[Assignment]] | None = None,
        timeout_ms: int | None = None,
    ) -> dict[str, Any]:
        """Create ``{name: (partitions, replication_factor)}`` through the
        controller, with the config overrides ``configs`` names (validated
        before) and the manual ``assignments`` of those that have them;
        -1 means the default (with assignments: what they say).  Per topic:
        the TopicInfo or the error (an Errors or a Refused).

        At most TOPICS_PER_REQUEST_MAX topics (and ASSIGNMENT_ITEMS_PER_REQUEST_MAX
        assignment items) go in one controller call; the calls of one
        request share its ``timeout_ms`` (capped at CREATE_TOPICS_TIMEOUT_MS_MAX):
        past it the topics not answered are REQUEST_TIMED_OUT (Kafka's
        controller answers so when a request's deadline passes; they may
        still be created).  None (Metadata's auto-creation, which has no
        timeout): each call is bounded by the source's own timeout, as before."""
        metadata = self.broker.metadata
        if not isinstance(metadata, TopicAdmin):
            return dict.fromkeys(topics, Errors.INVALID_REQUEST)
        live = len(self.broker.metadata.brokers())
        shaped = {
            n: (p, rf)
            if assignments and n in assignments
            else (
                self.num_partitions if p == -1 else p,
                min(self.default_replication_factor, max(1, live)) if rf == -1 else rf,
            )
            for n, (p, rf) in topics.items()
        }
        bound = CREATE_TOPICS_TIMEOUT_MS_MAX if timeout_ms is None else min(timeout_ms, CREATE_TOPICS_TIMEOUT_MS_MAX)
        timed = timeout_ms is not None and _takes_timeout(metadata)
        answer: dict[str, Any] = {}
        loop = asyncio.get_running_loop()
        deadline = loop.time() + bound / 1000
        try:
            async with asyncio.timeout_at(deadline):
                for chunk in _chunks(shaped, assignments or {}):
                    # Without configs (or assignments, or a timeout) as before them: a source of
                    # an embedder's may not take them.
                    kwargs: dict[str, Any] = {}
                    if timed:  # the controller call's own bound: what is left of the request's
                        kwargs["timeout_ms"] = max(1, int((deadline - loop.time()) * 1000))
                    asked = {n: assignments[n] for n in chunk if assignments and n in assignments}
                    if asked:
                        kwargs["assignments"] = asked
                    given = {n: configs[n] for n in chunk if configs and n in configs}
                    answer.update(
                        await metadata.create_topics(chunk, given, **kwargs)
                        if given or kwargs
                        else await metadata.create_topics(chunk)
                    )
        except TimeoutError:
            log.info("create_topics: %d of %d not answered within %d ms", len(shaped) - len(answer), len(shaped),
                     bound)  # fmt: skip
            late = Refused(Errors.REQUEST_TIMED_OUT, f"not done within {bound} ms: the topic may still be created")
            answer.update((n, late) for n in shaped if n not in answer)
        return answer

    async def create_topics(self, req: Any, body: Any, session: Session) -> Mapping[str, Any]:
        results = []
        wanted: dict[str, tuple[int, int]] = {}
        overrides: dict[str, dict[str, str]] = {}
        assigned: dict[str, tuple[Assignment, ...]] = {}
        refused: dict[str, tuple[Errors, str]] = {}
        named = Counter(t.name for t in body.topics)
        existing = self._topics_by_name()
        for t in body.topics:
            asked = tuple((int(a.partition_index), tuple(int(b) for b in a.broker_ids)) for a in t.assignments)
            if named[t.name] > 1:
                # As Kafka: a name given twice is refused, and not created.
                refused[t.name] = (Errors.INVALID_REQUEST, "topic named twice in one request")
            elif not self.authz.create_topic(session, t.name):
                refused[t.name] = (Errors.TOPIC_AUTHORIZATION_FAILED, "CREATE on the cluster or topic is needed")
            elif not valid_topic_name(t.name):
                # As Kafka's controller (validateNewTopicNames, then existence).
                refused[t.name] = (Errors.INVALID_TOPIC_EXCEPTION, "a name is 1-249 of [a-zA-Z0-9._-], not . or ..")
            elif t.name in existing:
                refused[t.name] = (Errors.TOPIC_ALREADY_EXISTS, f"Topic '{t.name}' already exists.")
            elif t.name in INTERNAL_TOPICS:
                refused[t.name] = (Errors.INVALID_REQUEST, f"{t.name} is internal: the group coordinator makes it")
            elif (bad := _bad_configs(t.configs)) is not None:
                refused[t.name] = (Errors.INVALID_CONFIG, bad)
            elif asked and (bad_assignment := _bad_assignments(t, asked)) is not None:
                # As Kafka's createTopic: the configs first, then the assignments.
                refused[t.name] = (bad_assignment.error, bad_assignment.message)
            else:
                wanted[t.name] = (t.num_partitions, t.replication_factor)
                if t.configs:  # as Kafka's map: a key named twice, the last value
                    overrides[t.name] = {c.name: c.value for c in t.configs}
                if asked:
                    assigned[t.name] = asked
        if not isinstance(self.broker.metadata, TopicAdmin):
            for n in wanted:
                refused[n] = (Errors.INVALID_REQUEST, "this cluster's topics come from its static cluster file")
            wanted = {}
        answers: dict[str, Any] = {}
        timeout_ms = duration_ms(body.timeout)
        validate_only = getattr(body, "validate_only", False)
        if wanted and not validate_only and timeout_ms <= 0:
            # Kafka's controller takes the request's deadline as now + timeout_ms:
            # one already passed times the write out before it runs.
            late = f"timeout_ms {timeout_ms}: the deadline passed before the controller ran the request"
            refused.update(dict.fromkeys(wanted, (Errors.REQUEST_TIMED_OUT, late)))
        elif wanted and not validate_only:
            answers = await self.create(wanted, overrides, assigned, timeout_ms)
        for t in body.topics:
            if t.name in refused:
                err, msg = refused[t.name]
                results.append(_created(t.name, err, msg))
                continue
            a = answers.get(t.name)
            if a is None:  # validate_only
                results.append(_created(t.name, Errors.NONE, None, partitions=t.num_partitions))
            elif isinstance(a, Refused):
                results.append(_created(t.name, a.error, a.message))
            elif isinstance(a, Errors):
                results.append(_created(t.name, a, f"{a.name.lower()}"))
            else:
                rf = len(a.partitions[0].replicas) if a.partitions else -1
                row = _created(t.name, Errors.NONE, None, a.topic_id, a.num_partitions, rf)
                row["configs"] = ConfigApis.created_configs(a, TopicConfig().with_configs(dict(a.configs or ())))
                results.append(row)
        return {"throttle_time": 0, "topics": results}

    async def delete_topics(self, req: Any, body: Any, session: Session) -> Mapping[str, Any]:
        topics = self._topics_by_name()
        by_id = {t.topic_id: t.name for t in topics.values()}
        if req.api_version >= 6:
            ids = [t.topic_id if t.name is None and t.topic_id not in (None, _NO_ID) else None for t in body.topics]
            asked = [(t.name if tid is None else by_id.get(tid), tid) for t, tid in zip(body.topics, ids, strict=True)]
        else:
            asked = [(n, None) for n in body.topic_names]
        metadata = self.broker.metadata
        admin = metadata if isinstance(metadata, TopicAdmin) else None
        # As Kafka's handleDeleteTopicsRequest: an id that names no topic is
        # UNKNOWN_TOPIC_ID; by id without DESCRIBE the name is not shown;
        # DELETE is checked before existence, so names are not learnt this way.
        refused: list[tuple[Errors, str | None] | None] = []
        hidden: set[int] = set()  # the rows whose name is not shown
        wanted: list[str] = []
        named = Counter(name for name, _ in asked)
        for i, (name, tid) in enumerate(asked):
            refusal: tuple[Errors, str | None] | None
            if name is None:
                refusal = (Errors.UNKNOWN_TOPIC_ID if tid is not None else Errors.INVALID_REQUEST, None)
            elif tid is not None and not self.authz.topic(session, AclOperation.DESCRIBE, name):
                refusal = (Errors.TOPIC_AUTHORIZATION_FAILED, "DESCRIBE on the topic is needed")
                hidden.add(i)
            elif not self.authz.topic(session, AclOperation.DELETE, name):
                refusal = (Errors.TOPIC_AUTHORIZATION_FAILED, "DELETE on the topic is needed")
            elif name not in topics:
                refusal = (Errors.UNKNOWN_TOPIC_OR_PARTITION, None)
            elif named[name] > 1:
                refusal = (Errors.INVALID_REQUEST, "topic named twice in one request")
            elif name in INTERNAL_TOPICS:
                refusal = (Errors.INVALID_REQUEST, f"{name} is an internal topic")
            elif admin is None:
                refusal = (Errors.INVALID_REQUEST, "this cluster's topics come from its static cluster file")
            else:
                refusal = None
                wanted.append(name)
            refused.append(refusal)
        answers: dict[str, Any] = await admin.delete_topics(wanted) if wanted and admin is not None else {}
        out = []
        for i, ((name, tid), refusal) in enumerate(zip(asked, refused, strict=True)):
            row: dict[str, Any] = {"name": None if i in hidden else name, "topic_id": tid or _NO_ID,
                                   "error_message": None}  # fmt: skip
            if refusal is not None:
                err, why = refusal
                row.update(error_code=int(err), error_message=why)
            else:
                a = answers.get(name) if name is not None else None
                if isinstance(a, uuid.UUID):
                    row.update(error_code=0, topic_id=a)
                else:
                    err = a if isinstance(a, Errors) else Errors.UNKNOWN_SERVER_ERROR
                    row.update(error_code=kafka_error(err))
            out.append(row)
        return {"throttle_time": 0, "responses": out}

    async def delete_records(self, req: Any, body: Any, session: Session) -> Mapping[str, Any]:
        asked: list[tuple[str, int, TopicIdPartition | None, int]] = []
        for t in body.topics:
            for p in t.partitions:
                asked.append((t.name, int(p.partition_index), self._tp(t.name, int(p.partition_index)),
                              int(p.offset)))  # fmt: skip
        denied = {t.name for t in body.topics if not self.authz.topic(session, AclOperation.DELETE, t.name)}

        def refusal(name: str, tp: TopicIdPartition | None, offset: int) -> Errors | None:
            if name in denied:
                return Errors.TOPIC_AUTHORIZATION_FAILED
            if tp is None:
                return Errors.UNKNOWN_TOPIC_OR_PARTITION
            if name in INTERNAL_TOPICS:
                return Errors.INVALID_TOPIC_EXCEPTION  # as Kafka: not an internal topic's records
            if offset < -1:
                return Errors.OFFSET_OUT_OF_RANGE  # -1 alone means "the high watermark"
            return None

        items = [(tp, [offset]) for name, _, tp, offset in asked if tp is not None and not refusal(name, tp, offset)]
        rows = iter(await self.broker.on_leaders("delete_records", items, [int(Errors.NOT_LEADER_OR_FOLLOWER), -1]))
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for name, index, tp, offset in asked:
            refused = refusal(name, tp, offset)
            if refused is not None:
                part = {"partition_index": index, "low_watermark": -1, "error_code": int(refused)}
            else:
                err, low = next(rows)
                part = {"partition_index": index, "low_watermark": low, "error_code": kafka_error(peer_error(err))}
            by_topic.setdefault(name, []).append(part)
        return {"throttle_time": 0, "topics": [{"name": n, "partitions": ps} for n, ps in by_topic.items()]}


def _bad_assignments(t: Any, asked: Sequence[Assignment]) -> Refused | None:
    """What the front end refuses of a topic's assignments before the
    controller: Kafka's -1 shape rule, and what no cluster of ours could
    take (bounds the request forwarded); the controller checks the rest."""
    return shape_refusal(t.num_partitions, t.replication_factor) or assignment_bounds(asked)


def _chunks(
    topics: Mapping[str, tuple[int, int]], assignments: Mapping[str, Sequence[Assignment]]
) -> list[dict[str, tuple[int, int]]]:
    """``topics`` in controller calls of at most TOPICS_PER_REQUEST_MAX
    topics and ASSIGNMENT_ITEMS_PER_REQUEST_MAX assignment items (a topic
    alone over it still goes alone: the controller refuses it)."""
    out: list[dict[str, tuple[int, int]]] = [{}]
    items = 0
    for name, shape in topics.items():
        cost = sum(1 + len(r) for _, r in assignments.get(name, ()))
        if out[-1] and (len(out[-1]) >= TOPICS_PER_REQUEST_MAX or items + cost > ASSIGNMENT_ITEMS_PER_REQUEST_MAX):
            out.append({})
            items = 0
        out[-1][name] = shape
        items += cost
    return out


def _takes_timeout(source: TopicAdmin) -> bool:
    """Whether ``source``'s create_topics takes ``timeout_ms`` (ours do; an
    embedder's :class:`TopicAdmin` may predate it: the request's deadline
    then bounds the wait alone)."""
    return "timeout_ms" in inspect.signature(source.create_topics).parameters


def _bad_configs(configs: Any) -> str | None:
    """Kafka's message for CreateTopics configs that do not validate (None: they do)."""
    if not configs:
        return None
    nulls = [c.name for c in configs if c.value is None]
    if nulls:
        return "Null value not supported for topic configs: " + ",".join(nulls)
    try:
        validate_overrides({c.name: c.value for c in configs})
    except TopicConfigError as e:
        return str(e)
    return None


def _created(
    name: str,
    error: Errors,
    message: str | None,
    topic_id: uuid.UUID | None = None,
    partitions: int = -1,
    replication_factor: int = -1,
) -> dict[str, Any]:
    return {
        "name": name,
        "topic_id": topic_id or uuid.UUID(int=0),
        "error_code": int(error),
        "error_message": message,
        "num_partitions": partitions,
        "replication_factor": replication_factor,
        "configs": [],
    }


__all__ = ["CREATE_TOPICS_TIMEOUT_MS_MAX", "AdminApis"]
