"""walmgr's gate for tiered segments (docs/design/tiered-gate.md), its
sans-IO parts against a model.

* Hostile keys under and around the tiered prefix: a record is TRACKED only
  for a segment key of walmgr's cluster and prefix, and the deleter refuses
  every key that parses as neither kind (or names another cluster).
* The model: segments uploaded whole or in part (a crash between PUTs),
  swapped by a leader only within the swap deadline by the store's clock,
  dropped again (retention, DeleteRecords), listed by walmgr with a clock
  off by up to the skew, and decided by the gate's steps: the age gate, the
  ``.log`` asked about (``plan_checks``/``decide``), indexes only once their
  ``.log`` is gone.  The property: a ``.log`` is deleted only when nothing
  references it and no swap can give it a reference any more, and an index
  only when its ``.log`` does not exist.  With the swap deadline left out of
  the gate (the injected bug) the property fails.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from partlog import injected_bugs
from partlog.kafka.errors import Errors
from partlog.kafka.records import DeleteRecordsRequest, TopicIdPartition
from partlog.runtime import SYSTEM_CLOCK
from partlog.store import SegmentSwap
from partlog.store.layout import SEGMENT_SWAP_DEADLINE_MS_DEFAULT
from partlog.tiered.remote_storage import ObjectStoreRsm, RemoteLogSegmentMetadata
from partlog.wal.key import SEGMENT_SUFFIXES, WalKeyError, make_wal_key, parse_segment_key, parse_wal_key, shard_of
from partlog.wal.localdir_store import LocalDirStore
from partlog.wal.objectstore import DeleteResult, ForwardingStore, ObjectInfo, ObjectStoreError
from tests.clock import Clock as FakeClock
from tests.tiered_cases import sample_segment
from tests.unit.test_replica_segments import segment_of
from tests.unit.test_txn_store import T0, batch, commit, make_topic, marker, open_store
from walmgr.config import WalmgrConfig, WalmgrConfigError
from walmgr.decide import Verdict, decide, plan_checks, sweep
from walmgr.deleter import execute_plan, refusal
from walmgr.model import ObjectRecord, State
from walmgr.registry import Registry
from walmgr.segments import classify_segment, leftover_verdict, segment_record, split_round

CLUSTER = uuid.UUID("c1c1c1c1-0000-4000-8000-00000000c1c1")
OTHER = uuid.UUID("c2c2c2c2-0000-4000-8000-00000000c2c2")
TP = TopicIdPartition(uuid.UUID(int=7), 3)
NOWHERE = LocalDirStore("/nonexistent-never-written")


def keys_of(cluster: uuid.UUID, created_ms: int, tp: TopicIdPartition = TP, prefix: str = "tiered") -> dict[str, str]:
    meta = RemoteLogSegmentMetadata.for_segment(uuid.uuid4(), tp, sample_segment(2), created_ms)
    rsm = ObjectStoreRsm(NOWHERE, prefix, cluster_id=cluster)
    return {suffix: rsm.segment_key(meta, suffix) for suffix in SEGMENT_SUFFIXES}


GOOD = keys_of(CLUSTER, 1_700_000_000_000)


def _is_wal_key_of(key: str, prefix: str) -> bool:
    try:
        parsed = parse_wal_key(key)
    except WalKeyError:
        return False
    return parsed.prefix == prefix and parsed.shard == shard_of(parsed.name)


def _is_own_segment_key(key: str) -> bool:
    try:
        parsed = parse_segment_key(key)
    except ValueError:
        return False
    return parsed.prefix == "tiered" and parsed.cluster_id == CLUSTER


@given(
    st.text(max_size=200)
    | st.builds(
        lambda good, at, ch: good[:at] + ch + good[at + 1 :],
        st.sampled_from([*GOOD.values(), *keys_of(OTHER, 5).values(), str(make_wal_key("wal", 1, 1, "ab"))]),
        st.integers(0, 180),
        st.text(min_size=0, max_size=2),
    )
    | st.sampled_from(
        [
            *keys_of(OTHER, 1).values(),  # another cluster (a clone on the same prefix)
            *keys_of(CLUSTER, 1, prefix="tiered/sub").values(),  # a nested prefix
            *keys_of(CLUSTER, 1, prefix="wal").values(),  # a segment key under the WAL prefix
            # The layout before the cluster was in the key: kept, never deleted.
            f"tiered/{shard_of(f'{TP.topic_id}/3')}/{TP.topic_id}/3/" + GOOD[".log"].rsplit("/", 1)[1],
            "tiered/zz/garbage",
            "tiered",
            str(make_wal_key("tiered", 1, 1, "ab")),  # a WAL key under the tiered prefix
        ]
    )
)
def test_property_only_own_segment_keys_are_tracked_and_deletable(key: str) -> None:
    info = ObjectInfo(key, 10, 0)
    rec = segment_record(info, "tiered", 0, CLUSTER)
    own = _is_own_segment_key(key)
    assert (rec.state == State.TRACKED) == own, (key, rec)
    if own:
        parsed = parse_segment_key(key)
        assert str(parsed) == key and rec.partitions == (TopicIdPartition(parsed.topic_id, parsed.partition),)
        assert rec.cluster_id == CLUSTER and rec.created_ms == parsed.created_ms
    else:
        assert rec.note and rec.partitions == ()
    # The deleter: a WAL key of its prefix in its shard, or a segment key of
    # its tiered prefix and cluster; nothing else, whatever the plan says.
    allowed = refusal(key, "wal", "tiered", CLUSTER) is None
    assert allowed == (own or _is_wal_key_of(key, "wal")), key
    # Without a cluster no segment key is deletable; without a tiered prefix none is.
    assert refusal(key, "wal", "tiered", None) is not None or _is_wal_key_of(key, "wal")
    assert refusal(key, "wal") is not None or _is_wal_key_of(key, "wal")


def test_another_clusters_segment_is_invalid_with_the_reason() -> None:
    for key in keys_of(OTHER, 1).values():
        why = classify_segment(key, "tiered", CLUSTER)
        assert isinstance(why, str) and str(OTHER) in why and str(CLUSTER) in why
        rec = segment_record(ObjectInfo(key, 1, 0), "tiered", 0, CLUSTER)
        assert rec.state == State.INVALID and str(OTHER) in rec.note


def test_the_tiered_prefix_is_refused_equal_to_or_nested_with_the_wal_prefix() -> None:
    def cfg(**kw: Any) -> WalmgrConfig:
        return WalmgrConfig(store="file:///nowhere", registry="/nowhere", **kw)

    assert cfg().tiered_prefix == "tiered" and cfg(tiered_prefix="/segs/").tiered_prefix == "segs"
    for prefix, tiered in (("wal", "wal"), ("wal", "wal/t"), ("a/wal", "a"), ("wal", ""), ("wal", "/"), ("w", "a//b")):
        with pytest.raises(WalmgrConfigError, match="tiered_prefix"):
            cfg(prefix=prefix, tiered_prefix=tiered)
    assert cfg(prefix="wal", tiered_prefix="wal-tiered").tiered_prefix == "wal-tiered"  # siblings are fine
    gate = cfg(max_clock_skew_ms=7, grace_ms=11).segment_age_gate_ms
    assert gate == SEGMENT_SWAP_DEADLINE_MS_DEFAULT + 7 + 11


def test_the_deleter_refuses_what_was_planned_against_the_rules(tmp_path: Path) -> None:
    """Defense in depth: a clone's segment key forced into the plan (it parses,
    so Registry.plan takes it), and every segment key when no cluster is
    known, leave the plan INVALID; the store is never asked to delete them."""
    foreign = keys_of(OTHER, 1)[".log"]
    own = GOOD[".log"]
    for cluster, refused in ((None, {foreign, own}), (CLUSTER, {foreign})):
        with Registry(tmp_path / str(cluster)) as reg:
            recs = [_rec(k).with_state(State.CANDIDATE) for k in (foreign, own)]
            reg.put_many(recs)
            reg.plan(recs, 1)
            with pytest.raises(ValueError, match="non-WAL key"):
                reg.plan([_rec("tiered/zz/garbage")], 1)
            sent: list[str] = []

            def delete(keys: Sequence[str], sent: list[str] = sent) -> DeleteResult:
                sent.extend(keys)
                return DeleteResult(list(keys), {})

            report = execute_plan(NOWHERE, reg, "wal", batch_size=10, clock=SYSTEM_CLOCK, delete=delete,
                                  tiered_prefix="tiered", cluster_id=cluster)  # fmt: skip
            assert set(report.refused) == refused and set(sent) == {foreign, own} - refused
            assert {getattr(reg.get(k), "state", None) for k in refused} == {State.INVALID}
            assert report.segment_files == len(sent)


def _rec(key: str, state: State = State.TRACKED) -> ObjectRecord:
    return segment_record(ObjectInfo(key, 1, 0), "tiered", 0, CLUSTER).with_state(state)


def test_split_round_asks_about_logs_and_holds_indexes_until_their_log_is_gone() -> None:
    idx, tidx = GOOD[".index"], GOOD[".timeindex"]
    for log_state, where in (
        (State.TRACKED, "waiting"),
        (State.CANDIDATE, "waiting"),
        (State.PLANNED, "waiting"),
        (State.INVALID, "waiting"),
        (State.DELETED, "leftovers"),
        (State.GONE, "leftovers"),
        (None, "leftovers"),
    ):
        states: dict[str, State | None] = {GOOD[".log"]: log_state}
        got = split_round([_rec(GOOD[".log"]), _rec(idx), _rec(tidx)], states.get)
        assert [r.key for r in got.logs] == [GOOD[".log"]]
        assert (got.waiting if where == "waiting" else [r.key for r in got.leftovers]) == [idx, tidx], log_state
        assert not got.kept


def test_a_log_is_kept_on_every_doubt_as_a_wal_object_is() -> None:
    """The .log's checks are the WAL gate's: its partition from the key."""
    rec = _rec(GOOD[".log"])
    key = rec.key
    no_topic_deleted, leader = (lambda tp: False), (lambda tp: (1, 4))
    assert plan_checks([rec], no_topic_deleted, lambda tp: None, CLUSTER).doubt[key].endswith("has no leader")
    assert str(OTHER) in plan_checks([rec], no_topic_deleted, leader, OTHER).doubt[key]
    plan = plan_checks([rec], no_topic_deleted, leader, CLUSTER, lambda tp: (2,))
    assert {b: [(c.topic_id_partition, c.leader_epoch) for c in cs] for b, cs in plan.by_broker.items()} == {
        1: [(TP, 4)],
        2: [(TP, 4)],
    }
    clear, ref = int(Verdict.NOT_REFERENCED), int(Verdict.REFERENCED)
    doubts: list[dict[int, list[int] | str]] = [
        {1: [clear], 2: "timed out"},
        {1: [clear], 2: [int(Verdict.NOT_LEADER)]},
        {1: [clear]},
    ]
    for answers in doubts:
        got = decide(plan, answers, leader)
        assert not got.delete and key in got.doubt, answers
    assert not decide(plan, {1: [clear], 2: [clear]}, lambda tp: (1, 5)).delete  # leader changed meanwhile
    assert decide(plan, {1: [clear], 2: [ref]}, leader).referenced.keys() == {key}
    cleared = decide(plan, {1: [clear], 2: [clear]}, leader)
    assert cleared.delete == [key]
    # Then every broker's word: one that references it, or one silent, keeps it.
    assert not sweep(cleared, [1, 2, 3], {1: set(), 2: set(), 3: {key}}, [1, 2, 3]).delete
    assert not sweep(cleared, [1, 2, 3], {1: set(), 2: set(), 3: "unreachable"}, [1, 2, 3]).delete
    assert sweep(cleared, [1, 2, 3], {1: set(), 2: set(), 3: set()}, [1, 2, 3]).delete == [key]
    # A deleted topic holds no reference, but the sweep still asks every broker.
    gone = decide(plan_checks([rec], lambda tp: True, leader, CLUSTER), {}, leader)
    assert gone.delete == [key] and not sweep(gone, [1], {1: {key}}, [1]).delete


class _Failing(ForwardingStore):
    def head(self, key: str) -> ObjectInfo:
        raise ObjectStoreError("injected: HEAD failed", retriable=True)


def test_a_leftover_is_deleted_only_when_the_store_says_its_log_does_not_exist(tmp_path: Path) -> None:
    store = LocalDirStore(tmp_path, fsync=False)
    index = _rec(GOOD[".index"])
    assert leftover_verdict(store, index) is None
    store.put(GOOD[".log"], b"x" * 61)
    why = leftover_verdict(store, index)
    assert why is not None and "exists" in why
    store.delete_many([GOOD[".log"]])
    why = leftover_verdict(_Failing(store), index)
    assert why is not None and "did not say" in why


# ------------------------------------------------------------ the model

DEADLINE = SEGMENT_SWAP_DEADLINE_MS_DEFAULT
SKEW_MS = 20_000
GRACE_MS = 10_000


class World:
    """Segments as a leader, the bucket and walmgr see them."""

    def __init__(self) -> None:
        self.store_now = 10_000_000  # the leader's store clock (the swap deadline's)
        self.objects: dict[str, int] = {}  # key -> created_ms: what the bucket holds
        self.referenced: set[str] = set()  # .log keys a row or entry names
        self.ever_deleted: set[str] = set()
        self.records: dict[str, State] = {}  # walmgr's registry: key -> state
        self.uploaded: list[str] = []  # .log keys whose copy returned: a leader may swap them in
        self.n = 0

    def upload(self, parts: int, uploader_skew: int) -> None:
        self.n += 1
        created = self.store_now + uploader_skew
        meta = RemoteLogSegmentMetadata.for_segment(uuid.UUID(int=self.n), TP, sample_segment(2), created)
        rsm = ObjectStoreRsm(NOWHERE, cluster_id=CLUSTER)
        for suffix in (".index", ".timeindex", ".log")[:parts]:  # the copy's order
            self.objects[rsm.segment_key(meta, suffix)] = created
        if parts == 3:
            self.uploaded.append(rsm.segment_key(meta, ".log"))

    def swap(self, i: int) -> None:
        if not self.uploaded:
            return
        key = self.uploaded[i % len(self.uploaded)]
        if self.store_now - parse_segment_key(key).created_ms <= DEADLINE:  # the leader's swap deadline
            assert key not in self.ever_deleted, f"{key} swapped in after walmgr deleted it"
            self.referenced.add(key)

    def drop(self, i: int) -> None:
        if self.referenced:
            self.referenced.discard(sorted(self.referenced)[i % len(self.referenced)])

    def walmgr_round(self, skew: int) -> None:
        cfg = WalmgrConfig(store="file:///nowhere", registry="/nowhere", max_clock_skew_ms=SKEW_MS, grace_ms=GRACE_MS)
        now = self.store_now + skew  # walmgr's clock, off by at most the skew
        for key in self.objects:
            self.records.setdefault(key, State.TRACKED)
        live = [
            _rec(k)
            for k, state in sorted(self.records.items())
            if state == State.TRACKED and now - parse_segment_key(k).created_ms > cfg.segment_age_gate_ms
        ]
        split = split_round(live, self.records.get)
        plan = plan_checks(split.logs, lambda tp: False, lambda tp: (1, 0), CLUSTER)
        answers = {
            b: [int(Verdict.REFERENCED if c.key in self.referenced else Verdict.NOT_REFERENCED) for c in checks]
            for b, checks in plan.by_broker.items()
        }
        delete = decide(plan, answers, lambda tp: (1, 0)).delete
        for r in split.leftovers:
            log_key = parse_segment_key(r.key).stem + ".log"
            if log_key not in self.objects:  # leftover_verdict: the store says no .log
                assert r.key not in delete
                delete.append(r.key)
        for key in delete:
            if key.endswith(".log"):
                assert key not in self.referenced, f"deleted {key}, still referenced"
            else:
                assert parse_segment_key(key).stem + ".log" not in self.objects, f"deleted {key} before its .log"
            self.objects.pop(key, None)
            self.records[key] = State.DELETED
            self.ever_deleted.add(key)


model_ops = st.lists(
    st.one_of(
        st.tuples(st.just("upload"), st.integers(1, 3), st.integers(-SKEW_MS, SKEW_MS)),
        st.tuples(st.just("swap"), st.integers(0, 20)),
        st.tuples(st.just("drop"), st.integers(0, 20)),
        st.tuples(st.just("tick"), st.sampled_from([1_000, 30_000, 120_000, DEADLINE, 2 * DEADLINE])),
        st.tuples(st.just("walmgr"), st.integers(-SKEW_MS, SKEW_MS)),
    ),
    max_size=40,
)


def run_model(history: list[Any]) -> World:
    w = World()
    for op, *args in history:
        if op == "upload":
            w.upload(*args)
        elif op == "swap":
            w.swap(*args)
        elif op == "drop":
            w.drop(*args)
        elif op == "tick":
            w.store_now += args[0]
        else:
            w.walmgr_round(*args)
    return w


@settings(max_examples=300, deadline=None)
@given(model_ops)
def test_property_the_gate_deletes_nothing_referenced_or_still_swappable(history: list[Any]) -> None:
    run_model(history)


def test_orphans_and_dropped_segments_are_deleted_log_first() -> None:
    w = run_model(
        [
            ("upload", 3, 0),  # segment 1: swapped, later dropped by retention
            ("upload", 3, 0),  # segment 2: an orphan (never swapped)
            ("upload", 1, 0),  # segment 3: a crash after its first PUT (an index alone)
            ("swap", 0),
            ("tick", DEADLINE),
            ("walmgr", 0),  # not past the gate yet (deadline + skew + grace)
        ]
    )
    assert len(w.objects) == 7 and not w.ever_deleted
    w.store_now += SKEW_MS + GRACE_MS + 1
    w.walmgr_round(0)
    [live] = w.referenced
    # The orphan's .log and the lone index went; the orphan's indexes wait for the next round.
    assert {k.rsplit(".", 1)[1] for k in w.ever_deleted} == {"log", "index"} and len(w.ever_deleted) == 2
    w.walmgr_round(0)
    assert len(w.ever_deleted) == 4 and all(parse_segment_key(live).stem not in k for k in w.ever_deleted)
    w.drop(0)  # retention: the last reference went
    w.walmgr_round(0)
    w.walmgr_round(0)
    assert not w.objects and len(w.ever_deleted) == 7


def test_the_model_finds_a_gate_without_the_swap_deadline() -> None:
    """The injected bug: the segment gate leaves out the swap deadline, so a
    segment uploaded a minute ago and not yet swapped looks old enough."""
    history = [("upload", 3, 0), ("tick", 120_000), ("walmgr", 0), ("swap", 0)]
    run_model(history)  # the real gate: fine
    injected_bugs.enable(["walmgr_segment_gate_without_swap_deadline"])
    try:
        with pytest.raises(AssertionError, match="swapped in after walmgr deleted it"):
            run_model(history)
    finally:
        injected_bugs.enable([])


# ------------------------------------------- every row counts as a reference


def test_a_markers_only_segment_is_referenced_by_its_row(tmp_path: Path) -> None:
    """A range holding only a transaction marker (an inline entry: no object
    behind it) swapped to a segment has a row but no file-index entry: the
    store still answers walmgr "referenced" for the segment's key, until
    the row goes with its entries."""
    with open_store(tmp_path / "s", FakeClock(T0)) as store:
        tp = make_topic([store])
        commit(store, tp, batch(5, 0, 0, txn=True, records=3))  # offsets 0-2
        store.write_txn_markers([marker(tp, 5, 0, 2, True)], T0)  # offset 3, inline
        swap = segment_of(store, tp, 3, 3)
        meta = RemoteLogSegmentMetadata.for_segment(uuid.uuid4(), tp, sample_segment(2), T0)
        key = ObjectStoreRsm(NOWHERE, cluster_id=CLUSTER).segment_key(meta, ".log")
        swap = SegmentSwap(tp, 3, 3, key, swap.size, uploader=1)
        assert store.swap_to_segment(swap).error == Errors.NONE
        assert key not in store.file_usage()  # no entry names an object there
        other = ObjectStoreRsm(NOWHERE, cluster_id=CLUSTER).segment_key(
            RemoteLogSegmentMetadata.for_segment(uuid.uuid4(), tp, sample_segment(2), T0), ".log"
        )
        assert store.referenced_files({key, other, "tiered/not-a-key.log"}) == {key}
        assert store.check() == []
        [r] = store.delete_records([DeleteRecordsRequest(tp, -1)])
        assert r.errors == Errors.NONE and store.segments(tp) == []
        assert store.referenced_files({key}) == set()
