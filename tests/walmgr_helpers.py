"""Helpers the walmgr tests share: orphan WAL objects and bucket listings."""

from __future__ import annotations

import secrets
import time
import uuid
from collections.abc import Sequence

from partlog.kafka.record_batch import build_record_batch
from partlog.kafka.records import TopicIdPartition
from partlog.wal.key import make_wal_key
from partlog.wal.objectstore import ObjectStore
from partlog.wal.segment import WalSegmentBuilder

# The cluster of the objects these helpers make, unless a test says otherwise.
TEST_CLUSTER_ID = uuid.UUID("0c0ffee0-0000-4000-8000-000000000013")


def segment(
    tps: Sequence[TopicIdPartition], created_ms: int, broker_id: int = 1, cluster_id: uuid.UUID = TEST_CLUSTER_ID
) -> bytes:
    """A valid WAL segment holding one small batch of each of ``tps``."""
    b = WalSegmentBuilder(broker_id, created_ms, cluster_id)
    for tp in tps:
        b.add(tp, build_record_batch([(None, b"orphan", created_ms)]))
    return b.build().data


def orphan(
    objects: ObjectStore,
    tps: Sequence[TopicIdPartition],
    created_ms: int | None = None,
    broker_id: int = 1,
    prefix: str = "wal",
    cluster_id: uuid.UUID = TEST_CLUSTER_ID,
) -> str:
    """A valid WAL segment, uploaded and never committed; its key."""
    created = time.time_ns() // 1_000_000 if created_ms is None else created_ms
    key = str(make_wal_key(prefix, created, broker_id, secrets.token_hex(8)))
    objects.put(key, segment(tps, created, broker_id, cluster_id))
    return key


def listed(objects: ObjectStore, prefix: str = "") -> set[str]:
    """Every key under ``prefix``, page by page."""
    out: set[str] = set()
    start = ""
    while True:
        page = objects.list_page(prefix, start)
        out |= {o.key for o in page.objects}
        if not page.is_truncated or not page.objects:
            return out
        start = page.objects[-1].key
