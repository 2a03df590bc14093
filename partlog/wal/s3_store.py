"""The S3 object store: :class:`S3Store` (boto3, or obstore for GETs), its
:class:`S3Config`, and ``s3://`` URLs (:func:`s3_config_from_url`).

It answers the ``ObjectStore`` contract of ``partlog.wal.objectstore``
(``tests/system/test_objectstore_s3.py`` runs the suite against SeaweedFS).
An S3 answer becomes an error by its HTTP status first (:func:`_s3_error`):
404 is ``ObjectNotFoundError`` (but a missing bucket is a configuration
error), 416 ``RangeNotSatisfiableError``, 5xx, 429 and throttling codes are
retriable.  Credentials never appear in messages or logs.
"""

from __future__ import annotations

import datetime
import re
import threading
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from partlog.wal.objectstore import (
    DELETE_KEYS_MAX,
    LIST_KEYS_MAX,
    DeleteResult,
    ListPage,
    ObjectInfo,
    ObjectNotFoundError,
    ObjectStoreError,
    RangeNotSatisfiableError,
    check_key,
    check_range,
)


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
    # Who sends GETs (get, get_range, get_suffix): "boto3", or "obstore"
    # (Rust's object_store crate: a ranged GET costs about a tenth of
    # boto3's client CPU and releases the GIL, so threads of reads scale;
    # walmgr's footer reads use it).  LIST, PUT, HEAD and DeleteObjects
    # always go through boto3.
    reader: str = "boto3"
    # botocore's retry mode for boto3's requests: "standard", or "adaptive"
    # (standard plus a client-side token bucket that slows down on
    # throttling answers such as 503 SlowDown; walmgr uses it).
    retry_mode: str = "standard"

    def __post_init__(self) -> None:
        if self.reader not in S3_READERS:
            raise ValueError(f"S3 reader must be one of {S3_READERS}, got {self.reader!r}")
        if self.retry_mode not in S3_RETRY_MODES:
            raise ValueError(f"S3 retry mode must be one of {S3_RETRY_MODES}, got {self.retry_mode!r}")
        if self.max_attempts < 1:
            raise ValueError(f"S3 max_attempts must be >= 1, got {self.max_attempts}")


S3_READERS = ("boto3", "obstore")
S3_RETRY_MODES = ("standard", "adaptive")


