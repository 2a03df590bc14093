"""The embedded object store: :class:`LocalDirStore`, objects as files under a
root directory.

It answers the ``ObjectStore`` contract of ``partlog.wal.objectstore`` as
S3 does (``tests/objectstore_contract.py``): atomic puts (temporary
file, fsync, rename, fsync of the directory), ranged reads, listings in
UTF-8 byte order, batch deletes that succeed for missing keys.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator, Sequence
from typing import Any

from partlog.runtime import SYSTEM_ENTROPY, Entropy
from partlog.wal.objectstore import (
    DELETE_KEYS_MAX,
    LIST_KEYS_MAX,
    LOCAL_TMP_DIR,
    DeleteResult,
    InvalidKeyError,
    ListPage,
    ObjectInfo,
    ObjectNotFoundError,
    ObjectStoreError,
    RangeNotSatisfiableError,
    check_key,
    check_range,
)


class LocalDirStore:
    """Objects as files under a root directory; the embedded default.

    A key is the file's path relative to the root.  Puts write a temporary
    file, fsync it, rename it into place and fsync the directory, so a crash
    leaves the old state or the whole new object.
    """

    def __init__(self, root: str | os.PathLike[str], *, fsync: bool = True, entropy: Entropy = SYSTEM_ENTROPY) -> None:
        self.root = os.path.abspath(os.fspath(root))
        # Where the root really is: a root reached through a symlink must
        # not make every key look as if it resolved outside of it.
        self._real_root = os.path.realpath(self.root)
        if os.path.exists(self._real_root) and not os.path.isdir(self._real_root):
            raise ObjectStoreError(f"{self.describe()}: the store's root is not a directory", retriable=False)
        self.fsync = fsync
        self.entropy = entropy  # temp file names
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
        tmp_dir = os.path.join(self.root, LOCAL_TMP_DIR)
        tmp = os.path.join(tmp_dir, f"{self.entropy.token_hex(8)}.tmp")
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
        check_range(key, offset, length)
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
        check_range(key, 0, length)
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
        for info in self._walk(self._list_root(prefix), _utf8(prefix), _utf8(start_after)):
            if len(out) == max_keys:
                return ListPage(out, True)
            out.append(info)
        return ListPage(out, False)

    def _list_root(self, prefix: str) -> str:
        """The deepest directory holding every key under ``prefix``: its
        part before the last '/', as a directory ``d`` holds exactly the
        keys starting with ``d/``.  A walmgr scan lists 256 shards a cycle;
        from the root, each listing sorted the 256 shard directories again.
        The root ("") for a prefix that names the temp directory, has a
        component that is not a plain name, or leads through a symlink:
        the walk from the root lists only what lies inside it."""
        head, sep, _ = prefix.rpartition("/")
        names = head.split("/")
        if not sep or names[0] == LOCAL_TMP_DIR or any(n in ("", ".", "..") or "\0" in n for n in names):
            return ""
        path = self.root
        for name in names:
            path = os.path.join(path, name)
            try:
                if not stat.S_ISDIR(os.lstat(path).st_mode):
                    return ""  # a symlink, or a file (no key lies below it)
            except FileNotFoundError:
                return head  # nothing to list: the walk finds no directory
            except OSError:
                return ""
        return head

    def _walk(self, rel: str, prefix: bytes, start_after: bytes) -> Iterator[ObjectInfo]:
        """Keys under directory ``rel`` in UTF-8 byte order, pruned by prefix
        and start_after.  A directory ``d`` holds exactly the keys starting
        with ``d/``, so sorting entries by ``name`` for files and ``name/``
        for directories orders whole keys correctly."""
        path = os.fsencode(os.path.join(self.root, rel) if rel else self.root)
        try:
            # Names as bytes: a key's bytes are its order, so the entries
            # before start_after are skipped without decoding, sorting or
            # a stat (a walmgr scan lists each shard from near its end).
            names = os.listdir(path)
        except (FileNotFoundError, NotADirectoryError):
            return  # removed by a concurrent delete
        base = _utf8(rel) + b"/" if rel else b""
        items: list[tuple[bytes, os.stat_result, bool]] = []
        for name in names:
            if not rel and name == _LOCAL_TMP_DIR_BYTES:
                continue
            kb = base + name
            if kb < start_after and not start_after.startswith(kb):
                # Wholly before start_after, file or directory: they differ
                # inside ``kb``, so ``kb + b"/"`` sorts before it too.
                continue
            if not (kb.startswith(prefix) or prefix.startswith(kb)):
                continue  # outside the prefix, file or directory, likewise: no stat
            try:
                st = os.lstat(os.path.join(path, name))
            except OSError:
                continue  # removed by a concurrent delete
            is_dir = stat.S_ISDIR(st.st_mode)
            items.append((kb + b"/" if is_dir else kb, st, is_dir))
        items.sort(key=lambda t: t[0])
        for sort_key, st, is_dir in items:
            if is_dir:
                # Skip a subtree wholly outside the prefix or before start_after.
                if not (sort_key.startswith(prefix) or prefix.startswith(sort_key)):
                    continue
                if sort_key < start_after and not start_after.startswith(sort_key):
                    continue
                yield from self._walk(sort_key[:-1].decode("utf-8", "surrogateescape"), prefix, start_after)
            elif sort_key.startswith(prefix) and sort_key > start_after:
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


_LOCAL_TMP_DIR_BYTES = os.fsencode(LOCAL_TMP_DIR)


def _utf8(s: str) -> bytes:
    """A key's bytes for ordering.  Lone surrogates stand for bytes of a
    file name that are not UTF-8 (os.fsdecode's spelling): they turn back
    into those bytes, so such names sort where their bytes do."""
    return s.encode("utf-8", "surrogateescape")


__all__ = ["LocalDirStore"]
