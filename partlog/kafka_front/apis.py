"""The Kafka APIs a broker's front end serves, mapped onto the broker.

Each handler takes the kio request entity of whatever version the client
sent and returns a mapping of plain values; :func:`partlog.kafka_front.codec.build`
turns it into that version's response (fields a version lacks are dropped).
Nothing here does I/O of its own: produce, fetch and ListOffsets go through
the broker's port (:class:`partlog.kafka_front.port.BrokerPort`), which
routes them to the partitions' leaders and replicas.

Routing (KIP-1163): a client that names its AZ (``diskless_az=<az>`` in its
client id, or the rack id of an earlier fetch on the same connection) is
given, as each partition's leader, the produce representative of that
leader in its own AZ.  Any broker accepts produce for any partition, and
fetches and ListOffsets for partitions a broker holds no replica of are
forwarded to one that does.
"""

from __future__ import annotations

import asyncio
import logging
import re
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from partlog.client import parse_records
from partlog.groups.membership import INITIAL_REBALANCE_DELAY_MS_DEFAULT
from partlog.kafka.errors import Errors
from partlog.kafka.leader_epochs import diverging_epoch
from partlog.kafka.records import FindBatchRequest, ListOffsetsRequest, TopicIdPartition
from partlog.kafka_front.group_coordinator import OFFSETS_TOPIC, OFFSETS_TOPIC_PARTITIONS_DEFAULT, GroupCoordinator
from partlog.kafka_front.port import BrokerPort

if TYPE_CHECKING:
    from partlog.controller.cluster_meta import TopicInfo

log = logging.getLogger(__name__)

# Kafka's message.max.bytes default (1 MiB + record-batch overhead): a larger
# batch is answered MESSAGE_TOO_LARGE.
MESSAGE_MAX_BYTES_DEFAULT = 1_048_588
# Kafka's num.partitions and the replication factor a topic created without
# one gets (Kafka's default.replication.factor is 1; three AZs want 3).
NUM_PARTITIONS_DEFAULT = 1
DEFAULT_REPLICATION_FACTOR = 3
# Kafka's replica.fetch.wait.max.ms bound on a consumer's max_wait_ms here.
FETCH_MAX_WAIT_MS_MAX = 30_000
# Kafka's fetch.max.bytes broker default: the most one fetch answers.
FETCH_MAX_BYTES = 55 * 1024 * 1024
# ListOffsets by timestamp reads one batch per partition to find the exact
# record: at most this many per request, this many at once per listener.
EXACT_LOOKUPS_MAX = 1_000
EXACT_LOOKUPS_IN_FLIGHT = 16
# Topics clients may not write, delete records of, create or delete.
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC})
# Produce timeouts beyond this are cut to it (Kafka has no cap; ours bounds
# how long a request holds its connection's slot).
PRODUCE_TIMEOUT_MS_MAX = 300_000

_AZ_IN_CLIENT_ID = re.compile(r"(?:^|[,;\s])diskless_az=([A-Za-z0-9._-]{1,64})")

# The versions served (see design.md "Kafka front end").
SUPPORTED_VERSIONS: dict[int, tuple[int, int]] = {
    0: (3, 11),  # Produce
    1: (4, 12),  # Fetch
    2: (1, 7),  # ListOffsets
    3: (0, 12),  # Metadata
    18: (0, 4),  # ApiVersions
    8: (2, 8),  # OffsetCommit
    9: (1, 7),  # OffsetFetch
    10: (0, 4),  # FindCoordinator
    11: (0, 7),  # JoinGroup
    12: (0, 4),  # Heartbeat
    13: (0, 5),  # LeaveGroup
    14: (0, 5),  # SyncGroup
    15: (0, 5),  # DescribeGroups
    16: (0, 4),  # ListGroups
    19: (2, 7),  # CreateTopics
    20: (1, 6),  # DeleteTopics
    21: (0, 2),  # DeleteRecords
    22: (0, 4),  # InitProducerId
    23: (2, 4),  # OffsetForLeaderEpoch
    32: (1, 4),  # DescribeConfigs
}


@dataclass(frozen=True, slots=True)
class FrontConfig:
    """Limits and defaults of one broker's Kafka listener."""

    message_max_bytes: int = MESSAGE_MAX_BYTES_DEFAULT
    auto_create_topics_enable: bool = True
    num_partitions: int = NUM_PARTITIONS_DEFAULT
    default_replication_factor: int = DEFAULT_REPLICATION_FACTOR
    offsets_topic_num_partitions: int = OFFSETS_TOPIC_PARTITIONS_DEFAULT
    group_initial_rebalance_delay_ms: int = INITIAL_REBALANCE_DELAY_MS_DEFAULT

    def __post_init__(self) -> None:
        if type(self.group_initial_rebalance_delay_ms) is not int or self.group_initial_rebalance_delay_ms < 0:
            raise ValueError(
                "Kafka listener: group_initial_rebalance_delay_ms must be an integer >= 0, "
                f"got {self.group_initial_rebalance_delay_ms!r}"
            )
        for name in (
            "message_max_bytes",
            "num_partitions",
            "default_replication_factor",
            "offsets_topic_num_partitions",
        ):
            v = getattr(self, name)
            if type(v) is not int or v <= 0:
                raise ValueError(f"Kafka listener: {name} must be a positive integer, got {v!r}")


