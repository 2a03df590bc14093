"""The store's journal: append, replay, torn tails, recycled segments, and a
follower in another process; and hostile journal files (fail closed: replay
stops at the first record that is not the next one, in bounded time)."""

from __future__ import annotations

import os
import random
import uuid
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from partlog.store.journal import JOURNAL_SEGMENT_BYTES_MIN, Journal

SEGMENT = JOURNAL_SEGMENT_BYTES_MIN  # 64 KiB: rotation after a few records


def payloads(n: int, seed: int = 0) -> list[bytes]:
    rng = random.Random(seed)
    return [rng.randbytes(rng.randint(1, 9000)) for _ in range(n)]


def test_replay_returns_what_was_appended_across_segments(tmp_path: Path) -> None:
    j = Journal(str(tmp_path / "j"), sync=False, segment_bytes=SEGMENT)
    j.start(1)
    data = payloads(60)
    assert [j.append(p) for p in data] == list(range(1, 61))
    assert j.stats["created"] + j.stats["rotations"] > 3
    j.close()
    again = Journal(str(tmp_path / "j"), sync=False, segment_bytes=SEGMENT)
    assert list(again.replay(0)) == list(enumerate(data, 1))
    assert list(again.replay(40)) == list(enumerate(data, 1))[40:]
    assert list(again.replay(60)) == []


def test_release_recycles_segments_and_stale_records_never_replay(tmp_path: Path) -> None:
    j = Journal(str(tmp_path / "j"), sync=False, segment_bytes=SEGMENT)
    j.start(1)
    data = payloads(200, seed=1)
    for i, p in enumerate(data, 1):
        j.append(p)
        if i % 20 == 0:
            j.release(i - 5)  # all but the last few applied
    assert j.stats["recycled"] > 0 and j.stats["rotations"] > 0
    # Bounded disk: the live segments plus at most two spares.
    assert len(os.listdir(tmp_path / "j")) <= len(j._segments) + 2
    j.close()
    again = Journal(str(tmp_path / "j"), sync=False, segment_bytes=SEGMENT)
    assert list(again.replay(195)) == list(enumerate(data, 1))[195:]


def test_a_torn_last_record_ends_the_journal(tmp_path: Path) -> None:
    j = Journal(str(tmp_path / "j"), sync=False, segment_bytes=SEGMENT)
    j.start(1)
    data = payloads(5, seed=2)
    for p in data:
        j.append(p)
    path, pos = j._segments[j._segment_first], j._pos
    j.close()
    # The sixth record was being written when the power went: half of it.
    with open(path, "r+b") as f:
        f.seek(pos)
        f.write(b"\x00\x00\x01\x00" + os.urandom(100))
    again = Journal(str(tmp_path / "j"), sync=False, segment_bytes=SEGMENT)
    assert list(again.replay(0)) == list(enumerate(data, 1))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    garbage=st.lists(st.tuples(st.integers(0, SEGMENT - 1), st.binary(min_size=1, max_size=64)), max_size=6),
)
def test_hostile_bytes_in_a_segment_cost_bounded_work_and_never_invent_records(
    tmp_path: Path, garbage: list[tuple[int, bytes]]
) -> None:
    """Any bytes anywhere: replay returns a prefix of what was appended
    (never a record that was not), and ends."""
    d = tmp_path / f"j{random.getrandbits(64)}"
    j = Journal(str(d), sync=False, segment_bytes=SEGMENT)
    j.start(1)
    data = payloads(8, seed=3)
    for p in data:
        j.append(p)
    path = j._segments[j._segment_first]
    j.close()
    with open(path, "r+b") as f:
        for pos, raw in garbage:
            f.seek(pos)
            f.write(raw)
    got = list(Journal(str(d), sync=False, segment_bytes=SEGMENT).replay(0))
    assert got == list(enumerate(data, 1))[: len(got)]


