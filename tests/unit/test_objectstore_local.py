"""The object store contract (tests/objectstore_contract.py) run against
:class:`LocalDirStore`, and what only the local store and the store URLs
have to say (the same contract against SeaweedFS is
tests/system/test_objectstore_s3.py)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from partlog.wal.localdir_store import LocalDirStore
from partlog.wal.objectstore import InvalidKeyError, ObjectStore, check_key
from partlog.wal.store_url import open_store

# The contract's tests (and its fixture tricky_store), run against this module's store.
from tests.objectstore_contract import *  # noqa: F403
from tests.objectstore_contract import collect_pages, list_keys, model_list, put_all


@pytest.fixture
def store(tmp_path: Path) -> ObjectStore:
    return LocalDirStore(tmp_path / "store")


def test_invalid_key_error_is_value_error() -> None:
    with pytest.raises(ValueError):
        check_key("a//b")
    check_key("a/b.c-d_e/é/\U0001f600")


def test_local_put_leaves_no_temp_files(tmp_path: Path) -> None:
    store = LocalDirStore(tmp_path)
    tmp_dir = tmp_path / ".partlog-tmp"
    for i in range(5):
        store.put(f"p/{i}", os.urandom(1000))
    store.put("p/0", b"overwritten")
    store.put("file", b"x")
    with pytest.raises(InvalidKeyError):
        store.put("file/below", b"x")  # fails after the temp file was written
    with pytest.raises(InvalidKeyError):
        store.put("p", b"x")  # a "directory" of other keys
    assert list(tmp_dir.iterdir()) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == [".partlog-tmp", "file", "p"]
    # The staging directory never shows in listings.
    assert list_keys(store, "") == ["file", "p/0", "p/1", "p/2", "p/3", "p/4"]
    assert list_keys(store, ".") == []


def test_local_key_below_an_object_is_invalid(tmp_path: Path) -> None:
    store = LocalDirStore(tmp_path)
    store.put("a", b"object")
    with pytest.raises(InvalidKeyError, match="existing object"):
        store.put("a/b", b"x")
    with pytest.raises(InvalidKeyError, match="existing object"):
        store.put("a/b/c", b"x")
    assert store.get("a") == b"object"


def test_local_delete_prunes_empty_directories(tmp_path: Path) -> None:
    store = LocalDirStore(tmp_path)
    put_all(store, ["p/q/r/s", "p/t", "u/v"])
    assert store.delete_many(["p/q/r/s"]).errors == {}
    assert not (tmp_path / "p" / "q").exists()
    assert (tmp_path / "p" / "t").is_file()
    assert store.delete_many(["p/t", "u/v"]).errors == {}
    assert sorted(p.name for p in tmp_path.iterdir()) == [".partlog-tmp"]
    # "p" is no longer a directory: it can be an object now.
    store.put("p", b"x")
    assert list_keys(store, "") == ["p"]


def test_local_survives_reopen(tmp_path: Path) -> None:
    LocalDirStore(tmp_path).put("x/y", b"data")
    again = LocalDirStore(tmp_path)
    assert again.get("x/y") == b"data"


def test_open_store_file_urls(tmp_path: Path) -> None:
    store = open_store(f"file://{tmp_path}/s")
    assert isinstance(store, LocalDirStore)
    assert store.root == str(tmp_path / "s")
    assert store.describe() == f"file://{tmp_path}/s"
    store.put("k", b"v")
    plain = open_store(str(tmp_path / "s"))
    assert isinstance(plain, LocalDirStore)
    assert plain.get("k") == b"v"
    quoted = open_store(f"file://{tmp_path}/with%20space")
    assert isinstance(quoted, LocalDirStore)
    assert quoted.root == str(tmp_path / "with space")


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("gs://bucket/x", "scheme must be file:// or s3://"),
        ("http://example.com/x", "scheme must be file:// or s3://"),
        ("s3://", "no bucket"),
        ("s3:///path", "no bucket"),
        ("s3://b?endpoint=http://x&secret=y", "unknown parameters"),
        ("file://", "no path"),
    ],
)
def test_open_store_bad_urls(url: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as exc:
        open_store(url)
    assert repr(url) in str(exc.value)


# Keys of a few short names, so prefixes land on, inside and beside
# directories; "-" and "." sort below "/", "~" above it.
_NAME = st.text(alphabet="ab-.~", min_size=1, max_size=3).filter(lambda n: n not in (".", ".."))
_KEY = st.lists(_NAME, min_size=1, max_size=3).map("/".join)


def _near(keys: list[str]) -> st.SearchStrategy[str]:
    """A cut of one of ``keys`` (a prefix or start_after that lands on,
    inside or beside its directories), or any short text."""
    odd = st.text(alphabet="ab-.~/", max_size=8)
    if not keys:
        return odd
    cut = st.tuples(st.sampled_from(keys), st.integers(0, 12)).map(lambda t: t[0][: t[1]])
    return st.one_of(cut, odd)


@settings(max_examples=200, deadline=None)
@given(st.lists(_KEY, max_size=12).flatmap(lambda k: st.tuples(st.just(k), _near(k), _near(k), st.integers(1, 4))))
def test_listings_from_the_prefix_directory_match_the_model(drawn: tuple[list[str], str, str, int]) -> None:
    """list_page walks from the deepest directory its prefix names, not the
    root: every prefix and start_after (odd ones included: '//', './',
    '../', a file's name) lists exactly what ListObjectsV2 would."""
    keys, prefix, start_after, page = drawn
    with tempfile.TemporaryDirectory() as d:
        store = LocalDirStore(Path(d) / "s", fsync=False)
        stored = []
        for k in keys:
            try:
                store.put(k, b"x")
                stored.append(k)
            except InvalidKeyError:
                pass  # a key below an object, or an object over a directory
        pages = collect_pages(store, prefix, start_after, page)
        assert [o.key for p in pages for o in p.objects] == model_list(stored, prefix, start_after)


def test_a_prefix_through_a_symlink_lists_from_the_root(tmp_path: Path) -> None:
    """A directory inside the root that is a symlink is never listed
    through, by a prefix naming it or from the root."""
    outside = tmp_path / "outside"
    (outside / "d").mkdir(parents=True)
    (outside / "d" / "k").write_bytes(b"x")
    store = LocalDirStore(tmp_path / "s", fsync=False)
    store.put("in/k", b"x")
    (tmp_path / "s" / "link").symlink_to(outside)
    assert list_keys(store, "link/d/") == []
    assert "link/d/k" not in list_keys(store, "")  # the link itself shows, as before
    assert list_keys(store, "in/") == ["in/k"]
