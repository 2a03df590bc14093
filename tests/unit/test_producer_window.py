"""ProducerWindow (the commit path's mutable producer state) decides exactly
as the pure functions of partlog.kafka.producer_state, on random histories."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from partlog.kafka.batch_header import INT32_MAX
from partlog.kafka.producer_state import (
    AppendedBatch,
    ProducerEntry,
    ProducerWindow,
    after_append,
    check_append,
)

# (epoch, first_seq, records): epochs and sequences from a small range, so
# duplicates, gaps, fencing and the 2^31 wrap all come up.
steps = st.lists(
    st.tuples(
        st.integers(0, 3),
        st.one_of(st.integers(0, 12), st.just(INT32_MAX), st.integers(INT32_MAX - 3, INT32_MAX)),
        st.integers(1, 3),
    ),
    max_size=40,
)


@given(steps)
def test_window_decides_as_the_pure_functions(history: list[tuple[int, int, int]]) -> None:
    entry: ProducerEntry | None = None
    window = ProducerWindow(None)
    offset = 0
    for epoch, first, records in history:
        last = (first + records - 1) % (INT32_MAX + 1)
        want_dup = entry.find_duplicate(epoch, first, last) if entry is not None else None
        assert window.find_duplicate(epoch, first, last) == want_dup
        if want_dup is not None:
            continue
        want = check_append(entry, epoch, first)
        assert window.check_append(epoch, first) == want
        if want:
            continue
        batch = AppendedBatch(first, last, offset, offset + records - 1, 1000 + offset, -1)
        offset += records
        entry = after_append(entry, epoch, batch)
        window.append(epoch, batch)
        assert window.entry() == entry


@given(steps)
def test_window_from_an_entry_continues_it(history: list[tuple[int, int, int]]) -> None:
    """A window opened on a stored entry (each commit opens one) decides as
    that entry does."""
    entry: ProducerEntry | None = None
    offset = 0
    for epoch, first, records in history:
        last = (first + records - 1) % (INT32_MAX + 1)
        window = ProducerWindow(entry)
        if entry is not None and entry.find_duplicate(epoch, first, last) is not None:
            assert window.find_duplicate(epoch, first, last) is not None
            continue
        err = check_append(entry, epoch, first)
        assert window.check_append(epoch, first) == err
        if err:
            continue
        batch = AppendedBatch(first, last, offset, offset + records - 1, 1000, 5 if epoch % 2 else -1)
        offset += records
        entry = after_append(entry, epoch, batch)
        window.append(epoch, batch)
        assert window.entry() == entry


# Histories that mostly continue the sequence (the commit path's fast case),
# with batches of up to 2^30 records so that windows wrap past 2^31-1: a
# step is (epoch, gap, records), gap 0 meaning "continue exactly".
chained = st.lists(
    st.tuples(
        st.integers(0, 2),
        st.sampled_from([0, 0, 0, 0, 1, -1, -3, None]),
        st.one_of(st.integers(1, 3), st.sampled_from([2**29, 2**30, INT32_MAX - 5])),
    ),
    max_size=40,
)


@given(chained)
def test_continues_is_only_true_where_the_full_rules_accept_a_new_batch(
    history: list[tuple[int, int | None, int]],
) -> None:
    """continues() lets the commit path skip find_duplicate and check_append:
    wherever it says True, the pure rules must find no duplicate and no
    error, for windows appended to in place and windows opened on an entry."""
    entry: ProducerEntry | None = None
    window = ProducerWindow(None)
    offset = 0
    fast = 0
    for epoch, gap, records in history:
        prev_last = entry.batches[-1].last_seq if entry is not None and entry.batches else -1
        first = 0 if gap is None else max(0, (prev_last + 1 + gap)) % (INT32_MAX + 1)
        last = (first + records - 1) % (INT32_MAX + 1)
        for w in (window, ProducerWindow(entry)):
            if w.continues(epoch, first):
                fast += 1
                assert entry is not None
                assert entry.find_duplicate(epoch, first, last) is None, (entry, epoch, first, last)
                assert check_append(entry, epoch, first) == 0
        if entry is not None and entry.find_duplicate(epoch, first, last) is not None:
            continue
        if check_append(entry, epoch, first):
            continue
        batch = AppendedBatch(first, last, offset, offset + records - 1, 1000, -1)
        offset += records
        entry = after_append(entry, epoch, batch)
        window.append(epoch, batch)
        assert window.entry() == entry


def test_continues_takes_the_common_case() -> None:
    """A producer sending in sequence takes the fast path every time after its first batch."""
    window = ProducerWindow(None)
    assert not window.continues(0, 0)
    seq = 0
    for i in range(20):
        if i:
            assert window.continues(0, seq)
        window.append(0, AppendedBatch(seq, seq + 9, i * 10, i * 10 + 9, 1000, -1))
        seq += 10
    assert not window.continues(1, seq)  # a new epoch goes the full way
    assert not window.continues(0, seq + 1)  # a gap too
    assert ProducerWindow(window.entry()).continues(0, seq)


def test_continues_refuses_a_window_that_wrapped_back_onto_its_own_start() -> None:
    """Three batches that run through 2^31-1 and back to 9: the next
    sequence, 10, starts the first batch again, so a batch (10, 2^30+9) is a
    duplicate of it and must take the full check."""
    entry = None
    for b in (
        AppendedBatch(10, 2**30 + 9, 0, 2**30 - 1, 1000, -1),
        AppendedBatch(2**30 + 10, INT32_MAX, 2**30, 2**31 - 11, 1000, -1),
        AppendedBatch(0, 9, 2**31 - 10, 2**31 - 1, 1000, -1),
    ):
        assert entry is None or check_append(entry, 0, b.first_seq) == 0
        entry = after_append(entry, 0, b)
    assert entry is not None
    assert entry.find_duplicate(0, 10, 2**30 + 9) is not None
    assert not ProducerWindow(entry).continues(0, 10)
    window = ProducerWindow(None)
    for b in entry.batches:
        window.append(0, b)
    assert not window.continues(0, 10)
