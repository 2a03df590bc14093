"""The RPC boundary's store half (issue 13, item 3): the store refuses what it
cannot pack even when an embedder calls it directly, instead of fail-stopping
(the RPC half is in tests/integration/test_rpc_boundary.py)."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from partlog.kafka.errors import Errors
from partlog.kafka.record_batch import build_record_batch
from partlog.kafka.records import (
    CommitBatchRequest,
    CreateTopicAndPartitionsRequest,
    TopicIdPartition,
)
from partlog.store import MetadataStore
from partlog.wal.key import make_wal_key


def now_ms() -> int:
    return int(time.time() * 1000)


def test_the_store_refuses_what_it_cannot_pack(tmp_path: Path) -> None:
    """An embedder calling the store directly cannot fail-stop it either."""
    with MetadataStore.open(tmp_path / "s", sync=False) as store:
        tid = uuid.uuid4()
        store.create_topic_and_partitions([CreateTopicAndPartitionsRequest(tid, "t", 1)])
        tp = TopicIdPartition(tid, 0)
        now = now_ms()  # the key's time: within the commit deadline
        batch = build_record_batch([(None, b"x", now)])
        key = str(make_wal_key("wal", now, 1, "ab"))
        req = CommitBatchRequest.from_header(0, tp, 1, batch[:61])
        for uploader, size in ((1 << 31, 1000), (-1, 1000), (1, 1 << 64), (1, 0)):
            [resp] = store.commit_file(key, uploader, size, [req])
            assert resp.errors == Errors.INVALID_REQUEST, (uploader, size)
        assert store.failed is None
        [ok] = store.commit_file(key, 1, 1000, [req])
        assert ok.errors == Errors.NONE and ok.assigned_base_offset == 0
        store.check()
