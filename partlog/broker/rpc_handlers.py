"""The broker RPC's handlers: each decodes its body (the RPC server checked
its schema; what the schema cannot say is checked here and answered
BAD_REQUEST), calls the service that does the work, and encodes the answer.

``list_offsets``, ``delete_records`` and ``offset_for_leader_epoch`` are
answered by a partition's leader (NOT_LEADER_OR_FOLLOWER elsewhere): they
are also what ``on_leaders`` asks this broker when it leads (``as_leader``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from partlog.broker.fetch_service import FetchService
from partlog.broker.leader_commits import LeaderCommits
from partlog.broker.metrics import BrokerMetrics
from partlog.broker.produce_driver import PRODUCE_TIMEOUT_MS_DEFAULT, ProduceDriver
from partlog.broker.producer_id_blocks import ProducerIdBlocks
from partlog.broker.txn_rpc import TxnRpc
from partlog.controller.cluster_meta import MetadataSource
from partlog.kafka.errors import Errors
from partlog.kafka.leader_epochs import end_offset_for_epoch
from partlog.kafka.records import (
    CommitBatchResponse,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    FindBatchRequest,
    IsolationLevel,
    ListOffsetsRequest,
    TopicIdPartition,
    TxnMarkerRequest,
)
from partlog.replication.manager import ReplicaManager
from partlog.rpc.frame import RpcError, RpcErrorCode
from partlog.rpc.methods import PARTITIONS_MAX, PRODUCE_BATCHES_MAX, REFERENCE_CHECKS_MAX, REPLICAS_ASKED_MAX
from partlog.rpc.server import Deferred
from partlog.rpc.wire import (
    Verdict,
    WireError,
    dec_commit,
    dec_commit_transactional_ids,
    dec_keys_referenced,
    dec_partition_items,
    dec_reference_checks,
    dec_tp,
    enc_commit_responses,
    expect_int,
    expect_list,
    expect_str,
)
from partlog.store import MetadataStore, StoreError

log = logging.getLogger(__name__)

# How long a leader waits for the ISR to replicate the markers of one
# write_txn_markers call before answering REQUEST_TIMED_OUT (the
# coordinator retries): well inside the broker RPC's own timeout.
TXN_MARKERS_WAIT_MS = 10_000
# Kafka's fetch.max.wait.ms default for consumers is 500.
FETCH_MAX_WAIT_MS_MAX = 30_000
# A fetch's default total bytes: Kafka's fetch.max.bytes.
FETCH_MAX_BYTES_DEFAULT = 50 * 1024 * 1024

Handler = Callable[[Any], Awaitable[Any]]


class RpcHandlers:
    """``metadata()`` reads the broker's current metadata; ``wake()`` wakes
    long-polling fetches."""

    def __init__(
        self,
        broker_id: int,
        store: MetadataStore,
        replicas: ReplicaManager,
        *,
        produce: ProduceDriver,
        commits: LeaderCommits,
        fetches: FetchService,
        producer_ids: ProducerIdBlocks,
        metrics: BrokerMetrics,
        metadata: Callable[[], MetadataSource],
        wake: Callable[[], None],
    ) -> None:
        self.broker_id = broker_id
        self.store = store
        self.replicas = replicas
        self.produce = produce
        self.commits = commits
        self.fetches = fetches
        self.producer_ids = producer_ids
        self.metrics = metrics
        self._metadata = metadata
        self._wake = wake
        # What on_leaders calls when this broker is the leader asked.
        self.leader_handlers: dict[str, Handler] = {
            "list_offsets": self.list_offsets,
            "delete_records": self.delete_records,
            "offset_for_leader_epoch": self.offset_for_leader_epoch,
            "write_txn_markers": self.write_txn_markers,
        }
        # Called with (tp, producer id, committed, offset) once a marker this
        # broker leads is appended and replicated (the group coordinator's
        # pending transactional offsets wait for it).
        self.marker_listeners: list[Callable[[TopicIdPartition, int, bool, int], None]] = []
        # The transaction coordinator for partlog.client (registered by the Kafka front end).
        self.txn = TxnRpc()

    def table(self) -> dict[str, Handler]:
        """Every method the broker RPC serves, by name."""
        return {
            "produce": self.handle_produce,
            "commit": self.commit,
            "fetch": self.fetch,
            "metadata": self.metadata,
            "list_offsets": self.list_offsets,
            "init_producer_id": self.init_producer_id,
            "replica_fetch": self.replicas.handle_replica_fetch,
            "referenced_files": self.referenced_files,
            "keys_referenced": self.keys_referenced,
            "delete_records": self.delete_records,
            "offset_for_leader_epoch": self.offset_for_leader_epoch,
            "write_txn_markers": self.write_txn_markers,
            "verify_txn": self.verify_txn,
            "add_partitions_to_txn": self.txn.add_partitions_to_txn,
            "end_txn": self.txn.end_txn,
        }

    async def as_leader(self, method: str, body: Any) -> Any:
        """``method`` answered by this broker as the leader (``on_leaders``)."""
        return await self.leader_handlers[method](body)

    async def handle_produce(self, body: Any) -> Any:
        try:
            m = _as_map(body, "produce")
            items = dec_partition_items(
                m, "batches", "produce", (bytes,), "[topic_id, partition, batch bytes]", PRODUCE_BATCHES_MAX
            )
            batches = [(tp, rest[0]) for tp, rest in items]
            timeout = m.get("timeout_ms", PRODUCE_TIMEOUT_MS_DEFAULT)
            if type(timeout) is not int or timeout <= 0:
                raise WireError("produce.timeout_ms: a positive integer")
            acks = m.get("acks", -1)
            if acks not in (0, 1, -1) or type(acks) is not int:
                raise WireError(f"produce.acks: 0, 1 or -1, got {acks!r}")
            tid = m.get("transactional_id")
            if tid is not None:
                expect_str(tid, "produce.transactional_id")
        except WireError as e:
            raise RpcError(RpcErrorCode.BAD_REQUEST, str(e)) from e
        results = await self.produce.produce(batches, acks=acks, timeout_ms=timeout, transactional_id=tid)
        return {
            "results": [
                [int(r.error), r.base_offset, r.log_append_time, r.log_start_offset, r.error_message] for r in results
            ]
        }

    async def commit(self, body: Any) -> Any:
        try:
            key, uploader, size, reqs, acks_all = dec_commit(body)
            txn_ids = dec_commit_transactional_ids(body, len(reqs))
        except WireError as e:
            raise RpcError(RpcErrorCode.BAD_REQUEST, str(e)) from e
        self.metrics.commits_served.inc()
        responses, wait = await self.commits.commit(key, uploader, size, reqs, acks_all, txn_ids)
        if wait is None:
            return enc_commit_responses(responses)
        # Appended in order; the answer waits for replication outside the
        # connection's ordered queue, so later commits are appended meanwhile.
        return Deferred(_encoded(wait))

    async def fetch(self, body: Any) -> Any:
        try:
            m = _as_map(body, "fetch")
            parts = dec_partition_items(
                m, "partitions", "fetch", (int, int), "[topic_id, partition, offset, max_bytes]", PARTITIONS_MAX
            )
            isolation = IsolationLevel(m.get("isolation", 0))
            reqs = [FindBatchRequest(tp, offset, max(1, limit), isolation) for tp, (offset, limit) in parts]
            max_wait = min(int(m.get("max_wait_ms", 0)), FETCH_MAX_WAIT_MS_MAX)
            min_bytes = int(m.get("min_bytes", 1))
            max_bytes = max(1, int(m.get("max_bytes", FETCH_MAX_BYTES_DEFAULT)))
        except (WireError, TypeError, ValueError, OverflowError) as e:  # int(inf) is an OverflowError
            raise RpcError(RpcErrorCode.BAD_REQUEST, str(e)) from e
        return await self.fetches.fetch(reqs, max_wait_ms=max_wait, min_bytes=min_bytes, max_bytes=max_bytes)

    async def metadata(self, body: Any) -> Any:
        az = body.get("az") if isinstance(body, dict) else None
        metadata = self._metadata()
        brokers = [[b.broker_id, b.az, b.host, b.port] for b in metadata.brokers()]
        topics = []
        for t in metadata.topics():
            parts = []
            for p, leader in enumerate(t.leaders):
                # -1: no leader now (the client waits and asks again).
                if leader < 0 or metadata.broker(leader) is None:
                    target = -1
                elif isinstance(az, str):
                    target = metadata.representative(leader, az)
                else:
                    target = leader
                parts.append([p, leader, target])
            topics.append([t.name, t.topic_id.bytes, parts])
        return {"brokers": brokers, "topics": topics}

    async def init_producer_id(self, body: Any) -> Any:
        if isinstance(body, dict) and "transactional_id" in body:
            return await self.txn.init_producer_id(body)
        # Kafka answers InitProducerId with COORDINATOR_NOT_AVAILABLE (retriable)
        # while it cannot get ids.
        pid = await self.producer_ids.init_producer_id()
        if pid is None:
            return {"error": int(Errors.COORDINATOR_NOT_AVAILABLE), "producer_id": -1, "producer_epoch": -1}
        return {"error": 0, "producer_id": pid, "producer_epoch": 0}

    async def referenced_files(self, body: Any) -> Any:
        """walmgr's question: does this replica's log (leader or ISR
        follower), at the leader epoch walmgr knows, still reference these
        objects?  Entries above the HWM and commits not yet durable count
        (``MetadataStore.referenced_files``).  Not a replica of the partition
        at that epoch: NOT_LEADER, and walmgr keeps the file."""
        try:
            checks = dec_reference_checks(body, REFERENCE_CHECKS_MAX, REPLICAS_ASKED_MAX)
        except WireError as e:
            raise RpcError(RpcErrorCode.BAD_REQUEST, str(e)) from e
        # The role is read before the store: a replica at the epoch asked
        # then, and the store's references after, is what the gate needs
        # (a reference cannot appear for an object past the commit deadline).
        roles = [Verdict.NOT_LEADER if self.replicas.replica_epoch(tp) != epoch else None for _, tp, epoch, _ in checks]
        referenced = await asyncio.to_thread(self.store.referenced_files, {c[0] for c in checks})
        # The ISR after the store: a member that joined before this read is
        # seen here; one that joins after has its log start at or past the
        # leader's of that moment (it holds none of the references the
        # leader had dropped).
        verdicts = [
            int(role)
            if role is not None
            else int(Verdict.ISR_CHANGED)
            if not self.replicas.isr_within(tp, asked)
            else int(Verdict.REFERENCED if key in referenced else Verdict.NOT_REFERENCED)
            for (key, tp, _, asked), role in zip(checks, roles, strict=True)
        ]
        return {"verdicts": verdicts}

    async def keys_referenced(self, body: Any) -> Any:
        """walmgr's sweep: which of these objects does any entry of this
        broker's store reference, for any partition, as leader or follower?
        The same read as :meth:`referenced_files` (entries above the HWM and
        commits not yet durable count), asked without the footer's word on
        which partitions to look at."""
        try:
            keys = dec_keys_referenced(body, REFERENCE_CHECKS_MAX)
        except WireError as e:
            raise RpcError(RpcErrorCode.BAD_REQUEST, str(e)) from e
        referenced = await asyncio.to_thread(self.store.referenced_files, set(keys))
        return {"referenced": [i for i, k in enumerate(keys) if k in referenced]}

    # ---------------------------------------------------- answered by leaders

    async def list_offsets(self, body: Any) -> Any:
        try:
            m = _as_map(body, "list_offsets")
            items = dec_partition_items(
                m, "partitions", "list_offsets", (int,), "[topic_id, partition, timestamp]", PARTITIONS_MAX
            )
            isolation = IsolationLevel(m.get("isolation", 0))
            reqs = [ListOffsetsRequest(tp, rest[0], isolation) for tp, rest in items]
        except WireError as e:
            raise RpcError(RpcErrorCode.BAD_REQUEST, str(e)) from e
        led = [i for i, r in enumerate(reqs) if self.replicas.is_leader(r.topic_id_partition)]
        out: list[list[int]] = [[int(Errors.NOT_LEADER_OR_FOLLOWER), -1, -1] for _ in reqs]
        if led:
            answers = await asyncio.to_thread(self.store.list_offsets, [reqs[i] for i in led])
            for i, a in zip(led, answers, strict=True):
                out[i] = [int(a.errors), a.timestamp, a.offset]
        return {"partitions": out}

    async def delete_records(self, body: Any) -> Any:
        """DeleteRecords on the partitions this broker leads (Kafka's leader
        does it; followers learn the log start from replication)."""
        try:
            m = _as_map(body, "delete_records")
            items = dec_partition_items(
                m, "partitions", "delete_records", (int,), "[topic_id, partition, offset]", PARTITIONS_MAX
            )
        except WireError as e:
            raise RpcError(RpcErrorCode.BAD_REQUEST, str(e)) from e
        led = [i for i, (tp, _) in enumerate(items) if self.replicas.is_leader(tp)]
        out: list[list[int]] = [[int(Errors.NOT_LEADER_OR_FOLLOWER), -1] for _ in items]
        if led:
            reqs = [DeleteRecordsRequest(items[i][0], items[i][1][0]) for i in led]
            try:
                answers = await asyncio.to_thread(self.store.delete_records, reqs)
            except StoreError as e:
                log.warning("delete_records failed on broker %d: %s", self.broker_id, e)
                answers = [DeleteRecordsResponse(Errors.KAFKA_STORAGE_ERROR, -1) for _ in reqs]
            for i, a in zip(led, answers, strict=True):
                out[i] = [int(a.errors), a.low_watermark]
            self._wake()
        return {"partitions": out}

    async def offset_for_leader_epoch(self, body: Any) -> Any:
        """Kafka's OffsetForLeaderEpoch, answered by the leader: the end
        offset of the largest epoch <= the one asked, from its epoch cache;
        FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH for a current leader epoch
        older / newer than this leader's."""
        try:
            m = _as_map(body, "offset_for_leader_epoch")
            items = dec_partition_items(
                m, "partitions", "offset_for_leader_epoch", (int, int),
                "[topic_id, partition, current_leader_epoch, leader_epoch]", PARTITIONS_MAX,
            )  # fmt: skip
        except WireError as e:
            raise RpcError(RpcErrorCode.BAD_REQUEST, str(e)) from e
        out: list[list[int]] = []
        for tp, (current, asked) in items:
            epoch = self.replicas.leader_epoch(tp)
            if epoch is None:
                out.append([int(Errors.NOT_LEADER_OR_FOLLOWER), -1, -1])
            elif current >= 0 and current != epoch:
                err = Errors.FENCED_LEADER_EPOCH if current < epoch else Errors.UNKNOWN_LEADER_EPOCH
                out.append([int(err), -1, -1])
            else:
                end = end_offset_for_epoch(self.store.leader_epoch_cache(tp), asked, self.store.log_end_offset(tp))
                out.append([0, end.leader_epoch, end.end_offset])
        return {"partitions": out}

    async def write_txn_markers(self, body: Any) -> Any:
        """Kafka's WriteTxnMarkers on this leader: each COMMIT/ABORT marker
        appended and replicated to the ISR, then the marker listeners told;
        per marker its error (NOT_LEADER_OR_FOLLOWER where this broker does
        not lead: the coordinator looks the leader up again)."""
        try:
            m = _as_map(body, "write_txn_markers")
            items = dec_partition_items(
                m, "partitions", "write_txn_markers", (int, int, int, int),
                "[topic_id, partition, producer_id, producer_epoch, coordinator_epoch, committed]", PARTITIONS_MAX,
            )  # fmt: skip
        except WireError as e:
            raise RpcError(RpcErrorCode.BAD_REQUEST, str(e)) from e
        markers = [TxnMarkerRequest(tp, pid, epoch, coord, bool(c)) for tp, (pid, epoch, coord, c) in items]
        try:
            answers = await self.replicas.write_txn_markers(markers, TXN_MARKERS_WAIT_MS)
        except StoreError as e:
            log.warning("write_txn_markers failed on broker %d: %s", self.broker_id, e)
            self.commits.store_failed()
            return {"partitions": [[int(Errors.KAFKA_STORAGE_ERROR)] for _ in markers]}
        self._wake()
        for mk, a in zip(markers, answers, strict=True):
            self.metrics.txn_markers.labels(a.error.name).inc()
            if a.error == Errors.NONE:
                for fn in self.marker_listeners:
                    try:
                        fn(mk.topic_id_partition, mk.producer_id, mk.committed, a.offset)
                    except Exception:  # a listener's bug must not fail markers already written
                        log.exception("marker listener failed for %s producer %d", mk.topic_id_partition,
                                      mk.producer_id)  # fmt: skip
        return {"partitions": [[int(a.error)] for a in answers]}

    async def verify_txn(self, body: Any) -> Any:
        """KIP-890 part 1: a leader asks this broker's transaction
        coordinator whether the partitions are in the open transaction of
        (producer id, epoch): per partition the coordinator's answer."""
        try:
            m = _as_map(body, "verify_txn")
            tid = expect_str(m.get("transactional_id"), "verify_txn.transactional_id")
            pid = expect_int(m.get("producer_id"), "verify_txn.producer_id")
            epoch = expect_int(m.get("producer_epoch"), "verify_txn.producer_epoch")
            tps = [dec_tp(v, "verify_txn.partitions") for v in expect_list(m.get("partitions"), "verify_txn")]
        except WireError as e:
            raise RpcError(RpcErrorCode.BAD_REQUEST, str(e)) from e
        answers = await self.commits.verification.answer(tid, pid, epoch, tps)
        return {"partitions": [[int(e)] for e in answers]}


async def _encoded(wait: Awaitable[list[CommitBatchResponse]]) -> Any:
    return enc_commit_responses(await wait)


def _as_map(body: Any, what: str) -> dict[str, Any]:
    if type(body) is not dict:
        raise WireError(f"{what}: expected a map, got {type(body).__name__}")
    return body


__all__ = ["FETCH_MAX_BYTES_DEFAULT", "FETCH_MAX_WAIT_MS_MAX", "RpcHandlers"]
