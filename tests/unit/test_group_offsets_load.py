"""Loading committed offsets from __consumer_offsets: a hostile or damaged
record or batch is skipped, never stops the load (a client that could write
one would otherwise keep every group of the partition from loading)."""

from __future__ import annotations

import asyncio
import math
import uuid
from typing import Any

import msgpack
from hypothesis import given, settings
from hypothesis import strategies as st

from partlog.groups.membership import Groups
from partlog.kafka.record_batch import build_record_batch
from partlog.kafka.records import TopicIdPartition
from partlog.kafka_front.consumer_group import ConsumerGroups
from partlog.kafka_front.group_coordinator import Committed, GroupCoordinator, _Partition

TP = TopicIdPartition(uuid.UUID(int=1), 0)


def _coordinator() -> GroupCoordinator:
    return GroupCoordinator(broker=None)  # type: ignore[arg-type]  # replay touches no broker


def _part() -> _Partition:
    return _Partition(0, Groups(), {}, asyncio.Event(), ConsumerGroups(new_uuid=uuid.uuid4))


def _record(group: Any, topic: Any, p: Any, value: Any, ts: int = 1) -> tuple[bytes | None, bytes | None, int]:
    return msgpack.packb([group, topic, p]), (None if value is None else msgpack.packb(value)), ts


def test_bad_records_are_skipped_and_good_ones_load() -> None:
    c, part = _coordinator(), _part()
    batch = build_record_batch(
        [
            _record("g", "t", 0, [5, 0, "", 1]),
            _record("g", "t", 1, [math.inf, 0, "", 0]),  # OverflowError in int()
            (b"\xc1", b"\xc1", 1),  # not msgpack
            _record(["g"], "t", 0, [1, 0, "", 0]),  # key of the wrong shape
            _record("g", "t", 2, [7, 3, "meta", 9]),
        ]
    )
    assert c._replay(TP, part, batch, 0) == 5
    assert part.offsets == {"g": {("t", 0): Committed(5, 0, "", 1, 0), ("t", 2): Committed(7, 3, "meta", 9, 4)}}
    assert c.records_skipped == 3


def test_a_batch_that_does_not_decode_is_skipped_whole() -> None:
    c, part = _coordinator(), _part()
    good = build_record_batch([_record("g", "t", 0, [1, 0, "", 1])])
    bad = bytearray(build_record_batch([_record("g", "t", 0, [2, 0, "", 1])]))
    bad[21:23] = (0x0006).to_bytes(2, "big")  # attributes: an unknown compression codec
    bad[0:8] = (1).to_bytes(8, "big")  # base offset 1
    assert c._replay(TP, part, good + bytes(bad), 0) == 2
    assert part.offsets["g"][("t", 0)].offset == 1
    assert c.records_skipped == 1


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.binary(max_size=40), st.one_of(st.none(), st.binary(max_size=40))), max_size=8))
def test_any_record_bytes_never_raise(records: list[tuple[bytes, bytes | None]]) -> None:
    c, part = _coordinator(), _part()
    batch = build_record_batch([(k, v, 1) for k, v in records]) if records else b""
    c._replay(TP, part, batch, 0)
    for offsets in part.offsets.values():
        for (topic, p), committed in offsets.items():
            assert isinstance(topic, str) and type(p) is int and type(committed.offset) is int
