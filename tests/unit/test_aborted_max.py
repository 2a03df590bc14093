"""``within_aborted_max``: a READ_COMMITTED answer never lists more aborted
transactions than the bound, and never drops one that overlaps what it
returns (the range is cut instead)."""

from __future__ import annotations

import uuid
from unittest import mock

from hypothesis import given
from hypothesis import strategies as st

from partlog.kafka.records import AbortedTxn, BatchInfo, BatchMetadata, TimestampType, TopicIdPartition
from partlog.store import reads

TP = TopicIdPartition(uuid.UUID(int=3), 0)


def _batch(base: int, last: int) -> BatchInfo:
    meta = BatchMetadata(TP, 0, 100, base, last, -1, -1, TimestampType.CREATE_TIME, -1, -1, -1, -1)
    return BatchInfo(base, "key", meta)


@given(
    st.lists(st.integers(1, 4), min_size=1, max_size=12),
    st.lists(st.integers(0, 40), max_size=30),
    st.integers(1, 6),
)
def test_the_range_is_cut_so_every_overlapping_abort_is_listed(sizes: list[int], firsts: list[int], bound: int) -> None:
    found, base = [], 0
    for n in sizes:
        found.append(_batch(base, base + n - 1))
        base += n
    upper = base
    aborted = [AbortedTxn(1000 + i, f) for i, f in enumerate(firsts) if f < upper]
    with mock.patch.object(reads, "ABORTED_TXNS_PER_FETCH_MAX", bound):
        kept, listed = reads.within_aborted_max(found, aborted)
    assert kept == found[: len(kept)] and kept
    kept_upper = kept[-1].metadata.last_offset + 1
    # Every abort overlapping the kept range is listed, none beyond it.
    assert set(listed) == {a for a in aborted if a.first_offset < kept_upper}
    # Within the bound, unless even the first batch alone needs more.
    assert len(listed) <= bound or len(kept) == 1
