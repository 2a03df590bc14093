"""The release grace (partlog.store.release_grace): a key a store released,
or holds for an apply, still answers "referenced" to walmgr.

A hypothesis state machine against a small reference model, then the store
itself on real LMDB: a trim, a segment rewrite's dropped row, a fresh open.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from partlog import CreateTopicAndPartitionsRequest, DeleteRecordsRequest, MetadataStore, TopicIdPartition
from partlog.runtime import ManualClock
from partlog.store import release_grace
from partlog.store.release_grace import Hold, ReleaseGrace
from tests.batches import build_batch, request, wal_key

GRACE_MS = 1_000
KEYS = st.sampled_from([f"k{i}" for i in range(6)])


class GraceModel(RuleBasedStateMachine):
    """Model: a key is covered while some hold names it, until a grace after
    its last release or hold's end, and every key during a grace after an
    open or an overflow."""

    def __init__(self) -> None:
        super().__init__()
        self.clock = ManualClock()
        self.grace = ReleaseGrace(GRACE_MS, self.clock.monotonic)
        self.released_until: dict[str, float] = {}
        self.holds: list[Hold] = []
        self.blanket_until = float("-inf")

    def _until(self) -> float:
        return self.clock.monotonic() + GRACE_MS / 1000

    @rule(keys=st.lists(KEYS, max_size=3))
    def release(self, keys: list[str]) -> None:
        self.grace.released(keys)
        for k in keys:
            self.released_until[k] = self._until()

    @rule(keys=st.lists(KEYS, max_size=3))
    def hold(self, keys: list[str]) -> None:
        self.holds.append(self.grace.hold(keys))

    @precondition(lambda self: self.holds)
    @rule(i=st.integers(0, 10))
    def end_hold(self, i: int) -> None:
        h = self.holds.pop(i % len(self.holds))
        self.grace.end_hold(h)
        for k in h.keys:
            self.released_until[k] = self._until()

    @rule()
    def opened(self) -> None:
        self.grace.opened()
        self.blanket_until = self._until()
        self.released_until.clear()

    @rule(ms=st.integers(0, 1_500))
    def advance(self, ms: int) -> None:
        self.clock.advance(ms / 1000)

    @invariant()
    def covered_as_the_model(self) -> None:
        now = self.clock.monotonic()
        keys = [f"k{i}" for i in range(6)]
        held = {k for h in self.holds for k in h.keys}
        if now < self.blanket_until:
            want = set(keys)
        else:
            want = held | {k for k, until in self.released_until.items() if now < until}
        assert self.grace.covered(keys) == want


TestGraceModel = GraceModel.TestCase
TestGraceModel.settings = settings(max_examples=200, stateful_step_count=30, deadline=None)


def test_over_the_bound_every_key_is_covered_for_a_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    """More released keys than remembered: a blanket grace, not a forgotten key."""
    monkeypatch.setattr(release_grace, "RELEASED_KEYS_MAX", 3)
    clock = ManualClock()
    g = ReleaseGrace(GRACE_MS, clock.monotonic)
    g.released(["a", "b", "c", "d"])
    assert g.covered(["a", "z"]) == {"a", "z"} and g.blankets == 1 and g.size() == 0
    clock.advance(GRACE_MS / 1000)
    assert g.covered(["a", "z"]) == set()


def test_grace_off_still_counts_holds() -> None:
    g = ReleaseGrace(0, ManualClock().monotonic)
    h = g.hold(["a"])
    g.released(["b"])
    assert g.covered(["a", "b"]) == {"a"}
    g.end_hold(h)
    assert g.covered(["a", "b"]) == set()


def _store(path: Path, clock: ManualClock) -> MetadataStore:
    return MetadataStore.open(path, clock=clock.wall_ms, monotonic=clock.monotonic, release_grace_ms=GRACE_MS)


def test_a_store_answers_a_trimmed_object_referenced_for_its_grace(tmp_path: Path) -> None:
    """DeleteRecords drops an object's last reference: walmgr hears
    "referenced" until the grace ran out (the leader's side of the race in
    tiered.md, "How replicas follow"); a reopened store answers every key
    for a grace, not knowing what it released before."""
    clock = ManualClock()
    with _store(tmp_path / "s", clock) as store:
        assert store.referenced_files(["never-seen"]) == set()  # a new store: no blanket
        tid = uuid.uuid4()
        store.create_topic_and_partitions([CreateTopicAndPartitionsRequest(tid, "t", 1)])
        tp = TopicIdPartition(tid, 0)
        key = wal_key(clock.wall_ms())
        batch = build_batch(2, timestamp_ms=clock.wall_ms())
        store.commit_file(key, 1, 10_000, [request(tp, batch)])
        assert store.delete_records([DeleteRecordsRequest(tp, -1)])[0].low_watermark == 2
        assert store.file_usage() == {}
        assert store.referenced_files([key, "other"]) == {key}
        clock.advance(GRACE_MS / 1000 - 0.001)
        assert store.referenced_files([key]) == {key}
        clock.advance(0.002)
        assert store.referenced_files([key]) == set()
    with _store(tmp_path / "s", clock) as store:
        # Reopened: every key for a grace (a fail-stop's reopen() does the same).
        assert store.referenced_files([key, "other"]) == {key, "other"}
        clock.advance(GRACE_MS / 1000)
        assert store.referenced_files([key, "other"]) == set()


def test_a_new_store_starts_without_a_blanket_grace(tmp_path: Path) -> None:
    """A store just created released nothing before: no blanket."""
    clock = ManualClock()
    with _store(tmp_path / "s", clock) as store:
        assert store.referenced_files(["k"]) == set()
        assert store.store_stats()["release_grace_blankets"] == 0


def test_a_store_without_a_grace_answers_at_once(tmp_path: Path) -> None:
    """The default of a bare store (tools, tests): no grace, no blanket."""
    clock = ManualClock()
    with MetadataStore.open(tmp_path / "s", clock=clock.wall_ms, monotonic=clock.monotonic) as store:
        assert store.referenced_files(["k"]) == set()
