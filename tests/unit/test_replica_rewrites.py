"""Followers taking their leader's cleaned segments (issue 31,
docs/design/compaction.md "Replicas"), below the network.

* The store's replicated rewrite (``rewrite_segments(replicated=True)``)
  fed by ``rewrite_from_segment`` from the cleaned ``.log``: a follower
  that swapped the old rows, one that never swapped (WAL references), one
  that fetched some entries after the leader rewrote (naming the new
  segment already) and one holding a former leader's cleaned row all end
  with the leader's rows, entries, positions and file index.
* Refusals (hostile segments, rows that do not fit) change nothing.

Real LMDB, real v2 batches; every store ends with ``check() == []``.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from partlog import Errors, MetadataStore, TopicIdPartition
from partlog.kafka.crc32c import crc32c
from partlog.kafka.record_batch import build_record_batch
from partlog.replication.fetcher import ReplicaFetchers
from partlog.replication.partition import FollowedPartition, segments_for_follower
from partlog.replication.rewrites import (
    RewriteRefused,
    rewrite_from_segment,
    rewrites_for_follower,
    rows_digest,
    rows_replaced,
)
from partlog.rpc.methods import BROKER_SCHEMAS
from partlog.rpc.wire import (
    ROWS_CHECKED_PER_FETCH_MAX,
    ROWS_DIGEST_BYTES,
    ReplicaFetchPartition,
    ReplicaFetchResult,
    ReplicaSegment,
    RowsCheck,
    WireError,
    dec_replica_fetch,
    dec_replica_fetch_response,
    enc_replica_fetch,
    enc_replica_fetch_response,
)
from partlog.store import Segment, SegmentSwap
from partlog.store.compaction import SegmentRewrite
from partlog.tiered.cleaner import OffsetMap, build_offset_map, clean_batch
from partlog.wal.localdir_store import LocalDirStore
from tests.clock import Clock
from tests.unit.test_replica_segments import LEADER, fetchers_of, placement, segment_of
from tests.unit.test_store_replication import BIG, T0, commit1, open_store, replicate, topic


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[tuple[MetadataStore, MetadataStore, MetadataStore]]:
    clock = Clock(T0)
    with (
        open_store(tmp_path / "leader", clock) as leader,
        open_store(tmp_path / "a", clock, auto_high_watermark=False) as a,
        open_store(tmp_path / "b", clock, auto_high_watermark=False) as b,
    ):
        yield leader, a, b
        for s in (leader, a, b):
            assert s.check() == []


def keyed(n: int) -> list[bytes]:
    return [build_record_batch([(b"k%d" % (i % 2), b"v%d" % i, T0 + i), (b"x", b"%d" % i, T0 + i)]) for i in range(n)]


def stored(store: MetadataStore, tp: TopicIdPartition, batches: list[bytes], start: int = 0) -> list[bytes]:
    """The batches as the leader stores them (offsets stamped)."""
    out = []
    for e, b in zip(store.read_log(tp, start, BIG).entries, batches, strict=False):
        stamped = bytearray(b)
        stamped[:61] = e.header
        out.append(bytes(stamped))
    return out


def cleaned(batches: list[bytes]) -> list[bytes]:
    m = OffsetMap()
    build_offset_map(batches, m)
    return [clean_batch(b, m, now_ms=T0, delete_retention_ms=0).data for b in batches]


def leader_rewrite(
    leader: MetadataStore, tp: TopicIdPartition, clean: list[bytes], start: int, end: int
) -> tuple[SegmentRewrite, bytes]:
    """The leader's cleaner swapping ``clean`` in for its rows of [start, end]."""
    own = [r for r in leader.segments(tp) if r.start_offset <= end and r.end_offset >= start]
    data = b"".join(clean)
    req = SegmentRewrite(
        tp,
        start,
        end,
        f"tiered/{uuid.uuid4().hex}.log",
        len(data),
        1,
        tuple(r.object_key for r in own),
        tuple(c[:61] for c in clean),
    )
    got = leader.swap_to_segment(req)
    assert got.error == Errors.NONE, got
    return req, data


