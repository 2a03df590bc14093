"""walmgr's scanner against a store: the cases, run against each store by a
test module that defines the ``store`` fixture (a :class:`CountingStore`)
and imports every name from here (``from tests.walmgr_scanner_cases import *``):
tests/unit/test_walmgr_scanner.py (LocalDirStore) and
tests/system/test_walmgr_scanner_s3.py (S3Store on SeaweedFS).  A case added
here runs against both; tests/conftest.py has pytest rewrite its asserts.  Segments are real (WalSegmentBuilder, real v2
batches) under real WAL keys (make_wal_key); the registry is real LMDB.

A counting store wraps each store to check what the scanner asks for: only
footers of unknown keys (get_suffix), and only listings under ``wal/``.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from partlog.kafka.records import TopicIdPartition
from partlog.wal.key import ALL_SHARDS, make_wal_key, shard_of
from partlog.wal.objectstore import ForwardingStore, ListPage, ObjectInfo, ObjectStore, ObjectStoreError
from partlog.wal.segment import WalSegmentBuilder
from tests.batches import build_batch
from tests.clock import Clock
from tests.walmgr_helpers import TEST_CLUSTER_ID
from walmgr.listing import (
    GONE_AGE_MS_DEFAULT,
    inspect_object,
    is_position_key,
    list_all,
    list_shard,
)
from walmgr.model import ObjectRecord, Source, State
from walmgr.registry import Registry
from walmgr.scanner import Scanner, register_notification

pytestmark = pytest.mark.timeout(300)

T0 = 1_700_000_000_000
NOW = T0 + 3_600_000  # scans run an hour after the first objects
TPS = [
    TopicIdPartition(uuid.UUID(int=1), 0),
    TopicIdPartition(uuid.UUID(int=1), 1),
    TopicIdPartition(uuid.UUID(int=2), 0),
]


class CountingStore(ForwardingStore):
    """Counts footer reads and records listing prefixes (thread-safe)."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self._lock = threading.Lock()
        self.suffix_keys: list[str] = []
        self.list_prefixes: list[str] = []

    def get_suffix(self, key: str, length: int) -> tuple[bytes, int]:
        with self._lock:
            self.suffix_keys.append(key)
        return super().get_suffix(key, length)

    def list_page(self, prefix: str, start_after: str = "", max_keys: int = 1000) -> ListPage:
        with self._lock:
            self.list_prefixes.append(prefix)
        return super().list_page(prefix, start_after, max_keys)

    def reset(self) -> None:
        with self._lock:
            self.suffix_keys.clear()
            self.list_prefixes.clear()


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[Registry]:
    with Registry(tmp_path / "registry", sync=False) as reg:
        yield reg


def segment(created_ms: int, broker_id: int, tps: Sequence[TopicIdPartition] = TPS) -> bytes:
    builder = WalSegmentBuilder(broker_id, created_ms, TEST_CLUSTER_ID)
    for tp in tps:
        builder.add(tp, build_batch(2))
    return builder.build().data


def put_wal(
    store: ObjectStore, created_ms: int, broker_id: int = 1, *, prefix: str = "wal", rand: str | None = None
) -> str:
    key = str(make_wal_key(prefix, created_ms, broker_id, rand or uuid.uuid4().hex[:12]))
    store.put(key, segment(created_ms, broker_id))
    return key


def key_in_shard(shard: str, created_ms: int, broker_id: int = 1, prefix: str = "wal") -> str:
    for i in range(100_000):
        name = f"{created_ms:013d}-{broker_id}-{i:x}.wal"
        if shard_of(name) == shard:
            return f"{prefix}/{shard}/{name}"
    raise AssertionError("unreachable")


def must_get(registry: Registry, key: str) -> ObjectRecord:
    rec = registry.get(key)
    assert rec is not None, key
    return rec


def scanner(store: ObjectStore, registry: Registry, clock: Clock, **kw: int) -> Scanner:
    return Scanner(store, registry, "wal", clock=clock, **kw)


# ------------------------------------------------------------- incremental


