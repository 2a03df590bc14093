"""Positive evidence only (issue 13, item 2): walmgr deletes an object only
when the leader of every partition it may hold said "not referenced", and
the set of partitions comes from a footer checked against the object.

An empty footer, a footer that leaves bytes of the batch area to no
partition (so a partition whose leader references the object would never be
asked), and a footer that overlaps itself are INVALID: kept, counted in
``walmgr_invalid``, and shown by ``walmgr inspect``.

Mutation checks (run by hand on a copy of the tree; each makes the named
test fail, which shows the test can fail):

* ``parse_footer``'s tiling check in ``partlog/wal/segment.py`` removed (the
  ``r.byte_offset != end`` test and the final ``end != footer_at`` test):
  ``test_a_footer_that_leaves_out_a_referencing_partition_is_kept`` fails:
  walmgr asks only the named partition's leader, which no longer references
  the object, and deletes it under the other partition's live batch.
* Every footer check that refuses an empty footer removed together: the
  tiling check above, ``parse_footer``'s "names no partitions" and
  ``plan_checks``'s ``not r.partitions`` doubt in ``walmgr/decide.py``:
  ``test_an_empty_footer_is_kept`` fails (nobody is asked, and "nobody said
  referenced" was a deletion).
"""

from __future__ import annotations

import asyncio
import json
import re
import struct
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import msgpack
import pytest
from prometheus_client import generate_latest

from partlog.broker.server import Broker
from partlog.kafka.crc32c import crc32c
from partlog.kafka.errors import Errors
from partlog.kafka.record_batch import build_record_batch
from partlog.kafka.records import DeleteRecordsRequest, TopicIdPartition
from partlog.runtime import SYSTEM_CLOCK, SkewedClock
from partlog.wal.localdir_store import LocalDirStore
from partlog.wal.segment import FORMAT_VERSION, TRAILER_MAGIC, Footer, WalFormatError, parse_footer, read_footer
from tests.cluster_helpers import running_cluster, topic_partitions
from walmgr.config import WalmgrConfig
from walmgr.daemon import Walmgr
from walmgr.model import State

DEADLINE_MS = 800
SKEW_MS = 100
GRACE_MS = 100
GATE_S = (DEADLINE_MS + SKEW_MS + GRACE_MS) / 1000
_TRAILER = struct.Struct(">II4s")


def reforge(data: bytes, parts: list[list[object]], cluster_id: uuid.UUID | None) -> bytes:
    """``data`` (a segment) with its footer replaced by one naming ``parts``
    ([topic_id bytes, partition, byte_offset, size, batch_count] each): what
    a broken or lying writer would upload."""
    footer_len, _, _ = _TRAILER.unpack_from(data, len(data) - _TRAILER.size)
    body = data[: len(data) - _TRAILER.size - footer_len]
    doc: dict[str, object] = {"v": FORMAT_VERSION, "broker": 1, "created_ms": 0, "parts": parts}
    if cluster_id is not None:
        doc["cluster"] = cluster_id.bytes
    raw: bytes = msgpack.packb(doc, use_bin_type=True)
    return body + raw + _TRAILER.pack(len(raw), crc32c(raw), TRAILER_MAGIC)


def test_parse_footer_refuses_footers_that_do_not_account_for_the_object() -> None:
    tid = uuid.uuid4().bytes
    base = b"\x00" + b"b" * 200  # version byte and 200 bytes of "batches"

    def parsed(parts: list[list[object]]) -> Footer | int:
        data = reforge(base + b"f" + _TRAILER.pack(1, 0, TRAILER_MAGIC), parts, uuid.uuid4())
        return parse_footer(data, len(data), key="k")

    ok = parsed([[tid, 0, 1, 100, 1], [tid, 1, 101, 100, 1]])
    assert not isinstance(ok, int) and len(ok.partitions) == 2
    cases = {
        "names no partitions": [],
        "leaves bytes [101, 201)": [[tid, 0, 1, 100, 1]],  # the end of the area to nobody
        "leaves bytes [1, 101)": [[tid, 1, 101, 100, 1]],  # the start
        "overlaps": [[tid, 0, 1, 150, 1], [tid, 1, 101, 100, 1]],
        "names a partition twice": [[tid, 0, 1, 100, 1], [tid, 0, 101, 100, 1]],
        "does not fit": [[tid, 0, 1, 200, 4]],  # 4 batches cannot fit in 200 bytes (61-byte headers)
        "has partition -1": [[tid, -1, 1, 200, 1]],
    }
    for problem, parts in cases.items():
        with pytest.raises(WalFormatError, match=re.escape(problem)):
            parsed(parts)


def _config(tmp_path: Path) -> WalmgrConfig:
    return WalmgrConfig.for_cli(
        "file://" + str(tmp_path / "objects"),
        str(tmp_path / "registry"),
        commit_deadline_ms=DEADLINE_MS,
        max_clock_skew_ms=SKEW_MS,
        grace_ms=GRACE_MS,
        full_scan_interval_ms=1,
    )


