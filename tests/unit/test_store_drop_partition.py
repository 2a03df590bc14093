"""MetadataStore.drop_partition_logs: a partition this broker no longer
replicates is emptied as its creation made it, its references released
under the release grace (walmgr must not delete what a new replica may be
about to reference)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from partlog import MetadataStore
from partlog.kafka.errors import Errors
from partlog.kafka.records import CreateTopicAndPartitionsRequest, DeleteRecordsRequest, TopicIdPartition
from tests.batches import build_batch, request, wal_key
from tests.clock import Clock

T0 = 1_700_000_000_000
GRACE_MS = 60_000


class Monotonic:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def monotonic() -> Monotonic:
    return Monotonic()


@pytest.fixture
def store(tmp_path: Path, monotonic: Monotonic) -> Iterator[MetadataStore]:
    with MetadataStore.open(
        tmp_path / "s", sync=False, clock=Clock(T0), monotonic=monotonic, release_grace_ms=GRACE_MS
    ) as s:
        yield s
        assert s.check() == []


def idem(seq: int) -> bytes:
    return build_batch(1, producer_id=7, producer_epoch=0, base_sequence=seq)


def commit(store: MetadataStore, tp: TopicIdPartition, n: int, ms: int, seq: int = 0) -> str:
    key = wal_key(T0 + ms)
    reqs = [request(tp, idem(seq + i), byte_offset=1 + i * 100, request_id=i) for i in range(n)]
    assert all(r.errors == Errors.NONE for r in store.commit_file(key, 1, 1 << 20, reqs))
    return key


def test_a_dropped_partition_is_fresh_and_its_objects_stay_covered_for_the_grace(
    store: MetadataStore, monotonic: Monotonic
) -> None:
    tid = uuid.uuid4()
    store.create_topic_and_partitions([CreateTopicAndPartitionsRequest(tid, "t", 3)])
    gone, kept, empty = (TopicIdPartition(tid, p) for p in range(3))
    k1 = commit(store, gone, 3, 1)
    k2 = commit(store, gone, 2, 2, seq=3)
    k3 = commit(store, kept, 1, 3)
    store.set_high_watermark(gone, 5)
    [d] = store.delete_records([DeleteRecordsRequest(gone, 3)])  # the log start moved: k1 released already
    assert d.errors == Errors.NONE and store.log_start_offset(gone) == 3
    store.set_leader_epoch(gone, 4)
    unknown = TopicIdPartition(uuid.uuid4(), 0)

    assert store.drop_partition_logs([gone, empty, unknown]) == [gone]  # the empty one holds nothing
    state = store.partition_state(gone)
    assert (state["log_start_offset"], state["log_end_offset"], store.high_watermark(gone)) == (0, 0, 0)
    assert store.leader_epoch_cache(gone) == [(0, 0)]
    assert set(store.file_usage()) == {k3}
    assert store.references_held([k1, k2, k3]) == {k3}
    # walmgr hears "referenced" for a grace after the release.
    assert store.referenced_files([k1, k2, k3]) == {k1, k2, k3}
    monotonic.now += GRACE_MS / 1000 + 1
    assert store.referenced_files([k1, k2, k3]) == {k3}
    # Dropping again changes nothing; the partition takes new entries from
    # offset 0, with no producer state left (sequence 0 is not a duplicate).
    assert store.drop_partition_logs([gone]) == []
    [r] = store.commit_file(wal_key(T0 + 9), 1, 100, [request(gone, idem(0))])
    assert (r.errors, r.assigned_base_offset, r.is_duplicate) == (Errors.NONE, 0, False)
    assert store.log_end_offset(kept) == 1
