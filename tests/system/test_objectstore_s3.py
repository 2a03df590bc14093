"""The object store contract (tests/objectstore_contract.py) run against
:class:`S3Store` on a real S3 server (SeaweedFS, started by
``tests/s3server.py``), as ``[s3]`` and ``[s3-obstore]`` (the same S3 store
reading through obstore); and a property test listing the same random key
sets from the local store and S3, compared with each other and with a model
(sorting UTF-8 bytes)."""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from partlog.wal.localdir_store import LocalDirStore
from partlog.wal.objectstore import ObjectInfo, ObjectNotFoundError, ObjectStore, ObjectStoreError, iter_objects
from partlog.wal.s3_store import S3Config, S3Store

# The contract's tests (and its fixture tricky_store), run against this module's stores.
from tests.objectstore_contract import *  # noqa: F403
from tests.objectstore_contract import SECRET, _u8, collect_pages, model_list, seaweedfs_may_deviate


@pytest.fixture(params=["s3", "s3-obstore"])
def store(request: pytest.FixtureRequest, s3_bucket: S3Store) -> ObjectStore:
    if request.param == "s3-obstore":
        # The same bucket, GETs through obstore (walmgr's reader).
        return S3Store(dataclasses.replace(s3_bucket.config, reader="obstore"))
    return s3_bucket


ALPHABET = "/-ab\u00e9"


# Valid keys by construction: one to three non-empty components (the
# alphabet has no '.', so no '.' or '..' components either).
valid_keys = st.lists(st.text(ALPHABET.replace("/", ""), min_size=1, max_size=3), min_size=1, max_size=3).map("/".join)


def consistent(keys: list[str]) -> list[str]:
    """Drop keys the local store cannot hold next to the others: a key that
    is also a "directory" ("a" next to "a/b")."""
    out: list[str] = []
    for k in keys:
        if any(o == k or o.startswith(k + "/") or k.startswith(o + "/") for o in out):
            continue
        out.append(k)
    return out


def cut_points(keys: list[str]) -> st.SearchStrategy[str]:
    """A prefix or start_after: random text, or a key, a piece of one, or a key with a tail."""
    random_text = st.text(ALPHABET, max_size=5)
    if not keys:
        return random_text
    key = st.sampled_from(keys)
    return st.one_of(
        random_text,
        key,
        st.tuples(key, st.integers(0, 8)).map(lambda t: t[0][: t[1]]),
        st.tuples(key, st.sampled_from(["-", "/", "a", "\u00e9", "/a"])).map("".join),
    )


@pytest.mark.timeout(120)
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(keys=st.lists(valid_keys, max_size=14).map(consistent), max_keys=st.integers(1, 4), data=st.data())
def test_property_local_and_s3_list_alike(
    s3_bucket: S3Store, keys: list[str], max_keys: int, data: st.DataObject
) -> None:
    prefix = data.draw(cut_points(keys).map(lambda s: s[:3]), label="prefix")
    start_after = data.draw(cut_points(keys), label="start_after")
    # One bucket for all examples, emptied between them.
    existing = [o.key for o in iter_objects(s3_bucket, "")]
    if existing:
        assert s3_bucket.delete_many(existing).errors == {}
    with tempfile.TemporaryDirectory() as tmp:
        local = LocalDirStore(tmp, fsync=False)
        for k in keys:
            local.put(k, _u8(k))
            s3_bucket.put(k, _u8(k))
        expected = model_list(keys, prefix, start_after)
        results: dict[str, tuple[list[str], list[list[str]]]] = {}
        stores: dict[str, ObjectStore] = {"local": local, "s3": s3_bucket}
        for name, store in stores.items():
            whole = [o.key for o in store.list_page(prefix, start_after).objects]
            pages = [[o.key for o in p.objects] for p in collect_pages(store, prefix, start_after, max_keys)]
            # Pages continuing from their last keys add up to the one-page listing.
            assert [k for p in pages for k in p] == whole, name
            if len(pages) > 1 and not pages[-1]:
                # SeaweedFS may flag a page truncated when only emptied
                # directories (from earlier examples) follow: an empty page ends it.
                assert name == "s3"
                event("s3: truncated page followed by an empty page")
                pages.pop()
            results[name] = (whole, pages)
        assert results["local"][0] == expected
        if seaweedfs_may_deviate(keys, prefix, start_after):
            event("not compared: a known SeaweedFS listing deviation")
        else:
            event("compared")
            assert results["s3"] == results["local"]


def test_s3_missing_bucket_is_a_store_error(seaweedfs: str) -> None:
    store = S3Store(
        S3Config(
            bucket="partlog-no-such-bucket",
            endpoint_url=seaweedfs,
            access_key_id="AKID",
            secret_access_key=SECRET,
            max_attempts=1,
        )
    )
    for op in (lambda: store.get("k"), lambda: store.get_range("k", 0, 1), lambda: store.list_page("")):
        with pytest.raises(ObjectStoreError) as exc:
            op()
        # Not "the object is gone": the store itself is misconfigured.
        assert not isinstance(exc.value, ObjectNotFoundError)
        assert "NoSuchBucket" in str(exc.value)
        assert not exc.value.retriable
        assert SECRET not in str(exc.value)
        assert "partlog-no-such-bucket" in str(exc.value)


def test_s3_unreachable_endpoint_is_retriable() -> None:
    # Nothing listens on port 1.
    store = S3Store(
        S3Config(
            bucket="b",
            endpoint_url="http://127.0.0.1:1",
            access_key_id="AKID",
            secret_access_key=SECRET,
            max_attempts=1,
            connect_timeout_s=1.0,
        )
    )
    with pytest.raises(ObjectStoreError) as exc:
        store.get("k")
    assert exc.value.retriable
    assert not isinstance(exc.value, ObjectNotFoundError)
    assert SECRET not in str(exc.value)


def test_s3_store_shares_bucket_with_raw_client(s3_bucket: S3Store, seaweedfs: str) -> None:
    """Objects written by S3Store are plain S3 objects (no encoding of keys)."""
    from tests.s3server import s3_client

    s3_bucket.put("wal/é/1", b"payload")
    client = s3_client(seaweedfs)
    assert client.get_object(Bucket=s3_bucket.bucket, Key="wal/é/1")["Body"].read() == b"payload"
    client.put_object(Bucket=s3_bucket.bucket, Key="wal/raw", Body=b"raw")
    assert s3_bucket.get("wal/raw") == b"raw"
    infos: Iterator[ObjectInfo] = iter_objects(s3_bucket, "wal/")
    assert [o.key for o in infos] == ["wal/raw", "wal/é/1"]
