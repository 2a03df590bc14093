"""Tiered segments' object keys and the leader's swap deadline (issue 31,
walmgr's gate for segments, step 1: an age the gate can trust).

* ``parse_segment_key`` accepts exactly the keys ``ObjectStoreRsm`` writes
  (``str`` of the parse gives the key back) and refuses anything else,
  WAL keys included, as the WAL parser refuses segment keys.
* A leader refuses to swap in a segment whose key's ``created_ms`` is past
  ``SEGMENT_SWAP_DEADLINE_MS_DEFAULT`` by the store's clock
  (COMMIT_DEADLINE_EXCEEDED, nothing changed); a follower applies its
  leader's swap whatever its age; a retry of a swap done in time is still
  a no-op; a key that is not a segment key has no age (walmgr never
  deletes one).
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from partlog import Errors, MetadataStore, TopicIdPartition
from partlog.store import SegmentSwap
from partlog.store.layout import SEGMENT_SWAP_DEADLINE_MS_DEFAULT
from partlog.tiered.remote_storage import IndexType, ObjectStoreRsm, RemoteLogSegmentMetadata
from partlog.wal.key import (
    SEGMENT_SUFFIXES,
    SegmentKeyError,
    WalKeyError,
    make_wal_key,
    parse_segment_key,
    parse_wal_key,
    segment_shard,
    shard_of,
)
from partlog.wal.localdir_store import LocalDirStore
from tests.clock import Clock
from tests.tiered_cases import sample_segment
from tests.unit.test_replica_segments import segment_of
from tests.unit.test_store_replication import T0, commit1, open_store, plain, replicate, topic

CLUSTER = uuid.UUID("c1c1c1c1-0000-4000-8000-00000000c1c1")
RSM = ObjectStoreRsm(LocalDirStore("/nonexistent-never-written"), cluster_id=CLUSTER)


def segment_keys(tp: TopicIdPartition, created_ms: int) -> dict[str, str]:
    meta = RemoteLogSegmentMetadata.for_segment(uuid.uuid4(), tp, sample_segment(3), created_ms)
    return {suffix: RSM.segment_key(meta, suffix) for suffix in SEGMENT_SUFFIXES}


def test_the_rsm_keys_parse_back() -> None:
    tp = TopicIdPartition(uuid.uuid4(), 12)
    keys = segment_keys(tp, 1_700_000_000_123)
    assert set(SEGMENT_SUFFIXES) == {".log", IndexType.OFFSET.value, IndexType.TIMESTAMP.value}
    parsed = {suffix: parse_segment_key(key) for suffix, key in keys.items()}
    for suffix, p in parsed.items():
        assert (p.prefix, p.cluster_id, p.topic_id, p.partition, p.created_ms, p.suffix) == (
            "tiered", CLUSTER, tp.topic_id, 12, 1_700_000_000_123, suffix
        )  # fmt: skip
        assert p.start_offset == sample_segment(3).base_offset
        assert str(p) == keys[suffix]
        assert keys[suffix].startswith(RSM.partition_prefix(tp))
    # The three objects of one copy attempt share a stem; another attempt's differ.
    assert len({p.stem for p in parsed.values()}) == 1
    assert parse_segment_key(segment_keys(tp, 1_700_000_000_123)[".log"]).stem != parsed[".log"].stem


def test_wal_and_segment_keys_never_parse_as_each_other() -> None:
    wal = str(make_wal_key("tiered", 1_700_000_000_000, 3, "ab"))
    with pytest.raises(SegmentKeyError):
        parse_segment_key(wal)
    for key in segment_keys(TopicIdPartition(uuid.uuid4(), 0), 5).values():
        with pytest.raises(WalKeyError):
            parse_wal_key(key)


def test_refusals() -> None:
    tp = TopicIdPartition(uuid.UUID("abcdef78-1234-5678-1234-56781234abcd"), 3)
    good = segment_keys(tp, 1_700_000_000_000)[".log"]
    parse_segment_key(good)
    head, name = good.rsplit("/", 1)
    start, created, sid = name[:20], name[21:34], name[35:-4]
    shard = segment_shard(CLUSTER, tp.topic_id, 3)
    other_shard = f"{(int(shard, 16) + 1) % 256:02x}"
    for bad in (
        f"{head}/{name[:-4]}.wal",
        f"{head}/{name}x",
        f"{head}/{start[1:]}-{created}-{sid}.log",
        f"{head}/{start}-{created[1:]}-{sid}.log",
        f"{head}/{start}-{created}-{sid.upper()}.log",
        f"{head}/{start}-{created}-{sid.replace('-', '')}.log",
        good.replace(f"/{shard}/", f"/{other_shard}/"),
        good.replace("/3/", "/03/"),
        good.replace(str(tp.topic_id), str(tp.topic_id).upper()),
        good.replace("tiered/", "tiered//"),
        good.replace("tiered/", "./"),
        "/" + good,
        f"{shard}/{tp.topic_id}/3",
        # The layout without the cluster (test data of the last session only).
        good.replace(f"/{CLUSTER}/", "/").replace(f"/{shard}/", f"/{shard_of(f'{tp.topic_id}/3')}/"),
        good.replace(str(CLUSTER), str(CLUSTER).upper()),
        good.replace(str(CLUSTER), "not-a-cluster"),
        good.replace(f"/{CLUSTER}/", f"/{CLUSTER}/{CLUSTER}/"),
        good.replace(
            f"/{shard}/{CLUSTER}/", f"/{segment_shard(uuid.UUID(int=1), tp.topic_id, 3)}/{uuid.UUID(int=1)}/"
        ).replace(f"/{segment_shard(uuid.UUID(int=1), tp.topic_id, 3)}/", "/zz/"),
        good.replace("/3/", "/2147483648/"),
        "tiered/" + "x" * 600 + "/" + good,
        good.replace("tiered/", "tiered\udcff/"),
    ):
        with pytest.raises(SegmentKeyError):
            parse_segment_key(bad)
            pytest.fail(bad)


@given(
    st.text(max_size=200)
    | st.text(st.characters(categories=["Cs", "Ll", "Nd", "Pd", "Po"]), max_size=50)
    | st.builds(
        lambda good, at, ch: good[:at] + ch + good[at + 1 :],
        st.sampled_from(list(segment_keys(TopicIdPartition(uuid.UUID(int=9), 1), 1).values())),
        st.integers(0, 180),
        st.text(min_size=0, max_size=2),
    )
)
def test_property_a_parse_gives_its_key_back_or_refuses(key: str) -> None:
    """Hostile keys: a SegmentKeyError, or a parse that is the key exactly."""
    try:
        parsed = parse_segment_key(key)
    except SegmentKeyError:
        return
    assert str(parsed) == key and parsed.suffix in SEGMENT_SUFFIXES
    assert parsed.shard == segment_shard(parsed.cluster_id, parsed.topic_id, parsed.partition)


# ------------------------------------------------------------ the swap deadline


def _leader_with_log(tmp_path: Path, clock: Clock) -> tuple[MetadataStore, TopicIdPartition]:
    store = open_store(tmp_path / "leader", clock)
    [tp] = topic([store])
    for _ in range(3):
        commit1(store, tp, plain())
    return store, tp


def _aged(swap: SegmentSwap, created_ms: int) -> SegmentSwap:
    key = segment_keys(swap.topic_id_partition, created_ms)[".log"]
    return SegmentSwap(swap.topic_id_partition, swap.start_offset, swap.end_offset, key, swap.size, swap.uploader)


def test_a_leader_refuses_a_segment_past_the_swap_deadline(tmp_path: Path) -> None:
    clock = Clock(T0)
    leader, tp = _leader_with_log(tmp_path, clock)
    with leader:
        base = segment_of(leader, tp, 0, 1)
        usage, placement = leader.file_usage(), leader.read_log(tp, 0, 1 << 20).entries
        old = _aged(base, T0 - SEGMENT_SWAP_DEADLINE_MS_DEFAULT - 1)
        got = leader.swap_to_segment(old)
        assert got.error == Errors.COMMIT_DEADLINE_EXCEEDED and got.moved == 0
        assert got.message is not None and "swap deadline" in got.message
        # Nothing changed: no row, no reference, the entries where they were.
        assert leader.segments(tp) == [] and leader.referenced_files({old.object_key}) == set()
        assert leader.file_usage() == usage and leader.read_log(tp, 0, 1 << 20).entries == placement
        # Exactly at the deadline it goes in; a retry later is still a no-op.
        edge = _aged(base, T0 - SEGMENT_SWAP_DEADLINE_MS_DEFAULT)
        assert leader.swap_to_segment(edge).error == Errors.NONE
        clock.now += 10 * SEGMENT_SWAP_DEADLINE_MS_DEFAULT
        assert leader.swap_to_segment(edge).error == Errors.NONE
        assert leader.referenced_files({edge.object_key}) == {edge.object_key}
        # A key from the future (the uploader's clock ahead) is within it.
        ahead = _aged(segment_of(leader, tp, 2, 2), clock.now + 60_000)
        assert leader.swap_to_segment(ahead).error == Errors.NONE
        assert leader.check() == []


def test_a_key_that_is_not_a_segment_key_has_no_age(tmp_path: Path) -> None:
    """walmgr never deletes such a key, so no deadline is needed to keep it safe."""
    clock = Clock(T0)
    leader, tp = _leader_with_log(tmp_path, clock)
    with leader:
        swap = segment_of(leader, tp, 0, 2)
        assert not swap.object_key.endswith(("-0000000000000.log",))
        clock.now += 100 * SEGMENT_SWAP_DEADLINE_MS_DEFAULT
        assert leader.swap_to_segment(swap).error == Errors.NONE


def test_a_follower_applies_its_leaders_swap_whatever_its_age(tmp_path: Path) -> None:
    clock = Clock(T0)
    with (
        open_store(tmp_path / "leader", clock) as leader,
        open_store(tmp_path / "follower", clock, auto_high_watermark=False) as follower,
    ):
        [tp] = topic([leader, follower])
        for _ in range(3):
            commit1(leader, tp, plain())
        swap = _aged(segment_of(leader, tp, 0, 1), T0)
        assert leader.swap_to_segment(swap).error == Errors.NONE
        replicate(leader, follower, tp)
        clock.now += 10 * SEGMENT_SWAP_DEADLINE_MS_DEFAULT
        assert follower.swap_to_segment(swap, replicated=True).error == Errors.NONE
        assert follower.segments(tp) == leader.segments(tp)
        assert follower.check() == []