def client_az(client_id: str | None) -> str | None:
    """The AZ a client names in its client id (KIP-1163's ``diskless_az=``)."""
    if not client_id:
        return None
    m = _AZ_IN_CLIENT_ID.search(client_id)
    return m.group(1) if m else None


@dataclass(slots=True)
class Session:
    """What one connection has told us about its client."""

    peer: str
    az: str | None = None


def _ms(value: Any) -> int:
    """Milliseconds of a kio duration (a timedelta) or a plain int."""
    if hasattr(value, "total_seconds"):
        return int(value.total_seconds() * 1000)
    return int(value)


def _kafka_error(e: Errors) -> int:
    """The code a Kafka client gets for ``e``.  partlog's own codes (outside
    Kafka's range) and NETWORK_EXCEPTION (a commit RPC to another broker
    failed; Kafka's brokers never answer it, and librdkafka takes it from a
    broker as fatal) become Kafka's retriable "maybe written" timeout: the
    producer retries and idempotence removes the duplicate."""
    if e >= 10_000 or e == Errors.NETWORK_EXCEPTION:
        return int(Errors.REQUEST_TIMED_OUT)
    return int(e)


class KafkaApis:
    """The handlers of one broker's Kafka listener."""

    def __init__(
        self, broker: BrokerPort, config: FrontConfig | None = None, listener_configs: Mapping[str, str] | None = None
    ) -> None:
        self.broker = broker
        self.config = config or FrontConfig()
        # The listener's limits by their Kafka names (DescribeConfigs).
        self.listener_configs = dict(listener_configs or {})
        self._exact_slots = asyncio.Semaphore(EXACT_LOOKUPS_IN_FLIGHT)
        self.groups = GroupCoordinator(
            broker,
            offsets_partitions=self.config.offsets_topic_num_partitions,
            initial_rebalance_delay_ms=self.config.group_initial_rebalance_delay_ms,
        )
        self.handlers: dict[int, Callable[[Any, Any, Session], Awaitable[Mapping[str, Any] | None]]] = {
            0: self.produce,
            1: self.fetch,
            2: self.list_offsets,
            3: self.metadata,
            18: self.api_versions,
            19: self.create_topics,
            22: self.init_producer_id,
            8: self.offset_commit,
            9: self.offset_fetch,
            10: self.find_coordinator,
            11: self.join_group,
            12: self.heartbeat,
            13: self.leave_group,
            14: self.sync_group,
            15: self.describe_groups,
            16: self.list_groups,
            20: self.delete_topics,
            21: self.delete_records,
            23: self.offset_for_leader_epoch,
            32: self.describe_configs,
        }

    # ----------------------------------------------------------- metadata

    def _topics_by_name(self) -> dict[str, TopicInfo]:
        return {t.name: t for t in self.broker.metadata.topics()}

    def _tp(self, name: str | None, partition: int) -> TopicIdPartition | None:
        """The partition ``name``/``partition`` names, from the broker's
        index of topics by name (rebuilt when the metadata changes, not per
        request), or None when there is no such partition."""
        t = self.broker.topic_index.get(name) if name is not None else None
        if t is None or not 0 <= partition < t[1]:
            return None
        return TopicIdPartition(t[0], partition)

    async def api_versions(self, req: Any, body: Any, session: Session) -> Mapping[str, Any]:
        keys = [
            {"api_key": k, "min_version": lo, "max_version": hi} for k, (lo, hi) in sorted(SUPPORTED_VERSIONS.items())
        ]
        if req.unsupported is not None:
            return {"error_code": int(Errors.UNSUPPORTED_VERSION), "api_keys": keys, "throttle_time": 0}
        return {"error_code": 0, "api_keys": keys, "throttle_time": 0}

    async def metadata(self, req: Any, body: Any, session: Session) -> Mapping[str, Any]:
        meta = self.broker.metadata
        az = client_az(req.client_id) or session.az
        listening = {b.broker_id: b for b in meta.brokers() if b.kafka_port}
        brokers = [
            {"node_id": b.broker_id, "host": b.host, "port": b.kafka_port, "rack": b.az} for b in listening.values()
        ]
        topics = self._topics_by_name()
        asked: list[str] | None
        if body.topics is None or (req.api_version == 0 and not body.topics):
            asked = None
        else:
            asked = []
            by_id = {t.topic_id: t.name for t in topics.values()}
            for t in body.topics:
                name = getattr(t, "name", None)
                if name is None:
                    tid = getattr(t, "topic_id", None)
                    name = by_id.get(tid) if tid is not None else None
                asked.append(name if name is not None else "")
        auto_create = bool(getattr(body, "allow_auto_topic_creation", True)) and self.config.auto_create_topics_enable
        if asked is not None and auto_create:
            missing = [n for n in dict.fromkeys(asked) if n and n not in topics]
            if OFFSETS_TOPIC in missing:
                # As Kafka: the offsets topic is made with its own shape.
                missing.remove(OFFSETS_TOPIC)
                await self.groups.ensure_offsets_topic()
            if missing:
                await self._create({n: (self.config.num_partitions, -1) for n in missing})
            topics = self._topics_by_name()
        out = []
        for name in sorted(topics) if asked is None else asked:
            t = topics.get(name)
            if t is None:
                out.append(
                    {
                        "error_code": int(Errors.UNKNOWN_TOPIC_OR_PARTITION),
                        "name": name,
                        "topic_id": uuid.UUID(int=0),
                        "is_internal": False,
                        "partitions": [],
                    }
                )
                continue
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
            out.append(
                {
                    "error_code": 0,
                    "name": name,
                    "topic_id": t.topic_id,
                    "is_internal": name in INTERNAL_TOPICS,
                    "partitions": parts,
                }
            )
        cluster_id = meta.cluster_id
        return {
            "throttle_time": 0,
            "brokers": brokers,
            "cluster_id": str(cluster_id) if cluster_id is not None else None,
            # No KRaft controller is visible to clients; Kafka clients only
            # need an id here (admin requests go to any broker).
            "controller_id": self.broker.broker_id,
            "topics": out,
        }

    async def _create(self, topics: Mapping[str, tuple[int, int]]) -> dict[str, Any]:
        """Create ``{name: (partitions, replication_factor)}`` through the
        controller; -1 means the default.  Per topic: the TopicInfo or the error."""
        create = getattr(self.broker.metadata, "create_topics", None)
        if create is None:
            return dict.fromkeys(topics, Errors.INVALID_REQUEST)
        live = len(self.broker.metadata.brokers())
        shaped = {
            n: (
                self.config.num_partitions if p == -1 else p,
                min(self.config.default_replication_factor, max(1, live)) if rf == -1 else rf,
            )
            for n, (p, rf) in topics.items()
        }
        answer: dict[str, Any] = await create(shaped)
        return answer

    async def create_topics(self, req: Any, body: Any, session: Session) -> Mapping[str, Any]:
        results = []
        wanted: dict[str, tuple[int, int]] = {}
        refused: dict[str, tuple[Errors, str]] = {}
        named = Counter(t.name for t in body.topics)
        for t in body.topics:
            if named[t.name] > 1:
                # As Kafka: a name given twice is refused, and not created.
                refused[t.name] = (Errors.INVALID_REQUEST, "topic named twice in one request")
            elif t.name in INTERNAL_TOPICS:
                refused[t.name] = (Errors.INVALID_REQUEST, f"{t.name} is internal: the group coordinator makes it")
            elif t.assignments:
                refused[t.name] = (Errors.INVALID_REQUEST, "manual replica assignments are not supported")
            elif t.configs:
                refused[t.name] = (Errors.INVALID_CONFIG, "topic configs at creation are not supported yet")
            else:
                wanted[t.name] = (t.num_partitions, t.replication_factor)
        if getattr(self.broker.metadata, "create_topics", None) is None:
            for n in wanted:
                refused[n] = (Errors.INVALID_REQUEST, "this cluster's topics come from its static cluster file")
            wanted = {}
        answers: dict[str, Any] = {}
        if wanted and not getattr(body, "validate_only", False):
            answers = await self._create(wanted)
        for t in body.topics:
            if t.name in refused:
                err, msg = refused[t.name]
                results.append(_created(t.name, err, msg))
                continue
            a = answers.get(t.name)
            if a is None:  # validate_only
                results.append(_created(t.name, Errors.NONE, None, partitions=t.num_partitions))
            elif isinstance(a, Errors):
                results.append(_created(t.name, a, f"{a.name.lower()}"))
            else:
                rf = len(a.partitions[0].replicas) if a.partitions else -1
                results.append(_created(t.name, Errors.NONE, None, a.topic_id, a.num_partitions, rf))
        return {"throttle_time": 0, "topics": results}

    async def delete_topics(self, req: Any, body: Any, session: Session) -> Mapping[str, Any]:
        topics = self._topics_by_name()
        by_id = {t.topic_id: t.name for t in topics.values()}
        if req.api_version >= 6:
            asked = [(t.name if t.name is not None else by_id.get(t.topic_id), t.topic_id) for t in body.topics]
        else:
            asked = [(n, None) for n in body.topic_names]
        delete = getattr(self.broker.metadata, "delete_topics", None)
        refused: dict[str, tuple[Errors, str]] = {}
        wanted: list[str] = []
        named = Counter(name for name, _ in asked)
        for name, _ in asked:
            if name is None or name not in topics:
                continue
            if named[name] > 1:
                refused[name] = (Errors.INVALID_REQUEST, "topic named twice in one request")
            elif name in INTERNAL_TOPICS:
                refused[name] = (Errors.INVALID_REQUEST, f"{name} is an internal topic")
            elif delete is None:
                refused[name] = (Errors.INVALID_REQUEST, "this cluster's topics come from its static cluster file")
            elif name not in wanted:
                wanted.append(name)
        answers: dict[str, Any] = await delete(wanted) if wanted and delete is not None else {}
        out = []
        for name, tid in asked:
            row: dict[str, Any] = {"name": name, "topic_id": tid or uuid.UUID(int=0), "error_message": None}
            if name is None or name not in topics:
                row["error_code"] = int(
                    Errors.UNKNOWN_TOPIC_ID if tid is not None else Errors.UNKNOWN_TOPIC_OR_PARTITION
                )
            elif name in refused:
                err, why = refused[name]
                row.update(error_code=int(err), error_message=why)
            else:
                a = answers.get(name)
                if isinstance(a, uuid.UUID):
                    row.update(error_code=0, topic_id=a)
                else:
                    err = a if isinstance(a, Errors) else Errors.UNKNOWN_SERVER_ERROR
                    row.update(error_code=_kafka_error(err))
            out.append(row)
        return {"throttle_time": 0, "responses": out}

    async def init_producer_id(self, req: Any, body: Any, session: Session) -> Mapping[str, Any]:
        if body.transactional_id is not None:
            return {
                "throttle_time": 0,
                "error_code": int(Errors.INVALID_REQUEST),
                "producer_id": -1,
                "producer_epoch": -1,
            }
        # As Kafka for an idempotent producer: a new id with epoch 0, also
        # when the client names its old one (KIP-360's bump).
        pid = await self.broker.init_producer_id()
        if pid is None:
            return {
                "throttle_time": 0,
                "error_code": int(Errors.COORDINATOR_NOT_AVAILABLE),
                "producer_id": -1,
                "producer_epoch": -1,
            }
        return {"throttle_time": 0, "error_code": 0, "producer_id": pid, "producer_epoch": 0}

    # ------------------------------------------------------------ produce

    async def produce(self, req: Any, body: Any, session: Session) -> Mapping[str, Any] | None:
        acks = int(body.acks)
        timeout_ms = min(max(1, _ms(body.timeout)), PRODUCE_TIMEOUT_MS_MAX)
        answers: dict[tuple[str, int], dict[str, Any]] = {}
        batches: list[tuple[TopicIdPartition, bytes]] = []
        keys: list[tuple[str, int]] = []
        seen: set[tuple[str, int]] = set()
        for td in body.topic_data:
            for pd in td.partition_data:
                key = (td.name, int(pd.index))
                tp = self._tp(td.name, key[1])
                error: Errors | None = None
                message = None
                records = pd.records
                if key in seen:
                    error, message = Errors.INVALID_REQUEST, "partition named twice in one request"
                elif acks not in (0, 1, -1):
                    error, message = Errors.INVALID_REQUIRED_ACKS, f"acks {acks}"
                elif body.transactional_id is not None:
                    error, message = Errors.INVALID_REQUEST, "transactions are not supported"
                elif tp is None:
                    error = Errors.UNKNOWN_TOPIC_OR_PARTITION
                elif td.name in INTERNAL_TOPICS:
                    # As Kafka: clients cannot append to internal topics (a
                    # forged offsets record would reach every group's load).
                    error, message = Errors.INVALID_TOPIC_EXCEPTION, f"cannot append to internal topic {td.name}"
                elif not records:
                    error, message = Errors.INVALID_RECORD, "no record batch"
                elif len(records) > self.config.message_max_bytes:
                    error = Errors.MESSAGE_TOO_LARGE
                    message = f"batch of {len(records)} bytes > message.max.bytes {self.config.message_max_bytes}"
                seen.add(key)
                if error is not None:
                    answers[key] = _produced(key[1], error, message)
                else:
                    assert tp is not None
                    batches.append((tp, bytes(records)))
                    keys.append(key)
        if batches:
            results = await self.broker.produce(batches, acks=acks, timeout_ms=timeout_ms)
            for key, r in zip(keys, results, strict=True):
                answers[key] = _produced(
                    key[1], r.error, r.error_message, r.base_offset, r.log_append_time, r.log_start_offset
                )
        if acks == 0:
            return None  # Kafka sends no answer to an acks=0 produce
        responses: dict[str, list[dict[str, Any]]] = {}
        for (name, _), a in answers.items():
            responses.setdefault(name, []).append(a)
        return {
            "responses": [{"name": n, "partition_responses": ps} for n, ps in responses.items()],
            "throttle_time": 0,
        }

    # -------------------------------------------------------------- fetch

    async def fetch(self, req: Any, body: Any, session: Session) -> Mapping[str, Any]:
        meta = self.broker.metadata
        rack = getattr(body, "rack_id", "") or None
        if rack:
            session.az = rack
        if getattr(body, "session_id", 0) != 0 or getattr(body, "session_epoch", -1) > 0:
            # We never hand out fetch sessions (the answer's session id is
            # 0), so an incremental fetch names one we do not have.
            return {"throttle_time": 0, "error_code": int(Errors.FETCH_SESSION_ID_NOT_FOUND), "session_id": 0,
                    "responses": []}  # fmt: skip
        max_wait_ms = min(max(0, _ms(body.max_wait)), FETCH_MAX_WAIT_MS_MAX)
        # Kafka's fetch.max.bytes caps what a client asks (55 MiB).
        max_bytes = min(max(1, int(getattr(body, "max_bytes", FETCH_MAX_BYTES))), FETCH_MAX_BYTES)
        asked: list[tuple[str, Any, TopicIdPartition | None, Errors | None]] = []
        for ft in body.topics:
            for fp in ft.partitions:
                tp = self._tp(ft.topic, int(fp.partition))
                error: Errors | None = None
                if tp is None:
                    error = Errors.UNKNOWN_TOPIC_OR_PARTITION
                else:
                    info = meta.partition(tp)
                    cle = int(getattr(fp, "current_leader_epoch", -1))
                    if info is not None and cle >= 0 and cle != info.leader_epoch:
                        error = Errors.FENCED_LEADER_EPOCH if cle < info.leader_epoch else Errors.UNKNOWN_LEADER_EPOCH
                asked.append((ft.topic, fp, tp, error))
        reqs = [
            FindBatchRequest(tp, int(fp.fetch_offset), min(max(1, int(fp.partition_max_bytes)), FETCH_MAX_BYTES))
            for _, fp, tp, err in asked
            if err is None and tp is not None
        ]
        answers = await self.broker.fetch_routed(
            reqs, max_wait_ms=max_wait_ms, min_bytes=int(body.min_bytes), max_bytes=max_bytes, az=session.az
        )
        it = iter(answers)
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for name, fp, tp, err in asked:
            part: dict[str, Any] = {
                "partition_index": int(fp.partition),
                "high_watermark": -1,
                "last_stable_offset": -1,
                "log_start_offset": -1,
                "aborted_transactions": None,
                "preferred_read_replica": -1,
                "records": b"",
            }
            if err is not None:
                part["error_code"] = int(err)
            else:
                code, hwm, lso, records, _message = next(it)
                part.update(
                    error_code=_kafka_error(_to_error(code)),
                    high_watermark=hwm,
                    last_stable_offset=hwm,
                    log_start_offset=lso,
                    records=records,
                )
                last_epoch = int(getattr(fp, "last_fetched_epoch", -1))
                if code == 0 and last_epoch >= 0 and req.api_version >= 12 and tp is not None:
                    diverging = self._diverging(tp, last_epoch, int(fp.fetch_offset))
                    if diverging is not None:
                        part.update(diverging_epoch={"epoch": diverging[0], "end_offset": diverging[1]}, records=b"")
            by_topic.setdefault(name, []).append(part)
        return {
            "throttle_time": 0,
            "error_code": 0,
            "session_id": 0,
            "responses": [{"topic": n, "partitions": ps} for n, ps in by_topic.items()],
        }

    def _diverging(self, tp: TopicIdPartition, last_fetched_epoch: int, fetch_offset: int) -> tuple[int, int] | None:
        """Kafka's check on a v12+ fetch: the (epoch, end offset) the
        consumer must truncate to when its last fetched epoch ends before
        its fetch offset in this replica's log; None when it does not (or
        this broker holds no replica to judge by)."""
        broker = self.broker
        if not broker.serves(tp):
            return None
        end = diverging_epoch(
            broker.leader_epoch_cache(tp), broker.log_end_offset(tp), fetch_offset, last_fetched_epoch
        )
        return None if end is None else (end.leader_epoch, end.end_offset)

    async def list_offsets(self, req: Any, body: Any, session: Session) -> Mapping[str, Any]:
        meta = self.broker.metadata
        asked: list[tuple[str, Any, TopicIdPartition | None, Errors | None]] = []
        for t in body.topics:
            for p in t.partitions:
                tp = self._tp(t.name, int(p.partition_index))
                err = None if tp is not None else Errors.UNKNOWN_TOPIC_OR_PARTITION
                if tp is not None:
                    info = meta.partition(tp)
                    cle = int(getattr(p, "current_leader_epoch", -1))
                    if info is not None and cle >= 0 and cle != info.leader_epoch:
                        err = Errors.FENCED_LEADER_EPOCH if cle < info.leader_epoch else Errors.UNKNOWN_LEADER_EPOCH
                    elif int(p.timestamp) < -3:
                        err = Errors.UNSUPPORTED_VERSION  # -4/-5 (tiered storage) need v8+
                asked.append((t.name, p, tp, err))
        reqs = [ListOffsetsRequest(tp, int(p.timestamp)) for _, p, tp, err in asked if err is None and tp is not None]
        found = await self.broker.list_offsets_routed(reqs)
        # Exact lookups read one batch each: at most EXACT_LOOKUPS_MAX per
        # request, EXACT_LOOKUPS_IN_FLIGHT at a time; beyond, the batch's
        # base offset stands (design.md).
        exact = [self._exact(r, a) if i < EXACT_LOOKUPS_MAX else _ready(a)
                 for i, (r, a) in enumerate(zip(reqs, found, strict=True))]  # fmt: skip
        found = list(await asyncio.gather(*exact))
        answers = iter(found)
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for name, p, tp, err in asked:
            part: dict[str, Any] = {"partition_index": int(p.partition_index), "timestamp": -1, "offset": -1}
            if err is not None:
                part["error_code"] = int(err)
            else:
                code, ts, off = next(answers)
                info = meta.partition(tp) if tp is not None else None
                part.update(error_code=_kafka_error(code), timestamp=ts, offset=off,
                            leader_epoch=info.leader_epoch if info is not None else -1)  # fmt: skip
            by_topic.setdefault(name, []).append(part)
        return {"throttle_time": 0, "topics": [{"name": n, "partitions": ps} for n, ps in by_topic.items()]}

    async def _exact(self, req: ListOffsetsRequest, answer: tuple[Errors, int, int]) -> tuple[Errors, int, int]:
        """Kafka's answer to a lookup by timestamp is the first RECORD at or
        after it; the store knows batches only (design.md), so the batch it
        names is read and its records searched.  When the batch cannot be
        read or decoded, the batch's base offset stands (a few records early)."""
        error, _, offset = answer
        if req.timestamp < 0 or error != Errors.NONE or offset < 0:
            return answer
        async with self._exact_slots:
            [(code, _hwm, _lso, records, _msg)] = await self.broker.fetch_routed(
                [FindBatchRequest(req.topic_id_partition, offset, 1)], max_wait_ms=0, min_bytes=0, max_bytes=1
            )
        if code != 0:
            return answer
        try:
            for r in parse_records(req.topic_id_partition, records, offset):
                if r.timestamp >= req.timestamp:
                    return Errors.NONE, r.timestamp, r.offset
        except Exception as e:  # a codec this process lacks, a damaged batch: the batch's answer stands
            log.info("ListOffsets of %s: batch at %d not searched: %s", req.topic_id_partition, offset, e)
        return answer

    async def delete_records(self, req: Any, body: Any, session: Session) -> Mapping[str, Any]:
        asked: list[tuple[str, int, TopicIdPartition | None, int]] = []
        for t in body.topics:
            for p in t.partitions:
                asked.append((t.name, int(p.partition_index), self._tp(t.name, int(p.partition_index)),
                              int(p.offset)))  # fmt: skip

        def refusal(name: str, tp: TopicIdPartition | None, offset: int) -> Errors | None:
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
                part = {"partition_index": index, "low_watermark": low, "error_code": _kafka_error(_to_error(err))}
            by_topic.setdefault(name, []).append(part)
        return {"throttle_time": 0, "topics": [{"name": n, "partitions": ps} for n, ps in by_topic.items()]}

    async def offset_for_leader_epoch(self, req: Any, body: Any, session: Session) -> Mapping[str, Any]:
        asked: list[tuple[str, int, TopicIdPartition | None, int, int]] = []
        for t in body.topics:
            for p in t.partitions:
                tp = self._tp(t.topic, int(p.partition))
                asked.append((t.topic, int(p.partition), tp, int(getattr(p, "current_leader_epoch", -1)),
                              int(p.leader_epoch)))  # fmt: skip
        items = [(tp, [cur, epoch]) for _, _, tp, cur, epoch in asked if tp is not None]
        failed = [int(Errors.NOT_LEADER_OR_FOLLOWER), -1, -1]
        rows = iter(await self.broker.on_leaders("offset_for_leader_epoch", items, failed))
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for name, index, tp, _, _ in asked:
            if tp is None:
                err, epoch, end = int(Errors.UNKNOWN_TOPIC_OR_PARTITION), -1, -1
            else:
                err, epoch, end = next(rows)
            by_topic.setdefault(name, []).append(
                {"partition": index, "error_code": _kafka_error(_to_error(err)), "leader_epoch": epoch,
                 "end_offset": end}
            )  # fmt: skip
        return {"throttle_time": 0, "topics": [{"topic": n, "partitions": ps} for n, ps in by_topic.items()]}

    async def describe_configs(self, req: Any, body: Any, session: Session) -> Mapping[str, Any]:
        results = []
        topics = self._topics_by_name()
        for r in body.resources:
            rtype, name = int(r.resource_type), r.resource_name
            base = {"resource_type": rtype, "resource_name": name, "error_message": None, "configs": []}
            if rtype == _RESOURCE_TOPIC:
                t = topics.get(name)
                if t is None:
                    results.append({**base, "error_code": int(Errors.UNKNOWN_TOPIC_OR_PARTITION)})
                    continue
                configs = {
                    k: (v, _SOURCE_DEFAULT) for k, v in self.broker.topic_config(t.topic_id).to_configs().items()
                }
            elif rtype == _RESOURCE_BROKER:
                if name not in ("", str(self.broker.broker_id)):
                    results.append({**base, "error_code": int(Errors.INVALID_REQUEST),
                                    "error_message": f"this is broker {self.broker.broker_id}"})  # fmt: skip
                    continue
                configs = {k: (v, _SOURCE_STATIC) for k, v in self._broker_configs().items()}
            else:
                why = f"resource type {rtype} is not served (2 topic, 4 broker)"
                results.append({**base, "error_code": int(Errors.INVALID_REQUEST), "error_message": why})
                continue
            keys = r.configuration_keys
            chosen = configs if keys is None else {k: configs[k] for k in keys if k in configs}
            entries = [
                {"name": k, "value": v, "read_only": True, "config_source": src, "is_sensitive": False,
                 "synonyms": [], "config_type": _config_type(v), "documentation": None}
                for k, (v, src) in sorted(chosen.items())
            ]  # fmt: skip
            results.append({**base, "error_code": 0, "configs": entries})
        return {"throttle_time": 0, "results": results}

    def _broker_configs(self) -> dict[str, str]:
        c = self.config
        return {
            "broker.id": str(self.broker.broker_id),
            "broker.rack": self.broker.az,
            "message.max.bytes": str(c.message_max_bytes),
            "auto.create.topics.enable": "true" if c.auto_create_topics_enable else "false",
            "num.partitions": str(c.num_partitions),
            "default.replication.factor": str(c.default_replication_factor),
            "offsets.topic.num.partitions": str(c.offsets_topic_num_partitions),
            "group.initial.rebalance.delay.ms": str(c.group_initial_rebalance_delay_ms),
            "min.insync.replicas": str(self.broker.min_insync_replicas),
            **self.listener_configs,
        }

    # ------------------------------------------------------------- groups

    async def find_coordinator(self, req: Any, body: Any, session: Session) -> Mapping[str, Any]:
        keys = list(body.coordinator_keys) if req.api_version >= 4 else [body.key]
        key_type = int(getattr(body, "key_type", 0))
        found = []
        for key in keys:
            node: dict[str, Any] = {"key": key, "node_id": -1, "host": "", "port": -1, "error_message": None}
            if key_type != 0:
                found.append({**node, "error_code": int(Errors.INVALID_REQUEST),
                              "error_message": "only group coordinators (key type 0) are served"})  # fmt: skip
                continue
            error, broker_id = await self.groups.find_coordinator(key)
            info = self.broker.metadata.broker(broker_id) if error == Errors.NONE else None
            if info is None or not info.kafka_port:
                found.append({**node, "error_code": int(Errors.COORDINATOR_NOT_AVAILABLE)})
            else:
                found.append({**node, "error_code": 0, "node_id": broker_id, "host": info.host,
                              "port": info.kafka_port})  # fmt: skip
        if req.api_version >= 4:
            return {"throttle_time": 0, "coordinators": found}
        return {"throttle_time": 0, **{k: v for k, v in found[0].items() if k != "key"}}

    async def join_group(self, req: Any, body: Any, session: Session) -> Mapping[str, Any]:
        session_timeout_ms = _ms(body.session_timeout)
        rebalance = getattr(body, "rebalance_timeout", None)
        return await self.groups.join(
            body.group_id,
            body.member_id,
            client_id=req.client_id or "",
            client_host=session.peer.rsplit(":", 1)[0],
            session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=_ms(rebalance) if rebalance is not None else session_timeout_ms,
            protocol_type=body.protocol_type,
            protocols=[(p.name, bytes(p.metadata)) for p in body.protocols],
            group_instance_id=getattr(body, "group_instance_id", None),
            require_known_member_id=req.api_version >= 4,
        )

    async def sync_group(self, req: Any, body: Any, session: Session) -> Mapping[str, Any]:
        assignments = {a.member_id: bytes(a.assignment) for a in body.assignments}
        return await self.groups.sync(body.group_id, body.member_id, int(body.generation_id), assignments)

    async def heartbeat(self, req: Any, body: Any, session: Session) -> Mapping[str, Any]:
        error = await self.groups.heartbeat(body.group_id, body.member_id, int(body.generation_id))
        return {"throttle_time": 0, "error_code": int(error)}

    async def leave_group(self, req: Any, body: Any, session: Session) -> Mapping[str, Any]:
        if req.api_version >= 3:
            ids = [m.member_id for m in body.members]
            error, each = await self.groups.leave(body.group_id, ids)
            return {"throttle_time": 0, "error_code": int(error), "members": [
                {"member_id": m.member_id, "group_instance_id": m.group_instance_id, "error_code": int(e)}
                for m, e in zip(body.members, each, strict=True)
            ]}  # fmt: skip
        error, results = await self.groups.leave(body.group_id, [body.member_id])
        return {"throttle_time": 0, "error_code": int(error if error != Errors.NONE else results[0]), "members": []}

    async def offset_commit(self, req: Any, body: Any, session: Session) -> Mapping[str, Any]:
        generation = int(getattr(body, "generation_id_or_member_epoch", getattr(body, "generation_id", -1)))
        wanted: dict[tuple[str, int], tuple[int, int, str | None]] = {}
        for t in body.topics:
            for p in t.partitions:
                wanted[(t.name, int(p.partition_index))] = (
                    int(p.committed_offset),
                    int(getattr(p, "committed_leader_epoch", -1)),
                    p.committed_metadata,
                )
        answers = await self.groups.commit_offsets(body.group_id, body.member_id or "", generation, wanted)
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for (name, p), e in answers.items():
            by_topic.setdefault(name, []).append({"partition_index": p, "error_code": int(e)})
        return {"throttle_time": 0, "topics": [{"name": n, "partitions": ps} for n, ps in by_topic.items()]}

    async def offset_fetch(self, req: Any, body: Any, session: Session) -> Mapping[str, Any]:
        wanted = None
        if body.topics is not None:
            wanted = [(t.name, int(p)) for t in body.topics for p in t.partition_indexes]
        error, found = await self.groups.fetch_offsets(body.group_id, wanted)
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for (name, p), c in found.items():
            by_topic.setdefault(name, []).append(
                {
                    "partition_index": p,
                    "committed_offset": c.offset if c is not None else -1,
                    "committed_leader_epoch": c.leader_epoch if c is not None else -1,
                    "metadata": c.metadata if c is not None else "",
                    "error_code": 0,
                }
            )
        if error != Errors.NONE and req.api_version < 2 and wanted is not None:
            # v0-v1 have no top-level error: each partition carries it.
            by_topic = {}
            for name, p in wanted:
                by_topic.setdefault(name, []).append({"partition_index": p, "committed_offset": -1, "metadata": "",
                                                      "error_code": int(error)})  # fmt: skip
        topics = [{"name": n, "partitions": ps} for n, ps in by_topic.items()]
        return {"throttle_time": 0, "topics": topics, "error_code": int(error)}

    async def list_groups(self, req: Any, body: Any, session: Session) -> Mapping[str, Any]:
        states = {s.lower() for s in getattr(body, "states_filter", ())}
        groups = [
            {"group_id": g, "protocol_type": pt, "group_state": st}
            for g, pt, st in self.groups.groups_here()
            if not states or st.lower() in states
        ]
        return {"throttle_time": 0, "error_code": 0, "groups": groups}

    async def describe_groups(self, req: Any, body: Any, session: Session) -> Mapping[str, Any]:
        return {"throttle_time": 0, "groups": [await self.groups.describe(g) for g in body.groups]}


