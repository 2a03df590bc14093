"""A leader answers a replica's fetch of a partition where nothing moved
with its last answer, without a store read (LedPartition.quiet).  Against a
model of the store's two log ends: a commit is in memory (the partition's
version, its log end) once sequenced, and readable once durable.  A kept
answer must always equal a fresh read, whatever the order of sequencing,
durability and fetches (the bug this found: an answer read while a commit
was sequenced but not durable was kept, and the follower never got that
commit until another write came: acks=all stalled 5 s, then timed out)."""

from __future__ import annotations

import uuid
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from partlog.kafka.records import LogRead, TopicIdPartition
from partlog.replication.partition import LedPartition
from partlog.replication.replica_state import ReplicaState
from partlog.rpc.wire import ReplicaFetchPartition
from partlog.store import OffsetOutOfRangeError

TP = TopicIdPartition(uuid.UUID(int=7), 0)


class _Version:
    """A partition state as the store's catalog holds it: replaced, never changed."""

    def __init__(self, leo: int, lso: int) -> None:
        self.log_end_offset = leo
        self.log_start_offset = lso


class TwoEndsStore:
    """The store calls read_for_follower makes, over a log whose entries
    are their offsets: ``version`` is what was sequenced, ``durable`` how
    far reads see; ``start`` moves by an exclusive write (read at once)."""

    def __init__(self) -> None:
        self.version = _Version(0, 0)
        self.durable = 0

    def sequence(self) -> None:
        self.version = _Version(self.version.log_end_offset + 1, self.version.log_start_offset)

    def make_durable(self) -> None:
        self.durable = self.version.log_end_offset

    def move_start(self) -> None:
        if self.durable == self.version.log_end_offset and self.version.log_start_offset < self.durable:
            self.version = _Version(self.version.log_end_offset, self.version.log_start_offset + 1)

    def partition_version(self, tp: TopicIdPartition) -> object:
        return self.version

    def log_end_offset(self, tp: TopicIdPartition) -> int:
        return self.version.log_end_offset

    def log_start_offset(self, tp: TopicIdPartition) -> int:
        return self.version.log_start_offset

    def latest_leader_epochs(self, tps: Any) -> list[int]:
        return [0 for _ in tps]

    def leader_epoch_cache(self, tp: TopicIdPartition) -> list[tuple[int, int]]:
        return [(0, 0)]

    def read_log(self, tp: TopicIdPartition, from_offset: int, max_bytes: int, max_entries: int | None = None) -> Any:
        lso = self.version.log_start_offset
        if not lso <= from_offset <= self.durable:
            raise OffsetOutOfRangeError("out of range", log_start_offset=lso, log_end_offset=self.durable)
        entries = tuple(range(from_offset, min(self.durable, from_offset + (max_entries or 1 << 30))))
        return LogRead(entries, lso, self.durable, 0, 0)  # type: ignore[arg-type]

    def segments(self, tp: TopicIdPartition, from_start: int = 0, rows_max: int | None = None) -> list[Any]:
        return []


OPS = st.lists(st.sampled_from(["sequence", "durable", "start", "fetch 2", "fetch 3"]), min_size=1, max_size=60)


@settings(max_examples=400, deadline=None)
@given(ops=OPS, entries_max=st.integers(1, 3))
def test_a_kept_answer_is_always_a_fresh_read(ops: list[str], entries_max: int) -> None:
    store = TwoEndsStore()
    rs = ReplicaState(leader_id=1, replicas=(1, 2, 3))
    led = LedPartition(TP, 0, rs)
    follower_leo = {2: 0, 3: 0}
    for op in ops:
        if op == "sequence":
            store.sequence()
        elif op == "durable":
            store.make_durable()
        elif op == "start":
            store.move_start()
        else:
            r = int(op.split()[1])
            offset = max(follower_leo[r], store.version.log_start_offset)
            p = ReplicaFetchPartition(TP, 0, offset, 0 if offset else -1, 0, offset, -1, None)
            answer = led.read_for_follower(store, r, p, entries_max)  # type: ignore[arg-type]
            fresh = LedPartition(TP, 0, rs).read_for_follower(store, r, p, entries_max)  # type: ignore[arg-type]
            assert answer == fresh, (op, answer, fresh)
            if answer.entries:
                follower_leo[r] = offset + len(answer.entries)
            elif answer.log_start_offset > offset:
                follower_leo[r] = answer.log_start_offset


def test_an_answer_read_between_sequencing_and_durability_is_not_kept() -> None:
    """The regression, spelled out."""
    store = TwoEndsStore()
    led = LedPartition(TP, 0, ReplicaState(leader_id=1, replicas=(1, 2, 3)))
    p = ReplicaFetchPartition(TP, 0, 0, -1, 0, 0, -1, None)
    store.sequence()  # in memory: log end 1; reads still see 0
    assert led.read_for_follower(store, 2, p, 10).entries == ()  # type: ignore[arg-type]
    store.make_durable()  # readable now, the version unchanged
    assert led.read_for_follower(store, 2, p, 10).entries == (0,)  # type: ignore[arg-type,comparison-overlap]
    # Caught up, nothing moving: kept, and answered without a read.
    q = ReplicaFetchPartition(TP, 0, 1, 0, 0, 0, -1, None)
    first = led.read_for_follower(store, 2, q, 10)  # type: ignore[arg-type]
    assert led.quiet[2][3] is first and led.read_for_follower(store, 2, q, 10) is first  # type: ignore[arg-type]
