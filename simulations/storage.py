"""Storage and garbage collection, per design: the dev-list thread's
concerns 1 (files and IOPS from doubling the partitions) and 3 (two
sources of truth: who deletes WAL files, and what finding them costs).

Computed from a run's counts (simulations/metrics.py) and the scenario,
with two measured inputs: the bytes a real ``MetadataStore`` writes per
commit (:func:`measure_store_writes`, in pages) and walmgr's own defaults
(walmgr/config.py).  What each figure means:

* **metadata writes/s and fsyncs/s**: every group commit at a commit target
  is one journal append and one fdatasync (partlog/store/journal.py); every
  follower (coordinator replica) append of fetched entries is one more.
  Classic Kafka appends each produce request and each follower fetch to its
  log and does not fsync (``flush.messages`` unset: it relies on replication).
* **open files per broker**: partlog keeps every partition of a broker in
  one LMDB environment (``data.mdb``, ``lock.mdb``) and one journal segment,
  whatever the partition count; classic Kafka keeps a log, an offset index
  and a time index open per partition replica (the active segment); the
  coordinator design keeps the batch metadata on the coordinator.
* **WAL objects alive**: files written per second times how long a file
  lives: ``retention_s`` (the topic's retention; Kafka's default is 7 days)
  plus walmgr's age gate and one cycle, for both designs.
* **walmgr requests per hour** (partlog): each cycle lists all 256 shards
  (incremental scan), each full scan lists every object (pages of 1,000),
  one footer GET per new object, one DeleteObjects per 250 deletions.  The
  coordinator design knows every file it committed and deletes them when
  their batches are gone: no LIST and no footer read for committed files;
  uploads whose commit failed are left to their broker (best effort) and a
  scan the KIP does not specify, not priced here.
* **walmgr sweep** (partlog, issue 29): before deleting, walmgr asks every
  broker whether its store references the keys about to go
  (``keys_referenced``), one RPC per broker per round of up to 10,000
  deletions, each carrying every key of the round: RPCs per hour and the
  bytes they carry (``SWEEP_KEY_BYTES`` a key, ``SWEEP_RPC_OVERHEAD_BYTES``
  an RPC).  Traffic inside the cluster, not priced.
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
import time
import uuid
from dataclasses import dataclass

from simulations.metrics import DesignResult
from simulations.scenario import Scenario

PAGE_BYTES = 4096
# walmgr's defaults (walmgr/config.py, walmgr/scanner.py).
WALMGR_CYCLE_S = 30.0
WALMGR_FULL_SCAN_S = 3600.0
WALMGR_SHARDS = 256
WALMGR_GATE_S = 10 * 60.0  # commit deadline + skew + grace, rounded up
LIST_PAGE_KEYS = 1000
DELETE_BATCH = 250
# walmgr's sweep (walmgr/decide.py ``sweep``): keys per RPC and round
# (CHECKS_PER_RPC_MAX, CHECK_ROUND_OBJECTS), a key's msgpack bytes
# ("wal/ab/<13-digit ms>-<broker>-<16 hex>.wal", about 44 characters and
# its header) and an RPC's frame, envelope and answer.
SWEEP_ROUND_KEYS = 10_000
SWEEP_KEY_BYTES = 46
SWEEP_RPC_OVERHEAD_BYTES = 64
# Kafka's default retention.ms: 7 days.
RETENTION_S_DEFAULT = 7 * 24 * 3600.0
# Files a partlog broker's store keeps open (data.mdb, lock.mdb, the journal
# segment) and the coordinator's; classic Kafka's per partition replica.
PARTLOG_STORE_FILES = 3
KAFKA_FILES_PER_REPLICA = 3
SECONDS_PER_HOUR = 3600.0
SECONDS_PER_MONTH = 30 * 24 * 3600.0


@dataclass(frozen=True, slots=True)
class StorageFigures:
    design: str
    metadata_writes_per_s: float
    fsyncs_per_s: float
    open_files_per_broker: float
    open_files_coordinator: float
    pages_written_per_s: float
    wal_objects_alive: float
    gc_lists_per_hour: float
    gc_gets_per_hour: float
    gc_deletes_per_hour: float
    gc_usd_per_month: float
    gc_sweep_rpcs_per_hour: float = 0.0
    gc_sweep_bytes_per_hour: float = 0.0


def figures(
    d: DesignResult, s: Scenario, pages_per_commit: float, retention_s: float = RETENTION_S_DEFAULT
) -> StorageFigures:
    brokers = s.cluster.brokers
    files_per_s = len(d.file_commits) / d.simulated_s if d.simulated_s else 0.0
    o = s.object_store
    if d.design == "classic":
        appends = d.produce_requests_per_s + d.replica_fetches_per_s
        replicas_per_broker = s.cluster.partitions * s.cluster.replication_factor / brokers
        return StorageFigures(
            d.design,
            metadata_writes_per_s=appends,
            fsyncs_per_s=0.0,
            open_files_per_broker=KAFKA_FILES_PER_REPLICA * replicas_per_broker,
            open_files_coordinator=0.0,
            pages_written_per_s=0.0,
            wal_objects_alive=0.0,
            gc_lists_per_hour=0.0,
            gc_gets_per_hour=0.0,
            gc_deletes_per_hour=0.0,
            gc_usd_per_month=0.0,
        )
    writes = d.group_commits_per_s + d.replica_fetches_per_s
    alive = files_per_s * (retention_s + WALMGR_GATE_S + WALMGR_CYCLE_S)
    deletes = files_per_s * SECONDS_PER_HOUR
    if d.design == "partlog":
        lists = SECONDS_PER_HOUR / WALMGR_CYCLE_S * WALMGR_SHARDS + SECONDS_PER_HOUR / WALMGR_FULL_SCAN_S * (
            alive / LIST_PAGE_KEYS + WALMGR_SHARDS
        )
        gets = files_per_s * SECONDS_PER_HOUR
        per_broker, coordinator = float(PARTLOG_STORE_FILES), 0.0
    else:
        lists = gets = 0.0
        per_broker, coordinator = 0.0, float(PARTLOG_STORE_FILES)
    sweep_rpcs = sweep_bytes = 0.0
    if d.design == "partlog" and deletes > 0:
        cycles = SECONDS_PER_HOUR / WALMGR_CYCLE_S
        rounds = cycles * math.ceil(deletes / cycles / SWEEP_ROUND_KEYS)
        sweep_rpcs = brokers * rounds
        sweep_bytes = brokers * deletes * SWEEP_KEY_BYTES + sweep_rpcs * SWEEP_RPC_OVERHEAD_BYTES
    # S3 prices a LIST as a PUT (per 1,000) and DELETE not at all.
    usd = (lists * o.put_usd_per_1000 + gets * o.get_usd_per_1000) / 1000 * SECONDS_PER_MONTH / SECONDS_PER_HOUR
    return StorageFigures(
        d.design,
        metadata_writes_per_s=writes,
        fsyncs_per_s=writes,
        open_files_per_broker=per_broker,
        open_files_coordinator=coordinator,
        pages_written_per_s=writes * pages_per_commit,
        wal_objects_alive=alive,
        gc_lists_per_hour=lists,
        gc_gets_per_hour=gets,
        gc_deletes_per_hour=deletes / DELETE_BATCH,
        gc_usd_per_month=usd,
        gc_sweep_rpcs_per_hour=sweep_rpcs,
        gc_sweep_bytes_per_hour=sweep_bytes,
    )


def measure_store_writes(batches_per_commit: int = 5, commits: int = 2000, directory: str | None = None) -> float:
    """Pages (4 KiB) a real, durable ``MetadataStore`` writes per commit of
    ``batches_per_commit`` batches over as many partitions, checkpoints
    included: the journal page each commit's fdatasync writes (one: a
    record is far smaller than a page) plus the bytes the store hands the
    kernel in write calls (``wchar`` in /proc/self/io: journal records and
    LMDB's checkpoint page writes), in pages, over the commits.  (The device
    may write more: ``write_bytes`` on this machine's virtual disk charges
    1 MiB per fdatasync, whatever was written.)"""
    from partlog.kafka.record_batch import build_record_batch
    from partlog.kafka.records import CommitBatchRequest, CreateTopicAndPartitionsRequest, TopicIdPartition
    from partlog.store import MetadataStore
    from partlog.util.proc_stats import io_counter

    top = tempfile.mkdtemp(prefix="partlog-pages-", dir=directory or os.getcwd())
    try:
        now = int(time.time() * 1000)
        store = MetadataStore.open(os.path.join(top, "store"), sync=True, clock=lambda: now, checkpoint_thread=False)
        topic = uuid.uuid4()
        store.create_topic_and_partitions([CreateTopicAndPartitionsRequest(topic, "pages", 100)])
        header = build_record_batch([(None, b"v" * 100, now)])[:61]
        reqs = [
            [
                CommitBatchRequest.from_header(
                    0, TopicIdPartition(topic, (c * batches_per_commit + i) % 100), 1, header
                )
                for i in range(batches_per_commit)
            ]
            for c in range(commits)
        ]
        before = io_counter("wchar")
        for c, r in enumerate(reqs):
            store.commit_file(f"wal/00/{c:013d}-1-{c:016x}.wal", 1, 1 << 20, r)
        store.close()
        written = io_counter("wchar") - before
    finally:
        shutil.rmtree(top, ignore_errors=True)
    return 1.0 + written / PAGE_BYTES / commits
