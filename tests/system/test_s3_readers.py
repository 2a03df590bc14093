"""S3Store's two readers (``S3Config.reader``: boto3, obstore) against a real
S3 server (SeaweedFS), directly and through ``tests/s3proxy.py``:

* the same bytes for every key, tricky ones included (property test);
* a server that ignores ``Range`` never yields another range's bytes
  (boto3's reader returned the whole object for a range once);
* 503 SlowDown on a share of GETs and LISTs: a full scan through walmgr's
  paced store completes, backs off and loses no key, with either reader;
* whatever status and error code a server answers, a read fails as an
  ObjectStoreError, retriable only for 5xx, 429 and throttling (property test).
"""

from __future__ import annotations

import contextlib
import dataclasses
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from partlog.kafka.records import TopicIdPartition
from partlog.wal.objectstore import ObjectNotFoundError, ObjectStoreError, RangeNotSatisfiableError
from partlog.wal.s3_store import S3Store
from tests.clock import Clock
from tests.s3proxy import s3_proxy
from tests.walmgr_helpers import orphan
from walmgr.model import State
from walmgr.paced_store import PacedStore
from walmgr.registry import Registry
from walmgr.scanner import Scanner

pytestmark = pytest.mark.timeout(180)

READERS = ("boto3", "obstore")
TPS = [TopicIdPartition(uuid.UUID(int=0x5EAD), 0)]


def through(store: S3Store, endpoint: str | None = None, **changes: object) -> S3Store:
    """``store``'s bucket with other settings (another endpoint: the proxy)."""
    if endpoint is not None:
        changes["endpoint_url"] = endpoint
    return S3Store(dataclasses.replace(store.config, **changes))  # type: ignore[arg-type]


def test_the_reader_is_the_configured_one(s3_bucket: S3Store) -> None:
    assert s3_bucket.reads_with == "boto3"
    assert through(s3_bucket, reader="obstore").reads_with == "obstore"
    # An injected client (fault injection in tests) serves every request.
    injected = S3Store(dataclasses.replace(s3_bucket.config, reader="obstore"), client=s3_bucket._s3)
    assert injected.reads_with == "boto3"


