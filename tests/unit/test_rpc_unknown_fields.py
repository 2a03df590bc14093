"""The unknown fields a Map skips (docs/design/upgrades.md): a few small
ones pass, more are refused, and a hostile body costs bounded memory and
fails only itself."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from partlog.rpc.frame import FrameError, decode_body
from partlog.rpc.methods import BROKER_SCHEMAS
from partlog.rpc.schema import UNKNOWN_FIELDS_PER_MAP_MAX, Bytes, Int, List, Map, Str
from partlog.rpc.wire import WireError

# ------------------------------------------------------ unknown fields

SMALL = Map(required={"id": Int(0, 100), "names": List(Str(16), 20)}, optional={"tag": Bytes(8)})
_known = st.fixed_dictionaries(
    {"id": st.integers(0, 100), "names": st.lists(st.text(max_size=4), max_size=20)},
    optional={"tag": st.binary(max_size=8)},
)
_small_values = st.none() | st.booleans() | st.integers(-(1 << 63), (1 << 63) - 1) | st.text(max_size=8)
_unknown_names = st.text(min_size=1, max_size=12).filter(lambda k: k not in ("id", "names", "tag"))


def _decoded(schema: Map, body: Any) -> Any:
    data = msgpack.packb(body, use_bin_type=True)
    return decode_body(data, schema.limits())


@settings(max_examples=200, deadline=None, derandomize=True)
@given(known=_known, unknown=st.dictionaries(_unknown_names, _small_values, max_size=UNKNOWN_FIELDS_PER_MAP_MAX))
def test_a_map_skips_a_few_small_unknown_fields(known: dict[str, Any], unknown: dict[str, Any]) -> None:
    body = {**unknown, **known}
    got = _decoded(SMALL, body)
    assert SMALL.check(got, "m") == body


@settings(max_examples=100, deadline=None, derandomize=True)
@given(known=_known, unknown=st.dictionaries(_unknown_names, _small_values, min_size=UNKNOWN_FIELDS_PER_MAP_MAX + 1))
def test_a_map_refuses_more_unknown_fields_than_its_bound(known: dict[str, Any], unknown: dict[str, Any]) -> None:
    with pytest.raises((FrameError, WireError)):
        SMALL.check(_decoded(SMALL, {**unknown, **known}), "m")


def test_a_missing_required_field_and_a_bytes_key_stay_refused() -> None:
    with pytest.raises(WireError, match="missing field 'names'"):
        SMALL.check(_decoded(SMALL, {"id": 1, "extra": 1}), "m")
    with pytest.raises(WireError, match="unknown field b'raw'"):
        SMALL.check(_decoded(SMALL, {"id": 1, "names": [], b"raw": 1}), "m")


_hostile = st.recursive(
    st.none() | st.integers(0, 1 << 40) | st.binary(max_size=300) | st.text(max_size=100),
    lambda inner: st.lists(inner, max_size=400) | st.dictionaries(st.text(max_size=80) | st.binary(max_size=8), inner),
    max_leaves=300,
)


def _objects(v: Any) -> int:
    if isinstance(v, list):
        return 1 + sum(_objects(x) for x in v)
    if isinstance(v, dict):
        return 1 + sum(1 + _objects(x) for x in v.values())
    return 1


@settings(
    max_examples=100,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    method=st.sampled_from(["replica_fetch", "referenced_files", "metadata"]),
    base=_known,
    unknown=st.dictionaries(st.text(max_size=80) | st.binary(max_size=8), _hostile, max_size=12),
)
def test_a_hostile_body_costs_bounded_memory_and_fails_only_itself(
    method: str, base: dict[str, Any], unknown: dict[str, Any]
) -> None:
    """Whatever unknown fields a peer adds, decoding builds at most the
    schema's elements_max objects (grown by the slack), and the check either
    accepts at most UNKNOWN_FIELDS_PER_MAP_MAX unknown string keys or raises
    WireError, never anything else."""
    schema = BROKER_SCHEMAS[method]
    assert isinstance(schema, Map)
    limits = schema.limits()
    body = {**unknown, **base}
    try:
        got = decode_body(msgpack.packb(body, use_bin_type=True), limits)
    except FrameError:
        return
    assert _objects(got) <= max(limits.elements_max, len(msgpack.packb(body, use_bin_type=True)))
    try:
        schema.check(got, method)
    except WireError:
        return
    extra = [k for k in got if k not in schema.required and k not in schema.optional]
    assert len(extra) <= UNKNOWN_FIELDS_PER_MAP_MAX and all(type(k) is str for k in extra)


def test_the_slack_is_bounded() -> None:
    """A schema's limits grow by UNKNOWN_FIELDS_PER_MAP_MAX keys, 64-byte
    names and a quarter of its objects (at least 256), never past
    BODY_ELEMENTS_MAX; lists and byte strings not at all."""
    limits = SMALL.limits()
    assert limits.map_len_max == 3 + UNKNOWN_FIELDS_PER_MAP_MAX
    assert limits.str_bytes_max == 64 and limits.bin_bytes_max == 8 and limits.array_len_max == 20
    assert limits.elements_max == SMALL.elements() + 256
    fetch = BROKER_SCHEMAS["replica_fetch"]
    assert fetch.limits().elements_max <= fetch.elements() * 5 // 4 + 256
