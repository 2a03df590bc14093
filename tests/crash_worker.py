"""Commit loop for tests/system/test_crash.py, run as
``python -m tests.crash_worker PATH TOPIC_ID ROUND SEED [SOURCE FOLLOWED_TOPIC_ID]``.

Opens the store with ``sync=True`` and commits from several threads (so calls
share group commits) until it is killed (or, as a safety net, after
``MAX_SECONDS``).  Each thread is one idempotent producer (producer id
``ROUND * 100 + thread``, new every round, so it starts at sequence 0) writing
to several partitions, with a few non-idempotent batches mixed in; thread 0
also deletes records now and then.  One JSON line per event on stdout, each
written whole and flushed under a lock:

* ``{"e": "start", "leo": [...], "lso": [...]}`` once the store is open;
* ``{"e": "begin", "k": key, "b": [[partition, pid, seq, records], ...]}``
  just BEFORE a commit_file call (so the parent knows calls that were in
  flight when it killed us);
* ``{"e": "ack", "k": key, "o": [[partition, base, last], ...], "h": [hex header, ...]}``
  after commit_file RETURNED: this is what was acknowledged;
* ``{"e": "del", "p": partition, "lw": low_watermark}`` after delete_records returned.

With SOURCE (a leader's store, read-only) a follower thread also copies the
FOLLOWED topic's partitions from it, as a broker's fetcher does (one
``append_replicated_fetch`` per round, all partitions), and truncates back
to a random offset when it has copied everything:

* ``{"e": "start", ..., "fleo": [...]}`` its log ends at open;
* ``{"e": "ftrunc", "to": [...]}`` just BEFORE truncating to those offsets;
* ``{"e": "fack", "leo": [...]}`` after an append or truncation RETURNED.
"""

from __future__ import annotations

import json
import random
import sys
import threading
import time
import uuid

from partlog import (
    CreateTopicAndPartitionsRequest,
    DeleteRecordsRequest,
    Errors,
    MetadataStore,
    TopicIdPartition,
)
from partlog.store import ReplicaAppend
from tests.batches import build_batch, request, wal_key

PARTITIONS = 4
THREADS = 4
FOLLOWED = 2  # partitions of the followed topic
MAX_SECONDS = 20.0
_out = threading.Lock()


def emit(event: dict[str, object]) -> None:
    line = json.dumps(event, separators=(",", ":")) + "\n"
    with _out:
        sys.stdout.write(line)
        sys.stdout.flush()


def producer_loop(store: MetadataStore, tid: uuid.UUID, rnd: int, t: int, seed: int, deadline: float) -> None:
    rng = random.Random(seed * 1000 + rnd * 10 + t)
    pid = rnd * 100 + t
    seqs = dict.fromkeys(range(PARTITIONS), 0)
    i = 0
    while time.monotonic() < deadline:
        i += 1
        if t == 0 and i % 32 == 0:
            p = rng.randrange(PARTITIONS)
            tp = TopicIdPartition(tid, p)
            state = store.partition_state(tp)
            target = rng.choice([-1, rng.randint(state["log_start_offset"], state["high_watermark"])])
            [dr] = store.delete_records([DeleteRecordsRequest(tp, target)])
            assert dr.errors == Errors.NONE, dr
            emit({"e": "del", "p": p, "lw": dr.low_watermark})
            continue
        batches: list[tuple[int, int, int, int, bytes]] = []  # partition, pid, seq, records, bytes
        for p in rng.sample(range(PARTITIONS), rng.randint(1, 3)):
            for _ in range(rng.randint(1, 2)):  # at most 2 per (producer, partition) and call
                n = rng.randint(1, 3)
                b = build_batch(
                    n, producer_id=pid, producer_epoch=0, base_sequence=seqs[p], timestamp_ms=int(time.time() * 1000)
                )
                batches.append((p, pid, seqs[p], n, b))
                seqs[p] += n
            if rng.random() < 0.3:
                n = rng.randint(1, 2)
                batches.append((p, -1, -1, n, build_batch(n, timestamp_ms=int(time.time() * 1000))))
        key = wal_key(int(time.time() * 1000), broker_id=t)
        reqs = []
        off = 0
        for p, _, _, _, b in batches:
            reqs.append(request(TopicIdPartition(tid, p), b, byte_offset=off))
            off += len(b)
        emit({"e": "begin", "k": key, "b": [[p, q, s, n] for p, q, s, n, _ in batches]})
        resps = store.commit_file(key, t, off, reqs)
        for r in resps:
            assert r.errors == Errors.NONE and not r.is_duplicate, r
        offsets = [
            [p, r.assigned_base_offset, r.assigned_base_offset + n - 1]
            for (p, _, _, n, _), r in zip(batches, resps, strict=True)
        ]
        emit({"e": "ack", "k": key, "o": offsets, "h": [b[:61].hex() for *_, b in batches]})


