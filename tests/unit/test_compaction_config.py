"""Compaction's topic configs (docs/design/compaction.md): Kafka's names,
defaults, ranges and cross-check; compact implies tiering; a compact-only
topic is not trimmed by retention."""

from __future__ import annotations

import pytest

from partlog.kafka.topic_config import TopicConfig, TopicConfigError


def test_defaults_as_kafka() -> None:
    c = TopicConfig()
    assert c.to_configs()["cleanup.policy"] == "delete"
    assert c.to_configs()["delete.retention.ms"] == "86400000"
    assert c.to_configs()["min.compaction.lag.ms"] == "0"
    assert c.to_configs()["max.compaction.lag.ms"] == str(2**63 - 1)
    assert c.to_configs()["min.cleanable.dirty.ratio"] == "0.5"
    assert c.delete and not c.compact and not c.tiered


@pytest.mark.parametrize(
    ("given", "normal", "compact", "delete"),
    [
        ("compact", "compact", True, False),
        ("delete", "delete", False, True),
        ("compact,delete", "compact,delete", True, True),
        ("delete, compact", "compact,delete", True, True),
    ],
)
def test_cleanup_policy(given: str, normal: str, compact: bool, delete: bool) -> None:
    c = TopicConfig().with_configs({"cleanup.policy": given})
    assert (c.cleanup_policy, c.compact, c.delete) == (normal, compact, delete)
    assert c.tiered == compact  # compact implies tiering
    assert TopicConfig().with_configs(c.to_configs()) == c  # round trip, as the store keeps it


@pytest.mark.parametrize("bad", ["", "compacted", "compact,compact", "compact,,delete", 3])
def test_cleanup_policy_refused(bad: object) -> None:
    with pytest.raises(TopicConfigError):
        TopicConfig().with_configs({"cleanup.policy": bad})  # type: ignore[dict-item]


@pytest.mark.parametrize(
    "configs",
    [
        {"delete.retention.ms": "-1"},
        {"min.compaction.lag.ms": "-1"},
        {"max.compaction.lag.ms": "0"},
        {"min.cleanable.dirty.ratio": "1.5"},
        {"min.cleanable.dirty.ratio": "-0.1"},
        {"min.cleanable.dirty.ratio": "nan"},
        {"min.cleanable.dirty.ratio": "half"},
        {"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"},
    ],
)
def test_ranges_refused(configs: dict[str, str]) -> None:
    with pytest.raises(TopicConfigError):
        TopicConfig().with_configs(configs)


def test_values_taken() -> None:
    c = TopicConfig().with_configs(
        {
            "delete.retention.ms": "0",
            "min.compaction.lag.ms": "5",
            "max.compaction.lag.ms": "5",
            "min.cleanable.dirty.ratio": "0",
        }
    )
    assert (c.delete_retention_ms, c.min_compaction_lag_ms, c.max_compaction_lag_ms) == (0, 5, 5)
    assert c.min_cleanable_dirty_ratio == 0.0
