"""The sweep's RPC bodies (``keys_referenced``) fail closed: whatever a
hostile or broken peer sends, decoding either gives what the schema allows
or raises WireError (the request fails, or walmgr keeps the round), in time
and memory bounded by the body."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from partlog.rpc.wire import WireError, dec_keys_referenced, dec_keys_referenced_answer, enc_keys_referenced

values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.text(max_size=8) | st.binary(max_size=8),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=30,
)
bodies = values | st.fixed_dictionaries({"referenced": values}) | st.fixed_dictionaries({"keys": values})


@given(bodies, st.integers(0, 20))
def test_an_answer_is_valid_indexes_or_a_wire_error(body: Any, n: int) -> None:
    try:
        got = dec_keys_referenced_answer(body, n)
    except WireError:
        return
    assert isinstance(got, set) and all(type(i) is int and 0 <= i < n for i in got)


@given(bodies, st.integers(0, 20))
def test_a_request_is_at_most_keys_max_strings_or_a_wire_error(body: Any, keys_max: int) -> None:
    try:
        got = dec_keys_referenced(body, keys_max)
    except WireError:
        return
    assert len(got) <= keys_max and all(isinstance(k, str) for k in got)


@given(st.lists(st.text(max_size=20), max_size=10))
def test_a_request_round_trips(keys: list[str]) -> None:
    assert dec_keys_referenced(enc_keys_referenced(keys), len(keys)) == keys


@pytest.mark.parametrize("bad", [[3], [-1], [0, 0, 0, 0], ["0"], [True]])
def test_out_of_range_or_too_many_indexes_are_refused(bad: list[Any]) -> None:
    with pytest.raises(WireError):
        dec_keys_referenced_answer({"referenced": bad}, 3)