def row_of(req: SegmentRewrite | SegmentSwap) -> ReplicaSegment:
    return ReplicaSegment(req.start_offset, req.end_offset, req.size, req.uploader, req.object_key)


def follow(follower: MetadataStore, tp: TopicIdPartition, row: ReplicaSegment, data: bytes) -> Errors:
    """What the fetcher does with a leader's row it lacks."""
    req = rewrite_from_segment(tp, row, rows_replaced(row, follower.segments(tp)), data)
    return follower.swap_to_segment(req, replicated=True).error


def same_as_leader(leader: MetadataStore, follower: MetadataStore, tp: TopicIdPartition) -> None:
    assert follower.segments(tp) == leader.segments(tp)
    assert placement(follower, tp) == placement(leader, tp)
    assert [e.header for e in follower.read_log(tp, 0, BIG).entries] == [
        e.header for e in leader.read_log(tp, 0, BIG).entries
    ]
    assert follower.file_usage() == leader.file_usage()
    assert follower.partition_state(tp)["live_bytes"] == leader.partition_state(tp)["live_bytes"]


def test_swapped_and_unswapped_followers_take_the_cleaned_segment(
    stores: tuple[MetadataStore, MetadataStore, MetadataStore],
) -> None:
    leader, swapped, unswapped = stores
    [tp] = topic([leader, swapped, unswapped])
    raw = keyed(6)
    for b in raw:
        commit1(leader, tp, b)
    replicate(leader, swapped, tp)
    replicate(leader, unswapped, tp)
    swaps = [segment_of(leader, tp, 0, 5), segment_of(leader, tp, 6, 11)]
    for sw in swaps:
        assert leader.swap_to_segment(sw).error == Errors.NONE
        assert swapped.swap_to_segment(sw, replicated=True).error == Errors.NONE
    wal = set(unswapped.file_usage())
    old = {sw.object_key for sw in swaps}
    req, data = leader_rewrite(leader, tp, cleaned(stored(leader, tp, raw)), 0, 11)
    assert swapped.referenced_files(old) == old  # until it takes the new one
    for follower in (swapped, unswapped):
        assert follow(follower, tp, row_of(req), data) == Errors.NONE
        same_as_leader(leader, follower, tp)
        # Again: a no-op (the row is there).
        assert follower.swap_to_segment(rewrite_from_segment(tp, row_of(req), (), data), replicated=True).moved == 0
    assert swapped.referenced_files(old) == set()
    assert unswapped.referenced_files(wal) == set()


def test_entries_fetched_after_the_rewrite_name_the_segment_already(
    stores: tuple[MetadataStore, MetadataStore, MetadataStore],
) -> None:
    leader, mixed, late = stores
    [tp] = topic([leader, mixed, late])
    raw = keyed(6)
    for b in raw:
        commit1(leader, tp, b)
    replicate(leader, mixed, tp, rounds=1, max_bytes=1)  # one batch, naming its WAL object
    sw = segment_of(leader, tp, 0, 11)
    assert leader.swap_to_segment(sw).error == Errors.NONE
    req, data = leader_rewrite(leader, tp, cleaned(stored(leader, tp, raw)), 0, 11)
    replicate(leader, mixed, tp)  # the other five: cleaned, naming the new segment
    replicate(leader, late, tp)  # all six so
    # The builder's swap row alone no longer fits the mixed follower.
    assert mixed.swap_to_segment(SegmentSwap(tp, 0, 11, req.object_key, req.size, 1), replicated=True).error == (
        Errors.INVALID_REQUEST
    )
    for follower in (mixed, late):
        assert follow(follower, tp, row_of(req), data) == Errors.NONE
        same_as_leader(leader, follower, tp)


