"""Regression: the log_append_time a duplicate is answered with (Kafka's
UnifiedLog.append answers a duplicate with BatchMetadata.timestamp, the batch's
max timestamp after validation)."""

from __future__ import annotations

import uuid
from pathlib import Path

from partlog import CreateTopicAndPartitionsRequest, Errors, MetadataStore, TopicIdPartition
from tests.batches import build_batch, request, wal_key

T0 = 1_700_000_000_000


def _store(tmp_path: Path, now: list[int]) -> MetadataStore:
    return MetadataStore.open(tmp_path / "s", sync=False, clock=lambda: now[0])


def test_duplicate_on_create_time_topic_answers_max_timestamp(tmp_path: Path) -> None:
    now = [T0]
    with _store(tmp_path, now) as store:
        tid = uuid.uuid4()
        store.create_topic_and_partitions([CreateTopicAndPartitionsRequest(tid, "t", 1)])
        tp = TopicIdPartition(tid, 0)
        b = build_batch(3, producer_id=7, producer_epoch=0, base_sequence=0, timestamp_ms=T0 - 100)
        [first] = store.commit_file(wal_key(T0), 1, len(b), [request(tp, b, byte_offset=0)])
        assert (first.errors, first.log_append_time, first.is_duplicate) == (Errors.NONE, -1, False)
        now[0] += 10
        [dup] = store.commit_file(wal_key(now[0]), 1, len(b), [request(tp, b, byte_offset=0)])
        # The three records are stamped T0-100, T0-99, T0-98: max is T0-98.
        assert (dup.errors, dup.assigned_base_offset, dup.is_duplicate) == (Errors.NONE, 0, True)
        assert dup.log_append_time == T0 - 98


def test_duplicate_on_log_append_time_topic_answers_append_time(tmp_path: Path) -> None:
    now = [T0]
    with _store(tmp_path, now) as store:
        tid = uuid.uuid4()
        store.create_topic_and_partitions([CreateTopicAndPartitionsRequest(tid, "t", 1)])
        store.alter_topic_configs(tid, {"message.timestamp.type": "LogAppendTime"})
        tp = TopicIdPartition(tid, 0)
        b = build_batch(2, producer_id=7, producer_epoch=0, base_sequence=0, timestamp_ms=T0 - 5000)
        [first] = store.commit_file(wal_key(T0), 1, len(b), [request(tp, b, byte_offset=0)])
        assert first.log_append_time == T0
        now[0] += 10
        [dup] = store.commit_file(wal_key(now[0]), 1, len(b), [request(tp, b, byte_offset=0)])
        assert (dup.is_duplicate, dup.log_append_time) == (True, T0)
