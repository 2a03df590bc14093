"""The group coordinator's partition for a group id: Java's String.hashCode, as Kafka computes it."""

from __future__ import annotations

from partlog.kafka_front.group_coordinator import java_string_hash, partition_for


def test_java_string_hash_matches_java() -> None:
    # Values of "".hashCode(), "a".hashCode() and "hello".hashCode() in Java.
    assert java_string_hash("") == 0
    assert java_string_hash("a") == 97
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == -(1 << 31)
    assert partition_for("polygenelubricants", 50) == 0  # Utils.abs(MIN_VALUE) is 0
