"""``partlog bench commit``: commit_file throughput and latency against LMDB's raw put rate.

Everything is measured in one run on one disk, and reported as ratios to the
raw put ceiling measured first, because the machines are shared and noisy.
Requests are built before the clock starts: the numbers are the store's, not
the request builder's.  Nothing here asserts a timing.
"""

from __future__ import annotations

import gc
import os
import random
import shutil
import statistics
import struct
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass

import lmdb
import psutil

from partlog.kafka.batch_header import BatchHeader, increment_sequence
from partlog.kafka.crc32c import crc32c, crc32c_crcmod
from partlog.kafka.records import CommitBatchRequest, CreateTopicAndPartitionsRequest, TimestampType, TopicIdPartition
from partlog.store import ENTRY_SIZE, MetadataStore
from partlog.util.proc_stats import rss_anon_bytes
from partlog.wal.key import make_wal_key

# The shape the issue asks for: 64 batches over 16 of 1000 partitions per call.
BATCHES_PER_COMMIT = 64
PARTITIONS_PER_COMMIT = 16
PARTITIONS = 1000
RECORDS_PER_BATCH = 10
BATCH_BYTES = 1024


@dataclass(frozen=True, slots=True)
class CaseResult:
    name: str
    sync: bool
    committers: int
    idempotent: bool
    commits: int
    batches: int
    seconds: float
    batches_per_s: float
    commits_per_s: float
    latency_ms_p50: float
    latency_ms_p99: float
    ratio_to_raw: float
    # batches/s against the journal's I/O ceiling at the same group size
    # (sync on; for sync off the ceiling is the same number, as a yardstick)
    ratio_to_journal_ceiling: float
    group_commits: int
    # This process's CPU time (user + system, every thread: committers,
    # checkpoint thread, the kernel's share of pwrite/fdatasync) per batch,
    # and per wall second.  cpu_per_wall near 1.0 with the journal ceiling
    # far above batches/s means one interpreter is the wall, not the disk
    # (docs/design/commit-path.md).
    cpu_us_per_batch: float
    cpu_per_wall: float


def _header(base_offset: int, producer_id: int, epoch: int, seq: int, ts: int) -> bytes:
    return BatchHeader(
        base_offset=base_offset,
        batch_length=BATCH_BYTES - 12,
        partition_leader_epoch=-1,
        magic=2,
        crc=0,
        attributes=0,
        last_offset_delta=RECORDS_PER_BATCH - 1,
        base_timestamp=ts,
        max_timestamp=ts + RECORDS_PER_BATCH - 1,
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=seq,
        record_count=RECORDS_PER_BATCH,
    ).pack()


def measure_raw_puts(directory: str, count: int, partitions: int) -> float:
    """LMDB's ceiling for our access pattern: plain puts of ENTRY_SIZE values
    under (partition, offset) keys, partitions interleaved, large transactions,
    no sync.  Puts per second."""
    path = os.path.join(directory, "raw")
    env = lmdb.open(path, map_size=1 << 34, max_dbs=2, sync=False, metasync=False)
    db = env.open_db(b"log")
    value = b"\x00" * ENTRY_SIZE
    key = struct.Struct(">IQ")
    rng = random.Random(1)
    order = [rng.randrange(partitions) for _ in range(count)]
    next_offset = [0] * partitions
    keys = []
    for p in order:
        keys.append(key.pack(p, next_offset[p]))
        next_offset[p] += RECORDS_PER_BATCH
    per_txn = BATCHES_PER_COMMIT * 16
    start = time.perf_counter()
    for i in range(0, count, per_txn):
        with env.begin(write=True, db=db) as txn:
            for k in keys[i : i + per_txn]:
                txn.put(k, value)
    elapsed = time.perf_counter() - start
    env.close()
    shutil.rmtree(path, ignore_errors=True)
    return count / elapsed


