"""The request schemas of every RPC method partlog serves, in one place.

The broker's, the controller's and walmgr's servers hand their table to
:class:`partlog.rpc.server.RpcServer`, which decodes each request under its
schema's limits and checks it before the handler runs
(:mod:`partlog.rpc.schema`).  The handlers' own decoders
(:mod:`partlog.rpc.wire`, ``partlog.controller.wire``'s ``dec_*``) then turn checked
bodies into records; they keep their shape checks for callers that bypass
the server (tests, embedders).

Integer ranges follow Kafka where Kafka has the field: broker ids and
partitions are non-negative int32s, epochs int32s, offsets and timestamps
int64s, replication factors int16s.  What the store packs decides the rest:
the uploader is a signed int32, file sizes and byte offsets fit an int64.
"""

from __future__ import annotations

from partlog.kafka.topic_config import (
    TOPIC_CONFIG_NAME_CHARS_MAX,
    TOPIC_CONFIG_OPS_MAX,
    TOPIC_CONFIG_VALUE_CHARS_MAX,
)
from partlog.limits import (
    ABORTED_TXNS_PER_FETCH_MAX,
    AZ_CHARS_MAX,
    BROKERS_MAX,
    HOST_CHARS_MAX,
    PARTITIONS_PER_CLUSTER_MAX,
    PARTITIONS_PER_TOPIC_MAX,
    SEGMENT_BATCHES_MAX,
    TOPICS_PER_REQUEST_MAX,
)
from partlog.rpc.frame import RPC_FRAME_BYTES_MAX
from partlog.rpc.schema import (
    BROKER_ID,
    BYTE_OFFSET,
    FILE_SIZE,
    INT16,
    INT16_MAX,
    INT32,
    INT32_MAX,
    INT64,
    INT64_MAX,
    NAME,
    OBJECT_KEY,
    PARTITION,
    PORT,
    TOPIC_ID,
    Bool,
    Bytes,
    Int,
    List,
    Map,
    Nullable,
    Schema,
    Str,
    Tuple,
    partition_item,
)
from partlog.rpc.wire import ROWS_DIGEST_BYTES

# Partitions one transaction may hold: more is the coordinator's answer
# (INVALID_REQUEST), never a bigger request to decode.
from partlog.txn.coordinator import TXN_PARTITIONS_MAX

# Batches per produce request and partitions per fetch or list_offsets
# (Kafka has no such limits; ours bound one request's work and decoding).
PRODUCE_BATCHES_MAX = 10_000
PARTITIONS_MAX = 10_000
# Batches in one commit RPC: one WAL segment's batches for one leader.
COMMIT_BATCHES_MAX = SEGMENT_BATCHES_MAX
# A reference check carries walmgr's questions for one broker (it splits larger rounds).
REFERENCE_CHECKS_MAX = 100_000
# The replicas of one partition walmgr names in a reference check.
REPLICAS_ASKED_MAX = 1024
# Objects one upload notification may carry (brokers send at most 1,000),
# and partitions per object (a segment's footer names at most ~25,000).
NOTIFY_OBJECTS_MAX = 10_000
NOTIFY_PARTITIONS_MAX = 25_000
# A v2 batch header is 61 bytes; a longer "header" is answered
# CORRUPT_MESSAGE for that batch by the store, not refused here.
COMMIT_HEADER_BYTES_MAX = 1024
# A create_topics name: the controller answers a bad name per topic (as
# Kafka's INVALID_TOPIC_EXCEPTION); only absurd lengths are refused here.
TOPIC_NAME_BYTES_MAX = 1024
# Topics in a metadata answer: the controller's partitions in all bound them.
TOPICS_MAX = PARTITIONS_PER_CLUSTER_MAX
# Kafka's transactional.id is a STRING (int16 length).
TRANSACTIONAL_ID = Str(INT16_MAX)
NON_NEGATIVE_INT32 = Int(0, INT32_MAX)
POSITIVE_INT32 = Int(1, INT32_MAX)

