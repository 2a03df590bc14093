"""Consistency checks of the store's durable state are ``verify`` calls, not
``assert``s: they fire under ``python -O`` too, and they fail-stop the store.

The corruption: a WAL object's reference count in the ``files`` database is
set to zero while a log entry still references the object.  DeleteRecords
then releases that entry's reference and would write a count of -1; the
check refuses, raises :class:`StoreInconsistentError` (a
:class:`CorruptEntryError`), and the store refuses every later write until
it is reopened.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import lmdb

from partlog import CreateTopicAndPartitionsRequest, DeleteRecordsRequest, MetadataStore, StoreError, TopicIdPartition
from partlog.store.layout import FILE_RECORD, CorruptEntryError, StoreInconsistentError
from tests.batches import build_batch, request, wal_key
from tests.paths import REPO

NOW = 1_700_000_000_000


def corrupt_then_delete(path: str) -> dict[str, object]:
    """Commit one batch, zero its object's reference count on disk, then
    DeleteRecords the batch; returns what the caller saw."""
    tp = TopicIdPartition(uuid.UUID(int=1), 0)
    key = wal_key(NOW)
    with MetadataStore.open(path, clock=lambda: NOW) as store:
        store.create_topic_and_partitions([CreateTopicAndPartitionsRequest(tp.topic_id, "t", 1)])
        [r] = store.commit_file(key, 1, 10_000, [request(tp, build_batch(2, timestamp_ms=NOW))])
        assert not r.errors, r.errors
    env = lmdb.open(path, max_dbs=16)
    try:
        files = env.open_db(b"files")
        with env.begin(write=True) as txn:
            raw = txn.get(key.encode(), db=files)
            assert raw is not None
            fid, _, _, uploader, size = FILE_RECORD.unpack(raw)
            txn.put(key.encode(), FILE_RECORD.pack(fid, 0, 0, uploader, size), db=files)
    finally:
        env.close()
    out: dict[str, object] = {"asserts_on": __debug__}
    with MetadataStore.open(path, clock=lambda: NOW) as store:
        try:
            store.delete_records([DeleteRecordsRequest(tp, -1)])
        except CorruptEntryError as e:
            out["raised"] = type(e).__name__
            out["message"] = str(e)
        out["failed"] = store.failed is not None
        try:
            store.commit_file(wal_key(NOW), 1, 10_000, [request(tp, build_batch(1, timestamp_ms=NOW))])
        except StoreError as e:
            out["later_write"] = type(e).__name__
        store.reopen()
        out["failed_after_reopen"] = store.failed is not None
        out["lso_after_reopen"] = store.partition_state(tp)["log_start_offset"]
    return out


def _expect(out: dict[str, object]) -> None:
    assert out["raised"] == StoreInconsistentError.__name__
    assert "negative reference count" in str(out["message"])
    assert out["failed"] is True
    assert out["later_write"] == StoreError.__name__
    # Reopened, the store runs again; the refused DeleteRecords changed nothing.
    assert out["failed_after_reopen"] is False
    assert out["lso_after_reopen"] == 0


def test_a_negative_reference_count_fail_stops_the_store(tmp_path: Path) -> None:
    _expect(corrupt_then_delete(str(tmp_path / "s")))


def test_the_check_fires_under_python_O(tmp_path: Path) -> None:
    """``python -O`` strips ``assert``: the same corruption is still caught."""
    code = (
        "import json, sys\n"
        f"sys.path.insert(0, {str(REPO)!r})\n"
        "from tests.unit.test_store_verify import corrupt_then_delete\n"
        "print(json.dumps(corrupt_then_delete(sys.argv[1])))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-O", "-c", code, str(tmp_path / "s")], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["asserts_on"] is False
    _expect(out)