def test_a_former_leaders_cleaned_row_is_taken_over_whole(
    stores: tuple[MetadataStore, MetadataStore, MetadataStore],
) -> None:
    """A follower applied a former leader's cleaned row; the new leader
    never had it and built its own rows: the follower takes those (more
    records than its own: the leader's log is the log)."""
    former, new, follower = stores
    [tp] = topic([former, new, follower])
    raw = keyed(4)
    for b in raw:
        commit1(former, tp, b)
    replicate(former, new, tp)
    replicate(former, follower, tp)
    sw = segment_of(former, tp, 0, 7)
    assert former.swap_to_segment(sw).error == Errors.NONE
    assert follower.swap_to_segment(sw, replicated=True).error == Errors.NONE
    req, data = leader_rewrite(former, tp, cleaned(stored(former, tp, raw)), 0, 7)
    assert follow(follower, tp, row_of(req), data) == Errors.NONE
    # The new leader's builder: two rows of its uncleaned log.
    own = [segment_of(new, tp, 0, 3), segment_of(new, tp, 4, 7)]
    for s in own:
        assert new.swap_to_segment(s, replicated=True).error == Errors.NONE
    batches = stored(new, tp, raw)
    # The first row straddles nothing here but the follower's [0, 7] does.
    first = row_of(own[0])
    with pytest.raises(RewriteRefused):
        follow(follower, tp, first, b"".join(batches[:2]))
    # A leader's merged row over both: taken, uncleaning the follower.
    merged = SegmentRewrite(
        tp, 0, 7, f"tiered/{uuid.uuid4().hex}.log", sum(map(len, batches)), 2,
        tuple(s.object_key for s in own), tuple(b[:61] for b in batches),
    )  # fmt: skip
    assert new.swap_to_segment(merged).error == Errors.NONE
    assert follow(follower, tp, row_of(merged), b"".join(batches)) == Errors.NONE
    same_as_leader(new, follower, tp)


# ------------------------------------------------------------- refusals


def _corrupt(batch: bytes, at: int, value: int, *, fix_crc: bool) -> bytes:
    b = bytearray(batch)
    struct.pack_into(">i", b, at, value)
    if fix_crc:
        struct.pack_into(">I", b, 17, crc32c(bytes(b[21:])))
    return bytes(b)


