"""Object storage: the ``ObjectStore`` protocol and what every store shares
(its errors, records, S3's limits, the key rules).

The stores are ``partlog.wal.localdir_store.LocalDirStore`` (the embedded
default) and ``partlog.wal.s3_store.S3Store``;
``partlog.wal.store_url.open_store`` opens one from a URL.  Both answer the
same contract (one suite, ``tests/objectstore_contract.py``, runs against
each):

* ``put`` is atomic: a reader sees the whole object or nothing.
* ``get_range`` and ``get_suffix`` are S3's ranged GETs (``bytes=a-b`` and
  ``bytes=-n``); a range starting at or past the end is
  :class:`RangeNotSatisfiableError`, a range running past the end is cut short.
* ``list_page`` is ListObjectsV2: keys under a prefix, after ``start_after``,
  in UTF-8 byte order, at most ``max_keys`` (1000) a page.
* ``delete_many`` is DeleteObjects: at most 1000 keys a call, and deleting a
  missing key succeeds.

The API is synchronous (boto3 is); asyncio shells call it through
``asyncio.to_thread``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

# S3's limits: key length in UTF-8 bytes, keys per ListObjectsV2 page and per
# DeleteObjects call.
KEY_BYTES_MAX = 1024
LIST_KEYS_MAX = 1000
DELETE_KEYS_MAX = 1000
# The local store's staging directory for atomic puts, at its root; no key
# may start with it.
LOCAL_TMP_DIR = ".partlog-tmp"


class ObjectStoreError(Exception):
    """An operation on the object store failed.

    ``retriable`` tells whether the same request may succeed later (network,
    throttling, 5xx), as opposed to a request that is wrong (bad key, bad
    range, access denied).
    """

    def __init__(self, message: str, *, key: str | None = None, retriable: bool = False) -> None:
        super().__init__(message)
        self.key = key
        self.retriable = retriable


class ObjectNotFoundError(ObjectStoreError):
    """The object does not exist (S3 ``NoSuchKey``, HTTP 404)."""


class RangeNotSatisfiableError(ObjectStoreError):
    """The requested range starts at or past the end of the object (HTTP 416)."""


class InvalidKeyError(ObjectStoreError, ValueError):
    """The key is not one this store accepts."""


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    key: str
    size: int
    last_modified_ms: int


@dataclass(frozen=True, slots=True)
class ListPage:
    objects: list[ObjectInfo]
    # True when more keys may follow; continue with start_after=objects[-1].key.
    # False means none follow.  (Some S3 servers, SeaweedFS among them, say
    # True for a full page that only an empty page follows.)
    is_truncated: bool


@dataclass(frozen=True, slots=True)
class DeleteResult:
    # Keys the store confirmed deleted (missing keys count as deleted, as in S3).
    deleted: list[str]
    # Key -> error message for the keys that were not deleted.
    errors: dict[str, str] = field(default_factory=dict)


class ObjectStore(Protocol):
    """What partlog needs from object storage (see module doc)."""

    def put(self, key: str, data: bytes) -> None: ...

    def get_range(self, key: str, offset: int, length: int) -> bytes: ...

    def get_suffix(self, key: str, length: int) -> tuple[bytes, int]:
        """The last ``length`` bytes (all of a shorter object) and the object's size."""
        ...

    def get(self, key: str) -> bytes: ...

    def head(self, key: str) -> ObjectInfo: ...

    def list_page(self, prefix: str, start_after: str = "", max_keys: int = LIST_KEYS_MAX) -> ListPage:
        """ListObjectsV2: keys under ``prefix`` after ``start_after``, in
        UTF-8 byte order.  S3 keys are always UTF-8; a local store may hold
        a file whose name is not: it is listed as a key holding lone
        surrogates (``os.fsdecode``'s spelling of the undecodable bytes),
        in the order of its bytes, and may be passed back as
        ``start_after``.  Every other call refuses such a key
        (``InvalidKeyError``): callers report it (walmgr: INVALID), never
        read or delete it."""
        ...

    def delete_many(self, keys: Sequence[str]) -> DeleteResult: ...

    def describe(self) -> str:
        """Where the store is, for messages (never credentials)."""
        ...


class ForwardingStore:
    """An :class:`ObjectStore` that passes every call to ``inner``: subclass
    it and override what you want to change (fault injection in tests,
    metrics or throttling in an embedding broker)."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner

    def put(self, key: str, data: bytes) -> None:
        self.inner.put(key, data)

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        return self.inner.get_range(key, offset, length)

    def get_suffix(self, key: str, length: int) -> tuple[bytes, int]:
        return self.inner.get_suffix(key, length)

    def get(self, key: str) -> bytes:
        return self.inner.get(key)

    def head(self, key: str) -> ObjectInfo:
        return self.inner.head(key)

    def list_page(self, prefix: str, start_after: str = "", max_keys: int = LIST_KEYS_MAX) -> ListPage:
        return self.inner.list_page(prefix, start_after, max_keys)

    def delete_many(self, keys: Sequence[str]) -> DeleteResult:
        return self.inner.delete_many(keys)

    def describe(self) -> str:
        return self.inner.describe()


def iter_objects(store: ObjectStore, prefix: str, start_after: str = "") -> Iterator[ObjectInfo]:
    """Every object under ``prefix`` after ``start_after``, page by page."""
    while True:
        page = store.list_page(prefix, start_after)
        yield from page.objects
        if not page.is_truncated or not page.objects:
            return
        start_after = page.objects[-1].key


def check_key(key: str) -> None:
    """Refuse keys that are empty, too long, or not a clean relative path.

    S3 itself accepts more, but partlog's keys never need it, and the local
    store maps keys to paths: no ``..``, no absolute paths, no empty or ``.``
    components, no NUL.
    """
    if not isinstance(key, str) or not key:
        raise InvalidKeyError(f"object key {key!r}: empty or not a string", key=str(key))
    if len(key.encode("utf-8", "surrogatepass")) > KEY_BYTES_MAX:
        raise InvalidKeyError(f"object key {key[:60]!r}...: longer than {KEY_BYTES_MAX} bytes", key=key)
    if "\x00" in key:
        raise InvalidKeyError(f"object key {key!r}: contains NUL", key=key)
    try:
        key.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InvalidKeyError(f"object key {key!r}: not valid UTF-8 ({e.reason})", key=key) from e
    for part in key.split("/"):
        if part in ("", ".", ".."):
            raise InvalidKeyError(
                f"object key {key!r}: empty, '.' or '..' path component (absolute paths included)", key=key
            )
    if key.split("/", 1)[0] == LOCAL_TMP_DIR:
        raise InvalidKeyError(f"object key {key!r}: {LOCAL_TMP_DIR}/ is reserved by the local store", key=key)


def check_range(key: str, offset: int, length: int) -> None:
    """Refuse a range that is not one (ValueError): offset >= 0, length > 0."""
    if offset < 0 or length <= 0:
        raise ValueError(f"{key}: bad range offset={offset} length={length} (offset >= 0, length > 0)")


__all__ = [
    "DELETE_KEYS_MAX",
    "KEY_BYTES_MAX",
    "LIST_KEYS_MAX",
    "LOCAL_TMP_DIR",
    "DeleteResult",
    "ForwardingStore",
    "InvalidKeyError",
    "ListPage",
    "ObjectInfo",
    "ObjectNotFoundError",
    "ObjectStore",
    "ObjectStoreError",
    "RangeNotSatisfiableError",
    "check_key",
    "check_range",
    "iter_objects",
]
