"""The commit RPC's ``transactional_ids`` (request index -> transactional
id, KIP-890): a hostile or mistaken value is a WireError (BAD_REQUEST for
that commit), never another exception, and never an index outside the
commit's requests or named twice."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from partlog.rpc.wire import WireError, dec_commit_transactional_ids

_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.text(max_size=8) | st.binary(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=12,
)


@given(st.integers(0, 6), _VALUES)
def test_hostile_transactional_ids_fail_that_commit_only(requests: int, raw: Any) -> None:
    try:
        got = dec_commit_transactional_ids({"transactional_ids": raw}, requests)
    except WireError:
        return
    assert all(0 <= i < requests and isinstance(t, str) for i, t in got.items())


def test_an_index_out_of_range_or_named_twice_is_refused() -> None:
    assert dec_commit_transactional_ids({"transactional_ids": [[1, "t"], [0, "u"]]}, 2) == {1: "t", 0: "u"}
    assert dec_commit_transactional_ids({}, 2) == {}
    for bad in ([[2, "t"]], [[-1, "t"]], [[0, "t"], [0, "u"]], [[0]], [["0", "t"]], [[0, 7]]):
        with pytest.raises(WireError):
            dec_commit_transactional_ids({"transactional_ids": bad}, 2)