BROKER_SCHEMAS: dict[str, Schema] = {
    "produce": Map(
        required={"batches": List(partition_item(("batch", Bytes(RPC_FRAME_BYTES_MAX))), PRODUCE_BATCHES_MAX)},
        # transactional_id: a transactional producer's (KIP-890 part 1: the
        # leaders verify its batches with the coordinator, as for Kafka clients).
        optional={"timeout_ms": POSITIVE_INT32, "acks": Int(-1, 1), "transactional_id": TRANSACTIONAL_ID},
    ),
    "commit": Map(
        required={
            "key": OBJECT_KEY,
            "uploader": BROKER_ID,
            "file_size": FILE_SIZE,
            "batches": List(
                Tuple(
                    ("request_id", Int(0, INT64_MAX)),
                    ("topic_id", TOPIC_ID),
                    ("partition", PARTITION),
                    ("byte_offset", BYTE_OFFSET),
                    ("header", Bytes(COMMIT_HEADER_BYTES_MAX)),
                ),
                COMMIT_BATCHES_MAX,
            ),
        },
        optional={
            "acks_all": List(Int(0, COMMIT_BATCHES_MAX - 1), COMMIT_BATCHES_MAX),
            # KIP-890: request index -> transactional id of its produce request.
            "transactional_ids": List(
                Tuple(("request", Int(0, COMMIT_BATCHES_MAX - 1)), ("transactional_id", TRANSACTIONAL_ID)),
                COMMIT_BATCHES_MAX,
            ),
        },
    ),
    # KIP-890 part 1: a leader asks a transaction coordinator whether the
    # partitions are in the open transaction of (producer id, epoch).
    "verify_txn": Map(
        required={
            "transactional_id": TRANSACTIONAL_ID,
            "producer_id": Int(0, INT64_MAX),
            "producer_epoch": Int(0, INT16_MAX),
            "partitions": List(partition_item(), PARTITIONS_MAX),
        }
    ),
    "fetch": Map(
        required={"partitions": List(partition_item(("offset", INT64), ("max_bytes", INT32)), PARTITIONS_MAX)},
        optional={
            "max_wait_ms": NON_NEGATIVE_INT32,
            "min_bytes": INT32,
            "max_bytes": INT32,
            # Kafka's isolation_level: 0 READ_UNCOMMITTED, 1 READ_COMMITTED.
            "isolation": Int(0, 1),
        },
    ),
    # COMMIT/ABORT markers from a transaction coordinator to a leader.
    "write_txn_markers": Map(
        required={
            "partitions": List(
                partition_item(
                    ("producer_id", Int(0, INT64_MAX)),
                    ("producer_epoch", Int(0, INT16_MAX)),
                    ("coordinator_epoch", Int(0, INT32_MAX)),
                    ("committed", Int(0, 1)),
                ),
                PARTITIONS_MAX,
            )
        }
    ),
    "metadata": Map(required={}, optional={"az": Nullable(NAME)}),
    "list_offsets": Map(
        required={"partitions": List(partition_item(("timestamp", INT64)), PARTITIONS_MAX)},
        # Kafka's isolation_level: LATEST is the last stable offset under 1.
        optional={"isolation": Int(0, 1)},
    ),
    # With a transactional id: Kafka's InitProducerId of a transactional
    # producer, answered by the id's coordinator (producer id and epoch -1,
    # or the current ones to bump the epoch, KIP-360); without: an
    # idempotent producer's id from this broker's block.
    "init_producer_id": Map(
        required={},
        optional={
            "transactional_id": TRANSACTIONAL_ID,
            "transaction_timeout_ms": POSITIVE_INT32,
            "producer_id": Int(-1, INT64_MAX),
            "producer_epoch": Int(-1, INT16_MAX),
        },
    ),
    # Kafka's AddPartitionsToTxn and EndTxn (transaction version 1), for
    # partlog.client's transactional producer: answered by the transactional
    # id's coordinator through the Kafka front end (NOT_COORDINATOR elsewhere,
    # COORDINATOR_NOT_AVAILABLE on a broker without one).
    "add_partitions_to_txn": Map(
        required={
            "transactional_id": TRANSACTIONAL_ID,
            "producer_id": Int(0, INT64_MAX),
            "producer_epoch": Int(0, INT16_MAX),
            "partitions": List(partition_item(), TXN_PARTITIONS_MAX),
        }
    ),
    "end_txn": Map(
        required={
            "transactional_id": TRANSACTIONAL_ID,
            "producer_id": Int(0, INT64_MAX),
            "producer_epoch": Int(0, INT16_MAX),
            "committed": Int(0, 1),
        }
    ),
    "replica_fetch": Map(
        required={
            "replica_id": BROKER_ID,
            "max_wait_ms": NON_NEGATIVE_INT32,
            "entries_max": POSITIVE_INT32,
            "partitions": List(
                partition_item(
                    ("current_leader_epoch", INT32),
                    ("fetch_offset", Int(0, INT64_MAX)),
                    ("last_fetched_epoch", INT32),
                    ("high_watermark", Int(-1, INT64_MAX)),
                ),
                PARTITIONS_MAX,
            ),
        },
        optional={
            "log_start_offsets": List(Int(-1, INT64_MAX), PARTITIONS_MAX),
            # Issue 31: the end of each partition's last segment row (-1: none).
            "tiered_through": List(Int(-1, INT64_MAX), PARTITIONS_MAX),
            # RPC version 4: answer sparsely; a fetch session's [id, epoch]
            # and the partitions it drops (partlog.rpc.replica_rows).
            "omit_quiet": Bool(),
            "session": Tuple(("session_id", NON_NEGATIVE_INT32), ("epoch", NON_NEGATIVE_INT32)),
            "forgotten": List(partition_item(), PARTITIONS_MAX),
            # Issue 31: a window of each partition's rows, by digest (from -1: none).
            "rows_checks": List(
                Tuple(
                    ("from", Int(-1, INT64_MAX)), ("through", Int(-1, INT64_MAX)), ("digest", Bytes(ROWS_DIGEST_BYTES))
                ),
                PARTITIONS_MAX,
            ),
        },
    ),
    "delete_records": Map(
        required={"partitions": List(partition_item(("offset", Int(-1, INT64_MAX))), PARTITIONS_MAX)}
    ),
    "offset_for_leader_epoch": Map(
        required={
            "partitions": List(partition_item(("current_leader_epoch", INT32), ("leader_epoch", INT32)), PARTITIONS_MAX)
        }
    ),
    "referenced_files": Map(
        required={
            "checks": List(
                Tuple(("key", OBJECT_KEY), ("topic_id", TOPIC_ID), ("partition", PARTITION), ("leader_epoch", INT32)),
                REFERENCE_CHECKS_MAX,
            )
        },
        optional={"asked": List(List(BROKER_ID, REPLICAS_ASKED_MAX), REFERENCE_CHECKS_MAX)},
    ),
    "keys_referenced": Map(required={"keys": List(OBJECT_KEY, REFERENCE_CHECKS_MAX)}),
}

