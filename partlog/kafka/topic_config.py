"""Per-topic configuration, by Kafka's config names, with Kafka's defaults.

:class:`TopicConfig` is a topic's whole config; a topic's *overrides* (the
keys set for it, Kafka's dynamic topic configs) are a ``{name: value}`` map
the controller keeps (docs/design/topic-configs.md).  :func:`apply_config_ops`
is IncrementalAlterConfigs' and AlterConfigs' rule over overrides, shared by
both controllers; errors carry Kafka's messages (TopicConfigError)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from partlog.kafka.batch_header import INT32_MAX
from partlog.kafka.records import TimestampType

# Kafka's defaults (TopicConfig / ServerLogConfigs, Kafka 4.x).
RETENTION_MS_DEFAULT = 7 * 24 * 3600 * 1000
# Kafka 4.0 (KIP-937) bounds how far in the future a CreateTime may be.
TIMESTAMP_AFTER_MAX_MS_DEFAULT = 3600 * 1000
TIMESTAMP_BEFORE_MAX_MS_DEFAULT = 2**63 - 1
MAX_MESSAGE_BYTES_DEFAULT = 1048588
# Segments (partlog/tiered/segment.py holds the same defaults): Kafka 4.0
# (KIP-1030) raised segment.bytes' minimum to 1 MiB.
SEGMENT_BYTES_DEFAULT = 1 << 30
SEGMENT_BYTES_MIN = 1 << 20
SEGMENT_MS_DEFAULT = 7 * 24 * 3600 * 1000
INDEX_INTERVAL_BYTES_DEFAULT = 4096
SEGMENT_INDEX_BYTES_DEFAULT = 10 * 1024 * 1024
# Kafka takes segment.index.bytes >= 4; partlog's segment builder needs two
# time-index entries (24 bytes) and reads an index whole, so bounds it at
# 64 MiB (partlog.tiered.segment.SEGMENT_INDEX_BYTES_MAX).
SEGMENT_INDEX_BYTES_MIN = 24
SEGMENT_INDEX_BYTES_MAX = 64 << 20
INT64_MAX = 2**63 - 1
# Compaction (docs/design/compaction.md): Kafka's defaults.
CLEANUP_POLICY_DEFAULT = "delete"
CLEANUP_POLICIES = ("compact", "delete")
DELETE_RETENTION_MS_DEFAULT = 24 * 3600 * 1000
MIN_COMPACTION_LAG_MS_DEFAULT = 0
MAX_COMPACTION_LAG_MS_DEFAULT = INT64_MAX
MIN_CLEANABLE_DIRTY_RATIO_DEFAULT = 0.5
# Kept and described, not applied (design.md): batches stay as the producer
# compressed them, and partlog has no local segment files to delete late.
COMPRESSION_TYPE_DEFAULT = "producer"
COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
FILE_DELETE_DELAY_MS_DEFAULT = 60_000
# Kept and described, and met whatever their value: they bound how long
# Kafka may hold appended records unflushed, and partlog acknowledges a
# batch only once its WAL file is durable in object storage.
FLUSH_MESSAGES_DEFAULT = 2**63 - 1
FLUSH_MS_DEFAULT = 2**63 - 1


class TopicConfigError(ValueError):
    """A topic config key or value is invalid; the message names it."""


@dataclass(frozen=True, slots=True)
class TopicConfig:
    message_timestamp_type: TimestampType = TimestampType.CREATE_TIME
    retention_ms: int = RETENTION_MS_DEFAULT  # -1: no time limit
    retention_bytes: int = -1  # -1: no size limit
    max_message_bytes: int = MAX_MESSAGE_BYTES_DEFAULT
    message_timestamp_before_max_ms: int = TIMESTAMP_BEFORE_MAX_MS_DEFAULT
    message_timestamp_after_max_ms: int = TIMESTAMP_AFTER_MAX_MS_DEFAULT
    # Tiered segments (docs/design/tiered.md): off unless the topic asks.
    remote_storage_enable: bool = False
    segment_bytes: int = SEGMENT_BYTES_DEFAULT
    segment_ms: int = SEGMENT_MS_DEFAULT
    segment_index_bytes: int = SEGMENT_INDEX_BYTES_DEFAULT
    index_interval_bytes: int = INDEX_INTERVAL_BYTES_DEFAULT
    # Compaction: "delete", "compact" or "compact,delete" (normalized).
    cleanup_policy: str = CLEANUP_POLICY_DEFAULT
    delete_retention_ms: int = DELETE_RETENTION_MS_DEFAULT
    min_compaction_lag_ms: int = MIN_COMPACTION_LAG_MS_DEFAULT
    max_compaction_lag_ms: int = MAX_COMPACTION_LAG_MS_DEFAULT
    min_cleanable_dirty_ratio: float = MIN_CLEANABLE_DIRTY_RATIO_DEFAULT
    compression_type: str = COMPRESSION_TYPE_DEFAULT
    file_delete_delay_ms: int = FILE_DELETE_DELAY_MS_DEFAULT
    flush_messages: int = FLUSH_MESSAGES_DEFAULT
    flush_ms: int = FLUSH_MS_DEFAULT

    @property
    def compact(self) -> bool:
        """The log cleaner compacts this topic (cleanup.policy has compact)."""
        return "compact" in self.cleanup_policy.split(",")

    @property
    def delete(self) -> bool:
        """retention.ms and retention.bytes delete old batches (cleanup.policy
        has delete); a compact-only topic keeps them (Kafka's ``config.delete``)."""
        return "delete" in self.cleanup_policy.split(",")

    @property
    def tiered(self) -> bool:
        """Leaders build segments for this topic: remote.storage.enable, or
        compaction, which cleans segments (compact implies tiering: KIP-1163
        wants compacted diskless topics to just work)."""
        return self.remote_storage_enable or self.compact

    def to_configs(self) -> dict[str, str]:
        return {
            "message.timestamp.type": (
                "LogAppendTime" if self.message_timestamp_type == TimestampType.LOG_APPEND_TIME else "CreateTime"
            ),
            "retention.ms": str(self.retention_ms),
            "retention.bytes": str(self.retention_bytes),
            "max.message.bytes": str(self.max_message_bytes),
            "message.timestamp.before.max.ms": str(self.message_timestamp_before_max_ms),
            "message.timestamp.after.max.ms": str(self.message_timestamp_after_max_ms),
            "remote.storage.enable": "true" if self.remote_storage_enable else "false",
            "segment.bytes": str(self.segment_bytes),
            "segment.ms": str(self.segment_ms),
            "segment.index.bytes": str(self.segment_index_bytes),
            "index.interval.bytes": str(self.index_interval_bytes),
            "cleanup.policy": self.cleanup_policy,
            "delete.retention.ms": str(self.delete_retention_ms),
            "min.compaction.lag.ms": str(self.min_compaction_lag_ms),
            "max.compaction.lag.ms": str(self.max_compaction_lag_ms),
            "min.cleanable.dirty.ratio": repr(self.min_cleanable_dirty_ratio),
            "compression.type": self.compression_type,
            "file.delete.delay.ms": str(self.file_delete_delay_ms),
            "flush.messages": str(self.flush_messages),
            "flush.ms": str(self.flush_ms),
        }

    def with_configs(self, configs: Mapping[str, str | int]) -> TopicConfig:
        """A copy with ``configs`` applied; raises TopicConfigError naming a bad key."""
        changes: dict[str, object] = {}
        for key, value in configs.items():
            if key == "message.timestamp.type":
                if value == "CreateTime":
                    changes["message_timestamp_type"] = TimestampType.CREATE_TIME
                elif value == "LogAppendTime":
                    changes["message_timestamp_type"] = TimestampType.LOG_APPEND_TIME
                else:
                    raise TopicConfigError(_invalid(key, value, "String must be one of: CreateTime, LogAppendTime"))
            elif key == "remote.storage.enable":
                # Kafka's BOOLEAN type: a bool, or "true" / "false" in any case.
                if isinstance(value, bool):
                    changes["remote_storage_enable"] = value
                elif isinstance(value, str) and value.strip().lower() in ("true", "false"):
                    changes["remote_storage_enable"] = value.strip().lower() == "true"
                else:
                    raise TopicConfigError(_invalid(key, value, "Expected value to be either true or false"))
            elif key == "cleanup.policy":
                changes["cleanup_policy"] = _cleanup_policy(value)
            elif key == "min.cleanable.dirty.ratio":
                changes["min_cleanable_dirty_ratio"] = _ratio(key, value)
            elif key == "compression.type":
                # Kafka's ValidString, case-sensitive.
                if value not in COMPRESSION_TYPES:
                    why = f"String must be one of: {', '.join(COMPRESSION_TYPES)}"
                    raise TopicConfigError(_invalid(key, value, why))
                changes["compression_type"] = value
            elif key in _INT_KEYS:
                attr, minimum, maximum = _INT_KEYS[key]
                try:
                    number = int(value)
                except (TypeError, ValueError):
                    raise TopicConfigError(_invalid(key, value, f"Not a number of type {CONFIG_TYPES[key]}")) from None
                if number < minimum:
                    raise TopicConfigError(_invalid(key, number, f"Value must be at least {minimum}"))
                if number > maximum:
                    raise TopicConfigError(_invalid(key, number, f"Value must be no more than {maximum}"))
                changes[attr] = number
            else:
                raise TopicConfigError(f"Unknown topic config name: {key}")
        out = replace(self, **changes)  # type: ignore[arg-type]
        # Kafka's LogConfig.validateValues, after the single values.
        if out.min_compaction_lag_ms > out.max_compaction_lag_ms:
            raise TopicConfigError(
                f"conflict topic config setting min.compaction.lag.ms ({out.min_compaction_lag_ms})"
                f" > max.compaction.lag.ms ({out.max_compaction_lag_ms})"
            )
        return out


def _cleanup_policy(value: object) -> str:
    """cleanup.policy as Kafka's ValidList of compact and delete: a comma
    separated list, each once; normalized to "compact,delete" order."""
    if not isinstance(value, str):
        raise TopicConfigError(_invalid("cleanup.policy", value, "must be a list of compact and delete"))
    items = [v.strip() for v in value.split(",")]
    if not value.strip() or any(v not in CLEANUP_POLICIES for v in items):
        raise TopicConfigError(
            f"Invalid value {value} for configuration cleanup.policy: String must be one of: compact, delete"
        )
    if len(set(items)) != len(items):
        raise TopicConfigError(f"Configuration 'cleanup.policy' values must not be duplicated: {value}")
    return ",".join(p for p in CLEANUP_POLICIES if p in items)


def _ratio(key: str, value: object) -> float:
    """A DOUBLE config in [0, 1] (Kafka's Range.between(0, 1))."""
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise TopicConfigError(_invalid(key, value, "Not a number of type DOUBLE")) from None
    if not 0.0 <= number <= 1.0:  # (NaN fails both)
        raise TopicConfigError(_invalid(key, number, "Value must be between 0.0 and 1.0"))
    return number


# key -> (attribute, minimum, maximum): Kafka's ranges (INT configs end at
# int32's maximum, LONG ones at int64's).
_INT_KEYS: dict[str, tuple[str, int, int]] = {
    "retention.ms": ("retention_ms", -1, INT64_MAX),
    "retention.bytes": ("retention_bytes", -1, INT64_MAX),
    "max.message.bytes": ("max_message_bytes", 0, INT64_MAX),
    "message.timestamp.before.max.ms": ("message_timestamp_before_max_ms", 0, INT64_MAX),
    "message.timestamp.after.max.ms": ("message_timestamp_after_max_ms", 0, INT64_MAX),
    "segment.bytes": ("segment_bytes", SEGMENT_BYTES_MIN, INT32_MAX),
    "segment.ms": ("segment_ms", 1, INT64_MAX),
    "segment.index.bytes": ("segment_index_bytes", SEGMENT_INDEX_BYTES_MIN, SEGMENT_INDEX_BYTES_MAX),
    "index.interval.bytes": ("index_interval_bytes", 0, INT32_MAX),
    "delete.retention.ms": ("delete_retention_ms", 0, INT64_MAX),
    "min.compaction.lag.ms": ("min_compaction_lag_ms", 0, INT64_MAX),
    "max.compaction.lag.ms": ("max_compaction_lag_ms", 1, INT64_MAX),
    "file.delete.delay.ms": ("file_delete_delay_ms", 0, INT64_MAX),
    "flush.messages": ("flush_messages", 1, INT64_MAX),
    "flush.ms": ("flush_ms", 0, INT64_MAX),
}
_KNOWN = {
    "message.timestamp.type",
    "remote.storage.enable",
    "cleanup.policy",
    "min.cleanable.dirty.ratio",
    "compression.type",
    *_INT_KEYS,
}


def _invalid(key: str, value: object, why: str) -> str:
    """Kafka's ConfigException text (a hostile value is cut short)."""
    return f"Invalid value {value!s:.200} for configuration {key}: {why}"


# Kafka's ConfigDef types of the configs TopicConfig knows (DescribeConfigs'
# config_type, and the "Not a number of type" messages).
CONFIG_TYPES: dict[str, str] = {
    "message.timestamp.type": "STRING",
    "retention.ms": "LONG",
    "retention.bytes": "LONG",
    "max.message.bytes": "INT",
    "message.timestamp.before.max.ms": "LONG",
    "message.timestamp.after.max.ms": "LONG",
    "remote.storage.enable": "BOOLEAN",
    "segment.bytes": "INT",
    "segment.ms": "LONG",
    "segment.index.bytes": "INT",
    "index.interval.bytes": "INT",
    "cleanup.policy": "LIST",
    "delete.retention.ms": "LONG",
    "min.compaction.lag.ms": "LONG",
    "max.compaction.lag.ms": "LONG",
    "min.cleanable.dirty.ratio": "DOUBLE",
    "compression.type": "STRING",
    "file.delete.delay.ms": "LONG",
    "flush.messages": "LONG",
    "flush.ms": "LONG",
}
TOPIC_CONFIG_NAMES = frozenset(CONFIG_TYPES)

# Kafka's AlterConfigOp.OpType ids (IncrementalAlterConfigs).
OP_SET = 0
OP_DELETE = 1
OP_APPEND = 2
OP_SUBTRACT = 3
_OP_NAMES = {OP_APPEND: "APPEND", OP_SUBTRACT: "SUBTRACT"}

# Bounds on what one request may ask of one topic (Kafka has none; a value
# of a known config is at most a few dozen characters).
TOPIC_CONFIG_NAME_CHARS_MAX = 255
TOPIC_CONFIG_VALUE_CHARS_MAX = 1_000
TOPIC_CONFIG_OPS_MAX = 1_000


@dataclass(frozen=True, slots=True)
class ConfigOp:
    """One IncrementalAlterConfigs entry; ``value`` None only for DELETE."""

    op: int
    name: str
    value: str | None


def validate_overrides(overrides: Mapping[str, str]) -> TopicConfig:
    """The topic config these overrides make; TopicConfigError (Kafka's
    message) for an unknown name or a bad value."""
    return TopicConfig().with_configs(overrides)


def apply_config_ops(current: Mapping[str, str], ops: Sequence[ConfigOp], *, replace: bool = False) -> dict[str, str]:
    """The overrides after ``ops``, validated whole (Kafka's
    ConfigurationControlManager): SET sets, DELETE removes, APPEND and
    SUBTRACT change a LIST config's items, starting from its override, else
    its default.  ``replace`` (AlterConfigs): the result holds only what
    ``ops`` set.  TopicConfigError with Kafka's message."""
    out: dict[str, str] = {} if replace else dict(current)
    for o in ops:
        if o.op == OP_SET:
            assert o.value is not None, f"SET {o.name} without a value"
            out[o.name] = o.value
        elif o.op == OP_DELETE:
            out.pop(o.name, None)
        else:
            assert o.op in _OP_NAMES, f"config op {o.op}"
            if CONFIG_TYPES.get(o.name) != "LIST":
                raise TopicConfigError(f"Can't {_OP_NAMES[o.op]} to key {o.name} because its type is not LIST.")
            assert o.value is not None, f"{_OP_NAMES[o.op]} {o.name} without a value"
            items = [v for v in out.get(o.name, TopicConfig().to_configs()[o.name]).split(",") if v]
            for v in o.value.split(","):
                if o.op == OP_APPEND and v not in items:
                    items.append(v)
                elif o.op == OP_SUBTRACT and v in items:
                    items.remove(v)
            out[o.name] = ",".join(items)
    validate_overrides(out)
    return out