def test_incremental_finds_objects_and_opens_only_unknown(store: CountingStore, registry: Registry) -> None:
    clock = Clock(NOW)
    keys = [put_wal(store, T0 + i * 1000, broker_id=i % 3) for i in range(12)]
    report = scanner(store, registry, clock).incremental()
    assert report.new_objects == 12 and report.keys_listed == 12 and report.invalid == ()
    assert sorted(store.suffix_keys) == sorted(keys)
    assert report.bytes_new == sum(len(segment(T0, 0)) for _ in keys)
    for i, key in enumerate(keys):
        rec = registry.get(key)
        assert rec is not None
        assert rec.state == State.TRACKED and rec.source == Source.SCAN
        assert rec.created_ms == T0 + i * 1000 and rec.broker_id == i % 3
        assert rec.partitions == tuple(TPS) and rec.size == len(segment(T0, 0)) and rec.first_seen_ms == NOW
    # Every listing was one shard, with the trailing slash.
    assert sorted(set(store.list_prefixes)) == sorted(f"wal/{s}/" for s in ALL_SHARDS)

    # Nothing new: no footer read at all.
    store.reset()
    again = scanner(store, registry, clock).incremental()
    assert again.new_objects == 0 and store.suffix_keys == []

    # Two new objects: exactly two footer reads.
    store.reset()
    new = [put_wal(store, T0 + 100_000), put_wal(store, T0 + 100_001)]
    third = scanner(store, registry, clock).incremental()
    assert third.new_objects == 2 and sorted(store.suffix_keys) == sorted(new)
    assert registry.counts()[State.TRACKED][0] == 14
    assert registry.check() == []


def test_positions_advance_and_limit_listing(store: CountingStore, registry: Registry) -> None:
    clock = Clock(NOW)
    first = [key_in_shard("3c", T0 + i * 60_000, broker_id=i) for i in range(3)]
    for i, key in enumerate(first):
        store.put(key, segment(T0 + i * 60_000, i))
    scanner(store, registry, clock).incremental(["3c", "00"])
    assert registry.shard_positions() == {"3c": first[-1]}  # an empty shard keeps no position
    # Without look-back the next listing starts after the position: nothing listed.
    report = scanner(store, registry, clock, lookback_ms=0).incremental(["3c"])
    assert report.keys_listed == 0
    # With the default look-back (40 s of created_ms) it re-lists only the
    # last key (the others are minutes older), without reading it again.
    store.reset()
    report = scanner(store, registry, clock).incremental(["3c"])
    assert report.keys_listed == 1 and report.new_objects == 0 and store.suffix_keys == []
    later = key_in_shard("3c", T0 + 10 * 60_000, broker_id=7)
    store.put(later, segment(T0 + 10 * 60_000, 7))
    report = scanner(store, registry, clock).incremental(["3c"])
    assert report.new_objects == 1
    assert registry.shard_position("3c") == later


def test_late_key_within_lookback_found_older_one_needs_full_scan(store: CountingStore, registry: Registry) -> None:
    clock = Clock(NOW)
    head = key_in_shard("7e", T0 + 600_000, broker_id=1)
    store.put(head, segment(T0 + 600_000, 1))
    scanner(store, registry, clock).incremental(["7e"])
    assert registry.shard_position("7e") == head
    # An upload that finished late (created 5 s before the position): the look-back finds it.
    late = key_in_shard("7e", T0 + 595_000, broker_id=2)
    store.put(late, segment(T0 + 595_000, 2))
    # A broker whose clock is 10 minutes behind: its key sorts far behind the position.
    skewed = key_in_shard("7e", T0, broker_id=3)
    store.put(skewed, segment(T0, 3))
    report = scanner(store, registry, clock).incremental(["7e"])
    assert report.new_objects == 1
    assert registry.get(late) is not None and registry.get(skewed) is None
    assert registry.shard_position("7e") == head  # never moved back
    full = scanner(store, registry, clock).full()
    assert full.new_objects == 1 and full.gone == 0
    rec = registry.get(skewed)
    assert rec is not None and rec.state == State.TRACKED and rec.created_ms == T0


def test_incremental_with_small_pages(store: CountingStore, registry: Registry) -> None:
    clock = Clock(NOW)
    keys = [key_in_shard("11", T0 + i, broker_id=i) for i in range(7)]
    for i, key in enumerate(keys):
        store.put(key, segment(T0 + i, i))
    report = scanner(store, registry, clock, page_keys_max=2).incremental(["11"])
    assert report.new_objects == 7 and report.keys_listed == 7
    assert registry.shard_position("11") == max(keys)
    assert [o.key for o in list_shard(store, "wal", "11", max_keys=3)] == sorted(keys)
    assert [o.key for o in list_shard(store, "wal", "11", keys[3], max_keys=3)] == sorted(keys)[4:]