# ACL bindings or filters one create_acls or delete_acls carries.
ACLS_PER_REQUEST_MAX = 10_000
_ACL_CODE = Int(0, 127)
_ACL_STR = Str(1_000)
_ACL_BINDING = Tuple(_ACL_CODE, _ACL_STR, _ACL_CODE, _ACL_STR, _ACL_STR, _ACL_CODE, _ACL_CODE)
_ACL_FILTER = Tuple(
    _ACL_CODE, Nullable(_ACL_STR), _ACL_CODE, Nullable(_ACL_STR), Nullable(_ACL_STR), _ACL_CODE, _ACL_CODE
)
_BROKER_EPOCH = Map(required={"broker_id": BROKER_ID, "broker_epoch": INT64})
_CONFIG_NAME = Str(TOPIC_CONFIG_NAME_CHARS_MAX)
_CONFIG_VALUE = Str(TOPIC_CONFIG_VALUE_CHARS_MAX)
_CONFIG = Tuple(_CONFIG_NAME, _CONFIG_VALUE)
_CONFIG_OP = Tuple(Int(0, 3), _CONFIG_NAME, Nullable(_CONFIG_VALUE))

CONTROLLER_SCHEMAS: dict[str, Schema] = {
    "register_broker": Map(
        required={"broker_id": BROKER_ID, "az": Str(AZ_CHARS_MAX), "host": Str(HOST_CHARS_MAX), "port": PORT},
        # kafka_listeners: cluster_meta.KAFKA_LISTENERS_CHARS_MAX; unclean_shutdown: version 3 (KIP-966).
        optional={"kafka_port": PORT, "kafka_listeners": Str(1_000), "unclean_shutdown": Bool()},
    ),
    "heartbeat": _BROKER_EPOCH,
    "allocate_producer_ids": _BROKER_EPOCH,
    "metadata_poll": Map(required={"version": INT64, "max_wait_ms": NON_NEGATIVE_INT32}),
    "alter_partition": Map(
        required={
            "broker_id": BROKER_ID,
            "broker_epoch": INT64,
            "topic_id": TOPIC_ID,
            "partition": PARTITION,
            "leader_epoch": INT32,
            "partition_epoch": INT32,
            "isr": List(BROKER_ID, BROKERS_MAX),
        }
    ),
    "create_topics": Map(
        required={
            "topics": List(
                Tuple(("name", Str(TOPIC_NAME_BYTES_MAX)), ("partitions", INT32), ("replication_factor", INT16)),
                TOPICS_PER_REQUEST_MAX,
            )
        },
        optional={
            "configs": List(
                Tuple(Str(TOPIC_NAME_BYTES_MAX), List(_CONFIG, TOPIC_CONFIG_OPS_MAX)), TOPICS_PER_REQUEST_MAX
            ),
            # RPC version 3: [name, [[partition index, replicas]]]; any int32 (the controller answers
            # bad ids and indexes, as Kafka's); partlog.controller.topic_create bounds the items in all.
            "assignments": List(
                Tuple(
                    Str(TOPIC_NAME_BYTES_MAX),
                    List(Tuple(INT32, List(INT32, BROKERS_MAX)), PARTITIONS_PER_TOPIC_MAX),
                ),
                TOPICS_PER_REQUEST_MAX,
            ),
        },
    ),
    # [name, new count, each added partition's replicas or nil] (partlog.controller.partition_admin).
    "create_partitions": Map(
        required={
            "topics": List(
                Tuple(
                    ("name", Str(TOPIC_NAME_BYTES_MAX)),
                    ("count", INT32),
                    # Any int32: an id no broker has is the controller's answer (Kafka's).
                    ("assignments", Nullable(List(List(INT32, BROKERS_MAX), PARTITIONS_PER_TOPIC_MAX))),
                ),
                TOPICS_PER_REQUEST_MAX,
            ),
            "validate_only": Bool(),
        }
    ),
    "delete_topics": Map(required={"topics": List(Str(TOPIC_NAME_BYTES_MAX), TOPICS_PER_REQUEST_MAX)}),
    # [topic, partition, target broker ids or nil to cancel] (partlog.controller.reassignment);
    # any int32: an unknown partition or broker is the controller's answer (Kafka's).
    "alter_reassignments": Map(
        required={
            "partitions": List(
                Tuple(
                    ("topic", Str(TOPIC_NAME_BYTES_MAX)),
                    ("partition", INT32),
                    ("replicas", Nullable(List(INT32, BROKERS_MAX))),
                ),
                PARTITIONS_PER_CLUSTER_MAX,
            )
        }
    ),
    "list_reassignments": Map(
        required={
            "partitions": Nullable(
                List(Tuple(("topic", Str(TOPIC_NAME_BYTES_MAX)), ("partition", INT32)), PARTITIONS_PER_CLUSTER_MAX)
            )
        }
    ),
    # partlog.controller.wire: a topic's overrides, and IncrementalAlterConfigs'
    # [op, name, value or nil] (docs/design/topic-configs.md).
    "alter_topic_configs": Map(
        required={
            "topics": List(
                Tuple(Str(TOPIC_NAME_BYTES_MAX), Bool(), List(_CONFIG_OP, TOPIC_CONFIG_OPS_MAX)), TOPICS_PER_REQUEST_MAX
            )
        },
        optional={"validate_only": Bool()},
    ),
    # partlog.controller.acls: a binding is [resource_type, name, pattern_type,
    # principal, host, operation, permission]; a filter's strings may be nil.
    "acls_poll": Map(required={"version": INT64, "max_wait_ms": NON_NEGATIVE_INT32}),
    "create_acls": Map(required={"acls": List(_ACL_BINDING, ACLS_PER_REQUEST_MAX)}),
    "delete_acls": Map(required={"filters": List(_ACL_FILTER, ACLS_PER_REQUEST_MAX)}),
}

