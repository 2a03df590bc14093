"""The Kafka APIs a broker's front end serves, mapped onto the broker: the
dispatch table, and the data plane (Metadata, Produce, ListOffsets,
OffsetForLeaderEpoch, InitProducerId, ApiVersions).  Fetch and its sessions
are in :mod:`partlog.kafka_front.fetch_api`; the admin APIs are in
:mod:`partlog.kafka_front.admin_apis`, the group APIs in
:mod:`partlog.kafka_front.group_apis`, the transaction APIs in
:mod:`partlog.kafka_front.txn_apis`; all work on the broker's port
(:class:`partlog.kafka_front.port.BrokerPort`) and share
:mod:`partlog.kafka_front.handler`.

Each handler takes the kio request entity of whatever version the client
sent and returns a mapping of plain values; :func:`partlog.kafka_front.codec.build`
turns it into that version's response (fields a version lacks are dropped).
Nothing here does I/O of its own: produce, fetch and ListOffsets go through
the port, which routes them to the partitions' leaders and replicas.

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
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from partlog.acl import AclOperation, AuthorizerConfig
from partlog.acl.source import AclSource
from partlog.groups.membership import INITIAL_REBALANCE_DELAY_MS_DEFAULT
from partlog.kafka import batch_header as bh
from partlog.kafka.errors import Errors, peer_error
from partlog.kafka.record_batch import parse_records
from partlog.kafka.records import FindBatchRequest, IsolationLevel, ListOffsetsRequest, TopicIdPartition
from partlog.kafka_front.acl_apis import AclApis
from partlog.kafka_front.admin_apis import AdminApis
from partlog.kafka_front.authz import Authz, denied
from partlog.kafka_front.config_apis import ConfigApis
from partlog.kafka_front.fetch_api import FetchApi, FetchConfig
from partlog.kafka_front.fetch_sessions import FETCH_SESSION_CACHE_SLOTS_DEFAULT, FETCH_SESSION_EVICTION_MS_DEFAULT
from partlog.kafka_front.group_apis import GroupApis
from partlog.kafka_front.group_coordinator import (
    INTERNAL_TOPICS,
    OFFSETS_TOPIC_PARTITIONS_DEFAULT,
    GroupCoordinator,
)
from partlog.kafka_front.handler import (
    ApiHandlers,
    Handler,
    Session,
    duration_ms,
    kafka_error,
)
from partlog.kafka_front.metadata_api import MetadataApi
from partlog.kafka_front.partition_apis import CREATE_PARTITIONS_KEY, PartitionApis
from partlog.kafka_front.port import BrokerPort
from partlog.kafka_front.reassign_apis import (
    ALTER_PARTITION_REASSIGNMENTS_KEY,
    LIST_PARTITION_REASSIGNMENTS_KEY,
    ReassignApis,
)
from partlog.kafka_front.txn_apis import TxnApis
from partlog.kafka_front.txn_coordinator import TXN_STATE_PARTITIONS_DEFAULT, TxnCoordinator
from partlog.kafka_front.txn_rpc import TxnRpcFront
from partlog.tiered.cleaner import CleanerError, keyless_indices
from partlog.txn.coordinator import TRANSACTION_MAX_TIMEOUT_MS_DEFAULT, TRANSACTIONAL_ID_EXPIRATION_MS_DEFAULT

log = logging.getLogger(__name__)

# Kafka's message.max.bytes default (1 MiB + record-batch overhead): a larger
# batch is answered MESSAGE_TOO_LARGE.
MESSAGE_MAX_BYTES_DEFAULT = 1_048_588
# Kafka's num.partitions and the replication factor a topic created without
# one gets (Kafka's default.replication.factor is 1; three AZs want 3).
NUM_PARTITIONS_DEFAULT = 1
DEFAULT_REPLICATION_FACTOR = 3
# ListOffsets by timestamp reads one batch per partition to find the exact
# record: at most this many per request, this many at once per listener.
EXACT_LOOKUPS_MAX = 1_000
EXACT_LOOKUPS_IN_FLIGHT = 16
# Produce timeouts beyond this are cut to it (Kafka has no cap; ours bounds
# how long a request holds its connection's slot).
PRODUCE_TIMEOUT_MS_MAX = 300_000
# Record errors a refused batch's error message shows (Kafka's LogValidator:
# "only showing the first three errors at most").
RECORD_ERRORS_SHOWN = 3

# Kafka's replica.selector.class for follower fetching (KIP-392).
RACK_AWARE_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"

# The versions served (see design.md "Kafka front end").
SUPPORTED_VERSIONS: dict[int, tuple[int, int]] = {
    0: (3, 11),  # Produce
    1: (4, 12),  # Fetch
    2: (1, 7),  # ListOffsets
    3: (0, 12),  # Metadata
    18: (0, 4),  # ApiVersions
    8: (2, 9),  # OffsetCommit (v9: KIP-848's member epoch)
    9: (1, 9),  # OffsetFetch (v8: several groups; v9: KIP-848's member epoch)
    10: (0, 4),  # FindCoordinator
    11: (0, 7),  # JoinGroup
    12: (0, 4),  # Heartbeat
    13: (0, 5),  # LeaveGroup
    14: (0, 5),  # SyncGroup
    15: (0, 6),  # DescribeGroups (v6: KIP-1043's GROUP_ID_NOT_FOUND)
    16: (0, 5),  # ListGroups (v5: KIP-848's group type)
    42: (0, 2),  # DeleteGroups
    47: (0, 0),  # OffsetDelete (KIP-496)
    17: (0, 1),  # SaslHandshake (v0: raw tokens follow, as before KIP-152)
    19: (2, 7),  # CreateTopics
    20: (1, 6),  # DeleteTopics
    21: (0, 2),  # DeleteRecords
    22: (0, 4),  # InitProducerId
    23: (2, 4),  # OffsetForLeaderEpoch
    # Transactions, version 1 (KIP-890 part 2 is not advertised): clients
    # send AddPartitionsToTxn <= v3 (v4+ is the brokers' batched form); the
    # v4 of the others only allows TRANSACTION_ABORTABLE, never sent here.
    24: (0, 3),  # AddPartitionsToTxn
    25: (0, 4),  # AddOffsetsToTxn
    26: (0, 4),  # EndTxn
    28: (0, 4),  # TxnOffsetCommit
    29: (1, 3),  # DescribeAcls (kio has no v0, which has no pattern type)
    30: (1, 3),  # CreateAcls
    31: (1, 3),  # DeleteAcls
    32: (1, 4),  # DescribeConfigs
    33: (0, 2),  # AlterConfigs
    44: (0, 1),  # IncrementalAlterConfigs
    37: (0, 3),  # CreatePartitions
    45: (0, 1),  # AlterPartitionReassignments (v1: KIP-860)
    46: (0, 0),  # ListPartitionReassignments
    36: (0, 2),  # SaslAuthenticate
    50: (0, 0),  # DescribeUserScramCredentials
    51: (0, 0),  # AlterUserScramCredentials
    65: (0, 0),  # DescribeTransactions
    66: (0, 1),  # ListTransactions
    68: (0, 1),  # ConsumerGroupHeartbeat (KIP-848)
    69: (0, 1),  # ConsumerGroupDescribe
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
    transaction_state_log_num_partitions: int = TXN_STATE_PARTITIONS_DEFAULT
    transaction_max_timeout_ms: int = TRANSACTION_MAX_TIMEOUT_MS_DEFAULT
    transactional_id_expiration_ms: int = TRANSACTIONAL_ID_EXPIRATION_MS_DEFAULT
    # Kafka's authorizer (super.users, allow.everyone.if.no.acl.found); None:
    # none, every request allowed and the ACL APIs answer SECURITY_DISABLED.
    authorizer: AuthorizerConfig | None = None
    # KIP-392 follower fetching (Kafka's replica.selector.class set to the
    # RackAwareReplicaSelector): partlog/kafka_front/read_replica.py.
    rack_aware_replica_selector: bool = True
    # KIP-227's max.incremental.fetch.session.cache.slots and
    # min.incremental.fetch.session.eviction.ms (0 slots: no sessions).
    fetch_session_cache_slots: int = FETCH_SESSION_CACHE_SLOTS_DEFAULT
    fetch_session_eviction_ms: int = FETCH_SESSION_EVICTION_MS_DEFAULT

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
            "transaction_state_log_num_partitions",
            "transaction_max_timeout_ms",
            "transactional_id_expiration_ms",
        ):
            v = getattr(self, name)
            if type(v) is not int or v <= 0:
                raise ValueError(f"Kafka listener: {name} must be a positive integer, got {v!r}")
        for name in ("fetch_session_cache_slots", "fetch_session_eviction_ms"):
            v = getattr(self, name)
            if type(v) is not int or v < 0:
                raise ValueError(f"Kafka listener: {name} must be an integer >= 0, got {v!r}")

    def kafka_configs(self) -> dict[str, str]:
        """These settings by their Kafka broker config names (DescribeConfigs)."""
        return {
            "message.max.bytes": str(self.message_max_bytes),
            "auto.create.topics.enable": "true" if self.auto_create_topics_enable else "false",
            "num.partitions": str(self.num_partitions),
            "default.replication.factor": str(self.default_replication_factor),
            "offsets.topic.num.partitions": str(self.offsets_topic_num_partitions),
            "group.initial.rebalance.delay.ms": str(self.group_initial_rebalance_delay_ms),
            "transaction.state.log.num.partitions": str(self.transaction_state_log_num_partitions),
            "transaction.max.timeout.ms": str(self.transaction_max_timeout_ms),
            "transactional.id.expiration.ms": str(self.transactional_id_expiration_ms),
            "replica.selector.class": RACK_AWARE_SELECTOR if self.rack_aware_replica_selector else "",
            "max.incremental.fetch.session.cache.slots": str(self.fetch_session_cache_slots),
            "min.incremental.fetch.session.eviction.ms": str(self.fetch_session_eviction_ms),
        }


class KafkaApis(ApiHandlers):
    """The handlers of one broker's Kafka listener, by API key; the data
    plane's are here.  ``listener_configs``: the listener's limits by their
    Kafka names (DescribeConfigs)."""

    def __init__(
        self,
        broker: BrokerPort,
        config: FrontConfig | None = None,
        listener_configs: Mapping[str, str] | None = None,
        acl_source: AclSource | None = None,
    ) -> None:
        super().__init__(broker)
        self.config = config or FrontConfig()
        self.authz = Authz(self.config.authorizer, acl_source)
        self._exact_slots = asyncio.Semaphore(EXACT_LOOKUPS_IN_FLIGHT)
        self.groups = GroupCoordinator(
            broker,
            offsets_partitions=self.config.offsets_topic_num_partitions,
            initial_rebalance_delay_ms=self.config.group_initial_rebalance_delay_ms,
        )
        self.admin = AdminApis(
            broker,
            num_partitions=self.config.num_partitions,
            default_replication_factor=self.config.default_replication_factor,
        )
        configs = ConfigApis(broker, static_configs={**self.config.kafka_configs(), **(listener_configs or {})})
        self.txns = TxnCoordinator(
            broker,
            partitions=self.config.transaction_state_log_num_partitions,
            max_timeout_ms=self.config.transaction_max_timeout_ms,
            expiration_ms=self.config.transactional_id_expiration_ms,
        )
        # KIP-890 part 1: partition leaders ask this broker's coordinator.
        broker.set_txn_verifier(self.txns.verify, self.txns.coordinator_broker)
        # partlog.client's transactional producer: the same coordinator over the broker RPC.
        self.txn_rpc = TxnRpcFront(broker, self.txns)
        group = GroupApis(broker, self.groups, self.txns)
        self.txn = TxnApis(broker, self.txns, self.groups)
        acls = AclApis(broker)
        metadata = MetadataApi(
            broker,
            auto_create=self.config.auto_create_topics_enable,
            num_partitions=self.config.num_partitions,
            groups=self.groups,
            txns=self.txns,
            admin=self.admin,
        )
        partitions = PartitionApis(broker)
        reassign = ReassignApis(broker)
        # One fetch session cache per front end (KIP-227).
        self.fetches = FetchApi(broker, FetchConfig(self.config.rack_aware_replica_selector,
                                                    self.config.fetch_session_cache_slots,
                                                    self.config.fetch_session_eviction_ms))  # fmt: skip
        for h in (self.admin, configs, group, self.txn, acls, metadata, partitions, reassign, self.fetches):
            h.authz = self.authz
        self.handlers: dict[int, Handler] = {
            0: self.produce,
            1: self.fetches.fetch,
            2: self.list_offsets,
            3: metadata.metadata,
            18: self.api_versions,
            19: self.admin.create_topics,
            22: self.init_producer_id,
            8: group.offset_commit,
            9: group.offset_fetch,
            10: group.find_coordinator,
            11: group.join_group,
            12: group.heartbeat,
            13: group.leave_group,
            14: group.sync_group,
            15: group.describe_groups,
            16: group.list_groups,
            42: group.delete_groups,
            47: group.offset_delete,
            20: self.admin.delete_topics,
            21: self.admin.delete_records,
            23: self.offset_for_leader_epoch,
            24: self.txn.add_partitions_to_txn,
            25: self.txn.add_offsets_to_txn,
            26: self.txn.end_txn,
            28: self.txn.txn_offset_commit,
            29: acls.describe_acls,
            30: acls.create_acls,
            31: acls.delete_acls,
            32: configs.describe_configs,
            33: configs.alter_configs,
            44: configs.incremental_alter_configs,
            CREATE_PARTITIONS_KEY: partitions.create_partitions,
            ALTER_PARTITION_REASSIGNMENTS_KEY: reassign.alter_partition_reassignments,
            LIST_PARTITION_REASSIGNMENTS_KEY: reassign.list_partition_reassignments,
            65: self.txn.describe_transactions,
            66: self.txn.list_transactions,
            68: group.consumer_group_heartbeat,
            69: group.consumer_group_describe,
        }

    # ------------------------------------------------------------ versions

    async def api_versions(self, req: Any, body: Any, session: Session) -> Mapping[str, Any]:
        keys = [
            {"api_key": k, "min_version": lo, "max_version": hi} for k, (lo, hi) in sorted(SUPPORTED_VERSIONS.items())
        ]
        if req.unsupported is not None:
            return {"error_code": int(Errors.UNSUPPORTED_VERSION), "api_keys": keys, "throttle_time": 0}
        return {"error_code": 0, "api_keys": keys, "throttle_time": 0}

    async def init_producer_id(self, req: Any, body: Any, session: Session) -> Mapping[str, Any]:
        if body.transactional_id is not None:
            if not self.authz.txn_id(session, AclOperation.WRITE, body.transactional_id):
                return denied(req, Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
            return await self.txn.init_producer_id(req, body, session)
        if not self.authz.idempotent_write(session):
            return denied(req, Errors.CLUSTER_AUTHORIZATION_FAILED)
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
        timeout_ms = min(max(1, duration_ms(body.timeout)), PRODUCE_TIMEOUT_MS_MAX)
        answers: dict[tuple[str, int], dict[str, Any]] = {}
        batches: list[tuple[TopicIdPartition, bytes]] = []
        keys: list[tuple[str, int]] = []
        seen: set[tuple[str, int]] = set()
        txn_id = getattr(body, "transactional_id", None) or None
        # As Kafka: transactional records need a transactional id (else the
        # leaders could not verify them, KIP-890) the principal may WRITE;
        # otherwise every partition is refused.
        txn_refused = any(
            pd.records and bh.transactional_batch(pd.records) for td in body.topic_data for pd in td.partition_data
        ) and (txn_id is None or not self.authz.txn_id(session, AclOperation.WRITE, txn_id))
        for td in body.topic_data:
            writable = self.authz.topic(session, AclOperation.WRITE, td.name)
            for pd in td.partition_data:
                key = (td.name, int(pd.index))
                tp = self._tp(td.name, key[1])
                error: Errors | None = None
                message = None
                record_errors: list[dict[str, Any]] = []
                records = pd.records
                if key in seen:
                    error, message = Errors.INVALID_REQUEST, "partition named twice in one request"
                elif acks not in (0, 1, -1):
                    error, message = Errors.INVALID_REQUIRED_ACKS, f"acks {acks}"
                elif txn_refused:
                    error = Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
                elif not writable:
                    error = Errors.TOPIC_AUTHORIZATION_FAILED
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
                elif bh.unsequenced_transactional(records):
                    # Only a coordinator writes transactional batches without
                    # sequence numbers (TxnOffsetCommit's); from a client, as
                    # Kafka's leader, the sequence is out of order.
                    error, message = Errors.OUT_OF_ORDER_SEQUENCE_NUMBER, "transactional batch without a sequence"
                if error is None and tp is not None:
                    error, message, record_errors = self._compacted_keys(tp, td.name, records)
                seen.add(key)
                if error is not None:
                    answers[key] = _produced(key[1], error, message) | {"record_errors": record_errors}
                else:
                    assert tp is not None
                    batches.append((tp, bytes(records)))
                    keys.append(key)
        if batches:
            # The leaders verify a transaction's first batches with the
            # coordinator of the request's transactional id (KIP-890 part 1).
            results = await self.broker.produce(
                batches,
                acks=acks,
                timeout_ms=timeout_ms,
                transactional_id=txn_id,
            )
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

    def _compacted_keys(
        self, tp: TopicIdPartition, topic: str, records: bytes
    ) -> tuple[Errors | None, str | None, list[dict[str, Any]]]:
        """Kafka's LogValidator on a compacted topic: every record has a key;
        the keyless ones are named by index (KIP-467: librdkafka fails those
        with INVALID_RECORD, the rest of the batch with
        _INVALID_DIFFERENT_RECORD, and retries nothing)."""
        if not self.broker.compacted(tp.topic_id):
            return None, None, []
        try:
            keyless = keyless_indices(bytes(records))
        except CleanerError as e:
            return Errors.CORRUPT_MESSAGE, str(e), []
        if not keyless:
            return None, None, []
        why = f"Compacted topic cannot accept message without key in topic partition {topic}-{tp.partition}."
        errors = [{"batch_index": i, "batch_index_error_message": why} for i in keyless]
        shown = ", ".join(f"RecordError(batchIndex={i}, message='{why}')" for i in keyless[:RECORD_ERRORS_SHOWN])
        message = (
            f"One or more records have been rejected due to {len(keyless)} record errors in total, "
            f"and only showing the first three errors at most: [{shown}]"
        )
        return Errors.INVALID_RECORD, message, errors

    async def list_offsets(self, req: Any, body: Any, session: Session) -> Mapping[str, Any]:
        meta = self.broker.metadata
        asked: list[tuple[str, Any, TopicIdPartition | None, Errors | None]] = []
        for t in body.topics:
            described = self.authz.topic(session, AclOperation.DESCRIBE, t.name)
            for p in t.partitions:
                tp = self._tp(t.name, int(p.partition_index)) if described else None
                err = None if tp is not None else Errors.UNKNOWN_TOPIC_OR_PARTITION
                if not described:
                    err = Errors.TOPIC_AUTHORIZATION_FAILED
                if tp is not None:
                    info = meta.partition(tp)
                    cle = int(getattr(p, "current_leader_epoch", -1))
                    if info is not None and cle >= 0 and cle != info.leader_epoch:
                        err = Errors.FENCED_LEADER_EPOCH if cle < info.leader_epoch else Errors.UNKNOWN_LEADER_EPOCH
                    elif int(p.timestamp) < -3:
                        err = Errors.UNSUPPORTED_VERSION  # -4/-5 (tiered storage) need v8+
                asked.append((t.name, p, tp, err))
        # Kafka's isolation_level (v2+): LATEST under READ_COMMITTED is the LSO.
        isolation = (
            IsolationLevel.READ_COMMITTED
            if int(getattr(body, "isolation_level", 0)) == IsolationLevel.READ_COMMITTED
            else IsolationLevel.READ_UNCOMMITTED
        )
        reqs = [
            ListOffsetsRequest(tp, int(p.timestamp), isolation)
            for _, p, tp, err in asked
            if err is None and tp is not None
        ]
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
                part.update(error_code=kafka_error(code), timestamp=ts, offset=off,
                            leader_epoch=info.leader_epoch if info is not None else -1)  # fmt: skip
            by_topic.setdefault(name, []).append(part)
        return {"throttle_time": 0, "topics": [{"name": n, "partitions": ps} for n, ps in by_topic.items()]}

    async def _exact(self, req: ListOffsetsRequest, answer: tuple[Errors, int, int]) -> tuple[Errors, int, int]:
        """Kafka's answer to a lookup by timestamp is the first RECORD at or
        after it; the store knows batches only (design.md), so the batch it
        names is read and its records searched.  When the batch cannot be
        read or decoded, the batch's base offset stands (a few records early).
        MAX_TIMESTAMP (-3) is the first record of that batch whose timestamp
        is the batch's max (Kafka's ``offsetOfMaxTimestamp``, KAFKA-16310)."""
        error, best_ts, offset = answer
        at_max = req.timestamp == ListOffsetsRequest.MAX_TIMESTAMP
        if (req.timestamp < 0 and not at_max) or error != Errors.NONE or offset < 0:
            return answer
        async with self._exact_slots:
            [(code, _hwm, _lso, records, _msg, _stable, _aborted)] = await self.broker.fetch_routed(
                [FindBatchRequest(req.topic_id_partition, offset, 1)], max_wait_ms=0, min_bytes=0, max_bytes=1
            )
        if code != 0:
            return answer
        try:
            for r in parse_records(req.topic_id_partition, records, offset):
                if r.timestamp == best_ts if at_max else r.timestamp >= req.timestamp:
                    return Errors.NONE, r.timestamp, r.offset
        except Exception as e:  # a codec this process lacks, a damaged batch: the batch's answer stands
            log.info("ListOffsets of %s: batch at %d not searched: %s", req.topic_id_partition, offset, e)
        return answer

    async def offset_for_leader_epoch(self, req: Any, body: Any, session: Session) -> Mapping[str, Any]:
        asked: list[tuple[str, int, TopicIdPartition | None, int, int]] = []
        refused = {t.topic for t in body.topics if not self.authz.topic(session, AclOperation.DESCRIBE, t.topic)}
        for t in body.topics:
            for p in t.partitions:
                tp = self._tp(t.topic, int(p.partition)) if t.topic not in refused else None
                asked.append((t.topic, int(p.partition), tp, int(getattr(p, "current_leader_epoch", -1)),
                              int(p.leader_epoch)))  # fmt: skip
        items = [(tp, [cur, epoch]) for _, _, tp, cur, epoch in asked if tp is not None]
        failed = [int(Errors.NOT_LEADER_OR_FOLLOWER), -1, -1]
        rows = iter(await self.broker.on_leaders("offset_for_leader_epoch", items, failed))
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for name, index, tp, _, _ in asked:
            if tp is None:
                missing = Errors.TOPIC_AUTHORIZATION_FAILED if name in refused else Errors.UNKNOWN_TOPIC_OR_PARTITION
                err, epoch, end = int(missing), -1, -1
            else:
                err, epoch, end = next(rows)
            by_topic.setdefault(name, []).append(
                {"partition": index, "error_code": kafka_error(peer_error(err)), "leader_epoch": epoch,
                 "end_offset": end}
            )  # fmt: skip
        return {"throttle_time": 0, "topics": [{"topic": n, "partitions": ps} for n, ps in by_topic.items()]}


async def _ready(answer: tuple[Errors, int, int]) -> tuple[Errors, int, int]:
    return answer


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
        "error_code": kafka_error(error),
        "base_offset": base_offset,
        "log_append_time": log_append_time,
        "log_start_offset": log_start_offset,
        "record_errors": [],
        "error_message": message,
    }


__all__ = ["SUPPORTED_VERSIONS", "FrontConfig", "KafkaApis"]
