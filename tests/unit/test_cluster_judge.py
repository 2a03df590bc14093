"""The ``partlog cluster`` verifier's judgement of acknowledged records."""

from __future__ import annotations

import uuid

from partlog.client import RecordMetadata
from partlog.kafka.records import TopicIdPartition
from partlog.tools.cluster_load import judge

TOPIC = uuid.UUID(int=7)
P0, P1 = TopicIdPartition(TOPIC, 0), TopicIdPartition(TOPIC, 1)


def test_an_offset_unknown_ack_is_verified_in_its_partition() -> None:
    # Regression (CI, stop 42): the producer's "written, offset unknown" (-1)
    # counted as lost although the record was read back once.
    v = judge({(1, 704): RecordMetadata(P0, -1, -1)}, {(1, 704): [(P0, 263)]})
    assert (v.verified, v.lost, v.misplaced, v.duplicated) == (1, 0, 0, 0)


def test_an_offset_unknown_ack_elsewhere_or_missing_is_not() -> None:
    acked = {(1, 1): RecordMetadata(P0, -1, -1), (1, 2): RecordMetadata(P0, -1, -1)}
    v = judge(acked, {(1, 1): [(P1, 5)]})
    assert (v.verified, v.lost, v.misplaced) == (0, 1, 1)
    assert sorted(v.lost_examples) == [(1, 1, 0, -1, [5]), (1, 2, 0, -1, [])]


def test_a_known_offset_must_match_and_duplicates_count() -> None:
    acked = {(0, 0): RecordMetadata(P0, 3, -1), (0, 1): RecordMetadata(P0, 4, -1)}
    v = judge(acked, {(0, 0): [(P0, 3), (P0, 9)], (0, 1): [(P0, 5)]})
    assert (v.verified, v.misplaced, v.duplicated) == (1, 1, 1)


def test_order_is_checked_per_producer_and_partition() -> None:
    seen = {(0, 0): [(P0, 5)], (0, 1): [(P0, 4)], (1, 0): [(P1, 9)], (1, 1): [(P0, 1)]}
    assert judge({}, seen).order_violations == 1