# What clients accept from a broker (partlog.client checks them: a broken or
# hostile broker's answer fails that call, never the client).
_ERROR_MESSAGE = Nullable(Str(4 * 2000))
RESPONSE_SCHEMAS: dict[str, Schema] = {
    "metadata": Map(
        required={
            "brokers": List(Tuple(("id", BROKER_ID), ("az", NAME), ("host", NAME), ("port", PORT)), BROKERS_MAX),
            "topics": List(
                Tuple(
                    ("name", Str(TOPIC_NAME_BYTES_MAX)),
                    ("topic_id", TOPIC_ID),
                    (
                        "partitions",
                        List(
                            Tuple(
                                ("partition", PARTITION), ("leader", Int(-1, INT32_MAX)), ("target", Int(-1, INT32_MAX))
                            ),
                            PARTITIONS_PER_TOPIC_MAX,
                        ),
                    ),
                ),
                TOPICS_MAX,
            ),
        }
    ),
    "init_producer_id": Map(required={"error": INT16, "producer_id": INT64, "producer_epoch": INT16}),
    "list_offsets": Map(
        required={"partitions": List(Tuple(("error", INT16), ("timestamp", INT64), ("offset", INT64)), PARTITIONS_MAX)}
    ),
    "delete_records": Map(
        required={"partitions": List(Tuple(("error", INT16), ("low_watermark", INT64)), PARTITIONS_MAX)}
    ),
    "offset_for_leader_epoch": Map(
        required={
            "partitions": List(Tuple(("error", INT16), ("leader_epoch", INT32), ("end_offset", INT64)), PARTITIONS_MAX)
        }
    ),
    "fetch": Map(
        required={
            "partitions": List(
                Tuple(
                    ("error", INT16),
                    ("high_watermark", INT64),
                    ("log_start_offset", INT64),
                    ("records", Bytes(RPC_FRAME_BYTES_MAX)),
                    ("message", _ERROR_MESSAGE),
                    ("last_stable_offset", INT64),
                    (
                        "aborted",
                        List(Tuple(("producer_id", INT64), ("first_offset", INT64)), ABORTED_TXNS_PER_FETCH_MAX),
                    ),
                ),
                PARTITIONS_MAX,
            )
        }
    ),
    "write_txn_markers": Map(required={"partitions": List(Tuple(("error", INT16)), PARTITIONS_MAX)}),
    "verify_txn": Map(required={"partitions": List(Tuple(("error", INT16)), PARTITIONS_MAX)}),
    "add_partitions_to_txn": Map(required={"partitions": List(Tuple(("error", INT16)), TXN_PARTITIONS_MAX)}),
    "end_txn": Map(required={"error": INT16}),
}

WALMGR_SCHEMAS: dict[str, Schema] = {
    "wal_uploaded": Map(
        required={
            "objects": List(
                Tuple(
                    ("key", OBJECT_KEY),
                    ("size", Int(0, INT64_MAX)),
                    ("created_ms", INT64),
                    ("broker", BROKER_ID),
                    (
                        "partitions",
                        List(Tuple(("topic_id", TOPIC_ID), ("partition", PARTITION)), NOTIFY_PARTITIONS_MAX),
                    ),
                ),
                NOTIFY_OBJECTS_MAX,
            )
        }
    ),
}

__all__ = [
    "BROKER_SCHEMAS",
    "COMMIT_BATCHES_MAX",
    "CONTROLLER_SCHEMAS",
    "NOTIFY_OBJECTS_MAX",
    "PARTITIONS_MAX",
    "PRODUCE_BATCHES_MAX",
    "REFERENCE_CHECKS_MAX",
    "RESPONSE_SCHEMAS",
    "WALMGR_SCHEMAS",
]
