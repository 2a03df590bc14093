"""An in-memory :class:`partlog.kafka_front.port.BrokerPort` for the front
end's coordinators: topics made on demand, each partition a list of batches
led by this broker at a leader epoch the test sets, produce and fetch on
those lists, and markers recorded (and handed to the marker listeners) or
failed as the test says; transactional batches verified with the front
end's coordinator (KIP-890) as a leader does.  It is the broker of one node; two coordinators on
one ``FakeBroker`` model a leadership change (bump ``epochs``)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, cast

from partlog.broker.txn_verification import produce_error
from partlog.controller.cluster_meta import BrokerInfo, PartitionInfo, TopicInfo
from partlog.controller.dynamic_configs import LocalConfigs
from partlog.kafka.batch_header import ATTR_CONTROL, ATTR_TRANSACTIONAL, CRC_START, HEADER_SIZE
from partlog.kafka.crc32c import crc32c_update
from partlog.kafka.errors import Errors
from partlog.kafka.record_batch import build_record_batch
from partlog.kafka.records import FindBatchRequest, TopicIdPartition, TxnMarkerRequest
from partlog.kafka_front.port import BrokerPort
from partlog.produce.pipeline import BatchResult
from partlog.runtime import ManualClock, SeededEntropy


def control_batch(producer_id: int, producer_epoch: int, committed: bool, coordinator_epoch: int) -> bytes:
    """A COMMIT or ABORT marker as Kafka writes it (one control record:
    key version 0 + type, value version 0 + coordinator epoch)."""
    key = (0).to_bytes(2, "big") + (1 if committed else 0).to_bytes(2, "big")
    value = (0).to_bytes(2, "big") + coordinator_epoch.to_bytes(4, "big")
    batch = bytearray(build_record_batch([(key, value, 0)], producer_id=producer_id, producer_epoch=producer_epoch,
                                         transactional=True))  # fmt: skip
    old = bytes(batch[CRC_START:HEADER_SIZE])
    batch[21:23] = (int.from_bytes(batch[21:23], "big") | ATTR_CONTROL).to_bytes(2, "big")
    crc = crc32c_update(int.from_bytes(batch[17:21], "big"), old, bytes(batch[CRC_START:HEADER_SIZE]),
                        len(batch) - CRC_START)  # fmt: skip
    batch[17:21] = crc.to_bytes(4, "big")
    return bytes(batch)


class FakeMetadata:
    def __init__(self, broker_id: int) -> None:
        self.topics_by_name: dict[str, TopicInfo] = {}
        self._broker = BrokerInfo(broker_id, "az1", kafka_port=9092)
        self.cluster_id = None

    def topics(self) -> list[TopicInfo]:
        return list(self.topics_by_name.values())

    def brokers(self) -> list[BrokerInfo]:
        return [self._broker]

    def broker(self, broker_id: int) -> BrokerInfo | None:
        return self._broker if broker_id == self._broker.broker_id else None

    def partition(self, tp: TopicIdPartition) -> PartitionInfo | None:
        for t in self.topics_by_name.values():
            if t.topic_id == tp.topic_id and tp.partition < t.num_partitions:
                return t.partitions[tp.partition]
        return None

    def add(self, name: str, partitions: int) -> TopicInfo:
        parts = tuple(PartitionInfo(self._broker.broker_id, 0, (self._broker.broker_id,), (self._broker.broker_id,))
                      for _ in range(partitions))  # fmt: skip
        t = TopicInfo(uuid.UUID(int=len(self.topics_by_name) + 1), name, parts)
        self.topics_by_name[name] = t
        return t

    async def create_topics(self, topics: Mapping[str, tuple[int, int]]) -> dict[str, TopicInfo | Errors]:
        return {name: self.add(name, n) for name, (n, _rf) in topics.items()}

    async def delete_topics(self, names: list[str]) -> dict[str, uuid.UUID | Errors]:
        return {n: self.topics_by_name.pop(n).topic_id for n in names}


class FakeBroker:
    def __init__(self, broker_id: int = 1) -> None:
        self.broker_id = broker_id
        self.clock = ManualClock()
        self.entropy = SeededEntropy(1)
        self.az = "az1"
        self.min_insync_replicas = 1
        self.metadata = FakeMetadata(broker_id)
        self.dynamic_configs = LocalConfigs()
        self.logs: dict[TopicIdPartition, list[tuple[int, bytes]]] = {}
        # Partitions this broker leads, at which epoch (absent: all at 0).
        self.epochs: dict[TopicIdPartition, int | None] = {}
        self.produce_error: Errors = Errors.NONE
        self.marker_errors: list[Errors] = []  # popped per marker; empty: NONE
        self.markers: list[TxnMarkerRequest] = []
        self.listeners: list[Callable[[TopicIdPartition, int, bool, int], None]] = []
        self._next_pid = 1000
        # KIP-890: (partition, producer) with a transaction open, and the
        # front end's verifier (the coordinator answers; one broker here).
        self.open_txns: set[tuple[TopicIdPartition, int]] = set()
        self.verifier: (
            tuple[
                Callable[[str, int, int, Sequence[TopicIdPartition]], Awaitable[list[Errors]]],
                Callable[[str], int | None],
            ]
            | None
        ) = None
        self._event = asyncio.Event()

    def port(self) -> BrokerPort:
        """This fake as the port (it has the members the coordinators use)."""
        return cast(BrokerPort, self)

    @property
    def topic_index(self) -> dict[str, tuple[uuid.UUID, int]]:
        return {t.name: (t.topic_id, t.num_partitions) for t in self.metadata.topics()}

    def _end(self, tp: TopicIdPartition) -> int:
        log = self.logs.get(tp, [])
        if not log:
            return 0
        base, batch = log[-1]
        return base + int.from_bytes(batch[23:27], "big") + 1

    async def produce(
        self,
        batches: Sequence[tuple[TopicIdPartition, bytes]],
        *,
        acks: int,
        timeout_ms: int,
        urgent: bool = False,
        transactional_id: str | None = None,
    ) -> list[BatchResult]:
        out = []
        for tp, batch in batches:
            if self.produce_error != Errors.NONE:
                out.append(BatchResult(tp, self.produce_error))
                continue
            pid = int.from_bytes(batch[43:51], "big", signed=True)
            if int.from_bytes(batch[21:23], "big") & ATTR_TRANSACTIONAL:
                # KIP-890 part 1, as the broker's leader: the first batch of a
                # transaction here is verified with the coordinator.
                if transactional_id is not None and (tp, pid) not in self.open_txns and self.verifier is not None:
                    epoch = int.from_bytes(batch[51:53], "big", signed=True)
                    [e] = await self.verifier[0](transactional_id, pid, epoch, [tp])
                    if e != Errors.NONE:
                        out.append(BatchResult(tp, produce_error(e)))
                        continue
                self.open_txns.add((tp, pid))
            base = self._end(tp)
            self.logs.setdefault(tp, []).append((base, base.to_bytes(8, "big") + batch[8:]))
            out.append(BatchResult(tp, Errors.NONE, base))
        await asyncio.sleep(0)
        return out

    async def fetch(
        self, reqs: list[FindBatchRequest], *, max_wait_ms: int, min_bytes: int, max_bytes: int
    ) -> dict[str, Any]:
        rows = []
        for r in reqs:
            data = b"".join(b for base, b in self.logs.get(r.topic_id_partition, []) if base >= r.offset)
            end = self._end(r.topic_id_partition)
            rows.append([0, end, 0, data, None, end, []])
        return {"partitions": rows}

    async def init_producer_id(self) -> int | None:
        self._next_pid += 1
        return self._next_pid

    async def write_txn_markers(self, markers: Sequence[TxnMarkerRequest], *, timeout_ms: int) -> list[Errors]:
        out = []
        for m in markers:
            e = self.marker_errors.pop(0) if self.marker_errors else Errors.NONE
            if e == Errors.NONE:
                self.markers.append(m)
                self.open_txns.discard((m.topic_id_partition, m.producer_id))
                tp = m.topic_id_partition
                batch = control_batch(m.producer_id, m.producer_epoch, m.committed, m.coordinator_epoch)
                base = self._end(tp)
                self.logs.setdefault(tp, []).append((base, base.to_bytes(8, "big") + batch[8:]))
                for fn in self.listeners:
                    fn(m.topic_id_partition, m.producer_id, m.committed, base)
            out.append(e)
        await asyncio.sleep(0)
        return out

    def set_txn_verifier(
        self,
        verify: Callable[[str, int, int, Sequence[TopicIdPartition]], Awaitable[list[Errors]]],
        locate: Callable[[str], int | None],
    ) -> None:
        self.verifier = (verify, locate)

    def set_txn_coordinator(self, init_producer_id: Any, add_partitions: Any, end_txn: Any) -> None:
        self.txn_coordinator = (init_producer_id, add_partitions, end_txn)

    def add_marker_listener(self, fn: Callable[[TopicIdPartition, int, bool, int], None]) -> None:
        self.listeners.append(fn)

    def leader_epoch(self, tp: TopicIdPartition) -> int | None:
        return self.epochs.get(tp, 0)

    def serves(self, tp: TopicIdPartition) -> bool:
        return True

    def log_start_offset(self, tp: TopicIdPartition) -> int:
        return 0

    def log_end_offset(self, tp: TopicIdPartition) -> int:
        return self._end(tp)

    def high_watermark(self, tp: TopicIdPartition) -> int:
        return self._end(tp)

    def new_data(self) -> asyncio.Event:
        return self._event
