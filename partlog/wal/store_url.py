"""Open an object store from a URL: :func:`open_store` (``file://`` or a
plain path for :class:`LocalDirStore`, ``s3://`` for :class:`S3Store`)."""

from __future__ import annotations

import urllib.parse

from partlog.wal.localdir_store import LocalDirStore
from partlog.wal.objectstore import ObjectStore
from partlog.wal.s3_store import S3Store, s3_config_from_url


def open_store(url: str) -> ObjectStore:
    """A store from a URL: ``file:///path`` (or a plain path) for the local
    store, ``s3://bucket?endpoint=URL&region=R&reader=boto3|obstore&retry=standard|adaptive``
    for S3 (credentials from boto3's standard chain; ``reader`` and ``retry``
    are :class:`S3Config`'s ``reader`` and ``retry_mode``)."""
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme in ("", "file"):
        path = urllib.parse.unquote(parsed.path if parsed.scheme else url)
        if not path:
            raise ValueError(f"store URL {url!r}: no path")
        return LocalDirStore(path)
    if parsed.scheme == "s3":
        if not parsed.netloc:
            raise ValueError(f"store URL {url!r}: no bucket (s3://bucket?endpoint=URL)")
        return S3Store(s3_config_from_url(url))
    raise ValueError(f"store URL {url!r}: scheme must be file:// or s3://")


__all__ = ["open_store"]
