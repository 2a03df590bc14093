"""walmgr's decision core against a reference model of references.

The model holds, per (object, partition), whether some log references the
object, and per partition its leader and leader epoch.  Histories mix
commits (only while an object is younger than the commit deadline by the
committing leader's clock), deletions of references (retention,
DeleteRecords), topic deletions, leader changes (also between asking and
deciding), and walmgr rounds whose brokers may fail, time out, answer for a
stale epoch or answer garbage.  Some objects belong to another cluster
whose topics have the same ids (its leaders are ours, as a misconfigured
walmgr would see them) and some have footers naming no partitions.  The
property: an object is planned for deletion only if the model says no
reference exists and none can appear, and never one of another cluster or
one nobody was asked about.
"""

from __future__ import annotations

import uuid
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from partlog.kafka.records import TopicIdPartition
from walmgr.decide import Verdict, candidates, decide, plan_checks
from walmgr.model import ObjectRecord, Source, State

DEADLINE_MS = 1_000
SKEW_MS = 200
GRACE_MS = 300
GATE_MS = DEADLINE_MS + SKEW_MS + GRACE_MS
TOPICS = [uuid.UUID(int=i + 1) for i in range(2)]
TPS = [TopicIdPartition(t, p) for t in TOPICS for p in range(2)]
BROKERS = [1, 2, 3]
CLUSTER = uuid.UUID(int=0xC1)
OTHER_CLUSTER = uuid.UUID(int=0xC2)


class World:
    def __init__(self) -> None:
        self.now = 10_000
        self.objects: dict[str, ObjectRecord] = {}
        self.refs: dict[tuple[str, TopicIdPartition], bool] = {}
        self.leader: dict[TopicIdPartition, tuple[int, int] | None] = {
            tp: (BROKERS[i % 3], 0) for i, tp in enumerate(TPS)
        }
        self.deleted_topics: set[uuid.UUID] = set()
        self.deleted: set[str] = set()
        # Objects of another cluster (or of none) and objects whose footer
        # named no partitions: references to them are invisible here.
        self.foreign: set[str] = set()

    def referenced(self, key: str) -> bool:
        return any(self.refs.get((key, tp), False) for tp in TPS if tp.topic_id not in self.deleted_topics)


ops = st.one_of(
    st.tuples(
        st.just("upload"),
        st.lists(st.sampled_from(TPS), min_size=1, max_size=4, unique=True),
        st.sampled_from([CLUSTER, CLUSTER, OTHER_CLUSTER, None]),
    ),
    st.tuples(st.just("upload_no_partitions")),
    st.tuples(st.just("commit"), st.integers(0, 50), st.integers(0, 3), st.integers(-SKEW_MS, SKEW_MS)),
    st.tuples(st.just("unref"), st.integers(0, 50), st.sampled_from(TPS)),
    st.tuples(st.just("tick"), st.sampled_from([1, 50, 199, 200, 201, 300, 700, 1_000, 1_301])),
    st.tuples(st.just("leader"), st.sampled_from(TPS), st.sampled_from([None, *BROKERS])),
    st.tuples(st.just("drop_topic"), st.sampled_from(TOPICS)),
    st.tuples(
        st.just("round"),
        st.integers(-SKEW_MS, SKEW_MS),  # walmgr's clock error
        st.dictionaries(st.sampled_from(BROKERS), st.sampled_from(["ok", "error", "short", "stale", "garbage"])),
        st.lists(st.tuples(st.sampled_from(TPS), st.sampled_from([None, *BROKERS])), max_size=2),  # moves mid-check
    ),
)


