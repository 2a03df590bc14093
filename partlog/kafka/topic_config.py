"""Per-topic configuration, by Kafka's config names, with Kafka's defaults."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from partlog.kafka.records import TimestampType

# Kafka's defaults (TopicConfig / ServerLogConfigs, Kafka 4.x).
RETENTION_MS_DEFAULT = 7 * 24 * 3600 * 1000
# Kafka 4.0 (KIP-937) bounds how far in the future a CreateTime may be.
TIMESTAMP_AFTER_MAX_MS_DEFAULT = 3600 * 1000
TIMESTAMP_BEFORE_MAX_MS_DEFAULT = 2**63 - 1
MAX_MESSAGE_BYTES_DEFAULT = 1048588


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
                    raise TopicConfigError(f"message.timestamp.type={value!r}: must be CreateTime or LogAppendTime")
            elif key in _INT_KEYS:
                attr, minimum = _INT_KEYS[key]
                try:
                    number = int(value)
                except (TypeError, ValueError):
                    raise TopicConfigError(f"{key}={value!r}: not an integer") from None
                if number < minimum:
                    raise TopicConfigError(f"{key}={number}: must be >= {minimum}")
                changes[attr] = number
            else:
                raise TopicConfigError(f"unknown topic config {key!r}; known: {sorted(_KNOWN)}")
        return replace(self, **changes)  # type: ignore[arg-type]


_INT_KEYS: dict[str, tuple[str, int]] = {
    "retention.ms": ("retention_ms", -1),
    "retention.bytes": ("retention_bytes", -1),
    "max.message.bytes": ("max_message_bytes", 0),
    "message.timestamp.before.max.ms": ("message_timestamp_before_max_ms", 0),
    "message.timestamp.after.max.ms": ("message_timestamp_after_max_ms", 0),
}
_KNOWN = {"message.timestamp.type", *_INT_KEYS}