def test_hostile_segments_and_rows_change_nothing(
    stores: tuple[MetadataStore, MetadataStore, MetadataStore],
) -> None:
    leader, follower, _ = stores
    [tp] = topic([leader, follower])
    raw = keyed(4)
    for b in raw:
        commit1(leader, tp, b)
    replicate(leader, follower, tp)
    sw = segment_of(leader, tp, 0, 7)
    for s in (leader, follower):
        assert s.swap_to_segment(sw, replicated=s is follower).error == Errors.NONE
    clean = cleaned(stored(leader, tp, raw))
    req, data = leader_rewrite(leader, tp, clean, 0, 7)
    row = row_of(req)
    before = (follower.segments(tp), placement(follower, tp), follower.file_usage())
    refused_here = [
        (row, data[:-1]),  # short
        (row, data + b"\0"),  # long
        (row, data[:10] + bytes([data[10] ^ 1]) + data[11:]),  # a length field
        (row, clean[0] + _corrupt(clean[1], 40, 0, fix_crc=False) + b"".join(clean[2:])),  # CRC
        (ReplicaSegment(0, 9, req.size, 1, req.object_key), data),  # ends elsewhere
        (ReplicaSegment(2, 7, req.size, 1, req.object_key), data),  # starts elsewhere
        (ReplicaSegment(0, 7, req.size + 1, 1, req.object_key), data),
    ]
    for r, d in refused_here:
        with pytest.raises(RewriteRefused):
            follow(follower, tp, r, d)
    # Batches that parse but are not ours: the store refuses them.
    other_epoch = [_corrupt(clean[0], 12, 9, fix_crc=False), *clean[1:]]  # leader epoch, outside the CRC
    more_delta = [clean[0], _corrupt(clean[1], 23, 5, fix_crc=True), *clean[2:]]
    first_two = ReplicaSegment(0, 3, len(b"".join(clean[:2])), 1, "tiered/x.log")
    refused_by_store = [
        rewrite_from_segment(tp, row, (sw.object_key,), b"".join(other_epoch)),
        rewrite_from_segment(tp, row, (), data),  # its rows not as read
        # A range inside the follower's row.
        rewrite_from_segment(tp, first_two, (sw.object_key,), b"".join(clean[:2])),
    ]
    with pytest.raises(RewriteRefused):
        rewrite_from_segment(tp, row, (sw.object_key,), b"".join(more_delta))
    for bad in refused_by_store:
        got = follower.swap_to_segment(bad, replicated=True)
        assert got.error == Errors.INVALID_REQUEST, got
    assert (follower.segments(tp), placement(follower, tp), follower.file_usage()) == before
    # A leader's own rewrite must name the rows it replaces.
    assert leader.swap_to_segment(rewrite_from_segment(tp, row, (), data)).error == Errors.INVALID_REQUEST


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_hostile_segment_is_refused_or_taken_whole(tmp_path: Path, data: st.DataObject) -> None:
    """Flip, cut or splice bytes of the cleaned segment, or lie in the row:
    the follower either refuses (unchanged) or ends exactly as the leader."""
    run = tmp_path / uuid.uuid4().hex
    with (
        open_store(run / "leader", Clock(T0)) as leader,
        open_store(run / "follower", Clock(T0), auto_high_watermark=False) as f,
    ):
        [tp] = topic([leader, f])
        raw = keyed(4)
        for b in raw:
            commit1(leader, tp, b)
        replicate(leader, f, tp)
        sw = segment_of(leader, tp, 0, 7)
        for s in (leader, f):
            assert s.swap_to_segment(sw, replicated=s is f).error == Errors.NONE
        req, seg = leader_rewrite(leader, tp, cleaned(stored(leader, tp, raw)), 0, 7)
        hostile = bytearray(seg)
        for _ in range(data.draw(st.integers(0, 3))):
            i = data.draw(st.integers(0, len(hostile) - 1))
            hostile[i] = data.draw(st.integers(0, 255))
        cut = data.draw(st.integers(0, len(hostile)))
        hostile = (
            hostile[:cut] + data.draw(st.binary(max_size=8)) + hostile[cut:] if data.draw(st.booleans()) else hostile
        )
        row = ReplicaSegment(
            data.draw(st.sampled_from([0, 0, 1, 2])),
            data.draw(st.sampled_from([7, 7, 6, 8])),
            data.draw(st.sampled_from([req.size, len(hostile), req.size - 61])),
            1,
            req.object_key,
        )
        before = (f.segments(tp), placement(f, tp), f.file_usage())
        try:
            got = follow(f, tp, row, bytes(hostile))
        except RewriteRefused:
            got = Errors.INVALID_REQUEST
        if got == Errors.NONE:
            same_as_leader(leader, f, tp)
        else:
            assert (f.segments(tp), placement(f, tp), f.file_usage()) == before
        assert f.check() == []


def test_rows_digest_and_replaced() -> None:
    a = Segment(0, 9, 100, 1, "tiered/a.log")
    b = Segment(10, 19, 100, 1, "tiered/b.log")
    assert rows_digest([a, b]) == rows_digest([ReplicaSegment(0, 9, 100, 1, "tiered/a.log"), b])
    assert rows_digest([a, b]) != rows_digest([a]) != rows_digest([])
    assert rows_digest([a]) != rows_digest([Segment(0, 9, 100, 2, "tiered/a.log")])
    assert rows_replaced(ReplicaSegment(0, 19, 50, 1, "n"), [a, b]) == ("tiered/a.log", "tiered/b.log")
    assert rows_replaced(ReplicaSegment(20, 29, 50, 1, "n"), [a, b]) == ()
    with pytest.raises(RewriteRefused):
        rows_replaced(ReplicaSegment(5, 19, 50, 1, "n"), [a, b])


# ------------------------------------------------- the wire and the rule

TPS = [TopicIdPartition(uuid.UUID(int=i + 1), i) for i in range(3)]
hostile = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.text(max_size=4) | st.binary(max_size=20),
    lambda inner: st.lists(inner, max_size=4),
    max_leaves=20,
)


def check_request(checks: Any) -> dict[str, Any]:
    body = enc_replica_fetch(3, 100, 10, [ReplicaFetchPartition(tp, 0, 5, 0, 5) for tp in TPS])
    body["rows_checks"] = checks
    return body