def follower_loop(
    store: MetadataStore, source: MetadataStore, fid: uuid.UUID, rng: random.Random, deadline: float
) -> None:
    tps = [TopicIdPartition(fid, p) for p in range(FOLLOWED)]
    while time.monotonic() < deadline:
        leos = [store.log_end_offset(tp) for tp in tps]
        if all(leo == source.log_end_offset(tp) for leo, tp in zip(leos, tps, strict=True)):
            targets = [rng.randint(0, leo) for leo in leos]
            emit({"e": "ftrunc", "to": targets})
            for tp, target in zip(tps, targets, strict=True):
                store.truncate_to(tp, target)
        else:
            appends = []
            for tp, leo in zip(tps, leos, strict=True):
                read = source.read_log(tp, leo, 1 << 40, rng.randint(1, 4))
                appends.append(ReplicaAppend(tp, read.entries, read.high_watermark, read.log_start_offset))
            for outcome in store.append_replicated_fetch(appends):
                assert isinstance(outcome, int), outcome
        emit({"e": "fack", "leo": [store.log_end_offset(tp) for tp in tps]})


def main() -> None:
    path, tid_s, rnd_s, seed_s = sys.argv[1:5]
    source_path, fid_s = sys.argv[5:7] if len(sys.argv) > 5 else (None, None)
    tid, rnd, seed = uuid.UUID(tid_s), int(rnd_s), int(seed_s)
    deadline = time.monotonic() + MAX_SECONDS
    # Checkpoints now every group, now rarely: kills then find the journal
    # empty, short or long, and a checkpoint in flight.
    checkpoint_groups_max = random.Random(seed * 7 + rnd).choice([1, 4, 64, 100_000])
    store = MetadataStore.open(path, sync=True, checkpoint_groups_max=checkpoint_groups_max)
    store.create_topic_and_partitions([CreateTopicAndPartitionsRequest(tid, "crash", PARTITIONS)])
    states = [store.partition_state(TopicIdPartition(tid, p)) for p in range(PARTITIONS)]
    start: dict[str, object] = {
        "e": "start",
        "leo": [s["log_end_offset"] for s in states],
        "lso": [s["log_start_offset"] for s in states],
    }
    source = None
    if source_path is not None and fid_s is not None:
        fid = uuid.UUID(fid_s)
        source = MetadataStore.open(source_path, readonly=True)
        store.create_topic_and_partitions([CreateTopicAndPartitionsRequest(fid, "followed", FOLLOWED)])
        start["fleo"] = [store.log_end_offset(TopicIdPartition(fid, p)) for p in range(FOLLOWED)]
    emit(start)
    failures: list[BaseException] = []

    def run(t: int) -> None:
        try:
            producer_loop(store, tid, rnd, t, seed, deadline)
        except BaseException as e:
            failures.append(e)
            emit({"e": "error", "t": t, "error": repr(e)})

    threads = [threading.Thread(target=run, args=(t,)) for t in range(THREADS)]
    if source is not None:

        def follow(source: MetadataStore = source, fid: uuid.UUID = fid) -> None:
            try:
                follower_loop(store, source, fid, random.Random(seed * 31 + rnd), deadline)
            except BaseException as e:
                failures.append(e)
                emit({"e": "error", "t": "follower", "error": repr(e)})

        threads.append(threading.Thread(target=follow))
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    store.close()
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