def test_follow_sees_a_live_writer_across_rotations_and_recycling(tmp_path: Path) -> None:
    writer = Journal(str(tmp_path / "j"), sync=False, segment_bytes=SEGMENT)
    writer.start(1)
    reader = Journal(str(tmp_path / "j"), sync=False, segment_bytes=SEGMENT, readonly=True)
    data = payloads(300, seed=4)
    seen: dict[int, bytes] = {}
    last = applied = 0

    def follow() -> None:
        # As a readonly store does: from what it saw or what LMDB applied
        # (released records may be recycled: it reads those from LMDB).
        nonlocal last
        for seq, payload in reader.follow(max(last, applied)):
            assert seq > max(last, applied)
            seen[seq] = payload
            last = seq

    for i, p in enumerate(data, 1):
        writer.append(p)
        if i % 7 == 0:
            follow()
        if i % 30 == 0 and i < 300:
            applied = i - 10
            writer.release(applied)
    follow()
    assert all(data[seq - 1] == payload for seq, payload in seen.items())
    assert set(range(applied + 1, 301)) <= set(seen)
    assert reader.follow(300) == []


def test_restart_after_a_rotation_cut_short_keeps_no_live_segment_as_spare(tmp_path: Path) -> None:
    """A crash right after a rotation leaves a segment named after a record
    that never became whole.  The next start writes into a segment of that
    very name: it must not also keep it as a spare (a later rotation would
    rename the live segment away, and its records with it)."""
    d = str(tmp_path / "j")
    j = Journal(d, sync=False, segment_bytes=SEGMENT)
    j.start(1)
    data = payloads(12, seed=5)
    for p in data[:6]:
        j.append(p)
    j.close()
    # The rotation to record 7 happened; record 7 never became whole.
    with open(os.path.join(d, f"{7:020d}.jnl"), "wb") as f:
        f.write(bytes(SEGMENT))
    j = Journal(d, sync=False, segment_bytes=SEGMENT)
    assert [s for s, _ in j.replay(0)] == [1, 2, 3, 4, 5, 6]
    j.start(7)
    assert all(not path.endswith(f"{7:020d}.jnl") for path in j._spares)
    for p in data[6:]:
        j.append(p)  # rotations recycle the spares
    for extra in payloads(30, seed=6):
        j.append(extra)
    j.close()
    again = Journal(d, sync=False, segment_bytes=SEGMENT)
    assert list(again.replay(6))[:6] == list(enumerate(data, 1))[6:]


def test_a_foreign_file_in_the_journal_is_a_one_line_store_error(tmp_path: Path) -> None:
    from partlog.store import MetadataStore, StoreError

    with MetadataStore.open(tmp_path / "s", sync=False):
        pass
    (tmp_path / "s" / "journal" / "notes.jnl").write_bytes(b"mine")
    try:
        MetadataStore.open(tmp_path / "s", sync=False)
    except StoreError as e:
        assert "journal" in str(e) and "notes.jnl" in str(e), e
    else:
        raise AssertionError("opened a store with a foreign file in its journal")


def test_a_lone_group_is_checkpointed_within_the_interval(tmp_path: Path) -> None:
    """The checkpoint thread applies a single waiting group once it waited
    checkpoint_interval_ms (not only once checkpoint_groups_max wait)."""
    import time

    from partlog.kafka.records import CreateTopicAndPartitionsRequest, TopicIdPartition
    from partlog.store import MetadataStore
    from tests.batches import build_batch, request, wal_key

    with MetadataStore.open(tmp_path / "s", sync=False, checkpoint_interval_ms=20) as store:
        tid = uuid.uuid4()
        store.create_topic_and_partitions([CreateTopicAndPartitionsRequest(tid, "t", 1)])
        b = build_batch(1)
        store.commit_file(wal_key(int(time.time() * 1000)), 1, len(b), [request(TopicIdPartition(tid, 0), b)])
        deadline = time.monotonic() + 30  # bounded wait, not a timing assertion
        while store.store_stats()["overlay_groups"] and time.monotonic() < deadline:
            time.sleep(0.01)
        assert store.store_stats()["overlay_groups"] == 0
        assert store.stats["checkpoints"] >= 1