def test_empty_store(store: CountingStore, registry: Registry) -> None:
    clock = Clock(NOW)
    report = scanner(store, registry, clock).incremental()
    assert (report.keys_listed, report.new_objects, report.gone, report.invalid) == (0, 0, 0, ())
    assert registry.shard_positions() == {}
    full = scanner(store, registry, clock).full()
    assert (full.keys_listed, full.new_objects, full.gone) == (0, 0, 0)
    assert registry.meta_get("last_full_scan_ms") == NOW
    assert list(list_all(store, "wal")) == []


def test_retriable_error_propagates_and_keeps_position(store: CountingStore, registry: Registry) -> None:
    class Flaky(ForwardingStore):
        def get_suffix(self, key: str, length: int) -> tuple[bytes, int]:
            raise ObjectStoreError(f"throttled {key}", key=key, retriable=True)

    clock = Clock(NOW)
    key = key_in_shard("42", T0)
    store.put(key, segment(T0, 1))
    with pytest.raises(ObjectStoreError, match="throttled"):
        scanner(Flaky(store), registry, clock).incremental(["42"])
    assert registry.get(key) is None and registry.shard_positions() == {}
    assert scanner(store, registry, clock).incremental(["42"]).new_objects == 1


def test_one_failing_shard_does_not_cost_the_others_their_progress(store: CountingStore, registry: Registry) -> None:
    """Regression (issue 14, found by the deterministic simulation, seed 1):
    one failed LIST aborted the whole incremental scan.  With 256 shards and
    a 1% error rate per request, nine scans in ten failed and walmgr stopped
    learning objects (orphans were never deleted).  Now the other shards
    advance and are recorded; the scan still fails, naming the shard."""

    class OneShardDown(ForwardingStore):
        def list_page(self, prefix: str, start_after: str = "", max_keys: int = 1000) -> ListPage:
            if prefix == "wal/07/":
                raise ObjectStoreError("503 SlowDown", retriable=True)
            return super().list_page(prefix, start_after, max_keys)

    clock = Clock(NOW)
    down, up = key_in_shard("07", T0), key_in_shard("42", T0)
    for k in (down, up):
        store.put(k, segment(T0, 1))
    expected = r"1 of 3 shards not scanned \(2 advanced\); shard 07: 503 SlowDown"
    with pytest.raises(ObjectStoreError, match=expected) as err:
        scanner(OneShardDown(store), registry, clock).incremental(["07", "42", "a0"])
    assert err.value.retriable
    assert registry.get(down) is None and must_get(registry, up).state == State.TRACKED
    assert set(registry.shard_positions()) == {"42"}
    assert scanner(store, registry, clock).incremental(["07", "42", "a0"]).new_objects == 1
    assert must_get(registry, down).state == State.TRACKED


# ----------------------------------------------------------- prefix fences


def test_sibling_prefixes_never_listed(store: CountingStore, registry: Registry) -> None:
    clock = Clock(NOW)
    ours = put_wal(store, T0)
    siblings = [
        put_wal(store, T0, prefix="wal-old"),
        put_wal(store, T0, prefix="wal2"),
        put_wal(store, T0, prefix="walxdeep"),
    ]
    store.put("walx", b"not even a directory")
    store.put("wal.txt", b"x")
    inc = scanner(store, registry, clock).incremental()
    full = scanner(store, registry, clock).full()
    assert inc.new_objects == 1 and full.keys_listed == 1 and full.invalid == ()
    assert store.list_prefixes and all(p.startswith("wal/") and p.endswith("/") for p in store.list_prefixes)
    assert [r.key for r in registry.records()] == [ours]
    assert store.suffix_keys == [ours]
    assert all(registry.get(k) is None for k in siblings)
    assert [o.key for o in list_all(store, "wal")] == [ours]


# --------------------------------------------------------------- invalid


