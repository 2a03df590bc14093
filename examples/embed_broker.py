"""Embed partlog's pieces in a broker of your own, without partlog's Broker class.

One process plays a single-broker cluster: a MetadataStore (the leader's
metadata log) and a LocalDirStore (the object store) in a temp dir, and the
sans-IO ProducePipeline driven by a tiny loop of our own.  It produces real
Kafka v2 batches, commits them, fetches them back through the fetch path and
checks that every value came back, in order, at the offsets the replies gave.

Run: python examples/embed_broker.py   (exit 0: all records verified)
See docs/embedding.md for what each call means.
"""

from __future__ import annotations

import os
import secrets
import sys
import tempfile
import time
import uuid
from collections import deque

from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from partlog import CreateTopicAndPartitionsRequest, Errors, FindBatchRequest, MetadataStore, TopicIdPartition
from partlog.fetch.reads import assemble, plan_reads
from partlog.kafka.batch_header import LOG_OVERHEAD
from partlog.kafka.records import BatchInfo
from partlog.produce.pipeline import Action, ProduceConfig, ProducePipeline, Reply, SendCommit, Upload
from partlog.wal.localdir_store import LocalDirStore
from partlog.wal.objectstore import ObjectStore

BROKER_ID = 1
TOPIC = "demo"


def now_ms() -> int:
    # The pipeline and the store take wall-clock milliseconds: the WAL key's
    # created_ms comes from the pipeline, the commit deadline check from the store.
    return time.time_ns() // 1_000_000


def build_batch(values: list[bytes]) -> bytes:
    """A Kafka v2 batch as a producer sends it (non-idempotent: producer id -1)."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 30,
    )
    ts = now_ms()  # CreateTime must be within message.timestamp.after/before.max.ms of the leader's clock
    for i, value in enumerate(values):
        builder.append(i, timestamp=ts, key=None, value=value, headers=[])
    return bytes(builder.build())


def parse_batches(records: bytes) -> list[tuple[int, bytes]]:
    """(offset, value) of every record in a fetch answer (whole v2 batches)."""
    out: list[tuple[int, bytes]] = []
    pos = 0
    while pos < len(records):
        end = pos + int.from_bytes(records[pos + 8 : pos + 12], "big") + LOG_OVERHEAD
        batch = DefaultRecordBatch(records[pos:end])
        # The leader stamped offsets into the stored header; the CRC must still hold.
        if not batch.validate_crc():
            raise ValueError(f"batch at byte {pos} fails its CRC")
        out += [(int(r.offset), bytes(r.value)) for r in batch]
        pos = end
    return out


class EmbeddingShell:
    """The IO half a foreign broker supplies: it performs the pipeline's actions."""

    def __init__(self, store: MetadataStore, objects: ObjectStore) -> None:
        self.store = store
        self.objects = objects
        # Single broker: it leads every partition.  A real broker answers from
        # its own cluster metadata (None while a leader is unknown).
        self.pipeline = ProducePipeline(
            BROKER_ID,
            ProduceConfig(),  # commit_interval_ms=250, buffer_bytes_max=4 MiB, ...
            leader_of=lambda tp: BROKER_ID,
            rand_hex=lambda: secrets.token_hex(8),
        )
        self.replies: dict[int, Reply] = {}

    def perform(self, actions: list[Action]) -> None:
        # A FIFO queue, not recursion: actions are performed in the order the
        # pipeline gives them.  It decides that order (WAL-file order, and at
        # most commits_in_flight_max commits out to one leader); a shell only
        # keeps it.
        todo = deque(actions)
        while todo:
            action = todo.popleft()
            if isinstance(action, Upload):
                error = None
                try:
                    self.objects.put(action.key, action.data)
                except Exception as e:  # any failure: the pipeline answers KAFKA_STORAGE_ERROR (retriable)
                    error = f"{type(e).__name__}: {e}"
                print(f"upload {action.key} ({len(action.data)} bytes): {error or 'ok'}")
                todo.extend(self.pipeline.upload_done(action.segment_id, now_ms(), error))
            elif isinstance(action, SendCommit):
                # The leader is this broker, so the "commit RPC" is a direct call;
                # to another leader it would go over your own RPC, one connection
                # per leader, processed in arrival order.  With sync=True it
                # returns once the commit is fsynced: acknowledged means durable.
                # (The store does not know who leads what: a broker that may have
                # lost leadership answers NOT_LEADER_OR_FOLLOWER before this call.)
                responses = self.store.commit_file(action.key, BROKER_ID, action.file_size, action.requests)
                print(f"commit {len(action.requests)} batch(es) to broker {action.leader_broker_id}")
                todo.extend(self.pipeline.commit_done(action.segment_id, action.leader_broker_id, responses, now_ms()))
            else:
                self.replies[action.produce_id] = action
                for r in action.results:
                    print(
                        f"reply {action.produce_id}: {TOPIC}-{r.topic_id_partition.partition} {r.error.name} "
                        f"base_offset={r.base_offset}"
                    )

    def produce(self, produce_id: int, batches: list[tuple[TopicIdPartition, bytes]]) -> None:
        # Admission is the pipeline's decision (arrival order, back-pressure):
        # a real shell waits, reading no more produce requests, until a reply
        # makes the ticket admissible; this loop answers each request before
        # the next, so it is admitted at once.
        ticket = self.pipeline.arrive(sum(len(b) for _, b in batches))
        admitted = self.pipeline.admissible(ticket)
        self.pipeline.leave(ticket)
        if not admitted:
            raise RuntimeError("not admitted: wait for replies before producing more")
        self.perform(self.pipeline.produce(produce_id, batches, now_ms()))
        print(f"produce {produce_id}: {len(batches)} batch(es) buffered, room_bytes={self.pipeline.room_bytes()}")

    def run_timer_until_rotated(self) -> None:
        # The event loop's timer: sleep until the open segment is due, then tick.
        deadline = self.pipeline.next_deadline_ms()
        while deadline is not None:
            time.sleep(max(0, deadline - now_ms()) / 1000)
            self.perform(self.pipeline.tick(now_ms()))
            deadline = self.pipeline.next_deadline_ms()