def _build_commits(
    tps: list[TopicIdPartition],
    commits: int,
    committer: int,
    idempotent: bool,
    now_ms: int,
    seed: int,
    seqs: dict[TopicIdPartition, int] | None = None,
) -> list[tuple[str, list[CommitBatchRequest]]]:
    """Commit calls of one committer (one producer id); ``seqs`` carries the
    producer's next sequence per partition across calls."""
    rng = random.Random(seed)
    seqs = {} if seqs is None else seqs
    producer_id = 1000 + committer
    out = []
    per_partition = BATCHES_PER_COMMIT // PARTITIONS_PER_COMMIT
    for _ in range(commits):
        key = str(make_wal_key("bench", now_ms, committer, uuid.uuid4().hex[:16]))
        reqs: list[CommitBatchRequest] = []
        offset = 1
        for tp in rng.sample(tps, PARTITIONS_PER_COMMIT):
            for _ in range(per_partition):
                if idempotent:
                    seq = seqs.get(tp, 0)
                    seqs[tp] = increment_sequence(seq, RECORDS_PER_BATCH)
                    header = _header(0, producer_id, 0, seq, now_ms)
                else:
                    header = _header(0, -1, -1, -1, now_ms)
                last = RECORDS_PER_BATCH - 1
                h = BatchHeader.parse(header)
                reqs.append(
                    CommitBatchRequest(
                        len(reqs),
                        tp,
                        offset,
                        BATCH_BYTES,
                        0,
                        last,
                        h.max_timestamp,
                        TimestampType.CREATE_TIME,
                        h.producer_id,
                        h.producer_epoch,
                        h.base_sequence,
                        h.last_sequence,
                        header,
                    )
                )
                offset += BATCH_BYTES
        out.append((key, reqs))
    return out


def measure_journal_ceiling(directory: str, groups: int, record_bytes: int) -> float:
    """The I/O ceiling of the acknowledgement: one ``pwrite`` of a group's
    journal record plus one ``fdatasync``, in a file preallocated with zeros
    (what partlog.store.journal does), no Python work around it.  Groups per
    second."""
    path = os.path.join(directory, "raw-journal")
    record = os.urandom(record_bytes)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, bytes(groups * record_bytes + 4096))
        os.fsync(fd)
        start = time.perf_counter()
        for i in range(groups):
            os.pwrite(fd, record, i * record_bytes)
            os.fdatasync(fd)
        elapsed = time.perf_counter() - start
    finally:
        os.close(fd)
        os.remove(path)
    return groups / elapsed


def measure_lmdb_layout_ceiling(directory: str, groups: int, partitions: int) -> float:
    """The ceiling of the layout before the journal: each group one durable
    LMDB transaction putting one log key per batch and one partition state
    per partition touched (as MetadataStore did), no Python work beyond
    the puts.  Groups per second."""
    path = os.path.join(directory, "raw-layout")
    env = lmdb.open(path, map_size=1 << 34, max_dbs=4, sync=True, metasync=True)
    try:
        db_log, db_parts = env.open_db(b"log"), env.open_db(b"parts")
        value, state = b"\x00" * ENTRY_SIZE, b"\x00" * 105
        key, part_key = struct.Struct(">IQ"), struct.Struct(">I")
        rng = random.Random(2)
        next_offset = [0] * partitions
        start = time.perf_counter()
        for _ in range(groups):
            with env.begin(write=True) as txn:
                log_cursor = txn.cursor(db=db_log)
                for p in rng.sample(range(partitions), PARTITIONS_PER_COMMIT):
                    for _ in range(BATCHES_PER_COMMIT // PARTITIONS_PER_COMMIT):
                        log_cursor.put(key.pack(p, next_offset[p]), value)
                        next_offset[p] += RECORDS_PER_BATCH
                    txn.put(part_key.pack(p), state, db=db_parts)
        elapsed = time.perf_counter() - start
    finally:
        env.close()
        shutil.rmtree(path, ignore_errors=True)
    return groups / elapsed


def measure_crc(count: int = 200_000) -> dict[str, float]:
    """Microseconds per CRC-32C of one store entry, by each implementation."""
    data = os.urandom(ENTRY_SIZE - 4)
    out = {}
    for name, fn in (("crc32c", crc32c), ("crcmod", crc32c_crcmod)):
        start = time.perf_counter()
        for _ in range(count):
            fn(data)
        out[name] = round((time.perf_counter() - start) / count * 1e6, 3)
    return out


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=1000, method="inclusive")[int(q * 1000) - 1]