def test_non_wal_keys_and_corrupt_objects_are_invalid(store: CountingStore, registry: Registry) -> None:
    clock = Clock(NOW)
    good = put_wal(store, T0)
    corrupt = key_in_shard("5a", T0 + 1)
    store.put(corrupt, b"\x00" + b"garbage" * 10)
    truncated = key_in_shard("5a", T0 + 2)
    store.put(truncated, segment(T0 + 2, 1)[:-5])
    empty = key_in_shard("5a", T0 + 3)
    store.put(empty, b"")
    lying = key_in_shard("5a", T0 + 4, broker_id=1)
    store.put(lying, segment(T0 + 999, 1))  # footer's created_ms disagrees with the key
    wrong_shard_name = key_in_shard("5a", T0 + 5).rsplit("/", 1)[1]
    wrong_shard = f"wal/5b/{wrong_shard_name}"
    store.put(wrong_shard, segment(T0 + 5, 1))
    junk = {"wal/readme.txt": b"hello", "wal/5a/notes.md": b"x", "wal/zz/" + wrong_shard_name: segment(T0 + 5, 1)}
    for k, data in junk.items():
        store.put(k, data)

    inc = scanner(store, registry, clock).incremental()
    invalid_inc = dict(inc.invalid)
    assert set(invalid_inc) == {corrupt, truncated, empty, lying, wrong_shard, "wal/5a/notes.md"}
    assert "not a WAL segment" in invalid_inc[corrupt] and "not a WAL segment" in invalid_inc[truncated]
    assert "created_ms" in invalid_inc[lying] and "hash shard" in invalid_inc[wrong_shard]
    full = scanner(store, registry, clock).full()
    assert dict(full.invalid).keys() == {"wal/readme.txt", "wal/zz/" + wrong_shard_name}
    assert inc.new_objects + full.new_objects == 1
    for key, _ in inc.invalid + full.invalid:
        rec = registry.get(key)
        assert rec is not None and rec.state == State.INVALID and rec.note
    rec = registry.get(corrupt)
    assert rec is not None and rec.created_ms == T0 + 1  # from the key, which parses
    rec = registry.get("wal/readme.txt")
    assert rec is not None and rec.created_ms == -1 and rec.broker_id == -1

    # Later scans neither re-read nor re-report them, and they never change state,
    # not even when the object disappears.
    store.reset()
    clock.now += 10 * 3_600_000
    again = scanner(store, registry, clock).full()
    assert again.invalid == () and again.new_objects == 0 and store.suffix_keys == []
    store.delete_many([corrupt, "wal/readme.txt"])
    scanner(store, registry, clock).full()
    assert registry.counts()[State.INVALID][0] == 8
    assert registry.counts()[State.TRACKED][0] == 1 and registry.get(good) is not None
    assert registry.check() == []


def test_inspect_object_vanished_is_none(store: CountingStore) -> None:
    key = put_wal(store, T0)
    info = ObjectInfo(key, 10, 0)
    store.delete_many([key])
    assert inspect_object(store, info, "wal", NOW) is None


# -------------------------------------------------------------- full scan


def test_full_scan_marks_vanished_objects_gone(store: CountingStore, registry: Registry) -> None:
    clock = Clock(NOW)
    keys = [put_wal(store, T0 + i) for i in range(6)]
    scanner(store, registry, clock).incremental()
    # A notification for an object whose upload is still in flight (not listed yet).
    in_flight = str(make_wal_key("wal", NOW - 5_000, 9, "abc"))
    assert register_notification(registry, "wal", in_flight, 100, NOW - 5_000, 9, TPS, NOW) is not None
    # A planned one and a candidate vanish too (deleted by someone else).
    registry.put_many([must_get(registry, k).with_state(State.CANDIDATE) for k in keys[1:3]])
    registry.plan([must_get(registry, keys[2])], NOW)
    store.delete_many(keys[:3])

    clock.now = NOW + 1000
    report = scanner(store, registry, clock).full()
    assert report.gone == 3 and report.keys_listed == 3
    for key in keys[:3]:
        rec = registry.get(key)
        assert rec is not None and rec.state == State.GONE and rec.deleted_ms == NOW + 1000
    assert registry.planned(10) == []
    in_flight_rec = registry.get(in_flight)
    assert in_flight_rec is not None and in_flight_rec.state == State.TRACKED  # too young to be gone
    assert all(must_get(registry, k).state == State.TRACKED for k in keys[3:])
    assert registry.meta_get("last_full_scan_ms") == NOW + 1000
    # Once old enough and still not listed, it is gone as well.
    clock.now = NOW + GONE_AGE_MS_DEFAULT
    assert scanner(store, registry, clock).full().gone == 1
    assert registry.check() == []


