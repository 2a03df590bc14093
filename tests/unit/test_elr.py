"""KIP-966's rules (partlog.controller.elr, rules.after_fencing) against a
small reference model of what each replica holds.

The model keeps ``safe``: the replicas that hold every committed record.
Records commit only while the partition has a live leader and its ISR is
at least min ISR, and then exactly the ISR holds them all; a replica joins
the ISR by catching up from the leader (then it holds them too); a
broker's unclean shutdown (a power loss with sync off) loses its tail.
The rules must never put a replica outside ``safe`` in the ISR or ELR, nor
elect one, unless an unclean election was asked for."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from partlog.controller import elr
from partlog.controller.cluster_meta import NO_LEADER, PartitionInfo
from partlog.controller.reassignment import state_error
from partlog.controller.rules import after_fencing, bump

REPLICAS = (1, 2, 3)


def part(isr: tuple[int, ...] = REPLICAS, leader: int = 1, elr_: tuple[int, ...] = ()) -> PartitionInfo:
    return PartitionInfo(leader, 0, REPLICAS, isr, 0, elr=elr_)


def test_shrink_below_min_isr_moves_the_lost_to_the_elr() -> None:
    p = elr.shrink(part(), (1, 2), 2)
    assert (p.isr, p.elr) == ((1, 2), ())
    p = elr.shrink(p, (1,), 2)
    assert (p.isr, p.elr) == ((1,), (2,))
    # Back at min ISR: the ELR is cleared.
    p = elr.shrink(p, (1, 3), 2)
    assert (p.isr, p.elr) == ((1, 3), ())


def test_fencing_the_last_isr_member_empties_the_isr() -> None:
    alive = {2, 3}.__contains__
    p, unclean = after_fencing(part(isr=(1,), elr_=(2,)), alive, False, 2)
    # 2 was in the ELR: it leads with ISR = {it}; 1 (fenced) joins the ELR.
    assert (p.leader, p.isr, p.elr, unclean) == (2, (2,), (1,), False)
    p, _ = after_fencing(part(isr=(1,)), {3}.__contains__, False, 1)
    assert (p.leader, p.isr, p.elr) == (NO_LEADER, (), (1,))
    # Without the ELR rules (min ISR 0), KRaft's older rule keeps the last member.
    p, _ = after_fencing(part(isr=(1,)), {3}.__contains__, False, 0)
    assert (p.leader, p.isr, p.elr) == (NO_LEADER, (1,), ())


def test_unclean_election_clears_the_elr() -> None:
    p, unclean = after_fencing(part(isr=(1,), elr_=(2,)), {3}.__contains__, True, 2)
    assert (p.leader, p.isr, p.elr, unclean) == (3, (3,), (), True)


def test_forget_removes_an_unclean_broker_from_isr_and_elr() -> None:
    p = elr.forget(part(isr=(), leader=NO_LEADER, elr_=(1, 2)), 1, 2)
    assert (p.isr, p.elr) == ((), (2,))
    p = elr.forget(part(isr=(1, 3), elr_=(2,)), 3, 2)
    assert (p.isr, p.elr) == ((1,), (2,))
    assert elr.forget(part(isr=(1,)), 2, 2) == part(isr=(1,))


def test_min_isr_follows_the_topic_override() -> None:
    assert elr.min_isr(None, 2) == 2
    assert elr.min_isr((("min.insync.replicas", "3"), ("retention.ms", "1")), 2) == 3


def test_a_removed_replica_leaves_the_elr() -> None:
    p = replace(part(isr=(1,), elr_=(2, 3)), replicas=(1, 2))
    assert elr.normalized(p).elr == (2,)
    assert bump(part(isr=(1,)), part(isr=(1,), elr_=(2,))).partition_epoch == 1


# ------------------------------------------------------------ the model

Op = tuple[str, int]
OPS = st.lists(
    st.tuples(st.sampled_from(["fence", "register", "register_unclean", "shrink", "expand", "commit"]),
              st.sampled_from(REPLICAS)),
    max_size=40,
)  # fmt: skip


def run_model(ops: list[Op], min_isr: int, *, forget: bool = True) -> str | None:
    """Runs ``ops`` through the rules; the first broken invariant, or None."""
    p = part()
    alive, safe = set(REPLICAS), set(REPLICAS)
    for kind, b in ops:
        old = p
        if kind == "fence" and b in alive:
            alive.discard(b)
            p, _ = after_fencing(p, alive.__contains__, False, min_isr)
        elif kind in ("register", "register_unclean") and b not in alive:
            alive.add(b)
            if kind == "register_unclean":
                safe.discard(b)  # a power loss took its unsynced tail
                if forget:
                    p = elr.forget(p, b, min_isr)
            p, _ = after_fencing(p, alive.__contains__, False, min_isr)
        elif kind == "shrink" and p.leader != NO_LEADER and b != p.leader and b in p.isr:
            p = elr.shrink(p, tuple(r for r in p.isr if r != b), min_isr)
        elif kind == "expand" and p.leader != NO_LEADER and b in alive and b not in p.isr:
            safe.add(b) if p.leader in safe else safe.discard(b)  # it caught up with the leader
            p = elr.normalized(elr.shrink(p, tuple(r for r in REPLICAS if r in p.isr or r == b), min_isr))
        elif kind == "commit" and p.leader != NO_LEADER and len(p.isr) >= min_isr:
            safe = set(p.isr)
        p = bump(old, p)
        why = state_error(p, alive.__contains__)
        if why is not None:
            return f"{kind} {b}: {why}: {p}"
        if not set(p.isr) | set(p.elr) <= safe:
            return f"{kind} {b}: ISR {p.isr} / ELR {p.elr} outside the safe replicas {sorted(safe)}"
        if p.leader != old.leader and p.leader != NO_LEADER and p.leader not in old.isr + old.elr:
            return f"{kind} {b}: leader {p.leader} from outside ISR {old.isr} and ELR {old.elr}"
    return None


@settings(max_examples=400, deadline=None)
@given(OPS, st.integers(1, 3))
def test_the_rules_keep_the_model_invariants(ops: list[Op], min_isr: int) -> None:
    assert run_model(ops, min_isr) is None


def test_the_model_finds_an_unclean_broker_kept_in_the_elr() -> None:
    # 1 leads alone (2 and 3 out of the ISR, in the ELR); 1 is fenced and
    # comes back after a power loss: kept in the ELR, it would lead without
    # what it lost.  The check must be able to fail.
    ops = [("shrink", 2), ("shrink", 3), ("commit", 1), ("fence", 1), ("fence", 2), ("fence", 3),
           ("register_unclean", 1)]  # fmt: skip
    assert run_model(ops, 3) is None
    why = run_model(ops, 3, forget=False)
    assert why is not None and "outside the safe replicas" in why


# ------------------------------------------------------------- etcd (in part)


def test_etcd_never_elects_an_unclean_broker_from_a_stale_isr() -> None:
    """etcd keeps KRaft's older rule (no ELR), but an incarnation registered
    after an unclean shutdown leaves every ISR, even as its last member,
    before the acting controller accepts it: the partition stays offline."""
    import uuid

    from partlog.controller.cluster_meta import BrokerInfo
    from partlog.controller.etcd_controller import plan
    from partlog.controller.etcd_layout import KV, EtcdView, Keys, enc_broker, enc_part, enc_topic, pack_value
    from partlog.kafka.records import TopicIdPartition

    keys, tid = Keys("/c"), uuid.UUID(int=7)
    tp = TopicIdPartition(tid, 0)
    offline = PartitionInfo(NO_LEADER, 1, (1, 2), (1,), 2)  # 1 was the last ISR member
    for unclean in (False, True):
        view = EtcdView(keys)
        view.load(
            [
                KV(keys.cluster_id, str(uuid.UUID(int=1)).encode(), 1, 1),
                KV(keys.broker(1), enc_broker(BrokerInfo(1, "a", "h", 1), 5, unclean), 6, 6),  # back, not accepted
                KV(keys.broker(2), enc_broker(BrokerInfo(2, "a", "h", 2), 5), 2, 2),
                KV(keys.incarnation(2), pack_value(2), 3, 3),
                KV(keys.topic("t"), enc_topic(tid, [(1, 2)]), 4, 4),
                KV(keys.part(tp), enc_part(offline), 5, 5),
            ],
            6,
        )
        assert view.refused == 0 and view.brokers[1].unclean_shutdown is unclean
        first = plan(view, unclean=False, elect_preferred=False)
        if not unclean:
            assert first.changes == [] and first.accept == [(1, 6)]  # accepted, then it leads again
            continue
        (change,) = first.changes
        assert change.new == PartitionInfo(NO_LEADER, 1, (1, 2), (), 3) and first.accept == []
        view.apply(KV(keys.part(tp), enc_part(change.new), 5, 7))
        assert view.refused == 0 and view.partition(tp) == change.new
        second = plan(view, unclean=False, elect_preferred=False)
        assert second.changes == [] and second.accept == [(1, 6)]
        view.apply(KV(keys.incarnation(1), pack_value(6), 8, 8))
        assert plan(view, unclean=False, elect_preferred=False).empty()  # offline: nobody eligible
