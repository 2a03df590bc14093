"""TopicIdPartition's hand-written equality (a dict hit with another
instance calls it on every replica fetch) against the model: equal exactly
when (topic_id, partition) are, with equal hashes then."""

from __future__ import annotations

import uuid

from hypothesis import given
from hypothesis import strategies as st

from partlog.kafka.records import TopicIdPartition

# Few ids and partitions, so equal pairs are common.
_IDS = st.sampled_from([uuid.UUID(int=i) for i in (0, 1, 2**64, 2**127 + 5)]) | st.uuids()
_PARTS = st.integers(0, 3) | st.integers(-(2**31), 2**31 - 1)


@given(_IDS, _PARTS, _IDS, _PARTS)
def test_equal_exactly_when_the_pairs_are(a_id: uuid.UUID, a_p: int, b_id: uuid.UUID, b_p: int) -> None:
    # Fresh UUID objects: never the same instance by accident.
    a = TopicIdPartition(uuid.UUID(bytes=a_id.bytes), a_p)
    b = TopicIdPartition(uuid.UUID(bytes=b_id.bytes), b_p)
    same = (a_id, a_p) == (b_id, b_p)
    assert (a == b) is same and (a != b) is not same
    if same:
        assert hash(a) == hash(b) and {a: 1}[b] == 1


@given(_IDS, _PARTS)
def test_never_equal_to_another_type(topic_id: uuid.UUID, partition: int) -> None:
    tp = TopicIdPartition(topic_id, partition)
    assert tp == tp
    assert tp != (topic_id, partition) and tp != str(tp) and tp is not None