def test_full_scan_revives_a_gone_object_listed_again(store: CountingStore, registry: Registry) -> None:
    clock = Clock(NOW)
    key = put_wal(store, T0)
    scanner(store, registry, clock).full()
    assert registry.mark_gone([key], NOW, created_before_ms=NOW) == [key]
    report = scanner(store, registry, clock).full()
    assert report.revived == 1 and report.gone == 0
    rec = registry.get(key)
    assert rec is not None and rec.state == State.TRACKED and rec.deleted_ms == -1


def test_full_scan_many_shards_small_pages(store: CountingStore, registry: Registry) -> None:
    clock = Clock(NOW)
    keys = [put_wal(store, T0 + i, broker_id=i) for i in range(25)]
    store.put("wal/junk-between", b"x")
    report = scanner(store, registry, clock, page_keys_max=3).full()
    assert report.new_objects == 25 and report.keys_listed == 26 and report.gone == 0
    store.delete_many(keys[::5])
    clock.now += 1
    report = scanner(store, registry, clock, page_keys_max=3).full()
    assert report.gone == 5 and report.new_objects == 0
    assert registry.counts()[State.GONE][0] == 5 and registry.counts()[State.TRACKED][0] == 20


# ---------------------------------------------------------- notifications


def test_register_notification(store: CountingStore, registry: Registry) -> None:
    clock = Clock(NOW)
    key = put_wal(store, T0 + 7, broker_id=4)
    added = register_notification(registry, "wal", key, 1234, T0 + 7, 4, TPS[:1], NOW)
    assert added is not None and added.source == Source.NOTIFICATION and added.partitions == (TPS[0],)
    assert register_notification(registry, "wal", key, 1234, T0 + 7, 4, TPS[:1], NOW) is None  # known
    # Never trusted beyond its key: wrong prefix, not a WAL key, fields that disagree.
    other = str(make_wal_key("wal2", T0, 4, "aa"))
    assert register_notification(registry, "wal", other, 10, T0, 4, TPS, NOW) is None
    assert register_notification(registry, "wal", "wal/readme", 10, T0, 4, TPS, NOW) is None
    liar = str(make_wal_key("wal", T0, 4, "bb"))
    assert register_notification(registry, "wal", liar, 10, T0 + 1, 4, TPS, NOW) is None
    assert register_notification(registry, "wal", liar, 10, T0, 5, TPS, NOW) is None
    assert register_notification(registry, "wal", liar, 0, T0, 4, TPS, NOW) is None
    assert [r.key for r in registry.records()] == [key]
    # A notified key is known: scans do not read its footer.
    scanner(store, registry, clock).incremental()
    scanner(store, registry, clock).full()
    assert store.suffix_keys == []
    rec = registry.get(key)
    assert rec is not None and rec.source == Source.NOTIFICATION


def test_a_key_that_is_not_a_wal_key_never_carries_a_shards_position(store: CountingStore, registry: Registry) -> None:
    """Regression (found through a CI flake of test_spark_scan): a non-WAL
    key sorting after WAL names in a shard (``wal/ab/garbage``) became the
    shard's position, and new WAL keys behind it waited for the next full
    scan.  Positions are WAL keys of their shard only, and a position
    stored before that is dropped (the shard is listed whole once)."""
    clock = Clock(NOW)
    first = key_in_shard("ab", T0)
    store.put(first, segment(T0, 1))
    store.put("wal/ab/garbage", b"not a segment")
    scanner(store, registry, clock).incremental(["ab"])
    assert registry.shard_position("ab") == first
    later = key_in_shard("ab", T0 + 60_000_000)  # sorts after `first`, before "garbage"
    store.put(later, segment(T0 + 60_000_000, 1))
    report = scanner(store, registry, clock).incremental(["ab"])
    assert report.new_objects == 1 and must_get(registry, later).state == State.TRACKED
    assert registry.shard_position("ab") == later
    # A registry that stored the garbage key as the position heals.
    registry.set_shard_positions({"ab": "wal/ab/garbage"})
    third = key_in_shard("ab", T0 + 120_000_000)
    store.put(third, segment(T0 + 120_000_000, 1))
    report = scanner(store, registry, clock).incremental(["ab"])
    assert report.new_objects == 1 and must_get(registry, third).state == State.TRACKED
    assert registry.shard_position("ab") == third
    assert is_position_key(third, "wal", "ab") and not is_position_key("wal/ab/garbage", "wal", "ab")
    assert not is_position_key(third, "wal", "cd")