@settings(max_examples=500, deadline=None)
@given(st.lists(ops, max_size=60))
# A referenced object past the gate, asked of a broker that answers for a stale epoch.
@example(
    [("upload", [TPS[0]], CLUSTER), ("commit", 0, 0, 0), ("tick", 1_301), ("tick", 300), ("round", 0, {1: "stale"}, [])]
)
# A clock-fast walmgr: the gate must still hold for the slowest leader.
@example([("upload", [TPS[0]], CLUSTER), ("tick", 1_000), ("round", SKEW_MS, {}, [])])
@example([("upload", [TPS[0]], CLUSTER), ("tick", 1_301), ("round", SKEW_MS, {}, [])])
def test_only_objects_nothing_can_reference_are_planned(history: list[Any]) -> None:
    w = World()
    for op in history:
        kind = op[0]
        if kind in ("upload", "upload_no_partitions"):
            key = f"wal/00/{w.now:013d}-1-{len(w.objects):x}.wal"
            tps, cluster = (tuple(op[1]), op[2]) if kind == "upload" else ((), CLUSTER)
            w.objects[key] = ObjectRecord(
                key, 100, w.now, 1, tps, Source.SCAN, State.TRACKED, w.now, cluster_id=cluster
            )
            if cluster != CLUSTER or not tps:
                w.foreign.add(key)
        elif kind == "commit":
            keys = sorted(w.objects)
            if not keys:
                continue
            key = keys[op[1] % len(keys)]
            rec = w.objects[key]
            if not rec.partitions:
                continue
            tp, skew = rec.partitions[op[2] % len(rec.partitions)], op[3]
            # The leader refuses objects older than the deadline by ITS clock.
            if key not in w.deleted and (w.now + skew) - rec.created_ms <= DEADLINE_MS:
                w.refs[(key, tp)] = True
        elif kind == "unref":
            keys = sorted(w.objects)
            if keys:
                w.refs[(keys[op[1] % len(keys)], op[2])] = False
        elif kind == "tick":
            w.now += op[1]
        elif kind == "leader":
            tp, broker = op[1], op[2]
            old = w.leader[tp]
            epoch = (old[1] if old else 0) + 1
            w.leader[tp] = None if broker is None else (broker, epoch)
        elif kind == "drop_topic":
            w.deleted_topics.add(op[1])
        else:
            _, clock_error, behaviour, moves = op
            walmgr_now = w.now + clock_error
            live = [r for k, r in w.objects.items() if k not in w.deleted]
            cands = candidates(live, walmgr_now, GATE_MS)
            plan = plan_checks(cands, lambda tp: tp.topic_id in w.deleted_topics, dict(w.leader).__getitem__, CLUSTER)
            answers: dict[int, list[int] | str] = {}
            for broker, checks in plan.by_broker.items():
                how = behaviour.get(broker, "ok")
                if how == "error":
                    answers[broker] = "timed out"
                elif how == "short":
                    answers[broker] = [int(Verdict.NOT_REFERENCED)] * max(0, len(checks) - 1)
                elif how == "garbage":
                    answers[broker] = [7] * len(checks)
                else:
                    out: list[int] = []
                    for c in checks:
                        current = w.leader[c.topic_id_partition]
                        if how == "stale" or current != (broker, c.leader_epoch):
                            out.append(Verdict.NOT_LEADER)
                        else:
                            out.append(
                                Verdict.REFERENCED
                                if w.refs.get((c.key, c.topic_id_partition))
                                else Verdict.NOT_REFERENCED
                            )
                    answers[broker] = out
            for tp, broker in moves:
                old = w.leader[tp]
                w.leader[tp] = None if broker is None else (broker, (old[1] if old else 0) + 1)
            decision = decide(plan, answers, lambda tp: w.leader[tp])
            for key in decision.delete:
                rec = w.objects[key]
                # Another cluster's object, or one whose footer named nobody
                # to ask: some log we cannot see may reference it.
                assert key not in w.foreign, f"{key} planned without positive evidence"
                assert not w.referenced(key), f"{key} planned for deletion but referenced"
                # And no reference can appear: every leader's clock (within the
                # skew bound) puts the object past the commit deadline.
                assert w.now - SKEW_MS - rec.created_ms > DEADLINE_MS, f"{key} could still be committed"
                w.deleted.add(key)
            assert set(decision.delete).isdisjoint(decision.referenced)
            assert set(decision.delete).isdisjoint(decision.doubt)


def _rec(key: str, *tps: TopicIdPartition, created_ms: int = 0, cluster: uuid.UUID | None = CLUSTER) -> ObjectRecord:
    return ObjectRecord(key, 1, created_ms, 1, tps, Source.SCAN, State.TRACKED, 0, cluster_id=cluster)


def test_deleted_topics_hold_no_reference_and_no_leader_keeps_the_file() -> None:
    a, b = TPS[0], TPS[2]
    gone_only = _rec("k1", a)
    mixed = _rec("k2", a, b)
    plan = plan_checks([gone_only, mixed], lambda tp: tp.topic_id == a.topic_id, lambda tp: None, CLUSTER)
    assert plan.unreferenced == {"k1"} and "k2" in plan.doubt and "no leader" in plan.doubt["k2"]
    d = decide(plan, {}, lambda tp: None)
    assert d.delete == ["k1"] and "k2" in d.doubt


def test_age_gate_and_states() -> None:
    young = _rec("young", TPS[0], created_ms=1_000)
    old = _rec("old", TPS[0], created_ms=0)
    planned = _rec("planned", TPS[0]).with_state(State.PLANNED)
    assert [r.key for r in candidates([young, old, planned], GATE_MS + 500, GATE_MS)] == ["old"]
    # Exactly at the gate is not past it.
    assert candidates([old], GATE_MS, GATE_MS) == []