# Keys S3 accepts that obstore's paths cannot spell (empty segments, dot
# segments, a trailing slash), percent signs, spaces and non-ASCII text.
_TRICKY = st.sampled_from(["a//b", "./x", "a/../b", "a/./b", "dir/", "50%/x", "%2F", "sp ace", "é/ü", "+plus", "~t"])
_PLAIN = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), min_size=1, max_size=40)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    key=st.one_of(_TRICKY, _PLAIN, st.tuples(_PLAIN, _TRICKY).map("/".join)), data=st.binary(min_size=1, max_size=64)
)
def test_both_readers_read_the_same_bytes_for_any_key(s3_bucket: S3Store, key: str, data: bytes) -> None:
    try:
        s3_bucket.put(key, data)
    except ObjectStoreError:
        return  # a key this server refuses (SeaweedFS: some dot segments): nothing to read
    fast = through(s3_bucket, reader="obstore")
    size = len(data)

    def answers(store: S3Store) -> list[object]:
        out: list[object] = []
        for read in (
            lambda: store.get(key),
            lambda: store.get_suffix(key, 5),
            lambda: store.get_range(key, size // 2, 7),
            lambda: store.get_range(key, size, 1),
            lambda: store.get_suffix(key + "-missing", 4),
        ):
            try:
                out.append(read())
            except ObjectStoreError as e:
                out.append(type(e))
        return out

    expected = [data, (data[-5:], size), data[size // 2 : size // 2 + 7], RangeNotSatisfiableError, ObjectNotFoundError]
    slow = answers(s3_bucket)
    # The readers agree on every key; where the server keeps the key as
    # given, both read what was written.  (SeaweedFS 4.48 mangles some,
    # a backslash among them: boto3 reads those back wrong too.)
    assert answers(fast) == slow
    if slow[0] == data:
        assert slow == expected


@pytest.mark.parametrize("reader", READERS)
def test_a_server_ignoring_range_never_yields_another_ranges_bytes(
    s3_bucket: S3Store, seaweedfs: str, reader: str
) -> None:
    s3_bucket.put("k", b"0123456789")
    with s3_proxy(seaweedfs) as proxy:
        proxy.ignore_range = True
        store = through(s3_bucket, proxy.endpoint_url, reader=reader, max_attempts=1)
        for offset, length in ((2, 3), (0, 1), (8, 9)):
            try:
                got = store.get_range("k", offset, length)
            except ObjectStoreError:
                continue  # refusing the answer is right too
            assert got == b"0123456789"[offset : offset + length]
        with contextlib.suppress(ObjectStoreError):
            assert store.get_suffix("k", 4) == (b"6789", 10)
        with pytest.raises(ObjectStoreError):
            store.get_range("k", 10, 2)


def _registry(reg: Registry) -> dict[str, tuple[State, int]]:
    return {r.key: (r.state, r.size) for r in reg.records(None)}


@pytest.mark.slow
@pytest.mark.parametrize("reader", READERS)
def test_a_throttled_bucket_is_scanned_whole_through_http(
    s3_bucket: S3Store, seaweedfs: str, tmp_path: Path, reader: str
) -> None:
    keys = {orphan(s3_bucket, TPS, created_ms=1_700_000_000_000 + i) for i in range(60)}
    clock = Clock(1_700_000_000_000 + 3_600_000)
    slept: list[float] = []
    with s3_proxy(seaweedfs, seed=7) as proxy:
        proxy.slowdown_share = 0.3
        # One attempt in the client: every SlowDown reaches the paced store,
        # which backs off and counts it.
        store = through(s3_bucket, proxy.endpoint_url, reader=reader, retry_mode="adaptive", max_attempts=1)
        paced = PacedStore(store, read_attempts=20, sleep=slept.append)
        with Registry(tmp_path / "throttled", sync=False) as reg, Registry(tmp_path / "calm", sync=False) as calm:
            report = Scanner(paced, reg, "wal", clock=clock).full()
            Scanner(s3_bucket, calm, "wal", clock=clock).full()
            assert _registry(reg) == _registry(calm)
            assert keys <= set(_registry(reg)) and report.new_objects == len(keys)
    assert proxy.refused > 0
    assert paced.stats["retries"] == proxy.refused
    assert slept and paced.stats["backoff_s"] == pytest.approx(sum(slept))


@pytest.mark.slow
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    status=st.sampled_from([400, 401, 403, 404, 409, 416, 429, 500, 501, 502, 503, 504]),
    code=st.sampled_from(
        ["SlowDown", "NoSuchKey", "NoSuchBucket", "InvalidRange", "AccessDenied", "InternalError", "X"]
    ),
    reader=st.sampled_from(READERS),
)
def test_any_error_answer_fails_the_read_clearly_and_is_retriable_only_when_it_may_pass(
    s3_bucket: S3Store, seaweedfs: str, status: int, code: str, reader: str
) -> None:
    with s3_proxy(seaweedfs) as proxy:
        proxy.answer = (status, code)
        store = through(s3_bucket, proxy.endpoint_url, reader=reader, max_attempts=1)
        with pytest.raises(ObjectStoreError) as e:
            store.get_suffix("wal/x", 16)
    err = e.value
    assert s3_bucket.bucket in str(err) and "wal/x" in str(err)
    # The status decides; the code only refines a 404 and marks throttling.
    if status == 404 and code == "NoSuchBucket":
        assert not err.retriable and not isinstance(err, ObjectNotFoundError)
    elif status == 404:
        assert isinstance(err, ObjectNotFoundError)
    elif status == 416:
        assert isinstance(err, RangeNotSatisfiableError)
    elif status >= 500 or status == 429 or code == "SlowDown":
        assert err.retriable
    else:
        assert not err.retriable
