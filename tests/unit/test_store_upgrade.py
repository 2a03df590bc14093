"""A store last written before transactions (no ``txns`` and ``aborted``
databases): its writer's next open creates them; a read-only open before
that fails with a message that says what to do, not "not a partlog store"."""

from __future__ import annotations

from pathlib import Path

import lmdb
import pytest

from partlog import MetadataStore, StoreError


def _drop_transaction_databases(path: Path) -> None:
    env = lmdb.open(str(path), max_dbs=32, subdir=True)
    try:
        with env.begin(write=True) as txn:
            for name in (b"txns", b"aborted"):
                txn.drop(env.open_db(name, txn=txn), delete=True)
    finally:
        env.close()


def test_an_older_store_opens_read_write_and_then_read_only(tmp_path: Path) -> None:
    path = tmp_path / "s"
    MetadataStore.open(path, sync=False).close()
    _drop_transaction_databases(path)
    with pytest.raises(StoreError, match=r"older partlog.*open it read-write once"):
        MetadataStore.open(path, readonly=True)
    MetadataStore.open(path, sync=False).close()  # the writer creates them
    with MetadataStore.open(path, readonly=True) as ro:
        assert ro.partitions() == []