def run_case(
    directory: str,
    *,
    sync: bool,
    committers: int,
    idempotent: bool,
    commits: int,
    raw_puts_per_s: float,
    journal_ceiling_batches_per_s: float = 0.0,
    partitions: int = PARTITIONS,
    checkpoint_thread: bool = True,
) -> CaseResult:
    name = f"commit sync={'on' if sync else 'off'} committers={committers} {'idempotent' if idempotent else 'plain'}"
    path = os.path.join(directory, "store")
    shutil.rmtree(path, ignore_errors=True)
    now_ms = time.time_ns() // 1_000_000
    store = MetadataStore.open(path, sync=sync, clock=lambda: now_ms, checkpoint_thread=checkpoint_thread)
    try:
        topic_id = uuid.uuid4()
        store.create_topic_and_partitions([CreateTopicAndPartitionsRequest(topic_id, "bench", partitions)])
        tps = [TopicIdPartition(topic_id, p) for p in range(partitions)]
        per = max(1, commits // committers)
        work = [_build_commits(tps, per, c, idempotent, now_ms, seed=c) for c in range(committers)]
        # The requests are built before the clock starts, so they would sit
        # in the collector's oldest generation and every full collection
        # would scan them: a cost of this harness, not of the store (a
        # broker's requests die once answered).  Freeze them out of its view.
        gc.collect()
        gc.freeze()
        latencies: list[list[float]] = [[] for _ in range(committers)]
        errors: list[BaseException] = []
        barrier = threading.Barrier(committers + 1)

        def committer(i: int) -> None:
            try:
                barrier.wait()
                lat = latencies[i]
                for key, reqs in work[i]:
                    t0 = time.perf_counter()
                    resps = store.commit_file(key, i, 1 << 30, reqs)
                    lat.append(time.perf_counter() - t0)
                    if resps[0].errors:
                        raise RuntimeError(f"bench commit failed: {resps[0].errors.name}")
            except BaseException as e:
                errors.append(e)

        threads = [threading.Thread(target=committer, args=(i,)) for i in range(committers)]
        for t in threads:
            t.start()
        group_before = store.stats["group_commits"]
        barrier.wait()
        start = time.perf_counter()
        cpu_start = time.process_time()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - start
        cpu = time.process_time() - cpu_start
        if errors:
            raise errors[0]
        all_lat = sorted(x * 1000 for lat in latencies for x in lat)
        done = len(all_lat)
        batches = done * BATCHES_PER_COMMIT
        return CaseResult(
            name=name,
            sync=sync,
            committers=committers,
            idempotent=idempotent,
            commits=done,
            batches=batches,
            seconds=round(elapsed, 3),
            batches_per_s=round(batches / elapsed, 1),
            commits_per_s=round(done / elapsed, 1),
            latency_ms_p50=round(_percentile(all_lat, 0.50), 3),
            latency_ms_p99=round(_percentile(all_lat, 0.99), 3),
            ratio_to_raw=round(batches / elapsed / raw_puts_per_s, 3),
            ratio_to_journal_ceiling=round(batches / elapsed / journal_ceiling_batches_per_s, 3)
            if journal_ceiling_batches_per_s
            else 0.0,
            group_commits=store.stats["group_commits"] - group_before,
            cpu_us_per_batch=round(cpu / batches * 1e6, 2) if batches else 0.0,
            cpu_per_wall=round(cpu / elapsed, 3),
        )
    finally:
        store.close()
        gc.unfreeze()
        shutil.rmtree(path, ignore_errors=True)


def run(
    *,
    directory: str | None,
    commits: int,
    raw_puts: int,
    progress: Callable[[str], None] = lambda _: None,
    checkpoint_thread: bool = True,
) -> dict[str, object]:
    """All cases of the benchmark; the dict is what ``--json`` prints."""
    top = tempfile.mkdtemp(prefix="partlog-bench-", dir=directory)
    try:
        progress("raw LMDB puts")
        raw = measure_raw_puts(top, raw_puts, PARTITIONS)
        # The size of one group's journal record at c=1 (64 batches).
        record_bytes = _group_record_bytes(top)
        ceiling_groups = max(200, commits // 2)
        progress("raw ceilings: journal append + fdatasync; the per-batch LMDB layout, synced")
        journal_ceiling = measure_journal_ceiling(top, ceiling_groups, record_bytes) * BATCHES_PER_COMMIT
        layout_ceiling = measure_lmdb_layout_ceiling(top, ceiling_groups, PARTITIONS) * BATCHES_PER_COMMIT
        crc = measure_crc()
        results = []
        for sync in (False, True):
            for idempotent in (False, True):
                for committers in (1, 4):
                    progress(f"sync={sync} idempotent={idempotent} committers={committers}")
                    results.append(
                        run_case(
                            top,
                            sync=sync,
                            committers=committers,
                            idempotent=idempotent,
                            commits=commits,
                            raw_puts_per_s=raw,
                            journal_ceiling_batches_per_s=journal_ceiling,
                            checkpoint_thread=checkpoint_thread,
                        )
                    )
        return {
            "benchmark": "commit",
            "directory": top,
            "batches_per_commit": BATCHES_PER_COMMIT,
            "partitions_per_commit": PARTITIONS_PER_COMMIT,
            "partitions": PARTITIONS,
            "checkpoints": "thread" if checkpoint_thread else "inline",
            "raw_puts_per_s": round(raw, 1),
            "journal_record_bytes": record_bytes,
            "journal_ceiling_batches_per_s": round(journal_ceiling, 1),
            "lmdb_layout_ceiling_batches_per_s": round(layout_ceiling, 1),
            "crc_us_per_entry": crc,
            "results": [asdict(r) for r in results],
        }
    finally:
        shutil.rmtree(top, ignore_errors=True)


def _group_record_bytes(directory: str) -> int:
    """Bytes of the journal record of one 64-batch commit, measured on a
    scratch store (the record is what the acknowledgement writes)."""
    path = os.path.join(directory, "record-size")
    now_ms = time.time_ns() // 1_000_000
    store = MetadataStore.open(path, sync=False, clock=lambda: now_ms, checkpoint_thread=False)
    try:
        topic_id = uuid.uuid4()
        store.create_topic_and_partitions([CreateTopicAndPartitionsRequest(topic_id, "size", PARTITIONS)])
        tps = [TopicIdPartition(topic_id, p) for p in range(PARTITIONS)]
        [(key, reqs)] = _build_commits(tps, 1, 0, True, now_ms, seed=0)
        before = store._journal.stats["bytes"]
        store.commit_file(key, 0, 1 << 30, reqs)
        return int(store._journal.stats["bytes"] - before)
    finally:
        store.close()
        shutil.rmtree(path, ignore_errors=True)


def run_rss(
    *,
    directory: str | None,
    batches: int,
    partitions: int,
    committers: int = 4,
    progress: Callable[[str], None] = lambda _: None,
) -> dict[str, object]:
    """Commit ``batches`` batches over ``partitions`` partitions (sync off,
    idempotent producers) and sample this process's RSS; peak and final MB.

    Requests are generated per commit here, so the timing is end to end."""
    top = tempfile.mkdtemp(prefix="partlog-bench-rss-", dir=directory)
    proc = psutil.Process()
    rss_start = proc.memory_info().rss
    peak = [rss_start, rss_anon_bytes()]
    stop = threading.Event()

    def sampler() -> None:
        while not stop.wait(0.2):
            peak[0] = max(peak[0], proc.memory_info().rss)
            peak[1] = max(peak[1], rss_anon_bytes())

    now_ms = time.time_ns() // 1_000_000
    store = MetadataStore.open(os.path.join(top, "store"), sync=False, clock=lambda: now_ms)
    sampler_thread = threading.Thread(target=sampler, daemon=True)
    sampler_thread.start()
    try:
        topic_id = uuid.uuid4()
        store.create_topic_and_partitions([CreateTopicAndPartitionsRequest(topic_id, "rss", partitions)])
        tps = [TopicIdPartition(topic_id, p) for p in range(partitions)]
        commits_total = batches // BATCHES_PER_COMMIT
        per = commits_total // committers
        done = [0]
        lock = threading.Lock()
        start = time.perf_counter()

        def committer(i: int) -> None:
            chunk = 50
            seqs: dict[TopicIdPartition, int] = {}
            for n in range(0, per, chunk):
                calls = _build_commits(tps, min(chunk, per - n), i, True, now_ms, seed=i * 1_000_003 + n, seqs=seqs)
                for key, reqs in calls:
                    resps = store.commit_file(key, i, 1 << 30, reqs)
                    bad = [r.errors.name for r in resps if r.errors]
                    if bad:
                        raise RuntimeError(f"rss bench commit failed: {bad[:3]}")
                with lock:
                    done[0] += min(chunk, per - n)
                    if done[0] % 5000 < chunk:
                        progress(
                            f"{done[0] * BATCHES_PER_COMMIT:,} batches, rss {proc.memory_info().rss / 2**20:.0f} MB"
                        )

        # Each committer owns its sequence state, so a partition sees sequences
        # from several producers: one per committer, as real producers would.
        threads = [threading.Thread(target=committer, args=(i,)) for i in range(committers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - start
        committed = done[0] * BATCHES_PER_COMMIT
        return {
            "benchmark": "commit-rss",
            "batches": committed,
            "partitions": partitions,
            "seconds": round(elapsed, 1),
            "batches_per_s": round(committed / elapsed, 1),
            "rss_mb_start": round(rss_start / 2**20, 1),
            "rss_mb_peak": round(peak[0] / 2**20, 1),
            # RSS = private memory (anon) + pages of the LMDB map this process
            # touched (file-backed, shared, reclaimable page cache).
            "rss_anon_mb_peak": round(peak[1] / 2**20, 1),
            "rss_mb_end": round(proc.memory_info().rss / 2**20, 1),
            "store_bytes": sum(
                os.path.getsize(os.path.join(top, "store", f)) for f in os.listdir(os.path.join(top, "store"))
            ),
        }
    finally:
        stop.set()
        store.close()
        shutil.rmtree(top, ignore_errors=True)
