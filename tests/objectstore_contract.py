"""The object store contract (see :mod:`partlog.wal.objectstore`): one suite,
run against each store by a test module that defines the ``store`` fixture
and imports every name from here (``from tests.objectstore_contract import *``):

* tests/unit/test_objectstore_local.py: :class:`LocalDirStore`, as ``[local]``;
* tests/system/test_objectstore_s3.py: :class:`S3Store` on a real S3 server
  (SeaweedFS), as ``[s3]`` and ``[s3-obstore]`` (the same S3 store reading
  through obstore).

A test added here runs against every store.  The module is not collected
itself (no ``test_`` prefix); tests/conftest.py has pytest rewrite its asserts.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Sequence

import pytest

from partlog.wal.objectstore import (
    DELETE_KEYS_MAX,
    KEY_BYTES_MAX,
    DeleteResult,
    ForwardingStore,
    InvalidKeyError,
    ListPage,
    ObjectNotFoundError,
    ObjectStore,
    RangeNotSatisfiableError,
    check_key,
    iter_objects,
)
from partlog.wal.s3_store import S3Store

pytestmark = pytest.mark.timeout(120)


def _u8(s: str) -> bytes:
    return s.encode("utf-8")


def model_list(keys: Sequence[str], prefix: str, start_after: str = "") -> list[str]:
    """What ListObjectsV2 answers: keys under prefix after start_after, by UTF-8 bytes."""
    return sorted((k for k in set(keys) if k.startswith(prefix) and _u8(k) > _u8(start_after)), key=_u8)


def _slash_against_lower_byte(x: bytes, y: bytes) -> bool:
    """Whether, where ``x`` and ``y`` first differ, one has '/' and the other
    a smaller byte ('-', '.', ' ', ...): the one case where comparing paths
    component by component disagrees with comparing bytes."""
    for a, b in zip(x, y, strict=False):
        if a != b:
            return (a == 0x2F and b < 0x2F) or (b == 0x2F and a < 0x2F)
    return False


def seaweedfs_may_deviate(keys: Sequence[str], prefix: str, start_after: str) -> bool:
    """Whether SeaweedFS (4.48) is known to answer this listing differently
    from S3's contract (and from the local store).

    Its filer lists a bucket as a directory tree, comparing keys path
    component by component, so a directory ``d`` sorts as ``d`` and not as
    ``d/``: ``a/x`` comes before ``a-b``, and a ``start_after`` comparing
    differently that way cuts the listing elsewhere.  A ``start_after``
    naming a directory skips the whole directory, and ``prefix`` and
    ``start_after`` are cleaned up as paths (leading slashes dropped, empty
    components too).  None of this touches partlog's WAL keys (fixed-width
    shard directories, fixed-format names).
    """
    if any(s.startswith("/") or "//" in s for s in (prefix, start_after)):
        return True
    relevant = [_u8(k) for k in keys if k.startswith(prefix)]
    after = _u8(start_after)
    if start_after:
        if any(k.startswith(after + b"/") for k in relevant):
            return True
        if any(_slash_against_lower_byte(k, after) for k in relevant):
            return True  # start_after cuts the listing elsewhere
    listed = [k for k in relevant if k > after]
    return any(_slash_against_lower_byte(x, y) for x, y in itertools.combinations(listed, 2))


def is_s3(store: ObjectStore) -> bool:
    return isinstance(store, S3Store)


SEAWEEDFS_ORDER = (
    "SeaweedFS 4.48 lists in directory-walk order (a directory 'a' sorts as 'a', not 'a/'), not in UTF-8 byte order"
)


def list_keys(store: ObjectStore, prefix: str, start_after: str = "", max_keys: int = 1000) -> list[str]:
    page = store.list_page(prefix, start_after, max_keys)
    assert not page.is_truncated
    return [o.key for o in page.objects]


def collect_pages(store: ObjectStore, prefix: str, start_after: str, max_keys: int) -> list[ListPage]:
    """Pages of a listing, each continuing after the last key of the one before."""
    pages: list[ListPage] = []
    while True:
        page = store.list_page(prefix, start_after, max_keys)
        pages.append(page)
        assert len(page.objects) <= max_keys
        if not page.is_truncated:
            return pages
        assert len(page.objects) == max_keys, "a truncated page must be full"
        start_after = page.objects[-1].key
        assert len(pages) < 1000, "listing does not end"


def put_all(store: ObjectStore, keys: Sequence[str]) -> None:
    for k in keys:
        store.put(k, _u8(k))


def now_ms() -> int:
    return time.time_ns() // 1_000_000


# S3 reports Last-Modified in whole seconds (HEAD) and the server's clock is
# this machine's: allow the truncation and a little slack.
TIME_SLACK_MS = 2_000


# ------------------------------------------------------------ put / get


def test_put_get_roundtrip(store: ObjectStore) -> None:
    big = os.urandom(1024 * 1024 + 123)
    store.put("obj/small", b"hello")
    store.put("obj/empty", b"")
    store.put("obj/big", big)
    store.put("obj/binary", bytes(range(256)))
    assert store.get("obj/small") == b"hello"
    assert store.get("obj/empty") == b""
    assert store.get("obj/big") == big
    assert store.get("obj/binary") == bytes(range(256))
    assert store.head("obj/empty").size == 0
    assert store.head("obj/big").size == len(big)
    assert store.get_range("obj/big", 1024 * 1024, 1000) == big[1024 * 1024 :]
    assert store.get_suffix("obj/big", 5) == (big[-5:], len(big))


def test_overwrite(store: ObjectStore) -> None:
    store.put("k", b"first version")
    store.put("k", b"second")
    assert store.get("k") == b"second"
    assert store.head("k").size == 6
    store.put("k", b"")
    assert store.get("k") == b""
    assert list_keys(store, "") == ["k"]


def test_unicode_and_long_keys(store: ObjectStore) -> None:
    # 1024 bytes is the limit, in components a filesystem accepts (<= 255 bytes).
    long_key = "/".join(["x" * 204] * 5)
    assert len(_u8(long_key)) == KEY_BYTES_MAX
    keys = ["é/x", "日本/語", "\U0001f600", "sp ace/+plus=%25&?#", long_key]
    put_all(store, keys)
    for k in keys:
        assert store.get(k) == _u8(k)
        assert store.head(k).key == k
    assert list_keys(store, "") == sorted(keys, key=_u8)


def test_missing_objects(store: ObjectStore) -> None:
    store.put("dir/obj", b"x")
    # Missing outright, a "directory" (a prefix of other keys), below an object.
    for key in ("nothing", "dir", "di", "dir/obj/below", "dir/ob"):
        with pytest.raises(ObjectNotFoundError) as exc:
            store.get(key)
        assert exc.value.key == key
        assert not exc.value.retriable
        with pytest.raises(ObjectNotFoundError):
            store.head(key)
        with pytest.raises(ObjectNotFoundError):
            store.get_range(key, 0, 1)
        with pytest.raises(ObjectNotFoundError):
            store.get_suffix(key, 1)


def test_head(store: ObjectStore) -> None:
    before = now_ms()
    store.put("h/obj", b"12345")
    after = now_ms()
    info = store.head("h/obj")
    assert info.key == "h/obj"
    assert info.size == 5
    assert before - TIME_SLACK_MS <= info.last_modified_ms <= after + TIME_SLACK_MS
    (listed,) = store.list_page("h/").objects
    assert listed.key == "h/obj"
    assert listed.size == 5
    assert before - TIME_SLACK_MS <= listed.last_modified_ms <= after + TIME_SLACK_MS


# ---------------------------------------------------------- ranged GETs


def test_get_range(store: ObjectStore) -> None:
    data = bytes(range(100))
    store.put("r", data)
    assert store.get_range("r", 10, 20) == data[10:30]
    assert store.get_range("r", 0, 100) == data
    assert store.get_range("r", 0, 1) == data[:1]
    assert store.get_range("r", 90, 10) == data[90:]  # exactly to the end
    assert store.get_range("r", 99, 1) == data[99:]
    assert store.get_range("r", 95, 10) == data[95:]  # runs past the end: cut short
    assert store.get_range("r", 0, 10**9) == data
    for offset in (100, 101, 10**9):  # starts at or past the end
        with pytest.raises(RangeNotSatisfiableError) as exc:
            store.get_range("r", offset, 1)
        assert exc.value.key == "r"
        assert not exc.value.retriable


def test_get_range_empty_object(store: ObjectStore) -> None:
    store.put("e", b"")
    with pytest.raises(RangeNotSatisfiableError):
        store.get_range("e", 0, 1)
    with pytest.raises(RangeNotSatisfiableError):
        store.get_suffix("e", 1)


@pytest.mark.parametrize(("offset", "length"), [(-1, 1), (0, 0), (5, -1)])
def test_get_range_bad_arguments(store: ObjectStore, offset: int, length: int) -> None:
    store.put("r", b"0123456789")
    with pytest.raises(ValueError):
        store.get_range("r", offset, length)


def test_get_suffix(store: ObjectStore) -> None:
    data = bytes(range(100))
    store.put("s", data)
    assert store.get_suffix("s", 10) == (data[-10:], 100)
    assert store.get_suffix("s", 1) == (data[-1:], 100)
    assert store.get_suffix("s", 100) == (data, 100)
    assert store.get_suffix("s", 101) == (data, 100)  # longer than the object
    assert store.get_suffix("s", 10**9) == (data, 100)
    store.put("one", b"z")
    assert store.get_suffix("one", 4096) == (b"z", 1)
    with pytest.raises(ValueError):
        store.get_suffix("s", 0)


# --------------------------------------------------------------- listing

# Keys whose UTF-8 byte order differs from naive "walk the directories in
# name order": '-' (0x2d) and '.' (0x2e) sort before '/' (0x2f), digits and
# letters after it; sibling prefixes (wal/ab/, wal/ab-1/, wal/abc/, wal2/);
# multi-byte UTF-8 (é, 日本, an astral emoji that sorts after U+FF5E in UTF-8
# but before it in UTF-16).  No key is also a "directory" of another key:
# the local store cannot hold both "a" and "a/x".
TRICKY_KEYS = [
    "a-b",
    "a.b",
    "a/b/c",
    "a/x",
    "a0",
    "ab",
    "b-",
    "b.c/d",
    "b/c",
    "e/x",
    "é/x",
    "éa",
    "z",
    "wal/a",
    "wal/a-",
    "wal/ab/1",
    "wal/ab/2/x",
    "wal/ab-1/x",
    "wal/ab.0",
    "wal/abc/1",
    "wal/abc/2",
    "wal-/y",
    "wal.x",
    "wal2/x",
    "日本/語",
    "\uff5e",
    "\U0001f600",
]
PREFIXES = ["", "a", "a/", "a/b", "a/b/c", "a/b/c/", "b", "é", "e", "wal", "wal/", "wal/a", "wal/ab", "wal/ab/", "x"]
STARTS_AFTER = [
    "",
    "a",
    "a-b",  # an existing key
    "a/",
    "a/b",  # not a key, inside a subtree
    "a/b/c",
    "a/x",
    "a0",
    "wal/ab",
    "wal/ab/1",  # an existing key inside a subtree
    "wal/ab/1/zz",
    "wal/abb",
    "wal/",
    "é",
    "\uff5e",
    "zz",  # after every ASCII key
    "\U0010ffff",  # after every key
]


@pytest.fixture
def tricky_store(store: ObjectStore) -> ObjectStore:
    put_all(store, TRICKY_KEYS)
    return store


def xfail_on_seaweedfs(request: pytest.FixtureRequest, store: ObjectStore, reason: str) -> None:
    """Mark the running test an expected failure for the S3 store (SeaweedFS);
    strict, so a SeaweedFS that gets it right turns the mark into a failure."""
    if is_s3(store):
        request.applymarker(pytest.mark.xfail(strict=True, reason=reason))


def test_list_all_in_utf8_byte_order(tricky_store: ObjectStore, request: pytest.FixtureRequest) -> None:
    xfail_on_seaweedfs(request, tricky_store, SEAWEEDFS_ORDER)
    page = tricky_store.list_page("")
    assert not page.is_truncated
    assert [o.key for o in page.objects] == sorted(TRICKY_KEYS, key=_u8)


def test_list_same_keys_and_sizes(tricky_store: ObjectStore) -> None:
    page = tricky_store.list_page("")
    assert not page.is_truncated
    assert {o.key: o.size for o in page.objects} == {k: len(_u8(k)) for k in TRICKY_KEYS}
    assert len(page.objects) == len(TRICKY_KEYS)


def test_list_dash_sorts_before_slash(store: ObjectStore, request: pytest.FixtureRequest) -> None:
    xfail_on_seaweedfs(request, store, SEAWEEDFS_ORDER)
    put_all(store, ["a0", "a/x", "a-b", "a.b"])
    assert list_keys(store, "") == ["a-b", "a.b", "a/x", "a0"]
    assert list_keys(store, "a") == ["a-b", "a.b", "a/x", "a0"]


def test_list_start_after_between_dash_and_slash(store: ObjectStore, request: pytest.FixtureRequest) -> None:
    xfail_on_seaweedfs(request, store, SEAWEEDFS_ORDER)
    put_all(store, ["b/x", "c"])
    # "b-" < "b/x" in bytes; SeaweedFS compares the directory "b" with "b-".
    assert list_keys(store, "", "b-") == ["b/x", "c"]


def test_list_start_after_naming_a_directory(store: ObjectStore, request: pytest.FixtureRequest) -> None:
    xfail_on_seaweedfs(request, store, "SeaweedFS 4.48 skips a directory's keys when start_after names the directory")
    put_all(store, ["a/x", "a/y/z", "b"])
    assert list_keys(store, "", "a") == ["a/x", "a/y/z", "b"]
    assert list_keys(store, "a", "a") == ["a/x", "a/y/z"]


def test_list_utf8_not_utf16_order(store: ObjectStore) -> None:
    # U+FF5E is one UTF-16 unit above the surrogates an astral character
    # takes, but its UTF-8 bytes (EF BD 9E) sort before the emoji's (F0 ...).
    keys = ["z", "\U0001f600", "\uff5e", "\u00e9", "\u65e5/x"]
    put_all(store, keys)
    assert list_keys(store, "") == ["z", "\u00e9", "\u65e5/x", "\uff5e", "\U0001f600"]
    assert list_keys(store, "", "\uff5e") == ["\U0001f600"]
    assert list_keys(store, "\U0001f600") == ["\U0001f600"]


def test_list_prefix_and_start_after(tricky_store: ObjectStore) -> None:
    checked = 0
    for prefix in PREFIXES:
        for start_after in STARTS_AFTER:
            if is_s3(tricky_store) and seaweedfs_may_deviate(TRICKY_KEYS, prefix, start_after):
                continue
            got = list_keys(tricky_store, prefix, start_after)
            assert got == model_list(TRICKY_KEYS, prefix, start_after), (prefix, start_after)
            checked += 1
    assert checked >= (100 if is_s3(tricky_store) else len(PREFIXES) * len(STARTS_AFTER))


def test_list_sibling_prefixes(tricky_store: ObjectStore) -> None:
    assert list_keys(tricky_store, "wal/ab/") == ["wal/ab/1", "wal/ab/2/x"]
    assert list_keys(tricky_store, "wal/abc") == ["wal/abc/1", "wal/abc/2"]
    assert list_keys(tricky_store, "wal/ab/", "wal/ab/1") == ["wal/ab/2/x"]
    assert list_keys(tricky_store, "wal/", "wal/abc/1") == ["wal/abc/2"]
    assert list_keys(tricky_store, "wal2") == ["wal2/x"]
    assert list_keys(tricky_store, "wal2/") == ["wal2/x"]
    assert list_keys(tricky_store, "wal-") == ["wal-/y"]
    assert list_keys(tricky_store, "a/b/c") == ["a/b/c"]  # a whole key as the prefix
    assert list_keys(tricky_store, "a/b/c/") == []
    assert list_keys(tricky_store, "nothing/") == []
    # start_after sorting before the prefix, not under it: no effect.
    assert list_keys(tricky_store, "wal/ab/", "a") == ["wal/ab/1", "wal/ab/2/x"]
    assert list_keys(tricky_store, "wal/ab/", "wal/ab/2/x") == []


@pytest.mark.parametrize("max_keys", [1, 2, 3])
def test_list_pagination(tricky_store: ObjectStore, max_keys: int) -> None:
    cases = [
        ("", ""),
        ("a", ""),
        ("wal/", "wal/ab"),
        ("wal/a", "wal/a-"),
        ("", "\u00e9"),
        ("", "wal2"),
        ("wal/ab/", ""),
        ("wal/abc", ""),
        ("\u00e9", ""),
        ("b", "b-"),
        ("a/", "a/b"),
        ("wal/ab/", "wal/ab/1"),
        ("wal/abc/", "wal/abc/1"),
        ("\u65e5", ""),
    ]
    checked = 0
    for prefix, start_after in cases:
        if is_s3(tricky_store) and seaweedfs_may_deviate(TRICKY_KEYS, prefix, start_after):
            # Still self-consistent: the pages add up to the one-page listing.
            whole = list_keys(tricky_store, prefix, start_after)
            pages = collect_pages(tricky_store, prefix, start_after, max_keys)
            assert [o.key for p in pages for o in p.objects] == whole, (prefix, start_after)
            continue
        pages = collect_pages(tricky_store, prefix, start_after, max_keys)
        keys = [o.key for p in pages for o in p.objects]
        assert keys == model_list(TRICKY_KEYS, prefix, start_after), (prefix, start_after)
        checked += 1
    assert checked >= 6


def test_list_max_keys_bounds(store: ObjectStore) -> None:
    store.put("k", b"")
    for bad in (0, -1, 1001):
        with pytest.raises(ValueError):
            store.list_page("", max_keys=bad)
    page = store.list_page("", max_keys=1)
    assert [o.key for o in page.objects] == ["k"]
    assert not page.is_truncated  # exactly full, nothing follows
    store.put("l", b"")
    page = store.list_page("", max_keys=1)
    assert [o.key for o in page.objects] == ["k"]
    assert page.is_truncated


def test_list_empty_store(store: ObjectStore) -> None:
    assert store.list_page("") == ListPage([], False)
    assert store.list_page("a/", "a/b", 1) == ListPage([], False)


class SmallPages(ForwardingStore):
    """A store whose listings come in pages of at most ``page`` keys."""

    def __init__(self, inner: ObjectStore, page: int) -> None:
        super().__init__(inner)
        self.page = page
        self.calls = 0

    def list_page(self, prefix: str, start_after: str = "", max_keys: int = 1000) -> ListPage:
        self.calls += 1
        return self.inner.list_page(prefix, start_after, min(max_keys, self.page))

    def describe(self) -> str:
        return f"{self.inner.describe()} in pages of {self.page}"


# Shaped like WAL keys: <prefix>/<shard>/<created_ms:013d>-<broker>-<hex>.wal.
WAL_KEYS = [
    f"wal/{shard}/{ms:013d}-{broker}-{ms * 7919:x}.wal"
    for shard in ("00", "0f", "a3", "ff")
    for ms, broker in [(1, 0), (1_700_000_000_000, 12), (9_999_999_999_999, 3)]
] + ["wal2/00/x", "walx"]


@pytest.mark.parametrize("page", [1, 2, 5])
def test_iter_objects_pages(store: ObjectStore, page: int) -> None:
    put_all(store, WAL_KEYS)
    small = SmallPages(store, page)
    infos = list(iter_objects(small, "wal/"))
    expected = model_list(WAL_KEYS, "wal/")
    assert [o.key for o in infos] == expected
    assert small.calls == -(-len(expected) // page)  # a full last page is not truncated
    after = expected[4]
    assert [o.key for o in iter_objects(small, "wal/", after)] == expected[5:]
    assert [o.key for o in iter_objects(small, "wal/a3/")] == model_list(WAL_KEYS, "wal/a3/")
    assert [o.key for o in iter_objects(store, "")] == model_list(WAL_KEYS, "")
    assert list(iter_objects(store, "none/")) == []


# ---------------------------------------------------------------- delete


def test_delete_many(store: ObjectStore) -> None:
    put_all(store, ["d/a", "d/b", "d/sub/c", "keep"])
    keys = ["d/a", "missing", "d/sub/c", "d/sub/never/there", "d/a"]
    result = store.delete_many(keys)
    assert sorted(result.deleted) == sorted(keys)
    assert result.errors == {}
    assert list_keys(store, "") == ["d/b", "keep"]
    with pytest.raises(ObjectNotFoundError):
        store.get("d/a")
    # Deleting a "directory" (a prefix of other keys) deletes nothing, like a missing key.
    result = store.delete_many(["d"])
    assert result == DeleteResult(["d"], {})
    assert list_keys(store, "") == ["d/b", "keep"]
    # Put again after the parent went away.
    store.put("d/sub/c", b"back")
    assert store.get("d/sub/c") == b"back"


def test_delete_many_empty(store: ObjectStore) -> None:
    assert store.delete_many([]) == DeleteResult([], {})


def test_delete_many_too_many(store: ObjectStore) -> None:
    store.put("k0", b"x")
    with pytest.raises(ValueError, match="at most"):
        store.delete_many([f"k{i}" for i in range(DELETE_KEYS_MAX + 1)])
    assert store.get("k0") == b"x"  # nothing deleted
    keys = [f"k{i}" for i in range(DELETE_KEYS_MAX)]
    result = store.delete_many(keys)
    assert sorted(result.deleted) == sorted(keys)
    assert list_keys(store, "") == []


# ------------------------------------------------------------ bad keys

BAD_KEYS = [
    "",
    "/abs",
    "a//b",
    "a/",
    "a/../b",
    "..",
    ".",
    "x/.",
    "./x",
    "nul\x00byte",
    "\ud800",  # a lone surrogate: not UTF-8
    "x" * (KEY_BYTES_MAX + 1),
    "é" * (KEY_BYTES_MAX // 2 + 1),  # 1026 bytes in 513 characters
    ".partlog-tmp/x",
    ".partlog-tmp",
]


@pytest.mark.parametrize("key", BAD_KEYS, ids=lambda k: repr(k)[:24])
def test_invalid_keys_refused(store: ObjectStore, key: str) -> None:
    with pytest.raises(InvalidKeyError):
        check_key(key)
    with pytest.raises(InvalidKeyError):
        store.put(key, b"x")
    with pytest.raises(InvalidKeyError):
        store.get(key)
    with pytest.raises(InvalidKeyError):
        store.get_range(key, 0, 1)
    with pytest.raises(InvalidKeyError):
        store.get_suffix(key, 1)
    with pytest.raises(InvalidKeyError):
        store.head(key)
    store.put("ok", b"x")
    with pytest.raises(InvalidKeyError):
        store.delete_many(["ok", key])
    assert store.get("ok") == b"x"  # a refused batch deletes nothing
    assert list_keys(store, "") == ["ok"]


# Credentials that must never show in a message or a description.
SECRET = "TOP-SECRET-do-not-log-1234567890"
