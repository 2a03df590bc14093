"""``Schema.ok`` (the fast path lists take) against ``Schema.check`` (the
reference): for random schemas and values, valid ones and near misses,
``ok(v)`` holds exactly when ``check`` accepts ``v``; a refused list still
names its first bad item."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from partlog.rpc.schema import Bool, Bytes, Int, List, Map, Nullable, Schema, Str, Tuple
from partlog.rpc.wire import WireError

_LEAVES: st.SearchStrategy[Schema] = st.one_of(
    st.tuples(st.integers(-3, 3), st.integers(0, 5)).map(lambda t: Int(t[0], t[0] + t[1])),
    st.just(Bool()),
    st.tuples(st.integers(0, 3), st.integers(0, 3)).map(lambda t: Bytes(t[0] + t[1], t[0])),
    st.integers(0, 4).map(Str),
)


def _extend(inner: st.SearchStrategy[Schema]) -> st.SearchStrategy[Schema]:
    names = st.sampled_from(["a", "b", "c"])
    return st.one_of(
        inner.map(Nullable),
        st.tuples(inner, st.integers(0, 3)).map(lambda t: List(t[0], t[1])),
        st.lists(st.tuples(names, inner) | inner, min_size=1, max_size=3).map(lambda items: Tuple(*items)),
        st.tuples(st.dictionaries(names, inner, max_size=2), st.dictionaries(names, inner, max_size=2)).map(
            lambda t: Map(t[0], {k: v for k, v in t[1].items() if k not in t[0]})
        ),
    )


SCHEMAS = st.recursive(_LEAVES, _extend, max_leaves=6)

_ANY = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 10) | st.binary(max_size=7) | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(["a", "b", "c", "z"]), inner, max_size=3)
    ),
    max_leaves=8,
)


def _valid(s: Schema) -> st.SearchStrategy[Any]:
    """Values ``s`` accepts (mostly), built from its shape."""
    if isinstance(s, Int):
        return st.integers(s.lo - 1, s.hi + 1)
    if isinstance(s, Bool):
        return st.booleans()
    if isinstance(s, Bytes):
        return st.binary(min_size=max(0, s.min_len - 1), max_size=s.max_len + 1)
    if isinstance(s, Str):
        return st.text(max_size=s.max_bytes + 1)
    if isinstance(s, Nullable):
        return st.none() | _valid(s.inner)
    if isinstance(s, List):
        return st.lists(_valid(s.item), max_size=s.max_items + 1)
    if isinstance(s, Tuple):
        return st.tuples(*(_valid(i) for i in s.items)).map(list)
    if isinstance(s, Map):
        optional = {k: _valid(v) for k, v in s.optional.items()}
        return st.fixed_dictionaries({k: _valid(v) for k, v in s.required.items()}, optional=optional)
    raise AssertionError(s)


def _accepts(s: Schema, v: Any) -> bool:
    try:
        s.check(v, "x")
    except WireError:
        return False
    return True


@settings(max_examples=500)
@given(SCHEMAS, st.data())
def test_ok_holds_exactly_when_check_accepts(s: Schema, data: st.DataObject) -> None:
    v = data.draw(_valid(s) | _ANY)
    assert s.ok(v) is _accepts(s, v)
    # As a list's items: the fast path and the named walk agree too.
    many = List(s, 3)
    items = [v, data.draw(_valid(s)), v][: data.draw(st.integers(0, 3))]
    assert many.ok(items) is _accepts(many, items)


def test_a_refused_list_names_its_first_bad_item() -> None:
    s = List(Tuple(("partition", Int(0, 10)), ("epoch", Int(-1, 5))), 10)
    with pytest.raises(WireError, match=r"^parts\[2\]\.epoch: 9 is outside \[-1, 5\]$"):
        s.check([[1, 2], [3, 4], [5, 9], [11, 0]], "parts")
