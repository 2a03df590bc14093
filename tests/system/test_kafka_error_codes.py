"""Kafka's error codes on every path a client can reach, compared with
Apache Kafka's (issue 29): each API the front end serves is sent, as raw
kio requests (so the code is seen exactly, not through a client's
retries), to the wrong broker, with a bad id, and without rights.

Two clusters on loopback: ``open`` (two brokers, no authorizer; one
offsets and one transaction-state partition, so exactly one broker is
each coordinator and the other is the wrong one) and ``locked`` (an
authorizer and no ACLs: User:ANONYMOUS may do nothing).

Each row names where Kafka decides the code (``kafka``: file and method
of apache/kafka, trunk of October 2024).  A row partlog answers
differently on purpose is ``xfail(strict=True)`` with the reason; those
are listed in design.md, "Deliberate differences from Kafka".

Rows without rights are asked about an existing topic and a missing one:
the answers must be the same (a refused client learns no topic name).
"""

from __future__ import annotations

import socket
import struct
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from partlog.acl import AuthorizerConfig
from partlog.kafka.errors import Errors
from partlog.kafka.record_batch import build_record_batch
from partlog.kafka_front.apis import FrontConfig
from partlog.tools.local_cluster import TOPIC
from tests.kafka_helpers import ClusterThread, kio_answer, kio_request, read_frame

E = Errors
GROUP = "codes-group"
TXN = "codes-txn"
MISSING = "no-such-topic"
INVALID = "bad name!"
UNKNOWN_ID = uuid.UUID(int=0x1234)
TXN_BATCH_PID = 4242
# A bounded wait for the coordinators' first answers (the internal topics
# are created and loaded on first use).
READY_S = 30.0


@dataclass(slots=True)
class Ctx:
    """One cluster's facts the rows need: ports by role, the topic's id."""

    ports: dict[str, int]
    topic_id: uuid.UUID


def _ask(port: int, key: int, version: int, data: dict[str, Any]) -> Any:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(kio_request(key, version, 7, data))
        frame = read_frame(s)
    assert frame is not None, f"api {key} v{version}: connection closed"
    if key == 65:
        return frame  # kio cannot read the -1 start time Kafka sends (see _described_txn)
    return kio_answer(key, version, frame)


def _find(port: int, key_type: int, key: str) -> int:
    deadline = time.monotonic() + READY_S
    while True:
        c = _ask(port, 10, 4, {"key_type": key_type, "coordinator_keys": [key]}).coordinators[0]
        if int(c.error_code) == 0:
            return int(c.node_id)
        assert time.monotonic() < deadline, f"no coordinator for {key}: {c.error_code}"
        time.sleep(0.1)


def _metadata(port: int) -> Any:
    return _ask(port, 3, 12, _md(TOPIC))


def _ctx(c: ClusterThread) -> Ctx:
    ids = sorted(c.cluster.kafka_ports)
    port = {b: c.kafka_port(b) for b in ids}
    any_port = port[ids[0]]
    topic = _metadata(any_port).topics[0]
    leader = int(topic.partitions[0].leader_id)
    group = _find(any_port, 0, GROUP)
    txn = _find(any_port, 1, TXN)

    def other(b: int) -> int:
        return port[next((i for i in ids if i != b), b)]

    ports = {"any": any_port, "leader": port[leader], "follower": other(leader), "coordinator": port[group],
             "not_coordinator": other(group), "txn_coordinator": port[txn],
             "not_txn_coordinator": other(txn)}  # fmt: skip
    # The coordinators answer once their partition is loaded.
    deadline = time.monotonic() + READY_S
    while int(_ask(ports["coordinator"], 12, 4, _hb(GROUP)).error_code) == E.COORDINATOR_LOAD_IN_PROGRESS:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    while int(_ask(ports["txn_coordinator"], 26, 3, _end(TXN)).error_code) == E.COORDINATOR_LOAD_IN_PROGRESS:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    return Ctx(ports, topic.topic_id)


@pytest.fixture(scope="module")
def clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Ctx]]:
    shape: dict[str, Any] = {"azs": 1, "partitions": 1, "replication_factor": 1}
    internal: dict[str, Any] = {"offsets_topic_num_partitions": 1, "transaction_state_log_num_partitions": 1}
    open_ = ClusterThread(str(tmp_path_factory.mktemp("open")), front=FrontConfig(**internal), brokers_per_az=2,
                          **shape)  # fmt: skip
    try:
        locked = ClusterThread(
            str(tmp_path_factory.mktemp("locked")),
            front=FrontConfig(authorizer=AuthorizerConfig(), **internal),
            brokers_per_az=1,
            **shape,
        )
        try:
            ctx = {"open": _ctx(open_)}
            lport = locked.kafka_port(sorted(locked.cluster.kafka_ports)[0])
            topic_id = locked.call(_topic_id(locked))
            ctx["locked"] = Ctx(dict.fromkeys(("any", "leader", "coordinator", "txn_coordinator"), lport), topic_id)
            yield ctx
        finally:
            locked.close()
    finally:
        open_.close()


async def _topic_id(c: ClusterThread) -> uuid.UUID:
    broker = next(iter(c.cluster.brokers.values()))
    return next(t.topic_id for t in broker.metadata.topics() if t.name == TOPIC)


# ----------------------------------------------------------- request bodies


def _md(name: str | None = None, topic_id: uuid.UUID | None = None, auto: bool = False) -> dict[str, Any]:
    return {"topics": [{"name": name, "topic_id": topic_id or uuid.UUID(int=0)}], "allow_auto_topic_creation": auto,
            "include_topic_authorized_operations": False}  # fmt: skip


def _records(pid: int = -1, seq: int = -1, transactional: bool = False) -> bytes:
    return build_record_batch([(None, b"v", int(time.time() * 1000))], producer_id=pid,
                              producer_epoch=0 if pid >= 0 else -1, base_sequence=seq,
                              transactional=transactional)  # fmt: skip


def _produce(topic: str = TOPIC, records: bytes | None = None, txn: str | None = None) -> dict[str, Any]:
    return {"transactional_id": txn, "acks": -1, "timeout": 10_000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": records or _records()}]}]}  # fmt: skip


def _fetch(topic: str = TOPIC, session_id: int = 0, epoch: int = -1) -> dict[str, Any]:
    part = {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1024}
    return {"max_wait": 0, "min_bytes": 0, "forgotten_topics_data": [], "session_id": session_id,
            "session_epoch": epoch, "topics": [{"topic": topic, "partitions": [part]}]}  # fmt: skip


def _fetch_in_session(epoch: int) -> Callable[[Ctx], dict[str, Any]]:
    """An incremental fetch (naming no partition) of a session made just now."""

    def data(ctx: Ctx) -> dict[str, Any]:
        session_id = int(_ask(ctx.ports["any"], 1, 12, _fetch(epoch=0)).session_id)
        assert session_id != 0
        return {**_fetch(session_id=session_id, epoch=epoch), "topics": []}

    return data


def _list_offsets(topic: str = TOPIC) -> dict[str, Any]:
    return {"replica_id": -1, "isolation_level": 0,
            "topics": [{"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1}]}]}  # fmt: skip


def _epoch(topic: str = TOPIC) -> dict[str, Any]:
    return {"replica_id": -1, "topics": [{"topic": topic, "partitions": [{"partition": 0, "leader_epoch": 0}]}]}


def _commit(group: str = GROUP, topic: str = TOPIC) -> dict[str, Any]:
    return {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "", "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 0,
                                        "committed_metadata": ""}]}]}  # fmt: skip


def _offset_fetch(group: str = GROUP, topic: str = TOPIC) -> dict[str, Any]:
    return {"group_id": group, "topics": [{"name": topic, "partition_indexes": [0]}]}


def _offset_delete(group: str = GROUP, topic: str = TOPIC) -> dict[str, Any]:
    return {"group_id": group, "topics": [{"name": topic, "partitions": [{"partition_index": 0}]}]}