# DescribeConfigs: Kafka's ConfigResource.Type and ConfigSource codes.
_RESOURCE_TOPIC = 2
_RESOURCE_BROKER = 4
_SOURCE_STATIC = 4  # STATIC_BROKER_CONFIG
_SOURCE_DEFAULT = 5  # DEFAULT_CONFIG


def _config_type(value: str) -> int:
    """Kafka's ConfigType code of a value: BOOLEAN 1, STRING 2, LONG 5."""
    if value in ("true", "false"):
        return 1
    try:
        int(value)
    except ValueError:
        return 2
    return 5


async def _ready(answer: tuple[Errors, int, int]) -> tuple[Errors, int, int]:
    return answer


def _to_error(code: Any) -> Errors:
    try:
        return Errors(int(code))
    except (ValueError, TypeError):
        return Errors.UNKNOWN_SERVER_ERROR


def _produced(
    index: int,
    error: Errors,
    message: str | None,
    base_offset: int = -1,
    log_append_time: int = -1,
    log_start_offset: int = -1,
) -> dict[str, Any]:
    return {
        "index": index,
        "error_code": _kafka_error(error),
        "base_offset": base_offset,
        "log_append_time": log_append_time,
        "log_start_offset": log_start_offset,
        "record_errors": [],
        "error_message": message,
    }


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


__all__ = ["SUPPORTED_VERSIONS", "FrontConfig", "KafkaApis", "Session", "client_az"]
