"""WAL object keys: ``<prefix>/<shard>/<created_ms:013d>-<broker_id>-<hex>.wal``."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from partlog.wal.key import OBJECT_KEY_BYTES_MAX, WalKey, WalKeyError, make_wal_key, parse_wal_key, shard_of

_SEGMENT = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_.", min_size=1, max_size=12).filter(
    lambda s: s not in (".", "..")
)
_PREFIX = st.lists(_SEGMENT, min_size=0, max_size=4).map("/".join)
_CREATED = st.integers(0, 10**13 - 1)
_BROKER = st.integers(0, 9_999_999_999)
_HEX = st.text(alphabet="0123456789abcdef", min_size=1, max_size=64)


@settings(max_examples=300)
@given(_PREFIX, _CREATED, _BROKER, _HEX)
def test_make_parse_round_trip(prefix: str, created_ms: int, broker_id: int, rand_hex: str) -> None:
    key = make_wal_key(prefix, created_ms, broker_id, rand_hex)
    text = str(key)
    assert (key.prefix, key.created_ms, key.broker_id, key.rand_hex) == (prefix, created_ms, broker_id, rand_hex)
    assert key.shard == shard_of(key.name)
    assert len(key.shard) == 2
    assert parse_wal_key(text) == key
    assert str(parse_wal_key(text)) == text
    if prefix:
        assert text.startswith(prefix + "/")
    else:
        assert text == f"{key.shard}/{key.name}"
    assert text.endswith(f"/{created_ms:013d}-{broker_id}-{rand_hex}.wal")


@given(_CREATED, _BROKER, _HEX)
def test_prefix_slashes_are_stripped(created_ms: int, broker_id: int, rand_hex: str) -> None:
    assert str(make_wal_key("/wal/x/", created_ms, broker_id, rand_hex)) == str(
        make_wal_key("wal/x", created_ms, broker_id, rand_hex)
    )


@settings(max_examples=200)
@given(st.lists(st.tuples(_CREATED, _BROKER, _HEX), min_size=2, max_size=30))
def test_keys_sort_by_created_ms_within_a_shard(specs: list[tuple[int, int, str]]) -> None:
    keys = [make_wal_key("wal", c, b, h) for c, b, h in specs]
    by_shard: dict[str, list[WalKey]] = {}
    for k in keys:
        by_shard.setdefault(k.shard, []).append(k)
    for same_shard in by_shard.values():
        ordered = sorted(same_shard, key=str)  # an object store lists keys in byte order
        created = [k.created_ms for k in ordered]
        assert created == sorted(created)


def test_keys_sort_by_created_ms_same_shard_explicit() -> None:
    # Find keys that land in one shard, with created_ms of different digit counts.
    wanted = [5, 70, 999, 10**6, 10**12 + 1, 10**13 - 1]
    found: list[WalKey] = []
    for created in wanted:
        for i in range(100_000):
            k = make_wal_key("p", created, 3, f"{i:x}")
            if k.shard == "2a":
                found.append(k)
                break
    assert len(found) == len(wanted)
    assert [k.created_ms for k in sorted(found, key=str)] == wanted


def test_shard_spreads_keys() -> None:
    shards = {make_wal_key("wal", 1_700_000_000_000 + i, 1, "ab").shard for i in range(4000)}
    assert len(shards) > 200


def _key(name: str = "1700000000000-1-abc.wal", shard: str | None = None, prefix: str = "wal") -> str:
    if shard is None:
        shard = shard_of(name)
    return f"{prefix}/{shard}/{name}" if prefix else f"{shard}/{name}"


@pytest.mark.parametrize(
    ("key", "why"),
    [
        ("1700000000000-1-abc.wal", "no <shard>/ component"),
        ("", "no <shard>/ component"),
        ("wal/zz/1700000000000-1-abc.wal", "shard 'zz'"),
        ("wal/AB/1700000000000-1-abc.wal", "shard 'AB'"),
        ("wal/a/1700000000000-1-abc.wal", "shard 'a'"),
        ("wal/abc/1700000000000-1-abc.wal", "shard 'abc'"),
        ("wal/ab/", "file name ''"),
        ("wal/ab/170000000000-1-abc.wal", "file name"),  # 12 digits
        ("wal/ab/17000000000000-1-abc.wal", "file name"),  # 14 digits
        ("wal/ab/1700000000000-01-abc.wal", "file name"),  # leading zero broker
        ("wal/ab/1700000000000--1-abc.wal", "file name"),  # negative broker
        ("wal/ab/1700000000000-12345678901-abc.wal", "file name"),  # broker > 10 digits
        ("wal/ab/1700000000000-1-ABC.wal", "file name"),  # upper-case hex
        ("wal/ab/1700000000000-1-xyz.wal", "file name"),  # not hex
        ("wal/ab/1700000000000-1-.wal", "file name"),  # empty hex
        ("wal/ab/1700000000000-1-" + "a" * 65 + ".wal", "file name"),  # hex too long
        ("wal/ab/1700000000000-1-abc.wal.tmp", "file name"),
        ("wal/ab/1700000000000-1-abc", "file name"),
        ("wal/ab/1700000000000-1-abc.WAL", "file name"),
        ("wal/ab/1700000000000-1-abc.wal/", "shard '1700000000000-1-abc.wal'"),
        ("../ab/1700000000000-1-abc.wal", "'..'"),
        ("wal/../ab/1700000000000-1-abc.wal", "'..'"),
        ("wal/./ab/1700000000000-1-abc.wal", "'.'"),
        ("/ab/1700000000000-1-abc.wal", "empty"),
        ("wal//ab/1700000000000-1-abc.wal", "empty"),
        ("wal/ab/../1700000000000-1-abc.wal", "shard '..'"),
    ],
)
def test_parse_rejects_with_message_naming_the_key(key: str, why: str) -> None:
    with pytest.raises(WalKeyError) as ei:
        parse_wal_key(key)
    msg = str(ei.value)
    assert repr(key) in msg
    assert why in msg


def test_parse_rejects_too_long_key() -> None:
    key = "p" * (OBJECT_KEY_BYTES_MAX - 20) + "/ab/1700000000000-1-abc.wal"
    assert len(key.encode()) > OBJECT_KEY_BYTES_MAX
    with pytest.raises(WalKeyError, match=f"longer than {OBJECT_KEY_BYTES_MAX} bytes") as ei:
        parse_wal_key(key)
    assert key[:40] in str(ei.value)
    # Multi-byte characters count as UTF-8 bytes.
    key2 = "é" * 250 + "/ab/1700000000000-1-abc.wal"
    assert len(key2) < OBJECT_KEY_BYTES_MAX < len(key2.encode())
    with pytest.raises(WalKeyError, match="longer than"):
        parse_wal_key(key2)


def test_parse_accepts_any_valid_shard() -> None:
    """The parser checks the shard's form, not that it is the hash of the name."""
    name = "1700000000000-1-abc.wal"
    other = "00" if shard_of(name) != "00" else "01"
    k = parse_wal_key(f"wal/{other}/{name}")
    assert (k.shard, k.created_ms, k.broker_id, k.rand_hex) == (other, 1_700_000_000_000, 1, "abc")
    assert parse_wal_key(f"{other}/{name}").prefix == ""


@pytest.mark.parametrize(
    ("created_ms", "broker_id", "rand_hex", "why"),
    [
        (-1, 1, "ab", "created_ms -1"),
        (10**13, 1, "ab", "created_ms 10000000000000"),
        (1, -1, "ab", "broker_id -1"),
        (1, 1, "", "file name"),
        (1, 1, "XYZ", "file name"),
        (1, 1, "a/b", "shard '0000000000001-1-a'"),
        (1, 10**10, "ab", "file name"),
    ],
)
def test_make_rejects(created_ms: int, broker_id: int, rand_hex: str, why: str) -> None:
    with pytest.raises(WalKeyError, match=why):
        make_wal_key("wal", created_ms, broker_id, rand_hex)


@pytest.mark.parametrize("prefix", ["a/../b", "a//b", "./a", "a/."])
def test_make_rejects_bad_prefix(prefix: str) -> None:
    with pytest.raises(WalKeyError, match="prefix component") as ei:
        make_wal_key(prefix, 1_700_000_000_000, 1, "ab")
    assert prefix.strip("/") in str(ei.value)