class S3Store:
    """Objects in an S3 bucket, through boto3.

    Retries: botocore's "standard" mode (exponential backoff with jitter,
    ``max_attempts`` in all) re-sends the whole body, as puts pass bytes.
    Credentials never appear in messages or logs: ``describe()`` names only
    endpoint and bucket.
    """

    def __init__(self, config: S3Config, *, client: Any = None) -> None:
        self.config = config
        # An injected client (tests' fault injection) serves every request.
        self._reader = _ObstoreReader(config) if config.reader == "obstore" and client is None else None
        if client is None:
            import boto3
            import botocore.session
            from botocore.config import Config

            core = botocore.session.get_session()
            # A listing's timestamps through datetime.fromisoformat, not
            # dateutil: half the CPU of a ListObjectsV2 page was dateutil.
            core.get_component("response_parser_factory").set_parser_defaults(timestamp_parser=_parse_timestamp)
            client = boto3.session.Session(botocore_session=core).client(
                "s3",
                endpoint_url=config.endpoint_url,
                region_name=config.region or "us-east-1",
                aws_access_key_id=config.access_key_id,
                aws_secret_access_key=config.secret_access_key,
                config=Config(
                    retries={"total_max_attempts": config.max_attempts, "mode": config.retry_mode},
                    connect_timeout=config.connect_timeout_s,
                    read_timeout=config.read_timeout_s,
                    s3={"addressing_style": "path" if config.path_style else "auto"},
                    max_pool_connections=config.max_pool_connections,
                ),
            )
        self._s3 = client
        self.bucket = config.bucket

    @property
    def reads_with(self) -> str:
        """Who sends this store's GETs: "obstore" or "boto3"."""
        return "boto3" if self._reader is None else "obstore"

    def describe(self) -> str:
        where = self.config.endpoint_url or "aws"
        return f"s3://{self.bucket} at {where}"

    def _fail(self, op: str, key: str | None, e: Exception) -> ObjectStoreError:
        from botocore.exceptions import ClientError

        if isinstance(e, ClientError):
            code = str(e.response.get("Error", {}).get("Code", ""))
            status = int(e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
            msg = f"{self.describe()}: {op} {key or ''}: {code} (HTTP {status})"
            return _s3_error(msg, key, code, status)
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
        if self._reader is not None:
            check_key(key)
            got = self._reader.get(self, key, None)
            if got is not None:
                return got[0]
        return self._get(key, None)[0]

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        check_range(key, offset, length)
        if self._reader is not None:
            check_key(key)
            got = self._reader.get(self, key, {"offset": offset, "length": length})
            if got is not None:
                return got[0]
        body, resp = self._get(key, f"bytes={offset}-{offset + length - 1}")
        content_range = resp.get("ContentRange") or ""
        if not content_range:
            # A server that ignores Range answers 200 with the whole object:
            # cut the range out rather than hand back the wrong bytes.
            if offset >= len(body):
                raise RangeNotSatisfiableError(
                    f"{self.describe()}: {key}: range starts at {offset}, object has {len(body)} bytes", key=key
                )
            return body[offset : offset + length]
        start = content_range.removeprefix("bytes ").split("-", 1)[0]
        if start != str(offset) or len(body) > length:
            raise ObjectStoreError(
                f"{self.describe()}: get {key}: asked for {length} bytes at {offset}, "
                f"the server answered {len(body)} bytes as {content_range!r}",
                key=key,
            )
        return body

    def get_suffix(self, key: str, length: int) -> tuple[bytes, int]:
        check_range(key, 0, length)
        if self._reader is not None:
            check_key(key)
            got = self._reader.get(self, key, {"suffix": length})
            if got is not None:
                body, size = got
                if size == 0:
                    raise RangeNotSatisfiableError(f"{self.describe()}: {key}: suffix of an empty object", key=key)
                return body, size
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


def _parse_timestamp(value: Any) -> Any:
    """botocore's timestamp parser, with a fast path for the ISO 8601 UTC
    form S3 uses in XML bodies (``2026-11-26T15:51:29.000Z``)."""
    if isinstance(value, str) and value.endswith("Z") and "T" in value:
        try:
            return datetime.datetime.fromisoformat(value)
        except ValueError:
            pass
    from botocore.utils import parse_timestamp

    return parse_timestamp(value)


# S3 error codes that mean "later", whatever the status says.
_THROTTLING_CODES = frozenset({"SlowDown", "RequestTimeout", "Throttling"})

# Pulls the S3 error code and the HTTP status out of obstore's messages,
# which carry the server's XML answer ("... status code: 404 Not Found:
# <?xml ...><Code>NoSuchKey</Code>...").
_OBSTORE_CODE = re.compile(r"<Code>([A-Za-z0-9]{1,64})</Code>")
_OBSTORE_STATUS = re.compile(r"status code: (\d{3})")


class _ObstoreReader:
    """S3Store's GETs through obstore (``S3Config.reader = "obstore"``).

    The same bucket, endpoint, addressing, timeouts and retry budget as
    boto3's client; credentials are the config's, or boto3's standard chain
    through obstore's boto3 provider.  Keys obstore cannot name as they are
    (empty segments such as ``a//b``, ``.`` or ``..``) and answers naming
    another object than the one asked for go through boto3 instead: a read
    never returns another object's bytes.
    """

    def __init__(self, config: S3Config) -> None:
        self._config = config
        self._lock = threading.Lock()
        self._built: Any = None

    def _store(self, owner: S3Store) -> Any:
        """obstore's client, built at the first read: as with boto3, missing
        credentials fail requests (retriable: the chain may find some
        later), not the construction of the store."""
        with self._lock:
            if self._built is None:
                try:
                    self._built = obstore_client(self._config)
                except ValueError as e:
                    raise ObjectStoreError(f"{owner.describe()}: obstore reader: {e}", retriable=True) from e
            return self._built

    def get(self, owner: S3Store, key: str, byte_range: dict[str, int] | None) -> tuple[bytes, int] | None:
        """``(bytes, object size)``, or None when boto3 must do this read."""
        import obstore

        options: dict[str, Any] = {}
        if byte_range is not None:
            if "suffix" in byte_range:
                options["range"] = {"suffix": byte_range["suffix"]}
            else:
                options["range"] = (byte_range["offset"], byte_range["offset"] + byte_range["length"])
        client = self._store(owner)
        try:
            result = obstore.get(client, key, options=options)  # type: ignore[arg-type]
            if result.meta["path"] != key:
                return None
            return bytes(result.bytes()), int(result.meta["size"])
        except (ValueError, obstore.exceptions.InvalidPathError):
            return None  # a key obstore cannot spell: boto3 reads it
        except Exception as e:
            raise _obstore_fail(owner, key, e) from e


def obstore_client(config: S3Config) -> Any:
    """An obstore S3 client for ``config``'s bucket: the same endpoint,
    addressing, timeouts and retry budget as boto3's; the config's
    credentials, else boto3's standard chain (obstore's boto3 provider,
    which raises ValueError when the chain finds none)."""
    from obstore.store import S3Store as ObstoreS3

    kwargs: dict[str, Any] = {}
    if config.access_key_id is not None and config.secret_access_key is not None:
        kwargs["access_key_id"] = config.access_key_id
        kwargs["secret_access_key"] = config.secret_access_key
    else:
        from obstore.auth.boto3 import Boto3CredentialProvider

        kwargs["credential_provider"] = Boto3CredentialProvider()
    if config.endpoint_url:
        kwargs["endpoint"] = config.endpoint_url
    return ObstoreS3(
        config.bucket,
        region=config.region or "us-east-1",
        virtual_hosted_style_request=not config.path_style,
        client_options={
            "allow_http": bool(config.endpoint_url and config.endpoint_url.startswith("http://")),
            "connect_timeout": f"{int(config.connect_timeout_s * 1000)}ms",
            "timeout": f"{int(config.read_timeout_s * 1000)}ms",
            "pool_max_idle_per_host": str(config.max_pool_connections),
        },
        retry_config={"max_retries": config.max_attempts - 1},
        **kwargs,
    )


def _obstore_fail(owner: S3Store, key: str, e: Exception) -> ObjectStoreError:
    import obstore.exceptions as oe

    text = str(e)
    code_m = _OBSTORE_CODE.search(text)
    status_m = _OBSTORE_STATUS.search(text)
    code = code_m.group(1) if code_m else type(e).__name__
    status = int(status_m.group(1)) if status_m else 0
    if status:
        msg = f"{owner.describe()}: get {key}: {code} (HTTP {status})"
    else:  # no answer, or one obstore refused: its first line says which
        first = text.split("\n", 1)[0][:200]
        msg = f"{owner.describe()}: get {key}: {code}: {first}"
    if not status:
        if isinstance(e, (oe.NotFoundError, FileNotFoundError)):
            status = 404
        elif isinstance(e, (oe.PermissionDeniedError, oe.UnauthenticatedError)):
            status = 403
    # No status at all: no answer (connection refused, timeout) or one
    # obstore refused (a whole object for a range): retriable.
    return _s3_error(msg, key, code, status) if status else ObjectStoreError(msg, key=key, retriable=True)


def _s3_error(msg: str, key: str | None, code: str, status: int) -> ObjectStoreError:
    """The error for an S3 answer, from its HTTP status first; the error
    code only refines it (a server whose code and status disagree gets the
    status's meaning).  Both readers use it."""
    if status == 404:
        if code == "NoSuchBucket":
            # The store is misconfigured, not the object gone.
            return ObjectStoreError(msg, key=key, retriable=False)
        return ObjectNotFoundError(msg, key=key)  # a HEAD has no body, so no code
    if status == 416:
        return RangeNotSatisfiableError(msg, key=key)
    # Throttling, 5xx and 429: the same request may succeed later.
    retriable = status >= 500 or status == 429 or code in _THROTTLING_CODES
    return ObjectStoreError(msg, key=key, retriable=retriable)


# Query parameters of s3:// store URLs: endpoint, region, reader (S3Config.reader)
# and retry (S3Config.retry_mode).
S3_URL_PARAMS = frozenset({"endpoint", "region", "reader", "retry"})


def s3_config_from_url(url: str) -> S3Config:
    """The :class:`S3Config` of an ``s3://bucket?...`` URL (see
    :func:`open_store`); ValueError naming the URL for a wrong one."""
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme != "s3" or not parsed.netloc:
        raise ValueError(f"store URL {url!r}: no bucket (s3://bucket?endpoint=URL)")
    query = urllib.parse.parse_qs(parsed.query)
    unknown = set(query) - S3_URL_PARAMS
    if unknown:
        known = ", ".join(sorted(S3_URL_PARAMS))
        raise ValueError(f"store URL {url!r}: unknown parameters {sorted(unknown)} ({known})")
    try:
        return S3Config(
            bucket=parsed.netloc,
            endpoint_url=query.get("endpoint", [None])[0],
            region=query.get("region", [None])[0],
            reader=query.get("reader", ["boto3"])[0],
            retry_mode=query.get("retry", ["standard"])[0],
        )
    except ValueError as e:
        raise ValueError(f"store URL {url!r}: {e}") from None


__all__ = [
    "S3_READERS",
    "S3_RETRY_MODES",
    "S3_URL_PARAMS",
    "S3Config",
    "S3Store",
    "obstore_client",
    "s3_config_from_url",
]