def test_a_stalled_checkpoint_thread_cannot_grow_the_overlay_past_its_backlog_limit(tmp_path: Path) -> None:
    """Regression (a 10M-batch run grew RSS): commits that outrun the
    checkpoint thread must not pile up durable groups in memory without
    bound.  With the thread gone, the commit stage itself applies the backlog
    once checkpoint_backlog_groups_max groups wait; every commit stays
    readable and nothing is lost across a reopen."""
    import time

    from partlog.kafka.records import CreateTopicAndPartitionsRequest, TopicIdPartition
    from partlog.store import MetadataStore
    from tests.batches import build_batch, request, wal_key

    store = MetadataStore.open(
        tmp_path / "s",
        sync=False,
        checkpoint_groups_max=2,
        checkpoint_backlog_groups_max=5,
        checkpoint_interval_ms=3_600_000,
    )
    try:
        # Stop the thread but leave it registered: only backpressure applies now.
        checkpoints = store._checkpoints
        thread = checkpoints._thread
        assert thread is not None
        with checkpoints._wake:
            checkpoints._stop = True
            checkpoints._wake.notify()
        thread.join()
        tid = uuid.uuid4()
        store.create_topic_and_partitions([CreateTopicAndPartitionsRequest(tid, "t", 1)])
        tp = TopicIdPartition(tid, 0)
        b = build_batch(1, timestamp_ms=int(time.time() * 1000))
        most = 0
        for _ in range(23):
            [r] = store.commit_file(wal_key(int(time.time() * 1000)), 1, 1 << 20, [request(tp, b)])
            assert not r.errors, r.errors
            most = max(most, store.store_stats()["overlay_groups"])
        assert most <= 5
        assert store.stats["checkpoint_backpressure"] >= 4
        assert store.log_end_offset(tp) == 23 and store.high_watermark(tp) == 23
    finally:
        store.close(checkpoint=False)
    with MetadataStore.open(tmp_path / "s", sync=False, checkpoint_thread=False) as again:
        assert again.log_end_offset(tp) == 23


def test_checkpoint_backlog_below_the_checkpoint_size_is_refused(tmp_path: Path) -> None:
    from partlog.store import MetadataStore

    try:
        MetadataStore.open(tmp_path / "s", checkpoint_groups_max=10, checkpoint_backlog_groups_max=9)
    except ValueError as e:
        assert "checkpoint_backlog_groups_max" in str(e)
    else:
        raise AssertionError("accepted a backlog limit below the checkpoint size")


def test_segments_are_filled_with_zeros_a_chunk_ahead_not_whole(tmp_path: Path) -> None:
    """A segment starts as one MiB of zeros and grows a MiB at a time up to
    segment_bytes (a store that writes little holds 1 MiB, not 16); records
    across the chunk boundaries, a recycled spare shorter than a segment and
    a torn tail past the last chunk all replay as written."""
    segment = 3 << 20
    j = Journal(str(tmp_path / "j"), sync=True, segment_bytes=segment)
    j.start(1)
    [first] = os.listdir(tmp_path / "j")
    assert os.path.getsize(tmp_path / "j" / first) == 1 << 20
    rng = random.Random(7)
    data = [rng.randbytes(rng.randint(1, 300_000)) for _ in range(80)]
    for i, p in enumerate(data, 1):
        j.append(p)
        if i == 3:
            assert os.path.getsize(tmp_path / "j" / first) <= 2 << 20
        if i % 10 == 0:
            j.release(i - 2)
    assert j.stats["rotations"] + j.stats["created"] > 2 and j.stats["recycled"] > 0
    sizes = [os.path.getsize(tmp_path / "j" / n) for n in os.listdir(tmp_path / "j")]
    assert all(s % (1 << 20) == 0 or s > segment for s in sizes), sizes
    j.close()
    again = Journal(str(tmp_path / "j"), sync=True, segment_bytes=segment)
    assert list(again.replay(70)) == list(enumerate(data, 1))[70:]
    # A torn record past the filled part: replay stops before it.
    again.start(81)
    again.append(b"x" * 10)
    path = again._segments[81]
    again.close()
    with open(path, "r+b") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        f.write(b"\x00\x00\x10\x00torn")
    assert os.path.getsize(path) == size + 8
    assert [s for s, _ in Journal(str(tmp_path / "j"), sync=True, segment_bytes=segment).replay(80)] == [81]
