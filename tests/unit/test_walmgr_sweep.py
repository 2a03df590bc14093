"""walmgr's sweep (issue 29, "Deletion needs every broker's word"): after
the leader check, every broker the metadata lists is asked whether its store
references the keys about to be deleted, whatever partition a footer named.

Against a reference: a key may be deleted only if no listed broker's store
holds it, every listed broker answered, the list did not change meanwhile,
and the leader check had cleared it; and every such key is deleted (the
sweep keeps nothing without a reason).
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from walmgr.decide import Decision, sweep

KEYS = [f"wal/k{i}" for i in range(6)]
BROKER_IDS = [1, 2, 3, 4]

answers_st = st.one_of(st.frozensets(st.sampled_from(KEYS)), st.sampled_from(["timed out", "unreachable: refused"]))


@given(
    cleared=st.lists(st.sampled_from(KEYS), unique=True),
    live=st.lists(st.sampled_from(BROKER_IDS), unique=True),
    answers=st.dictionaries(st.sampled_from(BROKER_IDS), answers_st),
    joined=st.sets(st.sampled_from(BROKER_IDS)),
)
def test_a_key_is_deleted_only_when_every_listed_broker_said_it_holds_none(
    cleared: list[str], live: list[int], answers: dict[int, frozenset[str] | str], joined: set[int]
) -> None:
    before = Decision(sorted(cleared), {"wal/other": "broker 9 partition x"}, {"wal/doubt": "timed out"})
    live_after = sorted(set(live) | joined)
    out = sweep(before, live, answers, live_after)
    # What the input said stays said.
    assert out.referenced.items() >= before.referenced.items()
    assert out.doubt.items() >= before.doubt.items()
    everyone_answered = bool(live) and all(isinstance(answers.get(b), frozenset) for b in live)
    stable = set(live_after) == set(live)
    held = set().union(*(a for b in live if isinstance(a := answers.get(b), frozenset)))
    expected = [k for k in before.delete if k not in held] if everyone_answered and stable else []
    assert out.delete == expected
    # Every key of the round is accounted for: deleted, referenced or doubted.
    for k in before.delete:
        assert (k in out.delete) + (k in out.referenced) + (k in out.doubt) == 1, k
        if k in held and everyone_answered and stable:
            assert k in out.referenced and "footer did not name" in out.referenced[k]


def test_nothing_to_delete_asks_nobody_and_changes_nothing() -> None:
    before = Decision([], {"a": "x"}, {"b": "y"})
    assert sweep(before, [], {}, []) is before


def test_no_broker_listed_keeps_everything() -> None:
    out = sweep(Decision(["wal/k0"], {}, {}), [], {}, [])
    assert out.delete == [] and "no live broker" in out.doubt["wal/k0"]


def test_a_deleted_topics_key_a_broker_still_holds_says_so() -> None:
    """A key whose partitions all belong to deleted topics is cleared
    without asking a leader; a broker that has not dropped those logs yet
    still holds it.  That is expected, not a wrong footer: the reason says
    which (the conformance run's log warned of 54 "wrong footers")."""
    before = Decision(["wal/deleted", "wal/live"], {}, {})
    out = sweep(before, [1], {1: frozenset({"wal/deleted", "wal/live"})}, [1], deleted_topic_keys={"wal/deleted"})
    assert out.delete == []
    assert "not dropped its deleted topics' logs" in out.referenced["wal/deleted"]
    assert "footer did not name" in out.referenced["wal/live"]
