"""WAL objects: their keys, the segment format, the object stores."""

# The names below are imported on first use (partlog.lazy_exports).

from __future__ import annotations

from typing import TYPE_CHECKING

from partlog.lazy_exports import lazy_getattr

if TYPE_CHECKING:
    from partlog.wal.key import WalKeyError, make_wal_key, parse_wal_key
    from partlog.wal.localdir_store import LocalDirStore
    from partlog.wal.objectstore import ObjectStore, ObjectStoreError
    from partlog.wal.s3_store import S3Store
    from partlog.wal.segment import WalFormatError, WalSegmentBuilder
    from partlog.wal.store_url import open_store

_EXPORTS = {
    "LocalDirStore": "partlog.wal.localdir_store",
    "ObjectStore": "partlog.wal.objectstore",
    "ObjectStoreError": "partlog.wal.objectstore",
    "S3Store": "partlog.wal.s3_store",
    "WalFormatError": "partlog.wal.segment",
    "WalKeyError": "partlog.wal.key",
    "WalSegmentBuilder": "partlog.wal.segment",
    "make_wal_key": "partlog.wal.key",
    "open_store": "partlog.wal.store_url",
    "parse_wal_key": "partlog.wal.key",
}

__all__ = [
    "LocalDirStore",
    "ObjectStore",
    "ObjectStoreError",
    "S3Store",
    "WalFormatError",
    "WalKeyError",
    "WalSegmentBuilder",
    "make_wal_key",
    "open_store",
    "parse_wal_key",
]

__getattr__ = lazy_getattr(__name__, _EXPORTS, globals())