def fetch_all(
    store: MetadataStore, objects: ObjectStore, tps: list[TopicIdPartition]
) -> dict[TopicIdPartition, list[tuple[int, bytes]]]:
    """Fetch every partition from offset 0, as a fetch handler would."""
    found = store.find_batches([FindBatchRequest(tp, 0, 1 << 20) for tp in tps], fetch_max_bytes=50 << 20)
    by_tp: dict[TopicIdPartition, list[BatchInfo]] = {}
    for tp, resp in zip(tps, found, strict=True):  # answers come in request order
        if resp.errors != Errors.NONE:
            raise RuntimeError(f"find_batches {tp}: {resp.errors.name} {resp.error_message}")
        by_tp[tp] = list(resp.batches)
    # One ranged GET per WAL object, whatever the number of partitions in it.
    reads = plan_reads([b for infos in by_tp.values() for b in infos])
    print(f"fetch: {sum(len(v) for v in by_tp.values())} batches from {len(reads)} objects, {len(reads)} GETs")
    got = {r.key: (r.offset, objects.get_range(r.key, r.offset, r.length)) for r in reads}
    out: dict[TopicIdPartition, list[tuple[int, bytes]]] = {}
    for data in assemble(by_tp, got):  # CRC check + splice of the leader's header
        if data.error != Errors.NONE:
            raise RuntimeError(f"assemble {data.topic_id_partition}: {data.error.name} {data.error_message}")
        out[data.topic_id_partition] = parse_batches(data.records)
    return out


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="partlog-embed-") as tmp:
        store = MetadataStore.open(os.path.join(tmp, "meta"), sync=True)
        objects = LocalDirStore(os.path.join(tmp, "objects"))
        try:
            topic_id = uuid.uuid4()
            # The leader must know a partition before it accepts commits for it.
            store.create_topic_and_partitions([CreateTopicAndPartitionsRequest(topic_id, TOPIC, 2)])
            tps = [TopicIdPartition(topic_id, p) for p in range(2)]
            print(f"store {store.path}, objects {objects.describe()}, topic {TOPIC} with {len(tps)} partitions")

            shell = EmbeddingShell(store, objects)
            sent: dict[TopicIdPartition, list[bytes]] = {tp: [] for tp in tps}
            requests = [
                [(tps[0], [b"a0", b"a1", b"a2"]), (tps[1], [b"b0", b"b1"])],
                [(tps[0], [b"a3", b"a4"])],
                [(tps[1], [b"b2"])],
            ]
            # Requests 0 and 1 share one WAL segment, rotated by the 250 ms timer;
            # request 2 goes into a second segment, rotated by flush() (shutdown).
            for produce_id, request in enumerate(requests):
                for tp, values in request:
                    sent[tp] += values
                shell.produce(produce_id, [(tp, build_batch(values)) for tp, values in request])
                if produce_id == 1:
                    shell.run_timer_until_rotated()
            shell.perform(shell.pipeline.flush(now_ms()))
            if len(shell.replies) != len(requests) or shell.pipeline.inflight_bytes != 0:
                print("FAILED: not every produce request was answered")
                return 1

            fetched = fetch_all(store, objects, tps)
            ok = True
            for tp in tps:
                for offset, value in fetched[tp]:
                    print(f"record {TOPIC}-{tp.partition}@{offset}: {value.decode()}")
                # Offsets from 0 without gaps, values in the order produced.
                if fetched[tp] != list(enumerate(sent[tp])):
                    print(f"MISMATCH {TOPIC}-{tp.partition}: sent {sent[tp]}, fetched {fetched[tp]}")
                    ok = False
            # Each reply's base offset must be where the fetch found that batch's values.
            for produce_id, reply in sorted(shell.replies.items()):
                for r, (tp, values) in zip(reply.results, requests[produce_id], strict=True):
                    at = [v for offset, v in fetched[tp] if r.base_offset <= offset < r.base_offset + len(values)]
                    if r.error != Errors.NONE or at != values:
                        print(f"MISMATCH reply {produce_id}: {r}")
                        ok = False
            usage = store.file_usage()  # what walmgr will ask about: live batches per WAL object
            print(f"file_usage: {len(usage)} WAL objects, {sum(u.live_batches for u in usage.values())} live batches")
            total = sum(len(v) for v in sent.values())
            print(f"verified {total} records" if ok else "FAILED")
            return 0 if ok else 1
        finally:
            store.close()


if __name__ == "__main__":
    sys.exit(main())