async def _two_partition_object(brokers: list[Broker], tps: list[TopicIdPartition]) -> str:
    """One WAL object holding a batch of each of ``tps`` (led by different
    brokers), produced through broker 1; then partition 0's records deleted,
    so only partition 1's leader still references the object."""
    now = int(time.time() * 1000)
    entry = brokers[0]
    results = await entry.produce([(tp, build_record_batch([(None, b"live", now)])) for tp in tps], acks=1)
    assert all(r.error == Errors.NONE for r in results), results
    leaders = {tp: next(b for b in brokers if b.replicas.is_leader(tp)) for tp in tps}
    assert leaders[tps[0]] is not leaders[tps[1]]
    [key] = leaders[tps[1]].store.file_usage()
    await asyncio.to_thread(leaders[tps[0]].store.delete_records, [DeleteRecordsRequest(tps[0], -1)])
    assert key not in leaders[tps[0]].store.referenced_files({key})
    assert key in leaders[tps[1]].store.referenced_files({key})
    return key


@dataclass
class Outcome:
    key: str = ""
    metrics: bytes = b""
    exists: bool = False
    still_referenced: bool = False


def _forge_and_collect(tmp_path: Path, forge: str) -> tuple[str, dict[str, object], bytes, bool]:
    """Run the scenario with the object's footer forged (``forge``: "drop"
    names only partition 0, "empty" names none); return the key, its
    registry record as ``walmgr inspect`` prints it, the metrics text and
    whether the object still exists."""
    objects = LocalDirStore(tmp_path / "objects", fsync=False)
    out = Outcome()

    async def main() -> None:
        clock = SkewedClock(SYSTEM_CLOCK)  # jumps past the age gate (no sleep)
        async with running_cluster(
            tmp_path, objects, brokers_per_az=2, partitions=3, commit_deadline_ms=DEADLINE_MS, clock=clock
        ) as (brokers, meta):
            tps = topic_partitions(meta)
            key = await _two_partition_object(brokers, tps[:2])
            footer, _ = read_footer(objects, key)
            p0, p1 = (next(r for r in footer.partitions if r.topic_id_partition == tp) for tp in tps[:2])
            parts: list[list[object]] = []
            if forge in ("drop", "misname"):
                parts.append([tps[0].topic_id.bytes, 0, p0.byte_offset, p0.size, p0.batch_count])
            if forge == "misname":  # partition 1's bytes said to be partition 2's, whose leader holds nothing
                parts.append([tps[2].topic_id.bytes, 2, p1.byte_offset, p1.size, p1.batch_count])
            objects.put(key, reforge(objects.get(key), parts, meta.cluster_id))
            clock.skew_ms += round((GATE_S + 0.2) * 1000)
            mgr = Walmgr(_config(tmp_path), store=objects, metadata=meta, clock=clock)
            await mgr.start()
            try:
                for _ in range(2):
                    report = await mgr.cycle()
                    assert key not in report.planned
                assert mgr.metrics is not None
                out.metrics = generate_latest(mgr.metrics.prom)
            finally:
                await mgr.stop()
            out.key = key
            out.exists = key in {o.key for o in objects.list_page("wal/").objects}
            # The partition the forged footer left out still has its batch.
            holder = next(b for b in brokers if b.replicas.is_leader(tps[1]))
            out.still_referenced = key in holder.store.referenced_files({key})

    asyncio.run(main())
    key = out.key
    proc = subprocess.run(
        [sys.executable, "-m", "walmgr.cli", "inspect", key, "--store", f"file://{tmp_path / 'objects'}",
         "--registry", str(tmp_path / "registry")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert out.still_referenced
    return key, json.loads(proc.stdout), out.metrics, out.exists


@pytest.mark.timeout(120)
def test_a_footer_that_leaves_out_a_referencing_partition_is_kept(tmp_path: Path) -> None:
    key, shown, metrics, exists = _forge_and_collect(tmp_path, "drop")
    assert exists, f"{key} was deleted while partition 1's leader references it"
    assert shown["status"] == State.INVALID.value and "leaves bytes" in str(shown["note"]), shown
    assert b"walmgr_invalid 1.0" in metrics


@pytest.mark.timeout(120)
def test_a_footer_that_names_the_wrong_partition_is_kept_by_the_sweep(tmp_path: Path) -> None:
    """A valid-looking footer that names partition 2 for partition 1's bytes
    (a writer's bug): the leader check asks partitions 0 and 2, whose
    leaders hold nothing, and clears the object; the sweep asks every
    broker, partition 1's leader says it references the object, and it is
    kept.  Mutation check: ``sweep`` in walmgr/decide.py returning its
    input unchanged makes this test fail (the object is deleted)."""
    key, shown, metrics, exists = _forge_and_collect(tmp_path, "misname")
    assert exists, f"{key} was deleted while partition 1's leader references it"
    assert shown["status"] == State.TRACKED.value, shown
    assert "footer did not name" in str(shown["note"]), shown
    assert b"walmgr_kept_by_sweep_total 2.0" in metrics, metrics


@pytest.mark.timeout(120)
def test_an_empty_footer_is_kept(tmp_path: Path) -> None:
    key, shown, metrics, exists = _forge_and_collect(tmp_path, "empty")
    assert exists, f"{key} was deleted on a footer naming nobody to ask"
    assert shown["status"] == State.INVALID.value and "no partitions" in str(shown["note"]), shown
    assert b"walmgr_invalid 1.0" in metrics
