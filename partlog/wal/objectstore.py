"""Object storage: the ``ObjectStore`` protocol, the embedded local-directory
store and the S3 store.

Both stores answer the same contract (``tests/test_objectstore_contract.py``
runs one suite against each):

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

import contextlib
import errno
import logging
import os
import secrets
import urllib.parse
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

log = logging.getLogger(__name__)

# S3's limits: key length in UTF-8 bytes, keys per ListObjectsV2 page and per
# DeleteObjects call.
KEY_BYTES_MAX = 1024
LIST_KEYS_MAX = 1000
DELETE_KEYS_MAX = 1000
# The local store's staging directory for atomic puts, at its root; no key
# may start with it.
_TMP_DIR = ".partlog-tmp"


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
    if key.split("/", 1)[0] == _TMP_DIR:
        raise InvalidKeyError(f"object key {key!r}: {_TMP_DIR}/ is reserved by the local store", key=key)


def _check_range(key: str, offset: int, length: int) -> None:
    if offset < 0 or length <= 0:
        raise ValueError(f"{key}: bad range offset={offset} length={length} (offset >= 0, length > 0)")


def _utf8(s: str) -> bytes:
    """A key's bytes for ordering.  Lone surrogates stand for bytes of a
    file name that are not UTF-8 (os.fsdecode's spelling): they turn back
    into those bytes, so such names sort where their bytes do."""
    return s.encode("utf-8", "surrogateescape")


# --------------------------------------------------------------- local store


class LocalDirStore:
    """Objects as files under a root directory; the embedded default.

    A key is the file's path relative to the root.  Puts write a temporary
    file, fsync it, rename it into place and fsync the directory, so a crash
    leaves the old state or the whole new object.
    """

    def __init__(self, root: str | os.PathLike[str], *, fsync: bool = True) -> None:
        self.root = os.path.abspath(os.fspath(root))
        # Where the root really is: a root reached through a symlink must
        # not make every key look as if it resolved outside of it.
        self._real_root = os.path.realpath(self.root)
        if os.path.exists(self._real_root) and not os.path.isdir(self._real_root):
            raise ObjectStoreError(f"{self.describe()}: the store's root is not a directory", retriable=False)
        self.fsync = fsync
        # The temp directory is made by the first put: a store opened only
        # to read (partlog wal dump FILE) leaves no trace beside the file.

    def describe(self) -> str:
        return f"file://{self.root}"

    def _path(self, key: str) -> str:
        check_key(key)
        path = os.path.join(self.root, *key.split("/"))
        # check_key already refuses '..'; this guards symlinks and surprises.
        if os.path.commonpath([self._real_root, os.path.realpath(path)]) != self._real_root:
            raise InvalidKeyError(f"object key {key!r} resolves outside {self.root}", key=key)
        return path

    def put(self, key: str, data: bytes) -> None:
        path = self._path(key)
        tmp_dir = os.path.join(self.root, _TMP_DIR)
        tmp = os.path.join(tmp_dir, f"{secrets.token_hex(8)}.tmp")
        try:
            os.makedirs(tmp_dir, exist_ok=True)
            with open(tmp, "wb") as f:
                f.write(data)
                if self.fsync:
                    f.flush()
                    os.fsync(f.fileno())
            parent = os.path.dirname(path)
            # A concurrent delete_many may remove an emptied parent between
            # makedirs and rename: retry a few times.
            for attempt in range(5):
                os.makedirs(parent, exist_ok=True)
                try:
                    os.replace(tmp, path)
                    break
                except FileNotFoundError:
                    if attempt == 4:
                        raise
                except IsADirectoryError as e:
                    raise InvalidKeyError(f"object key {key!r}: a prefix of other keys here", key=key) from e
            if self.fsync:
                _fsync_dir(parent)
        except (NotADirectoryError, FileExistsError) as e:
            # makedirs of "a/b/c" fails with NotADirectoryError when "a" is a
            # file and with FileExistsError when "a/b" is.
            raise InvalidKeyError(f"object key {key!r}: a component is an existing object", key=key) from e
        except OSError as e:
            raise ObjectStoreError(f"{self.describe()}: put {key}: {e}", key=key, retriable=_retriable_os(e)) from e
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    def _open(self, key: str) -> Any:
        path = self._path(key)
        try:
            f = open(path, "rb")  # noqa: SIM115 - returned to the caller's with
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError) as e:
            raise ObjectNotFoundError(f"{self.describe()}: no object {key}", key=key) from e
        except OSError as e:
            raise ObjectStoreError(f"{self.describe()}: get {key}: {e}", key=key, retriable=_retriable_os(e)) from e
        return f

    def get(self, key: str) -> bytes:
        with self._open(key) as f:
            data: bytes = f.read()
            return data

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        _check_range(key, offset, length)
        with self._open(key) as f:
            size = os.fstat(f.fileno()).st_size
            if offset >= size:
                raise RangeNotSatisfiableError(
                    f"{self.describe()}: {key}: range starts at {offset}, object has {size} bytes", key=key
                )
            f.seek(offset)
            data: bytes = f.read(length)
            return data

    def get_suffix(self, key: str, length: int) -> tuple[bytes, int]:
        _check_range(key, 0, length)
        with self._open(key) as f:
            size = os.fstat(f.fileno()).st_size
            if size == 0:
                raise RangeNotSatisfiableError(f"{self.describe()}: {key}: suffix of an empty object", key=key)
            f.seek(max(0, size - length))
            data: bytes = f.read()
            return data, size

    def head(self, key: str) -> ObjectInfo:
        path = self._path(key)
        try:
            st = os.stat(path)
        except (FileNotFoundError, NotADirectoryError) as e:
            raise ObjectNotFoundError(f"{self.describe()}: no object {key}", key=key) from e
        if not os.path.isfile(path):
            raise ObjectNotFoundError(f"{self.describe()}: no object {key}", key=key)
        return ObjectInfo(key, st.st_size, st.st_mtime_ns // 1_000_000)

    def list_page(self, prefix: str, start_after: str = "", max_keys: int = LIST_KEYS_MAX) -> ListPage:
        if not 1 <= max_keys <= LIST_KEYS_MAX:
            raise ValueError(f"max_keys must be in [1, {LIST_KEYS_MAX}], got {max_keys}")
        out: list[ObjectInfo] = []
        for info in self._walk("", _utf8(prefix), _utf8(start_after)):
            if len(out) == max_keys:
                return ListPage(out, True)
            out.append(info)
        return ListPage(out, False)

    def _walk(self, rel: str, prefix: bytes, start_after: bytes) -> Iterator[ObjectInfo]:
        """Keys under directory ``rel`` in UTF-8 byte order, pruned by prefix
        and start_after.  A directory ``d`` holds exactly the keys starting
        with ``d/``, so sorting entries by ``name`` for files and ``name/``
        for directories orders whole keys correctly."""
        path = os.path.join(self.root, rel) if rel else self.root
        try:
            entries = list(os.scandir(path))
        except (FileNotFoundError, NotADirectoryError):
            return  # removed by a concurrent delete
        items: list[tuple[bytes, os.DirEntry[str], bool]] = []
        for e in entries:
            if not rel and e.name == _TMP_DIR:
                continue
            try:
                is_dir = e.is_dir(follow_symlinks=False)
            except OSError:
                continue
            key = f"{rel}/{e.name}" if rel else e.name
            items.append((_utf8(key + "/" if is_dir else key), e, is_dir))
        items.sort(key=lambda t: t[0])
        for sort_key, e, is_dir in items:
            if is_dir:
                # Skip a subtree wholly outside the prefix or before start_after.
                if not (sort_key.startswith(prefix) or prefix.startswith(sort_key)):
                    continue
                if sort_key < start_after and not start_after.startswith(sort_key):
                    continue
                yield from self._walk(sort_key[:-1].decode("utf-8", "surrogateescape"), prefix, start_after)
            else:
                if not sort_key.startswith(prefix) or sort_key <= start_after:
                    continue
                try:
                    st = e.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                yield ObjectInfo(sort_key.decode("utf-8", "surrogateescape"), st.st_size, st.st_mtime_ns // 1_000_000)

    def delete_many(self, keys: Sequence[str]) -> DeleteResult:
        if len(keys) > DELETE_KEYS_MAX:
            raise ValueError(f"delete_many takes at most {DELETE_KEYS_MAX} keys, got {len(keys)}")
        # Refuse a batch with a bad key before deleting anything, as S3Store does.
        paths = [self._path(key) for key in keys]
        deleted: list[str] = []
        errors: dict[str, str] = {}
        for key, path in zip(keys, paths, strict=True):
            try:
                # Already gone, or a "directory" (a prefix of other keys, no
                # object of its own): S3 answers Deleted for both.
                with contextlib.suppress(FileNotFoundError, NotADirectoryError, IsADirectoryError):
                    os.unlink(path)
                self._prune_dirs(os.path.dirname(path))
                deleted.append(key)
            except OSError as e:
                errors[key] = str(e)
        return DeleteResult(deleted, errors)

    def _prune_dirs(self, directory: str) -> None:
        """Remove emptied parent directories, so listings stay fast."""
        while directory != self.root and directory.startswith(self.root + os.sep):
            try:
                os.rmdir(directory)
            except OSError:
                return  # not empty (or gone): stop
            directory = os.path.dirname(directory)


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _retriable_os(e: OSError) -> bool:
    return e.errno in (errno.EAGAIN, errno.EINTR, errno.EIO, errno.ENOSPC, errno.EMFILE, errno.ENFILE)


# ------------------------------------------------------------------ S3 store


@dataclass(frozen=True, slots=True)
class S3Config:
    bucket: str
    endpoint_url: str | None = None
    region: str | None = None
    # None: boto3's standard credential chain (environment, profile, role).
    access_key_id: str | None = field(default=None, repr=False)
    secret_access_key: str | None = field(default=None, repr=False)
    max_attempts: int = 5
    connect_timeout_s: float = 5.0
    read_timeout_s: float = 30.0
    # SeaweedFS, MinIO and most local servers need path-style addressing.
    path_style: bool = True
    # HTTP connections kept to the endpoint: at least the threads that use
    # one store at once (uploads, fetch reads, walmgr's footer reads), so
    # none waits for or discards a connection (botocore's default is 10).
    max_pool_connections: int = 64


class S3Store:
    """Objects in an S3 bucket, through boto3.

    Retries: botocore's "standard" mode (exponential backoff with jitter,
    ``max_attempts`` in all) re-sends the whole body, as puts pass bytes.
    Credentials never appear in messages or logs: ``describe()`` names only
    endpoint and bucket.
    """

    def __init__(self, config: S3Config, *, client: Any = None) -> None:
        self.config = config
        if client is None:
            import boto3
            from botocore.config import Config

            client = boto3.session.Session().client(
                "s3",
                endpoint_url=config.endpoint_url,
                region_name=config.region or "us-east-1",
                aws_access_key_id=config.access_key_id,
                aws_secret_access_key=config.secret_access_key,
                config=Config(
                    retries={"max_attempts": config.max_attempts, "mode": "standard"},
                    connect_timeout=config.connect_timeout_s,
                    read_timeout=config.read_timeout_s,
                    s3={"addressing_style": "path" if config.path_style else "auto"},
                    max_pool_connections=config.max_pool_connections,
                ),
            )
        self._s3 = client
        self.bucket = config.bucket

    def describe(self) -> str:
        where = self.config.endpoint_url or "aws"
        return f"s3://{self.bucket} at {where}"

    def _fail(self, op: str, key: str | None, e: Exception) -> ObjectStoreError:
        from botocore.exceptions import ClientError

        if isinstance(e, ClientError):
            code = str(e.response.get("Error", {}).get("Code", ""))
            status = int(e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
            msg = f"{self.describe()}: {op} {key or ''}: {code} (HTTP {status})"
            if code == "NoSuchBucket":
                # The store is misconfigured, not the object gone.  (A HEAD
                # has no error body: a missing bucket looks like a missing key.)
                return ObjectStoreError(msg, key=key, retriable=False)
            if code in ("NoSuchKey", "NotFound", "404") or status == 404:
                return ObjectNotFoundError(msg, key=key)
            if code == "InvalidRange" or status == 416:
                return RangeNotSatisfiableError(msg, key=key)
            retriable = status >= 500 or status == 429 or code in ("SlowDown", "RequestTimeout", "Throttling")
            return ObjectStoreError(msg, key=key, retriable=retriable)
        # Connection errors, timeouts: the request may succeed later.
        msg = f"{self.describe()}: {op} {key or ''}: {type(e).__name__}: {e}"
        return ObjectStoreError(msg, key=key, retriable=True)

    def put(self, key: str, data: bytes) -> None:
        check_key(key)
        try:
            self._s3.put_object(Bucket=self.bucket, Key=key, Body=data)
        except Exception as e:
            raise self._fail("put", key, e) from e

    def _get(self, key: str, range_header: str | None) -> tuple[bytes, dict[str, Any]]:
        check_key(key)
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Key": key}
        if range_header:
            kwargs["Range"] = range_header
        try:
            resp = self._s3.get_object(**kwargs)
            body: bytes = resp["Body"].read()
        except Exception as e:
            raise self._fail("get", key, e) from e
        return body, resp

    def get(self, key: str) -> bytes:
        return self._get(key, None)[0]

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        _check_range(key, offset, length)
        return self._get(key, f"bytes={offset}-{offset + length - 1}")[0]

    def get_suffix(self, key: str, length: int) -> tuple[bytes, int]:
        _check_range(key, 0, length)
        body, resp = self._get(key, f"bytes=-{length}")
        content_range = resp.get("ContentRange") or ""
        # "bytes a-b/size"; a server that ignores the range sends everything.
        if "/" in content_range:
            size = int(content_range.rsplit("/", 1)[1])
        else:
            size = len(body)
            body = body[-length:]
        if size == 0:
            raise RangeNotSatisfiableError(f"{self.describe()}: {key}: suffix of an empty object", key=key)
        return body, size

    def head(self, key: str) -> ObjectInfo:
        check_key(key)
        try:
            resp = self._s3.head_object(Bucket=self.bucket, Key=key)
        except Exception as e:
            raise self._fail("head", key, e) from e
        return ObjectInfo(key, int(resp["ContentLength"]), int(resp["LastModified"].timestamp() * 1000))

    def list_page(self, prefix: str, start_after: str = "", max_keys: int = LIST_KEYS_MAX) -> ListPage:
        if not 1 <= max_keys <= LIST_KEYS_MAX:
            raise ValueError(f"max_keys must be in [1, {LIST_KEYS_MAX}], got {max_keys}")
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix, "MaxKeys": max_keys}
        if start_after:
            kwargs["StartAfter"] = start_after
        try:
            resp = self._s3.list_objects_v2(**kwargs)
        except Exception as e:
            raise self._fail("list", prefix, e) from e
        objects = [
            ObjectInfo(o["Key"], int(o["Size"]), int(o["LastModified"].timestamp() * 1000))
            for o in resp.get("Contents", [])
        ]
        return ListPage(objects, bool(resp.get("IsTruncated")) and bool(objects))

    def delete_many(self, keys: Sequence[str]) -> DeleteResult:
        if len(keys) > DELETE_KEYS_MAX:
            raise ValueError(f"delete_many takes at most {DELETE_KEYS_MAX} keys, got {len(keys)}")
        if not keys:
            return DeleteResult([], {})
        for key in keys:
            check_key(key)
        try:
            resp = self._s3.delete_objects(
                Bucket=self.bucket, Delete={"Objects": [{"Key": k} for k in keys], "Quiet": False}
            )
        except Exception as e:
            raise self._fail("delete", None, e) from e
        deleted = [d["Key"] for d in resp.get("Deleted", [])]
        errors = {e["Key"]: f"{e.get('Code', '')}: {e.get('Message', '')}" for e in resp.get("Errors", [])}
        return DeleteResult(deleted, errors)


# --------------------------------------------------------------------- URLs


def open_store(url: str) -> ObjectStore:
    """A store from a URL: ``file:///path`` (or a plain path) for the local
    store, ``s3://bucket?endpoint=URL&region=R`` for S3 (credentials from
    boto3's standard chain)."""
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme in ("", "file"):
        path = urllib.parse.unquote(parsed.path if parsed.scheme else url)
        if not path:
            raise ValueError(f"store URL {url!r}: no path")
        return LocalDirStore(path)
    if parsed.scheme == "s3":
        if not parsed.netloc:
            raise ValueError(f"store URL {url!r}: no bucket (s3://bucket?endpoint=URL)")
        query = urllib.parse.parse_qs(parsed.query)
        unknown = set(query) - {"endpoint", "region"}
        if unknown:
            raise ValueError(f"store URL {url!r}: unknown parameters {sorted(unknown)} (endpoint, region)")
        return S3Store(
            S3Config(
                bucket=parsed.netloc,
                endpoint_url=query.get("endpoint", [None])[0],
                region=query.get("region", [None])[0],
            )
        )
    raise ValueError(f"store URL {url!r}: scheme must be file:// or s3://")