@given(st.lists(st.lists(hostile, max_size=4) | hostile, max_size=4) | hostile)
def test_hostile_rows_checks_decode_to_windows_or_a_wire_error(checks: Any) -> None:
    body = check_request(checks)
    schema_ok = True
    try:
        BROKER_SCHEMAS["replica_fetch"].check(body, "replica_fetch")
    except WireError:
        schema_ok = False
    try:
        *_, parts = dec_replica_fetch(body, 10)
    except WireError:
        return
    assert schema_ok or checks is None  # the decoder accepts nothing the server's schema refuses
    for p in parts:
        c = p.rows_check
        assert c is None or (
            type(c.from_offset) is int
            and type(c.through) is int
            and 0 <= c.from_offset <= c.through < 2**63
            and type(c.digest) is bytes
            and len(c.digest) == ROWS_DIGEST_BYTES
        )


def test_checks_and_rewrites_round_trip_and_are_absent_for_older_peers() -> None:
    check = RowsCheck(10, 99, bytes(range(ROWS_DIGEST_BYTES)))
    parts = [ReplicaFetchPartition(TPS[0], 0, 5, 0, 5, 0, 99, check), ReplicaFetchPartition(TPS[1], 0, 5, 0, 5)]
    req = msgpack.unpackb(msgpack.packb(enc_replica_fetch(3, 100, 10, parts)), raw=False)
    BROKER_SCHEMAS["replica_fetch"].check(req, "replica_fetch")
    assert dec_replica_fetch(req, 10)[3] == parts
    rewrites = (ReplicaSegment(10, 49, 500, 1, "tiered/c.log"),)
    results = [ReplicaFetchResult(Errors.NONE, 9, 0, 9, rewrites=rewrites), ReplicaFetchResult(Errors.NONE, 9, 0, 9)]
    body = msgpack.unpackb(msgpack.packb(enc_replica_fetch_response(results)), raw=False)
    assert dec_replica_fetch_response(body, 2) == results
    older = enc_replica_fetch(3, 100, 10, [ReplicaFetchPartition(tp, 0, 5, 0, 5) for tp in TPS])
    assert "rows_checks" not in older
    assert "rewrites" not in enc_replica_fetch_response([ReplicaFetchResult(Errors.NONE, 5, 0, 5)])
    bad = enc_replica_fetch_response(results)
    bad["rewrites"] = [[[10, 9, 500, 1, "k"]], []]  # end before start
    with pytest.raises(WireError):
        dec_replica_fetch_response(bad, 2)


def window_of(follower: list[Segment], start: int, through: int) -> ReplicaFetchPartition:
    rows = [r for r in follower if start <= r.start_offset <= through]
    return ReplicaFetchPartition(TPS[0], 0, 1000, 0, -1, 0, through, RowsCheck(start, through, rows_digest(rows)))


def test_the_leader_answers_a_window_only_when_it_differs() -> None:
    a, b, c = (Segment(10 * i, 10 * i + 9, 100, 1, f"tiered/{i}.log") for i in range(3))
    merged = Segment(0, 19, 120, 1, "tiered/m.log")
    # Same rows: nothing.
    assert rewrites_for_follower([a, b, c], window_of([a, b, c], 0, 29), 1000) == ()
    # The leader merged a and b: its rows starting in the window come back.
    got = rewrites_for_follower([merged, c], window_of([a, b, c], 0, 29), 1000)
    assert [g.object_key for g in got] == ["tiered/m.log", "tiered/2.log"]
    # The follower lacks b (a refused swap): b comes back with the others.
    got = rewrites_for_follower([a, b, c], window_of([a, c], 0, 29), 1000)
    assert [g.object_key for g in got] == ["tiered/0.log", "tiered/1.log", "tiered/2.log"]
    # Bounded by the follower's fetch offset and log start, and the HWM.
    p = window_of([a, c], 0, 29)
    assert [g.start_offset for g in rewrites_for_follower([a, b, c], p, 15)] == [0]
    lso = ReplicaFetchPartition(TPS[0], 0, 1000, 0, -1, 10, 29, p.rows_check)
    assert [g.start_offset for g in rewrites_for_follower([a, b, c], lso, 1000)] == [10, 20]
    # No check: nothing.
    assert rewrites_for_follower([a], ReplicaFetchPartition(TPS[0], 0, 1000, 0, -1), 1000) == ()