def _join(group: str = GROUP) -> dict[str, Any]:
    return {"group_id": group, "session_timeout": 10_000, "rebalance_timeout": 10_000, "member_id": "",
            "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b""}]}  # fmt: skip


def _cg_heartbeat(group: str = GROUP, epoch: int = 0, assignor: str | None = None) -> dict[str, Any]:
    return {"group_id": group, "member_id": "m-1", "member_epoch": epoch, "rebalance_timeout": 10_000,
            "subscribed_topic_names": [TOPIC], "server_assignor": assignor, "topic_partitions": []}  # fmt: skip


def _cg_describe(group: str = GROUP) -> dict[str, Any]:
    return {"group_ids": [group], "include_authorized_operations": False}


def _sync(group: str = GROUP) -> dict[str, Any]:
    return {"group_id": group, "generation_id": 1, "member_id": "m-1", "protocol_type": "consumer",
            "protocol_name": "range", "assignments": []}  # fmt: skip


def _hb(group: str = GROUP) -> dict[str, Any]:
    return {"group_id": group, "generation_id": 1, "member_id": "m-1"}


def _leave(group: str = GROUP) -> dict[str, Any]:
    return {"group_id": group, "members": [{"member_id": "m-1"}]}


def _delete_records(topic: str = TOPIC) -> dict[str, Any]:
    return {"timeout": 10_000, "topics": [{"name": topic, "partitions": [{"partition_index": 0, "offset": 0}]}]}


def _create(*names: str) -> dict[str, Any]:
    return {"topics": [{"name": n, "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}
                       for n in names], "timeout": 10_000}  # fmt: skip


def _create_placed(name: str, replicas: list[int], shape: int = -1, timeout: int = 10_000) -> dict[str, Any]:
    """A CreateTopics of one topic of one partition on ``replicas`` (shape -1: Kafka's rule)."""
    placed = [{"partition_index": 0, "broker_ids": replicas}]
    return {"topics": [{"name": name, "num_partitions": shape, "replication_factor": -1, "assignments": placed,
                        "configs": []}], "timeout": timeout}  # fmt: skip


def _delete(name: str | None = None, topic_id: uuid.UUID | None = None) -> dict[str, Any]:
    return {"timeout": 10_000, "topics": [{"name": name, "topic_id": topic_id or uuid.UUID(int=0)}]}


def _configs(rtype: int, name: str) -> dict[str, Any]:
    return {"resources": [{"resource_type": rtype, "resource_name": name, "configuration_keys": None}]}


SESSION = "consumer.session.timeout.ms"


def _alter(name: str, rtype: int = 2, op: int = 0, value: str | None = "60000", twice: bool = False,
           key: str = "retention.ms") -> dict[str, Any]:  # fmt: skip
    """IncrementalAlterConfigs v1, validate_only (the open cluster's topic stays as it is)."""
    resource = {"resource_type": rtype, "resource_name": name,
                "configs": [{"name": key, "config_operation": op, "value": value}]}  # fmt: skip
    return {"resources": [resource] * (2 if twice else 1), "validate_only": True}


def _alter_whole(name: str, value: str = "60000") -> dict[str, Any]:
    """AlterConfigs v2, validate_only."""
    resource = {"resource_type": 2, "resource_name": name, "configs": [{"name": "retention.ms", "value": value}]}
    return {"resources": [resource], "validate_only": True}


def _grow(name: str, count: int) -> dict[str, Any]:
    """CreatePartitions v3, validate_only (the open cluster's topic stays as it is)."""
    return {"topics": [{"name": name, "count": count, "assignments": None}], "timeout": 10_000,
            "validate_only": True}  # fmt: skip


def _move(name: str, replicas: list[int] | None) -> dict[str, Any]:
    """AlterPartitionReassignments v0 of partition 0 (None: a cancel)."""
    return {"timeout": 10_000, "topics": [{"name": name, "partitions": [{"partition_index": 0, "replicas": replicas}]}]}


def _init(txn: str | None) -> dict[str, Any]:
    return {"transactional_id": txn, "transaction_timeout": 60_000}


def _add_parts(txn: str = TXN, topic: str = TOPIC) -> dict[str, Any]:
    return {"v3_and_below_transactional_id": txn, "v3_and_below_producer_id": 1, "v3_and_below_producer_epoch": 0,
            "v3_and_below_topics": [{"name": topic, "partitions": [0]}]}  # fmt: skip


def _add_offsets(txn: str = TXN) -> dict[str, Any]:
    return {"transactional_id": txn, "producer_id": 1, "producer_epoch": 0, "group_id": GROUP}


def _end(txn: str = TXN) -> dict[str, Any]:
    return {"transactional_id": txn, "producer_id": 1, "producer_epoch": 0, "committed": True}


def _txn_commit(txn: str = TXN, group: str = GROUP, topic: str = TOPIC) -> dict[str, Any]:
    return {"transactional_id": txn, "group_id": group, "producer_id": 1, "producer_epoch": 0, "generation_id": -1,
            "member_id": "", "topics": [{"name": topic, "partitions": [
                {"partition_index": 0, "committed_offset": 0, "committed_metadata": ""}]}]}  # fmt: skip


_ANY_ACL = {"resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1, "principal_filter": None,
            "host_filter": None, "operation": 1, "permission_type": 1}  # fmt: skip
_ACL = {"resource_type": 2, "resource_name": TOPIC, "resource_pattern_type": 3, "principal": "User:ANONYMOUS",
        "host": "*", "operation": 4, "permission_type": 3}  # fmt: skip

# ----------------------------------------------------------- what is compared


def _first(*path: str) -> Callable[[Any], Any]:
    """The error code at ``path`` (each step a field; lists: their first item)."""

    def get(body: Any) -> Any:
        for name in path:
            body = getattr(body, name)
            if isinstance(body, tuple):
                body = body[0]
        return Errors(int(body))

    return get


def _topic_and_name(topics: str) -> Callable[[Any], Any]:
    """(error, name) of the first topic: by id, a refused topic's name is null."""

    def get(body: Any) -> Any:
        t = getattr(body, topics)[0]
        return Errors(int(t.error_code)), t.name

    return get


MD = _first("topics", "error_code")
PRODUCE = _first("responses", "partition_responses", "error_code")
FETCH = _first("responses", "partitions", "error_code")
LIST = _first("topics", "partitions", "error_code")
EPOCH = _first("topics", "partitions", "error_code")
COMMIT = _first("topics", "partitions", "error_code")
TOP = _first("error_code")
FIND = _first("coordinators", "error_code")
GROUPS = _first("groups", "error_code")
DELREC = _first("topics", "partitions", "error_code")
CREATED = _first("topics", "error_code")
DELETED = _first("responses", "error_code")
CONFIGS = _first("results", "error_code")
ALTERED = _first("responses", "error_code")
GROWN = _first("results", "error_code")
MOVED = _first("responses", "partitions", "error_code")
ADDED = _first("results_by_topic_v3_and_below", "results_by_partition", "partition_error_code")
ACL_CREATED = _first("results", "error_code")
ACL_DELETED = _first("filter_results", "error_code")
SCRAM_ALTERED = _first("results", "error_code")


def DESCRIBED_TXN(frame: bytes) -> Any:
    """DescribeTransactions v0's first state's error, read by hand: kio
    refuses the negative start time (-1) Kafka sends for no transaction.
    Correlation id (4), header tags (1), throttle (4), array length (1)."""
    assert frame[9] >= 2, "no transaction state"
    return Errors(struct.unpack_from(">h", frame, 10)[0])


def _leave_code(body: Any) -> Any:
    """LeaveGroup v3+: the request's error, else its member's."""
    top = Errors(int(body.error_code))
    return top if top != E.NONE or not body.members else Errors(int(body.members[0].error_code))


def _describe_groups(body: Any) -> Any:
    g = body.groups[0]
    return Errors(int(g.error_code)), g.group_state


def _list_groups(body: Any) -> Any:
    return Errors(int(body.error_code)), [g.group_id for g in body.groups]


@dataclass(frozen=True, slots=True)
class Row:
    """One request and Kafka's answer: ``kafka`` names where Kafka decides it."""

    id: str
    cluster: str  # "open" or "locked"
    target: str  # a key of Ctx.ports
    api: int
    version: int
    data: Callable[[Ctx], dict[str, Any]]
    got: Callable[[Any], Any]
    expected: Any
    kafka: str
    xfail: str | None = field(default=None)


def _row(id: str, cluster: str, target: str, api: int, version: int, data: Any, got: Callable[[Any], Any],
         expected: Any, kafka: str, xfail: str | None = None) -> Any:  # fmt: skip
    build = data if callable(data) else (lambda _c, d=data: d)
    r = Row(id, cluster, target, api, version, build, got, expected, kafka, xfail)
    marks = [pytest.mark.xfail(strict=True, reason=xfail)] if xfail else []
    return pytest.param(r, id=id, marks=marks)


ANY_BROKER_PRODUCES = "any broker accepts produce for any partition (KIP-1163 diskless: design.md)"
CONSUMER_GROUPS_IN_MEMORY = ("KIP-848 membership lives in memory: a group a coordinator does not know may have "
                             "moved from another, so its members are told UNKNOWN_MEMBER_ID and rejoin "
                             "(docs/design/groups-consumer.md)")  # fmt: skip
ANY_BROKER_SERVES = "a broker without the partition forwards the request to one with it (design.md)"

ROWS = [
    # ---------------------------------------------------------------- Metadata
    _row("metadata-unknown-topic", "open", "any", 3, 12, _md(MISSING), MD, E.UNKNOWN_TOPIC_OR_PARTITION,
         "KafkaApis.getTopicMetadata (no auto-creation: Topic.validate, then UNKNOWN_TOPIC_OR_PARTITION)"),
    _row("metadata-invalid-topic", "open", "any", 3, 12, _md(INVALID), MD, E.INVALID_TOPIC_EXCEPTION,
         "KafkaApis.getTopicMetadata (Topic.validate throws InvalidTopicException)"),
    _row("metadata-invalid-topic-auto-create", "open", "any", 3, 12, _md(INVALID, auto=True), MD,
         E.INVALID_TOPIC_EXCEPTION, "AutoTopicCreationManager.filterCreatableTopics (isValidTopicName)"),
    _row("metadata-unknown-topic-id", "open", "any", 3, 12, _md(topic_id=UNKNOWN_ID), _topic_and_name("topics"),
         (E.UNKNOWN_TOPIC_ID, None), "KafkaApis.handleTopicMetadataRequest (unknownTopicIdsTopicMetadata, null name)"),
    _row("metadata-refused-topic", "locked", "any", 3, 12, _md(TOPIC), MD, E.TOPIC_AUTHORIZATION_FAILED,
         "KafkaApis.handleTopicMetadataRequest (unauthorizedForDescribeTopicMetadata)"),
    _row("metadata-refused-missing-topic", "locked", "any", 3, 12, _md(MISSING, auto=True), MD,
         E.TOPIC_AUTHORIZATION_FAILED, "KafkaApis.handleTopicMetadataRequest (DESCRIBE before existence)"),
    _row("metadata-refused-topic-by-id", "locked", "any", 3, 12, lambda c: _md(topic_id=c.topic_id),
         _topic_and_name("topics"), (E.TOPIC_AUTHORIZATION_FAILED, None),
         "KafkaApis.handleTopicMetadataRequest (useTopicId: TOPIC_AUTHORIZATION_FAILED with a null name)"),
    _row("metadata-refused-unknown-id", "locked", "any", 3, 12, _md(topic_id=UNKNOWN_ID), _topic_and_name("topics"),
         (E.UNKNOWN_TOPIC_ID, None), "KafkaApis.handleTopicMetadataRequest (ids are not sensitive)"),
    _row("metadata-all-topics-refused", "locked", "any", 3, 12,
         {"topics": None, "allow_auto_topic_creation": False, "include_topic_authorized_operations": False},
         lambda b: [t.name for t in b.topics], [],
         "KafkaApis.handleTopicMetadataRequest (all topics: refused left out)"),
    # ----------------------------------------------------------------- Produce
    _row("produce-not-leader", "open", "follower", 0, 9, _produce(), PRODUCE, E.NOT_LEADER_OR_FOLLOWER,
         "ReplicaManager.appendToLocalLog (getPartitionOrException: NOT_LEADER_OR_FOLLOWER)", ANY_BROKER_PRODUCES),
    _row("produce-unknown-topic", "open", "any", 0, 9, _produce(MISSING), PRODUCE, E.UNKNOWN_TOPIC_OR_PARTITION,
         "KafkaApis.handleProduceRequest (metadataCache.contains)"),
    _row("produce-unknown-producer-id", "open", "leader", 0, 9, _produce(records=_records(pid=987_654, seq=5)),
         PRODUCE, E.NONE, "ProducerAppendInfo.checkSequence (a new producer's first batch: any sequence)"),
    _row("produce-unknown-transactional-id", "open", "leader", 0, 9,
         _produce(records=_records(pid=TXN_BATCH_PID, seq=0, transactional=True), txn="no-such-txn"), PRODUCE,
         E.INVALID_PRODUCER_ID_MAPPING,
         "TransactionCoordinator.handleVerifyPartitionsInTransaction (case None), ReplicaManager verification"),
    _row("produce-transactional-without-id", "open", "leader", 0, 9,
         _produce(records=_records(pid=TXN_BATCH_PID, seq=0, transactional=True)), PRODUCE,
         E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
         "KafkaApis.handleProduceRequest (transactional records: transactionalId != null && authorized)"),
    _row("produce-refused-topic", "locked", "any", 0, 9, _produce(), PRODUCE, E.TOPIC_AUTHORIZATION_FAILED,
         "KafkaApis.handleProduceRequest (WRITE before metadataCache.contains)"),
    _row("produce-refused-missing-topic", "locked", "any", 0, 9, _produce(MISSING), PRODUCE,
         E.TOPIC_AUTHORIZATION_FAILED, "KafkaApis.handleProduceRequest (WRITE before metadataCache.contains)"),
    _row("produce-refused-transactional-id", "locked", "any", 0, 9,
         _produce(records=_records(pid=TXN_BATCH_PID, seq=0, transactional=True), txn=TXN), PRODUCE,
         E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "KafkaApis.handleProduceRequest (hasTransactionalRecords)"),
    # ------------------------------------------------------------------- Fetch
    _row("fetch-not-leader", "open", "follower", 1, 12, _fetch(), FETCH, E.NOT_LEADER_OR_FOLLOWER,
         "ReplicaManager.readFromLog (getPartitionOrException)", ANY_BROKER_SERVES),
    _row("fetch-unknown-topic", "open", "any", 1, 12, _fetch(MISSING), FETCH, E.UNKNOWN_TOPIC_OR_PARTITION,
         "KafkaApis.handleFetchRequest (metadataCache.contains)"),
    _row("fetch-refused-topic", "locked", "any", 1, 12, _fetch(), FETCH, E.TOPIC_AUTHORIZATION_FAILED,
         "KafkaApis.handleFetchRequest (READ before metadataCache.contains)"),
    _row("fetch-refused-missing-topic", "locked", "any", 1, 12, _fetch(MISSING), FETCH, E.TOPIC_AUTHORIZATION_FAILED,
         "KafkaApis.handleFetchRequest (READ before metadataCache.contains)"),
    _row("fetch-session-not-found", "open", "any", 1, 12, _fetch(session_id=0x5E55, epoch=1), TOP,
         E.FETCH_SESSION_ID_NOT_FOUND, "FetchManager.newContext (cache.get: SessionErrorContext)"),
    _row("fetch-session-wrong-epoch", "open", "any", 1, 12, _fetch_in_session(2), TOP,
         E.INVALID_FETCH_SESSION_EPOCH, "FetchManager.newContext (session.epoch != reqMetadata.epoch)"),
    _row("fetch-session-refused-topic", "locked", "any", 1, 12, _fetch_in_session(1), FETCH,
         E.TOPIC_AUTHORIZATION_FAILED, "KafkaApis.handleFetchRequest (READ on each partition of the session)"),
    # ------------------------------------------------------------- ListOffsets
    _row("list-offsets-not-leader", "open", "follower", 2, 7, _list_offsets(), LIST, E.NOT_LEADER_OR_FOLLOWER,
         "ReplicaManager.fetchOffset (getPartitionOrException)", ANY_BROKER_SERVES),
    _row("list-offsets-unknown-topic", "open", "any", 2, 7, _list_offsets(MISSING), LIST,
         E.UNKNOWN_TOPIC_OR_PARTITION, "ReplicaManager.fetchOffset (UnknownTopicOrPartitionException)"),
    _row("list-offsets-refused-topic", "locked", "any", 2, 7, _list_offsets(), LIST, E.TOPIC_AUTHORIZATION_FAILED,
         "KafkaApis.handleListOffsetRequestV1AndAbove (DESCRIBE)"),
    _row("list-offsets-refused-missing-topic", "locked", "any", 2, 7, _list_offsets(MISSING), LIST,
         E.TOPIC_AUTHORIZATION_FAILED, "KafkaApis.handleListOffsetRequestV1AndAbove (DESCRIBE before existence)"),
    # ---------------------------------------------------- OffsetForLeaderEpoch
    _row("epoch-not-leader", "open", "follower", 23, 4, _epoch(), EPOCH, E.NOT_LEADER_OR_FOLLOWER,
         "ReplicaManager.lastOffsetForLeaderEpoch (getPartitionOrError)", ANY_BROKER_SERVES),
    _row("epoch-unknown-topic", "open", "any", 23, 4, _epoch(MISSING), EPOCH, E.UNKNOWN_TOPIC_OR_PARTITION,
         "ReplicaManager.lastOffsetForLeaderEpoch (HostedPartition.None)"),
    _row("epoch-refused-topic", "locked", "any", 23, 4, _epoch(), EPOCH, E.TOPIC_AUTHORIZATION_FAILED,
         "KafkaApis.handleOffsetForLeaderEpochRequest (DESCRIBE)"),
    _row("epoch-refused-missing-topic", "locked", "any", 23, 4, _epoch(MISSING), EPOCH, E.TOPIC_AUTHORIZATION_FAILED,
         "KafkaApis.handleOffsetForLeaderEpochRequest (DESCRIBE before existence)"),
    # ------------------------------------------------------------ OffsetCommit
    _row("offset-commit-not-coordinator", "open", "not_coordinator", 8, 8, _commit(), COMMIT, E.NOT_COORDINATOR,
         "CoordinatorRuntime.scheduleWriteOperation (NotCoordinatorException)"),
    _row("offset-commit-unknown-topic", "open", "coordinator", 8, 8, _commit(topic=MISSING), COMMIT,
         E.UNKNOWN_TOPIC_OR_PARTITION, "KafkaApis.handleOffsetCommitRequest (metadataCache.contains)"),
    _row("offset-commit-empty-group", "open", "coordinator", 8, 8, _commit(group=""), COMMIT, E.NONE,
         "GroupCoordinatorService.commitOffsets (the empty group id is accepted, for compatibility)"),
    _row("offset-commit-refused-group", "locked", "any", 8, 8, _commit(), COMMIT, E.GROUP_AUTHORIZATION_FAILED,
         "KafkaApis.handleOffsetCommitRequest (READ on the group)"),
    _row("offset-commit-refused-missing-topic", "locked", "any", 8, 8, _commit(topic=MISSING), COMMIT,
         E.GROUP_AUTHORIZATION_FAILED, "KafkaApis.handleOffsetCommitRequest (READ on the group first)"),
    # ------------------------------------------------------------- OffsetFetch
    _row("offset-fetch-not-coordinator", "open", "not_coordinator", 9, 7, _offset_fetch(), TOP, E.NOT_COORDINATOR,
         "CoordinatorRuntime.scheduleReadOperation (NotCoordinatorException)"),
    _row("offset-fetch-refused-group", "locked", "any", 9, 7, _offset_fetch(), TOP, E.GROUP_AUTHORIZATION_FAILED,
         "KafkaApis.handleOffsetFetchRequestFromCoordinator (DESCRIBE on the group)"),
    # --------------------------------------------------------- FindCoordinator
    _row("find-coordinator-empty-txn-id", "open", "any", 10, 4, {"key_type": 1, "coordinator_keys": [""]}, FIND,
         E.NONE, "KafkaApis.getCoordinator (no check of the key: txnCoordinator.partitionFor)"),
    _row("find-coordinator-share-v4", "open", "any", 10, 4, {"key_type": 2, "coordinator_keys": ["s"]}, FIND,
         E.INVALID_REQUEST, "KafkaApis.getCoordinator (SHARE below v6)"),
    _row("find-coordinator-refused-group", "locked", "any", 10, 4, {"key_type": 0, "coordinator_keys": [GROUP]}, FIND,
         E.GROUP_AUTHORIZATION_FAILED, "KafkaApis.getCoordinator (DESCRIBE on the group)"),
    _row("find-coordinator-refused-txn-id", "locked", "any", 10, 4, {"key_type": 1, "coordinator_keys": [TXN]}, FIND,
         E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "KafkaApis.getCoordinator (DESCRIBE on the transactional id)"),
    _row("find-coordinator-refused-empty-txn-id", "locked", "any", 10, 4, {"key_type": 1, "coordinator_keys": [""]},
         FIND, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "KafkaApis.getCoordinator (authorization first)"),
    # --------------------------------------------------------------- JoinGroup
    _row("join-not-coordinator", "open", "not_coordinator", 11, 7, _join(), TOP, E.NOT_COORDINATOR,
         "CoordinatorRuntime.scheduleWriteOperation (NotCoordinatorException)"),
    _row("join-empty-group", "open", "not_coordinator", 11, 7, _join(""), TOP, E.INVALID_GROUP_ID,
         "GroupCoordinatorService.joinGroup (isGroupIdNotEmpty before routing)"),
    _row("join-refused-group", "locked", "any", 11, 7, _join(), TOP, E.GROUP_AUTHORIZATION_FAILED,
         "KafkaApis.handleJoinGroupRequest (READ on the group)"),
    _row("join-refused-empty-group", "locked", "any", 11, 7, _join(""), TOP, E.GROUP_AUTHORIZATION_FAILED,
         "KafkaApis.handleJoinGroupRequest (authorization before the coordinator's checks)"),
    # --------------------------------------------------------------- SyncGroup
    _row("sync-not-coordinator", "open", "not_coordinator", 14, 5, _sync(), TOP, E.NOT_COORDINATOR,
         "CoordinatorRuntime.scheduleWriteOperation (NotCoordinatorException)"),
    _row("sync-empty-group", "open", "not_coordinator", 14, 5, _sync(""), TOP, E.INVALID_GROUP_ID,
         "GroupCoordinatorService.syncGroup (isGroupIdNotEmpty)"),
    _row("sync-unknown-group", "open", "coordinator", 14, 5, _sync("no-such-group"), TOP, E.UNKNOWN_MEMBER_ID,
         "GroupMetadataManager.classicGroupSync (GroupIdNotFoundException: UNKNOWN_MEMBER_ID)"),
    _row("sync-refused-group", "locked", "any", 14, 5, _sync(), TOP, E.GROUP_AUTHORIZATION_FAILED,
         "KafkaApis.handleSyncGroupRequest (READ on the group)"),
    # --------------------------------------------------------------- Heartbeat
    _row("heartbeat-not-coordinator", "open", "not_coordinator", 12, 4, _hb(), TOP, E.NOT_COORDINATOR,
         "CoordinatorRuntime.scheduleWriteOperation (NotCoordinatorException)"),
    _row("heartbeat-empty-group", "open", "not_coordinator", 12, 4, _hb(""), TOP, E.INVALID_GROUP_ID,
         "GroupCoordinatorService.heartbeat (isGroupIdNotEmpty)"),
    _row("heartbeat-unknown-group", "open", "coordinator", 12, 4, _hb("no-such-group"), TOP, E.UNKNOWN_MEMBER_ID,
         "GroupMetadataManager.classicGroupHeartbeat (UnknownMemberIdException)"),
    _row("heartbeat-refused-group", "locked", "any", 12, 4, _hb(), TOP, E.GROUP_AUTHORIZATION_FAILED,
         "KafkaApis.handleHeartbeatRequest (READ on the group)"),
    # -------------------------------------------------------------- LeaveGroup
    _row("leave-not-coordinator", "open", "not_coordinator", 13, 5, _leave(), _leave_code, E.NOT_COORDINATOR,
         "CoordinatorRuntime.scheduleWriteOperation (NotCoordinatorException)"),
    _row("leave-empty-group", "open", "not_coordinator", 13, 5, _leave(""), _leave_code, E.INVALID_GROUP_ID,
         "GroupCoordinatorService.leaveGroup (isGroupIdNotEmpty)"),
    _row("leave-unknown-group", "open", "coordinator", 13, 5, _leave("no-such-group"), TOP, E.UNKNOWN_MEMBER_ID,
         "GroupMetadataManager.classicGroupLeave (UnknownMemberIdException: the request's error)"),
    _row("leave-refused-group", "locked", "any", 13, 5, _leave(), _leave_code, E.GROUP_AUTHORIZATION_FAILED,
         "KafkaApis.handleLeaveGroupRequest (READ on the group)"),
    # ---------------------------------------------------------- DescribeGroups
    _row("describe-groups-not-coordinator", "open", "not_coordinator", 15, 5,
         {"groups": [GROUP], "include_authorized_operations": False}, GROUPS, E.NOT_COORDINATOR,
         "CoordinatorRuntime.scheduleReadOperation (NotCoordinatorException, per group)"),
    _row("describe-groups-unknown-group", "open", "coordinator", 15, 5,
         {"groups": ["no-such-group"], "include_authorized_operations": False}, _describe_groups, (E.NONE, "Dead"),
         "GroupMetadataManager.describeGroups (GroupIdNotFoundException: state Dead)"),
    _row("describe-groups-v6-unknown-group", "open", "coordinator", 15, 6,
         {"groups": ["no-such-group"], "include_authorized_operations": False}, _describe_groups,
         (E.GROUP_ID_NOT_FOUND, "Dead"), "GroupMetadataManager.describeGroups (v6+: the error, KIP-1043)"),
    _row("describe-groups-refused", "locked", "any", 15, 5, {"groups": [GROUP], "include_authorized_operations": False},
         GROUPS, E.GROUP_AUTHORIZATION_FAILED, "KafkaApis.handleDescribeGroupsRequest (DESCRIBE on the group)"),
    # -------------------------------------------------------------- ListGroups
    _row("list-groups-refused", "locked", "any", 16, 4, {"states_filter": []}, _list_groups, (E.NONE, []),
         "KafkaApis.handleListGroupsRequest (groups without DESCRIBE are left out)"),
    # ------------------------------------------- ConsumerGroupHeartbeat (KIP-848)
    _row("cg-heartbeat-not-coordinator", "open", "not_coordinator", 68, 1, _cg_heartbeat(), TOP, E.NOT_COORDINATOR,
         "CoordinatorRuntime.scheduleWriteOperation (NotCoordinatorException)"),
    _row("cg-heartbeat-empty-group", "open", "coordinator", 68, 1, _cg_heartbeat(""), TOP, E.INVALID_REQUEST,
         "GroupMetadataManager.throwIfConsumerGroupHeartbeatRequestIsInvalid (GroupId can't be empty)"),
    _row("cg-heartbeat-invalid-epoch", "open", "coordinator", 68, 1, _cg_heartbeat(epoch=-3), TOP, E.INVALID_REQUEST,
         "GroupMetadataManager.throwIfConsumerGroupHeartbeatRequestIsInvalid (MemberEpoch is invalid)"),
    _row("cg-heartbeat-unsupported-assignor", "open", "coordinator", 68, 1, _cg_heartbeat(assignor="sticky"), TOP,
         E.UNSUPPORTED_ASSIGNOR, "GroupMetadataManager.throwIfConsumerGroupHeartbeatRequestIsInvalid"),
    _row("cg-heartbeat-unknown-group", "open", "coordinator", 68, 1, _cg_heartbeat("no-such-group", epoch=3), TOP,
         E.GROUP_ID_NOT_FOUND, "GroupMetadataManager.getOrMaybeCreateConsumerGroup (GroupIdNotFoundException)",
         xfail=CONSUMER_GROUPS_IN_MEMORY),
    _row("cg-heartbeat-refused-group", "locked", "any", 68, 1, _cg_heartbeat(), TOP, E.GROUP_AUTHORIZATION_FAILED,
         "KafkaApis.handleConsumerGroupHeartbeat (READ on the group)"),
    # ------------------------------------------------------ ConsumerGroupDescribe
    _row("cg-describe-not-coordinator", "open", "not_coordinator", 69, 0, _cg_describe(), GROUPS, E.NOT_COORDINATOR,
         "CoordinatorRuntime.scheduleReadOperation (NotCoordinatorException, per group)"),
    _row("cg-describe-unknown-group", "open", "coordinator", 69, 0, _cg_describe("no-such-group"), GROUPS,
         E.GROUP_ID_NOT_FOUND, "GroupMetadataManager.consumerGroupDescribe (GroupIdNotFoundException)"),
    _row("cg-describe-refused", "locked", "any", 69, 0, _cg_describe(), GROUPS, E.GROUP_AUTHORIZATION_FAILED,
         "KafkaApis.handleConsumerGroupDescribe (DESCRIBE on the group)"),
    # ------------------------------------------------------------ DeleteGroups
    _row("delete-groups-not-coordinator", "open", "not_coordinator", 42, 2, {"groups_names": [GROUP]}, CONFIGS,
         E.NOT_COORDINATOR, "GroupCoordinator.handleDeleteGroups (validateGroupStatus, per group)"),
    _row("delete-groups-unknown-group", "open", "coordinator", 42, 2, {"groups_names": ["no-such-group"]}, CONFIGS,
         E.GROUP_ID_NOT_FOUND, "GroupCoordinator.handleDeleteGroups (groupNotExists)"),
    _row("delete-groups-refused", "locked", "any", 42, 2, {"groups_names": [GROUP]}, CONFIGS,
         E.GROUP_AUTHORIZATION_FAILED, "KafkaApis.handleDeleteGroupsRequest (DELETE on the group)"),
    # ------------------------------------------------------------ OffsetDelete
    _row("offset-delete-not-coordinator", "open", "not_coordinator", 47, 0, _offset_delete(), TOP, E.NOT_COORDINATOR,
         "GroupCoordinatorService.deleteOffsets (NotCoordinatorException)"),
    _row("offset-delete-unknown-group", "open", "coordinator", 47, 0, _offset_delete("no-such-group"), TOP,
         E.GROUP_ID_NOT_FOUND, "OffsetMetadataManager.validateOffsetDelete (GroupIdNotFoundException)"),
    _row("offset-delete-empty-group-id", "open", "any", 47, 0, _offset_delete(""), TOP, E.INVALID_GROUP_ID,
         "GroupCoordinatorService.deleteOffsets (isGroupIdNotEmpty)"),
    _row("offset-delete-unknown-topic", "open", "coordinator", 47, 0, _offset_delete(topic=MISSING), DELREC,
         E.UNKNOWN_TOPIC_OR_PARTITION, "KafkaApis.handleOffsetDeleteRequest (metadataCache.contains)"),
    _row("offset-delete-refused", "locked", "any", 47, 0, _offset_delete(), TOP, E.GROUP_AUTHORIZATION_FAILED,
         "KafkaApis.handleOffsetDeleteRequest (DELETE on the group)"),
    # ----------------------------------------------------------- DeleteRecords
    _row("delete-records-not-leader", "open", "follower", 21, 2, _delete_records(), DELREC, E.NOT_LEADER_OR_FOLLOWER,
         "ReplicaManager.deleteRecordsOnLocalLog (getPartitionOrException)", ANY_BROKER_SERVES),
    _row("delete-records-unknown-topic", "open", "any", 21, 2, _delete_records(MISSING), DELREC,
         E.UNKNOWN_TOPIC_OR_PARTITION, "KafkaApis.handleDeleteRecordsRequest (metadataCache.contains)"),
    _row("delete-records-refused", "locked", "any", 21, 2, _delete_records(), DELREC, E.TOPIC_AUTHORIZATION_FAILED,
         "KafkaApis.handleDeleteRecordsRequest (DELETE on the topic)"),
    _row("delete-records-refused-missing", "locked", "any", 21, 2, _delete_records(MISSING), DELREC,
         E.TOPIC_AUTHORIZATION_FAILED, "KafkaApis.handleDeleteRecordsRequest (DELETE before existence)"),
    # ------------------------------------------------------------ CreateTopics
    _row("create-topics-invalid-name", "open", "any", 19, 7, _create(INVALID), CREATED, E.INVALID_TOPIC_EXCEPTION,
         "ReplicationControlManager.createTopics (Topic.validate: InvalidTopicException)"),
    _row("create-topics-exists", "open", "any", 19, 7, _create(TOPIC), CREATED, E.TOPIC_ALREADY_EXISTS,
         "ReplicationControlManager.createTopics (TOPIC_ALREADY_EXISTS)"),
    _row("create-topics-twice", "open", "any", 19, 7, _create("twice", "twice"), CREATED, E.INVALID_REQUEST,
         "KafkaApis.handleCreateTopicsRequest (Found multiple entries for this topic)"),
    _row("create-topics-refused", "locked", "any", 19, 7, _create("new-topic"), CREATED, E.TOPIC_AUTHORIZATION_FAILED,
         "KafkaApis.handleCreateTopicsRequest (CREATE on the cluster or topic)"),
    _row("create-topics-refused-existing", "locked", "any", 19, 7, _create(TOPIC), CREATED,
         E.TOPIC_AUTHORIZATION_FAILED, "KafkaApis.handleCreateTopicsRequest (CREATE before existence)"),
    _row("create-topics-unregistered-replica", "open", "any", 19, 7, _create_placed("placed-99", [99]), CREATED,
         E.INVALID_REPLICA_ASSIGNMENT, "ReplicationControlManager.validateManualPartitionAssignment"),
    _row("create-topics-assignment-and-count", "open", "any", 19, 7, _create_placed("placed-n", [99], 1), CREATED,
         E.INVALID_REQUEST, "ReplicationControlManager.createTopic (numPartitions was not set to -1)"),
    _row("create-topics-zero-timeout", "open", "any", 19, 7, {**_create("late"), "timeout": 0}, CREATED,
         E.REQUEST_TIMED_OUT, "KafkaEventQueue (deadline now + timeoutMs passed: TimeoutException)"),
    # ------------------------------------------------------------ DeleteTopics
    _row("delete-topics-unknown", "open", "any", 20, 6, _delete(MISSING), DELETED, E.UNKNOWN_TOPIC_OR_PARTITION,
         "KafkaApis.handleDeleteTopicsRequest (metadataCache.contains)"),
    _row("delete-topics-unknown-id", "open", "any", 20, 6, _delete(topic_id=UNKNOWN_ID), _topic_and_name("responses"),
         (E.UNKNOWN_TOPIC_ID, None), "KafkaApis.handleDeleteTopicsRequest (unresolvedTopicId)"),
    _row("delete-topics-refused", "locked", "any", 20, 6, _delete(TOPIC), DELETED, E.TOPIC_AUTHORIZATION_FAILED,
         "KafkaApis.handleDeleteTopicsRequest (DELETE before existence)"),
    _row("delete-topics-refused-missing", "locked", "any", 20, 6, _delete(MISSING), DELETED,
         E.TOPIC_AUTHORIZATION_FAILED, "KafkaApis.handleDeleteTopicsRequest (DELETE before existence)"),
    _row("delete-topics-refused-by-id", "locked", "any", 20, 6, lambda c: _delete(topic_id=c.topic_id),
         _topic_and_name("responses"), (E.TOPIC_AUTHORIZATION_FAILED, None),
         "KafkaApis.handleDeleteTopicsRequest (by id without DESCRIBE: the name is set to null)"),
    # --------------------------------------------------------- DescribeConfigs
    _row("describe-configs-unknown-topic", "open", "any", 32, 4, _configs(2, MISSING), CONFIGS,
         E.UNKNOWN_TOPIC_OR_PARTITION, "ConfigHelper.describeConfigs (metadataCache.contains)"),
    _row("describe-configs-invalid-topic", "open", "any", 32, 4, _configs(2, INVALID), CONFIGS,
         E.INVALID_TOPIC_EXCEPTION, "ConfigHelper.describeConfigs (Topic.validate)"),
    _row("describe-configs-other-broker", "open", "any", 32, 4, _configs(4, "99"), CONFIGS, E.INVALID_REQUEST,
         "ConfigHelper.describeConfigs (Unexpected broker id)"),
    _row("describe-configs-refused-topic", "locked", "any", 32, 4, _configs(2, TOPIC), CONFIGS,
         E.TOPIC_AUTHORIZATION_FAILED, "ConfigHelper.handleDescribeConfigsRequest (DESCRIBE_CONFIGS on the topic)"),
    _row("describe-configs-refused-missing", "locked", "any", 32, 4, _configs(2, MISSING), CONFIGS,
         E.TOPIC_AUTHORIZATION_FAILED, "ConfigHelper.handleDescribeConfigsRequest (before existence)"),
    _row("describe-configs-refused-broker", "locked", "any", 32, 4, _configs(4, ""), CONFIGS,
         E.CLUSTER_AUTHORIZATION_FAILED, "ConfigHelper.handleDescribeConfigsRequest (DESCRIBE_CONFIGS on the cluster)"),
    _row("describe-configs-refused-group", "locked", "any", 32, 4, _configs(32, GROUP), CONFIGS,
         E.GROUP_AUTHORIZATION_FAILED, "ConfigHelper.handleDescribeConfigsRequest (DESCRIBE_CONFIGS on the group)"),
    # ------------------------------------- IncrementalAlterConfigs, AlterConfigs
    _row("alter-configs-unknown-topic", "open", "any", 44, 1, _alter(MISSING), ALTERED,
         E.UNKNOWN_TOPIC_OR_PARTITION, "ConfigurationControlManager.validateAlterConfig (existenceChecker)"),
    _row("alter-configs-bad-value", "open", "any", 44, 1, _alter(TOPIC, value="soon"), ALTERED, E.INVALID_CONFIG,
         "ConfigurationControlManager.validateAlterConfig (ConfigException)"),
    _row("alter-configs-bad-value-unknown-topic", "open", "any", 44, 1, _alter(MISSING, value="soon"), ALTERED,
         E.INVALID_CONFIG, "ConfigurationControlManager.validateAlterConfig (validated before existence)"),
    _row("alter-configs-unknown-name", "open", "any", 44, 1, _alter(TOPIC, key="no.such"), ALTERED,
         E.INVALID_CONFIG, "LogConfig.validateNames (Unknown topic config name)"),
    _row("alter-configs-append-not-list", "open", "any", 44, 1, _alter(TOPIC, op=2), ALTERED, E.INVALID_CONFIG,
         "ConfigurationControlManager.incrementalAlterConfigResource (type is not LIST)"),
    _row("alter-configs-resource-twice", "open", "any", 44, 1, _alter(TOPIC, twice=True), ALTERED,
         E.INVALID_REQUEST, "ConfigAdminManager.preprocess (Each resource must appear at most once)"),
    _row("alter-configs-null-value", "open", "any", 44, 1, _alter(TOPIC, value=None), ALTERED, E.INVALID_REQUEST,
         "ConfigAdminManager.preprocess (Null value not supported)"),
    _row("alter-configs-other-broker", "open", "any", 44, 1, _alter("99", rtype=4), ALTERED, E.INVALID_REQUEST,
         "ConfigAdminManager.validateResourceNameIsCurrentNodeId"),
    _row("alter-configs-refused", "locked", "any", 44, 1, _alter(TOPIC), ALTERED, E.TOPIC_AUTHORIZATION_FAILED,
         "KafkaApis.handleIncrementalAlterConfigsRequest (ALTER_CONFIGS on the topic)"),
    _row("alter-configs-refused-missing", "locked", "any", 44, 1, _alter(MISSING), ALTERED,
         E.TOPIC_AUTHORIZATION_FAILED, "KafkaApis.handleIncrementalAlterConfigsRequest (before existence)"),
    _row("alter-configs-refused-group", "locked", "any", 44, 1, _alter(GROUP, rtype=32, key=SESSION, value="50000"),
         ALTERED, E.GROUP_AUTHORIZATION_FAILED, "AuthHelper.authorize (ALTER_CONFIGS on the group)"),
    _row("alter-configs-group-bounds", "open", "any", 44, 1, _alter(GROUP, rtype=32, key=SESSION, value="5000"),
         ALTERED, E.INVALID_CONFIG, "GroupConfig.validateValues (min.session.timeout.ms)"),
    _row("alter-configs-broker-static", "open", "any", 44, 1, _alter("", rtype=4, key="broker.id", value="7"),
         ALTERED, E.INVALID_REQUEST, "ConfigAdminManager.validateBrokerConfigChange (Cannot update dynamically)"),
    _row("alter-configs-broker-bad-value", "open", "any", 44, 1, _alter("", rtype=4, key="log.retention.ms",
         value="soon"), ALTERED, E.INVALID_REQUEST, "ConfigAdminManager.validateBrokerConfigChange (KAFKA-13609)"),
    _row("alter-configs-whole-unknown-topic", "open", "any", 33, 2, _alter_whole(MISSING), ALTERED,
         E.UNKNOWN_TOPIC_OR_PARTITION, "ConfigurationControlManager.legacyAlterConfigResource (existence)"),
    _row("alter-configs-whole-bad-value", "open", "any", 33, 2, _alter_whole(TOPIC, "-7"), ALTERED,
         E.INVALID_CONFIG, "ConfigurationControlManager.validateAlterConfig (ConfigException)"),
    _row("alter-configs-whole-refused", "locked", "any", 33, 2, _alter_whole(TOPIC), ALTERED,
         E.TOPIC_AUTHORIZATION_FAILED, "ControllerApis.handleLegacyAlterConfigs (ALTER_CONFIGS on the topic)"),
    # ---------------------------------------------------------- CreatePartitions
    _row("create-partitions-unknown-topic", "open", "any", 37, 3, _grow(MISSING, 64), GROWN,
         E.UNKNOWN_TOPIC_OR_PARTITION, "ReplicationControlManager.createPartitions (no such topic)"),
    _row("create-partitions-not-more", "open", "any", 37, 3, _grow(TOPIC, 1), GROWN, E.INVALID_PARTITIONS,
         "ReplicationControlManager.createPartition (the count must be greater than the current one)"),
    _row("create-partitions-refused", "locked", "any", 37, 3, _grow(TOPIC, 64), GROWN, E.TOPIC_AUTHORIZATION_FAILED,
         "ControllerApis.createPartitions (ALTER on the topic)"),
    # -------------------------------------------- Alter/ListPartitionReassignments
    _row("reassign-unknown-topic", "open", "any", 45, 0, _move(MISSING, [1]), MOVED, E.UNKNOWN_TOPIC_OR_PARTITION,
         "ReplicationControlManager.alterPartitionReassignment (Unable to find a topic)"),
    _row("reassign-cancel-none", "open", "any", 45, 0, _move(TOPIC, None), MOVED, E.NO_REASSIGNMENT_IN_PROGRESS,
         "ReplicationControlManager.cancelPartitionReassignment"),
    _row("reassign-unregistered", "open", "any", 45, 0, _move(TOPIC, [99]), MOVED, E.INVALID_REPLICA_ASSIGNMENT,
         "ReplicationControlManager.validateManualPartitionAssignment (no such broker is registered)"),
    _row("reassign-refused", "locked", "any", 45, 0, _move(TOPIC, [1]), TOP, E.CLUSTER_AUTHORIZATION_FAILED,
         "ControllerApis.handleAlterPartitionReassignments (ALTER on the cluster)"),
    _row("list-reassignments-refused", "locked", "any", 46, 0, {"timeout": 10_000, "topics": None}, TOP,
         E.CLUSTER_AUTHORIZATION_FAILED, "ControllerApis.handleListPartitionReassignments (DESCRIBE on the cluster)"),
    # ---------------------------------------------------------- InitProducerId
    _row("init-pid-empty-txn-id", "open", "txn_coordinator", 22, 4, _init(""), TOP, E.INVALID_REQUEST,
         "TransactionCoordinator.handleInitProducerId (transactionalId.isEmpty)"),
    _row("init-pid-not-coordinator", "open", "not_txn_coordinator", 22, 4, _init(TXN), TOP, E.NOT_COORDINATOR,
         "TransactionStateManager.getTransactionState (NOT_COORDINATOR)"),
    _row("init-pid-refused-idempotent", "locked", "any", 22, 4, _init(None), TOP, E.CLUSTER_AUTHORIZATION_FAILED,
         "KafkaApis.handleInitProducerIdRequest (IDEMPOTENT_WRITE or WRITE on some topic)"),
    _row("init-pid-refused-txn-id", "locked", "any", 22, 4, _init(TXN), TOP, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
         "KafkaApis.handleInitProducerIdRequest (WRITE on the transactional id)"),
    # ------------------------------------------------------ AddPartitionsToTxn
    _row("add-partitions-not-coordinator", "open", "not_txn_coordinator", 24, 3, _add_parts(), ADDED,
         E.NOT_COORDINATOR, "TransactionStateManager.getTransactionState (NOT_COORDINATOR)"),
    _row("add-partitions-unknown-txn-id", "open", "txn_coordinator", 24, 3, _add_parts("no-such-txn"), ADDED,
         E.INVALID_PRODUCER_ID_MAPPING, "TransactionCoordinator.handleAddPartitionsToTransaction (case None)"),
    _row("add-partitions-empty-txn-id", "open", "txn_coordinator", 24, 3, _add_parts(""), ADDED, E.INVALID_REQUEST,
         "TransactionCoordinator.handleAddPartitionsToTransaction (transactionalId.isEmpty)"),
    _row("add-partitions-unknown-topic", "open", "txn_coordinator", 24, 3, _add_parts(topic=MISSING), ADDED,
         E.UNKNOWN_TOPIC_OR_PARTITION, "KafkaApis.handleAddPartitionsToTxnRequest (metadataCache.contains)"),
    _row("add-partitions-refused", "locked", "any", 24, 3, _add_parts(), ADDED, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
         "KafkaApis.handleAddPartitionsToTxnRequest (WRITE on the transactional id)"),
    # -------------------------------------------------------- AddOffsetsToTxn
    _row("add-offsets-not-coordinator", "open", "not_txn_coordinator", 25, 3, _add_offsets(), TOP, E.NOT_COORDINATOR,
         "TransactionStateManager.getTransactionState (NOT_COORDINATOR)"),
    _row("add-offsets-unknown-txn-id", "open", "txn_coordinator", 25, 3, _add_offsets("no-such-txn"), TOP,
         E.INVALID_PRODUCER_ID_MAPPING, "TransactionCoordinator.handleAddPartitionsToTransaction (case None)"),
    _row("add-offsets-refused", "locked", "any", 25, 3, _add_offsets(), TOP, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
         "KafkaApis.handleAddOffsetsToTxnRequest (WRITE on the transactional id)"),
    # ------------------------------------------------------------------ EndTxn
    _row("end-txn-not-coordinator", "open", "not_txn_coordinator", 26, 3, _end(), TOP, E.NOT_COORDINATOR,
         "TransactionStateManager.getTransactionState (NOT_COORDINATOR)"),
    _row("end-txn-unknown-txn-id", "open", "txn_coordinator", 26, 3, _end("no-such-txn"), TOP,
         E.INVALID_PRODUCER_ID_MAPPING, "TransactionCoordinator.handleEndTransaction (case None)"),
    _row("end-txn-empty-txn-id", "open", "txn_coordinator", 26, 3, _end(""), TOP, E.INVALID_REQUEST,
         "TransactionCoordinator.handleEndTransaction (transactionalId.isEmpty)"),
    _row("end-txn-refused", "locked", "any", 26, 3, _end(), TOP, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
         "KafkaApis.handleEndTxnRequest (WRITE on the transactional id)"),
    # --------------------------------------------------------- TxnOffsetCommit
    _row("txn-commit-not-coordinator", "open", "not_coordinator", 28, 3, _txn_commit(), COMMIT, E.NOT_COORDINATOR,
         "CoordinatorRuntime.scheduleTransactionalWriteOperation (NotCoordinatorException)"),
    _row("txn-commit-empty-group", "open", "coordinator", 28, 3, _txn_commit(group=""), COMMIT, E.INVALID_GROUP_ID,
         "GroupCoordinatorService.commitTransactionalOffsets (isGroupIdNotEmpty)"),
    _row("txn-commit-unknown-topic", "open", "coordinator", 28, 3, _txn_commit(topic=MISSING), COMMIT,
         E.UNKNOWN_TOPIC_OR_PARTITION, "KafkaApis.handleTxnOffsetCommitRequest (metadataCache.contains)"),
    _row("txn-commit-refused", "locked", "any", 28, 3, _txn_commit(), COMMIT, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
         "KafkaApis.handleTxnOffsetCommitRequest (WRITE on the transactional id)"),
    # ---------------------------------------------- Describe/ListTransactions
    _row("describe-txn-unknown", "open", "txn_coordinator", 65, 0, {"transactional_ids": ["no-such-txn"]},
         DESCRIBED_TXN, E.TRANSACTIONAL_ID_NOT_FOUND,
         "TransactionCoordinator.handleDescribeTransactions (Right(None))"),
    _row("describe-txn-not-coordinator", "open", "not_txn_coordinator", 65, 0, {"transactional_ids": [TXN]},
         DESCRIBED_TXN, E.NOT_COORDINATOR, "TransactionStateManager.getTransactionState (NOT_COORDINATOR)"),
    _row("describe-txn-empty-id", "open", "txn_coordinator", 65, 0, {"transactional_ids": [""]}, DESCRIBED_TXN,
         E.INVALID_REQUEST, "TransactionCoordinator.handleDescribeTransactions (transactionalId.isEmpty)"),
    _row("describe-txn-refused", "locked", "any", 65, 0, {"transactional_ids": [TXN]}, DESCRIBED_TXN,
         E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "KafkaApis.handleDescribeTransactionsRequest (DESCRIBE)"),
    _row("list-txn-refused", "locked", "any", 66, 1, {"state_filters": [], "producer_id_filters": []},
         lambda b: (Errors(int(b.error_code)), list(b.transaction_states)), (E.NONE, []),
         "KafkaApis.handleListTransactionsRequest (ids without DESCRIBE are left out)"),
    # -------------------------------------------------------------------- ACLs
    _row("describe-acls-no-authorizer", "open", "any", 29, 3, _ANY_ACL, TOP, E.SECURITY_DISABLED,
         "AclApis.handleDescribeAcls (authorizer None: SECURITY_DISABLED)"),
    _row("create-acls-no-authorizer", "open", "any", 30, 3, {"creations": [_ACL]}, ACL_CREATED, E.SECURITY_DISABLED,
         "AclApis.handleCreateAcls (authorizer None)"),
    _row("delete-acls-no-authorizer", "open", "any", 31, 3, {"filters": [_ANY_ACL]}, ACL_DELETED, E.SECURITY_DISABLED,
         "AclApis.handleDeleteAcls (authorizer None)"),
    _row("describe-acls-refused", "locked", "any", 29, 3, _ANY_ACL, TOP, E.CLUSTER_AUTHORIZATION_FAILED,
         "AclApis.handleDescribeAcls (DESCRIBE on the cluster)"),
    _row("create-acls-refused", "locked", "any", 30, 3, {"creations": [_ACL]}, ACL_CREATED,
         E.CLUSTER_AUTHORIZATION_FAILED, "AclApis.handleCreateAcls (ALTER on the cluster)"),
    _row("delete-acls-refused", "locked", "any", 31, 3, {"filters": [_ANY_ACL]}, ACL_DELETED,
         E.CLUSTER_AUTHORIZATION_FAILED, "AclApis.handleDeleteAcls (ALTER on the cluster)"),
    # ------------------------------------------------------------------- SCRAM
    _row("describe-scram-refused", "locked", "any", 50, 0, {"users": [{"name": "alice"}]}, TOP,
         E.CLUSTER_AUTHORIZATION_FAILED, "KafkaApis.handleDescribeUserScramCredentialsRequest (DESCRIBE on cluster)"),
    _row("alter-scram-refused", "locked", "any", 51, 0, {"deletions": [{"name": "alice", "mechanism": 1}],
         "upsertions": []}, SCRAM_ALTERED, E.CLUSTER_AUTHORIZATION_FAILED,
         "KafkaApis.handleAlterUserScramCredentialsRequest (ALTER on the cluster)"),
]  # fmt: skip


@pytest.mark.parametrize("row", ROWS)
def test_the_code_is_kafkas(clusters: dict[str, Ctx], row: Row) -> None:
    ctx = clusters[row.cluster]
    body = _ask(ctx.ports[row.target], row.api, row.version, row.data(ctx))
    assert row.got(body) == row.expected, f"{row.id}: Kafka answers {row.expected} ({row.kafka})"


def test_every_served_api_has_a_row() -> None:
    """The table covers each API the front end serves, except the version
    and SASL handshakes (answered before any id or right matters)."""
    from partlog.kafka_front.apis import SUPPORTED_VERSIONS

    covered = {p.values[0].api for p in ROWS}
    assert set(SUPPORTED_VERSIONS) - covered == {17, 18, 36}


NO_LEAK = [
    (3, 12, lambda n: _md(n, auto=True)),
    (0, 9, _produce),
    (1, 12, _fetch),
    (2, 7, _list_offsets),
    (23, 4, _epoch),
    (8, 8, lambda n: _commit(topic=n)),
    (21, 2, _delete_records),
    (19, 7, lambda n: _create(n)),
    (20, 6, lambda n: _delete(n)),
    (32, 4, lambda n: _configs(2, n)),
    (44, 1, _alter),
    (33, 2, _alter_whole),
    (24, 3, lambda n: _add_parts(topic=n)),
    (28, 3, lambda n: _txn_commit(topic=n)),
]


@pytest.mark.parametrize(("api", "version", "data"), NO_LEAK, ids=[str(a) for a, _, _ in NO_LEAK])
def test_without_rights_a_topic_that_exists_is_answered_as_one_that_does_not(
    clusters: dict[str, Ctx], api: int, version: int, data: Callable[[str], dict[str, Any]]
) -> None:
    """Byte for byte, but for the name: nothing in the answer tells them apart."""
    port = clusters["locked"].ports["any"]
    twin = "x" * len(TOPIC)  # a missing topic whose name is as long
    frames = []
    for name in (TOPIC, twin):
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            s.sendall(kio_request(api, version, 7, data(name)))
            frames.append(read_frame(s))
    assert frames[0] is not None and frames[1] is not None
    assert frames[0].replace(TOPIC.encode(), twin.encode()) == frames[1]