def test_one_referencing_partition_keeps_the_file_and_names_the_broker() -> None:
    rec = _rec("k", TPS[0], TPS[1])
    leaders = {TPS[0]: (1, 5), TPS[1]: (2, 3)}
    plan = plan_checks([rec], lambda tp: False, leaders.get, CLUSTER)
    assert {b: [c.leader_epoch for c in cs] for b, cs in plan.by_broker.items()} == {1: [5], 2: [3]}
    d = decide(plan, {1: [Verdict.NOT_REFERENCED], 2: [Verdict.REFERENCED]}, leaders.get)
    assert d.delete == [] and "broker 2" in d.referenced["k"]
    d = decide(plan, {1: [Verdict.NOT_REFERENCED], 2: [Verdict.NOT_REFERENCED]}, leaders.get)
    assert d.delete == ["k"]
    # The same answers, but partition 1's leader moved meanwhile: keep.
    moved = {TPS[0]: (1, 5), TPS[1]: (3, 4)}
    d = decide(plan, {1: [Verdict.NOT_REFERENCED], 2: [Verdict.NOT_REFERENCED]}, moved.get)
    assert d.delete == [] and "leader changed" in d.doubt["k"]


def test_no_partitions_or_another_cluster_is_a_doubt_asked_of_nobody() -> None:
    """Regression (issue 13, item 2): a record with no partitions was
    "unreferenced" (deleted without asking anyone); with a leader of the same
    topic id answering NOT_REFERENCED, another cluster's object was deleted."""
    empty = _rec("empty")
    foreign = _rec("foreign", TPS[0], cluster=OTHER_CLUSTER)
    unnamed = _rec("unnamed", TPS[0], cluster=None)
    leaders = {TPS[0]: (1, 0)}
    plan = plan_checks([empty, foreign, unnamed], lambda tp: False, leaders.get, CLUSTER)
    assert plan.by_broker == {} and plan.unreferenced == frozenset()
    assert set(plan.doubt) == {"empty", "foreign", "unnamed"}
    assert "no partitions" in plan.doubt["empty"] and str(OTHER_CLUSTER) in plan.doubt["foreign"]
    assert decide(plan, {1: [Verdict.NOT_REFERENCED]}, leaders.get).delete == []


def test_isr_followers_are_asked_too_and_any_reference_or_doubt_keeps_the_file() -> None:
    """Regression (issue 14, found triaging the simulation's first deletion
    report; `--inject walmgr_asks_only_leaders` brings it back): walmgr asked only the
    leader.  An ISR follower can hold a divergent tail (entries of an older
    epoch the new leader never had) referencing the object; elected before
    it truncates, that tail becomes the log, pointing at a deleted object.
    Every ISR member is asked at the leader's epoch; replicas outside the
    ISR are not (they truncate such a tail before they can lead or rejoin)."""
    rec = _rec("k", TPS[0])
    leaders = {TPS[0]: (1, 5)}
    isr = {TPS[0]: (1, 2, 3)}  # replica 4 is out of sync
    plan = plan_checks([rec], lambda tp: False, leaders.get, CLUSTER, isr.__getitem__)
    assert {b: [(c.leader, c.leader_epoch, c.asked) for c in cs] for b, cs in plan.by_broker.items()} == {
        1: [(1, 5, (1, 2, 3))],
        2: [(1, 5, (1, 2, 3))],
        3: [(1, 5, (1, 2, 3))],
    }
    clean = {b: [Verdict.NOT_REFERENCED] for b in (1, 2, 3)}
    assert decide(plan, clean, leaders.get).delete == ["k"]
    d = decide(plan, {**clean, 3: [Verdict.REFERENCED]}, leaders.get)
    assert d.delete == [] and "broker 3" in d.referenced["k"]
    # ISR_CHANGED: the leader's ISR has a member not asked (it joined since).
    for bad in ([Verdict.NOT_LEADER], [Verdict.ISR_CHANGED], "timed out", None):
        answers = {**clean, 2: bad} if bad is not None else {1: clean[1], 3: clean[3]}
        d = decide(plan, answers, leaders.get)
        assert d.delete == [] and "broker 2" in d.doubt["k"], d
    # The leader's epoch moved between asking and deciding: keep.
    assert decide(plan, clean, {TPS[0]: (2, 6)}.get).delete == []
    # The ISR gained a member not asked, as walmgr now sees it: keep.
    assert decide(plan, clean, leaders.get, isr.__getitem__).delete == ["k"]
    d = decide(plan, clean, leaders.get, {TPS[0]: (1, 2, 3, 4)}.__getitem__)
    assert d.delete == [] and "ISR changed" in d.doubt["k"]
