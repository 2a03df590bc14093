"""The pipeline's timestamps behind the ``file_open`` stage: an Upload says
when its file's first batch came and when it closed, even when it waits
for an upload slot and is given out later."""

from __future__ import annotations

import uuid

from partlog.kafka.records import TopicIdPartition
from partlog.produce.pipeline import ProduceConfig, ProducePipeline, Upload
from tests.batches import build_batch

T0 = 1_700_000_000_000
TP = TopicIdPartition(uuid.UUID(int=7), 0)


def test_an_upload_carries_its_files_open_and_close_times() -> None:
    p = ProducePipeline(
        0,
        ProduceConfig(commit_interval_ms=250, rotation_grace_ms=250, uploads_inflight_max=1),
        leader_of=lambda tp: 0,
        rand_hex=lambda: "ab",
    )
    batch = build_batch(1, value_bytes=10)
    assert p.produce(1, [(TP, batch)], T0) == []
    assert p.produce(2, [(TP, batch)], T0 + 10) == []
    [first] = p.tick(T0 + 250)
    assert isinstance(first, Upload) and (first.opened_ms, first.closed_ms) == (T0, T0 + 250)
    # The next file closes by its interval while the first still uploads:
    # its Upload waits for the slot and keeps its own times.
    p.produce(3, [(TP, batch)], T0 + 260)
    assert p.tick(T0 + 510) == []
    second = next(a for a in p.upload_done(first.segment_id, T0 + 600) if isinstance(a, Upload))
    assert (second.opened_ms, second.closed_ms) == (T0 + 260, T0 + 510)