# ------------------------------------------------------- the follower's rounds


class CountingStore(LocalDirStore):
    def __init__(self, root: Path) -> None:
        super().__init__(root, fsync=False)
        self.gets: list[str] = []

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        self.gets.append(key)
        return super().get_range(key, offset, length)


def round_trip(
    leader: MetadataStore, fetchers: ReplicaFetchers, followed: dict[TopicIdPartition, FollowedPartition]
) -> None:
    """One fetch round as the fetcher and the leader run it, below the network."""
    [p] = fetchers._fetch_request(followed)
    tp, f = p.topic_id_partition, followed[p.topic_id_partition]
    hwm = leader.high_watermark(tp)
    window = (
        [] if p.rows_check is None else leader.segments(tp, p.rows_check.from_offset, ROWS_CHECKED_PER_FETCH_MAX + 1)
    )
    r = ReplicaFetchResult(
        Errors.NONE,
        hwm,
        leader.log_start_offset(tp),
        leader.log_end_offset(tp),
        segments=segments_for_follower(leader.segments(tp, p.tiered_through + 1), p, hwm),
        rewrites=rewrites_for_follower(window, p, hwm),
    )
    prepared = fetchers._prepare_rewrites([(tp, g, f) for g in r.rewrites])
    fetchers._apply_fetch([(p, r, f)], prepared)


def test_the_follower_finds_takes_and_refuses_rows_over_fetch_rounds(tmp_path: Path) -> None:
    objects = CountingStore(tmp_path / "objects")
    with (
        open_store(tmp_path / "leader", Clock(T0)) as leader,
        open_store(tmp_path / "follower", Clock(T0), auto_high_watermark=False) as follower,
    ):
        [tp] = topic([leader, follower])
        raw = keyed(20)  # 40 offsets
        for b in raw:
            commit1(leader, tp, b)
        replicate(leader, follower, tp)
        followed = {tp: FollowedPartition(LEADER, 0)}
        fetchers = fetchers_of(follower, followed)
        fetchers.objects = objects
        # Ten builder rows of two batches each, swapped on both.
        for i in range(10):
            sw = segment_of(leader, tp, 4 * i, 4 * i + 3)
            assert leader.swap_to_segment(sw).error == Errors.NONE
        for _ in range(3):
            round_trip(leader, fetchers, followed)
        assert follower.segments(tp) == leader.segments(tp)
        assert objects.gets == []  # identical rows: nothing read
        # The leader cleans rows 2..5 into one segment, and rows 8..9 into
        # one whose object is corrupt.
        stamped = stored(leader, tp, raw)
        clean = cleaned(stamped)
        good, data = leader_rewrite(leader, tp, clean[4:12], 8, 23)
        objects.put(good.object_key, data)
        bad, bad_data = leader_rewrite(leader, tp, clean[16:20], 32, 39)
        objects.put(bad.object_key, bad_data[:-1] + bytes([bad_data[-1] ^ 1]))
        for _ in range(4):  # windows of 8 rows: a whole cycle and more
            round_trip(leader, fetchers, followed)
        leader_rows = leader.segments(tp)
        assert [r for r in follower.segments(tp) if r.start_offset < 32] == [
            r for r in leader_rows if r.start_offset < 32
        ]
        assert fetchers.stats.segment_rewrites_applied == 1 and fetchers.stats.segment_rewrites_failed == 1
        assert bad.object_key in followed[tp].refused
        # The refused row is not read again; the follower keeps its rows there.
        reads = len(objects.gets)
        for _ in range(4):
            round_trip(leader, fetchers, followed)
        assert len(objects.gets) == reads
        assert [r.start_offset for r in follower.segments(tp) if r.start_offset >= 32] == [32, 36]
        assert follower.check() == []
