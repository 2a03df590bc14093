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
